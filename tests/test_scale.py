"""The O(n d²) screen of :mod:`absorbjax.condition._screen`: its bounds are never above their exact
values, it never claims absence for an absorbable block, and it finds planted sets.

Small sizes only, NumPy float64 weights (no JAX); exact references in Python fractions.
"""

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from absorbjax.condition import _hypotheses as hyp, _screen as screen, _wide as wide
from absorbjax.condition._rule import threshold_of

RTOL = 1e3 * 2.0**-52  # rule (★)'s default slack
EPS = 2.0**-52


def gaussian(seed, d, n, size=1.0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * size / math.sqrt(d), rng.standard_normal((d, n)) / math.sqrt(n)


def planted(seed, d, n, size=None, skip=None):
    """Gaussian weights with ``W_down[:,S] W_up[S,:] = −A`` for a random ``S`` (``|S| = size``)."""
    rng = np.random.default_rng(seed)
    size = d if size is None else size
    U, D = gaussian(seed, d, n)
    S = np.sort(rng.permutation(n)[:size])
    A = np.eye(d) if skip is None else skip
    P = np.linalg.pinv(U[S])
    Z = rng.standard_normal((d, size)) / math.sqrt(size)
    D[:, S] = -A @ P + Z @ (np.eye(size) - U[S] @ P)
    return U, D, A, S


def exact_dual(U, D, A, Z):
    """(D) of the module docstring in exact rationals, with ‖Z‖_F exact as a square root bound."""
    F = np.vectorize(Fraction, otypes=[object])
    u, dd, a, z = F(U), F(D), F(A), F(Z)
    zi = [dd[:, i] @ z @ u[i] for i in range(U.shape[0])]
    za = sum((z * a).ravel())
    num = max(za + sum(min(v, 0) for v in zi), -za - sum(max(v, 0) for v in zi))
    return float(num) / math.sqrt(float(sum((z * z).ravel())))


def exact_miss(U, D, A, S):
    F = np.vectorize(Fraction, otypes=[object])
    R = F(D[:, S]) @ F(U[S]) + F(A)
    return math.sqrt(float(sum((R * R).ravel())))


def test_dual_lower_is_below_its_exact_value_and_close():
    for seed in range(5):
        U, D = gaussian(seed, 3, 7, size=4.0)
        A = np.eye(3)
        Z = np.random.default_rng(seed + 50).standard_normal((3, 3))
        for Zt in (A, Z):
            got, want = screen.dual_lower(U, D, A, Zt), exact_dual(U, D, A, Zt)
            assert got <= max(want, 0.0)
            assert got >= max(want, 0.0) - 1e-12 * (1 + abs(want))


def test_trace_test_decides_gaussian_blocks():
    U, D = gaussian(0, 32, 128)
    A = np.eye(32)
    tau = wide_tau(U, D, A)
    out = screen.screen(U, D, A, tau=tau, rtol=RTOL)
    assert (out.status, out.method) == ("absent", "trace")
    assert out.lower > 0.8 * math.sqrt(32) and out.upper >= out.lower
    assert out.failed == ()


def wide_tau(U, D, A, rtol=RTOL):
    """Rule (★)'s ``τ`` as the wide path makes it: from the one pass's norm sum."""
    return threshold_of(U, D, A, rtol, nu=screen.norm_sum(U, D))


def test_the_wide_threshold_bounds_the_gram_paths():
    U, D = gaussian(1, 5, 20, size=3.0)
    A = np.random.default_rng(2).standard_normal((5, 5))
    r = RTOL + 4 * 21 * 2.0**-53 / (1 - 21 * 2.0**-53)
    assert wide_tau(U, D, A) >= threshold_of(U, D, A, RTOL) >= r * np.linalg.norm(np.abs(D) @ np.abs(U) + np.abs(A))


@pytest.mark.parametrize("size", [1.0, 8.0, 30.0])
def test_lower_bound_below_the_best_set(size):
    """Against the exact minimum over all 2^n sets (n = 10): lower <= min <= upper."""
    d, n = 3, 10
    for seed in range(3):
        U, D = gaussian(seed, d, n, size=size)
        A = np.eye(d)
        lower, upper, S, _, witness = screen.box_bounds(U, D, A, steps=6)
        sets = [list(m) for k in range(n + 1) for m in itertools.combinations(range(n), k)]
        best = min(sets, key=lambda m: np.linalg.norm(D[:, m] @ U[m] + A))  # float64 argmin ...
        assert lower <= exact_miss(U, D, A, best) <= upper  # ... its miss exact
        assert exact_miss(U, D, A, S) <= upper
        assert screen.dual_lower(U, D, A, witness[0]) == lower  # the witness (Z, c) returned is the one that bounds


def test_frank_wolfe_decides_when_the_trace_test_cannot():
    U, D = gaussian(3, 8, 32, size=40.0)
    A = np.eye(8)
    assert screen.dual_lower(U, D, A, A) == 0.0  # large weights: the trace test fails
    out = screen.screen(U, D, A, tau=wide_tau(U, D, A), rtol=RTOL, steps=5)
    assert (out.status, out.method) == ("absent", "frank-wolfe")


@pytest.mark.parametrize("d,n", [(2, 6), (4, 16), (8, 40), (16, 64)])
def test_planted_sets_are_found(d, n):
    for seed in range(4):
        U, D, A, S = planted(seed, d, n)
        out = screen.screen(U, D, A, tau=wide_tau(U, D, A), rtol=RTOL)
        assert out.status == "found" and out.method == "planted"
        assert out.S.tolist() == S.tolist() and out.check.accepted
        assert out.check.miss_frobenius >= exact_miss(U, D, A, S)


def test_planted_with_a_matrix_skip():
    rng = np.random.default_rng(7)
    A = np.eye(6) + 0.3 * rng.standard_normal((6, 6))
    U, D, A, S = planted(7, 6, 24, skip=A)
    out = screen.screen(U, D, A, tau=wide_tau(U, D, A), rtol=RTOL)
    assert out.status == "found" and out.S.tolist() == S.tolist()


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    d=st.integers(2, 6),
    extra=st.integers(0, 3),
    more=st.integers(0, 12),
    exps=st.lists(st.integers(-400, 400), min_size=30, max_size=30),
)
def test_never_claims_absence_for_an_absorbable_block(seed, d, extra, more, exps):
    """Planted |S| in d..d+3 (pseudo-inverse plus a null-space part), units rescaled by powers of two
    up to 2^±400 (exact, changes no M_i): never "absent", and the bound never exceeds S's miss."""
    n = d + extra + more
    U, D, A, S = planted(seed, d, n, size=d + extra)
    k = np.asarray(exps[:n])
    U, D = np.ldexp(U, k[:, None]), np.ldexp(D, -k[None, :])
    miss = exact_miss(U, D, A, S)
    tau = wide_tau(U, D, A)
    out = screen.screen(U, D, A, tau=tau, rtol=RTOL, steps=3)
    assert out.status != "absent"
    assert out.lower <= miss
    assert miss <= tau  # the planted set is within the rule's reach, so absence would be a lie


def test_hypotheses_find_parallel_rows_at_any_scale():
    U, D = gaussian(4, 5, 40)
    U[7] = -8.0 * U[2]
    U[30] = U[11] * 2.0**-540  # tiny entries (about 1e-163): products would underflow
    failed, checked = hyp.blockwise(U, D)
    assert failed == ("rows of W_up are parallel: pairs [(2, 7), (11, 30)]",)
    assert "exactly" in checked
    U[7] = -8.0 * U[2] + 1e-12  # near-parallel is not parallel
    U[30] = U[11] * 2.0**-540
    U[30, 0] = np.nextafter(U[30, 0], 1.0)
    assert hyp.blockwise(U, D)[0] == ()


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 10**6),
    e=st.integers(960, 1010),
    shift=st.integers(-3, 3),
    sign=st.sampled_from([1.0, -1.0]),
    pair=st.tuples(st.integers(0, 2047), st.integers(0, 2047)).filter(lambda p: p[0] != p[1]),
)
def test_exactly_parallel_rows_at_extreme_scale_are_degenerate_on_the_wide_path(seed, e, shift, sign, pair):
    """n = 2048 (the entry points' wide path): rows at scale 2^e, e up to 1010, whose float64 products
    overflow (inf − inf = nan) and whose rescaling is inexact (a subnormal entry): an exactly parallel
    pair is found by the exact test, so the answer is ``degenerate``, never ``not_absorbable``."""
    from absorbjax import condition, models

    d, n = 3, wide.SCREEN_MIN_N
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((n, d)) / math.sqrt(d)
    D = rng.standard_normal((d, n)) / n  # small enough for the trace test to decide
    i, j = pair
    U[i] = np.ldexp(U[i], e - max(shift, 0))
    U[i, 2] = 2.0**-1070  # rescaling this row would round: the balancing keeps its stored scale
    U[j] = sign * np.ldexp(U[i], shift)  # exactly parallel (a power-of-two multiple)
    D[:, [i, j]] = np.ldexp(D[:, [i, j]], -e)
    failed, _ = hyp.blockwise(U, D)
    assert failed == (f"rows of W_up are parallel: pairs [{tuple(sorted(pair))}]",)
    cert = condition.find_absorbing_set(models.MLPParams(U, D), "relu")
    assert cert.status == "degenerate", cert.reason


def decoyed(seed, d, kinds, n=2048, skip=None):
    """A planted ``S`` (``|S| = d``) at width ``n`` with decoys: for each kind and each unit ``i`` of
    ``S`` one more unit, ``"dup"`` (``W_up[i,:]``, ``W_down[:,i]`` perturbed by a relative 1e-9),
    ``"tied"`` (a dup rescaled so that its ``b_j`` equals ``b_i`` in float64), ``"sign"`` (both
    negated: the same ``M_i``) or ``"scale"`` (``3·2^k`` and its inverse)."""
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((n, d)) / math.sqrt(d)
    D = rng.standard_normal((d, n)) / n  # far from absorbing, except through S
    A = np.eye(d) if skip is None else skip
    S = np.sort(rng.permutation(n)[:d])
    D[:, S] = -A @ np.linalg.inv(U[S])
    free = rng.permutation(np.setdiff1d(np.arange(n), S))
    for k, (kind, i) in enumerate((kind, i) for kind in kinds for i in S):
        j = free[k]
        if kind in ("dup", "tied"):
            U[j] = U[i] * (1 + 1e-9 * rng.standard_normal(d))
            D[:, j] = D[:, i] * (1 + 1e-9 * rng.standard_normal(d))
            if kind == "tied":
                Ai = np.linalg.solve(A, np.eye(d))
                D[:, j] *= (U[i] @ Ai @ D[:, i]) / (U[j] @ Ai @ D[:, j])
        elif kind == "sign":
            U[j], D[:, j] = -U[i], -D[:, i]
        else:
            t = 3 * 2.0 ** int(rng.integers(-20, 20))
            U[j], D[:, j] = U[i] * t, D[:, i] / t
    return U, D, A, S


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(
    seed=st.integers(0, 10**6),
    d=st.integers(2, 12),
    kinds=st.lists(st.sampled_from(["dup", "tied", "sign", "scale"]), min_size=1, max_size=3),
    skip=st.booleans(),
)
def test_planted_search_is_robust_to_decoys(seed, d, kinds, skip):
    """n = 2048: near-duplicates (relative 1e-9, also with b_j tied to b_i), sign-flipped and
    rescaled copies of S's units do not hide S: the entry point answers ``absorbable`` with a set
    whose exact miss is within its miss_bound; without exact copies that set is the planted S."""
    from absorbjax import condition, models

    A = None
    if skip:
        A = np.eye(d) + 0.2 * np.random.default_rng(seed + 1).standard_normal((d, d))
    U, D, A, S = decoyed(seed, d, kinds, skip=A)
    cert = condition.find_absorbing_set(models.MLPParams(U, D), "relu", skip=A)  # the default limit: load-proof
    assert cert.status == "absorbable" and cert.method == "planted", cert.reason
    assert exact_miss(U, D, A, cert.S) <= cert.promise.miss_bound
    if set(kinds) <= {"dup", "tied"}:
        assert cert.S.tolist() == S.tolist()


def test_hypotheses_zero_rows_and_columns():
    U, D = gaussian(5, 3, 9)
    U[4] = 0.0
    D[:, 6] = 0.0
    failed, _ = hyp.blockwise(U, D)
    assert "rows of W_up are zero: [4]" in failed and "columns of W_down are zero: [6]" in failed


def test_screen_check_rejects_a_perturbed_set():
    U, D, A, S = planted(9, 4, 12)
    assert screen.screen_check(U, D, A, S, RTOL).accepted
    D2 = D.copy()
    D2[0, S[0]] *= 1 + 1e-9
    chk = screen.screen_check(U, D2, A, S, RTOL)
    assert not chk.accepted and chk.miss_frobenius >= exact_miss(U, D2, A, S)


def test_results_have_no_truth_value():
    U, D = gaussian(0, 4, 16)
    out = screen.screen(U, D, np.eye(4), tau=1e-9, rtol=RTOL)
    with pytest.raises(TypeError, match="status"):
        bool(out)
    with pytest.raises(TypeError, match="accepted"):
        bool(screen.screen_check(U, D, np.eye(4), [0], RTOL))


# ---------------------------------------------------------------------------------------------
# The entry points' path (condition._wide)


@pytest.fixture
def screen_all(monkeypatch):
    """The entry points take the O(n d²) screen at every width (as they do from SCREEN_MIN_N)."""
    monkeypatch.setattr(wide, "SCREEN_MIN_N", 1)


def test_large_certificate_statuses(screen_all):
    from absorbjax import condition, models

    U, D = gaussian(11, 8, 32)
    cert = condition.find_absorbing_set(models.MLPParams(U, D), "relu")
    assert (cert.status, cert.method, cert.rounding.within, cert.relaxation) == ("not_absorbable", "trace", "n/a", None)
    assert "Thm 8" in cert.reason and cert.lower_bound > cert.threshold
    silu = condition.find_absorbing_set(models.MLPParams(U, D), "silu")
    assert silu.status == "not_absorbable" and silu.theorem == "Thm 8 via the ray limit"
    biased = condition.find_absorbing_set(models.MLPParams(U, D), "gelu", bias=np.ones(32))
    assert biased.status == "not_absorbable" and biased.theorem == "Thm 8 via the ray limit"
    f32 = condition.find_absorbing_set(models.MLPParams(U.astype(np.float32), D.astype(np.float32)))
    assert f32.rounding.within == "no" and f32.rounding.rtol > f32.rtol
    U[5] = 0.5 * U[3]
    assert condition.find_absorbing_set(models.MLPParams(U, D), "relu").status == "degenerate"


def test_large_certificate_absorbable_and_distance(screen_all):
    from absorbjax import condition, models

    U, D, A, S = planted(12, 6, 30)
    cert = condition.find_absorbing_set(models.MLPParams(U, D), "gelu", skip=A)
    assert cert.status == "absorbable" and cert.S.tolist() == S.tolist() and cert.promise.miss_bound < 1e-6
    dist = wide.distance_bounds(U, D, A, cert)
    assert dist.lower == 0.0 and exact_miss(U, D, A, S) / np.linalg.norm(A) <= dist.upper < 1e-12


def test_large_distance_brackets_the_best_set(screen_all):
    from absorbjax import condition, models

    d, n = 3, 10
    U, D = gaussian(13, d, n, size=3.0)
    A = np.eye(d)
    cert = condition.find_absorbing_set(models.MLPParams(U, D))
    dist = wide.distance_bounds(U, D, A, cert, steps=4)
    sets = [list(m) for k in range(n + 1) for m in itertools.combinations(range(n), k)]
    best = min(sets, key=lambda m: np.linalg.norm(D[:, m] @ U[m] + A))
    assert dist.lower <= exact_miss(U, D, A, best) / math.sqrt(d) <= dist.upper
    assert exact_miss(U, D, A, dist.S.tolist()) / math.sqrt(d) <= dist.upper


def test_undecided_wide_blocks_are_not_sent_to_the_gram_path(monkeypatch, screen_all):
    from absorbjax import condition, models

    U, D = gaussian(14, 4, 16, size=1.0)
    from absorbjax.condition._rule import Rule

    monkeypatch.setattr(Rule, "threshold", lambda *args, **kwargs: 1e9)  # nothing can be ruled out

    assert wide.wide_screen(U, D, Rule.of(np.eye(4), RTOL)) is None
    monkeypatch.setattr(wide, "GRAM_MAX_N", 8)
    cert = condition.find_absorbing_set(models.MLPParams(U, D))
    assert cert.status == "undecided" and "too wide" in cert.reason


def test_entry_points_screen_wide_blocks():
    """find_absorbing_set and distance take the screen from n = SCREEN_MIN_N (no n×n matrix)."""
    from absorbjax import condition, models

    d, n = 64, wide.SCREEN_MIN_N
    U, D = gaussian(15, d, n)
    cert = condition.find_absorbing_set(models.MLPParams(U, D), "relu")
    assert (cert.status, cert.method, cert.relaxation) == ("not_absorbable", "trace", None)
    dist = condition.distance(models.MLPParams(U, D), search=False)  # the screen's own bounds
    assert dist.method == "frank-wolfe" and 0.8 < dist.lower <= dist.upper <= 1 + 1e-12
    searched = condition.distance(models.MLPParams(U, D))  # the search over S starts from them
    assert searched.method == "greedy" and dist.lower <= searched.upper < dist.upper
    Up, Dp, _, S = planted(16, d, n)
    cert = condition.find_absorbing_set(models.MLPParams(Up, Dp))
    assert cert.status == "absorbable" and cert.S.tolist() == S.tolist()


def test_wide_path_decides_parallel_rows_with_distinct_biases():
    """n = SCREEN_MIN_N: parallel rows whose kink hyperplanes w·x + b = 0 differ (pairwise
    non-proportional (w_i, b_i), checked blockwise) are decided by the kink theorem for relu and
    leaky_relu, as on the Gram path; the same hyperplane, or gelu (no kink), stays degenerate."""
    from absorbjax import activations, condition, models

    d, n = 64, wide.SCREEN_MIN_N
    U, D = gaussian(17, d, n)
    U[5], U[1700], U[9] = 2.0 * U[3], -0.5 * U[3], 2.0**-40 * U[8]  # rows at 3, 5, 1700 on one line
    b = np.random.default_rng(17).normal(size=n)
    p = models.MLPParams(U.astype(np.float32), D.astype(np.float32))
    for name in ("relu", "leaky_relu"):
        cert = condition.find_absorbing_set(p, name, bias=b)
        assert (cert.status, cert.theorem, cert.relaxation) == ("not_absorbable", activations.KINK_THEOREM, None)
        assert "(3, 5)" in cert.reason and "distinct kink hyperplanes" in cert.reason
    assert condition.find_absorbing_set(p, "gelu", bias=b).status == "degenerate"
    b[1700] = -0.5 * b[3]  # (w, b) at 1700 proportional to (w, b) at 3: one hyperplane
    cert = condition.find_absorbing_set(p, "relu", bias=b)
    assert (cert.status, cert.relaxation) == ("degenerate", None)


def test_benchmark_case_and_table():
    """benchmarks/bench_scale.py: one case in this process (its numbers are not judged here) and
    the markdown table of docs/benchmarks/screen.md from its record."""
    import importlib.util
    import sys
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(folder))
    try:
        spec = importlib.util.spec_from_file_location("bench_scale", folder / "bench_scale.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(folder))
    row = bench.run_case({"task": "decide", "act": "relu", "d": 512, "n": 2048, "seed": 0})
    assert row["status"] == "not_absorbable" and row["peak_bytes"] > row["weight_bytes"] > 0
    rows = [row, {**row, "d": 1024, "n": 4096, "cpu": 4 * row["cpu"]}]
    text = bench.table({"results": {"cases": rows}})
    assert f"| decide | relu | 512 × 2048 | not_absorbable ({row['method']};" in text
    assert "| decide | 512, 1024 | 2.00 |" in text


def test_wide_path_odd_slope_and_statuses():
    """n = 2048, leaky_relu(0.2) (c = 1.2): planted c·W_down[:,S] W_up[S,:] = −I is found by the screen and
    absorbable, its distance near 0; without the planted set the distance brackets a miss far from 0.
    Statuses are plain strings in records (the enumeration stays inside the decision)."""
    import json

    from absorbjax import condition, models

    rng = np.random.default_rng(3)
    d, n = 8, wide.SCREEN_MIN_N
    U, D = rng.standard_normal((n, d)) / math.sqrt(d), rng.standard_normal((d, n)) / n
    far = models.MLPParams(U, D.copy())
    D[:, :d] = -np.linalg.inv(U[:d]) / 1.2
    cert = condition.find_absorbing_set(models.MLPParams(U, D), "leaky_relu(0.2)")
    assert (cert.status, cert.method, cert.S.tolist()) == ("absorbable", "planted", list(range(d)))
    assert condition.find_absorbing_set(models.MLPParams(U, D), "relu").status != "absorbable"  # c = 1: no
    assert condition.distance(models.MLPParams(U, D), "leaky_relu(0.2)").upper < 1e-12
    dist = condition.distance(far, "leaky_relu(0.2)")
    assert 0.5 < dist.lower <= dist.upper and dist.certificate.status == "not_absorbable"
    assert tuple(condition.Status) == ("absorbable", "not_absorbable", "degenerate", "undecided")
    assert (
        cert.status is condition.Status.ABSORBABLE and json.loads(json.dumps(cert.to_dict()))["status"] == "absorbable"
    )
