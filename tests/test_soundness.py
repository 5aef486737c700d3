"""Property-based attack on the decision: every certificate on adversarial weights is judged
independently (:mod:`absorbjax.testing`: exact rational misses, brute force over all 2^n sets,
planted sets, exact hypotheses, the absorber evaluated in float64). ``undecided`` is allowed; a
wrong answer or a crash is not (a refusal is a one-line ``ValueError`` naming float64's range)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from absorbjax import condition, models, testing

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

ATTACK = settings(
    max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("family", list(testing.FAMILIES))
@ATTACK
@given(seed=st.integers(0, 2**32 - 1), index=st.integers(0, 11))
def test_no_wrong_certificate(family, seed, index):
    params, activation, planted, note, *bias = testing.FAMILIES[family](np.random.default_rng(seed), index)
    bias = bias[0] if bias else None
    try:
        cert = condition.find_absorbing_set(params, activation, time_limit=3.0, bias=bias)
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
    up, down, S = testing.planted(rng, 3, 8) if seed % 2 else (rng.normal(size=(8, 3)), rng.normal(size=(3, 8)), None)
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
    cert = condition.find_absorbing_set(params, activation, time_limit=30.0)
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
