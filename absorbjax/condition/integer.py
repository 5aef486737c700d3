"""The integer step: enumeration of all ``2^n`` masks, HiGHS MILP, local search, closest mask."""

from __future__ import annotations

import math
import time

import numpy as np
from scipy import optimize

from absorbjax.condition.inputs import _EPS, _miss
from absorbjax.condition.relax import _Relaxation

_EXHAUSTIVE_MAX_N = 24
_MILP_DENSE_MAX = 1_000_000  # entries of the d²×n entrywise constraint matrix
_MILP_MAX_CUTS = 50


# ---------------------------------------------------------------------------------------------
# Integer search


def _exhaustive(U, D, A, rel: _Relaxation, tol: float):
    """All ``2^n`` masks in chunks: ``q(m) = mᵀGm − 2bᵀm + ‖A‖_F²`` screens (with its rounding
    bound) for ``‖Σ m_i M_i + A‖_F ≤ d·tol``; survivors are verified entrywise in float64.
    Returns ``(mask or None, min_m ‖Σ m_i M_i + A‖_F)``."""
    n, d = U.shape
    if n > _EXHAUSTIVE_MAX_N:
        raise ValueError(f"method='exhaustive' enumerates 2^n subsets; n = {n} > {_EXHAUSTIVE_MAX_N}")
    G, b, a2 = rel.G, rel.b, float(np.sum(A * A))
    aG, ab = np.abs(G), np.abs(b)
    best = np.inf
    for M in _all_masks(n):
        q = _quadratic(M, G, b) + a2
        bound = 8 * n * _EPS * (np.einsum("bi,bi->b", M @ aG, M) + 2 * M @ ab + a2)
        best = min(best, float(q.min()))
        near = np.flatnonzero(q <= (d * tol) ** 2 + bound)
        for k in near[np.argsort(q[near])]:
            m = M[k] > 0.5
            if np.max(np.abs(_miss(U, D, A, m))) <= tol:
                return m, math.sqrt(max(best, 0.0))
    return None, math.sqrt(max(best, 0.0))


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


def _milp(U, D, A, rel: _Relaxation, tol: float, time_limit: float):
    """Integer feasibility with HiGHS. Returns ``(outcome, mask or None, formulation)`` with
    outcome ``"found"``, ``"none"`` or ``"undecided: <why>"``.

    Variables ``m ∈ {0,1}^n``, zero objective, constraints (all valid for every absorbing ``S``):

    * entrywise (when ``d²·n ≤ 10⁶``): ``−A − tol ≤ Σ m_i M_i ≤ −A + tol``, the condition itself
      (``d²`` rows; integer weights give integer coefficients);
    * compressed (larger ``d``): the same system in an orthonormal basis of ``range K``,
      ``|Λ_r^{½} Q_rᵀ m − Λ_r^{−½} Q_rᵀ b| ≤ d·tol + ε_⊥ + err`` (``r = rank G`` rows);
    * ``Σ m_i ≥ d`` (``rank(W_down[:,S] W_up[S,:]) ≤ |S|``) and the trace,
      ``|Σ m_i W_up[i,:]·W_down[:,i] + tr A| ≤ d·tol``.

    HiGHS's feasibility tolerance (1e-7 after scaling rows by the largest coefficient) is looser
    than ``tol``, so each solution is verified entrywise in float64; a failure adds the no-good cut
    ``Σ_{i∈S} m_i − Σ_{i∉S} m_i ≤ |S| − 1`` and solves again. "none" rests on HiGHS's proof of
    infeasibility.
    """
    n, d = U.shape
    if d * d * n <= _MILP_DENSE_MAX:
        rows = np.einsum("ki,ij->kji", D, U).reshape(d * d, n)
        centre, slack, form = -A.reshape(-1), np.full(d * d, tol), "entrywise"
    else:
        lam, Q = rel.eig if rel.eig is not None else np.linalg.eigh(rel.G)
        keep = lam > rel.tau
        root = np.sqrt(lam[keep])
        rows = root[:, None] * Q[:, keep].T
        centre = (Q[:, keep].T @ rel.b) / root
        slack = np.full(rows.shape[0], d * tol + rel.eps_perp + rel.err)
        form = "compressed"
    trace = np.einsum("ij,ji->i", U, D)
    cons = []
    for r, c, s in ((rows, centre, slack), (trace[None], np.array([-np.trace(A)]), np.array([d * tol]))):
        w = max(float(np.max(np.abs(r), initial=0.0)), np.finfo(float).tiny)
        cons.append(optimize.LinearConstraint(r / w, (c - s) / w, (c + s) / w))
    cons.append(optimize.LinearConstraint(np.ones((1, n)), min(d, n), n))
    deadline = time.perf_counter() + time_limit
    for _ in range(_MILP_MAX_CUTS):
        left = deadline - time.perf_counter()
        if left <= 0:
            return f"undecided: time limit {time_limit:g} s reached", None, form
        res = optimize.milp(
            np.zeros(n), integrality=np.ones(n), bounds=optimize.Bounds(0, 1),
            constraints=cons, options={"time_limit": left},
        )
        if res.status == 2:
            return "none", None, form
        if res.x is None:
            return f"undecided: HiGHS stopped without a solution ({res.message})", None, form
        m = res.x > 0.5
        if np.max(np.abs(_miss(U, D, A, m))) <= tol:
            return "found", m, form
        sign = np.where(m, 1.0, -1.0)
        cons.append(optimize.LinearConstraint(sign[None], -np.inf, m.sum() - 1))
    return f"undecided: {_MILP_MAX_CUTS} HiGHS solutions failed verification", None, form


def _local_search(G, b, m, max_flips: int) -> np.ndarray:
    """Best-improvement single flips on ``f(m) = mᵀGm − 2bᵀm`` (``= ‖Σ m_i M_i + A‖_F² − ‖A‖_F²``)."""
    m = m.copy()
    h = G @ m - b
    diag = np.diag(G)
    for _ in range(max_flips):
        s = np.where(m, -1.0, 1.0)
        gain = 2 * s * h + diag
        i = int(np.argmin(gain))
        if gain[i] >= -1e-12 * (1 + abs(float(h @ m))):
            break
        m[i] = not m[i]
        h += s[i] * G[:, i]
    return m


def _closest(rel: _Relaxation) -> np.ndarray:
    """The mask minimising ``‖Σ m_i M_i + A‖_F`` over all ``2^n`` (one chunk: ``n ≤ 16``)."""
    (M,) = _all_masks(rel.b.size)
    return M[int(np.argmin(_quadratic(M, rel.G, rel.b)))] > 0.5
