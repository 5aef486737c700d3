"""Property-based attack on the decision: every certificate on adversarial weights is judged
independently (:mod:`absorbjax.testing`: exact rational misses, brute force over all 2^n sets,
planted sets, exact hypotheses, the absorber evaluated in float64). ``undecided`` is allowed; a
wrong answer or a crash is not (a refusal is a one-line ``ValueError`` naming float64's range)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from absorbjax import activations, condition, models, testing

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

ATTACK = settings(
    max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.slow
@pytest.mark.parametrize("family", list(testing.FAMILIES))
@ATTACK
@given(seed=st.integers(0, 2**32 - 1), index=st.integers(0, 11))
def test_no_wrong_certificate(family, seed, index):
    params, activation, planted, note, *bias = testing.FAMILIES[family](np.random.default_rng(seed), index)
    bias = bias[0] if bias else None
    try:
        cert = condition.find_absorbing_set(params, activation, decision=condition.Decision(time_limit=3.0), bias=bias)
    except ValueError as err:
        assert "float64" in str(err) and "\n" not in str(err), note
        return
    assert testing.judge(cert, params, activation, planted, bias) == "", (note, str(cert))


@ATTACK
@given(seed=st.integers(0, 2**32 - 1), log_l=st.floats(11, 13), shift=st.integers(36, 46))
def test_cancellation_never_certifies_a_far_absorber(seed, log_l, shift):
    """Two large nearly parallel units whose W_down columns cancel: any absorbable answer carries a
    miss bound that holds exactly, and distance().upper bounds the exact miss of its set."""
    rng = np.random.default_rng(seed)
    d = 2
    up, down = rng.normal(size=(4, d)), rng.normal(size=(d, 4))
    L, w, y = 10.0**log_l, rng.normal(size=d), rng.normal(size=d)
    e = rng.normal(size=d) * L * 2.0**-shift
    p = models.MLPParams(np.vstack([up, L * w, L * w + e]), np.hstack([down, y[:, None], -y[:, None]]))
    cert = condition.find_absorbing_set(p, "relu")
    assert testing.judge(cert, p, "relu") == "", str(cert)
    dist = condition.distance(p)
    exact = testing.frobenius(testing.exact_miss(p, dist.S)) / np.sqrt(d)
    assert exact <= dist.upper * (1 + 1e-12)


@ATTACK
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(400, 560))
def test_power_of_two_unit_scaling_changes_nothing(seed, k):
    """Rescaling units by 2^±k is exact and leaves every M_i unchanged: the same answer, no crash."""
    rng = np.random.default_rng(seed)
    up, down, S = (
        testing.planted_arrays(rng, 3, 8) if seed % 2 else (rng.normal(size=(8, 3)), rng.normal(size=(3, 8)), None)
    )
    base = condition.find_absorbing_set(models.MLPParams(up, down), "gelu")
    ks = rng.choice([-k, k], 8)
    moved = condition.find_absorbing_set(
        models.MLPParams(np.ldexp(up, ks[:, None]), np.ldexp(down, -ks[None, :])), "gelu"
    )
    assert moved.status == base.status and moved.failed == base.failed


@ATTACK
@given(seed=st.integers(0, 2**32 - 1), scale=st.floats(1e-3, 1e3))
def test_empty_set_is_never_an_answer(seed, scale):
    """Weights of any scale and any dtype: ∅ never passes (its miss is I)."""
    rng = np.random.default_rng(seed)
    for dtype in (np.float16, np.float32, np.float64):
        p = models.MLPParams(
            (scale * rng.normal(size=(6, 3))).astype(dtype), (scale * rng.normal(size=(3, 6))).astype(dtype)
        )
        cert = condition.find_absorbing_set(p)
        assert cert.S is None or cert.S.size >= 3
        assert not np.all(condition.tolerance(p, []) >= np.eye(3))


@ATTACK
@given(seed=st.integers(0, 2**32 - 1), log_cond=st.floats(0, 12))
def test_hypotheses_are_invariant_under_coordinate_changes(seed, log_cond):
    """Generic rows stay non-parallel under W_up → W_up P⁻¹ (cond(P) up to 1e12); the decision's
    status does not change."""
    rng = np.random.default_rng(seed)
    d, n = 3, 8
    up, down = rng.normal(size=(n, d)), rng.normal(size=(d, n))
    q1, _ = np.linalg.qr(rng.normal(size=(d, d)))
    q2, _ = np.linalg.qr(rng.normal(size=(d, d)))
    P = q1 @ np.diag(np.geomspace(1, 10.0**log_cond, d)) @ q2
    base = condition.find_absorbing_set(models.MLPParams(up, down), "relu")
    moved = condition.find_absorbing_set(models.MLPParams(np.linalg.solve(P.T, up.T).T, P @ down), "relu")
    assert base.nondegenerate and moved.nondegenerate, moved.failed
    assert moved.status in (base.status, "undecided")


@pytest.mark.parametrize("seed", range(6))
def test_planted_sets_survive_a_coordinate_change(seed):
    """A planted block moved by ``P = 2^a W 2^b`` (``cond(P)`` up to 1e12) is exactly absorbable in its
    stored numbers, and is certified so (float64 ``P`` would break the set by ``~ε cond(P)``)."""
    params, activation, planted, note = testing.coordinate_change(np.random.default_rng(seed), 2 * seed + 1)
    assert testing.frobenius(testing.exact_miss(params, planted)) == 0, note
    cert = condition.find_absorbing_set(params, activation, decision=condition.Decision(time_limit=30.0))
    assert cert.status == "absorbable" and testing.judge(cert, params, activation, planted) == "", (note, str(cert))


def test_exactly_parallel_rows_are_found_at_any_scale():
    rng = np.random.default_rng(0)
    up, down = rng.normal(size=(6, 3)), rng.normal(size=(3, 6))
    up[4] = -0.5 * up[1]  # a power of two: exactly parallel in float64
    up[5] = 1024.0 * up[2]
    cert = condition.find_absorbing_set(models.MLPParams(up, down))
    assert cert.status == "degenerate" and "(1, 4)" in cert.failed[0] and "(2, 5)" in cert.failed[0]
    up16 = up.astype(np.float16)
    assert condition.find_absorbing_set(models.MLPParams(up16, down.astype(np.float16))).status == "degenerate"


# ---------------------------------------------------------------------------------------------
# Declared facts and the generalised flip (c·W_down[:,S] W_up[S,:] = −A)


def _gaussian(seed, d, n):
    rng = np.random.default_rng(100 + seed)
    return models.MLPParams(rng.normal(size=(n, d)), rng.normal(size=(d, n)))


def _leaky_planted(alpha, d=4, n=12, seed=0):
    """Weights with c·W_down[:,S] W_up[S,:] = −I for leaky_relu(α), c = 1 + α, S = the first d units."""
    rng = np.random.default_rng(seed)
    U, D = rng.normal(size=(n, d)), rng.normal(size=(d, n))
    D[:, :d] = -np.linalg.inv(U[:d]) / (1 + alpha)
    return models.MLPParams(U, D)


def _rel_gap(params, V, activation, bias=None, beta=None, e=None):
    """``max ‖block(x) − absorber(x)‖ / ‖x‖`` over 64 inputs of norms 1e-3 … 1e3 (float64)."""
    rng = np.random.default_rng(2)
    xs = rng.normal(size=(64, params.up.shape[1])) * 10.0 ** rng.uniform(-3, 3, (64, 1))
    block = jax.vmap(lambda x: models.skip_mlp(params, x, activation))(jnp.asarray(xs))
    free = jax.vmap(lambda x: models.mlp(V, x, activation))(jnp.asarray(xs))
    return float(np.max(np.linalg.norm(np.asarray(block) - np.asarray(free), axis=1) / np.linalg.norm(xs, axis=1)))


@pytest.mark.parametrize("alpha", [0.01, 0.2])
def test_leaky_relu_is_decided_by_the_generalised_flip(alpha):
    """leaky_relu(α), c = 1 + α: planted c·W_down[:,S] W_up[S,:] = −I is absorbable with an absorber
    exact to 1e-9·‖x‖; a generic block is not absorbable by the kink theorem; the planted c = 1
    condition (W_down[:,S] W_up[S,:] = −I) is not the leaky one."""
    name = "leaky_relu" if alpha == 0.01 else f"leaky_relu({alpha})"
    params = _leaky_planted(alpha)
    cert = condition.find_absorbing_set(params, name)
    assert cert.status == "absorbable" and cert.S.tolist() == [0, 1, 2, 3], cert.reason
    assert cert.theorem == activations.KINK_THEOREM and cert.assumes == ()
    V = condition.absorber(params, cert.S, odd_slope=name)
    assert _rel_gap(params, V, name) <= 1e-9
    with pytest.raises(ValueError, match="c·W_down"):
        condition.absorber(params, cert.S)  # c = 1 is the wrong condition for leaky weights
    generic = condition.find_absorbing_set(_gaussian(2, 4, 12), name)
    assert generic.status == "not_absorbable" and generic.theorem == activations.KINK_THEOREM
    relu_weights = _leaky_planted(0.0)
    assert condition.find_absorbing_set(relu_weights, name).status == "not_absorbable"


def test_user_activations_need_declared_facts():
    """A registered leaky relu (slope 0.1) without a declared odd slope is never certified absorbable,
    not even with W_down[:,S] W_up[S,:] = −I (its absorber would miss by 0.1·‖x‖); relu + 1e-6·sin
    likewise. Declared (odd slope 1.1, kink), it is decided, and the certificate lists what it assumes."""
    leaky = lambda z: jnp.where(z > 0, z, 0.1 * z)  # noqa: E731
    activations.register("_leaky_undeclared", leaky, degree=1, overwrite=True)
    activations.register("_relu_sin", lambda z: jax.nn.relu(z) + 1e-6 * jnp.sin(z), overwrite=True)
    activations.register("_leaky_declared", leaky, degree=1, odd_slope=1.1, kink=True, overwrite=True)
    try:
        one = _leaky_planted(0.0)
        for name in ("_leaky_undeclared", "_relu_sin"):
            cert = condition.find_absorbing_set(one, name)
            assert cert.status == "undecided" and cert.S is None and "declares no odd slope" in cert.reason
            assert condition.find_absorbing_set(_gaussian(2, 4, 12), name).status == "undecided"
        cert = condition.find_absorbing_set(one, "_leaky_declared")
        assert cert.status == "not_absorbable" and "given the declared" in cert.theorem
        cert = condition.find_absorbing_set(_leaky_planted(0.1), "_leaky_declared")
        assert cert.status == "absorbable" and "given the declared" in cert.theorem
        assert cert.assumes == activations.get("_leaky_declared").assumes and len(cert.assumes) == 2
        V = condition.absorber(_leaky_planted(0.1), cert.S, odd_slope=1.1)
        assert _rel_gap(_leaky_planted(0.1), V, "_leaky_declared") <= 1e-9
    finally:
        for name in ("_leaky_undeclared", "_relu_sin", "_leaky_declared"):
            activations.unregister(name)


def test_narrow_blocks_cite_an_every_width_theorem():
    """n < d: Thm 8 assumes n ≥ d; relu and leaky_relu are not absorbable by the kink theorem, an
    activation with a declared odd slope but neither kink nor ray limit is undecided."""
    rng = np.random.default_rng(4)
    p = models.MLPParams(rng.normal(size=(3, 5)), rng.normal(size=(5, 3)))
    for name in ("relu", "leaky_relu(0.3)"):
        cert = condition.find_absorbing_set(p, name, decision=condition.Decision(narrow=True))
        assert cert.status == "not_absorbable" and cert.theorem == activations.KINK_THEOREM
    assert (
        condition.find_absorbing_set(p, "gelu", decision=condition.Decision(narrow=True)).theorem
        == activations.RAY_LIMIT_KINK_THEOREM
    )
    activations.register("_odd_only", lambda z: z / 2 + z * z, odd_slope=1, overwrite=True)
    try:
        cert = condition.find_absorbing_set(p, "_odd_only", decision=condition.Decision(narrow=True))
        assert cert.status == "undecided" and "n >= d" in cert.reason
    finally:
        activations.unregister("_odd_only")


def test_biased_relu_with_parallel_rows_and_distinct_biases_is_decided():
    """Parallel rows whose kink hyperplanes differ (pairwise non-proportional (w_i, b_i)): relu and
    leaky_relu are decided by the kink theorem; the same hyperplane stays degenerate."""
    p = _gaussian(1, 4, 12)
    up = np.array(p.up)
    up[5] = 2.0 * up[3]
    b = np.random.default_rng(0).normal(size=12)
    for name in ("relu", "leaky_relu"):
        cert = condition.find_absorbing_set(models.MLPParams(up, p.down), name, bias=b)
        assert cert.status == "not_absorbable" and cert.theorem == activations.KINK_THEOREM, cert.reason
    b[5] = 2.0 * b[3]
    assert condition.find_absorbing_set(models.MLPParams(up, p.down), "relu", bias=b).status == "degenerate"


def test_spectral_at_most_is_exact():
    """testing.spectral_at_most decides ‖M‖_2 ≤ t exactly, zero pivots and equality included."""
    from fractions import Fraction

    M = [[Fraction(3), Fraction(0)], [Fraction(0), Fraction(4)]]
    assert testing.spectral_at_most(M, 4.0) and not testing.spectral_at_most(M, 4.0 - 2.0**-50)
    ones = [[Fraction(1), Fraction(1)], [Fraction(1), Fraction(1)]]  # ‖·‖_2 = 2, rank one
    assert testing.spectral_at_most(ones, 2.0) and not testing.spectral_at_most(ones, 1.999)
    assert testing.spectral_at_most([[Fraction(0), Fraction(0)], [Fraction(0), Fraction(1)]], 1.0)
    assert not testing.spectral_at_most([[Fraction(0), Fraction(1)], [Fraction(0), Fraction(0)]], 0.0)
