"""Figures without pyplot state: a backend-free ``Figure``, saving that reruns byte-identically,
and the error-by-radius plot of a search. The style, its sizes and palette, and ``subplots`` are
:mod:`absorbjax.lab.figstyle`'s.

Importing this module changes no global state (matplotlib's backend included).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from absorbjax.lab import figstyle

__all__ = ["DPI", "figure", "save_figure", "plot_profiles"]

DPI = 200
"""Pixels per inch of the saved PNG: a 7 in (two-column) figure is 1400 px wide (the PDF is vector)."""


def figure(figsize: tuple[float, float] | None = None, *, layout: str | None = None) -> Figure:
    """A matplotlib ``Figure`` of ``figsize`` inches (``layout``: ``"constrained"``, ``"tight"`` or
    ``None``, as ``plt.figure`` takes them) that uses no pyplot state or backend: safe to draw in
    notebooks and headless runs alike; save it with :func:`save_figure`. For the paper's sizes and
    style use :func:`absorbjax.lab.figstyle.subplots`."""
    return Figure(figsize=figsize, layout=layout)


def save_figure(fig, out: str | Path, name: str) -> str:
    """Save ``fig`` as ``out/name.png`` (:data:`DPI` pixels per inch) and ``out/name.pdf`` at the
    figure's own size, without timestamps; returns ``name``.

    Nothing is cropped or padded (whatever ``savefig.bbox`` says): a figure drawn 3.5 × 2.4 in is
    saved 3.5 × 2.4 in, a PNG of ``700 × 480`` pixels, the size a paper prints it at; a constrained
    layout (:func:`absorbjax.lab.figstyle.subplots`) is what fits its parts inside. Rerunning gives
    byte-identical files.

    Examples:
      >>> import tempfile, pathlib
      >>> from absorbjax.lab import figstyle, plotting
      >>> with figstyle.context():
      ...     fig, (left, right) = figstyle.subplots(1, 2, width=figstyle.DOUBLE, height=3.0)
      ...     _ = left.plot([1, 2, 3], [1, 4, 9], color=figstyle.PALETTE[0])
      >>> with tempfile.TemporaryDirectory() as out:
      ...     name = plotting.save_figure(fig, out, "squares")
      ...     print(name, sorted(p.name for p in pathlib.Path(out).iterdir()))
      squares ['squares.pdf', 'squares.png']
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    whole = fig.bbox_inches.frozen()  # the full page: no tight crop, no padding
    fig.savefig(out / f"{name}.png", dpi=DPI, bbox_inches=whole, metadata={"Software": None})
    with figstyle.context():  # the style's save-time settings: TrueType (Type 42), not Type 3, fonts
        fig.savefig(out / f"{name}.pdf", bbox_inches=whole, metadata={"CreationDate": None, "Producer": None})
    return name


def _field(result, name: str):
    """``result.name`` of a :class:`absorbjax.fit.SearchResult`, or ``result[name]`` of its
    ``to_dict()`` (as a record keeps it), as a NumPy array."""
    return np.asarray(result[name] if isinstance(result, dict) else getattr(result, name))


def plot_profiles(ax, results: dict, title: str | None = None) -> None:
    """Relative error ``√profile`` of each search per radius decade.

    ``results`` maps a label to a :class:`absorbjax.fit.SearchResult` or to its ``to_dict()`` (a
    record's ``results``): ``edges`` ``(B + 1,)``, ``profile`` ``(draws, B)``, ``losses``
    ``(draws, restarts)``. Median over draws as a line, min..max as a band; a dotted line at 0.5.
    ``title`` defaults to the number of draws and restarts of the first result.
    """
    for (label, r), color in zip(results.items(), figstyle.PALETTE):
        edges = _field(r, "edges")
        centers = np.sqrt(edges[1:] * edges[:-1])
        rel = np.sqrt(_field(r, "profile"))
        ax.plot(centers, np.median(rel, 0), "o-", color=color, label=f"{label} (median)")
        ax.fill_between(centers, rel.min(0), rel.max(0), color=color, alpha=0.2)
    if title is None:
        draws, restarts = np.shape(_field(next(iter(results.values())), "losses"))
        title = f"Best search error by radius\n{draws} draws × {restarts} restarts, band = min..max"
    ax.axhline(0.5, color="k", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("input radius ‖x‖ (decade centre)")
    ax.set_ylabel("relative error of best residual-free fit")
    ax.set_title(title)
    ax.legend()
