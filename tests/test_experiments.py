"""Every experiment runs end to end at the smoke preset and writes what `reproduce` promises."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from absorbjax import cli, reproduce

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

EXPECTED = {"absorber", "cor11", "depth", "lemma4", "prop5", "prop6", "real_weights", "soundness", "thm8_10", "training", "width"}


def test_every_result_has_an_experiment():
    assert EXPECTED <= set(reproduce.discover())


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    assert cli.main(["reproduce", "--preset", "smoke", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_smoke_run_writes_figure_and_record(smoke, name):
    record = json.loads((smoke / f"{name}.json").read_text())
    assert record["seed"] == 0 and record["config"]["preset"] == "smoke"
    assert record["environment"]["jax"] and record["environment"]["absorbjax"]
    claims = record["results"]["claims"]
    assert claims and all(c["measured"] and c["criterion"] for c in claims)
    # Every claim is judged from its measurement; a smoke size too small to judge says so.
    for c in claims:
        assert c["holds"] is True or (c["holds"] is None and c["criterion"].startswith("not judged")), c
    figures = {c["figure"] for c in claims if c.get("figure")}
    assert figures
    for fig in figures:
        assert (smoke / f"{fig}.png").stat().st_size > 1000
        assert (smoke / f"{fig}.pdf").stat().st_size > 1000


def test_summary_lists_every_claim(smoke):
    summary = (smoke / "README.md").read_text()
    for name in EXPECTED:
        record = json.loads((smoke / f"{name}.json").read_text())
        for claim in record["results"]["claims"]:
            assert claim["claim"].replace("|", "\\|") in summary


def test_rerun_skips_finished_experiments(smoke, capsys):
    before = (smoke / "lemma4.json").read_text()
    assert cli.main(["reproduce", "--preset", "smoke", "--out", str(smoke), "--only", "lemma4"]) == 0
    assert "up to date, skipped" in capsys.readouterr().out
    assert (smoke / "lemma4.json").read_text() == before


def test_unknown_experiment_is_an_error(capsys):
    assert cli.main(["reproduce", "--only", "nope"]) == 2
    assert "unknown experiment" in capsys.readouterr().err


BENCHMARKS = Path(__file__).resolve().parents[1] / "experiments"


@pytest.mark.slow
@pytest.mark.parametrize("script", ["bench_fit.py", "bench_condition.py"])
def test_benchmark_quick_run_writes_its_record(tmp_path, script):
    """The benchmarks run end to end at their --quick sizes (their numbers are not judged here:
    timings belong to the benchmark's own side-by-side ratios, not to a unit test)."""
    out = tmp_path / "bench.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, str(BENCHMARKS / script), "--quick", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("device: ")
    record = json.loads(out.read_text())
    assert record["environment"]["jax"] and record["config"]["quick"] is True
    numbers = [v for v in jax.tree.leaves(record["results"]) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    assert numbers and all(math.isfinite(v) for v in numbers)

