"""The per-layer figure of ``absorbjax check --plot``: certified distances of the trained blocks
against norm-matched Gaussian blocks, as ``experiments/real_weights.py`` draws them. One function,
so that a shared figure style can be applied around it."""

from __future__ import annotations

import os
import re

__all__ = ["plot_distances", "short_names"]


def short_names(names: list[str]) -> list[str]:
    """The names without the path they all share: ``model/…/encoder/layer.0`` → ``layer.0``."""
    parts = [re.split(r"(?<=[./])", n) for n in names]
    common = len(os.path.commonprefix(parts)) if len(parts) > 1 else 0
    cut = max(0, min([common] + [len(p) - 2 for p in parts]))  # keep the last two pieces
    return ["".join(p[cut:]) for p in parts]


def plot_distances(rows, gaussian, path, *, title: str = ""):
    """Save the figure to ``path``: for each decided layer, ``[lower, upper]`` of the trained block
    (▼ certified lower, ▲ attained) beside the norm-matched Gaussian block's.

    Args:
      rows: :class:`~absorbjax.weights.BlockCheck` results (those without bounds are skipped).
      gaussian: ``{layer: BlockCheck}`` of the Gaussian blocks, same layers.
      path: the image file (its suffix picks the format).
    Returns the path.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.lower is not None]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(rows) + 3), 4.6))
    xs = range(len(rows))
    for label, series, color, dx in (("trained", rows, "C0", -0.12),
                                     ("Gaussian, matched shape and norms", [gaussian[r.layer] for r in rows],
                                      "C1", 0.12)):
        x = [i + dx for i in xs]
        ax.vlines(x, [r.lower for r in series], [r.upper for r in series], color=color, lw=3)
        ax.plot(x, [r.lower for r in series], "v", color=color, ms=5)
        ax.plot(x, [r.upper for r in series], "^", color=color, ms=5, label=label)
    ax.set_xticks(list(xs), short_names([r.name or str(r.layer) for r in rows]), rotation=30, ha="right",
                  fontsize=8)
    ax.set_ylabel("min_S ‖W_down[:,S] W_up[S,:] + I‖_F / √d", fontsize=8)
    ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
    ax.set_title(title or "distance per layer: ▼ certified lower, ▲ attained", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
