import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import activations

UNGATED = ["relu", "gelu", "gelu_tanh", "silu", "softplus", "relu2"]
GATED = ["reglu", "swiglu", "geglu", "glu"]


def test_registry_has_the_paper_activations():
    assert set(UNGATED + GATED) <= set(activations.names())
    assert set(GATED) <= set(activations.names(gated=True))
    assert not set(GATED) & set(activations.names(gated=False))


def test_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match="unknown activation 'tanhh'.*relu.*swiglu"):
        activations.get("tanhh")


@pytest.mark.x64
@pytest.mark.parametrize("name", UNGATED + GATED)
def test_odd_part_flag_matches_float64_check(name):
    act = activations.get(name)
    z = jnp.linspace(-30.0, 30.0, 4001, dtype=jnp.float64)
    err = float(jnp.max(jnp.abs(act(z) - act(-z) - z)))
    assert (err <= 1e-12) == act.odd_part_half, (name, err)


@pytest.mark.x64
def test_gelu_is_exact_and_gelu_tanh_differs():
    from scipy.special import ndtr

    z = np.linspace(-6, 6, 101)
    np.testing.assert_allclose(activations.get("gelu")(jnp.asarray(z)), z * ndtr(z), rtol=1e-13, atol=1e-15)
    diff = jnp.max(jnp.abs(activations.get("gelu")(z) - activations.get("gelu_tanh")(z)))
    assert 1e-5 < float(diff) < 1e-2


def test_facts_the_theorems_use():
    assert activations.get("relu2").family == "homogeneous" and activations.get("relu2").degree == 2
    assert activations.get("reglu").family == "homogeneous"
    assert activations.get("swiglu").gate_at_zero == 0.0 and activations.get("swiglu").family == "gated"
    assert activations.get("geglu").gate_at_zero == 0.0
    assert activations.get("glu").gate_at_zero == 0.5
    assert activations.get("gelu").family == "ungated"
    assert "Prop 6" in activations.get("swiglu").result
    assert "not covered" in activations.get("glu").result


def test_register_a_user_activation_measures_its_odd_part():
    entry = activations.register("abs_test", jnp.abs)
    try:
        assert not entry.odd_part_half and "abs_test" in activations.names()
        half = activations.register("shifted_relu_test", lambda z: jax.nn.relu(z) + 1.0)
        assert half.odd_part_half  # σ(z) − σ(−z) = z survives a constant shift
        with pytest.raises(ValueError, match="already registered"):
            activations.register("abs_test", jnp.abs)
    finally:
        for name in ("abs_test", "shifted_relu_test"):
            if name in activations.names():
                activations.unregister(name)
    assert "abs_test" not in activations.names()


RAY = ["relu", "gelu", "gelu_tanh", "silu", "softplus"]


@pytest.mark.x64
@pytest.mark.parametrize("name", RAY)
def test_ray_limit_holds_numerically_with_biases_and_at_zero(name):
    """σ(t a + b)/t → relu(a) for every a (a = 0 included) and bias b: the error at t = 1e6 is
    below 1e-5 and shrinks from t = 1e3 (σ − relu is bounded)."""
    act = activations.get(name)
    assert act.ray_limit == "relu"
    a = jnp.concatenate([jnp.linspace(-3.0, 3.0, 61), jnp.zeros(1)])
    for b in (-2.0, 0.0, 1.5):
        errs = [float(jnp.max(jnp.abs(act(t * a + b) / t - jax.nn.relu(a)))) for t in (1e3, 1e6)]
        assert errs[1] <= 1e-5 and errs[1] <= errs[0] + 1e-15, (name, b, errs)
    z = jnp.linspace(-1e4, 1e4, 20001)
    assert float(jnp.max(jnp.abs(act(z) - jax.nn.relu(z)))) <= 0.7  # σ − relu bounded (log 2 at most)


def test_the_one_table_of_theorems():
    assert activations.get("relu").converse() == "Thm 8" and activations.get("gelu").converse() == "Thm 10"
    for name in RAY:
        assert activations.get(name).converse(biased=True) == activations.RAY_LIMIT_THEOREM
    for name in ("gelu_tanh", "silu", "softplus"):
        assert activations.get(name).converse() == activations.RAY_LIMIT_THEOREM
    for name in ("relu2", "swiglu", "glu"):
        assert activations.get(name).converse() is None and activations.get(name).ray_limit is None


def test_a_declared_ray_limit_is_checked_never_inferred():
    try:
        entry = activations.register("softplus_test", jax.nn.softplus)
        assert entry.ray_limit is None and entry.converse() is None  # not inferred
        entry = activations.register("softplus_test", jax.nn.softplus, ray_limit="relu", overwrite=True)
        assert entry.converse(biased=True) == activations.RAY_LIMIT_THEOREM
        with pytest.raises(ValueError, match="declares ray_limit='relu'"):
            activations.register("tanh_test", jnp.tanh, ray_limit="relu")
        with pytest.raises(ValueError, match="declares ray_limit='relu'"):
            activations.register("abs_test", jnp.abs, ray_limit="relu")
        with pytest.raises(ValueError, match="ray_limit must be None or 'relu'"):
            activations.register("x_test", jax.nn.relu, ray_limit="identity")
    finally:
        for name in ("softplus_test", "tanh_test", "abs_test", "x_test"):
            if name in activations.names():
                activations.unregister(name)
