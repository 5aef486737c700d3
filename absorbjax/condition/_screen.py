"""Deciding ``W_down[:,S] W_up[S,:] = −A`` at the size of real models, in ``O(n d²)`` or less.

The Gram path (:mod:`absorbjax.condition._relax`) forms ``W_up W_upᵀ`` and the ``n×n`` Gram matrix:
``O(n³)`` time and ``O(n²)`` memory (4096×16384: 290 s and 12.5 GB). This module never forms an
``n×n`` matrix. It reads the units in blocks of ``block`` (float64 copies of one block at a time),
so its memory is the weights as stored plus a few ``d×d`` and ``block×d`` arrays.

**Dual certificates of absence (proved).** With ``M_i = W_down[:,i] W_up[i,:]`` and a test matrix
``Z`` (``d×d``), put ``z_i = ⟨Z, M_i⟩ = W_down[:,i]ᵀ Z W_up[i,:]ᵀ``. For every ``c ∈ [0,1]^n``,
``⟨Z, Σ c_i M_i + A⟩ ≥ ⟨Z, A⟩ + Σ_i min(z_i, 0)``, so by Cauchy–Schwarz

    ‖Σ c_i M_i + A‖_F ≥ (⟨Z, A⟩ + Σ_i min(z_i, 0)) / ‖Z‖_F                       (D)

for every ``c`` in the box, hence for every set ``S``. If every set that the acceptance rule can
accept misses ``−A`` by at most ``τ`` in Frobenius norm, a right-hand side above ``τ`` proves that
no set exists. ``Z = A`` costs ``O(n d)`` for ``A = I`` (``z_i = a_i = W_down[:,i]·W_up[i,:]``,
the trace test ``(d + Σ_{a_i<0} a_i)/√d > τ``); it decides Gaussian blocks at their initial scale.
Otherwise Frank–Wolfe on the box problem ``min_{c∈[0,1]^n} ‖Σ c_i M_i + A‖_F`` supplies better
``Z = Σ c_i M_i + A``: each step is one pass of ``O(n d²)`` (the ``z_i`` and the sign set's sum);
by box duality the best bound (D) equals the box minimum. Every bound is evaluated in float64 on
the stored values with a rigorous rounding bound (Higham's ``γ_k``, and an absolute term for
subnormal products), after an exact per-unit power-of-two rescaling
(``W_up[i,:]·2^−k``, ``W_down[:,i]·2^k``; it changes no ``M_i``) so that norms neither over- nor
underflow. The bound never exceeds its exact value.

**Finding planted sets (searched, then verified).** If ``|S| = d`` and ``W_down[:,S] W_up[S,:] = −A``
then ``W_up[S,:]`` is invertible and ``W_up[S,:] A⁻¹ W_down[:,S] = −I``: every unit of ``S`` has
``b_i = W_up[i,:] A⁻¹ W_down[:,i] = −1``, and the cross terms vanish. Units with ``b_i ≈ −1``
are the candidates; extra candidates are pruned on their cross terms. The sign sets ``{z_i < 0}``
met by Frank–Wolfe are candidates too. A candidate is accepted only by ``verify`` (default
:func:`screen_check`, rule (★) of :mod:`absorbjax.condition` with a rigorous float64 bound).

**Hypotheses of Thm 8/10 (computed exactly)**: :mod:`absorbjax.condition._hypotheses`.

BLAS threads are capped (``threadpoolctl``) while this module multiplies: the segfault of
OpenBLAS at 4096×16384 came from one multithreaded ``n×n`` product, which this module never forms.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from absorbjax.condition._arith import EPS, ETA, gamma
from absorbjax.condition._hypotheses import blockwise
from absorbjax.condition._reader import (
    BLOCK,
    SAFE,
    Scales,
    blocks,
    down_cols,
    inner,
    is_identity,
    load,
    unit_scales,
    up_rows,
    window,
    windows,
)
from absorbjax.results import Word

_U = EPS / 2  # unit roundoff of float64
_ETA = ETA  # smallest subnormal: the absolute error of one underflowing operation
_THREADS = min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
# BLAS threads while this module multiplies (products of at least _THREADS_MIN multiply-adds): at most
# 2, and never more than the CPUs the process may run on (more threads than CPUs thrash: 36 ms
# against 11 ms for one bound (D) at n = 1536, d = 384 under `taskset -c 0`)
_THREADS_MIN = 2**20  # below this, setting the BLAS threads (reading /proc/self/maps, ~1 ms) costs more
_gamma = gamma  # the one γ_k of the package (condition._arith)


def _nonbool(fn):
    def __bool__(self):
        raise TypeError(f"{type(self).__name__} has no truth value; read .{fn}")

    return __bool__


# ---------------------------------------------------------------------------------------------
# Results


@dataclasses.dataclass(frozen=True, eq=False)
class SetCheck:
    """The float64 check of one set ``S`` by rule (★) with a rigorous rounding bound.

    ``accepted``: every entry of the computed miss ``W_down[:,S] W_up[S,:] + A`` is within the rule's
    bound; ``miss_max``: the computed ``‖miss‖_max``; ``miss_frobenius``: a certified upper bound on
    the exact ``‖miss‖_F`` (computed value plus the rounding bound of the product).
    """

    S: np.ndarray
    accepted: bool
    miss_max: float
    miss_frobenius: float

    __bool__ = _nonbool("accepted")


class ScreenStatus(Word):
    """The answers of :func:`screen`: ``ABSENT`` (proved: no set within ``tau``), ``FOUND`` (``S``
    accepted by ``verify``), ``UNDECIDED`` (no cheap decision)."""

    ABSENT = "absent"
    FOUND = "found"
    UNDECIDED = "undecided"


@dataclasses.dataclass(frozen=True, eq=False)
class Screen:
    """The answer of :func:`screen`.

    Attributes:
      status: a :class:`ScreenStatus` (``UNDECIDED``: ``reason`` says why).
      reason: one sentence.
      method: ``"trace"`` (``Z = A``), ``"frank-wolfe"`` (a later ``Z``), ``"planted"``,
        ``"sign-set"`` or ``"none"``.
      tau: the Frobenius bound on every accepted set's exact miss that was used.
      lower: certified ``‖Σ c_i M_i + A‖_F ≥ lower`` for all ``c ∈ [0,1]^n`` (all sets ``S``).
      upper, upper_S: ``‖W_down[:,S] W_up[S,:] + A‖_F ≤ upper`` certified for ``S = upper_S``.
      S, check: the accepted set and its :class:`SetCheck` (``"found"`` only).
      failed: the hypotheses of Thm 8/10 that fail, in words; ``hypotheses``: what was checked.
      steps: Frank–Wolfe steps taken; ``seconds``, ``timings``: wall time, total and per phase.
      witness: ``(Z, c)``: the test matrix ``Z = A + Σ c_i M_i`` ``(d, d)`` whose bound (D) gave
        ``lower``, and its box point ``c`` ``(n,)`` (``"absent"`` only): the evidence
        :func:`absorbjax.verify` checks.
    """

    status: ScreenStatus
    reason: str
    method: str
    tau: float
    lower: float
    upper: float
    upper_S: np.ndarray
    S: np.ndarray | None
    check: SetCheck | None
    failed: tuple[str, ...]
    hypotheses: str
    steps: int
    seconds: float
    timings: dict
    witness: tuple[np.ndarray, np.ndarray] | None = None

    __bool__ = _nonbool("status")


# ---------------------------------------------------------------------------------------------
# Blocked, rescaled access to the units


def _norms(u: np.ndarray, dd: np.ndarray) -> np.ndarray:
    """Upper bounds on ``ν_i = ‖W_down[:,i]‖ ‖W_up[i,:]‖`` for a loaded block, safe from over/underflow:
    each vector is scaled by a power of two to max entry in ``[1/2, 1)`` before its norm."""
    eu = np.frexp(np.max(np.abs(u), axis=1))[1]
    ed = np.frexp(np.max(np.abs(dd), axis=0))[1]
    g = (1 + _gamma(max(u.shape[1], dd.shape[0]) + 4)) ** 2 * (1 + 4 * _U)
    if np.all(np.abs(eu) < SAFE) and np.all(np.abs(ed) < SAFE):  # squares lose < 2^-200 relative
        return np.sqrt(np.einsum("ij,ij->i", u, u) * np.einsum("ji,ji->i", dd, dd)) * g + _ETA
    nu = np.sqrt(np.sum(np.ldexp(u, -eu[:, None]) ** 2, axis=1))
    nd = np.sqrt(np.sum(np.ldexp(dd, -ed[None, :]) ** 2, axis=0))
    return np.ldexp(nu * nd * g, eu + ed) + _ETA


def _zvals(U, D, k, Z, block) -> tuple[np.ndarray, np.ndarray]:
    """Computed ``z_i = W_down[:,i]ᵀ Z W_up[i,:]ᵀ`` and a bound ``e_i ≥ |ẑ_i − z_i|`` (all units)."""
    n, d = U.shape
    z, err = np.empty(n), np.empty(n)
    zf = float(np.linalg.norm(Z)) * (1 + _gamma(d * d + 2))
    identity = is_identity(Z)
    for s, u, dd in windows(U, D, block, scales=k):
        z[s] = np.einsum("ik,ik->i", u if identity else u @ Z.T, dd.T)
        nu = _norms(u, dd)
        l1 = 2 * math.sqrt(d) * np.sqrt(np.einsum("ji,ji->i", dd, dd))  # ≥ ‖W_down[:,i]‖_1
        err[s] = 4 * _gamma(2 * d + 4) * nu * zf + 16 * d * (1 + l1) * _ETA
    return z, err


def _msum(U, D, k, w, block) -> np.ndarray:
    """``Σ_i w_i M_i`` (``d×d``) in float64, blocked; ``w`` a weight (or 0/1) vector ``(n,)``."""
    d = U.shape[1]
    out = np.zeros((d, d))
    for s in blocks(U.shape[0], block):
        ws = w[s]
        if not np.any(ws):
            continue
        live = np.flatnonzero(ws)
        u, dd = load(U, D, k, slice(s.start + live[0], s.start + live[-1] + 1))
        wl = ws[live[0] : live[-1] + 1].astype(np.float64)
        out += (dd * wl) @ u
    return out


def _nu_sum(U, D, k, m, block) -> float:
    """Upper bound on ``Σ_{i∈m} ‖W_down[:,i]‖ ‖W_up[i,:]‖`` (mask ``m``)."""
    total = 0.0
    for s in blocks(U.shape[0], block):
        if np.any(m[s]):
            total += math.fsum(_norms(*load(U, D, k, s))[m[s]])
    return total * (1 + 2 * _U)


# ---------------------------------------------------------------------------------------------
# Certified bounds


def _rel_down(x: float, k: int = 4) -> float:
    """``x`` moved towards ``−∞`` by ``k`` units of relative rounding (covers ``k`` roundings)."""
    return x - abs(x) * 2 * k * _U - 2**-1070


def dual_lower(U, D, A, Z, *, block: int = BLOCK, scales=None) -> float:
    """Certified lower bound (D) on ``‖Σ c_i M_i + A‖_F`` over ``c ∈ [0,1]^n`` for one test ``Z``.

    ``U = W_up (n, d)``, ``D = W_down (d, n)``, ``A (d, d)``, ``Z (d, d)`` (any matrix; its sign is
    tried both ways). Cost: one ``n×d·d×d`` product (``O(n d)`` when ``Z = I``). Returns ``0.0`` when
    the bound is not positive; never more than the exact value of (D) (float64 with error bounds).
    """
    k = unit_scales(U, D) if scales is None else scales
    small = U.shape[0] * Z.shape[0] ** 2 < _THREADS_MIN  # thousands of small blocks: the limit would dominate
    with contextlib.nullcontext() if small else threadpool_limits(_THREADS):
        z, e = _zvals(U, D, k, Z, block)
    if not (np.all(np.isfinite(z)) and np.all(np.isfinite(e))):
        return 0.0
    d = A.shape[0]
    za = inner(Z, A)
    za_err = 2 * _gamma(d * d + 2) * inner(Z, A, np.abs) + d * d * _ETA
    zf = float(np.linalg.norm(Z)) * (1 + _gamma(d * d + 2))
    if not (zf > 0 and math.isfinite(zf)):
        return 0.0
    best = 0.0
    for sign in (1.0, -1.0):  # Z and −Z
        low = _rel_down(math.fsum(np.minimum(sign * z, 0.0) - e))  # ≤ Σ min(±z_i, 0)
        num = _rel_down(_rel_down(sign * za - za_err) + low)
        if num > 0:
            best = max(best, _rel_down(num / zf))
    return best


def _miss_upper(R: np.ndarray, nu_sum: float, norm_a: float, m_size: int) -> float:
    """Certified ``‖W_down[:,S] W_up[S,:] + A‖_F`` from its computed value ``R``: the product's
    rounding is at most ``γ_{|S|+1}(Σ_{i∈S} ν_i + ‖A‖_F)`` in Frobenius norm."""
    g = _gamma(m_size + 2)
    d = R.shape[0]
    bound = float(np.linalg.norm(R)) * (1 + _gamma(d * d + 2)) + g * (nu_sum + norm_a) + d * d * _ETA
    return bound * (1 + 4 * _U)


def box_bounds(
    U,
    D,
    A,
    *,
    steps: int = 2,
    target: float = math.inf,
    block: int = BLOCK,
    scales=None,
    on_set: Callable | None = None,
) -> tuple[float, float, np.ndarray, int, np.ndarray]:
    """Frank–Wolfe on ``min_{c∈[0,1]^n} ‖Σ c_i M_i + A‖_F`` from ``c = 0``: certified bounds.

    Returns ``(lower, upper, S, steps_taken, (Z, c))``: ``lower`` certified by (D) at the best iterate
    ``Z = Σ c_i M_i + A`` (step 0 is ``Z = A``, the trace test), the witness with its point ``c``; ``upper`` a certified
    ``‖W_down[:,S] W_up[S,:] + A‖_F`` of the best set met (``∅``, the first sign set ``{z_i < 0}``,
    the final ``{c_i > 1/2}``). Each step costs two or three ``O(n d²)`` products. Stops once
    ``lower > target``.
    ``on_set(S_mask, upper)``, if given, sees each sign set with its certified miss.
    """
    n, d = U.shape
    k = unit_scales(U, D) if scales is None else scales
    norm_a = float(np.linalg.norm(A)) * (1 + _gamma(d * d + 2))
    best = [norm_a, np.zeros(n, bool)]  # S = ∅ misses by ‖A‖_F exactly

    def offer(m, Rm=None):  # certify the miss Rm = W_down[:,S] W_up[S,:] + A of the set m; keep the best
        Rm = _msum(U, D, k, m, block) + A if Rm is None else Rm
        up = _miss_upper(Rm, _nu_sum(U, D, k, m, block), norm_a, int(m.sum()))
        if on_set is not None:
            on_set(m, up)
        if up < best[0]:
            best[:] = [up, m]
        return up

    R, c = A, np.zeros(n)  # R = Σ c_i M_i + A at the current c (never written in place)
    lower, taken, witness = 0.0, 0, (A, np.zeros(n))
    with threadpool_limits(_THREADS):
        for step in range(steps + 1):
            here = dual_lower(U, D, A, R, block=block, scales=k)
            if here > lower:
                lower, witness = here, (R, c)
            if lower > target or step == steps:
                break
            m = _zvals(U, D, k, R, block)[0] < 0
            Rs = _msum(U, D, k, m, block) + A  # the vertex s = 1[z < 0]
            if on_set is not None or step == 0:
                offer(m, Rs)
            diff = Rs - R  # exact line search of ‖R + γ (Rs − R)‖² on [0, 1]
            dd = float(np.sum(diff * diff))
            gam = 0.0 if dd == 0 else min(max(-float(np.sum(R * diff)) / dd, 0.0), 1.0)
            if gam == 0.0:
                break
            R, c = R + gam * diff, (1 - gam) * c + gam * m
            taken = step + 1
        if taken > 1 and lower <= target:
            offer(c > 0.5)  # the rounded box point
    return lower, best[0], np.flatnonzero(best[1]), taken, witness


def norm_sum(U, D, *, block: int = BLOCK, scales=None) -> float:
    """Upper bound on ``ν = Σ_i ‖W_down[:,i]‖ ‖W_up[i,:]‖`` (one pass over the units, read rescaled by
    ``scales``; ``None``: :func:`unit_scales`), what ``rule.threshold_of`` needs besides ``rtol`` on the wide path."""
    k = unit_scales(U, D, block=block) if scales is None else scales
    return _nu_sum(U, D, k, np.ones(U.shape[0], bool), block)


# ---------------------------------------------------------------------------------------------
# Planted sets and their verification


def planted_candidates(U, D, A, *, tol: float = 1e-4, block: int = BLOCK, max_size: int | None = None, balance=None):
    """A candidate ``S`` with ``|S| = d``: units with ``b_i = W_up[i,:] A⁻¹ W_down[:,i] ≈ −1`` whose
    cross terms ``C_ij = W_up[i,:] A⁻¹ W_down[:,j]`` vanish (module docstring), or ``None``.

    Candidates ``K`` have ``|b_i + 1| ≤ tol`` (invariant under unit rescalings; the ``max_size``
    closest kept, default ``4d + 64`` while ``|K|² d ≤ 2^35``, else ``2d``). Decoys, copies of a unit
    of ``S`` (sign-flipped, rescaled, or perturbed by a relative 1e-9), are in ``K`` too, and each is
    incompatible with its original (``C_ij ≈ −1``). So ``S`` is built greedily, closest ``b_i`` first,
    from units whose cross terms with every chosen unit are within ``tol``; then single swaps of a chosen
    unit for a compatible candidate lower ``‖C_SS + I‖_F`` (zero for an exact ``S``, and
    ``W_down[:,S] W_up[S,:] = −A`` iff ``W_up[S,:] A⁻¹ W_down[:,S] = −I`` for invertible ``W_up[S,:]``)
    until none does. Costs ``O(n d)`` for ``A = I`` (else one ``d×d`` solve per block) plus
    ``O(|K|² d)``. A heuristic: only :func:`screen_check` (or the exact check) decides. A singular
    ``A`` (a zero pivot in its LU factors) gives ``None``: no candidates, the screen goes on.
    """
    n, d = U.shape
    identity = is_identity(A)
    lu = None
    if not identity:
        import warnings

        from scipy.linalg import lu_factor, lu_solve

        with warnings.catch_warnings():  # an exactly singular A: no candidates (A⁻¹ is needed)
            warnings.simplefilter("ignore")
            lu = lu_factor(A, check_finite=False)
        if not (np.all(np.isfinite(lu[0])) and np.all(np.diag(lu[0]) != 0)):
            return None
    b = np.empty(n)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        for s in blocks(n, block):
            dd = down_cols(D, balance, s)
            x = dd if identity else lu_solve(lu, dd, check_finite=False)
            b[s] = np.einsum("ik,ki->i", up_rows(U, balance, s), x)
    K = np.flatnonzero(np.abs(b + 1) <= tol)
    if max_size is None:
        max_size = 4 * d + 64 if (4 * d + 64) ** 2 * d <= 2**35 else 2 * d
    if K.size < d:
        return None
    K = K[np.argsort(np.abs(b[K] + 1), kind="stable")[:max_size]]  # closest first
    Dk = down_cols(D, balance, K)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        C = up_rows(U, balance, K) @ (Dk if identity else lu_solve(lu, Dk, check_finite=False))
    C[~np.isfinite(C)] = np.inf
    C[np.arange(K.size), np.arange(K.size)] = b[K]
    off = C.copy()
    np.fill_diagonal(off, 0.0)
    ok = (np.abs(off) <= tol) & (np.abs(off.T) <= tol)  # compatible pairs (a unit with itself too)
    chosen: list[int] = []
    for a in range(K.size):  # greedy: closest b first, compatible with everything chosen
        if all(ok[a, j] for j in chosen):
            chosen.append(a)
            if len(chosen) == d:
                break
    if len(chosen) < d:
        return None
    sq = np.where(np.isfinite(off), off, 0.0) ** 2
    sym = sq + sq.T  # the cross-term cost of a pair
    diag = (b[K] + 1) ** 2
    for _ in range(2 * d):  # best single swap on ‖C_SS + I‖_F², until none helps
        S = np.asarray(chosen)
        fits = ok[:, S].sum(axis=1)  # how many chosen units each candidate is compatible with
        best, move = 0.0, None
        for p, i in enumerate(chosen):
            alt = np.flatnonzero((fits - ok[:, i] == d - 1) & ~np.isin(np.arange(K.size), S))
            if alt.size == 0:
                continue
            rest = np.delete(S, p)  # summed without i: a copy's cost against i (≈ 2) would cancel the rest
            gain = diag[alt] + sym[np.ix_(alt, rest)].sum(axis=1) - (diag[i] + sym[i, rest].sum())
            k = int(np.argmin(gain))
            if gain[k] < best:
                best, move = float(gain[k]), (p, int(alt[k]))
        if move is None:
            break
        chosen[move[0]] = move[1]
    return np.sort(K[np.asarray(chosen)])


def screen_check(U, D, A, S, rtol: float) -> SetCheck:
    """Rule (★) for one set in float64, with its rounding bound: accept when every entry has
    ``|fl(W_down[:,S] W_up[S,:] + A)_kj| ≤ (rtol + 2γ_{|S|+1}) (Σ_{i∈S} |W_down[k,i]||W_up[i,j]| + |A_kj|)``.

    ``U = W_up (n, d)``, ``D = W_down (d, n)``, ``A (d, d)``, ``S`` indices. Memory ``O(|S| d)``.
    This is the check that an exact (rational) verification may replace.
    """
    S = np.asarray(S, dtype=np.int64)
    with threadpool_limits(_THREADS):
        u, dd = window(U, D, S)
        R = dd @ u + A
        bound = np.abs(dd) @ np.abs(u) + np.abs(A)
    r = rtol + 2 * _gamma(S.size + 1)
    accepted = bool(np.all(np.abs(R) <= r * bound))
    frob = float(np.linalg.norm(R)) * (1 + _gamma(R.size + 2)) + 2 * _gamma(S.size + 2) * float(np.linalg.norm(bound))
    return SetCheck(np.sort(S), accepted, float(np.max(np.abs(R), initial=0.0)), frob * (1 + 8 * _U) + R.size * _ETA)


# ---------------------------------------------------------------------------------------------
# The screen


def _verified_planted(U, D, A, rtol: float, block: int, verify: Callable, balance=None) -> SetCheck | None:
    """The :func:`planted_candidates` set ``S`` checked by ``verify``: its :class:`SetCheck` if accepted, else
    ``None``."""
    cand = planted_candidates(U, D, A, block=block, balance=balance)
    if cand is None:
        return None
    chk = verify(U, D, A, cand, rtol)
    return chk if chk.accepted else None


def _absent_reason(test: str, lower: float, tau: float) -> str:
    """The reason of an ``"absent"`` :class:`Screen`: ``test`` certified every miss ``>= lower > tau``."""
    return f"{test}: every S misses −A by >= {lower:.6g} (Frobenius), an accepted S by <= {tau:.3g}"


def screen(
    U,
    D,
    A,
    *,
    tau: float,
    rtol: float,
    steps: int = 2,
    block: int = BLOCK,
    verify: Callable | None = None,
    find: bool = True,
    scales: Scales | None = None,
) -> Screen:
    """Decide ``∃S: W_down[:,S] W_up[S,:] = −A`` cheaply, or say that it cannot.

    Args:
      U: ``W_up (n, d)``; D: ``W_down (d, n)``; A: the skip ``(d, d)`` (all plain arrays, any real
        dtype; read in float64 blocks of ``block`` units).
      tau: a Frobenius bound on the exact miss of every set the acceptance rule accepts (for rule
        (★): ``rule.Rule.threshold``). Absence is proved when bound (D) exceeds it.
      rtol: the acceptance rule's slack, passed to ``verify``.
      steps: Frank–Wolfe steps after the trace test (each two ``O(n d²)`` products).
      verify: ``verify(U, D, A, S, rtol) -> SetCheck``; default :func:`screen_check`.
      find: also look for a planted set (:func:`planted_candidates`, the sign sets).
      scales: :func:`balance_scales` of ``U, D``: every block is read as :func:`_arith.balance` would
        have stored it (``None``: as given, rescaled by :func:`unit_scales` only).

    Returns:
      a :class:`Screen`: ``"absent"`` with the certified ``lower > tau``, ``"found"`` with a verified
      ``S``, or ``"undecided"``. The hypotheses of Thm 8/10 are checked in every case.
    """
    t0 = time.perf_counter()
    verify = screen_check if verify is None else verify
    d = U.shape[1]
    timings: dict[str, float] = {}
    t = time.perf_counter()
    e, maxima = (None, None) if scales is None else (scales.balance, scales.maxima)
    failed, checked = blockwise(U, D, block=block, balance=e, maxima=maxima)
    timings["hypotheses"] = time.perf_counter() - t
    k = unit_scales(U, D, block=block) if scales is None else scales.total
    found: list[SetCheck] = []

    def consider(m, up):  # a sign set whose certified miss is within reach of tau
        if find and not found and up <= max(4 * tau, 1e-6 * math.sqrt(d)):
            chk = verify(U, D, A, np.flatnonzero(m), rtol)
            if chk.accepted:
                found.append(chk)

    def done(
        status, reason, method, bounds, steps_taken=0, witness=None
    ):  # witness: (Z, c)  # bounds: (lower, upper, upper_S)
        chk = found[0] if found else None
        S, elapsed = None if chk is None else chk.S, time.perf_counter() - t0
        args = (S, chk, failed, checked, steps_taken, elapsed, timings, witness)
        return Screen(status, reason, method, tau, *bounds, *args)

    t = time.perf_counter()
    lower = dual_lower(U, D, A, A, block=block, scales=k)
    timings["trace"] = time.perf_counter() - t
    norm_a = float(np.linalg.norm(A)) * (1 + _gamma(d * d + 2))
    empty = np.zeros(0, np.int64)
    if lower > tau:
        reason = _absent_reason("trace test (Z = A, bound (D))", lower, tau)
        return done(ScreenStatus.ABSENT, reason, "trace", (lower, norm_a, empty), witness=(A, np.zeros(U.shape[0])))
    if find:
        t = time.perf_counter()
        chk = _verified_planted(U, D, A, rtol, block, verify, e)
        if chk is not None:
            found.append(chk)
        timings["planted"] = time.perf_counter() - t
        if found:
            reason = f"|S| = {chk.S.size} units with W_up[i,:] A⁻¹ W_down[:,i] = −1 and no cross terms; S verified"
            return done(ScreenStatus.FOUND, reason, "planted", (0.0, chk.miss_frobenius, chk.S))
    t = time.perf_counter()
    lower2, upper, upper_S, taken, Z = box_bounds(
        U, D, A, steps=steps, target=tau, block=block, scales=k, on_set=consider
    )
    timings["frank-wolfe"] = time.perf_counter() - t
    witness = Z if lower2 >= lower else (A, np.zeros(U.shape[0]))
    lower = max(lower, lower2)
    if found:
        reason = "a Frank–Wolfe sign set {z_i < 0} verified"
        return done(ScreenStatus.FOUND, reason, "sign-set", (0.0, found[0].miss_frobenius, found[0].S), taken)
    if lower > tau:
        reason = _absent_reason(f"Frank–Wolfe test matrix after {taken} steps (bound (D))", lower, tau)
        return done(ScreenStatus.ABSENT, reason, "frank-wolfe", (lower, upper, upper_S), taken, witness)
    reason = (
        f"no cheap decision: bound (D) reaches {lower:.3g} <= tau {tau:.3g} after {taken} Frank–Wolfe "
        "steps and no planted set verified"
    )
    return done(ScreenStatus.UNDECIDED, reason, "none", (lower, upper, upper_S), taken)
