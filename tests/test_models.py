"""Tests for absorbjax.models: blocks, weights, the absorber identity, Lemma 4.

Exactness claims (the absorber, Lemma 4, float64 promotion) run under the ``x64`` marker; the
rest run in JAX's default float32, as a user's session would.
"""

import collections
import contextlib
import functools
import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import activations, condition, models

KEY = jax.random.key(0)


def flip(params, S):
    """The sign-flip absorber: rows of W_up in S negated."""
    return params._replace(up=params.up.at[S].multiply(-1))


def inputs(key, count, d):
    radii = jnp.exp(jax.random.uniform(key, (count, 1), minval=-3, maxval=3))
    return radii * jax.random.normal(jax.random.fold_in(key, 1), (count, d))


@functools.partial(jax.jit, static_argnums=3)
def relative_gap(target, absorbed, xs, activation):
    """max_x ‖skip_mlp(target, x) − mlp(absorbed, x)‖_∞ / (1 + ‖x‖) over the rows of xs."""
    res = jax.vmap(models.skip_mlp, (None, 0, None))(target, xs, activation)
    free = jax.vmap(models.mlp, (None, 0, None))(absorbed, xs, activation)
    return jnp.max(jnp.abs(res - free) / (1 + jnp.linalg.norm(xs, axis=1, keepdims=True)))


# Every odd-part-z/2 activation at one shape with |S| > d, and every shape for GELU: a wrong
# pseudo-inverse (|S| > d) or a wrong S shows up as an O(1) gap.
ABSORBER_CASES = [("gelu", 2, 4, None), ("gelu", 4, 16, None)] + [
    (act, 3, 12, 5)
    for act in ("relu", "gelu", "gelu_tanh", "silu", "softplus", "hardswish", "leaky_relu", "leaky_relu(0.2)")
]


@pytest.mark.slow
@pytest.mark.x64
@pytest.mark.parametrize("activation,d,n,size", ABSORBER_CASES)
def test_absorber_identity(activation, d, n, size):
    params, S = models.planted(activation, d, n, key=jax.random.fold_in(KEY, d * n), size=size)
    chex.assert_type(params.up, jnp.float64)
    assert len(S) == (size or d) and len(set(S.tolist())) == len(S)
    c = float(activations.get(activation).odd_slope)  # σ(z) − σ(−z) = c z: c·W_down[:,S] W_up[S,:] = −I
    np.testing.assert_allclose(c * params.down[:, S] @ params.up[S], -np.eye(d), atol=1e-12)
    assert float(relative_gap(params, flip(params, S), inputs(KEY, 1000, d), activation)) <= 1e-12


@pytest.mark.x64
def test_leaky_blocks_planted_for_c_one_are_not_absorbed_by_the_flip():
    """The plain condition W_down[:,S] W_up[S,:] = −I is the wrong one for leaky_relu(α): the flip
    then misses by α·‖x‖ (the issue's item 1), so ``models.planted`` plants with c = 1 + α."""
    params, S = models.planted("relu", 3, 12, key=KEY, size=5)  # W_down[:,S] W_up[S,:] = −I
    gap = float(relative_gap(params, flip(params, S), inputs(KEY, 1000, 3), "leaky_relu(0.1)"))
    assert gap > 1e-2


@pytest.mark.x64
def test_absorbable_relu_blocks_vanish_where_exactly_S_is_active():
    """Where the active units are exactly ``S`` the block is ``x + W_down[:,S] W_up[S,:] x = 0``;
    the cone is not empty in some of 8 draws at (2, 4) (catches: the docstring's claim false)."""
    W, sets = models.planted_sample("relu", 2, 4, key=KEY, draws=8)
    x = np.asarray(jax.random.normal(KEY, (4096, 2), jnp.float64))
    found = 0
    block = jax.vmap(lambda p, v: models.skip_mlp(p, v, "relu"), in_axes=(None, 0))
    for i, S in enumerate(sets):
        W_i = jax.tree.map(lambda a, i=i: np.asarray(a[i]), W)
        there = ((x @ W_i.up.T > 0) == np.isin(np.arange(4), S)).all(1)
        y = np.asarray(block(W_i, x[there]))
        assert np.abs(y).max(initial=0.0) <= 1e-12 * np.abs(x).max()
        found += bool(there.any())
    assert found >= 1


@pytest.mark.slow
@pytest.mark.x64
def test_absorber_fails_for_relu2():
    params, S = models.planted("relu2", 3, 8, key=KEY)
    assert float(relative_gap(params, flip(params, S), inputs(KEY, 1000, 3), "relu2")) > 1e-3


@pytest.mark.x64
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
def test_absorber_of_rounded_weights_says_the_storage_is_too_coarse(dtype):
    """Rounding absorbable float64 weights to a short float breaks rule (★); the absorber's error
    names the storage (bfloat16 too, which NumPy alone does not call floating)."""
    params, S = models.planted("gelu", 3, 8, key=KEY)
    short = models.MLPParams(params.up.astype(dtype), params.down.astype(dtype))
    with pytest.raises(ValueError, match=f"the weights are {jnp.dtype(dtype).name}, whose rounding exceeds"):
        condition.absorber(short, S, "gelu")


@contextlib.contextmanager
def random_traces():
    """Counts the traces of the two random programs (``_keys``, ``_entries``) inside the block,
    from JAX's public monitoring events (a trace precedes every compile)."""
    seen = collections.Counter()

    def listener(event, duration, *, fun_name=None, **_):
        if event == "/jax/core/compile/jaxpr_trace_duration" and fun_name in ("_keys", "_entries"):
            seen[fun_name] += 1

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def test_the_trace_counter_sees_a_new_random_program():
    """The counter the tests below rely on is not blind: a dtype never drawn before traces anew."""
    with random_traces() as seen:
        models.sample("relu", 2, 3, key=KEY, draws=2, dtype=jnp.bfloat16)
    assert seen["_entries"] == 1


@pytest.mark.slow
def test_draw_i_is_init_of_fold_in_key_i_in_any_chunk_without_retracing():
    first = models.sample("swiglu", 3, 5, key=KEY, draws=4)
    with random_traces() as seen:
        second = models.sample("swiglu", 3, 5, key=KEY, draws=4, start=4)
    assert not seen  # start is traced: a new chunk compiles no random program
    chex.assert_shape(first.gate, (4, 5, 3))
    draws = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), first, second)
    for i in range(8):
        chex.assert_trees_all_equal(
            models.init("swiglu", 3, 5, key=jax.random.fold_in(KEY, i)), jax.tree.map(lambda a: a[i], draws)
        )


def test_nearby_draw_counts_share_one_program_and_agree():
    few = models.sample("relu", 2, 5, key=KEY, draws=3, dtype=jnp.float32)
    with random_traces() as seen:
        more = models.sample("relu", 2, 5, key=KEY, draws=11, dtype=jnp.float32)
    assert not seen  # 3 and 11 draws: one program of 16
    chex.assert_shape((few.up, more.up), [(3, 5, 2), (11, 5, 2)])
    chex.assert_trees_all_equal(few, jax.tree.map(lambda a: a[:3], more))
    assert [models.size_bucket(k) for k in (1, 16, 17, 1000, 1025, 5000)] == [16, 16, 32, 1024, 2048, 5120]
    assert [models.size_bucket(k, 64) for k in (10, 64, 65, 130)] == [16, 64, 128, 192]


def test_blocks_of_nearby_shapes_share_one_random_program():
    """The random numbers depend only on how many entries a matrix has (bucketed): (2, 5), (3, 4)
    and (4, 3) blocks of any ungated activation draw from one compiled program."""
    models.sample("relu", 2, 5, key=KEY, draws=3, dtype=jnp.float32)
    with random_traces() as seen:
        models.sample("gelu", 3, 4, key=KEY, draws=3, dtype=jnp.float32)
        models.sample("silu", 4, 3, key=KEY, draws=3, dtype=jnp.float32)
    assert not seen


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["relu", "swiglu"])
@pytest.mark.parametrize("dist,law", [("gaussian", "normal"), ("uniform", "uniform")])
def test_gaussian_and_uniform_weights_are_the_variance_scaling_initializer(activation, dist, law):
    """Each field is ``variance_scaling(1, "fan_in", law)`` (fan_in = columns) applied, outside
    jit, to its key of ``split(key, fields)``, bit for bit."""
    p = models.init(activation, 3, 7, key=KEY, dist=dist)
    initializer = jax.nn.initializers.variance_scaling(1.0, "fan_in", law, in_axis=-1, out_axis=-2)
    keys = jax.random.split(KEY, len(p))
    chex.assert_trees_all_equal(tuple(p), tuple(initializer(k, a.shape, a.dtype) for k, a in zip(keys, p)))


@pytest.mark.x64
def test_dtype_follows_x64_and_is_never_flipped():
    assert jax.config.jax_enable_x64
    assert models.init("relu", 2, 3, key=KEY).up.dtype == jnp.float64
    assert models.init("relu", 2, 3, key=KEY, dtype=jnp.float32).up.dtype == jnp.float32
    with jax.enable_x64(False):
        assert models.init("relu", 2, 3, key=KEY).up.dtype == jnp.float32
        with pytest.raises(ValueError, match="jax_enable_x64"):
            models.init("relu", 2, 3, key=KEY, dtype=jnp.float64)
        assert not jax.config.jax_enable_x64


@pytest.mark.parametrize("dist", models.DISTS)
def test_distributions(dist):
    d, n = 4, 64
    p = models.init("relu", d, n, key=KEY, dist=dist, bits=3)
    chex.assert_shape((p.up, p.down), [(n, d), (d, n)])
    chex.assert_type((p.up, p.down), jnp.float32)
    values = np.unique(np.concatenate([np.ravel(p.up), np.ravel(p.down)]))
    expected = {"rademacher": {-1, 1}, "ternary": {-1, 0, 1}, "grid": set(range(-3, 4))}
    if dist in expected:
        assert set(values) <= expected[dist] and len(values) >= 2
    else:
        assert len(values) == 2 * n * d
    if dist in ("gaussian", "uniform"):
        # variance 1/fan_in with fan_in the number of columns: std 1/2 for W_up, 1/8 for W_down
        np.testing.assert_allclose([np.std(p.up), np.std(p.down)], [d**-0.5, n**-0.5], rtol=0.15)
    if dist == "uniform":
        assert np.abs(p.up).max() <= np.sqrt(3 / d) and np.abs(p.down).max() <= np.sqrt(3 / n)
    if dist == "orthogonal":
        np.testing.assert_allclose(p.up.T @ p.up, np.eye(d), atol=1e-5)
        np.testing.assert_allclose(p.down @ p.down.T, np.eye(d), atol=1e-5)


@pytest.mark.slow
@pytest.mark.x64
def test_lemma4_reduction():
    params = models.init("gelu", 4, 12, key=KEY)
    A = jax.random.normal(jax.random.fold_in(KEY, 1), (4, 4)) + 2 * jnp.eye(4)
    reduced = models.reduce_skip(params, A)
    chex.assert_trees_all_equal(reduced.up, params.up)
    xs = inputs(KEY, 200, 4)
    lhs = jax.vmap(models.skip_mlp, (None, 0, None, None))(params, xs, "gelu", A)
    rhs = jax.vmap(lambda x: A @ models.skip_mlp(reduced, x, "gelu"))(xs)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "A", [jnp.zeros((3, 3)), jnp.diag(jnp.array([1.0, 1.0, 0.0])), jnp.diag(jnp.array([1.0, 1.0, 1e-12]))]
)
def test_lemma4_rejects_singular_skip(A):
    with pytest.raises(ValueError, match="skip is singular or ill-conditioned"):
        models.reduce_skip(models.init("relu", 3, 6, key=KEY), A)


def test_lemma4_max_cond_is_the_threshold():
    A = jnp.diag(jnp.array([1.0, 1.0, 1e-2]))  # condition number 100
    params = models.init("relu", 3, 6, key=KEY)
    models.reduce_skip(params, A, max_cond=101.0)
    with pytest.raises(ValueError, match="condition number 100 > max_cond 99"):
        models.reduce_skip(params, A, max_cond=99.0)


@pytest.mark.slow
def test_skip_mlp_vmapped_over_4096_draws_and_a_batch():
    draws, batch, d, n = 4096, 8, 3, 6
    params = models.sample("silu", d, n, key=KEY, draws=draws)
    xs = jax.random.normal(KEY, (batch, d))
    per_input = jax.vmap(models.skip_mlp, (None, 0, None))
    out = jax.jit(jax.vmap(per_input, (0, None, None)), static_argnums=2)(params, xs, "silu")
    chex.assert_shape(out, (draws, batch, d))
    for i in (0, 1234, 4095):
        manual = xs + jax.nn.silu(xs @ params.up[i].T) @ params.down[i].T
        np.testing.assert_allclose(out[i], manual, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_stack_matches_a_python_loop():
    p = models.init("swiglu", 3, 5, key=KEY, depth=4)
    chex.assert_shape(p.down, (4, 3, 5))
    x = jnp.arange(3.0)
    for residual in (True, False):
        h = x
        for l in range(4):
            layer = jax.tree.map(lambda a: a[l], p)
            h = models.skip_mlp(layer, h, "swiglu") if residual else models.mlp(layer, h, "swiglu")
        np.testing.assert_allclose(models.stack(p, x, "swiglu", residual=residual), h, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_stack_with_per_layer_skips_matches_a_python_loop():
    p = models.init("gelu", 3, 5, key=KEY, depth=2)
    A = jax.random.normal(jax.random.fold_in(KEY, 1), (2, 3, 3))
    x = jnp.arange(3.0)
    h = x
    for l in range(2):
        h = models.skip_mlp(jax.tree.map(lambda a: a[l], p), h, "gelu", A[l])
    np.testing.assert_allclose(models.stack(p, x, "gelu", skip=A), h, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="skip needs residual=True"):
        models.stack(p, x, "gelu", residual=False, skip=A)
    with pytest.raises(ValueError, match=r"skip must have shape \(L, d, d\)"):
        models.stack(p, x, "gelu", skip=A[0])


@pytest.mark.slow
@pytest.mark.x64
def test_stack_promotes_the_input_like_one_block():
    p = models.init("relu", 3, 5, key=KEY, depth=2, dtype=jnp.float64)
    x = jnp.arange(3.0, dtype=jnp.float32)
    y = models.stack(p, x, "relu")
    assert y.dtype == jnp.float64 == models.skip_mlp(jax.tree.map(lambda a: a[0], p), x, "relu").dtype
    np.testing.assert_allclose(y, models.stack(p, x.astype(jnp.float64), "relu"), rtol=0)


@pytest.mark.slow
def test_bad_input_names_the_argument():
    p = models.init("relu", 3, 6, key=KEY)
    with pytest.raises(ValueError, match=r"x must have shape \(3,\)"):
        models.mlp(p, jnp.ones(4), "relu")
    with pytest.raises(ValueError, match=r"params.up must have shape \(\.\.\., 6, 3\)"):
        models.mlp(models.MLPParams(jnp.ones((5, 3)), p.down), jnp.ones(3), "relu")
    with pytest.raises(ValueError, match="needs GatedParams"):
        models.mlp(p, jnp.ones(3), "swiglu")
    with pytest.raises(ValueError, match=r"skip must have shape \(3, 3\)"):
        models.skip_mlp(p, jnp.ones(3), "relu", jnp.eye(2))
    with pytest.raises(ValueError, match=r"skip must have shape \(\.\.\., 3, 3\)"):
        models.reduce_skip(p, jnp.eye(4))
    with pytest.raises(ValueError, match="unknown activation"):
        models.init("tanhh", 3, 6, key=KEY)
    with pytest.raises(ValueError, match="dist must be one of"):
        models.init("relu", 3, 6, key=KEY, dist="cauchy")
    with pytest.raises(ValueError, match="bits must be an integer >= 2"):
        models.init("relu", 3, 6, key=KEY, dist="grid", bits=1)
    with pytest.raises(ValueError, match="d must be a positive integer"):
        models.init("relu", 0, 6, key=KEY)
    with pytest.raises(ValueError, match="depth must be a positive integer"):
        models.init("relu", 3, 6, key=KEY, depth=0)
    with pytest.raises(ValueError, match="size must be"):
        models.planted("relu", 3, 6, key=KEY, size=2)
    with pytest.raises(ValueError, match="ungated"):
        models.planted("swiglu", 3, 6, key=KEY)
    with pytest.raises(ValueError, match="leading depth axis"):
        models.stack(p, jnp.ones(3), "relu")
    layers = models.init("relu", 3, 6, key=KEY, depth=2)  # a stack where one block belongs
    with pytest.raises(ValueError, match=r"params.down must be \(d, n\), got \(2, 3, 6\): stacks: models.stack"):
        models.mlp(layers, jnp.ones(3), "relu")
    with pytest.raises(ValueError, match="draws must be a positive integer"):
        models.sample("relu", 3, 6, key=KEY, draws=0)


def test_planted_sample_stacks_the_single_draws():
    W, sets = models.planted_sample("gelu", 2, 6, key=KEY, draws=3, size=3)
    chex.assert_shape((W.up, W.down), [(3, 6, 2), (3, 2, 6)])
    assert len(sets) == 3
    for i, S in enumerate(sets):
        one, S_one = models.planted("gelu", 2, 6, key=jax.random.fold_in(KEY, i), size=3)
        chex.assert_trees_all_equal(jax.tree.map(lambda a: a[i], W), one)
        np.testing.assert_array_equal(S, S_one)
    with pytest.raises(ValueError, match="draws must be a positive integer"):
        models.planted_sample("gelu", 2, 6, key=KEY, draws=0)


@pytest.mark.slow
@pytest.mark.x64
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_absorbable_stack_equals_the_stack_of_its_blockwise_absorbers(activation):
    """``planted(..., depth=L)``: layer ``l`` from ``fold_in(key, l)``, each with its own ``S``;
    the residual-free stack of the absorbers is the residual stack (float64, to 1e-12)."""
    key = jax.random.key(3)
    params, sets = models.planted(activation, 3, 6, key=key, depth=3)
    assert params.up.shape == (3, 6, 3) and len(sets) == 3
    first, S0 = models.planted(activation, 3, 6, key=jax.random.fold_in(key, 0))
    np.testing.assert_array_equal(params.up[0], first.up)
    np.testing.assert_array_equal(sets[0], S0)
    V = [condition.absorber(models.MLPParams(params.up[l], params.down[l]), S, activation) for l, S in enumerate(sets)]
    V = models.MLPParams(*(jnp.stack(a) for a in zip(*V)))
    xs = jax.random.normal(jax.random.key(4), (64, 3)) * 3.0
    res = jax.vmap(lambda x: models.stack(params, x, activation))(xs)
    free = jax.vmap(lambda x: models.stack(V, x, activation, residual=False))(xs)
    assert float(jnp.abs(res - free).max() / jnp.abs(res).max()) < 1e-12
    stacks, per_draw = models.planted_sample(activation, 3, 6, key=key, draws=2, depth=2)
    assert stacks.down.shape == (2, 2, 3, 6) and [len(s) for s in per_draw] == [2, 2]


# 100 rounds of 400 orthogonal draws at four sizes in a fresh process, on the CPU, inline dispatch,
# under a 20 s stall watch.
_MANY_ORTHOGONAL_SAMPLES = """
import jax
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_cpu_enable_async_dispatch", False)  # as absorbjax reproduce runs
from absorbjax import models
from absorbjax.lab import stall
with stall.watch(20, poll=1):
    for i in range(100):
        for d, n in [(2, 4), (2, 12), (3, 9), (4, 32)]:
            jax.block_until_ready(models.sample("relu", d, n, key=jax.random.key(i), draws=400, dist="orthogonal"))
print("done")
"""


@pytest.mark.integration  # a child process
@pytest.mark.slow
def test_orthogonal_samples_never_hang_the_cpu_runtime():
    """Two batched QRs side by side once hung XLA's CPU runtime on two cores: each fans out into the
    intra-op pool it runs on and waits (``models._draws._orthogonal``). Without the ordering, on two
    cores, this process stalled in 6 of 6 runs (a variant with ``JAX_PLATFORMS=cpu`` set passed
    10 of 10: the race depends on timing); with it, 4 of 4 finished in about 6 s (2026-12-03)."""
    proc = subprocess.run([sys.executable, "-c", _MANY_ORTHOGONAL_SAMPLES], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr[-3000:]


# ---------------------------------------------------------------------------------------------
# Layout: flax kernels are (in, out); the params are PyTorch layout (out, in)


@pytest.mark.slow
def test_from_flax_takes_layers_or_kernels_and_matches_the_flax_forward():
    from flax import nnx

    up = nnx.Linear(8, 32, use_bias=False, rngs=nnx.Rngs(0))
    down = nnx.Linear(32, 8, use_bias=False, rngs=nnx.Rngs(1))
    x = jax.random.normal(KEY, (8,))
    for params in (
        models.MLPParams.from_flax(up, down),
        models.MLPParams.from_flax(up.kernel[...], down.kernel[...]),
    ):
        assert models.dims(params) == (8, 32)
        np.testing.assert_allclose(models.mlp(params, x, "gelu"), down(activations.get("gelu")(up(x))), rtol=1e-5)
    gated = models.GatedParams.from_flax(up.kernel[...], up.kernel[...], down.kernel[...])
    assert models.dims(gated) == (8, 32)


def test_a_narrow_block_warns_naming_the_layout_and_the_converter():
    """nnx.Linear(8, 32) / (32, 8) kernels passed as MLPParams read as d = 32, n = 8 (the issue's
    item 8): check_layout warns, naming (in, out) and from_flax, unless narrow=True; the converter,
    wide blocks and square ones pass silently."""
    import warnings

    from flax import nnx

    up = nnx.Linear(8, 32, use_bias=False, rngs=nnx.Rngs(0))
    down = nnx.Linear(32, 8, use_bias=False, rngs=nnx.Rngs(1))
    raw = models.MLPParams(up.kernel[...], down.kernel[...])
    assert models.dims(raw) == (32, 8)
    with pytest.warns(models.NarrowBlockWarning, match=r"width n = 8 < input d = 32.*\(in, out\).*from_flax"):
        assert models.check_layout(raw) is raw
    gated = models.GatedParams(up.kernel[...], up.kernel[...], down.kernel[...])
    with pytest.warns(models.NarrowBlockWarning, match="GatedParams.from_flax"):
        models.check_layout(gated)
    draws = models.MLPParams(np.zeros((4, 2, 5)), np.zeros((4, 5, 2)))  # a leading draws axis
    with pytest.warns(models.NarrowBlockWarning, match="width n = 2 < input d = 5"):
        models.check_layout(draws)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        models.check_layout(raw, narrow=True)
        models.check_layout(models.MLPParams.from_flax(up, down))
        models.check_layout(models.init("relu", 4, 4, key=KEY))
    with pytest.raises(ValueError, match="params.up must have shape"):
        models.check_layout(models.MLPParams(np.zeros((5, 3)), np.zeros((3, 4))))


@pytest.mark.slow
@pytest.mark.x64
def test_narrow_stacks_jacobian_ranks():
    """docs/theory/depth.md §8 (n < d): a residual GELU stack's Jacobian at 0 is
    Π_ℓ (I + ½ D_ℓ U_ℓ), invertible at a Gaussian draw, while a free stack's Jacobian has rank
    ≤ n < d at every input tried."""
    d, n, L = 5, 2, 3
    params = models.init("gelu", d, n, key=KEY, depth=L)
    J = jax.jacfwd(lambda x: models.stack(params, x, "gelu", residual=True))(jnp.zeros(d))
    expected = np.eye(d)
    for layer in range(L):
        expected = (np.eye(d) + 0.5 * np.asarray(params.down[layer] @ params.up[layer])) @ expected
    np.testing.assert_allclose(J, expected, atol=1e-13)
    assert abs(np.linalg.det(expected)) > 1e-6
    for x in np.asarray(jax.random.normal(KEY, (16, d), jnp.float64)):
        F = jax.jacfwd(lambda x: models.stack(params, x, "gelu", residual=False))(jnp.asarray(x))
        assert np.linalg.matrix_rank(np.asarray(F), tol=1e-10) <= n


def test_every_public_decision_warns_on_a_narrow_block_unless_meant():
    """flax kernels ``(in, out)`` passed as ``MLPParams(up, down)`` read as a block narrower than its
    input: every public decision warns, naming ``from_flax``, unless ``narrow=True``."""
    import warnings

    rng = np.random.default_rng(0)
    kernels = models.MLPParams(rng.normal(size=(3, 8)), rng.normal(size=(8, 3)))  # nnx.Linear(3, 8), (8, 3)
    batched = models.MLPParams(kernels.up[None], kernels.down[None])
    calls = [
        lambda **k: condition.find_absorbing_set(kernels, "relu", **k),
        lambda **k: condition.find_absorbing_sets(batched, "relu", progress=False, **k),
        lambda **k: condition.distance(kernels, "relu", **k),
        lambda **k: condition.min_extra_width(kernels, "relu", **k),
    ]
    for call in calls:
        with pytest.warns(models.NarrowBlockWarning, match="from_flax"):
            call()
        with warnings.catch_warnings():
            warnings.simplefilter("error", models.NarrowBlockWarning)
            call(decision=condition.Decision(narrow=True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", models.NarrowBlockWarning)
        cert = condition.find_absorbing_set(models.MLPParams.from_flax(kernels.up, kernels.down), "relu")
    assert cert.status == "not_absorbable"


@pytest.mark.slow
def test_orthogonal_draws_follow_a_name_re_registered_from_ungated_to_gated():
    """The orthogonal draw's program is keyed on the field count, not the activation's name: a name
    re-registered as a gate gets three fields, never the two its first program made."""
    try:
        activations.register("swap_test", jax.nn.relu, odd_slope=1, kink=True, overwrite=True)
        plain = models.init("swap_test", 3, 5, key=KEY, dist="orthogonal")
        activations.register("swap_test", jax.nn.silu, gated=True, overwrite=True)
        gated = models.init("swap_test", 3, 5, key=KEY, dist="orthogonal")
    finally:
        activations.unregister("swap_test")
    assert isinstance(plain, models.MLPParams) and isinstance(gated, models.GatedParams)
