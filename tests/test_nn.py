"""absorbjax.nn: flax modules whose weights convert losslessly to and from models' NamedTuples."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from absorbjax import condition, models, nn

X64 = pytest.mark.x64
ACTS = ["relu", "gelu", "swiglu", "glu"]


def _xs(d, batch=7, key=1):
    return jax.random.normal(jax.random.key(key), (batch, d))


def _pure(params, xs, activation, residual):
    block = models.skip_mlp if residual else models.mlp
    return jax.vmap(block, (None, 0, None))(params, xs, activation)


@X64
@pytest.mark.parametrize("activation", ACTS)
@pytest.mark.parametrize("cls,residual", [(nn.MLP, False), (nn.ResidualMLP, True)])
def test_block_round_trip_matches_pure_block(activation, cls, residual):
    module = cls(3, 6, activation, rngs=nnx.Rngs(0))
    params = module.to_params()
    assert isinstance(params, models.GatedParams if activation in ("swiglu", "glu") else models.MLPParams)
    assert params.down.dtype == jnp.float64 and params.down.shape == (3, 6)
    xs = _xs(3)
    want = _pure(params, xs, activation, residual)
    assert float(jnp.max(jnp.abs(module(xs) - want))) <= 1e-15
    back = cls.from_params(params, activation)
    assert all(np.array_equal(a, b) for a, b in zip(back.to_params(), params))  # lossless
    assert float(jnp.max(jnp.abs(back(xs) - want))) <= 1e-15
    assert module.to_biases() is None


@pytest.mark.slow
@X64
def test_pure_params_into_module_and_back():
    params = models.init("gelu_tanh", 4, 9, key=jax.random.key(4))
    module = nn.ResidualMLP.from_params(params, "gelu_tanh")
    assert all(np.array_equal(a, b) for a, b in zip(module.to_params(), params))
    x = _xs(4, 1)[0]
    assert module(x).shape == (4,)
    assert float(jnp.max(jnp.abs(module(x) - models.skip_mlp(params, x, "gelu_tanh")))) <= 1e-15


@X64
@pytest.mark.parametrize("activation", ["relu", "geglu"])
@pytest.mark.parametrize("residual", [True, False])
def test_stack_round_trip_matches_models_stack(activation, residual):
    net = nn.Stack(3, 5, activation, depth=4, residual=residual, rngs=nnx.Rngs(2))
    params = net.to_params()
    assert params.down.shape == (4, 3, 5)
    # Layer l is models.init(..., key=fold_in(key, l)): the same weights models.init(..., depth=L) draws.
    again = models.init(activation, 3, 5, key=nnx.Rngs(2).params(), depth=4)
    assert all(np.array_equal(a, b) for a, b in zip(params, again))
    xs = _xs(3)
    want = jax.vmap(lambda x: models.stack(params, x, activation, residual=residual))(xs)
    assert float(jnp.max(jnp.abs(net(xs) - want))) <= 1e-15
    back = nn.Stack.from_params(params, activation, residual=residual)
    assert back.depth == 4 and back.residual is residual
    assert float(jnp.max(jnp.abs(back(xs) - want))) <= 1e-15


def _random_biases(params, key):
    lead = params.down.shape[:-2]
    d, n = params.down.shape[-2:]
    return {
        f: jax.random.normal(jax.random.fold_in(key, i), lead + ((d,) if f == "down" else (n,)))
        for i, f in enumerate(params._fields)
    }


@pytest.mark.slow
@X64
@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_biased_block_is_the_explicit_formula(activation):
    params = models.init(activation, 3, 6, key=jax.random.key(5))
    b = _random_biases(params, jax.random.key(6))
    module = nn.ResidualMLP.from_params(params, activation, biases=b)
    assert set(module.to_biases()) == set(params._fields)
    x = _xs(3, 1)[0]
    if activation == "gelu":
        want = x + params.down @ jax.nn.gelu(params.up @ x + b["up"], approximate=False) + b["down"]
    else:
        hidden = jax.nn.silu(params.gate @ x + b["gate"]) * (params.value @ x + b["value"])
        want = x + params.down @ hidden + b["down"]
    assert float(jnp.max(jnp.abs(module(x) - want))) <= 1e-15


@pytest.mark.slow
@X64
def test_biased_stack_matches_layer_by_layer_blocks():
    net = nn.Stack(3, 6, "relu", depth=3, bias=True, rngs=nnx.Rngs(0))
    params = net.to_params()
    b = _random_biases(params, jax.random.key(9))
    net = nn.Stack.from_params(params, "relu", biases=b)
    h = _xs(3)
    out = net(h)
    for layer in range(3):
        pick = jax.tree.map(lambda a: a[layer], (params, b))
        h = nn.ResidualMLP.from_params(pick[0], "relu", biases=pick[1])(h)
    assert float(jnp.max(jnp.abs(out - h))) <= 1e-15


@X64
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_sign_flip_absorber_with_biases(activation):
    """σ(−z) = σ(z) − z: negating (w_i, b_i) for i ∈ S turns x + W_down σ(W_up x + b) + c into a
    residual-free block with output bias c + W_down[:,S] b_S when W_down[:,S] W_up[S,:] = −I."""
    params, S = models.planted(activation, 3, 8, key=jax.random.key(3))
    b = _random_biases(params, jax.random.key(4))
    residual = nn.ResidualMLP.from_params(params, activation, biases=b)
    flip = jnp.ones(8).at[S].set(-1.0)
    free_b = {"up": flip * b["up"], "down": b["down"] + params.down[:, S] @ b["up"][S]}
    free = nn.MLP.from_params(condition.absorber(params, S, activation), activation, biases=free_b)
    xs = _xs(3, 64)
    assert float(jnp.max(jnp.abs(residual(xs) - free(xs)))) <= 1e-12
    # Without the moved output bias the two differ: the identity needs the bias term.
    wrong = nn.MLP.from_params(
        condition.absorber(params, S, activation), activation, biases={**free_b, "down": b["down"]}
    )
    assert float(jnp.max(jnp.abs(residual(xs) - wrong(xs)))) > 1e-3


def test_default_dtype_follows_x64_and_batches():
    block = nn.MLP(4, 8, "relu", rngs=nnx.Rngs(0), bias=True)
    assert block.to_params().up.dtype == jnp.float32
    assert block.to_biases()["up"].shape == (8,) and block.to_biases()["down"].shape == (4,)
    assert block(jnp.ones((2, 3, 4))).shape == (2, 3, 4)
    assert block(jnp.ones(4)).dtype == jnp.float32
    assert (block.d, block.n) == (4, 8)


@X64
def test_float32_module_under_x64_promotes_like_the_pure_block():
    net = nn.Stack(2, 4, "gelu", depth=2, dtype=jnp.float32, rngs=nnx.Rngs(0))
    assert net.to_params().up.dtype == jnp.float32
    assert net(jnp.ones(2, jnp.float32)).dtype == jnp.float32
    assert net(jnp.ones(2, jnp.float64)).dtype == jnp.float64


@pytest.mark.slow
def test_module_is_an_nnx_pytree_that_trains():
    """split/merge keep the weights, and nnx.grad reaches every parameter."""
    net = nn.Stack(3, 6, "gelu", depth=2, bias=True, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(net)
    assert len(jax.tree.leaves(state)) == 4  # up, down, up_bias, down_bias, each (2, ...)
    again = nnx.merge(graphdef, state)
    xs = _xs(3)
    assert np.array_equal(again(xs), net(xs))
    grads = nnx.grad(lambda m: jnp.sum(m(xs) ** 2))(net)
    assert all(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads))


def test_bad_input_is_a_value_error_naming_the_argument():
    rngs = nnx.Rngs(0)
    with pytest.raises(ValueError, match="activation"):
        nn.MLP(3, 4, "nope", rngs=rngs)
    with pytest.raises(ValueError, match="rngs"):
        nn.MLP(3, 4, "relu", rngs=0)
    with pytest.raises(ValueError, match="bias"):
        nn.MLP(3, 4, "relu", rngs=rngs, bias="yes")
    with pytest.raises(ValueError, match="n must"):
        nn.MLP(3, 0, "relu", rngs=rngs)
    with pytest.raises(ValueError, match="depth"):
        nn.Stack(3, 4, "relu", depth=0, rngs=rngs)
    with pytest.raises(ValueError, match="residual"):
        nn.Stack(3, 4, "relu", depth=2, residual=1, rngs=rngs)
    block = nn.MLP(3, 4, "relu", rngs=rngs)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., 3\)"):
        block(jnp.ones(4))
    params = block.to_params()
    with pytest.raises(ValueError, match="GatedParams"):
        nn.MLP.from_params(params, "swiglu")
    with pytest.raises(ValueError, match="params.down"):
        nn.MLP.from_params(params._replace(down=params.down[:, :3]), "relu")
    with pytest.raises(ValueError, match="one block"):
        nn.ResidualMLP.from_params(jax.tree.map(lambda a: a[None], params), "relu")
    with pytest.raises(ValueError, match=r"params.down must have shape \(L, d, n\)"):
        nn.Stack.from_params(params, "relu")
    stacked = jax.tree.map(lambda a: jnp.stack([a, a]), params)
    with pytest.raises(ValueError, match="same leading L axis"):
        nn.Stack.from_params(stacked._replace(up=stacked.up[:1]), "relu")
    with pytest.raises(ValueError, match="biases must be a dict"):
        nn.MLP.from_params(params, "relu", biases={"up": jnp.zeros(4)})
    with pytest.raises(ValueError, match=r"biases\['down'\] must have shape \(3,\)"):
        nn.MLP.from_params(params, "relu", biases={"up": jnp.zeros(4), "down": jnp.zeros(4)})


@pytest.mark.slow
@X64
@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_from_flax_reads_a_pair_of_linear_layers(activation):
    """A user's own nnx.Linear layers (kernels (in, out)) give the params of the same function."""
    d, n = 3, 7  # d ≠ n: a swapped reading would be a different block
    lin = lambda i, o, s: nnx.Linear(i, o, use_bias=False, rngs=nnx.Rngs(s))  # noqa: E731
    xs = _xs(d)
    if activation == "swiglu":
        gate, value, down = lin(d, n, 0), lin(d, n, 1), lin(n, d, 2)
        params = models.GatedParams.from_flax(gate, value, down)
        want = down(jax.nn.silu(gate(xs)) * value(xs))
    else:
        up, down = lin(d, n, 0), lin(n, d, 1)
        params = models.MLPParams.from_flax(up, down)
        want = down(jax.nn.gelu(up(xs), approximate=False))
    assert models.dims(params) == (d, n)
    np.testing.assert_allclose(_pure(params, xs, activation, False), want, rtol=1e-12, atol=1e-12)


def test_from_flax_refuses_swapped_layers_and_biases():
    up, down = nnx.Linear(3, 7, use_bias=False, rngs=nnx.Rngs(0)), nnx.Linear(7, 3, rngs=nnx.Rngs(1))
    with pytest.raises(ValueError, match="down.kernel must have shape"):
        models.MLPParams.from_flax(down, down)
    down.bias[...] = jnp.ones(3)
    with pytest.raises(ValueError, match="nonzero bias"):
        models.MLPParams.from_flax(up, down)
