"""Every experiment runs end to end at the smoke preset and writes what `reproduce` promises;
the package and the runner leave the process's global state alone.

No test here enables float64: the runner does, for each experiment's run only.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from absorbjax import cli
from absorbjax.lab import figstyle, reproduce

pytestmark = pytest.mark.integration  # smoke runs of the experiments

ROOT = Path(__file__).resolve().parents[1]

EXPECTED = {
    "absorber",
    "cor11",
    "depth",
    "lemma4",
    "prop5",
    "prop6",
    "real_weights",
    "soundness",
    "thm8_10",
    "training",
    "width",
}


def test_every_result_has_an_experiment():
    assert EXPECTED <= set(reproduce.discover())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_smoke_run_writes_figure_record_and_summary(tmp_path, capsys, name):
    """One experiment at the smoke preset (each its own test, so that workers share them out):
    a record with seed, versions and judged claims, its figures, a summary row per claim; a
    rerun skips it and leaves the record as it was."""
    argv = ["reproduce", "--preset", "smoke", "--out", str(tmp_path), "--only", name]
    assert cli.main(argv) == 0
    record = json.loads((tmp_path / f"{name}.json").read_text())
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
        assert (tmp_path / f"{fig}.png").stat().st_size > 1000
        assert (tmp_path / f"{fig}.pdf").stat().st_size > 1000
    summary = (tmp_path / "README.md").read_text()
    for claim in claims:
        assert claim["claim"].replace("|", "\\|") in summary
    # when and how long it ran is kept apart from the record, which a rerun elsewhere leaves alone
    assert "seconds" not in record["results"] and "time" not in record["environment"]
    timing = json.loads((tmp_path / reproduce.TIMINGS).read_text())[name]
    assert timing["seconds"] >= 0 and timing["time"] and timing["preset"] == "smoke"
    before = (tmp_path / f"{name}.json").read_text()
    capsys.readouterr()
    assert cli.main(argv) == 0
    assert "up to date, skipped" in capsys.readouterr().out
    assert (tmp_path / f"{name}.json").read_text() == before
    # one figure path: --replot redraws from the record exactly the files the run saved
    saved = {p.name: p.read_bytes() for p in sorted(tmp_path.glob("*.p[dn][gf]"))}
    assert cli.main(["reproduce", "--replot", "--out", str(tmp_path), "--only", name]) == 0
    assert {p.name: p.read_bytes() for p in sorted(tmp_path.glob("*.p[dn][gf]"))} == saved


def _tiny_experiment(drawn=None):
    """A one-claim experiment (a module object stands in for a script); with ``drawn`` a list, it
    defines ``figure(results)``, which appends the ``results`` it is given to ``drawn``."""
    demo = types.ModuleType("demo")
    demo.NAME, demo.TITLE, demo.PRESETS = "demo", "a tiny experiment", {"smoke": {}, "quick": {}, "full": {}}

    def run(config, out, seed):
        claim = reproduce.Claim("a line is drawn", "two points", holds=True, criterion="always", figure="demo")
        return {"x": np.arange(2.0), "y": (1.0, 0.0), "claims": [claim]}

    def figure(results):
        drawn.append(results)
        fig, ax = figstyle.subplots(width=3.5, height=2.0)
        ax.plot(results["x"], results["y"])
        return fig

    demo.run = run
    if drawn is not None:
        demo.figure = figure
    return demo


def test_run_experiment_saves_the_figure_drawn_from_the_record(tmp_path):
    """The figure is drawn from the record just written (JSON values, not run's arrays) and is
    byte for byte the one replot draws from that record; a module without figure gets none."""
    drawn = []
    record = reproduce.run_experiment(_tiny_experiment(drawn), tmp_path, preset="smoke")
    assert drawn == [record["results"]] and drawn[0]["x"] == [0.0, 1.0] and drawn[0]["y"] == [1.0, 0.0]
    saved = {ext: (tmp_path / f"demo.{ext}").read_bytes() for ext in ("png", "pdf")}
    assert reproduce.replot(tmp_path, {"demo": _tiny_experiment(drawn)}) == (["demo"], {})
    assert {ext: (tmp_path / f"demo.{ext}").read_bytes() for ext in ("png", "pdf")} == saved
    bare = tmp_path / "bare"
    reproduce.run_experiment(_tiny_experiment(), bare, preset="smoke")
    assert sorted(p.name for p in bare.iterdir()) == ["demo.json", reproduce.TIMINGS]


def test_tables_are_written_from_the_record_by_run_and_by_replot(tmp_path):
    """``tables(results)`` makes files beside the record from its JSON ``results`` (the experiment
    only computes); replot writes them again; a name outside the output folder is refused."""
    demo = _tiny_experiment([])
    demo.tables = lambda results: {"demo.md": f"| x |\n|---|\n| {results['x']} |\n"}
    reproduce.run_experiment(demo, tmp_path, preset="smoke")
    assert (tmp_path / "demo.md").read_text() == "| x |\n|---|\n| [0.0, 1.0] |\n"
    (tmp_path / "demo.md").unlink()
    assert reproduce.replot(tmp_path, {"demo": demo}) == (["demo"], {})
    assert (tmp_path / "demo.md").is_file()
    demo.tables = lambda results: {"../demo.md": ""}
    with pytest.raises(ValueError, match="must name files in the output folder"):
        reproduce.replot(tmp_path, {"demo": demo})


def test_a_figure_lost_after_its_record_is_drawn_from_it_without_rerunning(tmp_path):
    """A ``figure`` that raises leaves the record (nothing measured is lost); the next run
    without ``force`` draws the missing figure from that record and does not run again."""
    broken = _tiny_experiment([])
    broken.figure = lambda results: 1 / 0
    with pytest.raises(ZeroDivisionError):
        reproduce.run_experiment(broken, tmp_path, preset="smoke")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.json", reproduce.TIMINGS]
    drawn = []
    fixed = _tiny_experiment(drawn)
    fixed.run = lambda config, out, seed: pytest.fail("a finished run was run again")
    record = reproduce.run_experiment(fixed, tmp_path, preset="smoke")
    assert drawn == [record["results"]] and (tmp_path / "demo.png").exists() and (tmp_path / "demo.pdf").exists()
    reproduce.run_experiment(fixed, tmp_path, preset="smoke")  # figure present: not drawn again
    assert len(drawn) == 1


def test_unknown_experiment_is_an_error(capsys):
    assert cli.main(["reproduce", "--only", "nope"]) == 2
    assert "unknown experiment" in capsys.readouterr().err


def test_missing_experiments_folder_is_a_one_line_error(tmp_path, capsys):
    assert cli.main(["reproduce", "--experiments", str(tmp_path / "nowhere"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere" in err and "does not exist" in err
    assert not (tmp_path / "README.md").exists()


def _python(code, tmp_path, **env):
    """Run ``code`` in a fresh interpreter in ``tmp_path`` (no float64, no backend chosen)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("JAX_ENABLE_X64", "MPLBACKEND")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_importing_everything_and_discovering_changes_no_global_state(tmp_path):
    """`import absorbjax` (every submodule) and `reproduce.discover()` leave float64 off,
    matplotlib's backend as the user set it and pyplot unimported."""
    code = f"""
        import importlib, json, pkgutil, sys
        import jax, matplotlib
        import absorbjax
        from absorbjax.lab import reproduce
        names = [m.name for m in pkgutil.walk_packages(absorbjax.__path__, "absorbjax.")]
        for name in names:
            importlib.import_module(name)
        found = reproduce.discover({str(ROOT / "experiments")!r})
        print(json.dumps({{"modules": names, "experiments": sorted(found), "x64": jax.config.jax_enable_x64,
                          "backend": matplotlib.rcParams["backend"], "pyplot": "matplotlib.pyplot" in sys.modules}}))
    """
    proc = _python(code, tmp_path, MPLBACKEND="svg", PYTHONPATH=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads(proc.stdout.splitlines()[-1])
    assert {"absorbjax.models", "absorbjax.lab.reproduce", "absorbjax.cli"} <= set(state["modules"])
    assert EXPECTED <= set(state["experiments"])
    assert state["x64"] is False
    assert state["backend"] == "svg"
    assert state["pyplot"] is False


def test_reproduce_from_an_installed_package_says_how_to_get_the_experiments(tmp_path):
    """A plain `pip install` puts only the absorbjax/ package in site-packages (no experiments/):
    `absorbjax reproduce` exits 2 with one line that says where the scripts are."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "absorbjax", site / "absorbjax", ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    code = """
        import sys
        import absorbjax
        from absorbjax import cli
        print(absorbjax.__file__)
        sys.exit(cli.main(["reproduce"]))
    """
    proc = _python(code, work, PYTHONPATH=str(site))
    assert proc.stdout.strip().startswith(str(site)), proc.stdout  # the installed copy, not the source
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count("\n") == 1 and "clone the absorbjax repository" in proc.stderr, proc.stderr
    assert not (work / "figures").exists()


def _leaves(tree):
    """Every leaf of a JSON tree, ``None`` included (NaN and inf are written as ``None``)."""
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in _leaves(v)]
    if isinstance(tree, list):
        return [leaf for v in tree for leaf in _leaves(v)]
    return [tree]


BENCHMARKS = ROOT / "benchmarks"


@pytest.mark.slow
@pytest.mark.parametrize("script", ["bench_fit.py", "bench_condition.py"])
def test_benchmark_quick_run_writes_its_record(tmp_path, script):
    """The benchmarks run end to end at their --quick sizes (their numbers are not judged here:
    timings belong to the benchmark's own side-by-side ratios, not to a unit test)."""
    out = tmp_path / "bench.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("device: ")
    record = json.loads(out.read_text())
    assert record["environment"]["jax"] and record["config"]["quick"] is True
    leaves = _leaves(record["results"])
    # a NaN or inf measurement is written as None (io.to_jsonable): none may be missing
    assert None not in leaves, record["results"]
    assert any(isinstance(v, float) and v > 0 for v in leaves)


def test_suite_benchmark_reads_pytest_durations(monkeypatch):
    """bench_suite.py's reading of ``pytest --durations=0``: every phase of a test summed, per file,
    the counts of the summary line, the failed tests; a run without a summary line is refused."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_suite", BENCHMARKS / "bench_suite.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    output = "\n".join(
        [
            "....s.F",
            "============================= slowest durations =============================",
            "2.50s call     tests/test_a.py::test_one[x]",
            "0.50s setup    tests/test_a.py::test_one[x]",
            "1.00s call     tests/test_b.py::test_two",
            "0.25s call     absorbjax/io.py::absorbjax.io.save_record",
            "(12 durations < 0.005s hidden.  Use -vv to show these durations.)",
            "=========================== short test summary info ============================",
            "FAILED tests/test_b.py::test_two - AssertionError: assert 1 == 2",
            "1 failed, 5 passed, 1 skipped in 12.34s (0:00:12)",
        ]
    )
    run = bench.parse(output)
    assert run["pytest_seconds"] == 12.34 and run["counts"] == {"failed": 1, "passed": 5, "skipped": 1}
    assert run["failures"] == ["tests/test_b.py::test_two"]
    assert run["tests"]["tests/test_a.py::test_one[x]"] == 3.0
    assert bench.by_file(run["tests"]) == {"tests/test_a.py": 3.0, "tests/test_b.py": 1.0, "absorbjax/io.py": 0.25}
    older = {"tests": {"tests/test_a.py::test_one[x]": 1.0, "tests/test_c.py::test_gone": 0.5}}
    rows = bench.compare(run, older)
    assert [(r["file"], r["change"]) for r in rows[:2]] == [("tests/test_a.py", 2.0), ("tests/test_b.py", 1.0)]
    assert {"file": "tests/test_c.py", "against_seconds": 0.5, "this_seconds": 0.0, "change": -0.5} in rows
    with pytest.raises(ValueError, match="summary"):
        bench.parse("....\n")


def test_suite_benchmark_rounds_alternate_and_pool(monkeypatch, tmp_path):
    """``--rounds 3``: the pair runs other–this, this–other, other–this, and the ratio is of the summed
    wall seconds, each round's beside it (the suites replaced by stubs: the order and the sums are read)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_suite", BENCHMARKS / "bench_suite.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    calls = []

    def stub(tree, pytest_args):
        which = "this" if tree == bench.ROOT else "against"
        calls.append(which)
        wall = {"this": [110.0, 100.0, 120.0], "against": [100.0, 100.0, 100.0]}[which][calls.count(which) - 1]
        tests = {"tests/test_a.py::t": wall / 2}
        run = {"tree": str(tree), "commit": "0" * 40, "dirty": False, "returncode": 0, "wall_seconds": wall}
        return run | {"pytest_seconds": wall, "counts": {"passed": 1}, "tests": tests, "failures": []}

    monkeypatch.setattr(bench, "run_suite", stub)
    out = tmp_path / "suite.json"
    assert bench.main(["--against", "HEAD", "--rounds", "3", "--out", str(out)]) == 0
    assert calls == ["against", "this", "this", "against", "against", "this"]
    results = json.loads(out.read_text())["results"]
    assert results["ratio"]["wall"] == pytest.approx(330 / 300)
    assert [r["wall"] for r in results["rounds"]] == pytest.approx([1.1, 1.0, 1.2])
    assert [r["first"] for r in results["rounds"]] == ["against", "this", "against"]
    assert all(r["this_failures"] == r["against_failures"] == [] for r in results["rounds"])
