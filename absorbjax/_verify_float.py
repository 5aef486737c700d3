"""The checker's float64 arithmetic, each result with an error bound: the unit roundoff and ``γ_k``, a
norm bounded above and below, bound (D)'s sum enclosed between two rationals, a found set's miss
enclosed from exact products of the operands' pieces (:func:`miss_bounds`), and the rule by which an
enclosure proves, refutes or leaves a claim unchecked. Used by :mod:`absorbjax._verify` beyond its
exact budget and by the width checker's float screens; it imports nothing from the decision.
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


# ``D U + B`` with only the final sums rounding (Ozaki's error-free splitting): each operand is cut
# into SLICES pieces whose entries, per row of D and per column of U, are integer multiples of one
# power of two with at most ``bits`` bits, so that every sum of ``k`` products of two pieces is a
# float64 in any order (BLAS's, an FMA's); what the pieces leave is bounded a priori.
SLICES = 3
_PAIRS = sorted(((i, j) for i in range(SLICES) for j in range(SLICES)), key=sum)
_NORMAL = 2.0**-1022  # the smallest normal float64: the pieces and their products stay at or above it


def _piece(X: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``X`` rounded to integer multiples of ``2^a`` (exact: a scaling by a power of two, a rounding to an integer)."""
    return np.ldexp(np.rint(np.ldexp(X, -a)), a)


def _units(X: np.ndarray, axis: int, bits: int) -> list | None:
    """Per piece, ``(a, e, live)``: the piece's unit ``2^a`` per row (``axis=1``) or column (``axis=0``), ``e``
    with the remaining entries below ``2^e``, ``live`` where any is nonzero; ``None`` where an entry, a
    unit or what a piece leaves falls below the normal range (exactness would rest on gradual underflow,
    which a flush-to-zero mode breaks)."""
    subnormal = lambda Y: np.any((Y != 0) & (np.abs(Y) < _NORMAL))  # noqa: E731
    units, rest = [], X
    for _ in range(SLICES):
        mu = np.max(np.abs(rest), axis=axis, keepdims=True)
        e = np.frexp(mu)[1]
        a = np.where(mu > 0, e - bits, 0)
        if subnormal(rest) or np.any((mu > 0) & (a < -1022)):
            return None
        units.append((a, e, mu > 0))
        rest = rest - _piece(rest, a)
    return None if subnormal(rest) else units


def _pieces(X: np.ndarray, units: list) -> tuple[list, np.ndarray]:
    """``X = Σ pieces + rest`` exactly, with the units of :func:`_units` (of ``X`` or the whole it is a block of)."""
    out = []
    for a, _, _ in units:
        p = _piece(X, a)
        out.append(p)
        X = X - p  # exact: a multiple of X's own ulp, at most half a unit
    return out, X


def _pair_exact(du, uu, k: int) -> bool:
    """Every sum of ``k`` products of the two pieces' entries is a normal float64 or zero, nothing overflows."""
    (a, e, live), (c, f, live_u) = du, uu
    if not (live.any() and live_u.any()):
        return True
    return a[live].min() + c[live_u].min() >= -1022 and e[live].max() + f[live_u].max() + math.log2(k) <= 1020


def product_enclosure(D: np.ndarray, Uu: np.ndarray, B: np.ndarray, err_B) -> tuple[np.ndarray, np.ndarray] | None:
    """``D U + B*`` enclosed entrywise as ``center ± radius`` (``D (d, k)``, ``U (k, d)``, ``B*`` an exact
    matrix within ``err_B`` of ``B (d, d)``), or ``None`` where float64 cannot (a subnormal, an overflow).

    Each product of two pieces is exact, summed over all of ``k`` in blocks of :data:`WINDOW` entries; the
    nine products are added to ``B`` largest first, each addition rounding by at most ``u`` of its result
    (``2^-1022`` if subnormals flush), so a ``D U`` that cancels ``B`` is enclosed to about ``u`` of what
    is left, not ``k u |D||U|``. What the pieces leave, ``D R_U + R_D (U − R_U)``, is bounded by
    ``|D||R_U| + |R_D|(|U| + |R_U|)``."""
    d, k = D.shape
    s = np.array(B, np.float64)
    rad = np.asarray(err_B, np.float64) + _NORMAL + np.zeros_like(s)
    if k == 0:
        return s, rad
    bits = (53 - math.ceil(math.log2(k))) // 2
    du, uu = _units(D, 1, bits), _units(Uu, 0, bits)
    if du is None or uu is None:
        return None
    step = max(1, WINDOW // max(d, 1))
    blocks = [(D[:, lo : lo + step], Uu[lo : lo + step]) for lo in range(0, k, step)]
    with np.errstate(all="ignore"):
        # pair by pair, each block's pieces cut again (O(d k) a pass against the products' O(d² k)), so
        # that one (d, d) sum is held, not nine, whatever the number of blocks
        for i, j in _PAIRS:
            if not _pair_exact(du[i], uu[j], k):
                return None
            exact = sum(_pieces(Db, du)[0][i] @ _pieces(Ub, uu)[0][j] for Db, Ub in blocks)
            s = s + exact
            rad = rad + (np.abs(s) * U + _NORMAL)
        tail = 0.0
        for Db, Ub in blocks:
            RD, RU = _pieces(Db, du)[1], _pieces(Ub, uu)[1]
            tail = tail + (np.abs(Db) @ np.abs(RU) + np.abs(RD) @ (np.abs(Ub) + np.abs(RU)))
        rad = (rad + tail * (1 + gamma(4 * k + 8)) + (4 * k + 16) * _NORMAL) * (1 + gamma(4 * len(_PAIRS) + 16))
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(rad))):
        return None
    return s, rad


def miss_bounds(u, dd, A, c: Fraction) -> tuple[float, float] | None:
    """Bounds below and above on ``‖c·dd u + A‖_F = |c| ‖dd u + A/c‖_F`` from :func:`product_enclosure`
    (``None`` where it cannot: a subnormal, an overflow); ``A/c`` is exact where ``c`` is a power of two."""
    cf = float(c)
    if not math.isfinite(cf) or cf == 0:
        return None
    with np.errstate(all="ignore"):
        B = A / cf
        exact_c = Fraction(cf) == c and math.frexp(abs(cf))[0] == 0.5
        enc = product_enclosure(dd, u, B, 0.0 if exact_c else gamma(3) * np.abs(B))
        if enc is None:
            return None
        s, rad = enc
        up = norm_up((np.abs(s) + rad) * (1 + 2 * U)) * abs(cf) * (1 + 4 * U)
        low = norm_down(np.maximum(np.abs(s) - rad * (1 + 2 * U), 0.0) * (1 - 2 * U)) * abs(cf) * (1 - 4 * U)
    return (low, up) if math.isfinite(up) else None
