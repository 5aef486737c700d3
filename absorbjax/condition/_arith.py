"""Arithmetic whose error is bounded: exact misses of a set ``S`` and per-unit power-of-two balancing.

Stored floating-point weights are dyadic rationals, so ``M_S = W_down[:,S] W_up[S,:] + A`` can be
computed exactly: each array is an integer matrix times a power of two, and the product is one
``python-flint`` ``fmpz_mat`` product. :func:`verify_miss` first tries a rigorous float64 bound
(Higham's ``γ_k`` plus an absolute ``η = 2⁻¹⁰⁷⁴`` per operation for the subnormal range) and
computes ``M_S`` exactly only when the bound cannot decide (cancellation, underflow).

:func:`balance` rescales unit ``i`` by a power of two (``W_up[i,:] · 2^{−e_i}``,
``W_down[:,i] · 2^{e_i}``): exact, and it leaves every ``M_i = W_down[:,i] W_up[i,:]`` unchanged, so
Gram matrices, norms and cosines of the balanced weights neither over- nor underflow where the
products themselves are in range.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np
from scipy.linalg import cho_factor as _cho_factor

EPS = float(np.finfo(np.float64).eps)
_U = EPS / 2
ETA = 2.0**-1074  # the absolute rounding of one float64 operation in the subnormal range
EXACT_OFFSET_MAX = 2**22  # entries of W_down[:,S] up to which the output bias is computed exactly


def gamma(k: int) -> float:
    """``γ_k = k·u / (1 − k·u)``, ``u = 2⁻⁵³``: the relative error bound of a float64 sum of ``k`` terms."""
    ku = k * _U
    if not ku < 0.5:
        raise ValueError(f"a float64 sum of {k} terms has no useful error bound")
    return ku / (1 - ku)


def balance(U: np.ndarray, D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(W_up', W_down')``: unit ``i`` rescaled by ``2^{−e_i}`` / ``2^{e_i}`` with ``max|W_up'[i,:]|``
    in ``[1/2, 1)`` where that is exact; a unit whose ideal rescaling would round (a subnormal low
    bit) or overflow is rescaled as far towards it as exactness allows
    (:func:`_reader.exact_exponents`), so it is never left at its stored scale for one bit. Exact:
    every ``W_down[:,i] W_up[i,:]`` is unchanged. Float64 (a stored narrower dtype is upcast first).
    Only a unit whose entries span more than about ``2^1586`` can still have Gram entries outside
    the float64 range; the decision treats those as unknown (NaN never excludes a set)."""
    from absorbjax.condition._reader import exact_exponents

    U, D = np.asarray(U, np.float64), np.asarray(D, np.float64)
    top = np.max(np.abs(U), axis=1)
    e = exact_exponents(U, D, np.where(top > 0, np.frexp(top)[1], 0))
    return np.ldexp(U, -e[:, None]), np.ldexp(D, e[None, :])


def pd_shift(G: np.ndarray) -> float:
    """Rump's shift: if the float64 Cholesky factorisation of ``fl(G − c I)`` runs to completion for
    ``c ≥`` this value, the symmetric float64 ``G`` (nonnegative diagonal) is positive definite.

    ``c = γ_{n+1}/(1 − γ_{n+1})·tr(G) + 4(n+1)·η·(2(n+1) + max_i G_ii)`` (S. M. Rump, *Verification
    of positive definiteness*, BIT 46 (2006) 433–452, Thm 2.3; ``η = 2⁻¹⁰⁷⁴``), plus ``u·max_i G_ii``
    for the rounding of the shifted diagonal, and ``(1 + 8u)`` for the rounding of this value."""
    n = G.shape[0]
    g = gamma(n + 1)
    diag = np.diag(G)
    top = float(np.max(diag, initial=0.0))
    tr = math.fsum(diag.tolist()) * (1 + 2 * _U)
    return (g / (1 - g) * tr + 4 * (n + 1) * ETA * (2 * (n + 1) + top) + _U * top) * (1 + 8 * _U)


def certify_pd(G: np.ndarray, mu: float) -> bool:
    """Whether ``λ_min(G) ≥ mu`` is proved: the Cholesky factorisation of ``fl(G − (mu + c) I)``,
    ``c`` = :func:`pd_shift` of ``G − mu I`` (bounded by that of ``G``) plus the rounding of the
    shifted diagonal, runs to completion with a finite factor (Rump 2006)."""
    if not mu >= 0:
        return False
    n = G.shape[0]
    diag = np.diag(G)
    top = float(np.max(np.abs(diag), initial=0.0))
    c = pd_shift(G) + 2 * _U * (top + mu) * (1 + 2 * _U)  # tr(G − mu I) ≤ tr(G); fl(G_ii − (mu + c))
    B = G.copy()
    B[np.diag_indices(n)] = diag - (mu + c)
    try:
        L, _ = _cho_factor(B, lower=True, overwrite_a=True, check_finite=False)
    except np.linalg.LinAlgError:
        return False
    return bool(np.all(np.isfinite(np.diag(L))))  # a NaN in G reaches the diagonal of its row


def sigma_min_lower(A: np.ndarray) -> float:
    """A rigorous lower bound on ``σ_min(A)`` (1 for the identity): ``√μ`` for the largest ``μ`` of
    ``(1 − 2⁻⁸)σ̂², σ̂²/4`` (``σ̂`` the computed ``σ_min``) with ``λ_min(AᵀA) ≥ μ + ‖E‖`` proved by
    :func:`certify_pd` on the float64 ``AᵀA`` (``‖E‖_2 ≤ γ_d ‖A‖_F²`` its rounding), else 0: near
    the margin nothing is claimed."""
    if np.array_equal(A, np.eye(A.shape[0])):
        return 1.0
    d = A.shape[0]
    s = float(np.linalg.svd(A, compute_uv=False)[-1])
    G = A.T @ A
    err = gamma(d + 2) * float(np.sum(A * A)) * (1 + 4 * _U)  # ‖fl(AᵀA) − AᵀA‖_2 ≤ ‖·‖_F
    for frac in (1 - 2.0**-8, 0.25):
        mu = frac * s * s
        if mu > err and certify_pd(G, mu):
            return math.sqrt((mu - err) * (1 - 4 * _U)) * (1 - 4 * _U)
    return 0.0


RANK_EXACT_MAX_D = 512  # skips up to this size get an exact rank (python-flint); beyond, σ_min only
_RANK_PRIME = 2**61 - 1  # a prime: the rank mod p is at most the rank over Q


def rank_lower(A: np.ndarray) -> tuple[int, str]:
    """``(r, how)``: a proved lower bound ``r ≤ rank A`` on the stored ``A`` ``(d, d)``, and how.

    ``d`` when :func:`sigma_min_lower` proves ``σ_min(A) > 0``; else the rank of the integer matrix
    ``A·2^{−e}`` (:func:`_dyadic`: the stored floats are dyadic rationals): exact (``fmpz_mat``) for
    ``d ≤ 64``, modulo the prime ``2⁶¹ − 1`` up to ``RANK_EXACT_MAX_D`` (never above the rank over
    ``Q``: a minor that is nonzero mod ``p`` is a nonzero integer); else ``0`` (nothing proved)."""
    d = A.shape[0]
    if sigma_min_lower(A) > 0:
        return d, "σ_min(A) > 0, certified in float64"
    if d > RANK_EXACT_MAX_D:
        return 0, f"not computed (d = {d} > {RANK_EXACT_MAX_D})"
    import flint

    ints, _ = _dyadic(np.asarray(A, np.float64))
    if d <= 64:
        return int(flint.fmpz_mat(d, d, ints).rank()), "exact rank of the stored A (python-flint)"
    r = flint.nmod_mat(d, d, [x % _RANK_PRIME for x in ints], _RANK_PRIME).rank()
    return int(r), "rank of the stored A modulo the prime 2^61 - 1 (a lower bound on its rank)"


def _dyadic(X: np.ndarray) -> tuple[list, int]:
    """``X = ints · 2^e`` exactly: row-major Python ints and the exponent ``e``."""
    mant, ex = np.frexp(X)
    nz = mant != 0
    e0 = int(ex[nz].min()) - 53 if nz.any() else 0
    m = (mant * 2.0**53).astype(np.int64).ravel().tolist()
    sh = (ex - 53 - e0).ravel().tolist()
    return [a << s if a else 0 for a, s in zip(m, sh)], e0


ONE = Fraction(1)


def _exact(U, D, A, m, c: Fraction = ONE):
    """``(M, B, e)``: integer lists with ``q·M_S = M · 2^e`` and ``q·(|c| Σ_{i∈S}|W_down[k,i]||W_up[i,j]| +
    |A|) = B · 2^e`` exactly (row-major ``d×d``), ``M_S = c·W_down[:,S] W_up[S,:] + A``, ``c = p/q``."""
    import flint

    p, q = c.numerator, c.denominator
    Ds, Us = D[:, m], U[m, :]
    d, k = Ds.shape
    (dv, de), (uv, ue), (av, ae) = _dyadic(Ds), _dyadic(Us), _dyadic(A)
    if k:
        FD, FU = flint.fmpz_mat(d, k, dv), flint.fmpz_mat(k, d, uv)
        P = [int(x) for x in (FD * FU).entries()]
        Q = [
            int(x)
            for x in (flint.fmpz_mat(d, k, [abs(x) for x in dv]) * flint.fmpz_mat(k, d, [abs(x) for x in uv])).entries()
        ]
        ep = de + ue
    else:
        P, Q, ep = [0] * (d * d), [0] * (d * d), ae
    e = min(ep, ae)
    sp, sa = ep - e, ae - e
    M = [p * (x << sp) + q * (a << sa) for x, a in zip(P, av)]
    B = [abs(p) * (y << sp) + q * (abs(a) << sa) for y, a in zip(Q, av)]
    return M, B, e


class Verified(NamedTuple):
    """What :func:`verify_miss` knows about the exact miss ``M_S`` of a set.

    ``passes``: whether the exact ``M_S`` meets ``|M_S| ≤ r_S (Σ_{i∈S}|W_down||W_up| + |A|)``
    entrywise; ``miss_max``: ``‖M_S‖_max`` (float64); ``miss_norm``: a rigorous upper bound on
    ``‖M_S‖_F ≥ ‖M_S‖_2``; ``exact``: whether ``M_S`` was computed in rational arithmetic."""

    passes: bool
    miss_max: float
    miss_norm: float
    exact: bool


def _float_bounds(U, D, A, m, c: Fraction = ONE):
    """``(F, err, lo, hi)``: float64 ``M_S = c·W_down[:,S] W_up[S,:] + A``, a bound on its error, and
    bounds on the exact sum ``|c| Σ_{i∈S}|W_down[k,i]||W_up[i,j]| + |A_kj|`` (entrywise, all rigorous).
    For ``c ≠ 1`` the float ``ĉ`` (``|ĉ − c| ≤ u|c|``) and the product ``ĉ·P̂`` add two roundings:
    ``γ_{k+4}`` instead of ``γ_{k+2}``."""
    k = int(m.sum())
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        Ds, Us = D[:, m], U[m, :]
        S = np.abs(Ds) @ np.abs(Us)
        if c == 1:
            F = Ds @ Us + A
            g, ca, cl, extra = gamma(k + 2), 1.0, 1.0, k + 2
        else:
            cf = float(c)
            F = cf * (Ds @ Us) + A
            g, ca, cl, extra = gamma(k + 4), abs(cf) * (1 + 2 * _U), abs(cf) * (1 - 2 * _U), (k + 4) * (1 + 2 * abs(cf))
        # the factors 1 ± 8u cover the rounding of these bounds and of the comparisons that use them
        hi = (ca * (S + k * ETA) / (1 - g) + np.abs(A)) * (1 + 8 * _U)
        lo = cl * np.maximum((S - k * ETA) / (1 + g), 0.0) + np.abs(A)
        lo *= 1 - 8 * _U
        err = (g * hi + extra * ETA) * (1 + 8 * _U)
    return F, err, lo, hi


def verify_miss(U, D, A, m: np.ndarray, r: float, c: Fraction = ONE) -> Verified:
    """Rule (★) for the mask ``m`` with slack ``r = r_S`` on ``M_S = c·W_down[:,S] W_up[S,:] + A``
    (``c`` the odd slope, an exact fraction): a rigorous float64 bound first, the exact ``M_S``
    (``python-flint``) when the bound cannot decide."""
    d = A.shape[0]
    F, err, lo, hi = _float_bounds(U, D, A, m, c)
    aF = np.abs(F)
    finite = np.all(np.isfinite(F)) and np.all(np.isfinite(hi))
    if finite:
        if np.all(aF + err <= r * lo):
            norm = float(np.linalg.norm(aF + err)) * (1 + (d * d + 2) * _U)
            return Verified(True, float(np.max(aF, initial=0.0)), norm, False)
        if np.any(aF - err > r * hi):
            return Verified(False, float(np.max(aF, initial=0.0)), math.inf, False)
    M, B, _ = _exact(U, D, A, m, c)
    rq = Fraction(r)
    p, q = rq.numerator, rq.denominator
    passes = all(q * abs(x) <= p * y for x, y in zip(M, B))
    return Verified(
        passes, float(np.max(np.abs(F), initial=0.0)) if finite else math.inf, _exact_norm(U, D, A, m, c), True
    )


def _exact_norm(U, D, A, m, c: Fraction = ONE) -> float:
    """A rigorous upper bound on ``‖M_S‖_F`` from the exact ``M_S = c·W_down[:,S] W_up[S,:] + A``."""
    M, _, e = _exact(U, D, A, m, c)
    total = sum(x * x for x in M)  # ‖q·M_S‖_F² · 2^{−2e}, exact
    if total == 0:
        return 0.0
    root = math.isqrt(total) + 1  # ≥ √total, exact integer arithmetic
    s = max(0, root.bit_length() - 52)
    if e + s >= 1000:
        return math.inf
    up = math.ldexp(float((root >> s) + 1), e + s) * (1 + 4 * _U)
    return (up / c.denominator if c.denominator > 1 else up) * (1 + 4 * _U) + ETA


def miss_bound(U, D, A, m: np.ndarray, enough: float = 0.0, c: Fraction = ONE) -> tuple[float, bool]:
    """``(bound, exact)``: a rigorous upper bound on ``‖M_S‖_F`` (``M_S = c·W_down[:,S] W_up[S,:] + A``),
    from float64 when its error bound is below 1e-6 of the norm or the bound is already below
    ``enough``, else from the exact ``M_S``."""
    d = A.shape[0]
    F, err, _, _ = _float_bounds(U, D, A, m, c)
    if np.all(np.isfinite(F)) and np.all(np.isfinite(err)):
        norm_f = float(np.linalg.norm(F))
        err_f = float(np.linalg.norm(err))
        bound = (norm_f + err_f) * (1 + (d * d + 2) * _U)
        if err_f <= 1e-6 * norm_f or bound <= enough:
            return bound, False
    return _exact_norm(U, D, A, m, c), True


def _norm_up(x: list[float]) -> float:
    """A rigorous upper bound on ``‖x‖_2`` for float64 entries ``x`` (each already an upper bound on
    an absolute value): the float64 sum of squares and root, with their rounding covered."""
    if not any(x):
        return 0.0
    with np.errstate(over="ignore"):
        total = math.fsum(v * v for v in x) * (1 + 4 * _U) + len(x) * ETA
        return math.sqrt(total) * (1 + 4 * _U) + ETA


def output_bias(D, b, m, out_bias, slope: Fraction = Fraction(1)) -> tuple[np.ndarray, float]:
    """``(e, offset)``: the absorber's output bias ``e = c + slope·W_down[:,S] b[S]`` (``d``,) in
    float64 and a rigorous upper bound ``offset ≥ ‖e − e_exact‖_2`` (``0.0`` when ``e`` is exact).

    ``D = W_down (d, n)``, ``b`` the hidden bias ``(n,)``, ``m`` the mask of ``S``, ``out_bias`` the
    output bias ``c`` ``(d,)``, ``slope`` the odd slope ``c_σ`` (``σ(z) − σ(−z) = c_σ z``). Up to
    :data:`EXACT_OFFSET_MAX` entries of ``W_down[:,S]`` the exact ``e`` is formed in integer
    arithmetic (``python-flint``) and rounded once, and ``offset`` is the norm of the exact rounding
    errors; beyond that ``e`` is the float64 sum and ``offset`` Higham's bound ``γ_{|S|+4}`` on it.
    """
    Ds, bs = D[:, m], b[m]
    d, k = Ds.shape
    c = np.asarray(out_bias, np.float64)
    p, q = slope.numerator, slope.denominator
    if d * k > EXACT_OFFSET_MAX:
        with np.errstate(over="ignore", under="ignore"):
            s = float(slope)
            e = c + s * (Ds @ bs)
            mag = np.abs(c) + 2 * abs(s) * (np.abs(Ds) @ np.abs(bs))
            err = gamma(k + 4) * mag + 2 * (k + 4) * (1 + abs(s)) * ETA
        if not (np.all(np.isfinite(e)) and np.all(np.isfinite(err))):
            raise ValueError("the absorber's output bias c + W_down[:,S] b[S] overflows float64")
        return e, _norm_up([float(x) * (1 + 2 * _U) for x in err])
    import flint

    (cv, ce) = _dyadic(c)
    if k:
        (dv, de), (bv, be) = _dyadic(Ds), _dyadic(bs)
        T = [int(x) for x in (flint.fmpz_mat(d, k, dv) * flint.fmpz_mat(k, 1, bv)).entries()]
        et = de + be
    else:
        T, et = [0] * d, ce
    E = min(ce, et)
    e, miss = np.empty(d), []
    for i, (ci, ti) in enumerate(zip(cv, T)):
        num = q * (ci << (ce - E)) + p * (ti << (et - E))  # e_i = num · 2^E / q exactly
        exact = Fraction(num << E, q) if E >= 0 else Fraction(num, q << -E)
        try:
            e[i] = float(exact)  # correctly rounded
        except OverflowError:
            raise ValueError("the absorber's output bias c + W_down[:,S] b[S] overflows float64") from None
        if not math.isfinite(e[i]):
            raise ValueError("the absorber's output bias c + W_down[:,S] b[S] overflows float64")
        diff = abs(exact - Fraction(e[i]))
        miss.append(0.0 if diff == 0 else float(diff) * (1 + 2 * _U) + ETA)
    return e, _norm_up(miss)
