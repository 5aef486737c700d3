"""Depth with biases (docs/theory/depth.md §9), the line d = 1 (§10) and ReLU's open exception (§11):
exact ranks mod p, the symmetries of biased stacks, and the independent float checks."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import dimension, models

pytestmark = pytest.mark.x64  # float ranks are float64 claims (see conftest.py)

KEY = jax.random.key(0)


def _point(d, n, L, inputs, key=KEY, **kw):
    return dimension.rational_point(d, n, L, key=key, inputs=inputs, **kw)


# ---------------------------------------------------------------------------------------------
# Stacks with biases (step 9): b_ℓ(x) = x + D_ℓ σ(U_ℓ x + β_ℓ) + γ_ℓ, c_ℓ(x) = V_down σ(V_up x + β) + e


def _biased_flat(pt):
    """The point's parameters as exact rationals (floats), in the columns' order: up, down, β, γ."""
    parts = [pt.up, pt.down, pt.hidden_bias, pt.out_bias]
    return np.concatenate([np.asarray(a, np.float64).ravel() for a in parts]) / pt.denominator


def _biased_stack(w, x, shape, sigma, residual):
    L, n, d = shape
    up = w[: L * n * d].reshape(L, n, d)
    down = w[L * n * d : 2 * L * n * d].reshape(L, d, n)
    beta = w[2 * L * n * d : 2 * L * n * d + L * n].reshape(L, n)
    gamma = w[2 * L * n * d + L * n :].reshape(L, d)
    for layer in range(L):
        out = down[layer] @ sigma(up[layer] @ x + beta[layer]) + gamma[layer]
        x = x + out if residual else out
    return x


def _biased_tangents(pt, activation, residual):
    """Exact symmetry tangents mod p, columns in (up, down, β, γ) order. Free: the affine junction
    gauges (E, t): δW_down^ℓ = E W_down^ℓ, δγ_ℓ = E γ_ℓ + t, δW_up^{ℓ+1} = −W_up^{ℓ+1} E,
    δβ_{ℓ+1} = −W_up^{ℓ+1} t; and for ReLU the rescalings δ(W_up^ℓ[i], β_ℓ[i]) = (W_up^ℓ[i], β_ℓ[i]),
    δW_down^ℓ[:,i] = −W_down^ℓ[:,i]. Residual: the translations δγ_ℓ = t, δβ_{ℓ+1} = −W_up^{ℓ+1} t,
    δγ_{ℓ+1} = −t."""
    p = dimension.PRIME
    qinv = pow(int(pt.denominator), p - 2, p)
    up, down, beta, gamma = (
        np.asarray(a, object) % p * qinv % p for a in (pt.up, pt.down, pt.hidden_bias, pt.out_bias)
    )
    L, n, d = pt.up.shape
    U, D, B, G = range(4)  # which parameter array an entry perturbs
    cols = []

    def col(*entries):  # entries: (array, layer, index, value)
        z = [np.zeros(s, object) for s in ((L, n, d), (L, d, n), (L, n), (L, d))]
        for k, layer, idx, val in entries:
            z[k][layer][idx] = val
        return np.concatenate([a.ravel() for a in z]) % p

    eye = np.eye(d, dtype=np.int64).astype(object)
    everything = slice(None)
    for layer in range(L - 1):
        for a in range(d):
            t = eye[a]
            nxt = (B, layer + 1, everything, -up[layer + 1].dot(t))
            if residual:
                cols.append(col((G, layer, everything, t), nxt, (G, layer + 1, everything, -t)))
                continue
            for b in range(d):
                E = np.outer(eye[a], eye[b])
                cols.append(
                    col(
                        (D, layer, everything, E.dot(down[layer])),
                        (G, layer, everything, E.dot(gamma[layer])),
                        (U, layer + 1, everything, -up[layer + 1].dot(E)),
                    )
                )
            cols.append(col((G, layer, everything, t), nxt))
    if activation == "relu":
        for layer in range(L):
            for i in range(n):
                cols.append(
                    col(
                        (U, layer, i, up[layer, i]),
                        (B, layer, i, beta[layer, i]),
                        (D, layer, (everything, i), -down[layer][:, i]),
                    )
                )
    return np.stack(cols, 1)


def _modular(pt, activation, residual, order=5):
    p = dimension.PRIME
    if activation == "relu":
        masks, on_kink = dimension.relu_masks(pt, residual)
        assert not on_kink.any()
        return dimension.forward_jacobian(pt, residual, 1, p, 0, masks, chunk=8)
    return dimension.forward_jacobian(pt, residual, order, p, 12345, None, chunk=8)


def _rank_mod_p(M):
    import flint

    p = dimension.PRIME
    M = np.asarray(M, object) % p
    return flint.nmod_mat(M.shape[0], M.shape[1], [int(v) for v in M.ravel()], p).rank()


def test_biased_counts():
    """Step 9's counts: P = 2Lnd + L(n + d); the free bound subtracts (L−1)(d² + d) (and nL for
    ReLU); the residual maximum subtracts (L−1)d (and nL): the same gap (L−1)d² as without biases."""
    for act, d, n, L in [("gelu", 2, 3, 2), ("relu", 3, 4, 3), ("gelu", 1, 2, 4)]:
        P = dimension.param_count(d, n, L, bias=True)
        assert P == dimension.param_count(d, n, L) + L * (n + d)
        gap = dimension.residual_max(act, d, n, L, bias=True) - dimension.free_bound(act, d, n, L, bias=True)
        assert gap == (L - 1) * d * d == dimension.residual_max(act, d, n, L) - dimension.free_bound(act, d, n, L)


@pytest.mark.parametrize(
    "activation,d,n,L", [("gelu", 2, 3, 2), ("gelu", 2, 2, 3), ("relu", 2, 3, 2), ("relu", 3, 3, 3)]
)
def test_biased_symmetries_are_in_the_kernel_and_independent(activation, d, n, L):
    """Step 9, exactly mod p: the affine junction gauges (and ReLU rescalings) annihilate the free
    Jacobian and are independent; the translations annihilate the residual Jacobian and are
    independent; the skip breaks the linear part of the gauge."""
    P = dimension.param_count(d, n, L, bias=True)
    bias = "zero" if activation == "gelu" else "gaussian"
    pt = _point(d, n, L, inputs=4 * P // d, bias=bias, key=jax.random.key(3))
    p = dimension.PRIME
    relu_sym = n * L if activation == "relu" else 0
    Tf = _biased_tangents(pt, activation, residual=False)
    assert Tf.shape[1] == (L - 1) * (d * d + d) + relu_sym == _rank_mod_p(Tf)
    Mf = _modular(pt, activation, residual=False)
    assert not np.any(np.asarray(Mf, object).dot(Tf) % p)
    Tr = _biased_tangents(pt, activation, residual=True)
    assert Tr.shape[1] == (L - 1) * d + relu_sym == _rank_mod_p(Tr)
    Mr = _modular(pt, activation, residual=True)
    assert not np.any(np.asarray(Mr, object).dot(Tr) % p)
    assert np.any(np.asarray(Mr, object).dot(Tf) % p)  # the free gauge is no symmetry of the residual stack


@pytest.mark.slow
def test_biased_modular_jacobian_is_the_reduction_of_the_exact_one():
    """Step 2 with biases (ReLU, rational nonzero biases, denominator 16): the float64 Jacobian is
    exact there and its reduction mod p is the modular one, bias columns included."""
    pt = _point(2, 3, 2, inputs=6, denominator=16, bias="gaussian")
    assert np.any(pt.hidden_bias) and np.any(pt.out_bias)
    p = dimension.PRIME
    modular = _modular(pt, "relu", residual=True)
    J = np.asarray(
        jax.jacfwd(
            lambda w: jax.vmap(lambda x: _biased_stack(w, x, pt.up.shape, jax.nn.relu, True))(
                pt.xs(jnp.float64)
            ).ravel()
        )(jnp.asarray(_biased_flat(pt)))
    )
    E = next(e for e in range(64) if np.all(J * 2.0**e == np.rint(J * 2.0**e)))
    scaled = J * 2.0**E
    assert np.abs(scaled).max() < 2**52 and J.shape == modular.shape
    assert np.array_equal(modular * pow(2, E, p) % p, np.rint(scaled).astype(np.int64) % p)


@pytest.mark.slow
def test_biased_modular_jets_are_the_reduction_of_the_exact_ones():
    """The jet path with biases (zero at the point, their columns differentiated; rows t^0..t^3),
    with c replaced by 1/8 so that σ(z) = z/2 + z²/8 and float64 is exact."""
    pt = _point(2, 2, 2, inputs=2, denominator=16, bias="zero")
    p = dimension.PRIME
    modular = dimension.forward_jacobian(pt, True, 3, p, pow(8, p - 2, p), None, chunk=2)

    def sigma(z):
        return z / 2 + z * z / 8

    def jets(w):
        def along(x):
            def g(t):
                return _biased_stack(w, t * x, pt.up.shape, sigma, True)

            d1 = jax.jacfwd(g)
            d2 = jax.jacfwd(d1)
            d3 = jax.jacfwd(d2)
            return jnp.stack([g(0.0), d1(0.0), d2(0.0), d3(0.0)], axis=1)  # (d, 4): m! × coefficient

        return jax.vmap(along)(pt.xs(jnp.float64)).ravel()

    J = np.asarray(jax.jacfwd(jets)(jnp.asarray(_biased_flat(pt))))
    E = next(e for e in range(64) if np.all(J * 2.0**e == np.rint(J * 2.0**e)))
    scaled = J * 2.0**E
    assert np.abs(scaled).max() < 2**52 and J.shape == modular.shape
    factorials = np.tile(np.array([1, 1, 2, 6]), J.shape[0] // 4)[:, None]
    assert np.array_equal(modular * factorials % p * pow(2, E, p) % p, np.rint(scaled).astype(np.int64) % p)


@pytest.mark.parametrize("d,N", [(1, 3), (2, 4), (3, 3)])
def test_one_layer_biased_gelu_has_full_rank(d, N):
    """Lemma A′ with biases (at zero biases, step 9): one GELU layer with output bias has rank 2Nd + N + d."""
    P = dimension.param_count(d, N, 1, bias=True)
    pt = _point(d, N, 1, inputs=1 if d == 1 else P // d + 2, bias="zero")
    assert dimension.exact_rank(pt, "gelu", order=2 * P + 3 if d == 1 else 7).rank == 2 * N * d + N + d == P


@pytest.mark.slow
@pytest.mark.parametrize("d,n,L", [(1, 2, 2), (2, 2, 2), (2, 3, 2), (3, 3, 2), (2, 2, 3)])
def test_biased_gelu_free_bound_attained_and_residual_rank_above(d, n, L):
    """Step 9's theorem, computed exactly: free biased GELU stacks reach b = P − (L−1)(d² + d)
    exactly; residual ones reach P − (L−1)d, at the generic point and at a near-identity one
    (Lemma B with biases), which exceeds b by (L−1)d²."""
    P = dimension.param_count(d, n, L, bias=True)
    b = dimension.free_bound("gelu", d, n, L, bias=True)
    top = dimension.residual_max("gelu", d, n, L, bias=True)
    probe = dimension.Probe(order=2 * P + 3, max_order=2 * P + 3, inputs=1) if d == 1 else dimension.Probe()
    free = dimension.certify("gelu", d, n, L, key=KEY, residual=False, bias=True, probe=probe)
    assert free.rank == free.free_bound == b and free.status == "undecided" and free.bias
    for shrink in (0, 10):
        cert = dimension.certify("gelu", d, n, L, key=KEY, bias=True, probe=dataclasses.replace(probe, shrink=shrink))
        assert cert.rank == cert.maximum == top == b + (L - 1) * d * d
        assert cert.status == "certified_disjoint" and cert.method == "rank" and "biases" in cert.scope


@pytest.mark.slow
@pytest.mark.parametrize("d,n,L", [(2, 4, 2), (3, 3, 2), (2, 2, 3)])
def test_biased_relu_residual_rank_above_the_bound(d, n, L):
    """ReLU with rational nonzero biases: the residual stack reaches P − (L−1)d − nL > b (at a
    generic and a near-identity point, so on an open set); free stacks stay at or below b."""
    b = dimension.free_bound("relu", d, n, L, bias=True)
    K = 8 * dimension.param_count(d, n, L, bias=True) // d
    for shrink in (0, 10):
        cert = dimension.certify("relu", d, n, L, key=KEY, bias=True, probe=dimension.Probe(shrink=shrink, inputs=K))
        assert cert.rank == cert.maximum == dimension.residual_max("relu", d, n, L, bias=True) > b
        assert cert.status == "certified_disjoint" and "open region" in cert.scope
    free = dimension.certify("relu", d, n, L, key=KEY, residual=False, bias=True, probe=dimension.Probe(inputs=K))
    assert free.rank <= b and free.status == "undecided"


def test_gelu_jets_refuse_nonzero_biases():
    pt = _point(2, 2, 2, inputs=3, bias="gaussian")
    with pytest.raises(ValueError, match="zero biases"):
        dimension.exact_rank(pt, "gelu")


@pytest.mark.slow
@pytest.mark.parametrize("n,L", [(1, 2), (2, 2), (3, 3)])
def test_biased_relu_line_is_certified(n, L):
    """§9.4 at d = 1: with biases the kinks are the points −β_j/u_j and the residual ReLU stack
    reaches P_b − (L−1) − nL > b_b at a near-identity point (so on an open set)."""
    K = 40 * dimension.param_count(1, n, L, bias=True)
    cert = dimension.certify("relu", 1, n, L, key=KEY, bias=True, probe=dimension.Probe(shrink=10, inputs=K))
    assert cert.rank == cert.maximum == dimension.residual_max("relu", 1, n, L, bias=True)
    assert cert.rank > cert.free_bound and cert.status == "certified_disjoint"


@pytest.mark.slow
def test_line_relu_is_decided():
    """§10, d = 1 without biases: for n >= 2 the free stack (p relu(x) + m relu(−x), then identities
    relu(x) − relu(−x)) reproduces every residual stack; for n = 1 every free stack vanishes on a
    half-line while a residual one with 1 + D_ℓ U_ℓ != 0 does not."""
    xs = jnp.linspace(-3.0, 3.0, 61)[:, None]
    for s in range(5):
        n, L = 2 + s % 3, 1 + s % 4
        k1, k2 = jax.random.split(jax.random.key(10 + s))
        res = models.MLPParams(jax.random.normal(k1, (L, n, 1)), jax.random.normal(k2, (L, 1, n)))

        def f(x, p=res):
            return models.stack(p, x, "relu")

        p, m = float(f(jnp.ones(1))[0]), float(f(-jnp.ones(1))[0])
        up = np.zeros((L, n, 1))
        up[:, 0, 0], up[:, 1, 0] = 1.0, -1.0
        down = np.zeros((L, 1, n))
        down[:, 0, 0], down[:, 0, 1] = 1.0, -1.0
        down[0, 0, 0], down[0, 0, 1] = p, m
        free = models.MLPParams(jnp.asarray(up), jnp.asarray(down))
        got = jax.vmap(lambda x: models.stack(free, x, "relu", residual=False))(xs)
        want = jax.vmap(f)(xs)
        assert np.allclose(got, want, rtol=1e-12, atol=1e-12)
    for s in range(5):
        L = 1 + s % 3
        k1, k2 = jax.random.split(jax.random.key(20 + s))
        w = models.MLPParams(jax.random.normal(k1, (L, 1, 1)), jax.random.normal(k2, (L, 1, 1)))
        assert np.all(1 + w.down[:, 0, 0] * w.up[:, 0, 0] != 0)
        ends = [models.stack(w, jnp.array([x]), "relu")[0] for x in (1.0, -1.0)]
        assert ends[0] * ends[1] != 0
        free = [models.stack(w, jnp.array([x]), "relu", residual=False)[0] for x in (1.0, -1.0)]
        assert free[0] * free[1] == 0


@pytest.mark.parametrize(
    "activation,d,n,L", [("gelu", 2, 3, 2), ("gelu", 3, 3, 3), ("relu", 2, 4, 2), ("relu", 3, 6, 2)]
)
@pytest.mark.parametrize("residual", [True, False])
def test_biased_exact_rank_equals_float_rank(activation, d, n, L, residual):
    """An independent check: the float64 SVD rank of the values' Jacobian, through the biased blocks
    of models (not the modular code), equals the exact rank of the jets / values at the same point."""
    cert = dimension.certify(activation, d, n, L, key=KEY, residual=residual, bias=True)
    assert cert.float_rank == cert.rank and cert.float_gap > 1e6


# ---------------------------------------------------------------------------------------------
# ReLU: an open set outside Ω (§11)


def _fold_point(d, n, L, seed=0):
    """Block 1 folds R^d onto the negative orthant (rows e_j, columns −2e_j: x_j − 2 relu(x_j) = −|x_j|)
    plus n − d small units; the rows of blocks 2..L lie near (1, …, 1). Rational (denominator 256)."""
    rng = np.random.default_rng(seed)
    up = rng.standard_normal((L, n, d)) / np.sqrt(d)
    down = rng.standard_normal((L, d, n)) / np.sqrt(n)
    up[0, :d], down[0][:, :d] = np.eye(d), -2 * np.eye(d)
    down[0][:, d:] /= 64
    up[1:] = 1 + rng.standard_normal((L - 1, n, d)) / 16
    K = 40 * 2 * L * n
    return dimension.rational_point(d, n, L, key=jax.random.key(seed), inputs=K, params=models.MLPParams(up, down))


@pytest.mark.parametrize("d,n,L", [(2, 2, 2), (2, 4, 2), (3, 6, 2), (2, 3, 3)])
def test_relu_omega_misses_an_open_set(d, n, L):
    """§11: with ε = Σ_{i>d} ‖D_1[:,i]‖_1 ‖U_1[i]‖_1, every row v of blocks >= 2 with
    min_j v_j > max_j |v_j| ε is negative on b_1(x), x != 0 (checked exactly in rationals), so those
    blocks are dead and f_W = b_1: the exact rank is 2nd − n, at most the free bound b."""
    from fractions import Fraction

    pt = _fold_point(d, n, L)
    q = pt.denominator

    def l1(a):
        return Fraction(int(np.abs(a).sum()), q)

    eps = sum(l1(pt.down[0][:, i]) * l1(pt.up[0][i]) for i in range(d, n))
    for layer in range(1, L):
        for v in pt.up[layer]:
            assert Fraction(int(v.min()), q) > Fraction(int(np.abs(v).max()), q) * eps
    r = dimension.exact_rank(pt, "relu").rank
    assert r == 2 * n * d - n <= dimension.free_bound("relu", d, n, L) < dimension.residual_max("relu", d, n, L)
    params, xs = pt.params(jnp.float64), pt.xs(jnp.float64)
    first = jax.tree.map(lambda a: a[0], params)
    got = jax.vmap(lambda x: models.stack(params, x, "relu"))(xs)
    assert np.array_equal(got, jax.vmap(lambda x: models.skip_mlp(first, x, "relu"))(xs))
    cert = dimension.certify("relu", d, n, L, key=KEY, params=params, probe=dimension.Probe(float_check=False))
    assert cert.rank == r  # the rank count cannot decide here
    if n < 2 * d:  # §6 still applies: not reproduced by any free stack of width n
        assert dimension.narrow_invertible(pt) and cert.method == "narrow"
    else:
        assert cert.status == "undecided"


def test_a_folded_stack_in_the_open_set_is_reproduced():
    """§11, n = 2d: block 1 = x − 2 relu(x) − relu(−x) coordinatewise (D_S U_S = −I for S = all units,
    image in the negative orthant), block 2 dead on it. The free stack (rows of S flipped; then the
    identity relu(y) − relu(−y)) reproduces it exactly at dyadic inputs."""
    d, n = 2, 4
    eye = np.eye(d)
    up1, down1 = np.vstack([eye, -eye]), np.hstack([-2 * eye, -eye])
    rng = np.random.default_rng(5)
    up2 = 1 + rng.integers(0, 16, (n, d)) / 64
    down2 = rng.integers(-64, 64, (d, n)) / 64
    res = models.MLPParams(jnp.asarray(np.stack([up1, up2])), jnp.asarray(np.stack([down1, down2])))
    free = models.MLPParams(jnp.asarray(np.stack([-up1, up1])), jnp.asarray(np.stack([down1, np.hstack([eye, -eye])])))
    xs = jnp.asarray(rng.integers(-256, 256, (200, d)) / 64)
    got = jax.vmap(lambda x: models.stack(free, x, "relu", residual=False))(xs)
    want = jax.vmap(lambda x: models.stack(res, x, "relu"))(xs)
    assert np.array_equal(got, want) and np.all(np.asarray(want) <= 0)


@pytest.mark.parametrize("activation,n", [("gelu", 2), ("gelu", 4), ("relu", 2), ("relu", 8)])
def test_biased_depth_one_is_decided_by_the_one_block_theorem(activation, n):
    """L = 1 has no rank gap; with biases the kink theorem (GELU: through the ray limit) decides it,
    its hypotheses checked exactly at the point; without biases n = 4 stays undecided by this module."""
    cert = dimension.certify(activation, 2, n, 1, key=KEY, bias=True, probe=dimension.Probe(float_check=False))
    assert cert.rank == cert.free_bound and cert.status == "certified_disjoint" and cert.method == "kink"
    assert (
        dimension.certify(activation, 2, 4, 1, key=KEY, probe=dimension.Probe(float_check=False)).status == "undecided"
    )
    assert dimension.certify(activation, 2, n, 1, key=KEY, bias=True, residual=False).status == "undecided"
