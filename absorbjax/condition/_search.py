"""A matrix-free search for a close set ``S``: best-improvement single flips, then swaps, on

    f(S) = ‖R‖_F²,   R = Σ_{i∈S} M_i + A,   M_i = W_down[:,i] W_up[i,:]   (d × d).

Flipping unit ``i`` (adding it, ``s_i = +1``, or removing it, ``s_i = −1``) changes ``f`` by
``δ_i = 2 s_i g_i + q_i`` with ``g_i = ⟨R, M_i⟩ = W_down[:,i]ᵀ R W_up[i,:]ᵀ`` and
``q_i = ‖W_down[:,i]‖² ‖W_up[i,:]‖²``; after flipping ``j`` every score moves by
``s_j G_ij``, ``G_ij = (W_down[:,i]·W_down[:,j]) (W_up[i,:]·W_up[j,:])``: one column of the Gram
matrix, ``O(n d)``, so a step never forms the ``n × n`` matrix. Flipping ``i`` and ``j`` together
changes ``f`` by ``δ_i + δ_j + 2 s_i s_j G_ij``; the swaps are searched blockwise over units
(``SWAP_BLOCK × SWAP_BLOCK`` blocks of ``G``, ``O(SWAP_BLOCK² d)`` each), the most promising
units (smallest ``δ``) first.

The numbers here only guide the search (float64, or float32 for weights stored narrower): the
caller evaluates the set it returns rigorously (:func:`absorbjax.condition._arith.miss_bound`). The
weights may be the stored arrays (memory-mapped, bfloat16): every pass over the units reads them
through the one blocked reader, :mod:`absorbjax.condition._reader` (:func:`_reader.windows` of
``CHUNK`` entries, upcast one window at a time by :func:`_reader.as_working`), never a copy of a whole
matrix.

The search stops on a :class:`Budget` of *work*, a count of multiply-adds charged before each
step from the shapes alone (a pass of scores, a Gram column, a block of swaps), so that the same
weights give the same set on every run, however loaded or fast the machine; its wall-clock
``deadline`` is only a safety stop (``Budget.stopped`` says which one ended the search).
"""

from __future__ import annotations

import math
import time

import numpy as np

from absorbjax.condition import _reader as reader
from absorbjax.condition._reader import as_working

SWAP_BLOCK = 256  # units per side of one block of swaps
CHUNK = 2**20  # entries of W_up (and of W_down) per chunk of a pass over all units (4 MiB in float32)
_CHUNK_ENTRIES = 2**30  # multiply-adds per chunk of units in the O(n d²) pass of scores


class Budget:
    """Work left to the search, in multiply-adds (deterministic: charged from the shapes of each
    step, never measured), and a wall-clock safety stop ``deadline`` (``time.perf_counter()``).

    :meth:`spend` charges one step before it is taken: ``False`` (and the step is not taken) once
    the work left cannot pay for it (``stopped = "budget"``) or the deadline has passed
    (``stopped = "time_limit"``; the one way two runs on the same weights can differ).
    ``stopped`` is ``""`` while neither has happened.

    Examples:
      >>> b = Budget(100)
      >>> b.spend(60), b.spend(60), b.stopped, b.used
      (True, False, 'budget', 60)
    """

    def __init__(self, work: float = math.inf, deadline: float = math.inf):
        self.work, self.left, self.deadline, self.stopped = work, work, deadline, ""

    @property
    def used(self) -> float:
        """The work spent so far."""
        return self.work - self.left

    def spend(self, cost: float) -> bool:
        """Charge ``cost`` multiply-adds for the next step; ``False``: stop (see :attr:`stopped`)."""
        if self.stopped:
            return False
        if cost > self.left:  # checked first: where both run out, the deterministic reason is given
            self.stopped = "budget"
            return False
        if time.perf_counter() > self.deadline:
            self.stopped = "time_limit"
            return False
        self.left -= cost
        return True


def _scalar(A: np.ndarray) -> float | None:
    """``α`` when ``A = α I`` exactly (no ``d × d`` temporary), else ``None``."""
    a = float(A[0, 0])
    diag = np.diagonal(A)
    if np.all(diag == a) and np.count_nonzero(A) == np.count_nonzero(diag):
        return a
    return None


def _per_unit(U, D, f) -> np.ndarray:
    """``f(W_up[s,:], W_down[:,s])`` ``(|s|,)`` over windows of ``CHUNK`` entries, joined ``(n,)``."""
    return reader.per_unit(U, D, f, reader.entry_block(U.shape[1], CHUNK), as_working)


def scores(
    U, D, A, m: np.ndarray, deadline: float = np.inf, budget: Budget | None = None
) -> tuple[np.ndarray, np.ndarray, float] | None:
    """``(g, q, f)`` at the set ``m``: ``g_i = W_down[:,i]ᵀ R W_up[i,:]ᵀ`` ``(n,)``,
    ``q_i = ‖W_down[:,i]‖² ‖W_up[i,:]‖²`` ``(n,)`` and ``f = ‖R‖_F²``, for ``U = W_up (n, d)``,
    ``D = W_down (d, n)``, ``A (d, d)``. ``O(n d)`` when ``R = α I``; for ``A = α I`` and
    ``|S| < d/2``, ``α a_i + Σ_{j∈S} G_ij`` in ``O(|S| n d)`` (blocks of ``SWAP_BLOCK`` units of
    ``S``); else one ``O(n d²)`` pass in chunks of units. ``None`` when ``deadline``
    (``time.perf_counter()``) passes first, or ``budget`` (:class:`Budget`) stops it."""
    n, d = U.shape
    budget = Budget(deadline=deadline) if budget is None else budget
    if not budget.spend(3 * n * d):  # q and a: O(n d)
        return None
    q = _per_unit(U, D, lambda u, dd: np.einsum("ki,ki->i", dd, dd) * np.einsum("ij,ij->i", u, u))
    alpha, S = _scalar(A), np.flatnonzero(m)
    R = None if alpha is not None and 2 * S.size < d else A + as_working(D[:, S]) @ as_working(U[S, :])
    if R is None:
        a = _per_unit(U, D, lambda u, dd: np.einsum("ki,ik->i", dd, u))  # a_i = tr M_i
        g = alpha * a
        for lo in range(0, S.size, SWAP_BLOCK):
            J = S[lo : lo + SWAP_BLOCK]
            if not budget.spend(2 * J.size * n * d):
                return None
            DJ, UJ = as_working(D[:, J]), as_working(U[J])
            for s, u, dd in reader.windows(U, D, reader.entry_block(d, CHUNK), as_working):
                g[s] += ((DJ.T @ dd) * (UJ @ u.T)).sum(axis=0)  # Σ_{j∈J} G[j, s]
        # ‖αI + P‖² = α²d + 2α tr P + ‖P‖², ‖P‖² = Σ_{i∈S} (g_i − α a_i)
        return g, q, alpha * alpha * d + alpha * float(np.sum(a[S])) + float(np.sum(g[S]))
    g = np.empty(n)
    chunk = reader.entry_block(d * d, _CHUNK_ENTRIES)  # units of d × d multiply-adds each
    if not budget.spend(S.size * d * d):  # R
        return None
    for s in reader.blocks(n, chunk):
        if not budget.spend((s.stop - s.start) * (d * d + d)):
            return None
        u, dd = reader.window(U, D, s, as_working)
        g[s] = np.einsum("ki,ki->i", dd, R @ u.T)
    return g, q, float(np.vdot(R, R))


def _column(U, D, j: int) -> np.ndarray:
    """``G[:, j] = (W_downᵀ W_down[:,j]) ⊙ (W_up W_up[j,:])`` ``(n,)``."""
    dj, uj = np.ascontiguousarray(as_working(D[:, j])), as_working(U[j])  # a strided vector makes `@` ~100x slower
    return _per_unit(U, D, lambda u, dd: (dj @ dd) * (u @ uj))


def _gram_scores(G, b, A, m: np.ndarray, budget: Budget) -> tuple[np.ndarray, np.ndarray, float] | None:
    """:func:`scores` read from the Gram form, ``G (n, n)`` and ``b_i = −⟨A, M_i⟩`` ``(n,)``, in
    ``O(n²)``: ``g = G m − b``, ``q = diag G``, ``f = mᵀG m − 2 bᵀm + ‖A‖_F²``."""
    if not budget.spend(G.shape[0] ** 2):
        return None
    x = m.astype(np.float64)
    Gm = G @ x
    return Gm - b, np.diag(G).copy(), float(x @ Gm) - 2 * float(b @ x) + float(np.vdot(A, A))


def _flip(column, m, g, j: int) -> None:
    g += (1.0 if not m[j] else -1.0) * column(j)
    m[j] = not m[j]


def _best_swap(U, D, m, delta, tol: float, budget: Budget) -> tuple[int, int] | None:
    """The first improving pair flip found, blocks of the most promising units first: ``(i, j)``
    with ``i ∈ S``, ``j ∉ S`` (a swap), or ``None`` (none improves, or ``budget`` stopped it)."""
    d = U.shape[1]
    inside, outside = np.flatnonzero(m), np.flatnonzero(~m)
    inside = inside[np.argsort(delta[inside], kind="stable")]
    outside = outside[np.argsort(delta[outside], kind="stable")]
    for a in range(0, inside.size, SWAP_BLOCK):
        I = inside[a : a + SWAP_BLOCK]
        DI, UI = as_working(D[:, I]), as_working(U[I])
        for b in range(0, outside.size, SWAP_BLOCK):
            J = outside[b : b + SWAP_BLOCK]
            if not budget.spend(I.size * J.size * (2 * d + 1)):
                return None
            G = (DI.T @ as_working(D[:, J])) * (UI @ as_working(U[J]).T)  # (|I|, |J|) block of the Gram matrix
            change = delta[I][:, None] + delta[J][None, :] - 2 * G  # s_i s_j = −1
            k = int(np.argmin(change))
            if change.flat[k] < -tol:
                return int(I[k // J.size]), int(J[k % J.size])
    return None


def descend(
    U,
    D,
    A,
    m0: np.ndarray,
    *,
    deadline: float = math.inf,
    swaps: bool = True,
    budget: Budget | None = None,
    gram: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, float] | None:
    """``(m, f)``: from the mask ``m0`` ``(n,)``, best-improvement single flips while one lowers
    ``f = ‖Σ_{i∈S} M_i + A‖_F²`` by more than ``1e-12·max(f(m0), ‖A‖²)``, then (``swaps``) the
    first improving swap of :func:`_best_swap` and flips again, until neither improves or the
    ``budget`` (:class:`Budget`: work, then its safety ``deadline``) or ``deadline``
    (``time.perf_counter()``) stops it; ``f`` the float64 estimate at ``m`` (never above the start's:
    only improving moves are made). ``None`` when it stops before the scores at ``m0`` are computed.
    At most ``20 n`` moves. With work alone (``deadline`` infinite) the result is a function of the
    weights: the same on every run. ``gram``: ``(G, b)`` of the Gram form where the caller formed it
    (``G_ij = ⟨M_i, M_j⟩``, ``b_i = −⟨A, M_i⟩``; the Gram path): the scores and each flip's column are
    read from it, ``O(n)`` a flip, instead of from the weights (``O(n d)``); the moves are the same."""
    n, d = U.shape
    budget = Budget(deadline=deadline) if budget is None else budget
    budget.deadline = min(budget.deadline, deadline)
    m = np.asarray(m0, bool).copy()
    if gram is None:
        start, column = scores(U, D, A, m, budget=budget), lambda j: _column(U, D, j)
    else:
        start, column = _gram_scores(*gram, A, m, budget), lambda j: gram[0][:, j]
    if start is None:
        return None
    g, q, f = start
    alpha = _scalar(A)
    tol = 1e-12 * max(f, float(np.vdot(A, A)) if alpha is None else alpha * alpha * A.shape[0])
    if not (np.all(np.isfinite(g)) and np.all(np.isfinite(q)) and np.isfinite(f)):
        return m, f
    flip = 2 * n * d + 4 * n  # one Gram column and the scores' update
    for _ in range(20 * n):
        delta = 2 * np.where(m, -g, g) + q
        i = int(np.argmin(delta))
        if delta[i] < -tol:
            if not budget.spend(flip):
                break
            f += float(delta[i])
            _flip(column, m, g, i)
            continue
        pair = _best_swap(U, D, m, delta, tol, budget) if swaps else None
        if pair is None or not budget.spend(2 * flip):
            break
        i, j = pair
        dij = float(np.dot(as_working(D[:, i]), as_working(D[:, j])) * np.dot(as_working(U[i]), as_working(U[j])))
        f += float(delta[i] + delta[j]) - 2 * dij
        _flip(column, m, g, i)
        _flip(column, m, g, j)
    return m, f
