"""The per-layer figure of ``absorbjax check --plot``: certified distances of the trained blocks
against norm-matched Gaussian blocks, as ``experiments/real_weights.py`` draws them. One function,
so that a shared figure style can be applied around it."""

from __future__ import annotations

__all__ = ["plot_distances"]


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
    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(rows) + 3), 4.2))
    xs = range(len(rows))
    for label, series, color, dx in (("trained", rows, "C0", -0.12),
                                     ("Gaussian, matched shape and norms", [gaussian[r.layer] for r in rows],
                                      "C1", 0.12)):
        x = [i + dx for i in xs]
        ax.vlines(x, [r.lower for r in series], [r.upper for r in series], color=color, lw=3)
        ax.plot(x, [r.lower for r in series], "v", color=color, ms=5)
        ax.plot(x, [r.upper for r in series], "^", color=color, ms=5, label=label)
    ax.set_xticks(list(xs), [r.name or str(r.layer) for r in rows], rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("min_S ‖W_down[:,S] W_up[S,:] + I‖_F / √d")
    ax.axhline(1.0, color="0.6", lw=0.8, ls=":")
    ax.set_title(title or "distance per layer: ▼ certified lower, ▲ attained", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
