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
