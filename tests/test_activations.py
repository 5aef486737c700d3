from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import activations

UNGATED = ["relu", "gelu", "gelu_tanh", "silu", "softplus", "leaky_relu", "hardswish", "relu2"]
GATED = ["reglu", "swiglu", "geglu", "glu"]
RAY = ["relu", "gelu", "gelu_tanh", "silu", "softplus", "hardswish"]


@pytest.fixture
def scratch():
    """Names registered by a test, unregistered afterwards whatever happens."""
    made = []
    yield made
    for name in made:
        if name in activations.names():
            activations.unregister(name)


def test_registry_has_the_paper_activations_and_the_leaky_family():
    assert set(UNGATED + GATED) <= set(activations.names())
    assert set(GATED) <= set(activations.names(gated=True))
    assert not set(GATED) & set(activations.names(gated=False))
    assert all(activations.get(name).builtin and activations.get(name).assumes == () for name in UNGATED + GATED)


def test_unknown_name_lists_known_ones():
    with pytest.raises(ValueError, match="unknown activation 'tanhh'.*relu.*swiglu"):
        activations.get("tanhh")
    with pytest.raises(ValueError, match="alpha 'x' is not a number"):
        activations.get("leaky_relu(x)")


@pytest.mark.x64
@pytest.mark.parametrize("name", UNGATED + GATED + ["leaky_relu(0.2)", "leaky_relu(-3.5)"])
def test_declared_odd_slope_holds_in_float64(name):
    """σ(z) − σ(−z) = c z to float64 rounding where c is declared; where it is not (relu2: z|z|,
    glu: tanh(z/2)) no c fits: the least-squares slope misses by more than 1e-3."""
    act = activations.get(name)
    z = jnp.linspace(-30.0, 30.0, 4001, dtype=jnp.float64)
    odd = np.asarray(act(z) - act(-z))
    if act.odd_slope is None:
        c = float(odd @ np.asarray(z) / (z @ z))
        assert np.max(np.abs(odd - c * np.asarray(z))) > 1e-3, name
    else:
        assert isinstance(act.odd_slope, Fraction)
        err = np.max(np.abs(odd - float(act.odd_slope) * np.asarray(z)))
        assert err <= 1e-13 * 30 * (1 + abs(float(act.odd_slope))), (name, err)


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
    assert [n for n in activations.names() if activations.get(n).kink] == ["relu", "leaky_relu"]
    # the compatibility flag follows the declared slope
    assert activations.get("gelu").odd_part_half and not activations.get("leaky_relu").odd_part_half


@pytest.mark.x64
@pytest.mark.parametrize("alpha", [0.01, 0.2, 0.1, 0.0, 2.5, -0.3])
def test_leaky_relu_family(alpha):
    """max(z, α z) for α < 1 (z for z ≥ 0, α z below in general): c = 1 + α exactly (the float α's
    exact value), a kink, no ray limit, decided by the kink theorem in every case; the name
    round-trips through get."""
    act = activations.get(f"leaky_relu({alpha!r})")
    assert act is activations.leaky_relu(alpha) and act.name == f"leaky_relu({alpha!r})"
    assert act.odd_slope == 1 + Fraction(alpha) and act.kink and act.ray_limit is None and act.builtin
    assert act.degree == 1 and act.family == "ungated" and not act.smooth_at_zero
    for biased in (False, True):
        for narrow in (False, True):
            assert act.converse(biased=biased, narrow=narrow) == activations.KINK_THEOREM
    z = np.linspace(-5.0, 5.0, 41)
    np.testing.assert_array_equal(np.asarray(act(jnp.asarray(z))), np.where(z >= 0, z, alpha * z))


def test_registered_leaky_relu_is_alpha_one_hundredth():
    named, built = activations.get("leaky_relu"), activations.leaky_relu(0.01)
    assert named.name == "leaky_relu" and built.name == "leaky_relu(0.01)"
    fields = ("odd_slope", "kink", "ray_limit", "degree", "builtin", "fn")
    assert all(getattr(named, f) == getattr(built, f) for f in fields)
    assert named.odd_slope == Fraction(101, 100) + (Fraction(0.01) - Fraction(1, 100))  # exact, not 1.01
    for alpha in (1, 1.0, -1.0, float("nan"), float("inf"), True, "0.1"):
        with pytest.raises(ValueError, match="alpha"):
            activations.leaky_relu(alpha)


@pytest.mark.x64
def test_hardswish_facts_on_paper_hold():
    """hardswish(z) = z·relu6(z + 3)/6 (jax.nn.hard_swish): odd part z/2, and hardswish − relu is
    0 outside (−3, 3) and within [−3/8, 0] inside, so its ray limit is relu; smooth at 0."""
    act = activations.get("hardswish")
    z = jnp.linspace(-50.0, 50.0, 10001, dtype=jnp.float64)
    np.testing.assert_allclose(act(z), jax.nn.hard_swish(z), rtol=1e-15, atol=1e-15)  # jax's z·relu6(z + 3)/6
    gap = np.asarray(act(z) - jax.nn.relu(z))
    outside = np.abs(np.asarray(z)) >= 3
    assert np.all(gap[outside] == 0)
    assert -0.375 - 1e-15 <= gap.min() and gap.max() <= 1e-13
    assert act.odd_slope == 1 and act.ray_limit == "relu" and not act.kink and act.smooth_at_zero


@pytest.mark.x64
@pytest.mark.parametrize("name", RAY)
def test_ray_limit_holds_numerically_with_biases_and_at_zero(name):
    """σ(t a + b)/t → relu(a) for every a (a = 0 included) and bias b: the error at t = 1e6 is
    below 1e-5 and shrinks from t = 1e3 (σ − relu is bounded for all six)."""
    act = activations.get(name)
    assert act.ray_limit == "relu"
    a = jnp.concatenate([jnp.linspace(-3.0, 3.0, 61), jnp.zeros(1)])
    for b in (-2.0, 0.0, 1.5):
        errs = [float(jnp.max(jnp.abs(act(t * a + b) / t - jax.nn.relu(a)))) for t in (1e3, 1e6)]
        assert errs[1] <= 1e-5 and errs[1] <= errs[0] + 1e-15, (name, b, errs)
    z = jnp.linspace(-1e4, 1e4, 20001)
    assert float(jnp.max(jnp.abs(act(z) - jax.nn.relu(z)))) <= 0.7  # σ − relu bounded (log 2 at most)


def test_the_one_table_of_theorems():
    get = activations.get
    assert get("relu").converse() == "Thm 8" and get("gelu").converse() == "Thm 10"
    for name in RAY:
        assert get(name).converse(biased=True) == activations.RAY_LIMIT_THEOREM
    for name in ("gelu_tanh", "silu", "softplus", "hardswish"):
        assert get(name).converse() == activations.RAY_LIMIT_THEOREM
    # n < d: Thm 8's statement assumes n ≥ d; the kink theorem covers every width
    assert (
        get("relu").converse(narrow=True) == get("relu").converse(biased=True, narrow=True) == activations.KINK_THEOREM
    )
    for name in ("gelu", "gelu_tanh", "silu", "softplus", "hardswish"):
        assert get(name).converse(narrow=True) == activations.RAY_LIMIT_KINK_THEOREM
    for name in ("relu2", "swiglu", "glu", "reglu"):
        for narrow in (False, True):
            assert get(name).converse(narrow=narrow) is None and get(name).ray_limit is None
    # parallel rows with distinct biases: the kink theorem only (distinct hyperplanes), biased blocks only
    for name in ("relu", "leaky_relu", "leaky_relu(0.3)"):
        assert get(name).converse(biased=True, parallel_rows=True) == activations.KINK_THEOREM
        assert get(name).converse(biased=False, parallel_rows=True) is None
    for name in ("gelu", "silu", "softplus", "hardswish", "relu2", "swiglu"):
        assert get(name).converse(biased=True, parallel_rows=True) is None


def test_declared_facts_are_never_measured(scratch):
    """relu + 1e-6·sin (odd part within 2e-6 of z/2) registered without declarations has no odd
    slope and no theorem: nothing is inferred, so no certificate can rest on it."""
    scratch += ["eps_relu_test", "shifted_relu_test", "softplus_test"]
    eps = activations.register("eps_relu_test", lambda z: jax.nn.relu(z) + 1e-6 * jnp.sin(z))
    assert eps.odd_slope is None and eps.ray_limit is None and not eps.kink and not eps.builtin
    assert eps.converse() is None and eps.converse(biased=True) is None and eps.assumes == ()
    assert eps.result == "not covered"
    shifted = activations.register("shifted_relu_test", lambda z: jax.nn.relu(z) + 1.0)
    assert shifted.odd_slope is None  # σ(z) − σ(−z) = z holds, but is not declared
    soft = activations.register("softplus_test", jax.nn.softplus)
    assert soft.ray_limit is None and soft.converse() is None
    soft = activations.register("softplus_test", jax.nn.softplus, odd_slope=1, ray_limit="relu", overwrite=True)
    assert soft.converse(biased=True) == activations.RAY_LIMIT_THEOREM and not soft.builtin
    assert soft.assumes == (
        "declared odd part: sigma(z) - sigma(-z) = 1 z",
        "declared ray limit: sigma - relu = o(|z|)",
    )
    assert soft.result.startswith("given the declared facts, Thm 8 via the ray limit")
    with pytest.raises(ValueError, match="already registered"):
        activations.register("softplus_test", jax.nn.softplus)


def test_a_declared_odd_slope_is_exact_and_refused_when_visibly_false(scratch):
    scratch += ["leaky_test", "abs_test"]
    leaky = activations.register("leaky_test", lambda z: jnp.where(z > 0, z, 0.1 * z), odd_slope=1.1, kink=True)
    assert leaky.odd_slope == Fraction(1.1) and leaky.degree == 1
    assert leaky.converse(narrow=True) == activations.KINK_THEOREM
    assert leaky.assumes[0] == "declared odd part: sigma(z) - sigma(-z) = 1.1 z" and "declared kink" in leaky.assumes[1]
    with pytest.raises(ValueError, match="declares odd_slope=1, but"):
        activations.register("abs_test", jnp.abs, odd_slope=1)
    with pytest.raises(ValueError, match="declares odd_slope=1.2, but"):
        activations.register("leaky_test", lambda z: jnp.where(z > 0, z, 0.1 * z), odd_slope=1.2, overwrite=True)
    for bad in (True, float("nan"), "1", None.__class__):
        with pytest.raises(ValueError, match="odd_slope"):
            activations.register("abs_test", jnp.abs, odd_slope=bad)
    with pytest.warns(DeprecationWarning, match="odd_slope=1"):
        old = activations.register("abs_test", jax.nn.silu, odd_part_half=True)
    assert old.odd_slope == 1


def test_a_declared_kink_is_refused_when_visibly_false(scratch):
    scratch += ["kink_test"]
    leaky = lambda z: jnp.where(z > 0, z, 0.1 * z)  # noqa: E731
    with pytest.raises(ValueError, match="without odd_slope"):
        activations.register("kink_test", leaky, kink=True)
    for fn, c in ((jax.nn.softplus, 1), (lambda z: 2.0 * z, 2), (jax.nn.relu, 2)):
        with pytest.raises(ValueError, match="declares (kink=True|odd_slope)"):
            activations.register("kink_test", fn, odd_slope=c, kink=True)
    with pytest.raises(ValueError, match="kink=True .degree 1. and degree=2"):
        activations.register("kink_test", leaky, odd_slope=1.1, kink=True, degree=2)


def test_a_declared_ray_limit_is_refused_when_visibly_false(scratch):
    """The issue's example σ(z) = z/2 + a z² + a triangle wave of period 2e5 (a = 5e-9): odd
    part z/2 and σ ≈ relu on |z| ≤ 1e4, but σ − relu is not o(|z|) (σ(x + 1e8·1) − 1e8·1 is an
    exact free block for W_up = W_down = I): the ray limit is refused. So are tanh, |z|, and
    leaky relus (σ − relu = α·min(z, 0) is not o(|z|), however small α)."""
    scratch += ["triangle_test", "x_test"]

    def triangle(z):
        period = 2e5
        return jnp.abs(jnp.mod(z + period / 2, period) - period / 2) / 2  # |z|/2 on [−1e5, 1e5]

    sigma = lambda z: z / 2 + 5e-9 * z * z + triangle(z)  # noqa: E731
    z = jnp.linspace(-1e4, 1e4, 2001)
    assert float(jnp.max(jnp.abs(sigma(z) - jax.nn.relu(z)))) <= 1.0  # looks like relu where the old check looked
    tri = activations.register("triangle_test", sigma, odd_slope=1)  # the odd part is z/2: declared, accepted
    assert tri.ray_limit is None and tri.converse() is None
    for fn in (sigma, jnp.tanh, jnp.abs, lambda z: jax.nn.leaky_relu(z, 1e-4), lambda z: jnp.where(z > 0, z, 0.01 * z)):
        with pytest.raises(ValueError, match="declares ray_limit='relu'"):
            activations.register("x_test", fn, ray_limit="relu", overwrite=True)
    with pytest.raises(ValueError, match="not finite"):  # an overflow cannot be checked: refused
        activations.register("x_test", lambda z: jnp.log(1 + jnp.exp(z)), ray_limit="relu", overwrite=True)
    with pytest.raises(ValueError, match="forces"):
        activations.register("x_test", jax.nn.relu, ray_limit="relu", odd_slope=2)
    with pytest.raises(ValueError, match="ray_limit must be None or 'relu'"):
        activations.register("x_test", jax.nn.relu, ray_limit="identity")
    # declarations that hold pass (passing proves nothing; it only does not refuse)
    for fn in (jax.nn.relu, lambda z: jax.nn.relu(z) + 1e-6 * jnp.sin(z), lambda z: jax.nn.relu(z) + jnp.cbrt(z)):
        assert activations.register("x_test", fn, ray_limit="relu", overwrite=True).ray_limit == "relu"


def _flip_planted(rng, d, n, S, c, A):
    """``W_up (n, d)``, ``W_down (d, n)`` with ``c·W_down[:,S] W_up[S,:] = −A`` (``|S| = d``)."""
    U = rng.standard_normal((n, d))
    D = rng.standard_normal((d, n))
    D[:, S] = -np.linalg.solve(U[S, :].T, A.T).T / c
    return U, D


@pytest.mark.x64
@pytest.mark.parametrize("name", ["leaky_relu", "leaky_relu(0.2)", "leaky_relu(-0.5)", "hardswish", "relu"])
def test_the_generalised_flip_is_exact_with_biases_and_any_skip(name):
    """docs/theory/kink.md, 'if': with c = odd_slope and c·W_down[:,S] W_up[S,:] = −A, negating the
    rows (and biases) in S and putting e = c₀ + c·W_down[:,S] b[S] reproduces A x + W_down σ(W_up x + b)
    + c₀ to float64 rounding; the plain flip (c taken as 1) misses by |c − 1|·‖A x‖ for leaky."""
    act = activations.get(name)
    c = float(act.odd_slope)
    rng = np.random.default_rng(45)
    d, n, S = 3, 7, [1, 4, 5]
    A = rng.standard_normal((d, d))
    U, D = _flip_planted(rng, d, n, S, c, A)
    b, c0 = rng.standard_normal(n), rng.standard_normal(d)
    V, beta = U.copy(), b.copy()
    V[S], beta[S] = -U[S], -b[S]
    xs = rng.standard_normal((64, d)) * np.logspace(-2, 2, 64)[:, None]
    sigma = lambda z: np.asarray(act(jnp.asarray(z)))  # noqa: E731
    block = xs @ A.T + sigma(xs @ U.T + b) @ D.T + c0
    flip = sigma(xs @ V.T + beta) @ D.T + c0 + c * D[:, S] @ b[S]
    scale = np.linalg.norm(xs, axis=1) + 1
    assert np.max(np.linalg.norm(block - flip, axis=1) / scale) <= 1e-12
    plain = sigma(xs @ V.T + beta) @ D.T + c0 + D[:, S] @ b[S]  # the flip with c = 1
    plain_miss = np.max(np.linalg.norm(block - plain, axis=1) / scale)
    assert (plain_miss <= 1e-12) == (c == 1), plain_miss


@pytest.mark.x64
@pytest.mark.parametrize("alpha", [0.0, 0.01, 0.3])
def test_the_kink_jump_is_kappa_u_w(alpha):
    """docs/theory/kink.md, step 2: across the kink hyperplane H_i (at a point on no other one) the
    Jacobian of A x + W_down ρ(W_up x + b) jumps by κ u_i w_iᵀ, κ = 1 − α, whatever A and the other
    units; parallel rows with distinct biases have distinct hyperplanes and separate jumps."""
    act = activations.leaky_relu(alpha)
    rng = np.random.default_rng(7)
    d, n = 3, 5
    U, D, A = rng.standard_normal((n, d)), rng.standard_normal((d, n)), rng.standard_normal((d, d))
    U[3] = -2.0 * U[0]  # parallel to row 0, distinct hyperplane: b[3] != -2 b[0]
    b = rng.standard_normal(n)
    f = lambda x: A @ x + D @ act(U @ x + b)  # noqa: E731
    for i in range(n):
        w = U[i]
        x0 = rng.standard_normal(d)
        x0 -= (w @ x0 + b[i]) / (w @ w) * w  # on H_i
        assert np.min(np.abs(np.delete(U @ x0 + b, i))) > 1e-3  # on no other hyperplane
        h = 1e-6 * w / np.linalg.norm(w)
        jump = np.asarray(jax.jacfwd(f)(jnp.asarray(x0 + h))) - np.asarray(jax.jacfwd(f)(jnp.asarray(x0 - h)))
        np.testing.assert_allclose(jump, (1 - alpha) * np.outer(D[:, i], w), atol=1e-12)


def test_a_leaky_name_first_met_inside_jit_is_built_eagerly():
    alpha = 0.123456789  # a name no other test uses, so the first get happens while tracing
    f = jax.jit(lambda z: activations.get(f"leaky_relu({alpha!r})")(z))
    np.testing.assert_allclose(f(jnp.array([-2.0, 3.0])), [-2 * alpha, 3.0], rtol=1e-6)


@pytest.mark.parametrize("name", [n for n in UNGATED if n != "relu2"])
def test_builtin_facts_pass_the_checks_a_user_declaration_gets(name):
    """The built-ins skip the refutation checks at import (their facts are proved on the page); the
    same declarations, registered as a user's, pass them."""
    act = activations.get(name)
    copy = activations.register(
        "_builtin_copy", act.fn, degree=act.degree, odd_slope=act.odd_slope, ray_limit=act.ray_limit,
        kink=act.kink, smooth_at_zero=act.smooth_at_zero, overwrite=True,
    )  # fmt: skip
    try:
        assert (copy.odd_slope, copy.ray_limit, copy.kink) == (act.odd_slope, act.ray_limit, act.kink)
    finally:
        activations.unregister("_builtin_copy")


@pytest.mark.parametrize("name", GATED)
def test_a_builtin_gates_declared_value_at_zero_is_its_value(name):
    """The built-in gates declare ``g(0)`` (so reading the registry needs no JAX); a user's gate
    declares it too (never evaluated: undeclared it is ``None``), and the same declarations,
    registered as a user's, pass the checks a user's declaration gets."""
    act = activations.get(name)
    assert act.gate_at_zero == float(act(jnp.zeros(())))
    copy = activations.register("_gate_copy", act.fn, gated=True, degree=act.degree, overwrite=True)
    assert copy.gate_at_zero is None and copy.smooth_at_zero is None
    copy = activations.register("_gate_copy", act.fn, gated=True, degree=act.degree, gate_at_zero=act.gate_at_zero,
                                smooth_at_zero=act.smooth_at_zero, overwrite=True)  # fmt: skip
    try:
        assert copy.gate_at_zero == act.gate_at_zero and copy.never_absorbs == act.never_absorbs
    finally:
        activations.unregister("_gate_copy")


def test_the_builtin_bodies_are_jax_nn():
    """Each built-in is the ``jax.nn`` function it names (its body imports JAX on first call)."""
    z = jnp.linspace(-5.0, 5.0, 41)
    pairs = {
        "relu": jax.nn.relu(z),
        "gelu": jax.nn.gelu(z, approximate=False),
        "gelu_tanh": jax.nn.gelu(z, approximate=True),
        "silu": jax.nn.silu(z),
        "softplus": jax.nn.softplus(z),
        "leaky_relu": jax.nn.leaky_relu(z, 0.01),
        "relu2": jax.nn.relu(z) ** 2,
        "glu": jax.nn.sigmoid(z),
        "swiglu": jax.nn.silu(z),
        "geglu": jax.nn.gelu(z, approximate=False),
        "reglu": jax.nn.relu(z),
    }
    for name, want in pairs.items():
        np.testing.assert_array_equal(activations.get(name)(z), want, err_msg=name)
