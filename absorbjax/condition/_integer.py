"""The integer step: enumeration of all ``2^n`` masks, HiGHS MILP, closest mask."""

from __future__ import annotations

import math
import time

import numpy as np
from scipy import optimize

from absorbjax.condition._arith import EPS, ETA, gamma
from absorbjax.condition._relax import Relaxation
from absorbjax.condition._rule import Rule

EXHAUSTIVE_MAX_N = 24
_MILP_DENSE_MAX = 1_000_000  # entries of the d²×n entrywise constraint matrix
_MILP_MAX_CUTS = 50


# ---------------------------------------------------------------------------------------------
# Integer search


def exhaustive(U, D, rule: Rule, rel: Relaxation, threshold: float):
    """All ``2^n`` masks in chunks; a proof either way. ``A`` below is the search's ``rule.Ac``.

    ``q(m) = mᵀGm − 2bᵀm + ‖A‖_F²`` is ``‖Σ m_i M_i + A‖_F²``; every set that rule (★) accepts has
    ``q ≤ threshold²``. ``q`` is computed with an error below ``(4d + 4n + 16)·eps·q̄(m)``, where
    ``q̄`` is the same form in ``H = (|W_down|ᵀ|W_down|) ⊙ (|W_up||W_up|ᵀ)`` and ``|b|``-like terms
    (the rounding of the Gram matrix included), so masks screened out cannot pass; the survivors
    are checked by rule (★) itself. Returns ``(mask or None, min_m ‖Σ m_i M_i + A‖_F)``.
    """
    n, d = U.shape
    A = rule.Ac
    if n > EXHAUSTIVE_MAX_N:
        raise ValueError(f"method='exhaustive' enumerates 2^n subsets; n = {n} > {EXHAUSTIVE_MAX_N}")
    G, b, a2 = rel.G, rel.b, float(np.sum(A * A))
    aD, aU, aA = np.abs(D), np.abs(U), np.abs(A)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        HD, HU = aD.T @ aD, aU @ aU.T
        H = HD * HU
        hb = np.einsum("ki,ki->i", aD, aA @ aU.T)
        # absolute terms (the subnormal range): every product of G, b and ‖A‖² may lose η = 2⁻¹⁰⁷⁴, and
        # a lost η in W_downᵀW_down is multiplied by W_up W_upᵀ (and the reverse): Σ over all entries
        # bounds Σ_ij m_i m_j of them for every mask, so one constant covers every q(m)
        absolute = (
            (2 * d + 2) * ETA * (float(np.sum(HD)) + float(np.sum(HU)) + n * n)
            + 2 * (2 * d + 2) * ETA * (float(np.sum(aD)) * (1 + float(np.max(aA @ aU.T, initial=0.0))) + n)
            + (d * d + 2) * ETA
        ) * (1 + 8 * EPS) + (n + d + 4) ** 2 * ETA
    c = (4 * d + 4 * n + 16) * EPS
    gram_ok = all(np.all(np.isfinite(x)) for x in (G, b, H, hb)) and math.isfinite(absolute) and math.isfinite(a2)
    direct = None if gram_ok else _Direct(U, D, A)
    best = np.inf
    for M in _all_masks(n):
        if gram_ok:
            q = _quadratic(M, G, b) + a2
            err = c * (np.einsum("bi,bi->b", M @ H, M) + 2 * M @ hb + a2) + absolute
            low = np.maximum(q - err, 0.0)  # a certified lower bound on ‖Σ m_i M_i + A‖_F² (NaN: unknown)
            cut = threshold**2 * (1 + 4 * EPS)
        else:  # Gram entries outside float64: the misses themselves, from the rank-one terms (no n×n matrix)
            low, q = direct.lower(M), None
            cut = threshold * (1 + 4 * EPS)
        # a NaN never excludes a set: only a certified bound above the cut does
        best = min(best, float(np.min(np.where(np.isnan(low), 0.0, low))))
        near = np.flatnonzero(~(low > cut))
        order = near if q is None else near[np.argsort(q[near])]
        for k in order:
            m = M[k] > 0.5
            if rule.accepts(U, D, m)[0]:
                return m, (math.sqrt(max(best, 0.0)) if gram_ok else max(best, 0.0))
    return None, (math.sqrt(max(best, 0.0)) if gram_ok else max(best, 0.0))


class _Direct:
    """Certified lower bounds on ``‖Σ m_i M_i + A‖_F`` for rows ``m`` of masks, from the ``d²×n`` rank-one
    terms ``(M_i)_kj = W_down[k,i] W_up[i,j]`` (finite: every unit has ``max|W_down[:,i]|·max|W_up[i,:]|
    ≤ 1e120``), for blocks whose Gram entries leave the float64 range. Each entry of
    ``fl(Σ m_i M_i + A)`` errs by at most ``γ_{n+2}(Σ m_i |M_i| + |A|) + (n + 2)η``."""

    def __init__(self, U, D, A):
        n, d = U.shape
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            self.M = np.einsum("ki,ij->ikj", D, U).reshape(n, d * d)
        self.aM, self.a = np.abs(self.M), A.reshape(-1)
        self.g, self.eta = gamma(n + 2), (n + 2) * ETA

    def lower(self, masks: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            R = masks @ self.M + self.a
            E = self.g * (masks @ self.aM + np.abs(self.a)) * (1 + 4 * EPS) + self.eta
            low = np.maximum(np.abs(R) - E, 0.0)
            return np.sqrt(np.sum(low * low, axis=1)) * (1 - 4 * EPS)


def _all_masks(n: int, chunk_bits: int = 16):
    """Every ``m ∈ {0,1}^n`` as float rows, in chunks of ``2^min(n, chunk_bits)``."""
    low = min(n, chunk_bits)
    base = ((np.arange(2**low)[:, None] >> np.arange(low)) & 1).astype(np.float64)
    for hi in range(2 ** (n - low)):
        top = ((hi >> np.arange(n - low)) & 1).astype(np.float64)
        yield np.concatenate([base, np.broadcast_to(top, (base.shape[0], n - low))], axis=1)


def _quadratic(M: np.ndarray, G: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``mᵀGm − 2bᵀm`` for each row ``m`` of ``M`` (``= ‖Σ m_i M_i + A‖_F² − ‖A‖_F²``)."""
    return np.einsum("bi,bi->b", M @ G, M) - 2 * M @ b


def milp(U, D, rule: Rule, rel: Relaxation, threshold: float, time_limit: float):
    """Search for a set that ``rule`` (★) accepts with HiGHS (on ``A = rule.Ac``). Returns ``(outcome, mask or None, how)``,
    outcome ``""`` (found) or why none was found, never a proof of absence.

    Variables ``m ∈ {0,1}^n``, zero objective, constraints necessary for (★):

    * entrywise (when ``d²·n ≤ 10⁶``): ``|Σ_i m_i (M_i)_kj + A_kj| ≤ r (Σ_i |M_i|_kj + |A_kj|)`` with
      ``r = rtol + 2γ_{n+1}``: rule (★) with every unit counted (``d²`` rows);
    * compressed (larger ``d``): the system in an orthonormal basis of ``range K``,
      ``|Λ_r^{½} Q_rᵀ m − Λ_r^{−½} Q_rᵀ b| ≤ threshold + ε_⊥ + err`` (``r = rank G`` rows);
    * ``Σ m_i ≥ d`` (``rank(W_down[:,S] W_up[S,:]) ≤ |S|``).

    Each row is divided by its own largest coefficient. HiGHS works to a feasibility tolerance of
    about 1e-7 and drops coefficients below 1e-9 after scaling, so a reported solution is checked by
    rule (★) (a failure adds the no-good cut ``Σ_{i∈S} m_i − Σ_{i∉S} m_i ≤ |S| − 1`` and solves
    again) and a reported infeasibility is only a floating-point verdict: the caller confirms it
    exactly or answers ``undecided``. An infeasible verdict is retried once with presolve off.
    """
    n, d = U.shape
    A, r = rule.Ac, rule.rtol + 2 * gamma(n + 1)
    if d * d * n <= _MILP_DENSE_MAX:
        M = np.einsum("ki,ij->kji", D, U).reshape(d * d, n)
        a = A.reshape(-1)
        slack = r * (np.abs(M).sum(axis=1) + np.abs(a))  # rule (★)'s bound with every unit in S
        rows = [(M, -a - slack, -a + slack)]
        form = "entrywise"
    else:
        if rel.eig is None and not (np.all(np.isfinite(rel.G)) and np.all(np.isfinite(rel.b))):
            return "the Gram matrix leaves the float64 range (no compressed constraints)", None, "compressed"
        try:
            lam, Q = rel.eig if rel.eig is not None else np.linalg.eigh(rel.G)
        except np.linalg.LinAlgError:
            return "the eigensolver did not converge (no compressed constraints)", None, "compressed"
        keep = lam > rel.tau
        root = np.sqrt(lam[keep])
        centre = (Q[:, keep].T @ rel.b) / root
        slack = threshold + rel.eps_perp + rel.err
        rows = [(root[:, None] * Q[:, keep].T, centre - slack, centre + slack)]
        form = "compressed"
    cons = []
    for R, lo, hi in rows:
        w = np.maximum(np.max(np.abs(R), axis=1), np.finfo(float).tiny)
        cons.append(optimize.LinearConstraint(R / w[:, None], lo / w, hi / w))
    cons.append(optimize.LinearConstraint(np.ones((1, n)), min(d, n), n))
    deadline = time.perf_counter() + time_limit
    presolve, retried = True, False
    for _ in range(_MILP_MAX_CUTS):
        left = deadline - time.perf_counter()
        if left <= 0:
            return f"time limit {time_limit:g} s reached", None, form
        res = optimize.milp(
            np.zeros(n),
            integrality=np.ones(n),
            bounds=optimize.Bounds(0, 1),
            constraints=cons,
            options={"time_limit": left, "presolve": presolve},
        )
        if res.status == 2:
            if retried:
                return (
                    (
                        "HiGHS reports the MILP infeasible (with and without presolve), "
                        "a floating-point verdict that is no proof"
                    ),
                    None,
                    form,
                )
            presolve, retried = False, True
            continue
        if res.x is None:
            return f"HiGHS stopped without a solution ({res.message})", None, form
        m = res.x > 0.5
        if rule.accepts(U, D, m)[0]:
            return "", m, form
        sign = np.where(m, 1.0, -1.0)
        cons.append(optimize.LinearConstraint(sign[None], -np.inf, m.sum() - 1))
    return f"{_MILP_MAX_CUTS} HiGHS solutions failed verification", None, form


def closest_mask(rel: Relaxation) -> np.ndarray:
    """The mask minimising ``‖Σ m_i M_i + A‖_F`` over all ``2^n`` (one chunk: ``n ≤ 16``)."""
    (M,) = _all_masks(rel.b.size)
    return M[int(np.argmin(_quadratic(M, rel.G, rel.b)))] > 0.5
