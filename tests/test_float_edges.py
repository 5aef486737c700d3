"""Issue 56: the float edges at their cause. Each block below is the smallest found for one finding;
each must be answered right (``absorbable`` with a verified S, ``degenerate``, or ``undecided``),
never a false status: by ``find_absorbing_set`` (every ``method``), the wide path (the same block
padded past ``SCREEN_MIN_N``) and ``distance``.

1. a unit whose power-of-two balancing would round kept its scale: Gram entries 0·inf = NaN, and
   the enumeration's screen ``q <= threshold² + err`` is False for NaN (false ``not_absorbable``);
2. subnormal Gram entries amplified by an unbalanced unit, every number finite: the screen's
   allowance was relative only (false ``not_absorbable``, false ``lower_bound``);
3. exactly parallel rows at 2^±537: the squared cosine underflowed (Thm 8 cited, hypotheses fail);
4. the NaN block padded to n = 10 or 20: ``LinAlgError`` from ``np.linalg.eigh``.
"""

import numpy as np
import pytest

from absorbjax import condition, models
from absorbjax.condition import _wide as wide
from absorbjax.condition._arith import balance
from absorbjax.testing import exact_miss, frobenius, judge


def rounding_balance():
    """Finding 1: unit 0's row is [2^1000, 3·2^-74]; its ideal shift 2^-1001 rounds 3·2^-74."""
    a, t = 2.0**1000, 3 * 2.0**-74
    U = np.array([[a, t], [0.0, 1.0], [1.0, 1.0]])
    D = np.array([[-1 / a, t / a, 0.5], [0.0, -1.0, 0.25]])
    return U, D, [0, 1]


def out_of_range():
    """Finding 1, beyond any exact shift: a row spanning 2^1600 keeps Gram entries at inf (0·inf = NaN)."""
    U = np.array([[2.0**1000, 2.0**-600], [0.0, 2.0**-600], [1.0, 1.0]])
    D = np.array([[-(2.0**-1000), 2.0**-1000, 0.5], [0.0, -(2.0**600), 0.25]])
    return U, D, [0, 1]


def subnormal_gram():
    """Finding 2: W_down[:,0] near 2^-1004 with low bits, W_up[0,:] spanning 2^1604: a subnormal
    W_downᵀW_down entry times a W_up W_upᵀ entry near 2^1060 (exact S = {0, 1, 2, 3})."""
    x = -(2.0**-1004) * (1 + 2.0**-20)
    U = np.array([[2.0**1004, 2.0**-600], [0.0, 2.0**-802], [1.0, 1.0], [1.0, -1.0]])
    D = np.array([[x, 2.0**-802 * (1 + 2.0**-20), 2.0**-21, 2.0**-21], [0.0, 0.0, -0.5, 0.5]])
    return U, D, [0, 1, 2, 3]


def parallel_537():
    """Finding 3: rows 2^537·v and 2^-537·v (v = [1, 2^-537]), W_down pinning the second unscaled."""
    U = np.array([[2.0**537, 1.0], [2.0**-537, 2.0**-1074], [0.0, 1.0]])
    D = np.array([[2.0**-538, 2.0**536, 0.3], [2.0**-600, 3 * 2.0**-1074, 0.7]])
    return U, D, None


def parallel_537_free():
    """Finding 3 as reported: 2^±537 rows that balancing normalises; a free block reproduces it."""
    u = np.array([1.0, 2.0**-500])
    U = np.array([u * 2.0**537, u * 2.0**-537, [0.0, 1.0]])
    D = np.array([[2.0**-537 * 0.5, 2.0**537 * 0.5, 0.3], [2.0**-600, 2.0**-600, 0.7]])
    return U, D, None


BLOCKS = [rounding_balance, out_of_range, subnormal_gram, parallel_537, parallel_537_free]


def pad(U, D, n, seed=1):
    """The block with ``n − n₀`` generic units appended (the planted S keeps its indices)."""
    rng = np.random.default_rng(seed)
    k = n - U.shape[0]
    return (
        np.vstack([U, rng.standard_normal((k, U.shape[1]))]),
        np.hstack([D, 0.01 * rng.standard_normal((D.shape[0], k))]),
    )


def _right(cert, params, S, *, brute=True):
    """The certificate is one of the right answers, and the judge finds nothing wrong with it."""
    if S is not None:
        assert frobenius(exact_miss(params, S)) == 0  # the planted S is exact
        assert cert.status in ("absorbable", "undecided"), (cert.status, cert.reason)
    else:
        assert cert.status in ("degenerate", "undecided"), (cert.status, cert.reason)
    if brute:
        assert judge(cert, params, "relu", planted=S) == ""


def test_blocks_are_what_they_say():
    for f in (rounding_balance, out_of_range, subnormal_gram):
        U, D, S = f()
        assert frobenius(exact_miss(models.MLPParams(U, D), S)) == 0
    for f in (parallel_537, parallel_537_free):
        U, _, _ = f()
        assert U[0, 0] * U[1, 1] == U[0, 1] * U[1, 0]  # exactly parallel (products exact here)


def test_balance_is_exact_and_moves_as_far_as_it_may():
    U, D, _ = rounding_balance()
    Ub, Db = balance(U, D)
    assert np.max(np.abs(Ub[0])) <= 1.0  # moved to 2^0, one step short of the rounding shift
    for i in range(U.shape[0]):  # every rank-one term unchanged, exactly
        assert np.array_equal(np.ldexp(Ub[i], 0) * 1.0, Ub[i])
        assert frobenius(exact_miss(models.MLPParams(Ub, Db), [i], skip=np.zeros((2, 2)))) == frobenius(
            exact_miss(models.MLPParams(U, D), [i], skip=np.zeros((2, 2)))
        )


@pytest.mark.parametrize("make", BLOCKS)
@pytest.mark.parametrize("n", [None, 10, 20])
@pytest.mark.parametrize("method", ["auto", "exhaustive", "milp"])
def test_find_absorbing_set(make, n, method):
    U, D, S = make()
    if n is not None:
        U, D = pad(U, D, n)
    p = models.MLPParams(U, D)
    cert = condition.find_absorbing_set(
        p, "relu", decision=condition.Decision(method=method)
    )  # never an exception (finding 4)
    _right(cert, p, S, brute=U.shape[0] <= 18)
    if S is not None and cert.status == "absorbable":
        assert frobenius(exact_miss(p, cert.S)) <= cert.promise.miss_bound


@pytest.mark.parametrize("make", BLOCKS)
@pytest.mark.parametrize("n", [None, 10, 20])
def test_distance(make, n):
    U, D, S = make()
    if n is not None:
        U, D = pad(U, D, n)
    p = models.MLPParams(U, D)
    dist = condition.distance(p, "relu")
    exact = frobenius(exact_miss(p, dist.S))  # ‖A‖_F = √2
    assert exact / np.sqrt(2) <= dist.upper * (1 + 1e-12)
    assert np.isfinite(dist.lower) and dist.lower <= dist.upper
    if S is not None:  # the exact S attains 0: no lower bound above it
        assert dist.lower == 0.0 and dist.upper < 1e-12
    _right(dist.certificate, p, S, brute=U.shape[0] <= 18)


@pytest.mark.parametrize("make", BLOCKS)
def test_wide_path(make):
    U, D, S = make()
    U, D = pad(U, D, wide.SCREEN_MIN_N)
    p = models.MLPParams(U, D)
    cert = condition.find_absorbing_set(
        p, "relu", decision=condition.Decision(time_limit=3)
    )  # the MILP may stop: undecided is right
    _right(cert, p, S, brute=False)
    if cert.status == "absorbable":
        assert frobenius(exact_miss(p, cert.S)) <= cert.promise.miss_bound
    if S is None and cert.status == "degenerate":
        assert any(getattr(f, "kind", "") == "parallel" for f in cert.failed)


FLOAT_EDGE_FAMILIES = [
    "float edges: planted exact S, units at 2^±1000 whose balancing would round (n ≤ 8)",
    "float edges: planted exact S, products in the subnormal range near 2^-1060 (n ≤ 8)",
    "float edges: 2^-1000 … 2^1000 in one block, parallel pairs at 2^±537 (n ≤ 8)",
]


@pytest.mark.parametrize("family", FLOAT_EDGE_FAMILIES)
def test_float_edge_families_never_lie(family):
    soundness = pytest.importorskip("experiments.soundness")
    out = soundness.audit(family, 12, seed=0, time_limit=10.0)
    wrong = [(r["note"], r["status"], r["wrong"]) for r in out["rows"] if r["wrong"]]
    assert not wrong, wrong


def test_a_margin_within_rounding_is_said():
    """Issue 56: biased relu with two kink hyperplanes one ulp apart was `not_absorbable` with nothing
    saying how close to the theorem's boundary it is; the answer (true for the stored numbers) now
    says that the hypotheses hold by no more than the rounding, and the margin is in the evidence."""
    rng = np.random.default_rng(0)
    U, D, b = rng.standard_normal((6, 3)), rng.standard_normal((3, 6)), rng.standard_normal(6)
    U[1], b[1] = U[0], np.nextafter(b[0], 2.0)
    cert = condition.find_absorbing_set(models.MLPParams(U, D), "relu", bias=b)
    assert cert.status == "not_absorbable" and cert.relaxation.min_plane_sin < 1e-15
    assert "hold by no more than the storage's rounding" in cert.reason and "kink hyperplanes" in cert.reason
    near = rng.standard_normal((6, 3)).astype(np.float32)  # float32 rows 1e-8 apart in angle: within 2u
    near[1] = near[0] + np.float32(1e-8) * np.abs(near[0]).max() * np.array([0, 0, 1], np.float32)
    near[1, 2] = np.nextafter(near[0, 2], np.float32(10))
    cert = condition.find_absorbing_set(models.MLPParams(near, D.astype(np.float32)), "relu")
    assert cert.status == "not_absorbable" and "rows of W_up" in cert.reason, cert.reason
    generic = condition.find_absorbing_set(models.MLPParams(rng.standard_normal((6, 3)), D), "relu")
    assert generic.status == "not_absorbable" and "storage's rounding" not in generic.reason
    assert generic.relaxation.min_row_sin > 1e-3


def test_a_miss_that_rounds_to_zero_is_not_printed_as_zero():
    """A set whose exact miss is ``3·2^-2000`` (nonzero, below float64's range): ``not_absorbable``
    for the stored numbers, and the reason does not say the closest set "misses by 0"."""
    U = np.array([[2.0**1000, 3 * 2.0**-1000], [0.0, 2.0**-900], [1.0, 1.0]])
    D = np.array([[-(2.0**-1000), 0.0, 0.5], [0.0, -(2.0**900), 0.25]])
    miss = exact_miss(models.MLPParams(U, D), [0, 1])
    assert any(x != 0 for row in miss for x in row) and frobenius(miss) == 0.0  # 3·2^-2000, rounded
    cert = condition.find_absorbing_set(
        models.MLPParams(U, D), "relu", decision=condition.Decision(method="exhaustive")
    )
    assert cert.status == "not_absorbable", str(cert)
    assert "misses by 0 " not in cert.reason and "rounds to 0 in float64" in cert.reason, cert.reason
