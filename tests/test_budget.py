"""Issue 56: ``time_limit`` bounds the whole decision (``within_rounding`` included), and the
distance's search stops on a deterministic work budget, not on wall time."""

import time
import types

import jax
import numpy as np
import pytest

from absorbjax import condition, models, testing
from absorbjax.condition import _closest, _search


def _planted32(d: int, n: int, seed: int = 0) -> models.MLPParams:
    """A planted relu block stored in float32: not absorbable exactly, within rounding of one that is,
    and too wide for the enumeration, so both searches (status and ``within_rounding``) reach HiGHS."""
    with jax.enable_x64(True):
        params, _ = models.planted("relu", d, n, key=jax.random.key(seed))
    return models.MLPParams(np.asarray(params.up, np.float32), np.asarray(params.down, np.float32))


def _same(a, b) -> bool:
    return (a.lower, a.upper, a.S.tolist(), a.method, a.relaxation, a.box, a.stopped) == (
        b.lower,
        b.upper,
        b.S.tolist(),
        b.method,
        b.relaxation,
        b.box,
        b.stopped,
    )


@pytest.mark.slow
def test_the_time_limit_bounds_the_whole_decision(monkeypatch):
    """Before: the limit was spent once for the status and again for ``within_rounding``
    (``3 s`` took ``9.8 s``); now one deadline covers both: the MILP time limits handed out, status
    and ``within_rounding`` together, add up to at most ``time_limit``. Counted, not timed (the
    wall times are in the research log)."""
    from absorbjax.condition import _gram_path

    given, real = [], _gram_path.milp

    def recording(*args):
        given.append(args[-1])  # milp(U, D, rule, rel, threshold, time_limit)
        return real(*args)

    monkeypatch.setattr(_gram_path, "milp", recording)
    limit = 3.0
    cert = condition.find_absorbing_set(_planted32(8, 512), "relu", decision=condition.Decision(time_limit=limit))
    assert given and sum(given) <= limit, given
    assert cert.status == "undecided" and cert.rounding.within == "undecided"
    assert "time limit" in cert.reason and "time limit" in cert.rounding.reason


@pytest.mark.slow
def test_no_time_left_gives_undecided_never_a_guess():
    """A deadline already past: neither HiGHS nor the enumeration starts; the relaxations still
    decide what they can (here nothing), and both answers say why."""
    from absorbjax.condition._block import read_block
    from absorbjax.condition._decide import decide

    params = _planted32(4, 20)
    decision = condition.Decision()
    cert, _ = decide(read_block(params, "relu"), decision, deadline=time.perf_counter() - 1)
    if cert.status == "undecided":  # the relaxations did not decide it
        assert "time limit" in cert.reason or "no time left" in cert.reason
    assert cert.rounding.within in ("undecided", "yes", "no")
    # with time, the same block is decided in full
    full = condition.find_absorbing_set(params, "relu")
    assert full.rounding.within == "yes"


def test_budget_stops_deterministically():
    b = _search.Budget(10)
    assert b.spend(4) and b.spend(6) and not b.spend(1) and b.stopped == "budget" and b.used == 10
    late = _search.Budget(100, deadline=time.perf_counter() - 1)
    assert not late.spend(1) and late.stopped == "time_limit"
    both = _search.Budget(1, deadline=time.perf_counter() - 1)  # both exhausted: the budget is named
    assert not both.spend(5) and both.stopped == "budget"


def test_descend_on_a_work_budget_is_the_same_on_a_slow_machine(monkeypatch):
    """The same budget gives the same set however slowly each step runs; a smaller budget stops
    earlier, on the budget, again reproducibly."""
    from test_upper import _anti_aligned

    p = _anti_aligned(5, 32, 600)
    U, D, A = p.up, p.down, np.eye(32)
    full = _search.Budget(1e12)
    m, f = _search.descend(U, D, A, np.zeros(600, bool), budget=full)
    assert full.stopped == "" and m.any()
    cut = full.used / 3
    runs = [_search.descend(U, D, A, np.zeros(600, bool), budget=_search.Budget(cut)) for _ in range(2)]
    column = _search._column
    monkeypatch.setattr(_search, "_column", lambda *a: (time.sleep(2e-4), column(*a))[1])
    slow = _search.Budget(cut, deadline=time.perf_counter() + 60)
    runs.append(_search.descend(U, D, A, np.zeros(600, bool), budget=slow))
    assert slow.stopped == "budget"
    assert all(np.array_equal(r[0], runs[0][0]) and r[1] == runs[0][1] for r in runs)
    assert runs[0][1] > f  # stopped before the local minimum


@pytest.mark.slow
def test_distance_is_reproducible_under_load(monkeypatch):
    """Issue 56: ``distance`` twice on the same weights gave different ``upper`` and ``|S|`` (the
    search stopped on wall time). A relu Gaussian ``d = 8, n = 256`` (its MILP decides well within
    the limit, so no stage is cut): a second run on a clock that runs four times faster, with every
    Gram column slowed down, gives the same numbers."""
    params = testing.gaussian(8, 256)
    first = condition.distance(params, "relu", decision=condition.Decision(time_limit=30.0))
    assert first.stopped == "" and first.method == "greedy"  # the search moved and converged
    real, t0 = time.perf_counter, time.perf_counter()
    fast = types.SimpleNamespace(perf_counter=lambda: t0 + 4 * (real() - t0))
    monkeypatch.setattr(_search, "time", fast)
    monkeypatch.setattr(_closest, "time", fast)
    column = _search._column
    monkeypatch.setattr(_search, "_column", lambda *a: (time.sleep(1e-4), column(*a))[1])
    second = condition.distance(params, "relu", decision=condition.Decision(time_limit=30.0))
    assert _same(first, second), (first, second)


def test_distance_budget_and_safety_stop_are_reported(monkeypatch):
    """A small ``work`` stops the search on the budget (reproducibly); the wall-clock safety stop,
    when it is what ends the search, is reported as such."""
    params = testing.gaussian(8, 256)
    full = condition.distance(params, "relu", decision=condition.Decision(time_limit=5.0))
    assert full.stopped == "" and full.method == "greedy"
    small = [
        condition.distance(params, "relu", work=2e5, decision=condition.Decision(time_limit=5.0)) for _ in range(2)
    ]
    assert small[0].stopped == "budget" and _same(*small)
    assert small[0].upper >= full.upper
    clock, base = iter(range(0, 10**9, 1000)), time.perf_counter()  # the search's clock: 1000 s a reading
    monkeypatch.setattr(_search, "time", types.SimpleNamespace(perf_counter=lambda: base + float(next(clock))))
    late = condition.distance(params, "relu", decision=condition.Decision(time_limit=5.0))
    assert late.stopped == "time_limit" and "time limit" in repr(late)
    assert late.lower == full.lower  # the certified bound does not depend on the search
    with pytest.raises(ValueError, match="work"):
        condition.distance(params, "relu", work=0)
