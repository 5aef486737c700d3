"""Issue 56: the facts about a user's activation are declared, never defaulted or measured.

Prop 5 (``degree``) and Prop 6 (``gate_at_zero``, ``smooth_at_zero``) answer a user's block only on
declared facts, which :class:`weights.BlockCheck` lists in ``assumes``; declarations the registry can
see are false at a few points are refused; the absorber never assumes an odd slope ``c = 1``."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import activations, cli, condition, weights
from absorbjax.models import MLPParams

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

D = 2


def heaviside(z):
    """``H(z) = 1`` for ``z > 0``, else 0: ``g(0) = 0``, not differentiable (not even continuous) at 0."""
    return jnp.where(z > 0, 1.0, 0.0).astype(jnp.result_type(z, jnp.float32))


@pytest.fixture
def scratch():
    names = []
    yield names
    for name in names:
        if name in activations.names():
            activations.unregister(name)


def _heaviside_block(rng):
    """A gated Heaviside block ``x + W_down (H(W_gate x) ⊙ W_value x)`` that absorbs exactly: units
    ``(e_j, −e_j)`` with value ``e_j`` and down ``−e_j`` give ``−(H(x_j) + H(−x_j)) x_j e_j = −x_j e_j``,
    which cancels the skip; two more units are Gaussian. Returns ``(gate, value, down, free_down)``,
    ``free_down`` the residual-free block's ``W_down`` (the cancelling columns zeroed)."""
    eye = np.eye(D)
    gate = np.concatenate([np.stack([eye[j], -eye[j]]) for j in range(D)] + [rng.standard_normal((2, D))])
    value = np.concatenate([np.stack([eye[j], eye[j]]) for j in range(D)] + [rng.standard_normal((2, D))])
    down = np.concatenate([np.stack([-eye[j], -eye[j]], axis=1) for j in range(D)] + [rng.standard_normal((D, 2))], 1)
    free = down.copy()
    free[:, : 2 * D] = 0
    return gate, value, down, free


def _gated(gate, value, down, g, x):
    return np.asarray(g(jnp.asarray(x @ gate.T))) * (x @ value.T) @ down.T


def _gated_file(tmp_path, gate, value, down):
    path = tmp_path / "m.npz"
    np.savez(path, gate=gate, value=value, down=down)
    return path


def test_the_heaviside_block_absorbs_exactly():
    """The construction is right: the skip block equals a residual-free gated block of the same width."""
    rng = np.random.default_rng(0)
    gate, value, down, free = _heaviside_block(rng)
    x = rng.standard_normal((256, D)) * 10.0 ** rng.uniform(-3, 3, (256, 1))
    x[:8, 0] = 0.0  # on the gate's kink hyperplanes too
    np.testing.assert_allclose(x + _gated(gate, value, down, heaviside, x), _gated(gate, value, free, heaviside, x),
                               rtol=0, atol=1e-12 * np.max(np.abs(x)))  # fmt: skip


def test_an_undeclared_heaviside_gate_is_not_told_never_absorbs(tmp_path, scratch):
    scratch.append("heaviside_test")
    act = activations.register("heaviside_test", heaviside, gated=True)
    assert not act.never_absorbs and "never absorbs" not in act.result
    gate, value, down, _ = _heaviside_block(np.random.default_rng(0))
    (block,) = weights.blocks(_gated_file(tmp_path, gate, value, down), "heaviside_test")
    result = weights.check(block)
    assert result.status == "undecided" and "never absorbs" not in result.reason, result.reason
    assert "gate_at_zero" in result.reason and result.assumes == ()
    # declared g(0) = 0 and not differentiable at 0: Prop 6 does not apply
    activations.register("heaviside_test", heaviside, gated=True, gate_at_zero=0, smooth_at_zero=False, overwrite=True)
    result = weights.check(weights.blocks(_gated_file(tmp_path, gate, value, down), "heaviside_test")[0])
    assert result.status == "undecided" and "never absorbs" not in result.reason, result.reason
    # declared differentiable at 0: visibly false (a jump), refused
    with pytest.raises(ValueError, match="smooth_at_zero=True"):
        activations.register("heaviside_test", heaviside, gated=True, gate_at_zero=0, smooth_at_zero=True,
                             overwrite=True)  # fmt: skip


def test_relu_declared_degree_two_is_refused(scratch):
    scratch += ["relu_deg_test", "relu2_deg_test", "reglu_deg_test"]
    with pytest.raises(ValueError, match=r"degree=2.*sigma\(2 z\)"):
        activations.register("relu_deg_test", jax.nn.relu, degree=2)
    assert "relu_deg_test" not in activations.names()
    assert activations.register("relu_deg_test", jax.nn.relu, degree=1).degree == 1
    assert activations.register("relu2_deg_test", lambda z: jax.nn.relu(z) ** 2, degree=2).family == "homogeneous"
    # a gate of degree k - 1 makes a block of degree k: relu gated is degree 2, not 3
    assert activations.register("reglu_deg_test", jax.nn.relu, gated=True, degree=2).family == "homogeneous"
    with pytest.raises(ValueError, match="degree=3"):
        activations.register("reglu_deg_test", jax.nn.relu, gated=True, degree=3, overwrite=True)
    for bad in ("2", True, float("nan")):
        with pytest.raises(ValueError, match="degree"):
            activations.register("relu_deg_test", jax.nn.relu, degree=bad, overwrite=True)


def test_a_gate_declared_zero_at_zero_is_refused_when_visibly_not(scratch):
    scratch.append("sigmoid_gate_test")
    with pytest.raises(ValueError, match=r"gate_at_zero=0.*g\(0\) = 0.5"):
        activations.register("sigmoid_gate_test", jax.nn.sigmoid, gated=True, gate_at_zero=0, smooth_at_zero=True)
    act = activations.register("sigmoid_gate_test", jax.nn.sigmoid, gated=True, gate_at_zero=0.5, smooth_at_zero=True)
    assert act.gate_at_zero == 0.5 and not act.never_absorbs and "not covered" in act.result


@pytest.mark.parametrize(
    "declared, missing",
    [({}, "gate_at_zero"), ({"gate_at_zero": 0}, "smooth_at_zero"), ({"smooth_at_zero": True}, "gate_at_zero")],
)
def test_an_undeclared_gate_fact_gives_undecided_naming_it(tmp_path, scratch, declared, missing):
    """A user's silu gate: g(0) = 0 and differentiable, but until both are declared nothing says so."""
    scratch.append("silu_gate_test")
    act = activations.register("silu_gate_test", jax.nn.silu, gated=True, **declared)
    assert not act.never_absorbs and missing in act.result, act.result
    rng = np.random.default_rng(1)
    path = _gated_file(tmp_path, rng.standard_normal((4, D)), rng.standard_normal((4, D)), rng.standard_normal((D, 4)))
    result = weights.check(weights.blocks(path, "silu_gate_test")[0])
    assert (result.status, result.method) == ("undecided", "theorem") and missing in result.reason, result.reason
    assert "Prop 6 needs" in result.reason


def test_block_check_assumes_lists_the_declarations(tmp_path, scratch, capsys):
    scratch += ["silu_gate_test", "relu2_test"]
    rng = np.random.default_rng(2)
    gated = _gated_file(tmp_path, rng.standard_normal((4, D)), rng.standard_normal((4, D)), rng.standard_normal((D, 4)))
    activations.register("silu_gate_test", jax.nn.silu, gated=True, gate_at_zero=0, smooth_at_zero=True)
    result = weights.check(weights.blocks(gated, "silu_gate_test")[0])
    assert (result.status, result.method) == ("not_absorbable", "theorem") and "Prop 6" in result.reason
    assert result.assumes == ("declared gate value at zero: g(0) = 0", "declared differentiable at 0")
    assert result.to_dict()["assumes"] == list(result.assumes)
    # the built-in gate: proved, nothing assumed
    assert weights.check(weights.blocks(gated, "swiglu")[0]).assumes == ()
    # Prop 5 on a declared degree
    activations.register("relu2_test", lambda z: jax.nn.relu(z) ** 2, degree=2)
    ungated = tmp_path / "u.npz"
    np.savez(ungated, up=rng.standard_normal((4, D)), down=rng.standard_normal((D, 4)))
    result = weights.check(weights.blocks(ungated, "relu2_test")[0])
    assert result.status == "not_absorbable" and "Prop 5" in result.reason
    assert result.assumes == ("declared degree: f(t x) = t^2 f(x) for t > 0",)
    # the CLI: in --json and in the table's notes
    assert cli.main(["check", str(ungated), "--activation", "relu2_test", "--json", "--no-progress"]) == 0
    (block,) = json.loads(capsys.readouterr().out)["blocks"]
    assert block["assumes"] == ["declared degree: f(t x) = t^2 f(x) for t > 0"]
    assert cli.main(["check", str(ungated), "--activation", "relu2_test", "--no-progress"]) == 0
    assert "given the declared facts: declared degree: f(t x) = t^2 f(x) for t > 0" in capsys.readouterr().out


def test_an_ungated_block_check_carries_the_certificates_assumes(tmp_path, scratch):
    scratch.append("softplus_test")
    act = activations.register("softplus_test", jax.nn.softplus, odd_slope=1, ray_limit="relu")
    rng = np.random.default_rng(3)
    path = tmp_path / "u.npz"
    np.savez(path, up=rng.standard_normal((6, D)), down=rng.standard_normal((D, 6)))
    result = weights.check(weights.blocks(path, "softplus_test")[0])
    assert result.status == "not_absorbable" and result.assumes == result.certificate.assumes == act.assumes != ()


# ---------------------------------------------------------------------------------------------
# The absorber: the certificate or the activation says c, never a silent c = 1


def _leaky_biased(alpha, rng, d=3, n=6, S=(0, 2, 5)):
    c = 1 + alpha
    U, Dn = rng.standard_normal((n, d)), rng.standard_normal((d, n))
    Dn[:, list(S)] = -np.linalg.inv(U[list(S), :]) / c
    return MLPParams(U, Dn), rng.standard_normal(n), rng.standard_normal(d)


def test_absorber_biases_of_a_leaky_certificate_are_right():
    alpha, name = 0.2, "leaky_relu(0.2)"
    rng = np.random.default_rng(4)
    params, b, c0 = _leaky_biased(alpha, rng)
    cert = condition.find_absorbing_set(params, name, bias=b, out_bias=c0)
    assert cert.status == "absorbable" and cert.S.tolist() == [0, 2, 5], cert
    sigma = activations.get(name)
    x = rng.standard_normal((128, 3)) * 10.0 ** rng.uniform(-2, 2, (128, 1))
    U, Dn = np.asarray(params.up), np.asarray(params.down)
    block = x + np.asarray(sigma(jnp.asarray(x @ U.T + b))) @ Dn.T + c0
    for V, (beta, e) in [
        (condition.absorber(params, cert), condition.absorber_biases(params, cert, b, c0)),
        (condition.absorber(params, cert.S, name), condition.absorber_biases(params, cert.S, b, c0, activation=name)),
        (condition.absorber(params, cert.S, odd_slope=1.2), condition.absorber_biases(params, cert.S, b, c0, odd_slope=name)),
    ]:  # fmt: skip
        free = np.asarray(sigma(jnp.asarray(x @ np.asarray(V.up).T + beta))) @ np.asarray(V.down).T + e
        assert np.max(np.abs(free - block) / (1 + np.abs(block))) <= 1e-12
    # c = 1 would be wrong: the output bias differs by alpha·W_down[:,S] b[S]
    wrong = c0 + Dn[:, cert.S] @ b[cert.S]
    assert np.max(np.abs(condition.absorber_biases(params, cert, b, c0)[1] - wrong)) > 1e-3


@pytest.mark.parametrize("call", ["absorber", "absorber_biases"])
def test_the_absorber_without_c_raises_saying_what_to_pass(call):
    rng = np.random.default_rng(5)
    params, b, c0 = _leaky_biased(0.2, rng)
    cert = condition.find_absorbing_set(params, "leaky_relu(0.2)", bias=b)
    args = (params, cert.S) if call == "absorber" else (params, cert.S, b, c0)
    with pytest.raises(ValueError, match=r"pass the certificate.*activation.*odd_slope="):
        getattr(condition, call)(*args)
    # a certificate that names no activation says no c either
    one, b1, c1 = _leaky_biased(0.0, rng)  # W_down[:,S] W_up[S,:] = -I
    plain = condition.find_absorbing_set(one, bias=b1)
    assert plain.status == "absorbable" and plain.activation is None, plain
    with pytest.raises(ValueError, match="odd_slope="):
        getattr(condition, call)(one, plain, *((b1, c1) if call == "absorber_biases" else ()))
    assert (
        getattr(condition, call)(one, plain, *((b1, c1) if call == "absorber_biases" else ()), odd_slope=1) is not None
    )
    # the same weights without a check need no c (the flip does not depend on it)
    if call == "absorber":
        np.testing.assert_array_equal(condition.absorber(params, cert.S, check=False).up,
                                      condition.absorber(params, cert).up)  # fmt: skip


def test_activation_and_odd_slope_must_agree():
    rng = np.random.default_rng(6)
    params, b, c0 = _leaky_biased(0.2, rng)
    cert = condition.find_absorbing_set(params, "leaky_relu(0.2)")
    with pytest.raises(ValueError, match="odd slope"):
        condition.absorber(params, cert.S, "gelu", odd_slope=1.2)
    with pytest.raises(ValueError, match="declares no odd slope"):
        condition.absorber(params, cert.S, "relu2")
    assert condition.absorber(
        params, cert.S, activations.leaky_relu(0.2), odd_slope=activations.leaky_relu(0.2).odd_slope
    )
