"""Numbers and index sets in the few characters a certificate's reason and summary give them."""

from __future__ import annotations

import math

import numpy as np


def fmt(x: float | None) -> str:
    """``x`` to 3 significant digits; ``"n/a"`` for ``None``, NaN or ±inf."""
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.3g}"


def few(idx: np.ndarray) -> str:
    """The first 10 indices of ``idx`` (1-D), and how many more there are."""
    return str(idx[:10].tolist()) + (f" and {idx.size - 10} more" if idx.size > 10 else "")
