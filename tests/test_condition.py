"""Thm 8/10 decision, the absorber and the distance (float64: exactness claims)."""

import functools
import itertools
import json
import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import activations, condition, models
from absorbjax.models import GatedParams, MLPParams

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)
MILP, EXHAUSTIVE, RELAXATION = (condition.Decision(method=m) for m in ("milp", "exhaustive", "relaxation"))

KEY = jax.random.key(0)

# A new weight shape costs a JAX compile, so the tests share a few blocks and take sub-blocks:
# rows/columns of i.i.d. Gaussian (or ternary) weights are i.i.d. weights of the smaller shape.
with jax.enable_x64(True):
    GAUSS = models.sample("relu", 4, 30, key=jax.random.fold_in(KEY, 1), draws=8)  # (8, 30, 4), (8, 4, 30)
    TERNARY = models.sample("relu", 2, 7, key=jax.random.fold_in(KEY, 2), draws=50, dist="ternary")


def gaussian(k, d, n):
    """Draw ``k`` of the Gaussian pool, cut to ``d, n``."""
    return MLPParams(np.asarray(GAUSS.up[k, :n, :d]), np.asarray(GAUSS.down[k, :d, :n]))


@functools.cache
def planted(d, n, size):
    """``models.planted`` weights (one draw per shape) and their hidden ``S``."""
    return models.planted("relu", d, n, key=jax.random.fold_in(KEY, 100 * d + n + size), size=size)


@functools.partial(jax.jit, static_argnames="activation")
def _gap(params, V, xs, skip, activation):
    want = jax.vmap(lambda x: models.skip_mlp(params, x, activation, skip))(xs)
    got = jax.vmap(lambda x: models.mlp(V, x, activation))(xs)
    scale = jnp.maximum(1.0, jnp.linalg.norm(xs, axis=1, keepdims=True))
    return jnp.max(jnp.abs(want - got) / scale)


def gap(params, V, activation, skip=None, count=64):
    """``max |A x + W_down σ(W_up x) − V_down σ(V_up x)| / max(1, ‖x‖)``, ‖x‖ from 1e-3 to 1e3."""
    d = params.down.shape[0]
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(count, d))
    xs *= np.exp(rng.uniform(-7, 7, (count, 1))) / np.linalg.norm(xs, axis=1, keepdims=True)
    p = MLPParams(jnp.asarray(params.up), jnp.asarray(params.down))
    skip = None if skip is None else jnp.asarray(skip)
    return float(_gap(p, V, jnp.asarray(xs), skip, activation))


def draw(params, k, n=None):
    n = params.up.shape[1] if n is None else n
    return MLPParams(np.asarray(params.up[k, :n]), np.asarray(params.down[k, :, :n]))


def brute_force(params, skip=None, rtol=None):
    """Every subset that rule (★) accepts (``condition.tolerance``), by plain itertools."""
    U, D = np.asarray(params.up, np.float64), np.asarray(params.down, np.float64)
    n, d = U.shape
    A = np.eye(d) if skip is None else np.asarray(skip)
    return [
        S
        for r in range(n + 1)
        for S in itertools.combinations(range(n), r)
        if np.all(np.abs(D[:, list(S)] @ U[list(S)] + A) <= condition.tolerance(params, list(S), skip=skip, rtol=rtol))
    ]


# ---------------------------------------------------------------------------------------------
# Absorbable weights

ABSORBABLE = [(4, 12, 4), (4, 12, 7), (2, 12, 2), (2, 12, 5)]  # |S| = d and > d; n ≤ d² and > d²


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
@pytest.mark.parametrize("d,n,size", ABSORBABLE)
def test_absorbable_found_and_absorber_exact(activation, d, n, size):
    params, S = planted(d, n, size)
    cert = condition.find_absorbing_set(params, activation)
    assert cert.status == "absorbable" and cert.absorbable and cert.nondegenerate
    np.testing.assert_array_equal(cert.S, S)  # the hidden S, among shuffled units
    assert cert.method == ("rounding" if n <= d * d else "exhaustive")  # n > d²: integer search
    assert cert.residual <= 1e-12
    assert np.all(np.abs(params.down[:, cert.S] @ params.up[cert.S] + np.eye(d)) <= condition.tolerance(params, cert.S))
    assert gap(params, condition.absorber(params, cert.S, activation), activation) <= 1e-10


def test_absorbable_with_degenerate_weights_is_still_absorbable():
    params, S = planted(2, 12, 2)
    rest = np.setdiff1d(np.arange(12), S)
    up = np.asarray(params.up).copy()
    up[rest[1]] = -2.0 * up[rest[0]]  # exactly parallel rows outside S: the absorber needs no genericity
    params = MLPParams(up, np.asarray(params.down))
    cert = condition.find_absorbing_set(params)
    assert cert.status == "absorbable" and not cert.nondegenerate
    assert any("parallel" in f for f in cert.failed)
    assert gap(params, condition.absorber(params, cert.S, "relu"), "relu") <= 1e-10


def test_perturbed_absorbable_is_not():
    params, S = planted(4, 12, 4)
    down = np.asarray(params.down).copy()
    down[:, S[0]] *= 1 + 1e-7  # a real solution remains (c = 1/(1 + 1e-7)), no 0/1 one
    cert = condition.find_absorbing_set(MLPParams(params.up, down))
    assert (cert.status, cert.method) == ("not_absorbable", "rounding") and cert.S is None
    assert cert.relaxation.radius < 0.5 and cert.residual > 1e-9  # round(c) = S is the only candidate
    exhaustive = condition.find_absorbing_set(MLPParams(params.up, down), decision=EXHAUSTIVE)
    assert exhaustive.status == "not_absorbable"
    down = np.asarray(params.down).copy()
    down[:, S[0]] += 1e-8 * np.random.default_rng(0).normal(size=4)  # n < d²: no real solution
    cert = condition.find_absorbing_set(MLPParams(params.up, down))
    assert (cert.status, cert.method) == ("not_absorbable", "relaxation")
    assert cert.lower_bound > cert.threshold


# ---------------------------------------------------------------------------------------------
# Continuous draws (Cor 11) and discrete ones, against exhaustive search


@pytest.mark.parametrize("d,n", [(2, 3), (2, 4), (3, 6), (3, 9), (2, 7), (2, 12), (3, 12), (4, 14)])
def test_gaussian_not_absorbable_agrees_with_exhaustive(d, n):
    for k in range(4):
        p = gaussian(k, d, n)
        cert = condition.find_absorbing_set(p)
        assert cert.status == "not_absorbable" and cert.nondegenerate and cert.S is None
        assert cert.reason.startswith("no S exists")
        if cert.method == "relaxation":
            assert cert.lower_bound > cert.threshold
        for decision in (EXHAUSTIVE, MILP):
            assert condition.find_absorbing_set(p, decision=decision).status == "not_absorbable"
        if n <= 9:
            assert not brute_force(p)


@pytest.mark.slow
def test_gaussian_wide_milp():
    p = gaussian(5, 2, 20)
    cert = condition.find_absorbing_set(p, decision=MILP)  # HiGHS's "infeasible", then enumeration
    assert (cert.status, cert.method, cert.relaxation.rank) == ("not_absorbable", "exhaustive", 4)
    assert "none of the 2^20 subsets passes" in cert.reason and "HiGHS" in cert.reason
    cert = condition.find_absorbing_set(p)  # auto: the box relaxation already excludes it
    assert (cert.status, cert.method) == ("not_absorbable", "relaxation") and "[0,1]^20" in cert.reason


@pytest.mark.slow
@pytest.mark.parametrize("n", [5, 7])
def test_ternary_draws_agree_with_exhaustive(n):
    draws = MLPParams(TERNARY.up[:, :n], TERNARY.down[:, :, :n])
    auto = condition.find_absorbing_sets(draws)
    exhaustive, milp = (condition.find_absorbing_sets(draws, decision=dec) for dec in (EXHAUSTIVE, MILP))
    found = 0
    for k, (a, e, m) in enumerate(zip(auto, exhaustive, milp)):
        assert a.status == e.status == m.status, k
        p = draw(draws, k)
        assert (a.status == "absorbable") == bool(brute_force(p)), k
        if a.status == "absorbable":
            found += 1
            assert gap(p, condition.absorber(p, a.S, "relu"), "relu") <= 1e-10
    assert found >= 1  # 50 draws: absorption happens with positive frequency for discrete weights


def test_find_absorbing_sets_matches_single_calls():
    many = condition.find_absorbing_sets(TERNARY)
    assert len(many) == 50
    for k, cert in enumerate(many[:12]):
        one = condition.find_absorbing_set(draw(TERNARY, k))
        assert (cert.status, cert.method, cert.relaxation.rank) == (one.status, one.method, one.relaxation.rank)
    shared = condition.find_absorbing_sets(GAUSS, skip=2 * np.eye(4))
    assert [c.skip for c in shared] == ["matrix"] * 8
    for k, cert in enumerate(shared):
        one = condition.find_absorbing_set(draw(GAUSS, k), skip=2 * np.eye(4))
        assert (cert.status, cert.lower_bound) == (one.status, one.lower_bound)
    with pytest.raises(ValueError, match="skip must have shape"):
        condition.find_absorbing_sets(GAUSS, skip=np.eye(3))


def test_find_absorbing_sets_forwards_the_options():
    bias = np.linspace(-1.0, 1.0, 8 * GAUSS.up.shape[1]).reshape(8, -1)
    per_draw = condition.find_absorbing_sets(GAUSS, "gelu", bias=bias, progress=False)
    for k, cert in enumerate(per_draw):
        one = condition.find_absorbing_set(draw(GAUSS, k), "gelu", bias=bias[k])
        assert (cert.status, cert.biased, cert.theorem) == (one.status, one.biased, one.theorem)
    with pytest.raises(TypeError, match="unexpected keyword argument 'tol'"):
        condition.find_absorbing_sets(GAUSS, progress=False, tol=1e-3)
    with pytest.raises(ValueError, match="method must be one of"):
        condition.find_absorbing_sets(GAUSS, progress=False, decision=condition.Decision(method="guess"))
    with pytest.raises(ValueError, match="bias must have shape"):
        condition.find_absorbing_sets(GAUSS, progress=False, bias=np.ones(3))


def test_find_absorbing_sets_progress_bar(capsys):
    condition.find_absorbing_sets(GAUSS)
    err = capsys.readouterr().err
    assert "find_absorbing_sets" in err and "8/8" in err
    condition.find_absorbing_sets(GAUSS, progress=False)
    assert capsys.readouterr().err == ""


def test_compressed_milp_formulation(monkeypatch):
    monkeypatch.setattr(condition._integer, "_MILP_DENSE_MAX", 0)
    params, S = planted(2, 12, 5)
    cert = condition.find_absorbing_set(params, decision=MILP)
    assert cert.status == "absorbable"
    np.testing.assert_array_equal(cert.S, S)
    cert = condition.find_absorbing_set(gaussian(6, 3, 14), decision=MILP)
    assert cert.status == "not_absorbable" and "compressed constraints" in cert.reason


def test_milp_verifies_solutions_and_reports_time_limits(monkeypatch):
    params, _ = planted(2, 12, 2)
    real, calls = condition._integer.optimize.milp, []

    def wrong_first(*args, **kwargs):  # a false "feasible" answer must be caught and cut off
        calls.append(1)
        if len(calls) == 1:
            return types.SimpleNamespace(status=0, x=np.ones(12), message="fake")
        return real(*args, **kwargs)

    monkeypatch.setattr(condition._integer.optimize, "milp", wrong_first)
    cert = condition.find_absorbing_set(params, decision=MILP)
    assert cert.status == "absorbable" and len(calls) == 2

    def timed_out(*args, **kwargs):
        return types.SimpleNamespace(status=1, x=None, message="Time limit reached")

    monkeypatch.setattr(condition._integer.optimize, "milp", timed_out)
    cert = condition.find_absorbing_set(params, decision=MILP)  # n = 12: enumeration still decides
    assert cert.status == "absorbable" and cert.method == "exhaustive"
    wide = MLPParams(np.asarray(GAUSS.up[0, :30, :2]), np.asarray(GAUSS.down[0, :2, :30]))
    cert = condition.find_absorbing_set(wide, decision=MILP)  # n = 30: too many subsets to enumerate
    assert cert.status == "undecided" and cert.S is None and "Time limit" in cert.reason


def test_relaxation_only_can_be_undecided():
    cert = condition.find_absorbing_set(planted(2, 12, 2)[0], decision=RELAXATION)
    assert cert.status == "undecided" and cert.relaxation.rank == 4


# ---------------------------------------------------------------------------------------------
# Degenerate weights, d = 1, bad input


def test_parallel_rows_and_zero_columns_are_degenerate():
    p = gaussian(0, 2, 3)
    up, down = p.up.copy(), p.down.copy()
    up[1] = -2.0 * up[0]
    cert = condition.find_absorbing_set(MLPParams(up, p.down))
    assert cert.status == "degenerate" and cert.relaxation.min_row_sin < 1e-7
    assert any("parallel" in f and "(0, 1)" in f for f in cert.failed)
    down[:, 2] = 0.0
    cert = condition.find_absorbing_set(MLPParams(p.up, down))
    assert cert.status == "degenerate" and "columns of W_down are zero: [2]" in cert.failed
    assert "no S exists" in cert.reason and "nondegenerate" in cert.reason


def test_d1():
    up = np.array([[1.0], [2.0], [3.0]])
    cert = condition.find_absorbing_set(MLPParams(up, np.array([[-1.0, 0.5, 0.25]])))
    assert cert.status == "absorbable" and cert.S.tolist() == [0]  # exists: absorbable anyway
    # d = 1 is no hypothesis (the kink theorem holds there); these rows are parallel
    assert not any(getattr(f, "kind", "") == "d" for f in cert.failed) and "parallel" in " ".join(cert.failed)
    cert = condition.find_absorbing_set(MLPParams(up, np.array([[1.0, 1.0, 1.0]])))
    assert cert.status == "degenerate"  # no activation named: the line theorem (kink only) is not cited


@pytest.mark.parametrize(
    "bad,kwargs,match",
    [
        ("empty_n", {}, "n >= 1 hidden units"),
        ("empty_d", {}, "n >= 1 hidden units"),
        ("huge", {}, "too large to decide in float64"),
        (None, {"skip": np.eye(3, dtype=complex)}, "skip must hold real numbers"),
        (None, {"skip": np.eye(3, dtype=bool)}, "skip must hold real numbers"),
        (None, {"rtol": float("inf")}, "rtol must be in"),
        (None, {"rtol": 0.5}, "rtol must be in"),
        (None, {"rtol": True}, "rtol must be a number"),
        (None, {"time_limit": True}, "time_limit"),
        (None, {"time_limit": float("inf")}, "time_limit"),
        (None, {"method": "greedy"}, "method must be one of"),
        (None, {"skip_rtol": 1.0}, "skip_rtol must be a number in"),
        (None, {"bias": np.ones(5)}, r"bias must be the hidden bias b of σ\(W_up x \+ b\), shape \(6,\)"),
        (None, {"bias": np.full(6, np.nan)}, "bias contains NaN"),
    ],
)
@pytest.mark.parametrize("decision", [condition.find_absorbing_set, condition.distance], ids=["decide", "distance"])
def test_bad_input_gives_one_line_errors(bad, kwargs, match, decision):
    p = gaussian(0, 3, 6)
    p = {
        None: p,
        "empty_n": MLPParams(np.zeros((0, 3)), np.zeros((3, 0))),
        "empty_d": MLPParams(np.zeros((6, 0)), np.zeros((0, 6))),
        "huge": MLPParams(p.up * 1e200, p.down),
        "tiny": MLPParams(p.up * 1e-200, p.down),
    }[bad]
    fields = {k: v for k, v in kwargs.items() if k in ("rtol", "time_limit", "method", "skip_rtol")}
    with pytest.raises(ValueError, match=match) as err:  # a bad field is refused when the Decision is built
        decision(p, **{k: kwargs[k] for k in kwargs.keys() - fields.keys()}, decision=condition.Decision(**fields))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["relu", "gelu", "gelu_tanh", "silu", "softplus"])
def test_biased_blocks_are_decided_by_the_ray_limit(name):
    """Planted biased blocks: absorbable, and the absorber with β = b (b[S] negated), output bias
    c + W_down[:,S] b[S] reproduces the block to 1e-12 relative in float64; Gaussian biased blocks:
    not_absorbable by Thm 8 via the ray limit."""
    params, S = planted(4, 12, 4)
    U, D = np.asarray(params.up), np.asarray(params.down)
    rng = np.random.default_rng(3)
    b, c = rng.normal(size=12), rng.normal(size=4)
    cert = condition.find_absorbing_set(params, name, bias=b)
    assert cert.status == "absorbable" and cert.biased and cert.S.tolist() == S.tolist()
    assert cert.promise.miss_bound <= 1e-12 and cert.theorem == activations.get(name).converse(biased=True)
    V = np.asarray(condition.absorber(params, cert.S, name).up)
    beta, e = condition.absorber_biases(params, cert.S, b, c, activation=name)
    xs = rng.normal(size=(64, 4)) * 10.0 ** rng.uniform(-3, 3, (64, 1))
    sigma = jax.vmap(activations.get(name).fn)
    want = xs + np.asarray(sigma(xs @ U.T + b)) @ D.T + c
    got = np.asarray(sigma(xs @ V.T + beta)) @ D.T + e
    assert np.max(np.abs(want - got) / (1 + np.abs(want))) <= 1e-12
    generic = condition.find_absorbing_set(gaussian(1, 4, 12), name, bias=b)
    assert generic.status == "not_absorbable" and "Thm 8 via the ray limit" in generic.reason
    assert generic.theorem == "Thm 8 via the ray limit"


def _exact_offset(params, S, b, c, e):
    """``‖absorber(0) − block(0)‖`` in exact rationals: ``W_down[:,S] b[S] + c − e`` (``σ(b) − σ(−b) = b``)."""
    from fractions import Fraction

    D = np.asarray(params.down, np.float64)
    out = []
    for k in range(D.shape[0]):
        x = sum((Fraction(float(D[k, i])) * Fraction(float(b[i])) for i in S), Fraction(0))
        out.append(x + Fraction(float(c[k])) - Fraction(float(e[k])))
    return math.sqrt(float(sum(x * x for x in out)))


@pytest.mark.parametrize("size", [1.0, 1e16])
def test_offset_bound_covers_the_absorber_at_zero(size):
    """At x = 0 the absorber errs only by the rounding of its output bias e = c + W_down[:,S] b[S]:
    the certificate's offset_bound bounds that exactly computed error (biases of size 1 and 1e16),
    and is 0 where e is exact (dyadic biases and weights with short mantissas)."""
    params, S = planted(4, 12, 4)
    rng = np.random.default_rng(5)
    b, c = rng.normal(size=12) * size, rng.normal(size=4) * size
    cert = condition.find_absorbing_set(params, "relu", bias=b, out_bias=c)
    assert cert.status == "absorbable" and cert.promise.offset_bound is not None
    beta, e = condition.absorber_biases(params, cert, b, c)
    err = _exact_offset(params, cert.S, b, c, e)
    assert err <= cert.promise.offset_bound <= 2 * 2.0**-53 * math.sqrt(4) * float(np.max(np.abs(e))) + 1e-300
    assert np.array_equal(beta[cert.S], -b[cert.S])
    if size > 1:
        assert cert.promise.offset_bound > 0  # 1e16 biases: e has no exact float64 value here
    # an exact dyadic block: W_up[S,:] = I, W_down[:,S] = −I, quarter-integer biases: e is exact
    up = np.concatenate([np.eye(4), np.round(rng.normal(size=(8, 4)) * 4) / 4])
    down = np.concatenate([-np.eye(4), np.round(rng.normal(size=(4, 8)) * 4) / 4], axis=1)
    b8, c8 = np.round(b / size * 4) / 4, np.round(c / size * 4) / 4
    cert8 = condition.find_absorbing_set(MLPParams(up, down), "relu", bias=b8, out_bias=c8)
    assert cert8.status == "absorbable" and cert8.S.tolist() == [0, 1, 2, 3] and cert8.promise.offset_bound == 0.0
    e8 = condition.absorber_biases(MLPParams(up, down), cert8, b8, c8)[1]
    assert _exact_offset(MLPParams(up, down), cert8.S, b8, c8, e8) == 0.0
    plain = condition.find_absorbing_set(params, "relu")
    assert plain.promise.offset_bound == 0.0  # no biases: e = 0
    assert condition.find_absorbing_set(gaussian(1, 4, 12), "relu", bias=b).promise.offset_bound is None


def test_parallel_rows_with_distinct_biases_are_degenerate():
    p = gaussian(1, 4, 12)
    up = np.array(p.up)
    up[5] = 2.0 * up[3]  # exactly parallel
    b = np.random.default_rng(0).normal(size=12)
    cert = condition.find_absorbing_set(MLPParams(up, p.down), "silu", bias=b)
    assert cert.status == "degenerate" and "distinct biases" in cert.reason and "(3, 5)" in cert.reason
    b[5] = 2.0 * b[3]  # the same hyperplane: still degenerate (parallel rows), without that clause
    cert = condition.find_absorbing_set(MLPParams(up, p.down), "silu", bias=b)
    assert cert.status == "degenerate" and "distinct biases" not in cert.reason


def test_results_are_not_truth_values():
    cert = condition.find_absorbing_set(gaussian(1, 4, 12))
    with pytest.raises(TypeError, match=r"result\.status"):
        bool(cert)
    with pytest.raises(TypeError, match=r"result\.upper"):
        bool(condition.distance(gaussian(1, 4, 12)))


def test_bad_input_raises():
    p = gaussian(0, 3, 6)
    # singular and ill-conditioned skips are decided (tests/test_condition_line.py), not refused
    assert condition.find_absorbing_set(p, skip=np.diag([1.0, 1.0, 0.0])).status == "not_absorbable"
    assert condition.find_absorbing_set(p, skip=np.diag([1.0, 1.0, 1e-9])).status == "not_absorbable"
    with pytest.raises(ValueError, match=r"outside \[2\^-400, 2\^400\]"):
        condition.find_absorbing_set(p, skip=np.diag([1e-300, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"shape \(3, 3\)"):
        condition.find_absorbing_set(p, skip=np.eye(2))
    with pytest.raises(ValueError, match="ungated"):
        condition.find_absorbing_set(GatedParams(p.up, p.up, p.down))
    with pytest.raises(ValueError, match="gated"):
        condition.find_absorbing_set(p, "swiglu")
    with pytest.raises(ValueError, match="Prop 5"):
        condition.find_absorbing_set(p, "relu2")
    with pytest.raises(ValueError, match="find_absorbing_sets"):
        condition.find_absorbing_set(GAUSS)
    with pytest.raises(ValueError, match="shape"):
        condition.find_absorbing_set(MLPParams(p.up, p.down.T))
    nan = p.up.copy()
    nan[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        condition.find_absorbing_set(MLPParams(nan, p.down))
    with pytest.raises(ValueError, match="method"):
        condition.find_absorbing_set(p, decision=condition.Decision(method="sat"))
    with pytest.raises(ValueError, match="tol"):
        condition.find_absorbing_set(p, decision=condition.Decision(rtol=-1.0))
    with pytest.raises(ValueError, match="2\\^n"):
        condition.find_absorbing_set(gaussian(0, 2, 25), decision=EXHAUSTIVE)
    with pytest.raises(ValueError, match="ungated"):
        condition.absorber(GatedParams(p.up, p.up, p.down), [0])


def test_float32_storage_is_decided_exactly_and_within_rounding():
    params, S = planted(4, 12, 4)
    p32 = MLPParams(np.asarray(params.up, np.float32), np.asarray(params.down, np.float32))
    c32, c64 = condition.find_absorbing_set(p32), condition.find_absorbing_set(params)
    assert (c32.stored_dtype, c64.stored_dtype) == ("float32", "float64")
    # The stored float32 values miss the condition by ~1e-7: exactly, they are not absorbable ...
    assert c32.status == "not_absorbable" and c32.lower_bound > c32.threshold
    # ... but they are the rounding of an absorbable block, a separate answer.
    assert c32.rounding.within == "yes" and c32.rounding.S.tolist() == S.tolist()
    assert c64.status == "absorbable" and c64.rounding.within == "n/a"
    assert c32.rounding.rtol == pytest.approx(condition.DEFAULT_RTOL + condition.storage_rtol(np.float32))


# ---------------------------------------------------------------------------------------------
# Lemma 4: a general invertible skip A


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
@pytest.mark.parametrize("d,n,size", [(4, 12, 4), (2, 12, 5)])
def test_skip_matrix(activation, d, n, size):
    params, S = planted(d, n, size)
    A = np.eye(d) + 0.4 * np.random.default_rng(n + size).normal(size=(d, d))
    down = np.asarray(params.down).copy()
    down[:, S] = A @ down[:, S]  # W_down[:,S] W_up[S,:] = −A
    params = MLPParams(params.up, jnp.asarray(down))
    cert = condition.find_absorbing_set(params, skip=A)
    assert cert.status == "absorbable" and cert.skip == "matrix"
    np.testing.assert_array_equal(cert.S, S)
    V = condition.absorber(params, cert.S, activation, skip=A)
    assert gap(params, V, activation, skip=A) <= 1e-10
    assert condition.find_absorbing_set(params).status == "not_absorbable"  # −I is another question
    with pytest.raises(ValueError, match="does not satisfy"):
        condition.absorber(params, cert.S, activation)


def test_absorber_checks_S():
    params, S = planted(2, 12, 2)
    with pytest.raises(ValueError, match="index hidden units"):
        condition.absorber(params, [0, 12])
    with pytest.raises(ValueError, match="repeated"):
        condition.absorber(params, [S[0], S[0]])
    wrong = np.setdiff1d(np.arange(12), S)[:2]
    with pytest.raises(ValueError, match="does not satisfy"):
        condition.absorber(params, wrong, "relu")
    V = condition.absorber(params, wrong, check=False)
    np.testing.assert_array_equal(np.asarray(V.up)[wrong], -np.asarray(params.up)[wrong])
    mask = np.zeros(12, bool)
    mask[S] = True
    np.testing.assert_array_equal(condition.absorber(params, mask, "relu").up, condition.absorber(params, S, "relu").up)


# ---------------------------------------------------------------------------------------------
# Distance and the certificate's outputs


def test_distance_absorbable_is_zero():
    dist = condition.distance(planted(2, 12, 5)[0])
    assert dist.method == "exact" and dist.upper <= 1e-10
    assert 0.0 <= dist.lower <= dist.upper


@pytest.mark.parametrize("d,n", [(4, 10), (2, 10), (3, 30)])
def test_distance_gaussian(d, n):
    p = gaussian(7, d, n)
    dist = condition.distance(p)
    assert 0.0 < dist.lower <= dist.upper <= 1.0
    U, D = p.up, p.down
    assert np.isclose(np.linalg.norm(D[:, dist.S] @ U[dist.S] + np.eye(d)) / np.sqrt(d), dist.upper)
    if n <= 10:  # the exact minimum over all subsets
        best = min(
            np.linalg.norm(D[:, list(S)] @ U[list(S)] + np.eye(d))
            for r in range(n + 1)
            for S in itertools.combinations(range(n), r)
        ) / np.sqrt(d)
        assert dist.method == "exhaustive" and np.isclose(dist.upper, best)
    if n < d * d:
        assert dist.relaxation > 0  # the real relaxation alone already separates
    else:
        assert dist.relaxation == 0 and dist.box > 0  # only the box relaxation does


def test_statuses_are_typed_and_records_keep_the_plain_words():
    """A status is a member of its ``StrEnum`` (equal to its word, which the records hold); a
    certificate refuses a word outside its vocabulary."""
    import dataclasses

    cert = condition.find_absorbing_set(gaussian(1, 3, 6), "gelu")
    assert cert.status is condition.Status.NOT_ABSORBABLE and cert.status == "not_absorbable"
    assert cert.rounding.within is condition.WithinRounding.NOT_APPLICABLE
    record = json.dumps(cert.to_dict())
    assert '"status": "not_absorbable"' in record and '"within_rounding": "n/a"' in record
    with pytest.raises(ValueError, match="'absorbed' is not a valid Status"):
        dataclasses.replace(cert, status="absorbed")


def test_certificate_summary_and_json():
    cert = condition.find_absorbing_set(gaussian(1, 3, 6), "gelu")
    text = str(cert)
    assert text.startswith("not_absorbable") and "hypotheses" in text and "Thm 8/10" in text
    record = json.loads(json.dumps(cert.to_dict()))
    assert record["status"] == "not_absorbable" and record["S"] is None
    assert record["d"] == 3 and record["n"] == 6 and record["method"] == "relaxation"
    params, S = planted(4, 12, 4)
    record = json.loads(json.dumps(condition.find_absorbing_set(params).to_dict()))
    assert record["S"] == S.tolist() and record["residual"] <= 1e-12 and record["rtol"] == condition.DEFAULT_RTOL
    dist = json.loads(json.dumps(condition.distance(params).to_dict()))
    assert dist["S"] == S.tolist() and dist["certificate"]["status"] == "absorbable"


@pytest.mark.parametrize("d,n", [(4, 12), (3, 30), (2, 12)])  # G positive definite; then n > d²: singular
def test_box_bound_is_certified_and_tight(d, n):
    """The box bound against scipy's bounded least squares on the explicit ``K`` (``d² × n``)."""
    from scipy.optimize import lsq_linear

    from absorbjax.condition._relax import box_relaxation, relax

    p = gaussian(3, d, n)
    U, D, A = np.asarray(p.up), np.asarray(p.down), np.eye(d)
    K = np.stack([np.outer(D[:, i], U[i]).ravel() for i in range(n)], axis=1)
    best = np.sqrt(2 * lsq_linear(K, -A.ravel(), bounds=(0, 1), tol=1e-14).cost)
    bound, c = box_relaxation(U, D, A, relax(U, D, A, U @ U.T, {}))
    assert np.all((0 <= c) & (c <= 1))
    assert bound <= best * (1 + 1e-12) and bound >= best * (1 - 1e-3), (bound, best)


@pytest.mark.slow
def test_float32_absorber_error_names_x64():
    with jax.enable_x64(False):
        p, S = models.planted("relu", 3, 6, key=jax.random.key(0))
    assert p.up.dtype == np.float32
    with pytest.raises(ValueError, match=r"jax_enable_x64"):
        condition.absorber(p, S, "relu")


def test_cancellation_inside_S_is_undecided_with_an_exact_miss():
    """Two units of size 1e12 whose W_down columns cancel: rule (★) tolerates their O(1) exact miss;
    rule (E) refuses it (undecided, never absorbable with a far absorber)."""
    W = np.array([[1.0, 0.0], [0.0, 1.0]])
    w, y = np.array([1.0, 2.0]), np.array([1.0, -1.0])
    L, e = 2.0**40, np.array([0.75, -0.5])
    up = np.vstack([W, L * w, L * w + e])
    down = np.hstack([-W + np.outer(y, e), y[:, None], -y[:, None]])  # only S = {0,1,2,3} is exact
    cert = condition.find_absorbing_set(MLPParams(up, down), "relu")
    assert cert.status == "absorbable" and cert.S.tolist() == [0, 1, 2, 3] and cert.promise.miss_bound == 0.0
    down[0, 2] += 2.0**-43  # exact miss 2^-43·L·w = (1/8, 1/4) in row 0: far from 0, within (★)'s slack
    cert = condition.find_absorbing_set(MLPParams(up, down), "relu")
    assert cert.status == "undecided" and "cancellation" in cert.reason


def test_subnormal_products_and_power_of_two_scalings_are_exact():
    up = np.array([[2.0, 1.0], [1.0, 1.0], [3.0, -2.0]])
    down = np.array([[-1.0, 1.0, 0.0], [1.0, -2.0, 0.0]])  # W_down[:,S] W_up[S,:] = −I, S = {0, 1}
    up[2], down[:, 2] = np.ldexp(up[2], -540), np.ldexp(np.array([5.0, 3.0]), -540)  # products 2^-1080
    cert = condition.find_absorbing_set(MLPParams(up, down), "gelu")
    assert cert.status == "absorbable" and cert.S.tolist() == [0, 1] and cert.promise.miss_bound <= 1e-14
    k = np.array([530, -530, 0])
    moved = MLPParams(np.ldexp(up, k[:, None]), np.ldexp(down, -k[None, :]))  # Gram would overflow
    assert condition.find_absorbing_set(moved, "gelu").status == "absorbable"
    assert condition.distance(moved).upper <= 1e-14


def _psd_exact(M) -> bool:
    """Whether the rational symmetric ``M`` is positive definite, or semidefinite up to a zero
    pivot: Gaussian elimination in exact fractions (every pivot ≥ 0, nothing left off a zero one)."""
    from fractions import Fraction

    F = [[Fraction(x) for x in row] for row in M]
    n = len(F)
    for k in range(n):
        if F[k][k] < 0:
            return False
        if F[k][k] == 0:
            if any(F[k][j] != 0 for j in range(k, n)):
                return False
            continue
        for i in range(k + 1, n):
            f = F[i][k] / F[k][k]
            for j in range(k, n):
                F[i][j] -= f * F[k][j]
    return True


@pytest.mark.parametrize("seed", range(12))
def test_rigorous_constants_never_claim_too_much(seed):
    """Rump's Cholesky certificate (certify_pd) and sigma_min_lower, against exact arithmetic on
    nearly singular matrices (condition numbers up to 1e14): whatever they prove holds exactly."""
    from fractions import Fraction

    from absorbjax.condition import _decide as decide, _relax as relax  # the helpers as the decision uses them

    certify_pd, sigma_min_lower = relax.certify_pd, decide.sigma_min_lower

    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    lam = np.array([10.0 ** -rng.uniform(0, 14), 1.0, 2.0])
    G = (Q * lam) @ Q.T
    G = (G + G.T) / 2
    for mu in (lam[0] * 0.25, lam[0] * 0.99, lam[0] * 1.01, lam[0] * 4):
        if certify_pd(G, mu):
            assert _psd_exact(
                [[Fraction(float(G[i, j])) - (Fraction(mu) if i == j else 0) for j in range(3)] for i in range(3)]
            )
    assert certify_pd(G, lam[0] * 0.25) or lam[0] < 1e-12  # well away from the margin: proved
    A = (Q * np.sqrt(lam)) @ rng.normal(size=(3, 3))
    s = sigma_min_lower(A)
    At = [[Fraction(float(x)) for x in row] for row in A]
    AtA = [
        [sum(At[k][i] * At[k][j] for k in range(3)) - (Fraction(s) ** 2 if i == j else 0) for j in range(3)]
        for i in range(3)
    ]
    assert s >= 0 and _psd_exact(AtA)


def test_certificate_text_says_what_is_not_there():
    """A lower bound of 0 reads as no bound, float64 storage as nothing rounded: never
    "every S misses by >= 0" or "rtol n/a: n/a" (issue 58, the front door)."""
    up = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]])  # c = (0.5, 1, 1) in the box, no 0/1 point
    down = np.array([[-0.4, -0.4, 0.0], [0.0, 0.0, -1.0]])
    cert = condition.find_absorbing_set(models.MLPParams(up, down), "gelu", decision=RELAXATION)
    assert cert.status == "undecided" and cert.lower_bound == 0
    text = str(cert) + repr(cert)
    assert "misses by >= 0 " not in text and "n/a: n/a" not in text and "n/a" not in text.split("stored as")[1]
    assert "no positive lower bound" in text and "nothing rounded" in text
