"""Real relaxations of ``Σ m_i M_i = −A``: least squares on the Gram form and the box ``[0,1]^n``."""

from __future__ import annotations

import dataclasses
import functools
import math
import time

import numpy as np
from scipy import linalg as sla
from scipy.linalg import lapack

from absorbjax.condition import _screen as screen
from absorbjax.condition._arith import EPS, certify_pd, gamma


@dataclasses.dataclass
class Relaxation:
    G: np.ndarray
    b: np.ndarray
    c: np.ndarray
    rank: int
    tau: float
    lam_low: float  # certified lower bound on λ_min(G) (0 when rank < n)
    rho: float  # ‖Σ c_i M_i + A‖_F at the computed c
    lower: float  # certified lower bound on ‖Σ m_i M_i + A‖_F, m ∈ {0,1}^n
    err: float  # rounding-error bound on rho (rigorous)
    eps_perp: float  # reach of the dropped eigendirections over the cube [0,1]^n (steers the MILP only)
    eig: tuple[np.ndarray, np.ndarray] | None  # (λ, Q) when computed

    def radius(self, threshold: float) -> float | None:
        """``δ``: every ``m`` whose exact miss is within ``threshold`` has ``‖m − c‖_2 ≤ δ``
        (``‖K(m − c)‖ ≤ threshold + ρ_exact``, ``‖K v‖ ≥ √λ_low ‖v‖``); ``None`` without a certified
        ``λ_low > 0``."""
        if not self.lam_low > 0:
            return None
        return (threshold + self.rho + self.err) / math.sqrt(self.lam_low) * (1 + 8 * EPS)


def _cho_solve(cho, x: np.ndarray) -> np.ndarray:
    """``sla.cho_solve(cho, x)`` bit for bit (the same LAPACK ``dpotrs``), without its wrapper's checks,
    which cost more than the solve for the small ``G`` of tiny blocks (30 solves a relaxation)."""
    y, info = lapack.dpotrs(cho[0], x, lower=cho[1])
    if info != 0:
        raise ValueError(f"dpotrs: illegal argument {-info}")
    return y


def _positive_definite(G: np.ndarray):
    """``(solve, λ_low)`` with ``λ_min(G) ≥ λ_low > 0`` proved, else ``None``.

    Cholesky of ``G``, 30 steps of inverse iteration for a Rayleigh quotient ``λ̂ ≥ λ_min``, then
    :func:`_arith.certify_pd` with ``λ_low = λ̂/4``: a second Cholesky, of ``G − (λ̂/4 + c) I`` with
    Rump's shift ``c ≈ γ_{n+1} tr(G)`` (Rump 2006, BIT 46, Thm 2.3), whose success proves
    ``λ_min(G) ≥ λ̂/4``. Two ``O(n³/3)`` factorisations instead of an eigensolver.
    """
    n = G.shape[0]
    try:
        cho = sla.cho_factor(G, check_finite=False)
    except np.linalg.LinAlgError:
        return None
    solve = functools.partial(_cho_solve, cho)
    x = np.random.default_rng(0).standard_normal(n)
    for _ in range(30):
        x = solve(x)
        x /= np.linalg.norm(x)
    mu = float(x @ G @ x) / 4
    if not (mu > 0 and certify_pd(G, mu)):
        return None
    return solve, mu


def relax(U, D, A, UUt, timings) -> Relaxation:
    """Least squares ``min_c ‖Σ c_i M_i + A‖_F`` from ``G = (W_downᵀW_down) ⊙ (W_up W_upᵀ)``.

    ``τ = 4·max(n,d)·eps·‖G‖_∞`` is the rank threshold: it only steers (which eigendirections the
    solve keeps); nothing certified rests on it. Positive definite ``G`` (proved by Cholesky with
    Rump's shift, :func:`_positive_definite`) has rank ``n`` and a certified ``λ_low``; otherwise the
    eigendecomposition is restricted to eigenvalues above ``τ`` (``λ_low`` then proved the same way
    when the rank is ``n``, else 0). Two steps of refinement with exact residuals
    ``R = −A − Σ c_i M_i`` make ``c`` accurate without forming ``K``.

    The lower bound, for every real ``m`` (hence every ``m ∈ {0,1}^n``): least squares has
    ``ρ_min = √(ρ² − η²) ≥ ρ − η`` exactly, ``η = ‖K(c − c*)‖ ≤ ‖g‖/√λ_min(KᵀK)`` with
    ``g = Kᵀ vec R``; so ``lower = ρ − err − ‖g‖_up/√λ_low`` with ``‖g‖`` and ``λ_low`` bounded
    rigorously, and 0 without a proved ``λ_low > 0`` (the box relaxation decides those). This
    replaces ``ρ − 2η`` with ``η² = gᵀG⁺g`` computed, whose factor 2 was a margin, not a proof.
    ``err = γ_{n+2}(1 + γ_{n+2})‖|W_down| diag|c| |W_up| + |A|‖_F`` (plus ``γ_{d²+2}ρ``)
    bounds the rounding in ``ρ`` (Higham §3.1).
    """
    n, d = U.shape
    t = time.perf_counter()
    G = (D.T @ D) * UUt
    b = -np.einsum("ki,ki->i", D, A @ U.T)
    tau = 4 * max(n, d) * EPS * float(np.max(np.sum(np.abs(G), axis=1)))
    # The computed G differs from the true KᵀK by E, |E_ij| ≤ 2γ_d (|W_down|ᵀ|W_down| ⊙
    # |W_up||W_up|ᵀ)_ij ≤ 2γ_d v_i v_j with v_i = ‖D_i‖‖U_i‖, so ‖E‖_2 ≤ gram_err.
    gram_err = 2 * (d + 1) * EPS * float(np.sum((np.linalg.norm(D, axis=0) * np.linalg.norm(U, axis=1)) ** 2))
    timings["gram"] = time.perf_counter() - t

    t = time.perf_counter()
    finite = bool(np.all(np.isfinite(G)) and np.all(np.isfinite(b)) and math.isfinite(tau) and math.isfinite(gram_err))
    pd = _positive_definite(G) if finite and tau > 0 else None
    eig, lam_perp = None, 0.0
    try:
        lam, Q = (None, None) if pd is not None or not finite else np.linalg.eigh(G)
    except np.linalg.LinAlgError:  # no eigensolver answer: no bound from it (the box relaxation decides)
        finite = False
    if pd is not None:
        (solve, lam_low), rank = pd, n
    elif not finite:  # Gram entries outside float64 (or no eigensolver): c = 0, no bound that needs G
        solve, rank, lam_low = (lambda x: np.zeros_like(x)), 0, 0.0  # noqa: E731
        lam_perp = math.inf
    else:
        keep = lam > tau
        rank = int(keep.sum())
        Qr, lr = Q[:, keep], lam[keep]
        solve = lambda x: Qr @ ((Qr.T @ x) / lr)  # noqa: E731
        # The dropped directions of the true Gram matrix reach at most λ_dropped + τ (the
        # eigensolver's backward error) + gram_err.
        lam_perp = max(float(lam[~keep].max(initial=0.0)), 0.0) + tau + gram_err if rank < n else 0.0
        lam_low = float(lam[0]) / 4 if rank == n and certify_pd(G, float(lam[0]) / 4) else 0.0
        eig = (lam, Q)
    gram_err *= 1 + 8 * (d + 2) * EPS  # the rounding of the norms in it
    lam_low = max(lam_low - gram_err, 0.0)  # a lower bound on λ_min of the true KᵀK
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
    g_n = gamma(n + 2)
    err = g_n * (1 + g_n) * float(np.linalg.norm((np.abs(D) * np.abs(c)) @ np.abs(U) + np.abs(A))) * (1 + 8 * EPS)
    err += gamma(d * d + 2) * rho  # the rounding of ‖R‖_F itself
    eps_perp = math.sqrt(n * lam_perp)
    lower = 0.0
    if lam_low > 0 and math.isfinite(rho):  # ρ_min = √(ρ² − η²) ≥ ρ − η, η = ‖K(c − c*)‖ ≤ ‖g‖/√λ_min(KᵀK)
        nu = np.linalg.norm(D, axis=0) * np.linalg.norm(U, axis=1) * (1 + 8 * (d + 2) * EPS)
        g_err = (err + gamma(2 * d + 2) * rho) * float(np.linalg.norm(nu))  # |ĝ_i − g_i| ≤ ν_i (‖ΔR‖ + γ ρ)
        g_up = (float(np.linalg.norm(g)) * (1 + gamma(n + 2)) + g_err) * (1 + 8 * EPS)
        eta_up = g_up / math.sqrt(lam_low) * (1 + 8 * EPS)
        lower = max(lower, (rho - err - eta_up) * (1 - 4 * EPS))
    timings["solve"] = time.perf_counter() - t
    return Relaxation(G, b, c, rank, tau, lam_low, rho, lower, err, eps_perp, eig)


def box_relaxation(
    U, D, A, rel: Relaxation, *, target: float = math.inf, iters: int = 3000, rtol: float = 1e-6
) -> tuple[float, np.ndarray]:
    """``(bound, c)``: a certified lower bound on ``min_{c ∈ [0,1]^n} ‖Σ c_i M_i + A‖_F`` and the
    box point ``c`` (``n``,) that gives it.

    ``f(c) = ‖R‖_F²`` (``R = −A − Σ c_i M_i``) is convex with gradient ``−2g``, ``g = Kᵀ vec R``,
    so at any ``c`` in the box ``min f ≥ f(c) + Σ_i min(2 g_i c_i, −2 g_i (1 − c_i))`` (the
    Frank–Wolfe gap, which steers the loop). Any ``c`` in the box gives a valid bound; a good ``c`` gives a tight one.
    It is found on the Gram form ``f = cᵀGc − 2bᵀc + ‖A‖_F²`` by projected Newton steps (solve
    ``G`` on the free coordinates, project, halve until ``f`` decreases: two or three steps on
    trained layers), falling back to accelerated projected gradient (FISTA with adaptive restart,
    ``iters`` steps) when a step fails (singular ``G_FF``, no decrease). The Gram form only
    steers: the loop stops once the gap is below ``rtol·f``, once ``f`` is below ``target`` (no
    bound can exceed it) or once the estimate clears ``target``; the bound returned is evaluated
    at the final ``c`` by bound (D) (:func:`_bound_at`), rigorous whatever ``c`` is.
    """
    G, b = rel.G, rel.b
    a2 = float(np.sum(A * A))
    if not (np.all(np.isfinite(G)) and np.all(np.isfinite(b))):  # no Gram form to steer by: c as given
        c = np.clip(np.nan_to_num(rel.c), 0.0, 1.0)
        return _bound_at(U, D, A, c), c

    def gram(c):  # (f, gap, g) on the Gram form; steers only
        Gc = G @ c
        f = float(c @ Gc) - 2 * float(b @ c) + a2
        g = b - Gc
        return f, -float(np.sum(np.minimum(2 * g * c, -2 * g * (1 - c)))), g

    def done(f, gap):
        return (
            gap <= rtol * max(f, 0.0)
            or math.sqrt(max(f, 0.0)) <= target < math.inf
            or math.sqrt(max(f - gap, 0.0)) > 1.01 * target
        )

    c = np.clip(rel.c, 0.0, 1.0)
    f, gap, g = gram(c)
    for _ in range(20):  # projected Newton
        if done(f, gap):
            return _bound_at(U, D, A, c), c
        free = ((c > 0) & (c < 1)) | ((c <= 0) & (g > 0)) | ((c >= 1) & (g < 0))
        F, B = np.flatnonzero(free), np.flatnonzero(~free)
        try:
            cho = sla.cho_factor(G[np.ix_(F, F)], check_finite=False)
            z = sla.cho_solve(cho, b[F] - G[np.ix_(F, B)] @ c[B], check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            break
        step = np.zeros_like(c)
        step[F] = z - c[F]
        for a in 0.5 ** np.arange(8):
            c_new = np.clip(c + a * step, 0.0, 1.0)
            f_new, gap_new, g_new = gram(c_new)
            if f_new < f:
                break
        else:
            break
        c, f, gap, g = c_new, f_new, gap_new, g_new

    n = b.size
    x = np.random.default_rng(0).standard_normal(n)
    for _ in range(30):  # λ_max(G) by power iteration; the step needs no certificate
        x = G @ x
        x /= max(float(np.linalg.norm(x)), np.finfo(float).tiny)
    step_size = 1.0 / max(1.05 * float(x @ G @ x), np.finfo(float).tiny)
    y, t, f_prev = c, 1.0, f
    for k in range(iters):
        c_next = np.clip(y - step_size * (G @ y - b), 0.0, 1.0)
        if k % 10 == 9:
            f, gap, _ = gram(c_next)
            if done(f, gap):
                c = c_next
                break
            if f > f_prev:  # adaptive restart (O'Donoghue & Candès): drop the momentum
                y, c, t, f_prev = c_next, c_next, 1.0, f
                continue
            f_prev = f
        t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
        y = c_next + ((t - 1) / t_next) * (c_next - c)
        c, t = c_next, t_next
    return _bound_at(U, D, A, c), c


def _bound_at(U, D, A, c) -> float:
    """The certified lower bound on ``min_box ‖Σ c_i M_i + A‖_F`` that the box point ``c``
    ``(n,)`` gives: bound (D) of :func:`condition._screen.dual_lower` at the test matrix
    ``Z = Σ c_i M_i + A`` (one ``O(n d²)`` pass; at that ``Z`` (D) is never below the
    Frank–Wolfe gap's bound, ``t²/f ≥ 2t − f``)."""
    return screen.dual_lower(U, D, A, A + (D * c) @ U)
