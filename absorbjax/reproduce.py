"""Run the experiment scripts, skip finished ones, and write the summary table.

An experiment is a module in ``experiments/`` that defines

- ``NAME`` (file stem), ``TITLE`` (the paper result it reproduces);
- ``PRESETS``: ``{"smoke": config, "quick": config, "full": config}``;
- ``run(config, out, seed) -> dict``: computes, saves its figures with :func:`save_figure`
  and returns the numbers behind them, including ``"claims"``: a list of :class:`Claim`, each
  judged from the measurement (``holds``) against a stated ``criterion``.

:func:`run_experiment` runs ``run`` with float64 enabled for that call only (the experiments
make exactness claims; the process-wide ``jax_enable_x64`` is left as it was) and writes the
record (config, seed, versions, device, time taken) under ``out/NAME.json``; a rerun with the
same preset and seed is skipped unless ``force``. :func:`write_summary` regenerates
``out/README.md`` from the records. Importing this module changes no global state (matplotlib's
backend included): figures are drawn on ``matplotlib.figure.Figure`` objects, which need no
backend.

Examples:
  The whole protocol on a one-claim experiment (a module object stands in for a script):

  >>> import tempfile, types
  >>> import jax
  >>> from absorbjax import reproduce
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
  >>> [reproduce.verdict(row) for row in record["results"]["claims"]], again
  (['held'], True)
  >>> "| float64 inside run | run sees float64 | x64 = True | held (x64 is True) |  |" in summary
  True
  >>> bool(jax.config.jax_enable_x64)  # left as it was
  False
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import jax
import numpy as np
from matplotlib.figure import Figure

from absorbjax import fit, io, models

__all__ = [
    "Claim",
    "NoExperiments",
    "figure",
    "PRESETS",
    "PALETTE",
    "experiments_dir",
    "discover",
    "run_experiment",
    "finished",
    "write_summary",
    "save_figure",
    "subplots",
    "verdict",
    "subkey",
    "origin_searches",
    "near_origin_error",
    "plot_profiles",
    "script_main",
]

PRESETS = ("smoke", "quick", "full")
# Okabe–Ito: distinguishable under the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")


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
      >>> from absorbjax import reproduce
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


def figure(*args, **kwargs) -> Figure:
    """A matplotlib ``Figure`` (same arguments as ``plt.figure``) that uses no pyplot state or
    backend: safe to draw in notebooks and headless runs alike; save it with :func:`save_figure`."""
    return Figure(*args, **kwargs)


def subplots(*args, figsize=None, **kwargs):
    """``(fig, axes)`` like ``plt.subplots``, on a backend-free :func:`figure`.

    Examples:
      >>> import tempfile, pathlib
      >>> from absorbjax import reproduce
      >>> fig, (left, right) = reproduce.subplots(1, 2, figsize=(6, 3))
      >>> _ = left.plot([1, 2, 3], [1, 4, 9], color=reproduce.PALETTE[0])
      >>> with tempfile.TemporaryDirectory() as out:
      ...     name = reproduce.save_figure(fig, out, "squares")
      ...     print(name, sorted(p.name for p in pathlib.Path(out).iterdir()))
      squares ['squares.pdf', 'squares.png']
    """
    fig = figure(figsize=figsize)
    return fig, fig.subplots(*args, **kwargs)


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
      >>> from absorbjax import reproduce
      >>> reproduce.experiments_dir().name  # in a source checkout
      'experiments'
    """
    for candidate in (Path(__file__).resolve().parents[1] / "experiments", Path.cwd() / "experiments"):
        if _is_checkout(candidate):
            return candidate
    raise NoExperiments(
        "the experiment scripts ship with the source repository, not with the installed package: "
        "clone the absorbjax repository and run `absorbjax reproduce` inside the clone "
        "(or pass --experiments DIR)"
    )


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"absorbjax_experiments.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def discover(directory: str | Path | None = None) -> dict[str, ModuleType]:
    """``{NAME: module}`` for every experiment script in ``directory``, in file order.

    ``directory`` defaults to :func:`experiments_dir`. Scripts whose names start with ``_``
    (shared helpers) or ``bench`` (benchmarks) are skipped; so are modules that do not define
    ``NAME``, ``TITLE``, ``PRESETS`` and ``run``. Loading a script changes no global state:
    experiments get float64 from :func:`run_experiment`, not at import.
    Raises :class:`NoExperiments` when ``directory`` is not a folder.
    """
    directory = Path(directory) if directory else experiments_dir()
    if not directory.is_dir():
        raise NoExperiments(f"experiments folder {str(directory)!r} does not exist")
    found = {}
    for path in sorted(directory.glob("*.py")):
        if path.stem.startswith(("_", "bench")):
            continue
        module = _load(path)
        if all(hasattr(module, a) for a in ("NAME", "TITLE", "PRESETS", "run")):
            found[module.NAME] = module
    return found


def run_experiment(module: ModuleType, out: str | Path, *, preset: str = "quick", seed: int = 0,
                   force: bool = False) -> dict:
    """Run one experiment and write ``out/NAME.json``; returns the record.

    ``run`` is called inside ``jax.enable_x64(True)``; the process-wide setting is left as it
    was. Skips the run (returning the saved record) when a record with the same preset and seed
    exists, unless ``force``. Claims that are not :class:`Claim` or lack a criterion raise.
    See the module's example.
    """
    if preset not in module.PRESETS:
        raise ValueError(f"preset must be one of {tuple(module.PRESETS)}, got {preset!r}")
    out = Path(out)
    path = out / f"{module.NAME}.json"
    if not force and finished(module, out, preset=preset, seed=seed):
        return io.load_record(path)
    config = {"preset": preset, **module.PRESETS[preset]}
    start = time.perf_counter()
    with jax.enable_x64(True):  # exactness claims need float64; scoped to this call
        results = module.run(config, out, seed)
    results["claims"] = [_checked_claim(module.NAME, c) for c in results.get("claims", [])]
    results["seconds"] = round(time.perf_counter() - start, 2)
    io.save_record(path, name=module.NAME, seed=seed, config=config, results=results)
    return io.load_record(path)


def _checked_claim(name: str, claim) -> Claim:
    if not isinstance(claim, Claim):
        raise TypeError(f"experiment {name}: claims must be reproduce.Claim, got {type(claim).__name__}")
    if claim.holds not in (True, False, None) or not claim.criterion:
        raise ValueError(f"experiment {name}: claim {claim.claim!r} needs holds in (True, False, None) "
                         "and a criterion")
    return claim


def verdict(row: dict) -> str:
    """``"held"``, ``"NOT HELD"`` or ``"not decided"`` for a claim row of a record.

    Examples:
      >>> from absorbjax import reproduce
      >>> [reproduce.verdict({"holds": h}) for h in (True, False, None)]
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
    """Regenerate ``out/README.md``: claim | what was measured | figure, from the records."""
    out = Path(out)
    lines = [
        "# Reproduced results",
        "",
        "Regenerated by `absorbjax reproduce`; every number comes from the JSON record beside it.",
        "",
        "| result | claim | what was measured | verdict (criterion) | figure |",
        "|---|---|---|---|---|",
    ]
    envs = []
    for name, module in modules.items():
        path = out / f"{name}.json"
        if not path.exists():
            continue
        record = io.load_record(path)
        envs.append((name, record))
        for row in record["results"].get("claims", []):
            fig = row.get("figure")
            link = f"[{fig}]({fig}.png)" if fig else ""
            cells = (module.TITLE, row["claim"], row["measured"],
                     f"{verdict(row)} ({row.get('criterion')})", link)
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    lines += ["", "| record | preset | seed | seconds | jax | absorbjax | device |", "|---|---|---|---|---|---|---|"]
    for name, record in envs:
        env = record["environment"]
        lines.append(
            f"| [{name}.json]({name}.json) | {record['config'].get('preset')} | {record['seed']} | "
            f"{record['results'].get('seconds')} | {env['jax']} | {env['absorbjax']} | {env['backend']} |"
        )
    path = out / "README.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def save_figure(fig, out: str | Path, name: str) -> str:
    """Save ``fig`` as ``out/name.png`` and ``out/name.pdf`` without timestamps; returns ``name``
    (see :func:`subplots` for an example). Rerunning gives byte-identical files."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / f"{name}.png", dpi=130, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(out / f"{name}.pdf", bbox_inches="tight", metadata={"CreationDate": None, "Producer": None})
    return name


def subkey(key: jax.Array, *path: int) -> jax.Array:
    """The key at ``path`` below ``key``: ``fold_in`` applied along the path.

    One base key per experiment, one path per purpose (``subkey(key, 0, i)``: the weights of
    draw ``i`` of part 0; ``subkey(key, 1, i)``: its inputs), so no two purposes share a key.

    Examples:
      >>> import jax
      >>> from absorbjax import reproduce
      >>> key = jax.random.key(0)
      >>> k = reproduce.subkey(key, 2, 5)
      >>> bool((jax.random.key_data(k) == jax.random.key_data(
      ...     jax.random.fold_in(jax.random.fold_in(key, 2), 5))).all())
      True
    """
    for i in path:
        key = jax.random.fold_in(key, i)
    return key


def origin_searches(key: jax.Array, names, d: int, n: int, *, draws: int, restarts: int, steps: int,
                    polish: bool) -> dict:
    """:func:`absorbjax.fit.search` for residual-free blocks that reproduce Gaussian residual blocks.

    For activation ``names[i]``: ``draws`` targets ``models.sample(subkey(key, i, 0), draws, d,
    n, name)``, searched with key ``subkey(key, i, 1)``. Returns ``{name: SearchResult}``; read
    the near-origin gap with :func:`near_origin_error` and draw it with :func:`plot_profiles`.

    References:
      Prop 5 and Prop 6: no residual-free homogeneous (degree ≠ 1) or gated (``g(0) = 0``)
      block reproduces the residual block near the origin, so the best relative error there
      stays of order 1.
    """
    return {name: fit.search(models.sample(subkey(key, i, 0), draws, d, n, name), name,
                             key=subkey(key, i, 1), restarts=restarts, steps=steps, polish=polish,
                             progress=False)
            for i, name in enumerate(names)}


def near_origin_error(result) -> float:
    """Smallest relative error over draws in the innermost radius decade of a search:
    ``min_draws √profile[:, 0]`` of an :class:`absorbjax.fit.SearchResult`."""
    return float(np.sqrt(np.asarray(result.profile)[:, 0]).min())


def plot_profiles(ax, results: dict, title: str | None = None) -> None:
    """Relative error ``√profile`` of each :class:`absorbjax.fit.SearchResult` per radius decade.

    Median over draws as a line, min..max as a band; a dotted line at 0.5. ``title`` defaults
    to the number of draws and restarts of the first result.
    """
    for (label, r), color in zip(results.items(), PALETTE):
        centers = np.sqrt(r.edges[1:] * r.edges[:-1])
        rel = np.sqrt(r.profile)
        ax.plot(centers, np.median(rel, 0), "o-", color=color, label=f"{label} (median)")
        ax.fill_between(centers, rel.min(0), rel.max(0), color=color, alpha=0.2)
    if title is None:
        draws, restarts = np.shape(next(iter(results.values())).losses)
        title = f"Best search error by radius\n{draws} draws × {restarts} restarts, band = min..max"
    ax.axhline(0.5, color="k", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("input radius ‖x‖ (decade centre)")
    ax.set_ylabel("relative error of best residual-free fit")
    ax.set_title(title)
    ax.legend(fontsize=8)


def script_main(module: ModuleType, argv: list[str] | None = None) -> int:
    """``python experiments/NAME.py [--preset P] [--out DIR] [--seed S]`` for one experiment."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"experiments/{module.NAME}.py", description=module.TITLE)
    parser.add_argument("--preset", choices=tuple(module.PRESETS), default="quick")
    parser.add_argument("--out", default="figures")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    record = run_experiment(module, args.out, preset=args.preset, seed=args.seed, force=True)
    rows = record["results"].get("claims", [])
    for row in rows:
        print(f"- [{verdict(row)}] {row['claim']}: {row['measured']}")
    print(f"record: {Path(args.out) / (module.NAME + '.json')}", file=sys.stderr)
    return 1 if any(row.get("holds") is False for row in rows) else 0
