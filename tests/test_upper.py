"""The attained upper bound of ``distance``: the matrix-free search over ``S`` (condition._search)."""

import time
import tracemalloc
from fractions import Fraction

import numpy as np
import pytest

from absorbjax import activations, condition
from absorbjax.condition import _search as search
from absorbjax.models import MLPParams


def _planted(seed: int, d: int, n: int, scale: float = 0.05):
    """``W_up (n, d)``, ``W_down (d, n)`` whose units ``S`` (``d`` of them) give ``Σ_{i∈S} M_i = −I``
    (``M_i = −q_iᵀ q_i``, ``q_i`` the orthonormal rows of ``Q``) among small random units; returns ``(U, D, S)``."""
    rng = np.random.default_rng(seed)
    U, D = scale * rng.standard_normal((n, d)), scale * rng.standard_normal((d, n))
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    S = np.sort(rng.choice(n, d, replace=False))
    U[S], D[:, S] = Q, -Q.T  # Σ_k −Q[k]ᵀ Q[k] = −QᵀQ = −I
    return U, D, S


def _anti_aligned(seed: int, d: int, n: int, share: float = 0.3):
    """A Gaussian block where a ``share`` of units have ``W_down[:,i] ≈ −W_up[i,:]``: trained-like,
    some ``S`` improves on ``∅`` but none absorbs."""
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((n, d)) / np.sqrt(d)
    D = rng.standard_normal((d, n)) / np.sqrt(n)
    k = int(share * n)
    D[:, :k] = -0.3 * U[:k].T + 0.3 * D[:, :k]
    return MLPParams(U, D)


def _exact_ratio2(U, D, A, S, c=Fraction(1)) -> Fraction:
    """``‖c·W_down[:,S] W_up[S,:] + A‖_F² / ‖A‖_F²`` in rational arithmetic."""
    d = A.shape[0]
    F = lambda x: Fraction(float(x))  # noqa: E731 (stored float64 values are exact rationals)
    num = Fraction(0)
    for k in range(d):
        for j in range(d):
            v = c * sum((F(D[k, i]) * F(U[i, j]) for i in S), Fraction(0)) + F(A[k, j])
            num += v * v
    return num / sum(F(a) ** 2 for a in A.ravel())


@pytest.mark.parametrize("seed", range(3))
def test_descend_finds_a_planted_set(seed):
    U, D, S = _planted(seed, 6, 40)
    m, f = search.descend(U, D, np.eye(6), np.zeros(40, bool), deadline=time.perf_counter() + 10)
    assert np.flatnonzero(m).tolist() == S.tolist()
    assert abs(f) < 1e-9 and np.linalg.norm(D[:, m] @ U[m] + np.eye(6)) < 1e-9


def test_swaps_leave_a_one_flip_optimum():
    """From a set that no single flip improves, a swap still lowers ``f`` where one does."""
    rng = np.random.default_rng(4)
    d, n = 4, 30
    U, D = rng.standard_normal((n, d)), rng.standard_normal((d, n)) / 3
    A = np.eye(d)
    f = lambda m: float(np.sum((D[:, m] @ U[m] + A) ** 2))  # noqa: E731
    m1, f1 = search.descend(U, D, A, np.zeros(n, bool), deadline=time.perf_counter() + 10, swaps=False)
    m2, f2 = search.descend(U, D, A, m1, deadline=time.perf_counter() + 10)
    assert np.isclose(f1, f(m1)) and np.isclose(f2, f(m2)) and f2 <= f1
    for i in range(n):  # m2 is a 1-flip and swap optimum
        assert f(np.where(np.arange(n) == i, ~m2, m2)) >= f2 - 1e-9
    for i in np.flatnonzero(m2):
        for j in np.flatnonzero(~m2):
            k = m2.copy()
            k[i], k[j] = False, True
            assert f(k) >= f2 - 1e-9


@pytest.mark.parametrize(
    "activation,skip,seed,d,n",
    [
        ("gelu", None, 1, 3, 20),
        ("leaky_relu(0.25)", None, 1, 3, 20),
        ("gelu", "matrix", 1, 3, 20),
        ("leaky_relu(0.1)", "matrix", 1, 3, 20),
        ("leaky_relu(0.25)", None, 3, 4, 40),  # the search improves on the Gram path's local search
    ],
)
def test_upper_bounds_the_exact_value_of_its_set_and_never_rises(activation, skip, seed, d, n):
    params = _anti_aligned(seed, d, n)
    A = np.eye(d) if skip is None else np.random.default_rng(2).standard_normal((d, d))
    kw = {} if skip is None else {"skip": A}
    c = activations.get(activation).odd_slope or Fraction(1)
    new = condition.distance(params, activation, **kw)
    old = condition.distance(params, activation, search=False, **kw)
    assert new.upper <= old.upper and new.lower == old.lower
    assert new.method in ("greedy", old.method)
    assert new.S.tolist() == old.S.tolist() or new.method == "greedy"
    exact = _exact_ratio2(params.up, params.down, A, new.S.tolist(), c)
    assert Fraction(new.upper) ** 2 >= exact and new.upper <= float(exact) ** 0.5 * (1 + 1e-9)
    if seed == 3:
        assert new.method == "greedy" and new.upper < old.upper


@pytest.mark.parametrize("d,n,activation", [(128, 2048, "gelu"), (160, 2304, "gelu"), (128, 2048, "leaky_relu(0.25)")])
def test_wide_blocks_get_an_upper_below_one(d, n, activation):
    """The wide path (``n ≥ 2048``) alone may stop at ``S = ∅`` (1.0); the search finds a set
    below 1 whenever some flip from ``∅`` improves, i.e. some ``a_i = tr M_i`` is below
    ``−‖M_i‖_F²/2``; the bound is rigorous for its set (float64, 1e-9 of the true norm)."""
    params = _anti_aligned(0, d, n)
    U, D = params.up, params.down
    improving = 2 * np.einsum("ki,ik->i", D, U) + np.sum(D * D, 0) * np.sum(U * U, 1) < 0
    assert improving.any()
    c = float(activations.get(activation).odd_slope)
    new = condition.distance(params, activation)
    old = condition.distance(params, activation, search=False)
    assert old.method == "frank-wolfe"  # the wide path, not the Gram path
    assert new.method == "greedy" and new.upper < min(old.upper, 1.0) and new.S.size > 0
    assert new.lower == old.lower <= new.upper
    true = np.linalg.norm(c * (D[:, new.S] @ U[new.S]) + np.eye(d)) / np.sqrt(d)
    assert true <= new.upper <= true * (1 + 1e-9)


def test_a_gaussian_block_where_no_flip_helps_keeps_its_bound():
    """Where no unit improves on ``∅`` the search changes nothing: same ``upper`` and ``S``."""
    rng = np.random.default_rng(3)
    d, n = 4, 20
    U = rng.standard_normal((n, d))
    D = np.abs(U.T) * np.sign(U.T) * 0.1 + 0.0  # every a_i > 0: adding any unit moves away from −I
    new, old = condition.distance(MLPParams(U, D)), condition.distance(MLPParams(U, D), search=False)
    assert (new.upper, new.S.tolist(), new.method) == (old.upper, old.S.tolist(), old.method)
    assert new.S.size == 0 and new.upper >= 1.0


def test_the_search_stops_at_its_deadline():
    params = _anti_aligned(5, 64, 6000)
    U, D = params.up, params.down
    late = search.descend(U, D, np.eye(64), np.zeros(6000, bool), deadline=time.perf_counter() - 1)
    assert late is None or not late[0].any()  # past the deadline: no move
    t = time.perf_counter()
    m, f = search.descend(U, D, np.eye(64), np.zeros(6000, bool), deadline=t + 0.2)
    assert time.perf_counter() - t < 1.0  # the deadline plus at most one step or one swap block
    assert f < 64 and m.any()


def test_the_search_never_forms_an_n_by_n_matrix():
    """``n = 4096``: an ``n × n`` float64 matrix is 128 MiB; the search's peak stays below 8 MiB
    beyond the weights (``O(n d)`` vectors and ``SWAP_BLOCK²`` blocks)."""
    d, n = 16, 4096
    params = _anti_aligned(6, d, n)
    U, D = params.up, params.down
    tracemalloc.start()
    try:
        m, _ = search.descend(U, D, np.eye(d), np.zeros(n, bool), deadline=time.perf_counter() + 5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert m.any() and peak < 8 * 2**20  # n × n float64: 128 MiB


@pytest.mark.parametrize("alpha,k", [(1.0, 5), (-2.0, 5), (1.0, 30)])
def test_scores_agree_with_the_residual(alpha, k):
    """``g_i = W_down[:,i]ᵀ R W_up[i,:]ᵀ`` and ``f = ‖R‖²`` at a set: by Gram columns (``A = αI``,
    ``|S| < d/2``) and by the ``O(n d²)`` pass alike."""
    rng = np.random.default_rng(k)
    d, n = 20, 200
    U, D = rng.standard_normal((n, d)), rng.standard_normal((d, n)) / 5
    m = np.zeros(n, bool)
    m[rng.choice(n, k, replace=False)] = True
    A = alpha * np.eye(d)
    R = A + D[:, m] @ U[m]
    g, q, f = search.scores(U, D, A, m)
    assert np.allclose(g, np.einsum("ki,ki->i", D, R @ U.T), rtol=1e-12, atol=1e-12 * np.abs(g).max())
    assert np.allclose(q, np.sum(D * D, 0) * np.sum(U * U, 1)) and np.isclose(f, np.sum(R * R), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_wide_blocks_stored_narrow_get_a_rigorous_upper(dtype):
    """On the wide path the weights arrive as stored (float32, bfloat16): the search runs in float32
    but the found set's bound is evaluated on its units in float64 (a float32 evaluation would miss
    the true value by about 1e-7 of it)."""
    import ml_dtypes

    narrow = np.float32 if dtype == "float32" else ml_dtypes.bfloat16
    params = _anti_aligned(0, 128, 2048)
    params = type(params)(np.asarray(params.up).astype(narrow), np.asarray(params.down).astype(narrow))
    new = condition.distance(params, "gelu")
    assert new.certificate.method in ("trace", "frank-wolfe")  # the wide path (the screen decided)
    assert new.method == "greedy" and 0 < new.S.size and new.upper < 1.0
    U, D = (np.asarray(X, np.float64) for X in params)  # the stored values, exactly
    true = np.linalg.norm(D[:, new.S] @ U[new.S] + np.eye(128)) / np.sqrt(128)
    assert true <= new.upper <= true * (1 + 1e-9)
