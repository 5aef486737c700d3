"""One figure style for the project: paper sizes, legible type, a colour-blind-safe palette.

The style file ``absorbjax/figures/paper.mplstyle`` (shipped with the package) sets 7–9 pt type
for figures drawn at :data:`SINGLE` (3.5 in, one column) or :data:`DOUBLE` (7 in, two columns)
wide, constrained layout, and the Okabe–Ito palette (:data:`PALETTE`). Text takes its size when
it is drawn, so draw and save inside :func:`context` (or after :func:`use`).
:func:`too_small` lists the texts of a figure below :data:`MIN_FONT` and :func:`outside` the
parts that do not fit in it: the legibility checks of ``tests/test_figures.py``.

Examples:
  >>> from absorbjax.lab import figstyle
  >>> with figstyle.context():
  ...     fig, ax = figstyle.subplots(width=figstyle.SINGLE, height=2.4)
  ...     _ = ax.plot([0, 1], [0, 1], label="a line")
  ...     _ = ax.legend()
  >>> [float(v) for v in fig.get_size_inches()], figstyle.too_small(fig), figstyle.outside(fig)
  ([3.5, 2.4], [], [])
"""

from __future__ import annotations

import contextlib
from importlib import resources

from matplotlib.figure import Figure

__all__ = ["DOUBLE", "MIN_FONT", "PALETTE", "SINGLE", "STYLE", "context", "outside", "subplots", "too_small", "use"]

STYLE = str(resources.files("absorbjax") / "figures" / "paper.mplstyle")
"""Path of the style file (``matplotlib.style.use(STYLE)`` works too)."""
SINGLE = 3.5
"""Width in inches of a one-column figure."""
DOUBLE = 7.0
"""Width in inches of a two-column (full text width) figure."""
MIN_FONT = 7.0
"""Smallest type, in points, at the figure's own size."""
# Okabe–Ito: distinguishable under the common colour-vision deficiencies (the style's cycle).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")


def use() -> None:
    """Apply the style to matplotlib's global ``rcParams`` (for scripts and notebooks)."""
    import matplotlib.style

    matplotlib.style.use(STYLE)


@contextlib.contextmanager
def context():
    """The style for the ``with`` block only; ``rcParams`` are restored after it."""
    import matplotlib.style

    with matplotlib.style.context(STYLE):
        yield


def subplots(
    nrows: int = 1,
    ncols: int = 1,
    *,
    width: float = DOUBLE,
    height: float | None = None,
    sharex: bool | str = False,
    sharey: bool | str = False,
    squeeze: bool = True,
    width_ratios=None,
    height_ratios=None,
):
    """``(fig, axes)`` on a backend-free ``Figure`` of ``width × height`` inches.

    ``width`` is :data:`SINGLE` or :data:`DOUBLE` for a paper (any positive number is accepted);
    ``height`` defaults to ``0.75 · width / ncols · nrows`` capped at 9 in. ``sharex``, ``sharey``,
    ``squeeze``, ``width_ratios`` and ``height_ratios`` are ``Figure.subplots``'s. Call inside
    :func:`context`.
    """
    if width <= 0 or (height is not None and height <= 0):
        raise ValueError(f"width and height must be positive inches, got width={width}, height={height}")
    if height is None:
        height = min(9.0, 0.75 * width / ncols * nrows)
    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(
        nrows,
        ncols,
        sharex=sharex,
        sharey=sharey,
        squeeze=squeeze,
        width_ratios=width_ratios,
        height_ratios=height_ratios,
    )
    return fig, axes


def _drawn(fig):
    """Lay ``fig`` out on an Agg canvas (tick labels and legends exist only once drawn); the renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def too_small(fig, minimum: float = MIN_FONT) -> list[tuple[str, float]]:
    """``(text, size in pt)`` for every visible, non-empty text of ``fig`` (titles, labels, tick
    labels, legends, annotations) smaller than ``minimum`` points."""
    import matplotlib.text

    _drawn(fig)
    found = []
    for text in fig.findobj(matplotlib.text.Text):
        if text.get_visible() and text.get_text().strip() and text.get_fontsize() < minimum:
            found.append((text.get_text(), float(text.get_fontsize())))
    return found


def outside(fig, slack: float = 0.01) -> list[str]:
    """Where what ``fig`` draws (its tight bounding box: axes, labels, legends, titles) reaches
    more than ``slack`` inches beyond the figure's edges, e.g. ``["right by 0.84 in"]``: what would
    not fit on the page at the figure's size (``[]`` when everything fits)."""
    renderer = _drawn(fig)
    tight, page = fig.get_tightbbox(renderer), fig.bbox_inches
    over = {
        "left": page.x0 - tight.x0,
        "bottom": page.y0 - tight.y0,
        "right": tight.x1 - page.x1,
        "top": tight.y1 - page.y1,
    }
    return [f"{side} by {v:.2f} in" for side, v in over.items() if v > slack]
