"""The checker's float64 arithmetic, each result with an a priori error bound: the unit roundoff and
``γ_k``, a norm bounded above and below, bound (D)'s sum enclosed between two rationals, and the rule
by which an enclosure proves, refutes or leaves a claim unchecked. Used by :mod:`absorbjax._verify`
beyond its exact budget and by the width checker's float screens; it imports nothing from the decision.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from absorbjax._resident import release

U = 2.0**-53  # float64 unit roundoff
ETA = 2.0**-1074  # the absolute rounding of one float64 operation in the subnormal range
WINDOW = 2**18  # entries read at a time (2 MiB of float64)


def norm_up(x: np.ndarray) -> float:
    """An upper bound on ``‖x‖_2`` for a float64 array (its sums' rounding covered)."""
    total = math.fsum((x.ravel() ** 2).tolist()) * (1 + 4 * U) + x.size * ETA
    return math.sqrt(total) * (1 + 4 * U) + ETA


def norm_down(x: np.ndarray) -> float:
    """A lower bound on ``‖x‖_2`` for a float64 array (its sums' rounding covered; underflow only lowers it)."""
    with np.errstate(over="ignore"):
        total = math.fsum((x.ravel() ** 2).tolist()) * (1 - 4 * U)
    if not math.isfinite(total):  # a square overflowed: the largest entry alone is a lower bound
        return float(np.max(np.abs(x))) * (1 - 4 * U)
    return math.sqrt(max(total, 0.0)) * (1 - 4 * U)


def gamma(k: int) -> float:
    return k * U / (1 - k * U)


def enclosed(holds_at_worst: bool, holds_at_best: bool) -> bool | None:
    """A claim about an exact value known only between two bounds: proved (``True``) where it holds at
    the bound least favourable to it, refuted (``False``) where it fails even at the most favourable
    one, else ``None`` (float64 cannot tell: unchecked, never refuted)."""
    return True if holds_at_worst else (None if holds_at_best else False)


def float_bounds(W_up, W_down, Z) -> tuple[Fraction, Fraction] | None:
    """Rigorous lower and upper bounds on ``Σ_i min(0, W_down[:,i]ᵀ Z W_up[i,:]ᵀ)`` in float64, in blocks of
    units (``None`` where float64 overflows)."""
    n, d = W_up.shape
    low = high = Fraction(0)
    with np.errstate(all="ignore"):
        step = max(1, WINDOW // d)
        for s in range(0, n, step):
            u, dd = np.asarray(W_up[s : s + step], np.float64), np.asarray(W_down[:, s : s + step], np.float64)
            release(W_up[s : s + step])
            release(W_down[:, s : s + step])
            z = np.einsum("ai,ai->i", dd, Z @ u.T)
            mag = np.einsum("ai,ai->i", np.abs(dd), np.abs(Z) @ np.abs(u).T)
            err = gamma(2 * d + 4) * mag * (1 + gamma(2 * d + 4)) * (1 + 4 * U) + 4 * d * ETA * (1 + np.abs(dd).sum(0))
            # min(0, ·) of the exact value lies between these (the addition's rounding covered)
            lo = np.minimum(z - err * (1 + 2 * U), 0.0) * (1 + 4 * U)
            hi = np.minimum(z + err * (1 + 2 * U), 0.0) * (1 - 4 * U)
            if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
                return None
            part_lo, part_hi = math.fsum(lo.tolist()), math.fsum(hi.tolist())
            low += Fraction(part_lo) - Fraction(abs(part_lo) * U + ETA)
            high += Fraction(part_hi) + Fraction(abs(part_hi) * U + ETA)
    return low, high
