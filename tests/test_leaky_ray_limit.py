"""A declared ray limit ``leaky_relu(α)`` (issue 59, row 5; docs/theory/ray_limit.md, "The generalised
flip"): if ``σ − leaky_relu(α) = o(|z|)`` and ``σ(z) − σ(−z) = c z`` then ``c = 1 + α``, and a biased
``σ``-block absorbs iff some ``S`` has ``c·W_down[:,S] W_up[S,:] = −A``, at every width (rows of
``W_up`` pairwise non-parallel, rows and columns nonzero).

The test activation is ``σ(z) = α z + (1 − α) softplus(z)`` with ``α = 1/4`` (exact in binary):
``σ(z) − σ(−z) = 2α z + (1 − α) z = (1 + α) z`` exactly, and ``σ − leaky_relu(α) =
(1 − α) log(1 + e^{−|z|})`` is bounded. Every test here fails on code that knows only the limit relu.
"""

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import activations, condition, testing
from absorbjax.models import MLPParams

ALPHA = 0.25
C = 1 + Fraction(ALPHA)  # 5/4, exact
LIMIT = f"leaky_relu({ALPHA!r})"
NAME = "leaky_softplus_test"


def _sigma(z):
    return ALPHA * z + (1 - ALPHA) * jax.nn.softplus(z)


@pytest.fixture
def act():
    """``σ`` registered with odd slope ``1 + α`` and ray limit ``leaky_relu(α)``; unregistered after."""
    made = [NAME, "x_leaky_test"]
    try:
        yield activations.register(NAME, _sigma, odd_slope=1.25, ray_limit=LIMIT)
    finally:
        for name in made:
            if name in activations.names():
                activations.unregister(name)


def _planted(rng, d, n, S, c):
    """``W_up (n, d)``, ``W_down (d, n)`` with ``c·W_down[:,S] W_up[S,:] = −I`` to float64 rounding."""
    U = rng.standard_normal((n, d))
    D = rng.standard_normal((d, n))
    D[:, S] = -np.linalg.inv(U[S, :]) / c
    return U, D


def _block(U, D, b, c0, xs):
    return xs + np.asarray(jax.vmap(_sigma)(jnp.asarray(xs @ U.T + b))) @ D.T + c0


def test_the_declaration_is_kept_with_its_facts(act):
    assert act.ray_limit == LIMIT and act.odd_slope == C and not act.kink and not act.builtin
    assert act.assumes == (
        "declared odd part: sigma(z) - sigma(-z) = 1.25 z",
        f"declared ray limit: sigma - {LIMIT} = o(|z|)",
    )
    for biased in (False, True):
        for narrow in (False, True):
            assert act.converse(biased=biased, narrow=narrow) == activations.RAY_LIMIT_KINK_THEOREM
        assert act.converse(biased=biased, parallel_rows=True) is None
    assert act.result == (
        f"given the declared facts, {activations.RAY_LIMIT_KINK_THEOREM}: "
        "absorbs iff 1.25 W_down[:,S] W_up[S,:] = -I for some S"
    )
    # "leaky_relu" (alpha = 0.01) names the same limit as "leaky_relu(0.01)"
    one = activations.register("x_leaky_test", lambda z: 0.01 * z + 0.99 * jax.nn.softplus(z),
                               odd_slope=activations.leaky_relu(0.01).odd_slope, ray_limit="leaky_relu")  # fmt: skip
    assert one.ray_limit == "leaky_relu(0.01)"
    # relu is unchanged
    relu = activations.register("x_leaky_test", jax.nn.softplus, odd_slope=1, ray_limit="relu", overwrite=True)
    assert relu.ray_limit == "relu" and relu.converse(biased=True) == activations.RAY_LIMIT_THEOREM


@pytest.mark.x64
def test_a_planted_biased_block_is_absorbable_and_the_flip_is_exact(act):
    rng = np.random.default_rng(59)
    d, n, S = 3, 6, [0, 2, 5]
    U, D = _planted(rng, d, n, S, float(C))
    b, c0 = rng.standard_normal(n), rng.standard_normal(d)
    params = MLPParams(U, D)
    cert = condition.find_absorbing_set(params, NAME, bias=b)
    assert cert.status == "absorbable" and cert.biased and cert.S.tolist() == S, cert
    assert cert.theorem.startswith(activations.RAY_LIMIT_KINK_THEOREM + ", given the declared facts")
    assert f"declared ray limit: sigma - {LIMIT} = o(|z|)" in cert.assumes
    assert testing.judge(cert, params, NAME, planted=S, bias=b) == ""  # rule (★) exactly, absorber in float64
    assert condition.distance(params, NAME).upper <= 1e-12
    V = np.asarray(condition.absorber(params, cert.S, odd_slope=NAME).up)
    beta, e = condition.absorber_biases(params, cert.S, b, c0, odd_slope=NAME)
    xs = rng.standard_normal((64, d)) * 10.0 ** rng.uniform(-3, 3, (64, 1))
    want = _block(U, D, b, c0, xs)
    got = np.asarray(jax.vmap(_sigma)(jnp.asarray(xs @ V.T + beta))) @ D.T + e
    assert np.max(np.abs(want - got) / (1 + np.abs(want))) <= 1e-12
    # the plain flip (c = 1) is not an absorber: the declared c matters
    plain = np.asarray(jax.vmap(_sigma)(jnp.asarray(xs @ V.T + beta))) @ D.T + c0 + D[:, S] @ b[S]
    assert np.max(np.abs(want - plain) / (1 + np.abs(want))) > 1e-3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gaussian_biased_blocks_are_not_absorbable_by_the_kink_theorem_via_the_ray_limit(act, seed):
    rng = np.random.default_rng(seed)
    d, n = 3, 6
    params = MLPParams(rng.standard_normal((n, d)), rng.standard_normal((d, n)))
    b = rng.standard_normal(n)
    cert = condition.find_absorbing_set(params, NAME, bias=b)
    assert cert.status == "not_absorbable", cert
    assert testing.judge(cert, params, NAME, bias=b) == ""  # no S by brute force; a converse it has
    assert activations.RAY_LIMIT_KINK_THEOREM in cert.reason and "given the declared facts" in cert.theorem
    assert cert.theorem.startswith(activations.RAY_LIMIT_KINK_THEOREM)
    assert cert.assumes == act.assumes
    assert tuple(cert.to_dict()["assumes"]) == act.assumes
    bias_free = condition.find_absorbing_set(params, NAME)  # bias-free too, every width
    assert bias_free.status == "not_absorbable" and bias_free.theorem.startswith(activations.RAY_LIMIT_KINK_THEOREM)


def test_a_narrow_block_is_not_absorbable_by_the_same_theorem(act):
    rng = np.random.default_rng(5)
    d, n = 4, 2
    params = MLPParams(rng.standard_normal((n, d)), rng.standard_normal((d, n)))
    b = rng.standard_normal(n)
    cert = condition.find_absorbing_set(params, NAME, bias=b, decision=condition.Decision(narrow=True))
    assert cert.status == "not_absorbable", cert
    assert cert.theorem.startswith(activations.RAY_LIMIT_KINK_THEOREM) and cert.assumes == act.assumes
    assert testing.judge(cert, params, NAME, bias=b) == ""


def test_the_relu_width_bound_is_not_claimed_for_a_leaky_limit(act):
    """The ReLU k* lower bound transfers through the limit relu only; min_extra_width refuses the
    user's activation rather than borrow it."""
    rng = np.random.default_rng(11)
    params = MLPParams(rng.standard_normal((6, 3)), rng.standard_normal((3, 6)))
    with pytest.raises(ValueError, match="activation must be one of"):
        condition.min_extra_width(params, NAME)


def test_parallel_rows_are_not_decided(act):
    """The biases vanish in the limit: parallel rows (even with distinct biases, distinct kink
    hyperplanes of σ-units) fail the hypothesis, so no "not_absorbable"."""
    rng = np.random.default_rng(7)
    d, n = 3, 6
    U, D = rng.standard_normal((n, d)), rng.standard_normal((d, n))
    U[4] = -2.0 * U[1]
    b = rng.standard_normal(n)
    cert = condition.find_absorbing_set(MLPParams(U, D), NAME, bias=b)
    assert cert.status != "not_absorbable" and cert.status != "absorbable", cert
    assert cert.status == "degenerate" and cert.theorem.startswith(activations.RAY_LIMIT_KINK_THEOREM)
    assert testing.judge(cert, MLPParams(U, D), NAME, bias=b) == ""  # the rows-alone hypothesis fails


def test_a_wrong_odd_slope_is_refused(act):
    with pytest.raises(ValueError, match="forces"):
        activations.register("x_leaky_test", _sigma, odd_slope=1, ray_limit=LIMIT)
    # 1 + 0.01 is not the double 1.01: the limit's c = 1 + α is exact
    with pytest.raises(ValueError, match="forces"):
        activations.register("x_leaky_test", lambda z: 0.01 * z + 0.99 * jax.nn.softplus(z), odd_slope=1.01,
                             ray_limit="leaky_relu(0.01)")  # fmt: skip
    # a leaky σ declared with the relu limit (c = 1 + α ≠ 1) is refused as before
    with pytest.raises(ValueError, match="forces"):
        activations.register("x_leaky_test", _sigma, odd_slope=1.25, ray_limit="relu")
    assert "x_leaky_test" not in activations.names()


def test_a_limit_that_is_not_a_kink_is_refused(act):
    for bad in ("gelu", "silu", "identity", "leaky_softplus_test", "leaky_relu(x)"):
        with pytest.raises(ValueError, match="ray_limit must be None or 'relu'"):
            activations.register("x_leaky_test", _sigma, odd_slope=1.25, ray_limit=bad)
    with pytest.raises(ValueError, match="ray_limit must be None or 'relu'"):
        activations.register("x_leaky_test", _sigma, odd_slope=1.25, ray_limit=activations.leaky_relu(ALPHA))


def test_a_visibly_false_leaky_limit_is_refused(act):
    """σ(z) = σ_α(z) + 0.1·sqrt(1 + z²): the added term is even, so the declared odd slope 1 + α is
    true (its check and the rule c = p + q both pass), but σ − leaky_relu(α) ≈ 0.1|z| is not o(|z|)
    (σ's limit is the kink with slopes 1.1 and α − 0.1, the same p + q): only the ray-limit check can
    refuse it, and does. leaky_relu(0.5) declared with the limit leaky_relu(0.25) and no odd slope
    is refused by the same check."""
    bumped = lambda z: _sigma(z) + 0.1 * jnp.sqrt(1.0 + z * z)  # noqa: E731
    with pytest.raises(ValueError, match=r"declares ray_limit='leaky_relu\(0.25\)'"):
        activations.register("x_leaky_test", bumped, odd_slope=1.25, ray_limit=LIMIT)
    # the odd part alone is accepted: the even term is what the ray-limit check catches
    assert activations.register("x_leaky_test", bumped, odd_slope=1.25).ray_limit is None
    # relu's own check is the same one: σ_α declared with limit relu and no odd slope is refused
    with pytest.raises(ValueError, match="declares ray_limit='relu'"):
        activations.register("x_leaky_test", _sigma, ray_limit="relu", overwrite=True)
    # the right limit of a different slope is refused too: leaky_relu(0.5) vs leaky_relu(0.25)
    with pytest.raises(ValueError, match=r"declares ray_limit='leaky_relu\(0.25\)'"):
        activations.register("x_leaky_test", lambda z: jax.nn.leaky_relu(z, 0.5), ray_limit=LIMIT, overwrite=True)
    # and declarations that hold pass (passing proves nothing)
    for fn in (lambda z: jax.nn.leaky_relu(z, ALPHA), lambda z: _sigma(z) + jnp.cbrt(z)):
        assert activations.register("x_leaky_test", fn, ray_limit=LIMIT, overwrite=True).ray_limit == LIMIT
