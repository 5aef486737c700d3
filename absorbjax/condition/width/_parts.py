"""Minimal extra width, the parts: atoms (target units the even part cannot tell apart), ranks
(exact or certified), the construction of the wider absorber and its error, and the search over
sets ``S`` and flats ``P`` (see :mod:`absorbjax.condition.width` for the argument)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction

import numpy as np
from scipy import linalg as sla, special

from absorbjax.condition._arith import EPS
from absorbjax.models import MLPParams

PROVED = ("relu", "gelu")  # activations whose even-part (atom) argument is proved bias-free
CHUNK = 1 << 14


# ---------------------------------------------------------------------------------------------
# NumPy float64 activations (the verification must not depend on jax_enable_x64)

NUMPY = {
    "relu": lambda z: np.maximum(z, 0.0),
    "gelu": lambda z: z * special.ndtr(z),
    "gelu_tanh": lambda z: 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3))),
    "silu": lambda z: z * special.expit(z),
    "softplus": lambda z: np.logaddexp(0.0, z),
}


# ---------------------------------------------------------------------------------------------
# Atoms: merge target units that the even part cannot tell apart


def atoms(U, D, A, act: str, exact: bool):
    """``(Ŵ (L, d), Ũ (d, L), A', groups)``: the live atoms of ``A x + D σ(U x)``.

    ReLU merges rows on one line (``w_i = t_i ŵ``): ``u σ(t ŵ·x) = |t| u σ(ŵ·x) − [t<0] |t| u ŵ·x``
    (``A' += Σ_{t_i<0} t_i u_i ŵᵀ``, ``ũ = Σ |t_i| u_i``); GELU merges only ``w_i = ±ŵ``. Zero rows
    and atoms with ``ũ = 0`` leave the block. Other activations are not merged. Parallelism is
    tested exactly (rational arithmetic on the float64 values).
    """
    n, d = U.shape
    keys: dict = {}
    for i in range(n):
        w = U[i]
        nz = np.flatnonzero(w)
        if act in PROVED and nz.size == 0:
            continue  # σ(0) = 0: a zero row contributes nothing
        if act == "relu":
            k0 = int(nz[0])
            key = tuple(Fraction(float(x)) / Fraction(float(w[k0])) for x in w)
        elif act == "gelu":
            sign = 1.0 if w[nz[0]] > 0 else -1.0
            key = tuple((sign * w).tolist())
        else:
            key = i
        keys.setdefault(key, []).append(i)
    Ap = A.copy()
    rows, cols, groups = [], [], []
    for members in keys.values():
        w0 = U[members[0]]
        k0 = int(np.flatnonzero(w0)[0]) if w0.any() else 0
        rep = w0 / math.gcd(*(int(x) for x in w0)) if exact and act == "relu" else w0
        t = np.array([U[i, k0] / rep[k0] if rep[k0] else 1.0 for i in members])
        if exact:
            t = np.round(t)
        u = D[:, members] @ np.abs(t)
        neg = t < 0
        if neg.any():
            Ap = Ap + np.outer(D[:, np.array(members)[neg]] @ t[neg], rep)
        if act in PROVED and not u.any():
            continue
        rows.append(rep)
        cols.append(u)
        groups.append(members)
    L = len(rows)
    W = np.array(rows).reshape(L, d)
    Uc = np.array(cols).T.reshape(d, L)
    return W, Uc, Ap, groups


# ---------------------------------------------------------------------------------------------
# Ranks: exact (integers, python-flint) or numerical (singular values above a threshold)


def integer_matrix_rank(M: np.ndarray) -> int:
    """The rank of an integer matrix ``M``, exactly (python-flint ``fmpz_mat``); not
    :func:`absorbjax.dimension.exact_rank`, a Jacobian's rank mod a prime at a rational point."""
    import flint

    if M.size == 0:
        return 0
    return flint.fmpz_mat([[int(x) for x in row] for row in M]).rank()


def numeric_rank(M: np.ndarray, thr: float) -> int:
    if M.size == 0:
        return 0
    return int(np.sum(np.linalg.svd(M, compute_uv=False) > thr))


# ---------------------------------------------------------------------------------------------
# The construction


def construct(W, Uc, Ap, S, G, p, n_total):
    """The absorber of ``A' x + Ũ σ(Ŵ x)`` for flips ``S``, duplicates ``G`` and ``p`` pairs.

    Units: ``(ŵ_a, ũ_a)`` for plain atoms, ``(−ŵ_a, ũ_a)`` for ``a ∈ S``,
    ``(ŵ_a, ũ_a + a_a), (−ŵ_a, −a_a)`` for ``a ∈ G``, ``(√s_q z_q, √s_q y_q), (−√s_q z_q, −√s_q y_q)``
    for the ``p`` leading singular triples of ``M_S (I − Π_G)``, then zero units up to ``n_total``.
    Uses ``σ(z) − σ(−z) = z``. Returns ``(MLPParams, residual, a, (b, v))``.
    """
    L, d = W.shape
    S, G = np.asarray(S, int), np.asarray(G, int)
    M = Ap + Uc[:, S] @ W[S]
    WG = W[G]
    if G.size:
        pinv = np.linalg.pinv(WG)
        coef = M @ pinv  # (d, |G|): M Π_G = coef Ŵ_G
        B = M - coef @ WG
        coef = coef + (B @ WG.T) @ (pinv.T @ pinv)  # one step of refinement on the normal equations
        B = M - coef @ WG
    else:
        coef, B = np.zeros((d, 0)), M
    Y, s, Zt = np.linalg.svd(B)
    root = np.sqrt(s[:p])
    b, v = Y[:, :p] * root, root[:, None] * Zt[:p]
    residual = float(np.linalg.norm(M - coef @ WG - b @ v))
    sign = np.ones(L)
    sign[S] = -1.0
    ups = [W * sign[:, None], -WG, v, -v]
    downs = [Uc.copy(), -coef, b, -b]
    if G.size:
        downs[0][:, G] += coef
    up, down = np.concatenate(ups), np.concatenate(downs, axis=1)
    pad = n_total - up.shape[0]
    if pad > 0:
        up = np.concatenate([up, np.zeros((pad, d))])
        down = np.concatenate([down, np.zeros((d, pad))], axis=1)
    return MLPParams(up, down), residual, coef, (b, v)


def block_error(U, D, A, V: MLPParams, act: str, seed: int = 0, count: int = 256) -> float:
    """``max_k ‖f(x_k) − g(x_k)‖ / ‖A x_k‖`` for ``f(x) = A x + D σ(U x)``, ``g = V_down σ(V_up x)``:
    the error against the skip's output, ``‖x_k‖`` log-uniform in 1e-3..1e3. (Not ``/‖f(x_k)‖``: an
    absorbable ReLU block vanishes on a cone; not against ``‖D‖‖U‖``, which cancellation inflates.)
    Where ``A x_k = 0`` (a singular skip) a nonzero gap counts as ``inf`` and no gap as 0."""
    sigma = NUMPY[act]
    d = U.shape[1]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((count, d))
    x *= 10.0 ** rng.uniform(-3, 3, (count, 1)) / np.linalg.norm(x, axis=1, keepdims=True)
    f = x @ A.T + sigma(x @ U.T) @ D.T
    g = sigma(x @ V.up.T) @ V.down.T
    gap, skip = np.linalg.norm(f - g, axis=1), np.linalg.norm(x @ A.T, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):  # a singular A: A x = 0 allows no gap at all
        ratio = np.where(skip > 0, gap / np.where(skip > 0, skip, 1.0), np.where(gap == 0, 0.0, np.inf))
    return float(np.max(ratio))


# ---------------------------------------------------------------------------------------------
# The search over S and flats P


@dataclasses.dataclass
class Search:
    W: np.ndarray
    Uc: np.ndarray
    Ap: np.ndarray
    exact: bool
    thr: float  # robustness threshold: an M within thr (2-norm) of rank r counts as rank r
    err: float  # rounding error of a computed M_S (2-norm)
    rank_hi: int  # an upper bound on rank Ŵ
    budget: int  # flats examined per row space, at most
    memo: dict = dataclasses.field(default_factory=dict)

    def rank(self, M) -> int:
        return integer_matrix_rank(M) if self.exact else numeric_rank(M, self.thr)

    def lb(self, rho: int) -> int:
        """Lower bound on ``|G| + 2p`` over every ``G`` when ``rank M_S ≥ rho``."""
        return rho if rho <= self.rank_hi else 2 * rho - self.rank_hi

    def key(self, M):
        if self.exact:
            import flint

            R = flint.fmpq_mat([[int(x) for x in row] for row in M]).rref()[0]
            return tuple(str(x) for x in R.entries())
        return None

    def flats(self, M, S, upper):
        """``(cost, S', G, p, complete)``: the best ``P ⊇ rowspace M`` with cost below ``upper``.

        ``P = rowspace M + span T`` for rows ``T`` independent modulo ``rowspace M``;
        ``cost(P) = 2 dim P − rank{ŵ_a ∈ P} ≥ dim P``, so only ``dim P < upper`` is searched.
        """
        key = self.key(M)
        if key is not None and key in self.memo:
            best = self.memo[key]
        else:
            best = self._flats(M, upper)
            if key is not None:
                self.memo[key] = best
        cost, rows_in, complete = best
        if rows_in is None:
            return cost, None, None, None, complete
        S2 = np.array([a for a in S if a not in rows_in], int)
        G = basis(self.W, rows_in, self.rank)
        M2 = self.Ap + self.Uc[:, S2] @ self.W[S2]
        p = self.rank(np.vstack([M2, self.W[G]])) - len(G)
        return len(G) + 2 * p, S2, np.array(G, int), p, complete

    def leaf_bound(self, M, S, upper) -> int:
        """Float weights: ``min_G |G| + 2 rrank(M (I − Π_G))`` over ``G`` outside ``S`` with
        ``|G| < upper`` (``rrank``: certified robust rank; a numerically rank-``r`` ``Ŵ_G`` of
        ``g`` rows may span ``g − r`` more directions, each lowering the rank by at most one).
        Returns ``upper`` when nothing lower is possible; ``0`` past the budget (no bound)."""
        d = M.shape[0]
        free = [a for a in range(self.W.shape[0]) if a not in set(S.tolist())]
        low, seen = upper, 0
        for g in range(0, upper):
            if g >= low:
                break
            for G in itertools.combinations(free, g):
                seen += 1
                if seen > self.budget:
                    return 0
                if g:
                    Y, sv, Zt = np.linalg.svd(self.W[list(G)], full_matrices=False)
                    r = int(np.sum(sv > 64 * d * EPS * sv[0]))
                    P = np.eye(d) - Zt[:r].T @ Zt[:r]
                    margin = 64 * d * EPS * (sv[0] / sv[r - 1]) * np.linalg.norm(M, 2)
                else:
                    P, r, margin = np.eye(d), 0, 0.0
                rr = int(certified_ranks((M @ P)[None], self.err + margin, self.thr)[0])
                low = min(low, g + 2 * max(0, rr - (g - r)))
        return low

    def _flats(self, M, upper):
        W, L = self.W, self.W.shape[0]
        rho = self.rank(M)
        quot = [a for a in range(L) if self.rank(np.vstack([M, W[a]])) > rho]
        best, best_rows, seen = upper, None, 0
        for t in range(0, W.shape[1] - rho + 1):
            if rho + t >= best:
                break
            for T in itertools.combinations(quot, t):
                seen += 1
                if seen > self.budget:
                    return best, best_rows, False
                P = np.vstack([M, W[list(T)]])
                dim = self.rank(P)
                if dim != rho + t:
                    continue
                rows_in = [a for a in range(L) if a not in quot or a in T or self.rank(np.vstack([P, W[a]])) == dim]
                cost = 2 * dim - self.rank(W[rows_in])
                if cost < best:
                    best, best_rows = cost, rows_in
        return best, best_rows, True


def basis(W, rows, rank) -> list:
    """An independent subset of ``rows`` spanning the same space, well conditioned: the columns
    that QR with pivoting picks first (checked with ``rank``; greedy in that order)."""
    if not rows:
        return []
    piv = sla.qr(W[rows].T, pivoting=True, mode="r")[1]
    G: list = []
    for a in [rows[i] for i in piv]:
        if rank(W[G + [a]]) == len(G) + 1:
            G.append(a)
    return sorted(G)


def certified_ranks(Ms: np.ndarray, err: float, thr: float, margin: float = 0.0) -> np.ndarray:
    """A certified lower bound on ``rank`` of every matrix within ``thr`` of ``M_exact`` for each
    computed ``M`` in ``Ms`` (``‖M − M_exact‖_2 ≤ err``; ``margin`` adds a Weyl tail).

    First Hadamard's inequality on the LU determinant: ``σ_min ≥ |det| / ‖M‖_F^{d−1}``, less the
    LU backward error ``2 d³ 2^{d−1} eps max|M|`` (partial pivoting's worst-case growth); the
    matrices it does not certify get their singular values (backward error ``8 d² eps σ_1``).
    """
    B, d = Ms.shape[0], Ms.shape[-1]
    out = np.zeros(B, int)
    mx = np.max(np.abs(Ms), axis=(1, 2))
    e_lu = 2 * d**3 * 2 ** (d - 1) * EPS * mx
    fro = np.linalg.norm(Ms, axis=(1, 2))
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        det = np.abs(np.linalg.det(Ms)) * (1 - 2 * d * EPS)
        smin = det / (fro + e_lu) ** (d - 1) - e_lu
    full = smin - err - margin > thr
    out[full] = d
    rest = np.flatnonzero(~full)
    if rest.size:
        s = np.linalg.svd(Ms[rest], compute_uv=False)
        e_svd = 8 * d * d * EPS * s[:, :1]
        out[rest] = np.sum(s - e_svd - err - margin > thr, axis=1)
    return out


def masks(bits: int, start: int, stop: int) -> np.ndarray:
    idx = np.arange(start, stop)
    return ((idx[:, None] >> np.arange(bits)) & 1).astype(bool)
