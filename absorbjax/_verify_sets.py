"""The sets ``S`` of a width certificate's lower bound, many at a time, for :mod:`absorbjax._verify_width`.

The lower bound needs ``ρ_S`` (the singular values of ``M_S = A' + Σ_{a∈S} ũ_a ŵ_aᵀ`` above a
threshold ``t``) large enough for every ``S`` of the ``L`` live atoms. Counting them exactly costs
about a millisecond a set; here a batch of sets is screened in float64 with an a priori error bound
derived in this module, and a set passes only when ``σ_min(M_S) > t`` (so ``ρ_S = d``) or, for a
bound that needs ``ρ_S ≥ 1``, ``‖M_S‖_2 > t`` is proved. The sets that do not pass are counted
exactly by the caller; a screen never refutes. Independent of the decision (which bounds ``σ_min``
by Hadamard's inequality on an LU determinant, else an SVD): here an approximate inverse ``X`` of
the computed ``M̃`` and the residual ``I − X M̃``.

The bound, for each computed ``M̃`` (``u = 2^-53``, ``γ_k = k u / (1 − k u)``, no overflow, and an
absolute ``2^-1000`` per entry for underflow):

- ``‖M_S − M̃‖_2 ≤ e``: ``A'`` and each ``ũ_a ŵ_aᵀ`` are exact rationals correctly rounded (relative
  ``u``), their sum of at most ``L + 1`` terms adds ``γ_{L+1}`` of ``Σ |terms|``; so
  ``e = 2(L + 4) u ‖|A'| + Σ_a |ũ_a ŵ_aᵀ|‖_F``;
- ``r ≥ ‖I − X M̃‖_2``: the computed product has ``|fl(X M̃) − X M̃| ≤ γ_d |X||M̃|`` and
  ``‖|X||M̃|‖_F ≤ ‖X‖_F ‖M̃‖_F``, so ``r = ‖fl(I − fl(X M̃))‖_F + γ_d ‖X‖_F ‖M̃‖_F`` (inflated for
  their own rounding); if ``r < 1``, ``‖M̃⁻¹‖_2 ≤ ‖X‖_F / (1 − r)``, hence
  ``σ_min(M̃) ≥ (1 − r) / ‖X‖_F``, whatever ``X`` is;
- ``σ_min(M_S) ≥ σ_min(M̃) − e − m`` (Weyl), ``m`` a bound on the atoms left out of the batch (a
  head of the atoms enumerated, every set of the tail ``T`` bounded at once:
  ``‖Σ_{a∈T'} ũ_a ŵ_aᵀ‖_2 ≤ min(Σ_{a∈T} ‖ũ_a‖‖ŵ_a‖, ‖Ũ_T‖_F ‖Ŵ_T‖_F)`` for every ``T' ⊆ T``);
- ``‖M_S‖_2 ≥ max_ij |M̃_ij| − e − m``.

Every float quantity that enters a bound is inflated (deflated) by ``2^-30``, far above its own
rounding while ``L + d² < 2^20``.

Since any ``X`` will do, a batch's ``X`` are not ``2^H`` inversions: one LAPACK inverse of the batch's
first set, then Sherman–Morrison, one head atom at a time (``O(d²)`` a set, :func:`_inverses`); a set
whose bound fails with that ``X`` is tried again with LAPACK's own inverse.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from absorbjax._verify_float import U as _U, gamma

_SAFE = 2.0**-30  # relative slack for the rounding of the bounds' own float arithmetic
_TINY = 2.0**-1000  # absolute slack per entry for underflow
CHUNK = 1 << 13  # sets screened at once


def _float(x: Fraction) -> float:
    """``x`` correctly rounded (Python's integer true division); ``inf`` on overflow."""
    try:
        return x.numerator / x.denominator
    except OverflowError:
        return float("inf")


def prepare(Ap: list[list[Fraction]], W: list[list[Fraction]], Uc: list[list[Fraction]]):
    """The rounded ``A'`` ``(d, d)`` and outer products ``ũ_a ŵ_aᵀ`` ``(L, d, d)``, and the sum error
    ``e``; ``None`` where float64 cannot hold them (overflow, entries below ``2^-900``, too large)."""
    d, L = len(Ap), len(W)
    if L + d * d >= 2**20:
        return None
    Apf = np.array([[_float(v) for v in row] for row in Ap], np.float64)
    Of = np.array([[[_float(u * w) for w in W[a]] for u in Uc[a]] for a in range(L)], np.float64).reshape(L, d, d)
    for X in (Apf, Of):
        nz = np.abs(X[X != 0])
        if not np.all(np.isfinite(X)) or (nz.size and (nz.min() < 2.0**-900 or nz.max() > 2.0**400)):
            return None
    bound = np.abs(Apf) + np.abs(Of).sum(axis=0)
    e = 2 * (L + 4) * _U * float(np.linalg.norm(bound)) * (1 + _SAFE) + d * _TINY
    return Apf, Of, e


def tail_margin(Of: np.ndarray, Uc, W, tail: list[int]) -> float:
    """A bound on ``‖Σ_{a∈T'} ũ_a ŵ_aᵀ‖_2`` over every ``T' ⊆`` ``tail``."""
    if not tail:
        return 0.0
    each = sum(float(np.linalg.norm(Of[a])) for a in tail)
    sq_u = sum((v * v for a in tail for v in Uc[a]), Fraction(0))
    sq_w = sum((v * v for a in tail for v in W[a]), Fraction(0))
    both = float(np.sqrt(_float(sq_u) * _float(sq_w)))
    return min(each, both) * (1 + _SAFE) ** 2 + _TINY


def screen(prep, head: list[int], margin: float, thr: Fraction, start: int, stop: int, one: bool) -> np.ndarray:
    """For the sets ``S`` of ``head`` numbered ``start..stop`` (bit ``i`` of the number: ``head[i] ∈ S``),
    whether ``σ_min(M_S) > thr`` (``ρ_S = d``), or with ``one`` whether ``‖M_S‖_2 > thr`` (``ρ_S ≥ 1``), is
    proved, for every ``S`` that adds any subset of the tail (``margin``: :func:`tail_margin`)."""
    Apf, Of, e = prep
    d = Apf.shape[0]
    idx = np.arange(start, stop)
    masks = ((idx[:, None] >> np.arange(len(head))) & 1).astype(np.float64)
    M = Apf + (masks @ Of[head].reshape(len(head), d * d)).reshape(-1, d, d)
    slack = (e + margin + float(thr) * (1 + _SAFE)) * (1 + _SAFE)
    ok = np.zeros(len(idx), bool)
    finite = np.all(np.isfinite(M), axis=(1, 2))
    if one:
        ok |= finite & (np.max(np.abs(M), axis=(1, 2)) * (1 - _SAFE) > slack)
    todo = np.flatnonzero(finite & ~ok)
    if todo.size:
        X = _inverses(Apf, Of, head, start, stop)
        good = _proved(M[todo], X[todo], slack)
        again = todo[~good]  # X drifted, or the set is not provable: LAPACK's own inverse decides
        ok[todo] = good
        if again.size:
            ok[again] = _proved(M[again], _lapack_inverses(M[again]), slack)
    return ok


def _inverses(Apf: np.ndarray, Of: np.ndarray, head: list[int], start: int, stop: int) -> np.ndarray:
    """Approximate inverses ``(stop − start, d, d)`` of the float ``M_S`` of the sets numbered
    ``start..stop`` (an aligned block of ``2^c``: the bits from ``c`` on name the same atoms): LAPACK's
    inverse of the block's first set, then for ``i < c`` the sets with bit ``i`` from those without
    it by Sherman–Morrison, ``(X⁻¹ + u wᵀ)⁻¹ = X − X u wᵀ X / (1 + wᵀ X u)``, with ``u wᵀ`` the atom
    ``ũ_a ŵ_aᵀ`` as rounded (scaled by its largest entry). Any entry may be inaccurate or not
    finite: the bound of :func:`_proved` holds for any ``X``."""
    c = (stop - start).bit_length() - 1
    base = Apf + sum((Of[head[i]] for i in range(c, len(head)) if start >> i & 1), np.zeros_like(Apf))
    with np.errstate(all="ignore"):
        X = _lapack_inverses(base[None])
        for i in range(c):
            O = Of[head[i]]
            r, k = np.unravel_index(np.argmax(np.abs(O)), O.shape)
            u, w = (O[:, k] / O[r, k], O[r]) if O[r, k] != 0 else (np.zeros(len(O)), O[r])
            Xu, wX = X @ u, w @ X  # (B, d) each
            X = np.concatenate([X, X - Xu[:, :, None] * (wX / (1 + wX @ u)[:, None])[:, None, :]])
    return X


def _lapack_inverses(M: np.ndarray) -> np.ndarray:
    """``inv(M)`` of each float matrix of ``M (B, d, d)``, 0 where a pivot is exactly zero in float."""
    with np.errstate(all="ignore"):
        try:
            return np.linalg.inv(M)
        except np.linalg.LinAlgError:  # a zero pivot in float: any approximate inverse will do
            singular = ~(np.abs(np.linalg.det(M)) > 0)
            X = np.linalg.inv(np.where(singular[:, None, None], np.eye(M.shape[-1]), M))
            X[singular] = 0.0  # r = ‖I‖_F >= 1: not proved
            return X


def _proved(M: np.ndarray, X: np.ndarray, slack: float) -> np.ndarray:
    """Whether ``σ_min(M) > slack`` is proved for each float matrix ``M`` (``(B, d, d)``) with the
    approximate inverse ``X`` (module docstring)."""
    d = M.shape[-1]
    with np.errstate(all="ignore"):
        R = X @ M
        R.reshape(len(R), d * d)[:, :: d + 1] -= 1.0  # fl(X M̃) − I: the negated residual, its norm the same
        normX = _frobenius(X)
        r = (_frobenius(R) + gamma(d) * normX * _frobenius(M)) * (1 + _SAFE) + d * d * _TINY
        low = (1 - r) / (normX * (1 + _SAFE)) * (1 - _SAFE)
        good = np.isfinite(r) & np.isfinite(low) & (r < 1)
    return good & (low > slack)


def _frobenius(X: np.ndarray) -> np.ndarray:
    """``‖X_b‖_F`` of each matrix of ``X (B, d, d)`` (a sum of ``d²`` squares: rounding ``γ_{d²}``)."""
    return np.sqrt(np.einsum("bij,bij->b", X, X))
