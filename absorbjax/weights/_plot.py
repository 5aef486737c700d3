"""The per-layer figure of ``absorbjax check --plot``: certified distances of the trained blocks
against norm-matched Gaussian blocks, in the project's figure style (:mod:`absorbjax.lab.figstyle`)."""

from __future__ import annotations

import os
import re


def short_names(names: list[str]) -> list[str]:
    """The names without the path they all share: ``model/…/encoder/layer.0`` → ``layer.0``."""
    parts = [re.split(r"(?<=[./])", n) for n in names]
    common = len(os.path.commonprefix(parts)) if len(parts) > 1 else 0
    cut = max(0, min([common] + [len(p) - 2 for p in parts]))  # keep the last two pieces
    return ["".join(p[cut:]) for p in parts]


def plot_distances(rows, gaussian, path, *, title: str = ""):
    """Save the figure to ``path`` in the project style (:mod:`absorbjax.lab.figstyle`): for each
    decided layer, the trained block's ``[lower, upper]`` (▼ certified lower, ▲ attained) over the
    band ``[lower, upper]`` of the norm-matched Gaussian block. One column (3.5 in) wide up to 8
    layers, two columns (7 in) beyond.

    Args:
      rows: :class:`~absorbjax.weights.BlockCheck` results (those without bounds are skipped).
      gaussian: ``{layer: BlockCheck}`` of the Gaussian blocks, same layers.
      path: the image file (its suffix picks the format: ``.png``, ``.pdf``, ``.svg``).
    Returns the path.
    """
    return _save(distance_figure(rows, gaussian, title=title), path)


def distance_figure(rows, gaussian, *, title: str = ""):
    """The figure of :func:`plot_distances`, not saved (a backend-free ``Figure``)."""
    from absorbjax.lab import figstyle

    rows = [r for r in rows if r.lower is not None]
    xs = list(range(len(rows)))
    with figstyle.context():
        width = figstyle.SINGLE if len(rows) <= 8 else figstyle.DOUBLE
        fig, ax = figstyle.subplots(width=width, height=2.6)
        ref = [gaussian[r.layer] for r in rows]
        ax.bar(
            xs,
            [g.upper - g.lower for g in ref],
            bottom=[g.lower for g in ref],
            width=0.6,
            color="0.75",
            lw=0,
            label="Gaussian, matched norms",
        )
        ax.vlines(xs, [r.lower for r in rows], [r.upper for r in rows], color=figstyle.PALETTE[0], lw=1.5)
        ax.plot(xs, [r.lower for r in rows], "v", color=figstyle.PALETTE[0], label="trained: certified lower")
        ax.plot(xs, [r.upper for r in rows], "^", color=figstyle.PALETTE[1], label="trained: attained")
        ax.set_xticks(xs, short_names([r.name or str(r.layer) for r in rows]), rotation=30, ha="right")
        ax.set_ylabel("‖W_down[:,S] W_up[S,:] + I‖_F / √d")
        ax.set_ylim(top=1.02)
        ax.set_title(title or "distance to absorbing, per layer")
        fig.legend(loc="outside lower center", ncol=2 if width == figstyle.SINGLE else 3)
    return fig


def _save(fig, path):
    from absorbjax.lab import figstyle

    with figstyle.context():
        fig.savefig(path, metadata={"Software": None} if str(path).endswith(".png") else None)
    return path
