"""Tests for absorbjax.probes: Prop 5, Prop 6 and Cor 7 made numerical.

Exact identities are checked to ~1e-12 under the ``x64`` marker (absorbjax never enables
float64 itself); the rest run in JAX's default float32, with float32 tolerances.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from absorbjax import activations, models, probes

D, N = 4, 8
DRAWS = 1000  # draws in the vmapped tests
KEY = jax.random.key(0)
UNGATED_HALF = ("relu", "gelu", "gelu_tanh", "silu", "softplus")


def params(act, depth=None, n=N, dtype=None, draws=None, seed=0):
    """Gaussian weights (variance 1/fan_in) in the layout of ``models.init``, drawn with NumPy
    so that the tests do not spend their time compiling random-number kernels; ``dtype``
    defaults to float64 under the x64 marker, float32 otherwise."""
    rng = np.random.default_rng(seed)
    dtype = jnp.result_type(float) if dtype is None else dtype
    lead = tuple(a for a in (draws, depth) if a is not None)

    def w(rows, cols):
        return jnp.asarray(rng.standard_normal(lead + (rows, cols)) / np.sqrt(cols), dtype)

    if activations.get(act).gated:
        return models.GatedParams(w(n, D), w(n, D), w(D, n))
    return models.MLPParams(w(n, D), w(D, n))


def normal(seed, *shape):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.result_type(float))


def block(p, act, residual=False):
    return (lambda x: models.skip_mlp(p, x, act)) if residual else (lambda x: models.mlp(p, x, act))


def deep(p, act, residual):
    return lambda x: models.stack(p, x, act, residual=residual)


# ---------------------------------------------------------------------------------------------
# Jacobian and Hessian at the origin (Prop 6)


@pytest.mark.parametrize("act", ["relu", "gelu", "swiglu", "glu"])
def test_jacobian_residual_block_is_identity(act):
    p = params(act)
    J = probes.jacobian_at_origin(block(p, act, residual=True), D)
    J0 = probes.jacobian_at_origin(block(p, act), D)
    chex.assert_shape(J, (D, D))
    chex.assert_type(J, jnp.float32)  # the origin follows the params' precision
    np.testing.assert_allclose(J - J0, np.eye(D), atol=1e-6)
    if act in ("swiglu", "relu"):
        np.testing.assert_allclose(J, np.eye(D), atol=1e-6)


def test_jacobian_general_skip_is_A():
    p = params("swiglu")
    A = normal(7, D, D)
    J = probes.jacobian_at_origin(lambda x: models.skip_mlp(p, x, "swiglu", skip=A), D)
    np.testing.assert_allclose(J, A, atol=1e-6)


@pytest.mark.slow
@pytest.mark.x64
@pytest.mark.parametrize("act", ["swiglu", "geglu"])
def test_gated_block_jacobian_zero_hessian_bilinear(act):
    p = params(act)
    f = block(p, act)
    np.testing.assert_array_equal(probes.jacobian_at_origin(f, D), np.zeros((D, D)))
    # f(x) = W_down (g(W_gate x) ⊙ W_value x), g'(0) = 1/2:
    # ∂²f_i/∂x_a∂x_b = ½ Σ_j D_ij (G_ja V_jb + G_jb V_ja).
    H = probes.hessian_at_origin(f, D)
    expected = 0.5 * (
        jnp.einsum("ij,ja,jb->iab", p.down, p.gate, p.value) + jnp.einsum("ij,jb,ja->iab", p.down, p.gate, p.value)
    )
    assert H.shape == (D, D, D)
    np.testing.assert_allclose(H, expected, atol=1e-13)


def test_sigmoid_glu_jacobian_is_half_down_value():
    p = params("glu")
    J = probes.jacobian_at_origin(block(p, "glu"), D)
    np.testing.assert_allclose(J, 0.5 * p.down @ p.value, atol=1e-6)
    assert np.abs(J).max() > 1e-2


@pytest.mark.slow
@pytest.mark.parametrize("act", ["swiglu", "geglu"])
def test_stack_jacobians(act):
    stacks = [params(act, L) for L in (1, 2, 3)]

    @jax.jit
    def jacobians(stacks):
        return [[probes.jacobian_at_origin(deep(p, act, r), D) for r in (True, False)] for p in stacks]

    for J_res, J_free in jacobians(stacks):
        np.testing.assert_allclose(J_res, np.eye(D), atol=1e-6)
        np.testing.assert_array_equal(J_free, np.zeros((D, D)))  # exactly 0, even in float32


# ---------------------------------------------------------------------------------------------
# Taylor coefficients and vanishing order (Prop 6, Cor 7)


@pytest.mark.slow
@pytest.mark.x64
def test_taylor_coefficients_match_jacobian_and_hessian():
    """c_0 = f(0), c_1 = J v, c_2 = ½ H[v, v] for every registered activation (custom_jvp ones
    included: their custom rules give relu'(0) = 0 and the smooth softplus derivatives)."""
    v = normal(1, D)

    @jax.jit
    def both(ps):
        out = {}
        for act, p in ps.items():
            f = block(p, act)
            H = probes.hessian_at_origin(f, D)
            expected = jnp.stack([f(jnp.zeros(D)), probes.jacobian_at_origin(f, D) @ v, 0.5 * H @ v @ v])
            out[act] = (probes.taylor_coefficients(f, v, 2), expected)
        return out

    for act, (c, expected) in both({act: params(act) for act in activations.names()}).items():
        assert c.shape == (3, D)
        np.testing.assert_allclose(c, expected, atol=1e-13, err_msg=act)


@pytest.mark.slow
@pytest.mark.x64
def test_taylor_coefficients_swiglu_closed_form():
    # silu(s) = s/2 + s²/4 + O(s⁴): f(t v) = t² ½ W_down(Gv ⊙ Vv) + t³ ¼ W_down((Gv)² ⊙ Vv) + O(t⁵).
    p = params("swiglu")
    v = normal(2, D)
    c = probes.taylor_coefficients(block(p, "swiglu"), v, 4)
    g, u = p.gate @ v, p.value @ v
    np.testing.assert_array_equal(c[:2], np.zeros((2, D)))
    np.testing.assert_allclose(c[2], 0.5 * p.down @ (g * u), atol=1e-14)
    np.testing.assert_allclose(c[3], 0.25 * p.down @ (g**2 * u), atol=1e-14)
    np.testing.assert_allclose(c[4], np.zeros(D), atol=1e-14)


@pytest.mark.slow
@pytest.mark.x64
def test_taylor_coefficients_softplus_honours_custom_rule():
    # softplus = log(1 + e^z): value log 2, slope 1/2, curvature 1/8 at 0 (the primal formula
    # max(z, 0) + log1p(e^{-|z|}) has kinks at 0, so its custom derivative rule must be used).
    c = probes.taylor_coefficients(jax.nn.softplus, jnp.ones(3), 3)
    np.testing.assert_allclose(c[:, 0], [np.log(2.0), 0.5, 0.125, 0.0], atol=1e-15)


@pytest.mark.slow
@pytest.mark.x64
@pytest.mark.parametrize("act", ["swiglu", "geglu"])
def test_vanishing_order_stacks(act):
    for L in (1, 2, 3):
        p = params(act, L)
        assert probes.vanishing_order(deep(p, act, True), D, key=KEY, max_order=2) == 1
        assert probes.vanishing_order(deep(p, act, False), D, key=KEY, max_order=2**L) == 2**L
    assert probes.vanishing_order(deep(params(act, 2), act, False), D, key=KEY, max_order=3) is None


@pytest.mark.slow
def test_vanishing_order_other_cases():
    assert probes.vanishing_order(block(params("glu"), "glu"), D, key=KEY, max_order=3) == 1
    assert probes.vanishing_order(block(params("gelu"), "gelu"), D, key=KEY, max_order=3) == 1
    assert probes.vanishing_order(block(params("softplus"), "softplus"), D, key=KEY, max_order=3) == 0
    assert probes.vanishing_order(lambda x: jnp.zeros_like(x), D, key=KEY) is None


@pytest.mark.slow
@pytest.mark.x64
def test_float32_params_get_float32_tolerances():
    """With float32 params the probes default to float32 (and √eps of float32 as rtol), even
    though float64 is enabled here."""
    p = params("swiglu", 2, dtype=np.float32)
    f = deep(p, "swiglu", False)
    assert probes.jacobian_at_origin(f, D).dtype == jnp.float32
    tn = jax.jit(lambda k: probes.taylor_norms(f, D, key=k, max_order=4))(KEY)
    assert tn.coef.dtype == jnp.float32 and tn.coef.shape == (4, 5) and tn.value.shape == (4,)
    assert int(probes.orders_from_norms(tn)) == 4
    q = params("relu2", dtype=np.float32)
    assert probes.homogeneity_degree(block(q, "relu2"), D, key=KEY) == 2


@pytest.mark.slow
@pytest.mark.x64
def test_orders_from_norms_rule():
    # nonzero: ‖c_k(v)‖ > rtol · max(‖f(v)‖, max_j ‖c_j(v)‖); the order is the minimum over lines
    coef = jnp.array([[0.0, 1e-20, 3e-9, 1.0], [0.0, 0.0, 0.0, 2.0]])
    ones = jnp.ones(2)
    order = lambda c, v, **kw: int(probes.orders_from_norms(probes.TaylorNorms(c, v), **kw))
    assert order(coef, ones) == 3  # 3e-9 < √eps = 1.5e-8
    assert order(coef, ones, rtol=1e-9) == 2
    assert order(coef, ones, rtol=1e-21) == 1
    assert order(coef, jnp.array([1e9, 1.0])) == 3  # a large ‖f(v)‖ hides line 1's terms
    assert order(coef, jnp.array([1e9, 1e9])) == 4  # K + 1: nothing nonzero
    assert order(coef.at[1, 0].set(1.0), ones) == 0  # f(0) ≠ 0
    assert order(jnp.zeros((2, 4)), jnp.zeros(2)) == 4  # f ≡ 0
    batched = probes.TaylorNorms(jnp.stack([coef, coef.at[:, 0].set(1.0)]), jnp.ones((2, 2)))
    np.testing.assert_array_equal(probes.orders_from_norms(batched), [3, 0])
    # the default rtol follows the norms' dtype: √eps32 = 3.5e-4 hides a 1e-5 term, √eps64 does not
    small = jnp.array([[0.0, 1e-5, 1.0]])
    assert order(small.astype(jnp.float32), jnp.ones(1, jnp.float32)) == 2
    assert order(small.astype(jnp.float64), jnp.ones(1)) == 1


def test_taylor_coefficients_errors():
    with pytest.raises(ValueError, match="direction"):
        probes.taylor_coefficients(jnp.sin, jnp.ones((2, 2)), 2)
    with pytest.raises(ValueError, match="order"):
        probes.taylor_coefficients(jnp.sin, jnp.ones(2), -1)
    with pytest.raises(NotImplementedError, match="cond"):
        probes.taylor_coefficients(lambda x: lax.cond(x[0] > 0, jnp.sin, jnp.cos, x), jnp.ones(2), 2)
    with pytest.raises(ValueError, match="d must"):
        probes.jacobian_at_origin(jnp.sin, 0)
    with pytest.raises(ValueError, match="directions"):
        probes.taylor_norms(jnp.sin, 3, key=KEY, max_order=2, directions=jnp.ones((2, 4)))


# ---------------------------------------------------------------------------------------------
# Homogeneity and scaling (Prop 5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "act, residual, degree",
    [
        ("relu2", False, 2),
        ("reglu", False, 2),
        ("relu", False, 1),
        ("relu", True, 1),
        ("gelu", False, None),
        ("relu2", True, None),
    ],
)
def test_homogeneity_degree(act, residual, degree):
    p = params(act)
    k = probes.homogeneity_degree(block(p, act, residual), D, key=jax.random.fold_in(KEY, 3))
    assert k == degree and type(k) is type(degree)


@pytest.mark.slow
def test_homogeneity_fit_skips_samples_where_f_vanishes():
    # d = 1: relu(x)³ vanishes on every negative sample; those pairs must be left out of the
    # fit (kept in, they would pull k towards 0 or make it nan)
    k, err = probes.homogeneity_fit(lambda x: jax.nn.relu(x) ** 3, 1, key=KEY, samples=16)
    assert abs(float(k) - 3) < 1e-4 and float(err) < 1e-4
    k0, _ = probes.homogeneity_fit(lambda x: jnp.zeros_like(x), 2, key=KEY)
    assert np.isnan(float(k0))


@pytest.mark.slow
@pytest.mark.x64
def test_scaling_exponents_relu2():
    p = params("relu2")
    x = normal(4, D)
    small, large, wide = jnp.geomspace(1e-3, 1e-2, 5), jnp.geomspace(1e3, 1e4, 5), jnp.geomspace(1e-3, 1e4, 8)
    res, free = block(p, "relu2", True), block(p, "relu2")
    assert abs(float(probes.scaling_exponent(res, x, small)) - 1) < 0.02
    assert abs(float(probes.scaling_exponent(res, x, large)) - 2) < 0.02
    np.testing.assert_allclose(probes.scaling_exponent(free, x, wide), 2.0, atol=1e-12)
    np.testing.assert_allclose(probes.local_exponents(free, x, wide), np.full(7, 2.0), atol=1e-12)
    local = probes.local_exponents(res, x, wide)
    assert local.shape == (7,) and abs(local[0] - 1) < 0.02 and abs(local[-1] - 2) < 0.02


# ---------------------------------------------------------------------------------------------
# Parity


@pytest.mark.x64
@pytest.mark.parametrize("act", UNGATED_HALF)
def test_odd_part_is_half_linear(act):
    p = params(act)
    f = block(p, act)
    odd, even = probes.parity(f)
    xs = 3.0 * normal(5, 16, D)
    np.testing.assert_allclose(jax.vmap(odd)(xs), 0.5 * xs @ (p.down @ p.up).T, atol=1e-12)
    np.testing.assert_allclose(jax.vmap(odd)(xs) + jax.vmap(even)(xs), jax.vmap(f)(xs), atol=1e-12)
    np.testing.assert_allclose(jax.vmap(even)(-xs), jax.vmap(even)(xs), atol=1e-12)


def test_odd_part_relu2_is_not_half_linear():
    p = params("relu2")
    odd, _ = probes.parity(block(p, "relu2"))
    xs = normal(5, 16, D)
    assert np.abs(jax.vmap(odd)(xs) - 0.5 * xs @ (p.down @ p.up).T).max() > 1e-2


# ---------------------------------------------------------------------------------------------
# Thousands of draws in one jitted call


def test_vmapped_jacobians_over_draws():
    ps = params("swiglu", draws=DRAWS)
    jac = jax.jit(jax.vmap(lambda p: probes.jacobian_at_origin(block(p, "swiglu"), D)))
    assert jac(ps).shape == (DRAWS, D, D)
    np.testing.assert_array_equal(jac(ps), np.zeros((DRAWS, D, D)))
    qs = params("glu", draws=DRAWS)
    J = jax.jit(jax.vmap(lambda p: probes.jacobian_at_origin(block(p, "glu"), D)))(qs)
    np.testing.assert_allclose(J, 0.5 * jnp.einsum("bij,bjk->bik", qs.down, qs.value), atol=1e-6)


@pytest.mark.slow
@pytest.mark.x64
def test_vmapped_vanishing_orders_over_draws():
    ps = params("swiglu", 3, draws=DRAWS)

    @jax.jit
    def norms(ps):
        def one(p):
            res = probes.taylor_norms(deep(p, "swiglu", True), D, key=KEY, max_order=2, directions=2)
            free = probes.taylor_norms(deep(p, "swiglu", False), D, key=KEY, max_order=8, directions=2)
            return res, free

        return jax.vmap(one)(ps)

    res, free = norms(ps)
    assert free.coef.shape == (DRAWS, 2, 9) and free.value.shape == (DRAWS, 2)
    orders_res, orders_free = probes.orders_from_norms(res), probes.orders_from_norms(free)
    assert orders_res.shape == orders_free.shape == (DRAWS,)
    np.testing.assert_array_equal(orders_res, np.ones(DRAWS))
    np.testing.assert_array_equal(orders_free, np.full(DRAWS, 8))


@pytest.mark.x64
def test_vmapped_homogeneity_fit_over_draws():
    ps = params("reglu", draws=DRAWS)
    k, err = jax.jit(jax.vmap(lambda p: probes.homogeneity_fit(block(p, "reglu"), D, key=KEY)))(ps)
    np.testing.assert_allclose(k, 2.0, atol=1e-12)
    assert float(err.max()) < 1e-12
