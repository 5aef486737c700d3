import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import models

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

KEY = jax.random.key(0)
ODD_HALF = ["relu", "gelu", "gelu_tanh", "silu", "softplus"]


def flip(params, S):
    """The sign-flip absorber: rows of W_up in S negated."""
    return params._replace(up=params.up.at[S].multiply(-1))


def inputs(key, count, d):
    radii = jnp.exp(jax.random.uniform(key, (count, 1), minval=-3, maxval=3))
    return radii * jax.random.normal(jax.random.fold_in(key, 1), (count, d))


@pytest.mark.parametrize("activation", ODD_HALF)
@pytest.mark.parametrize("d,n,size", [(2, 4, None), (4, 16, None), (3, 12, 5)])
def test_absorber_identity(activation, d, n, size):
    params, S = models.absorbable(jax.random.fold_in(KEY, d * n), d, n, activation, size=size)
    assert params.up.dtype == jnp.float64 and len(S) == (size or d)
    np.testing.assert_allclose(params.down[:, S] @ params.up[S], -np.eye(d), atol=1e-12)
    xs = inputs(KEY, 1000, d)
    target = jax.vmap(models.skip_mlp, (None, 0, None))(params, xs, activation)
    absorbed = jax.vmap(models.mlp, (None, 0, None))(flip(params, S), xs, activation)
    err = jnp.max(jnp.abs(target - absorbed) / (1 + jnp.linalg.norm(xs, axis=1, keepdims=True)))
    assert float(err) <= 1e-12


def test_absorber_fails_for_relu2():
    params, S = models.absorbable(KEY, 3, 8, "relu2")
    xs = inputs(KEY, 1000, 3)
    target = jax.vmap(models.skip_mlp, (None, 0, None))(params, xs, "relu2")
    absorbed = jax.vmap(models.mlp, (None, 0, None))(flip(params, S), xs, "relu2")
    assert float(jnp.max(jnp.abs(target - absorbed))) > 1e-2


def test_sample_is_a_prefix_and_matches_init():
    small = models.sample(KEY, 10, 3, 5, "swiglu")
    big = models.sample(KEY, 100, 3, 5, "swiglu")
    for a, b in zip(small, big):
        np.testing.assert_array_equal(a, b[:10])
    one = models.init(jax.random.fold_in(KEY, 7), 3, 5, "swiglu")
    for a, b in zip(one, big):  # same draw; jit may round the 1/sqrt(fan_in) scaling differently
        np.testing.assert_allclose(a, b[7], rtol=1e-15, atol=0)
    chunk = models.sample(KEY, 20, 3, 5, "swiglu", start=40)
    np.testing.assert_array_equal(chunk.down, big.down[40:60])


def test_dtype_follows_x64_and_is_never_flipped():
    assert jax.config.jax_enable_x64
    assert models.init(KEY, 2, 3, "relu").up.dtype == jnp.float64
    assert models.init(KEY, 2, 3, "relu", dtype=jnp.float32).up.dtype == jnp.float32
    with jax.enable_x64(False):
        assert models.init(KEY, 2, 3, "relu").up.dtype == jnp.float32
        with pytest.raises(ValueError, match="jax_enable_x64"):
            models.init(KEY, 2, 3, "relu", dtype=jnp.float64)
        assert not jax.config.jax_enable_x64


@pytest.mark.parametrize("dist", models.DISTS)
def test_distributions(dist):
    p = models.init(KEY, 4, 8, "relu", dist=dist, bits=3)
    assert p.up.shape == (8, 4) and p.down.shape == (4, 8)
    values = np.unique(np.concatenate([np.ravel(p.up), np.ravel(p.down)]))
    expected = {"rademacher": {-1, 1}, "ternary": {-1, 0, 1}, "grid": set(range(-3, 4))}
    if dist in expected:
        assert set(values) <= expected[dist] and len(values) >= 2
    else:
        assert len(values) == 64
    if dist == "orthogonal":
        np.testing.assert_allclose(p.up.T @ p.up, np.eye(4), atol=1e-12)
        np.testing.assert_allclose(p.down @ p.down.T, np.eye(4), atol=1e-12)


def test_lemma4_reduction():
    params = models.init(KEY, 4, 12, "gelu")
    A = jax.random.normal(jax.random.fold_in(KEY, 1), (4, 4)) + 2 * jnp.eye(4)
    reduced = models.reduce_skip(A, params)
    xs = inputs(KEY, 200, 4)
    lhs = jax.vmap(models.skip_mlp, (None, 0, None, None))(params, xs, "gelu", A)
    rhs = jax.vmap(lambda x: A @ models.skip_mlp(reduced, x, "gelu"))(xs)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("A", [jnp.zeros((3, 3)), jnp.diag(jnp.array([1.0, 1.0, 0.0])), jnp.diag(jnp.array([1.0, 1.0, 1e-12]))])
def test_lemma4_rejects_singular_skip(A):
    with pytest.raises(ValueError, match="singular or ill-conditioned"):
        models.reduce_skip(A, models.init(KEY, 3, 6, "relu"))


def test_lemma4_rejects_wrong_shape():
    with pytest.raises(ValueError, match=r"A must have shape \(\.\.\., 3, 3\)"):
        models.reduce_skip(jnp.eye(4), models.init(KEY, 3, 6, "relu"))


def test_skip_mlp_vmapped_over_4096_draws_and_a_batch():
    draws, batch, d, n = 4096, 8, 3, 6
    params = models.sample(KEY, draws, d, n, "silu")
    xs = jax.random.normal(KEY, (batch, d))
    per_input = jax.vmap(models.skip_mlp, (None, 0, None))
    out = jax.jit(jax.vmap(per_input, (0, None, None)), static_argnums=2)(params, xs, "silu")
    assert out.shape == (draws, batch, d)
    for i in (0, 1234, 4095):
        p = models.MLPParams(params.up[i], params.down[i])
        manual = xs + jax.nn.silu(xs @ p.up.T) @ p.down.T
        np.testing.assert_allclose(out[i], manual, rtol=1e-12, atol=1e-12)


def test_stack_matches_a_python_loop():
    p = models.init(KEY, 3, 5, "swiglu", depth=4)
    assert p.down.shape == (4, 3, 5)
    x = jnp.arange(3.0)
    for residual in (True, False):
        h = x
        for l in range(4):
            layer = jax.tree.map(lambda a: a[l], p)
            h = models.skip_mlp(layer, h, "swiglu") if residual else models.mlp(layer, h, "swiglu")
        np.testing.assert_allclose(models.stack(p, x, "swiglu", residual=residual), h, rtol=1e-13)


def test_stack_promotes_the_input_like_one_block():
    p = models.init(KEY, 3, 5, "relu", depth=2, dtype=jnp.float64)
    x = jnp.arange(3.0, dtype=jnp.float32)
    y = models.stack(p, x, "relu")
    assert y.dtype == jnp.float64 == models.skip_mlp(jax.tree.map(lambda a: a[0], p), x, "relu").dtype
    np.testing.assert_allclose(y, models.stack(p, x.astype(jnp.float64), "relu"), rtol=0)


def test_bad_input_names_the_argument():
    p = models.init(KEY, 3, 6, "relu")
    with pytest.raises(ValueError, match=r"x must have shape \(3,\)"):
        models.mlp(p, jnp.ones(4), "relu")
    with pytest.raises(ValueError, match=r"params.up must have shape \(\.\.\., 6, 3\)"):
        models.mlp(models.MLPParams(jnp.ones((5, 3)), p.down), jnp.ones(3), "relu")
    with pytest.raises(ValueError, match="needs GatedParams"):
        models.mlp(p, jnp.ones(3), "swiglu")
    with pytest.raises(ValueError, match=r"skip must have shape \(3, 3\)"):
        models.skip_mlp(p, jnp.ones(3), "relu", jnp.eye(2))
    with pytest.raises(ValueError, match="unknown activation"):
        models.init(KEY, 3, 6, "tanhh")
    with pytest.raises(ValueError, match="dist must be one of"):
        models.init(KEY, 3, 6, "relu", dist="cauchy")
    with pytest.raises(ValueError, match="size must be"):
        models.absorbable(KEY, 3, 6, "relu", size=2)
    with pytest.raises(ValueError, match="ungated"):
        models.absorbable(KEY, 3, 6, "swiglu")
    with pytest.raises(ValueError, match="leading depth axis"):
        models.stack(p, jnp.ones(3), "relu")


def test_absorbable_sample_stacks_the_single_draws():
    W, sets = models.absorbable_sample(KEY, 3, 2, 6, "gelu", size=3)
    assert W.up.shape == (3, 6, 2) and W.down.shape == (3, 2, 6) and len(sets) == 3
    for i, S in enumerate(sets):
        one, S_one = models.absorbable(jax.random.fold_in(KEY, i), 2, 6, "gelu", size=3)
        np.testing.assert_array_equal(W.down[i], one.down)
        np.testing.assert_array_equal(S, S_one)
    with pytest.raises(ValueError, match="draws must be a positive integer"):
        models.absorbable_sample(KEY, 0, 2, 6, "gelu")
