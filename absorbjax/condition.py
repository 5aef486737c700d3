"""Theorems 8 and 10: decide ``W_down[:,S] W_up[S,:] = −A`` with a certificate, build the absorber.

For ReLU or GELU, ``d ≥ 2`` and nondegenerate weights (rows of ``W_up`` nonzero and pairwise
non-parallel, columns of ``W_down`` nonzero), the residual block ``x ↦ A x + W_down σ(W_up x)``
equals some residual-free block ``V_down σ(V_up x)`` of the same width iff an index set ``S`` has

    W_down[:,S] W_up[S,:] = −A                                   (Thm 8, Thm 10, Lemma 4)

(``A = I`` by default). With ``M_i = W_down[:,i] W_up[i,:]`` (``d×d``) this asks whether a 0/1
vector ``m`` solves ``Σ m_i M_i = −A``: ``d²`` equations, ``n`` unknowns. The decision runs eagerly
in NumPy float64 and never forms the ``d²×n`` matrix ``K = [vec M_1 … vec M_n]`` unless a MILP on
it is small:

1. *Relaxation.* ``G = KᵀK = (W_downᵀ W_down) ⊙ (W_up W_upᵀ)`` (``n×n``) and
   ``b = Kᵀ vec(−A)``, ``b_i = −W_down[:,i]ᵀ A W_up[i,:]ᵀ``. The least-squares ``c = G⁺b`` is
   refined with exact residuals ``R = −A − Σ c_i M_i`` (``d×d``), and
   ``ρ = ‖Σ c_i M_i + A‖_F`` is computed directly, not as ``cᵀGc − 2bᵀc + ‖A‖_F²``
   (which cancels). If every 0/1 vector stays further than ``d·tol`` (the Frobenius size of an
   entrywise ``tol`` miss) from ``−A``, no ``S`` exists: method ``"relaxation"``.
2. *Rounding.* When ``G`` has full rank ``n`` the real solution is unique and every valid ``m``
   lies within ``δ = (d·tol + ρ)/σ_min(K)`` of ``c``; with ``δ < 1/2`` the only candidate is
   ``round(c)``, which is verified: method ``"rounding"``.
3. *Box relaxation.* Otherwise a certified lower bound on ``‖Σ c_i M_i + A‖_F`` over
   ``c ∈ [0,1]^n`` (projected gradient and the Frank–Wolfe gap) above ``d·tol``: method
   ``"relaxation"``.
4. *MILP.* Otherwise (``n > rank G``, e.g. ``n > d²``) it is integer feasibility, solved with
   HiGHS (``scipy.optimize.milp``): method ``"milp"``; see :func:`find_absorbing_set`.

``method="exhaustive"`` enumerates all ``2^n`` subsets (``n ≤ 24``), the reference for tests.
Every ``S`` returned is verified: ``‖W_down[:,S] W_up[S,:] + A‖_max ≤ tol``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import jax.numpy as jnp
import numpy as np
from scipy import linalg as sla
from scipy import optimize

from absorbjax import activations
from absorbjax.io import to_jsonable
from absorbjax.models import GatedParams, MLPParams

__all__ = [
    "Certificate",
    "Distance",
    "find_absorbing_set",
    "find_absorbing_sets",
    "absorber",
    "distance",
    "default_tol",
    "STATUSES",
    "METHODS",
]

STATUSES = ("absorbable", "not_absorbable", "degenerate", "undecided")
METHODS = ("auto", "relaxation", "milp", "exhaustive")

_EPS = float(np.finfo(np.float64).eps)
_TOL_FACTOR = 1e3
_EXHAUSTIVE_MAX_N = 24
_MILP_DENSE_MAX = 1_000_000  # entries of the d²×n entrywise constraint matrix
_MILP_MAX_CUTS = 50


# ---------------------------------------------------------------------------------------------
# Results


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.3g}"


@dataclasses.dataclass(frozen=True, eq=False)
class Certificate:
    """The answer of :func:`find_absorbing_set` and the numbers that justify it.

    Attributes:
      status: ``"absorbable"`` (a verified ``S`` exists; no genericity needed),
        ``"not_absorbable"`` (no ``S`` and the hypotheses of Thm 8/10 hold),
        ``"degenerate"`` (no ``S``, but a hypothesis fails, so the theorem does not decide) or
        ``"undecided"`` (time limit, or ``method="relaxation"`` without a decision).
      S: sorted hidden-unit indices with ``W_down[:,S] W_up[S,:] = −A`` (when absorbable).
      method: what decided: ``"relaxation"``, ``"rounding"``, ``"milp"``, ``"exhaustive"``.
      reason: one sentence saying why.
      d, n: input dimension ``d`` and width ``n``.
      tol: entrywise tolerance of ``W_down[:,S] W_up[S,:] + A``.
      residual: ``‖W_down[:,S] W_up[S,:] + A‖_max`` of ``S``, or of the only candidate that the
        rounding step checked; ``None`` when no single candidate was checked.
      relaxation_residual: ``ρ = ‖Σ c_i M_i + A‖_F`` at the least-squares real ``c``.
      lower_bound: certified ``‖Σ m_i M_i + A‖_F ≥ lower_bound`` for every ``m ∈ {0,1}^n``
        (from real ``c``, or from ``c ∈ [0,1]^n`` when the box relaxation ran).
      rank: numerical rank of ``G`` (``n`` when Cholesky certifies it positive definite, else
        the number of eigenvalues above ``τ = 4·max(n,d)·eps·‖G‖_∞``).
      dist01: ``‖c − round(c)‖_∞``, the real solution's distance from ``{0,1}^n``.
      radius: ``δ``: every valid ``m`` has ``‖m − c‖_2 ≤ δ`` (full rank only, else ``None``).
      nondegenerate: whether the hypotheses of Thm 8/10 hold.
      failed: the hypotheses that fail, in words.
      min_row_sin: smallest ``|sin|`` of the angle between two nonzero rows of ``W_up``.
      skip: ``"identity"`` or ``"matrix"`` (Lemma 4 form, condition ``= −A``).
      input_dtype: dtype of the given weights (the check itself runs in float64).
      activation: the activation named by the caller, if any.
      seconds, timings: wall time, total and per phase.
    """

    status: str
    S: np.ndarray | None
    method: str
    reason: str
    d: int
    n: int
    tol: float
    residual: float | None
    relaxation_residual: float
    lower_bound: float
    rank: int
    dist01: float
    radius: float | None
    nondegenerate: bool
    failed: tuple[str, ...]
    min_row_sin: float | None
    skip: str
    input_dtype: str
    activation: str | None = None
    seconds: float = 0.0
    timings: dict = dataclasses.field(default_factory=dict)

    @property
    def absorbable(self) -> bool:
        return self.status == "absorbable"

    def summary(self) -> str:
        target = "I" if self.skip == "identity" else "A"
        lines = [f"{self.status}  [method: {self.method}]  {self.reason}"]
        if self.S is not None:
            lines.append(
                f"  S = {_few(self.S)} (|S| = {self.S.size}): "
                f"‖W_down[:,S] W_up[S,:] + {target}‖_max = {_fmt(self.residual)} <= tol = {_fmt(self.tol)}"
            )
        elif self.residual is not None:
            lines.append(f"  candidate round(c): residual {_fmt(self.residual)} > tol = {_fmt(self.tol)}")
        lines.append(
            f"  relaxation: rank G = {self.rank} of n = {self.n}, ρ = {_fmt(self.relaxation_residual)}, "
            f"every S misses by >= {_fmt(self.lower_bound)} (Frobenius; threshold d·tol = "
            f"{_fmt(self.d * self.tol)}), ‖c − round(c)‖_∞ = {_fmt(self.dist01)}, δ = {_fmt(self.radius)}"
        )
        hyp = "hold" if self.nondegenerate else "fail: " + "; ".join(self.failed)
        lines.append(
            f"  hypotheses of Thm 8/10 (d >= 2, rows of W_up nonzero and pairwise non-parallel, "
            f"columns of W_down nonzero) {hyp}; min |sin| between rows {_fmt(self.min_row_sin)}"
        )
        if self.activation is not None:
            lines.append(f"  activation {self.activation}: {activations.get(self.activation).result}")
        lines.append(
            f"  d = {self.d}, n = {self.n}, skip {self.skip}, input {self.input_dtype} (checked in "
            f"float64), {self.seconds:.3g} s"
        )
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (non-finite floats become ``None``)."""
        return {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, eq=False)
class Distance:
    """How far a block is from absorbing, relative to ``‖A‖_F`` (``√d`` for ``A = I``).

    ``lower ≤ min_S ‖W_down[:,S] W_up[S,:] + A‖_F / ‖A‖_F ≤ upper``; ``upper`` is attained by ``S``
    (``S = ∅`` gives 1: the zero map). ``lower = max(relaxation, box)``: the certified bounds
    from real coefficients and from coefficients in ``[0, 1]``. ``method`` says how ``S`` was
    found: ``"exact"`` (an absorbing set), ``"exhaustive"`` (the true minimum, small ``n``) or
    ``"local"`` (single-unit flips from roundings of the relaxation). ``certificate`` is the
    decision of :func:`find_absorbing_set`.
    """

    lower: float
    upper: float
    S: np.ndarray
    method: str
    relaxation: float
    box: float
    certificate: Certificate

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["certificate"] = self.certificate.to_dict()
        return out


# ---------------------------------------------------------------------------------------------
# Inputs


def _weights(params, *, batched: bool) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    if isinstance(params, GatedParams):
        raise ValueError(
            "params are GatedParams: Thm 8/10 is for ungated blocks; gated blocks are decided by "
            "Prop 5 (ReGLU) and Prop 6 (SwiGLU, GeGLU)"
        )
    if not isinstance(params, MLPParams):
        raise ValueError(f"params must be MLPParams, got {type(params).__name__}")
    up, down = np.asarray(params.up), np.asarray(params.down)
    lead = 1 if batched else 0
    if up.ndim != 2 + lead or down.ndim != 2 + lead:
        if not batched and up.ndim == 3:
            raise ValueError(
                f"params have a leading draws axis (up {up.shape}); use find_absorbing_sets"
            )
        want = "(draws, n, d) and (draws, d, n)" if batched else "(n, d) and (d, n)"
        raise ValueError(f"params.up and params.down must have shapes {want}, got {up.shape}, {down.shape}")
    n, d = up.shape[-2:]
    if down.shape[-2:] != (d, n) or down.shape[:-2] != up.shape[:-2]:
        raise ValueError(
            f"params.down must have shape {up.shape[:-2] + (d, n)} to match params.up {up.shape}"
        )
    dtype = np.result_type(up, down)
    if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
        raise ValueError(f"params must hold real numbers, got dtype {dtype}")
    U, D = up.astype(np.float64), down.astype(np.float64)
    if not (np.all(np.isfinite(U)) and np.all(np.isfinite(D))):
        raise ValueError("params contain NaN or inf")
    return U, D, dtype


def _eps(dtype) -> float:
    """Machine epsilon of a float dtype (bfloat16 included); integers are exact: float64's."""
    if np.issubdtype(dtype, np.integer):
        return _EPS
    return float(jnp.finfo(dtype).eps)


def _skip(skip, d: int) -> np.ndarray:
    """``A`` as float64 ``(d, d)``; singular or ill-conditioned skips raise (Lemma 4)."""
    if skip is None:
        return np.eye(d)
    A = np.asarray(skip)
    if A.shape != (d, d):
        raise ValueError(f"skip must have shape ({d}, {d}) to match params (d={d}), got {A.shape}")
    A64 = A.astype(np.float64)
    if not np.all(np.isfinite(A64)):
        raise ValueError("skip contains NaN or inf")
    max_cond = 1.0 / math.sqrt(_eps(A.dtype))
    cond = float(np.linalg.cond(A64))
    if not cond <= max_cond:
        raise ValueError(
            f"skip A is singular or ill-conditioned (condition number {cond:.3g} > {max_cond:.3g}); "
            "Lemma 4 needs an invertible skip"
        )
    return A64


def _scale(U: np.ndarray, D: np.ndarray, A: np.ndarray) -> float:
    return float(np.max(np.abs(A)) + np.max(np.abs(D) @ np.abs(U), initial=0.0))


def _default_tol(U, D, A, dtype) -> float:
    return _TOL_FACTOR * _eps(dtype) * _scale(U, D, A)


def default_tol(params: MLPParams, *, skip=None) -> float:
    """``tol = 1e3 · eps(dtype) · (‖A‖_max + ‖|W_down| |W_up|‖_max)``.

    Every partial sum ``Σ_{i∈S} W_down[k,i] W_up[i,j]`` is bounded by ``(|W_down| |W_up|)_kj``, so
    rounding the weights to their dtype (relative ``eps/2`` each) and summing in float64 moves
    each entry of ``W_down[:,S] W_up[S,:]`` by about ``eps · (|W_down||W_up|)_kj`` (plus
    ``√|S|·eps64`` of the same size for the sum); the factor ``1e3`` leaves room for weights that
    were themselves computed (a pseudo-inverse in ``models.absorbable`` loses ``cond(W_up[S,:])``).
    Distances of generic weights from the condition are ``O(1)``, far above this.
    """
    U, D, dtype = _weights(params, batched=False)
    return _default_tol(U, D, _skip(skip, U.shape[1]), dtype)


def _resolve_tol(tol, U, D, A, dtype) -> float:
    if tol is None:
        return _default_tol(U, D, A, dtype)
    tol = float(tol)
    if not tol >= 0:
        raise ValueError(f"tol must be a nonnegative number, got {tol!r}")
    return tol


def _check_activation(activation):
    if activation is None:
        return None
    act = activations.get(activation)
    if act.gated:
        raise ValueError(f"activation {act.name!r} is gated; Thm 8/10 is for ungated blocks ({act.result})")
    if act.family == "homogeneous":
        raise ValueError(f"activation {act.name!r} is decided by {act.result}, not by this condition")
    return act.name


def _mask(S, n: int) -> np.ndarray:
    S = np.asarray(S)
    if S.dtype == bool:
        if S.shape != (n,):
            raise ValueError(f"a boolean S must have shape ({n},), got {S.shape}")
        return S.copy()
    if S.ndim != 1 or (S.size and not np.issubdtype(S.dtype, np.integer)):
        raise ValueError(f"S must be a 1-D array of hidden-unit indices, got {S!r}")
    if S.size and (S.min() < 0 or S.max() >= n):
        raise ValueError(f"S must index hidden units 0..{n - 1}, got {S.tolist()}")
    if np.unique(S).size != S.size:
        raise ValueError(f"S has repeated indices: {S.tolist()}")
    m = np.zeros(n, bool)
    m[S] = True
    return m


def _miss(U, D, A, m: np.ndarray) -> np.ndarray:
    """``W_down[:,S] W_up[S,:] + A`` (``d×d``) for the mask ``m``."""
    return D[:, m] @ U[m, :] + A


# ---------------------------------------------------------------------------------------------
# Hypotheses and relaxation


def _hypotheses(U, D, UUt) -> tuple[tuple[str, ...], float | None]:
    """Failed hypotheses of Thm 8/10 and the smallest ``|sin|`` between rows of ``W_up``.

    Rows count as parallel when ``sin² ≤ 16·d·eps64``: below that the Gram-based angle cannot tell
    them from parallel rows.
    """
    n, d = U.shape
    failed = []
    if d < 2:
        failed.append(f"d = {d} < 2")
    zero_rows = np.flatnonzero(~U.any(axis=1))
    zero_cols = np.flatnonzero(~D.any(axis=0))
    if zero_rows.size:
        failed.append(f"rows of W_up are zero: {_few(zero_rows)}")
    if zero_cols.size:
        failed.append(f"columns of W_down are zero: {_few(zero_cols)}")
    live = np.flatnonzero(U.any(axis=1))
    min_sin = None
    if live.size >= 2:
        sq = np.diag(UUt)[live]
        cos2 = (UUt if live.size == n else UUt[np.ix_(live, live)]) ** 2
        cos2 /= sq[:, None]
        cos2 /= sq[None, :]
        np.fill_diagonal(cos2, 0.0)
        min_sin = math.sqrt(max(1.0 - float(cos2.max()), 0.0))
        i, j = np.nonzero(cos2 >= 1.0 - 16 * d * _EPS)
        i, j = i[i < j], j[i < j]
        if i.size:
            pairs = [(int(live[a]), int(live[b])) for a, b in zip(i[:5], j[:5])]
            more = f" and {i.size - 5} more" if i.size > 5 else ""
            failed.append(f"rows of W_up are parallel: pairs {pairs}{more}")
    return tuple(failed), min_sin


def _few(idx: np.ndarray) -> str:
    return str(idx[:10].tolist()) + (f" and {idx.size - 10} more" if idx.size > 10 else "")


@dataclasses.dataclass
class _Relaxation:
    G: np.ndarray
    b: np.ndarray
    c: np.ndarray
    rank: int
    tau: float
    lam_low: float  # certified lower bound on λ_min(G) (0 when rank < n)
    rho: float  # ‖Σ c_i M_i + A‖_F at the computed c
    lower: float  # certified lower bound on ‖Σ m_i M_i + A‖_F, m ∈ {0,1}^n
    err: float  # rounding-error bound on rho
    eps_perp: float  # reach of the dropped eigendirections over the cube [0,1]^n
    eig: tuple[np.ndarray, np.ndarray] | None  # (λ, Q) when computed


def _positive_definite(G: np.ndarray, tau: float):
    """``(solve, λ_low)`` with ``λ_min(G) ≥ λ_low > 0`` certified by Cholesky, else ``None``.

    Cholesky of ``G``, 30 steps of inverse iteration for a Rayleigh quotient ``λ̂ ≥ λ_min``, then a
    second Cholesky of ``G − (λ̂/4) I``: its success proves ``λ_min ≥ λ̂/4 − τ`` (``τ`` covers the
    factorisation's backward error). Two ``O(n³/3)`` factorisations instead of an eigensolver.
    """
    n = G.shape[0]
    try:
        cho = sla.cho_factor(G, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    solve = lambda x: sla.cho_solve(cho, x, check_finite=False)  # noqa: E731
    x = np.random.default_rng(0).standard_normal(n)
    for _ in range(30):
        x = solve(x)
        x /= np.linalg.norm(x)
    mu = float(x @ G @ x) / 4
    if not mu > 2 * tau:
        return None
    try:
        sla.cho_factor(G - mu * np.eye(n), check_finite=False)
    except np.linalg.LinAlgError:
        return None
    return solve, mu - tau


def _relax(U, D, A, UUt, timings) -> _Relaxation:
    """Least squares ``min_c ‖Σ c_i M_i + A‖_F`` from ``G = (W_downᵀW_down) ⊙ (W_up W_upᵀ)``.

    ``τ = 4·max(n,d)·eps·‖G‖_∞`` is the rank threshold. Positive definite ``G`` (certified by
    Cholesky, :func:`_positive_definite`) has rank ``n``; otherwise the eigendecomposition is
    restricted to eigenvalues above ``τ``, and the dropped directions change
    ``‖Σ m_i M_i + A‖_F`` by at most ``ε_⊥ = √(n·λ_dropped)`` over the cube ``[0,1]^n``. Two
    steps of refinement with exact residuals ``R = −A − Σ c_i M_i`` make ``c`` accurate without
    forming ``K``. For every ``m ∈ {0,1}^n``: ``‖Σ m_i M_i + A‖_F ≥ ρ − 2η − ε_⊥ − err``, where
    ``η² = gᵀG⁺g`` is the decrease still available at ``c`` (``g = Kᵀ vec R``, with a factor 2 of
    margin) and ``err = n·eps·‖|W_down| diag|c| |W_up| + |A|‖_F`` bounds the rounding in ``ρ``.
    """
    n, d = U.shape
    t = time.perf_counter()
    G = (D.T @ D) * UUt
    b = -np.einsum("ki,ki->i", D, A @ U.T)
    tau = 4 * max(n, d) * _EPS * float(np.max(np.sum(np.abs(G), axis=1)))
    timings["gram"] = time.perf_counter() - t

    t = time.perf_counter()
    pd = _positive_definite(G, tau) if tau > 0 else None
    eig, lam_perp = None, 0.0
    if pd is not None:
        (solve, lam_low), rank = pd, n
    else:
        lam, Q = np.linalg.eigh(G)
        keep = lam > tau
        rank = int(keep.sum())
        Qr, lr = Q[:, keep], lam[keep]
        solve = lambda x: Qr @ ((Qr.T @ x) / lr)  # noqa: E731
        lam_perp = max(float(lam[~keep].max(initial=0.0)), 0.0)
        lam_low = float(lam[0]) - tau if rank == n else 0.0
        eig = (lam, Q)
    timings["factor"] = time.perf_counter() - t

    t = time.perf_counter()

    def grad(c):
        R = -A - (D * c) @ U
        return R, np.einsum("ki,ki->i", D, R @ U.T)

    c = solve(b)
    for _ in range(2):
        c = c + solve(grad(c)[1])
    R, g = grad(c)
    rho = float(np.linalg.norm(R))
    eta = math.sqrt(max(float(g @ solve(g)), 0.0))
    err = n * _EPS * float(np.linalg.norm((np.abs(D) * np.abs(c)) @ np.abs(U) + np.abs(A)))
    eps_perp = math.sqrt(n * lam_perp)
    lower = max(0.0, rho - 2 * eta - eps_perp - err)
    timings["solve"] = time.perf_counter() - t
    return _Relaxation(G, b, c, rank, tau, lam_low, rho, lower, err, eps_perp, eig)


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


# ---------------------------------------------------------------------------------------------
# The decision


def _decide(U, D, A, dtype, *, tol, method, time_limit, activation, skip_kind):
    t0 = time.perf_counter()
    n, d = U.shape
    timings: dict[str, float] = {}
    t = time.perf_counter()
    tol = _resolve_tol(tol, U, D, A, dtype)
    UUt = U @ U.T
    failed, min_sin = _hypotheses(U, D, UUt)
    timings["hypotheses"] = time.perf_counter() - t
    rel = _relax(U, D, A, UUt, timings)
    c = rel.c
    dist01 = float(np.max(np.abs(c - np.clip(np.round(c), 0, 1)), initial=0.0))
    sigma = math.sqrt(max(rel.lam_low, 0.0))
    radius = (d * tol + rel.rho + rel.err) / sigma if sigma > 0 else None

    found, residual, how, why = None, None, None, None
    t = time.perf_counter()
    lower, target = rel.lower, "−I" if skip_kind == "identity" else "−A"
    if method in ("auto", "relaxation"):
        if lower > d * tol:
            how = "relaxation"
            why = (f"no real c brings Σ c_i M_i within {_fmt(lower)} (Frobenius) of {target}, "
                   f"above d·tol = {_fmt(d * tol)}")
        elif radius is not None and radius < 0.5:
            how = "rounding"
            m = c > 0.5
            residual = float(np.max(np.abs(_miss(U, D, A, m))))
            if residual <= tol:
                found = m
            else:
                why = (f"the real solution c is unique (rank n = {n}) and every valid m lies within "
                       f"δ = {_fmt(radius)} < 1/2 of it, so round(c) is the only candidate; "
                       f"it misses by {_fmt(residual)} > tol")
        else:
            lower = max(lower, _box_lower(U, D, A, rel, target=2 * d * tol))
            if lower > d * tol:
                how = "relaxation"
                why = (f"no c in [0,1]^{n} brings Σ c_i M_i within {_fmt(lower)} (Frobenius) of "
                       f"{target}, above d·tol = {_fmt(d * tol)}")
            elif method == "relaxation":
                how = "relaxation"
                why = (f"undecided: the relaxation leaves freedom (rank G = {rel.rank}, n = {n}); "
                       "use method='auto' or 'milp'")
    if how is None and method in ("auto", "milp"):
        how = "milp"
        outcome, found, form = _milp(U, D, A, rel, tol, time_limit)
        if outcome == "none":
            why = (f"HiGHS proved m ∈ {{0,1}}^{n} infeasible for Σ m_i M_i = −A within tol "
                   f"({form} constraints)")
        elif outcome.startswith("undecided"):
            why = outcome
    if how is None:
        how = "exhaustive"
        found, best = _exhaustive(U, D, A, rel, tol)
        if found is None:
            why = f"none of the 2^{n} subsets is within tol; the closest misses by {_fmt(best)} (Frobenius)"
    timings["search"] = time.perf_counter() - t

    if found is not None:
        S = np.flatnonzero(found)
        residual = float(np.max(np.abs(_miss(U, D, A, found))))
        status = "absorbable"
        why = f"W_down[:,S] W_up[S,:] = {target} within tol"
    else:
        S = None
        if why.startswith("undecided"):
            status, why = "undecided", why.removeprefix("undecided: ")
        elif failed:
            status = "degenerate"
            why = f"no S exists ({why}), but Thm 8/10 needs nondegenerate weights"
        else:
            status = "not_absorbable"
            why = f"no S exists: {why}"
    return Certificate(
        status=status, S=S, method=how, reason=why, d=d, n=n, tol=tol, residual=residual,
        relaxation_residual=rel.rho, lower_bound=lower, rank=rel.rank, dist01=dist01,
        radius=radius, nondegenerate=not failed, failed=failed, min_row_sin=min_sin,
        skip=skip_kind, input_dtype=str(dtype), activation=activation,
        seconds=time.perf_counter() - t0, timings=timings,
    ), rel


def _check_method(method, time_limit):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")


def find_absorbing_set(
    params: MLPParams,
    *,
    skip=None,
    tol: float | None = None,
    time_limit: float = 60.0,
    method: str = "auto",
    activation: str | None = None,
) -> Certificate:
    """Decide whether some ``S`` has ``W_down[:,S] W_up[S,:] = −A`` (Thm 8/10, Lemma 4).

    Args:
      params: one ungated block, ``up`` = ``W_up`` ``(n, d)``, ``down`` = ``W_down`` ``(d, n)``
        (NumPy or JAX, any real dtype; checked in float64, the input dtype is recorded). A
        leading draws axis belongs to :func:`find_absorbing_sets`; gated params raise.
      skip: ``A`` ``(d, d)``; ``None`` is ``I``. Singular or ill-conditioned (condition number
        above ``1/√eps``) raises ``ValueError``.
      tol: entrywise tolerance on ``W_down[:,S] W_up[S,:] + A``; default :func:`default_tol`.
      time_limit: seconds for the MILP; reaching it gives ``"undecided"``, never a guess.
      method: ``"auto"`` (relaxations, rounding, then MILP), ``"relaxation"`` (relaxations and
        rounding only), ``"milp"`` (straight to the MILP) or ``"exhaustive"`` (all ``2^n``
        subsets, ``n ≤ 24``).
      activation: optional name, recorded; gated and homogeneous activations raise, since other
        results decide them. Thm 8/10 covers ``relu`` and ``gelu``; for other activations with
        ``σ(z) − σ(−z) = z`` an ``S`` still gives the absorber, but "no S" proves nothing.

    Returns:
      a :class:`Certificate`; ``str(cert)`` is a readable summary, ``cert.to_dict()`` is JSON.
    """
    _check_method(method, time_limit)
    act = _check_activation(activation)
    U, D, dtype = _weights(params, batched=False)
    A = _skip(skip, U.shape[1])
    return _decide(U, D, A, dtype, tol=tol, method=method, time_limit=time_limit, activation=act,
                   skip_kind="identity" if skip is None else "matrix")[0]


def find_absorbing_sets(
    params: MLPParams,
    *,
    skip=None,
    tol: float | None = None,
    time_limit: float = 60.0,
    method: str = "auto",
    activation: str | None = None,
    progress: bool = True,
) -> list[Certificate]:
    """:func:`find_absorbing_set` for each block along a leading draws axis (``models.sample``).

    ``params.up`` ``(draws, n, d)``, ``params.down`` ``(draws, d, n)``; ``skip`` is ``None``,
    one ``(d, d)`` matrix for all draws, or ``(draws, d, d)``. ``tol`` is per draw when ``None``.
    A plain loop: small blocks take about a millisecond each (``d = 3, n = 12``: over a thousand
    draws per second on two cores, see ``experiments/bench_condition.py``), so a batched
    eigensolver would not change the picture; the MILP, when needed, is per draw anyway.
    ``progress`` shows a tqdm bar over the draws (the MILP can take up to ``time_limit`` each).
    """
    _check_method(method, time_limit)
    act = _check_activation(activation)
    U, D, dtype = _weights(params, batched=True)
    draws, n, d = U.shape
    sk = None if skip is None else np.asarray(skip)
    if sk is None or sk.shape == (d, d):
        skips = [_skip(sk, d)] * draws  # one A, checked once
    elif sk.shape == (draws, d, d):
        skips = [_skip(a, d) for a in sk]
    else:
        raise ValueError(f"skip must have shape ({d}, {d}) or ({draws}, {d}, {d}), got {sk.shape}")
    kind = "identity" if skip is None else "matrix"
    from tqdm.auto import tqdm

    return [
        _decide(U[k], D[k], skips[k], dtype, tol=tol, method=method,
                time_limit=time_limit, activation=act, skip_kind=kind)[0]
        for k in tqdm(range(draws), desc="find_absorbing_sets", unit="draw", disable=not progress)
    ]


# ---------------------------------------------------------------------------------------------
# The absorber and the distance


def absorber(
    params: MLPParams,
    S,
    *,
    skip=None,
    tol: float | None = None,
    check: bool = True,
) -> MLPParams:
    """The residual-free block that equals ``x ↦ A x + W_down σ(W_up x)``.

    ``V_up = W_up`` with the rows in ``S`` negated, ``V_down = W_down``. For activations with
    ``σ(z) − σ(−z) = z`` (relu, gelu, gelu_tanh, silu, softplus):
    ``V_down σ(V_up x) = W_down σ(W_up x) − W_down[:,S] W_up[S,:] x``, which is
    ``A x + W_down σ(W_up x)`` exactly when ``W_down[:,S] W_up[S,:] = −A``. The same weights serve
    every invertible ``A`` (Lemma 4: the reduced block has ``V_down' = A⁻¹W_down``, and
    multiplying back by ``A`` returns ``W_down``); ``skip`` only changes the condition checked.

    Args:
      params: ungated block ``(W_up (n, d), W_down (d, n))``.
      S: indices ``(|S|,)`` or a boolean mask ``(n,)``.
      skip: ``A`` ``(d, d)``, ``None`` = ``I``.
      tol, check: with ``check=True`` a set with ``‖W_down[:,S] W_up[S,:] + A‖_max > tol``
        (default :func:`default_tol`) raises ``ValueError``.

    Returns:
      ``MLPParams`` of JAX arrays ``(V_up (n, d), V_down (d, n))`` in the dtype of ``params``
      (as far as ``jax_enable_x64`` allows).
    """
    U, D, dtype = _weights(params, batched=False)
    n, d = U.shape
    m = _mask(S, n)
    if check:
        A = _skip(skip, d)
        tol = _resolve_tol(tol, U, D, A, dtype)
        miss = float(np.max(np.abs(_miss(U, D, A, m))))
        if not miss <= tol:
            raise ValueError(
                f"S does not satisfy W_down[:,S] W_up[S,:] = −A: entrywise miss {miss:.3g} > tol {tol:.3g}"
            )
    up = jnp.asarray(params.up)
    sign = jnp.asarray(np.where(m, -1, 1), dtype=up.dtype)
    return MLPParams(up * sign[:, None], jnp.asarray(params.down))


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


def distance(
    params: MLPParams,
    *,
    skip=None,
    tol: float | None = None,
    time_limit: float = 10.0,
) -> Distance:
    """Place a block between "exactly absorbable" (0) and "as far as the zero map" (1).

    All numbers are ``‖Σ m_i M_i + A‖_F / ‖A‖_F`` (``‖A‖_F = √d`` for ``A = I``):

    * ``lower``: certified, no ``S`` gets closer; the larger of the real relaxation's bound
      (``relaxation``, see :func:`find_absorbing_set`; 0 once ``n ≥ d²`` generically) and the
      box relaxation over ``c ∈ [0,1]^n`` (``box``, projected gradient and its Frank–Wolfe gap).
    * ``upper``, attained by ``S``: an absorbing set when the decision finds one, the exact
      minimum for ``n ≤ 16``, else the best local search (single-unit flips) started from ``∅``
      and from thresholds of the relaxed solution.

    ``time_limit`` bounds the MILP of the decision.
    """
    U, D, dtype = _weights(params, batched=False)
    n, d = U.shape
    A = _skip(skip, d)
    cert, rel = _decide(U, D, A, dtype, tol=tol, method="auto", time_limit=time_limit,
                        activation=None, skip_kind="identity" if skip is None else "matrix")
    norm_a = float(np.linalg.norm(A))
    if cert.S is not None:
        m, how = _mask(cert.S, n), "exact"
    elif n <= 16:
        m, how = _closest(rel), "exhaustive"
    else:
        starts = [np.zeros(n, bool)] + [rel.c > t for t in (0.25, 0.5, 0.75)]
        cands = [_local_search(rel.G, rel.b, s, 10 * n) for s in starts]
        m, how = min(cands, key=lambda k: np.linalg.norm(_miss(U, D, A, k))), "local"
    upper = float(np.linalg.norm(_miss(U, D, A, m))) / norm_a
    box = _box_lower(U, D, A, rel) / norm_a
    return Distance(max(rel.lower / norm_a, box), upper, np.flatnonzero(m), how,
                    rel.lower / norm_a, box, cert)


def _box_lower(U, D, A, rel: _Relaxation, *, target: float = math.inf, iters: int = 3000) -> float:
    """Certified ``min_{c ∈ [0,1]^n} ‖Σ c_i M_i + A‖_F ≥`` this.

    ``f(c) = ‖R‖_F²`` (``R = −A − Σ c_i M_i``) is convex with gradient ``−2g``, ``g = Kᵀ vec R``,
    so at any ``c`` in the box ``min f ≥ f(c) + Σ_i min(2 g_i c_i, −2 g_i (1 − c_i))`` (the
    Frank–Wolfe gap). ``c`` comes from accelerated projected gradient (FISTA) on the Gram form;
    every 25 steps the bound is evaluated with exact residuals, less their rounding error, and the
    loop stops once it exceeds ``target``, once ``f`` itself is below ``target`` (no bound can
    exceed it then), or when the gap closes.
    """
    G, b = rel.G, rel.b
    step = 1.0 / max(float(np.max(np.sum(np.abs(G), axis=1))), np.finfo(float).tiny)  # 1/‖G‖_∞
    c = y = np.clip(rel.c, 0.0, 1.0)
    t, best = 1.0, 0.0
    for k in range(iters):
        c_next = np.clip(y - step * (G @ y - b), 0.0, 1.0)
        t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
        y = c_next + ((t - 1) / t_next) * (c_next - c)
        c, t = c_next, t_next
        if k % 25 == 24 or k == iters - 1:
            f, bound = _frank_wolfe(U, D, A, c)
            best = max(best, bound)
            if best > target or f - bound**2 <= 1e-9 * f or math.sqrt(f) <= target < math.inf:
                break
    return best


def _frank_wolfe(U, D, A, c) -> tuple[float, float]:
    """``(‖R‖_F², certified lower bound on min_box ‖R‖_F)`` at ``c ∈ [0,1]^n``."""
    n, d = U.shape
    R = -A - (D * c) @ U
    g = np.einsum("ki,ki->i", D, R @ U.T)
    f = float(np.sum(R * R))
    bound = f + float(np.sum(np.minimum(2 * g * c, -2 * g * (1 - c))))
    err = n * _EPS * float(np.linalg.norm((np.abs(D) * c) @ np.abs(U) + np.abs(A)))
    err_g = (err + 2 * d * _EPS * math.sqrt(f)) * np.linalg.norm(D, axis=0) * np.linalg.norm(U, axis=1)
    margin = 2 * math.sqrt(f) * err + err**2 + 2 * float(np.sum(err_g))
    return f, math.sqrt(max(bound - margin, 0.0))


def _closest(rel: _Relaxation) -> np.ndarray:
    """The mask minimising ``‖Σ m_i M_i + A‖_F`` over all ``2^n`` (one chunk: ``n ≤ 16``)."""
    (M,) = _all_masks(rel.b.size)
    return M[int(np.argmin(_quadratic(M, rel.G, rel.b)))] > 0.5
