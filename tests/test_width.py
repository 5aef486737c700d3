"""Minimal extra width (condition.min_extra_width): k* = d for Gaussian blocks, exact k* for
quantised ones against brute force, absorbers of width n + k* to 1e-12, the search below k*."""

import functools
import itertools
import json
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

from absorbjax import condition, fit, models
from absorbjax.condition.width import _parts as width_parts
from absorbjax.models import MLPParams

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

KEY = jax.random.key(12)


@functools.cache
def _pool(dist, bits):
    """One compiled draw per distribution: 1800 blocks of d = 8, n = 24, cut to smaller shapes
    (rows/columns of i.i.d. weights are i.i.d. weights of the smaller shape, up to scale)."""
    with jax.enable_x64(True):
        p = models.sample("relu", 8, 24, key=jax.random.fold_in(KEY, bits), draws=1800, dist=dist, bits=bits)
    return np.asarray(p.up), np.asarray(p.down)


def draws(dist, count, d, n, *, bits=3, salt=0):
    """``count`` blocks of shape ``d, n`` from the pool (``salt`` picks disjoint draws)."""
    up, down = _pool("grid" if dist == "ternary" else dist, 2 if dist == "ternary" else bits)
    start = 200 * salt
    return [MLPParams(up[k, :n, :d], down[k, :d, :n]) for k in range(start, start + count)]


def gap(params, V, skip=None, count=128):
    """``max ‖f(x) − g(x)‖ / (‖x‖ (‖A‖₂ + ‖W_down‖₂‖W_up‖₂))`` for ReLU, in plain NumPy (apart from
    the check inside ``min_extra_width``), ‖x‖ from 1e-3 to 1e3."""
    U, D = np.asarray(params.up, float), np.asarray(params.down, float)
    A = np.eye(U.shape[1]) if skip is None else np.asarray(skip, float)
    rng = np.random.default_rng(7)
    xs = rng.normal(size=(count, U.shape[1]))
    xs *= 10.0 ** rng.uniform(-3, 3, (count, 1)) / np.linalg.norm(xs, axis=1, keepdims=True)
    want = xs @ A.T + np.maximum(xs @ U.T, 0) @ D.T
    got = np.maximum(xs @ np.asarray(V.up).T, 0) @ np.asarray(V.down).T
    c = np.linalg.norm(A, 2) + np.linalg.norm(D, 2) * np.linalg.norm(U, 2)
    return float(np.max(np.linalg.norm(want - got, axis=1) / np.linalg.norm(xs, axis=1)) / c)


# ---------------------------------------------------------------------------------------------
# Brute force: the formula over every labelling (plain / flipped / duplicated), exact ranks


def _rank(rows) -> int:
    """Exact rank of a list of rational rows (Gaussian elimination on Fractions)."""
    M = [[Fraction(x) for x in r] for r in rows]
    rank, cols = 0, len(M[0]) if M else 0
    for c in range(cols):
        piv = next((i for i in range(rank, len(M)) if M[i][c] != 0), None)
        if piv is None:
            continue
        M[rank], M[piv] = M[piv], M[rank]
        for i in range(len(M)):
            if i != rank and M[i][c] != 0:
                f = M[i][c] / M[rank][c]
                M[i] = [a - f * b for a, b in zip(M[i], M[rank])]
        rank += 1
    return rank


def reduce_relu(params, skip=None):
    """Merge integer rows on one line (``w_i = t_i p``, ``p`` primitive): ``(W, U, A')``."""
    U = np.asarray(params.up).astype(int)
    D = np.asarray(params.down).astype(int)
    n, d = U.shape
    A = np.eye(d, dtype=int) if skip is None else np.asarray(skip).astype(int)
    lines = {}
    for i in range(n):
        if not U[i].any():
            continue
        g = math.gcd(*U[i].tolist())
        p = U[i] // g
        p = p if p[np.flatnonzero(p)[0]] > 0 else -p
        lines.setdefault(tuple(p), []).append(i)
    W, Uc = [], []
    Ap = A.copy()
    for p, members in lines.items():
        p = np.array(p)
        k0 = np.flatnonzero(p)[0]
        t = np.array([U[i, k0] // p[k0] for i in members])
        u = D[:, members] @ np.abs(t)
        Ap = Ap + np.outer(D[:, members] @ np.where(t < 0, t, 0), p)
        if u.any():
            W.append(p)
            Uc.append(u)
    return np.array(W).reshape(-1, d), np.array(Uc).T.reshape(d, -1), Ap


def brute_force_k(params, skip=None):
    """``max(0, L + min_{S,G} |G| + 2 rank(M_S (I − Π_G)) − n)`` over all 3^L labellings, with
    ``rank(M_S (I − Π_G)) = rank[M_S; W_G] − rank W_G``."""
    n = params.up.shape[0]
    W, Uc, Ap = reduce_relu(params, skip)
    L = W.shape[0]
    best = math.inf
    for lab in itertools.product(range(3), repeat=L):
        lab = np.array(lab, int)
        S, G = lab == 1, lab == 2
        M = Ap + Uc[:, S] @ W[S]
        rank_G = _rank([list(r) for r in W[G]]) if G.any() else 0
        cost = G.sum() + 2 * (_rank([list(r) for r in M] + [list(r) for r in W[G]]) - rank_G)
        best = min(best, cost)
    return max(0, L + best - n)


# ---------------------------------------------------------------------------------------------
# Gaussian blocks: k* = d, certified


@pytest.mark.parametrize("d", [2, 3, 4, 5])
def test_gaussian_needs_exactly_d_extra_units(d):
    for p in draws("gaussian", 10, d, 2 * d):
        cert = condition.min_extra_width(p, "relu")
        assert (cert.status, cert.k, cert.width) == ("certified", d, 3 * d), str(cert)
        assert cert.method == "enumeration" and cert.subsets == 2 ** (2 * d) and cert.nondegenerate
        assert cert.condition["status"] == "not_absorbable"
        assert cert.residual <= cert.tol and cert.error <= 1e-12
        assert gap(p, cert.absorber) <= 1e-12
        assert cert.pairs == 0 and cert.G.size == d and cert.S.size == 0
    x = jnp.linspace(-2.0, 3.0, d)  # and through the package's own blocks, in JAX
    V = MLPParams(jnp.asarray(cert.absorber.up), jnp.asarray(cert.absorber.down))
    np.testing.assert_allclose(models.mlp(V, x, "relu"), models.skip_mlp(p, x, "relu"), rtol=1e-12, atol=1e-13)


@pytest.mark.slow
def test_gaussian_draws_each_d_2_to_8():
    """k* = d in every Gaussian draw at d = 2…8, n = 2d (50 draws each; the 200 draws each of the
    claim are ``absorbjax reproduce --preset full --only width``)."""
    for d in range(2, 9):
        for p in draws("gaussian", 50, d, 2 * d, salt=1):
            cert = condition.min_extra_width(p, "relu")
            assert (cert.status, cert.k) == ("certified", d), str(cert)
            assert cert.error <= 1e-12


def test_gelu_and_a_skip_matrix():
    for p in draws("gaussian", 3, 3, 5):
        cert = condition.min_extra_width(p, "gelu")
        assert (cert.status, cert.k) == ("certified", 3) and cert.error <= 1e-12
        A = np.eye(3) + 0.4 * np.random.default_rng(0).normal(size=(3, 3))
        cert = condition.min_extra_width(p, "relu", skip=A)
        assert (cert.status, cert.k, cert.skip) == ("certified", 3, "matrix")
        assert gap(p, cert.absorber, skip=A) <= 1e-12


def test_fewer_units_than_d():
    """n < d: rank Ŵ = n, so the bound is 2d − n (G = all rows, d − n free pairs)."""
    for p in draws("gaussian", 3, 4, 2):
        cert = condition.min_extra_width(p, "relu", decision=condition.Decision(narrow=True))
        assert (cert.status, cert.k, cert.pairs) == ("certified", 2 * 4 - 2, 4 - 2)
        assert gap(p, cert.absorber) <= 1e-12


# ---------------------------------------------------------------------------------------------
# k* = 0 is the paper's condition


@pytest.mark.parametrize("size", [5])
def test_absorbable_blocks_have_k_zero(size):
    params, S = models.planted("relu", 3, 8, key=jax.random.fold_in(KEY, size), size=size)
    cert = condition.min_extra_width(params, "relu")
    assert (cert.status, cert.k, cert.method) == ("certified", 0, "find_absorbing_set")
    np.testing.assert_array_equal(cert.S, S)
    assert gap(params, cert.absorber) <= 1e-12


def test_k_zero_agrees_with_find_absorbing_set_on_quantised_draws():
    seen = 0
    for p in draws("ternary", 120, 3, 5, salt=2):
        cert = condition.min_extra_width(p, "relu")
        base = condition.find_absorbing_set(p)
        if base.nondegenerate:
            seen += 1
            assert (cert.k == 0) == base.absorbable
    assert seen >= 10


# ---------------------------------------------------------------------------------------------
# Quantised blocks: exact k*, against brute force


@pytest.mark.slow
@pytest.mark.parametrize(
    "dist,bits,d,n",
    [("ternary", 2, 2, 4), ("ternary", 2, 3, 5), ("grid", 3, 2, 5), ("grid", 3, 3, 4), ("grid", 4, 3, 5)],
)
def test_quantised_k_matches_brute_force(dist, bits, d, n):
    values = []
    for p in draws(dist, 20, d, n, bits=bits, salt=3):
        cert = condition.min_extra_width(p, "relu")
        assert cert.status == "certified" and cert.exact, str(cert)
        assert cert.k == brute_force_k(p), str(cert)
        assert cert.residual <= cert.tol and cert.error <= 1e-12
        assert gap(p, cert.absorber) <= 1e-12
        assert cert.absorber.up.shape == (n + cert.k, d)
        values.append(cert.k)
    assert 0 <= min(values) and max(values) <= 2 * d


def test_skip_matrix_against_brute_force():
    rng = np.random.default_rng(3)
    for p in draws("ternary", 15, 2, 4, salt=4):
        A = rng.integers(-2, 3, (2, 2))
        if abs(np.linalg.det(A)) < 0.5:
            continue
        cert = condition.min_extra_width(p, "relu", skip=A)
        assert cert.status == "certified" and cert.k == brute_force_k(p, A)
        assert gap(p, cert.absorber, skip=A) <= 1e-12


# ---------------------------------------------------------------------------------------------
# The steps of the argument


def test_parallel_rows_merge_for_relu_not_for_gelu():
    """w_1 = 2 w_0: one ReLU atom, two GELU atoms (magnitudes |c| ≠ 1 stay apart)."""
    up = np.array([[1.0, 2.0], [2.0, 4.0], [1.0, -1.0], [0.0, 1.0]])
    down = np.array([[1.0, 1.0, 0.5, -1.0], [0.0, 2.0, 1.0, 1.0]])
    relu = condition.min_extra_width(MLPParams(up, down), "relu")
    gelu = condition.min_extra_width(MLPParams(up, down), "gelu")
    assert len(relu.atoms) == 3 and [0, 1] in relu.atoms and len(gelu.atoms) == 4
    assert not relu.nondegenerate and gelu.status == relu.status == "certified"
    assert relu.k <= gelu.k and relu.k == brute_force_k(MLPParams(up, down))
    for cert, act in ((relu, "relu"), (gelu, "gelu")):
        assert cert.error <= 1e-12
        assert width_parts.block_error(up, down, np.eye(2), cert.absorber, act) == cert.error


def test_cancelling_units_vanish():
    """``w_1 = 2 w_0`` and ``u_1 = −u_0/2``: the two units merge into a linear map (no atom left)."""
    up = np.array([[1.0, 1.0], [2.0, 2.0], [1.0, 0.0]])
    down = np.array([[2.0, -1.0, 0.0], [2.0, -1.0, 1.0]])
    cert = condition.min_extra_width(MLPParams(up, down), "relu")
    assert cert.atoms == [[2]] and cert.status == "certified"
    assert cert.k == brute_force_k(MLPParams(up, down)) and cert.error <= 1e-12


def _even(act, z):
    return width_parts.NUMPY[act](z) - z / 2


def test_even_parts_are_independent():
    """Step 2: GELU's E(t z) over distinct t > 0 are independent (ReLU's are proportional), and
    E(v·x) over v ≠ ±v' (GELU) or non-parallel v (ReLU) in d = 2 are independent."""
    z = np.linspace(-6, 6, 401)
    ts = np.array([0.5, 1.0, 1.5, 2.0, 3.0])
    gelu = np.stack([_even("gelu", t * z) for t in ts], 1)
    relu = np.stack([_even("relu", t * z) for t in ts], 1)
    s_gelu = np.linalg.svd(gelu / np.linalg.norm(gelu, axis=0), compute_uv=False)
    s_relu = np.linalg.svd(relu / np.linalg.norm(relu, axis=0), compute_uv=False)
    assert s_gelu[-1] > 1e-4 and s_relu[1] < 1e-12
    x = np.random.default_rng(0).normal(size=(2000, 2)) * 3
    vs = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, -2.0]])
    for act, expect_full in (("gelu", True), ("relu", False)):
        F = np.stack([_even(act, x @ v) for v in vs], 1)
        s = np.linalg.svd(F / np.linalg.norm(F, axis=0), compute_uv=False)
        assert (s[-1] > 1e-4) == expect_full
        F = F[:, [0, 2, 3, 4]]  # pairwise non-parallel: independent for both
        assert np.linalg.svd(F / np.linalg.norm(F, axis=0), compute_uv=False)[-1] > 1e-4


def test_numpy_activations_match_the_registry():
    from absorbjax import activations

    z = np.linspace(-9, 9, 301)
    for name, fn in width_parts.NUMPY.items():
        np.testing.assert_allclose(fn(z), np.asarray(activations.get(name)(jnp.asarray(z))), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        width_parts.NUMPY["gelu"](z), z * (1 + special.erf(z / np.sqrt(2))) / 2, rtol=1e-13, atol=1e-15
    )


def test_prefix_bound_decides_small_weights_and_says_undecided_otherwise():
    p = draws("gaussian", 1, 3, 24, salt=5)[0]
    small = MLPParams(p.up / 4, p.down / 4)
    cert = condition.min_extra_width(small, "relu", max_bits=12)
    assert (cert.status, cert.k, cert.method, cert.subsets) == ("certified", 3, "prefix", 2**12)
    cert = condition.min_extra_width(p, "relu", max_bits=12)
    assert cert.status == "undecided" and cert.k is None and cert.lower <= 3 == cert.upper
    assert cert.error <= 1e-12


@pytest.mark.parametrize("act", ["silu", "softplus", "gelu_tanh"])
def test_ray_limit_activations_get_the_relu_lower_bound(act):
    """Gaussian draws: the ReLU k* = d is a proved lower bound (ray limit), the construction meets it."""
    p = draws("gaussian", 1, 2, 4)[0]
    cert = condition.min_extra_width(p, act)
    assert cert.status == "certified" and (cert.lower, cert.upper) == (2, 2) and cert.error <= 1e-12
    assert "ray limit" in " ".join(cert.proof)
    with pytest.raises(TypeError, match=r"result\.status"):
        bool(cert)


# ---------------------------------------------------------------------------------------------
# The wider absorber, the certificate, errors


def test_wide_absorber_sizes_and_exactness():
    p = draws("gaussian", 1, 3, 5, salt=6)[0]
    for S, G, width in (([], [0, 1, 2], 8), ([1], [0, 2], 5 + 2 + 2), ([], [], 5 + 6)):
        V = condition.width.wide_absorber(p, S, G)
        assert V.up.shape == (width, 3) and V.down.shape == (3, width)
        assert gap(p, V) <= 1e-12
    with pytest.raises(ValueError, match="do not reproduce"):
        condition.width.wide_absorber(p, [], [0], pairs=0)
    with pytest.raises(ValueError, match="disjoint"):
        condition.width.wide_absorber(p, [0], [0])
    with pytest.raises(ValueError, match="S must index"):
        condition.width.wide_absorber(p, [7])
    with pytest.raises(ValueError, match="pairs"):
        condition.width.wide_absorber(p, pairs=9)


def test_certificate_serialises_and_reads():
    p = draws("ternary", 1, 3, 5, salt=7)[0]
    cert = condition.min_extra_width(p, "relu")
    out = json.loads(json.dumps(cert.to_dict()))
    assert out["k"] == cert.k and out["width"] == cert.width and out["status"] == "certified"
    assert len(out["absorber"]["up"]) == cert.width
    text = str(cert)
    assert text.startswith("certified: k* =") and "proof:" in text and "exact integer arithmetic" in text


def test_bad_input():
    p = draws("gaussian", 1, 2, 3)[0]
    with pytest.raises(ValueError, match="never absorbs"):
        condition.min_extra_width(p, "relu2")
    with pytest.raises(ValueError, match="never absorbs"):
        condition.min_extra_width(p, "swiglu")
    with pytest.raises(ValueError, match="max_bits"):
        condition.min_extra_width(p, "relu", max_bits=0)
    # a zero (singular) skip is no longer refused: the block is residual-free, k* = 0
    zero = condition.min_extra_width(p, "relu", skip=np.zeros((2, 2)))
    assert zero.status == "certified" and zero.k == 0 and zero.error == 0
    with pytest.raises(ValueError, match="skip"):
        condition.min_extra_width(p, "relu", skip=np.eye(3))


# ---------------------------------------------------------------------------------------------
# The search never beats the certified bound


@pytest.mark.slow
def test_search_below_k_star_never_solves():
    d, n = 2, 4
    params = draws("gaussian", 4, d, n, salt=8)
    k = {condition.min_extra_width(p, "relu").k for p in params}
    assert k == {d}
    stacked = MLPParams(np.stack([p.up for p in params]), np.stack([p.down for p in params]))
    below = fit.search(
        stacked,
        "relu",
        key=jax.random.key(1),
        problem=fit.Problem(width=n + d - 1),
        solver=fit.Solver(restarts=8),
        run=fit.Run(progress=False),
    )
    assert not below.solved().any() and np.all(below.best_loss > 1e-12)


@pytest.mark.parametrize("in_rows,k", [(True, 1), (False, 2)])
def test_float_block_with_a_rank_one_miss(in_rows, k):
    """``W_down[:,S] W_up[S,:] = −I + a vᵀ`` for ``S = {0, 1}``: ``M_S = a vᵀ`` has rank 1. With
    ``v`` a row of ``W_up`` outside ``S`` one duplicate absorbs it (``k* = 1``); with ``v`` in no
    row's direction it takes a free pair (``k* = 2``)."""
    rng = np.random.default_rng(5)
    v, a = rng.normal(size=3), rng.normal(size=3)
    a /= v @ a  # −I + a vᵀ has rank 2, so it factors through |S| = 2 units
    Y, s, Zt = np.linalg.svd(-np.eye(3) + np.outer(a, v))
    rest = rng.normal(size=(3, 3))
    if in_rows:
        rest[0] = v
    up = np.vstack([np.sqrt(s[:2])[:, None] * Zt[:2], rest])
    down = np.hstack([Y[:, :2] * np.sqrt(s[:2]), rng.normal(size=(3, 3))])
    for act in ("relu", "gelu"):
        cert = condition.min_extra_width(MLPParams(up, down), act)
        assert (cert.status, cert.k) == ("certified", k) and not cert.exact
        assert cert.S.tolist() == [0, 1] and (cert.G.tolist(), cert.pairs) == (([2], 0) if in_rows else ([], 1))
        assert cert.error <= 1e-12


def test_width_status_is_typed_and_the_record_keeps_the_word():
    """``WidthCertificate.status`` is a :class:`condition.WidthStatus`, written as its word; another word is refused."""
    import dataclasses

    rng = np.random.default_rng(0)
    cert = condition.min_extra_width(MLPParams(rng.normal(size=(6, 3)), rng.normal(size=(3, 6)) / 2), "relu")
    assert (
        cert.status is condition.WidthStatus.CERTIFIED
        and json.loads(json.dumps(cert.to_dict()))["status"] == "certified"
    )
    with pytest.raises(ValueError, match="'absorbable' is not a valid WidthStatus"):
        dataclasses.replace(cert, status="absorbable")
