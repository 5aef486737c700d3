"""Issue 57: ``distance``'s ``time_limit`` is one deadline for the whole call (the decision, the box
relaxation, the local searches and the search), and what it cuts only weakens the bounds.

Counted and observed, never timed: a deadline already past (``time_limit=1e-9``) or a clock that
jumps, with the stages that must not run replaced by ones that raise, and the bounds checked
against brute force over all ``2^n`` sets."""

import dataclasses
import json
import math
import time
import types

import numpy as np
import pytest

from absorbjax import condition, models, testing
from absorbjax.condition import _closest, _search, _wide

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)


def _brute_min(params: models.MLPParams) -> float:
    """``min_S ‖W_down[:,S] W_up[S,:] + I‖_F / √d`` over all ``2^n`` sets (float64, ``n ≤ 18``)."""
    U, D = np.asarray(params.up), np.asarray(params.down)
    n, d = U.shape
    M = np.einsum("ki,ij->ikj", D, U).reshape(n, d * d)
    best = math.inf
    for lo in range(0, 2**n, 2**16):
        idx = np.arange(lo, min(lo + 2**16, 2**n))
        P = ((idx[:, None] >> np.arange(n)) & 1).astype(float) @ M + np.eye(d).ravel()
        best = min(best, float(np.sqrt((P * P).sum(axis=1)).min()))
    return best / math.sqrt(d)


def _sound(dist, params) -> None:
    """``lower ≤`` the true minimum ``≤ upper``, and ``upper`` bounds the exact miss of ``S``."""
    d = np.asarray(params.up).shape[1]
    best = _brute_min(params)
    assert 0.0 <= dist.lower <= best * (1 + 1e-12), (dist.lower, best)
    assert best <= dist.upper * (1 + 1e-12) and dist.lower <= dist.upper
    assert testing.frobenius(testing.exact_miss(params, dist.S)) / math.sqrt(d) <= dist.upper * (1 + 1e-12)


def _same(a, b) -> bool:
    keys = ("lower", "upper", "method", "relaxation", "box", "stopped")
    return all(getattr(a, k) == getattr(b, k) for k in keys) and np.array_equal(a.S, b.S)


def _refuse(name):
    def refused(*args, **kwargs):
        raise AssertionError(f"{name} ran after the deadline")

    return refused


@pytest.fixture
def no_late_stages(monkeypatch):
    """The box relaxation and any step of the local search (the single flips and the swaps) raise."""
    monkeypatch.setattr(_closest, "box_relaxation", _refuse("the box relaxation"))
    monkeypatch.setattr(_search, "_per_unit", _refuse("the search"))


@pytest.mark.parametrize("d,n", [(4, 12), (4, 18), (5, 18)])
def test_a_past_deadline_runs_no_late_stage_and_the_bounds_hold(no_late_stages, d, n):
    """``time_limit=1e-9``: the deadline has passed when the decision returns, so neither the box
    relaxation nor a local search nor a search step runs; ``box = 0``, the call says it was cut,
    and the bounds still hold against all ``2^n`` sets (``n ≤ 16``: the exact minimum all the same)."""
    params = testing.gaussian(d, n)
    dist = condition.distance(params, "relu", decision=condition.Decision(time_limit=1e-9))
    assert dist.stopped == "time_limit" and "time limit" in repr(dist)
    assert dist.box == 0.0 and dist.lower == dist.relaxation
    assert dist.method == ("exhaustive" if n <= 16 else "local")
    _sound(dist, params)
    if n <= 16:
        assert dist.upper <= _brute_min(params) * (1 + 1e-12)


def test_a_cut_search_keeps_the_best_start():
    """With no local search run, ``S`` is the best of ``∅`` and the roundings of the real
    relaxation's solution on the Gram form: never worse than ``∅`` (which attains 1)."""
    params = testing.gaussian(4, 18, seed=1)
    dist = condition.distance(params, "relu", decision=condition.Decision(time_limit=1e-9))
    assert dist.stopped == "time_limit" and dist.upper <= 1 + 1e-12
    _sound(dist, params)


def test_the_stages_after_the_decision_share_its_deadline(monkeypatch):
    """The decision gets its time (the same certificate as with the clock left alone); a clock that
    jumps past the deadline once it returns cuts the box relaxation, the local searches and the
    search, which all read that one deadline (none gets a fresh ``time_limit``)."""
    params = testing.gaussian(5, 18)
    full = condition.distance(params, "relu", decision=condition.Decision(time_limit=30.0))
    assert full.stopped == "" and full.box > full.relaxation > 0
    real, shift = time.perf_counter, [0.0]
    clock = types.SimpleNamespace(perf_counter=lambda: real() + shift[0])
    monkeypatch.setattr(_closest, "time", clock)
    monkeypatch.setattr(_search, "time", clock)
    decide = _closest.decide

    def decided(*args, **kwargs):
        out = decide(*args, **kwargs)
        shift[0] = 1e6  # the decision returns; then the clock jumps far past any time_limit
        return out

    monkeypatch.setattr(_closest, "decide", decided)
    monkeypatch.setattr(_closest, "box_relaxation", _refuse("box_relaxation"))
    monkeypatch.setattr(_search, "_per_unit", _refuse("the search"))
    cut = condition.distance(params, "relu", decision=condition.Decision(time_limit=30.0))
    assert cut.certificate.status == full.certificate.status == "not_absorbable"
    assert cut.stopped == "time_limit" and cut.box == 0.0
    assert cut.relaxation == full.relaxation and cut.lower == full.relaxation < full.lower  # weaker, still certified
    _sound(cut, params)


def test_box_steps_from_the_time_left(monkeypatch):
    """The box relaxation's steps: all of ``BOX_ITERS`` when they fit at one product with ``G``
    each, fewer when they do not, none (skipped) when not even ``BOX_FIXED`` products fit or the
    deadline has passed. A clock that advances one tick (2⁻¹⁰ s, exact in binary) per reading
    makes each timed product one tick."""
    tick = 2.0**-10
    ticks = iter(range(10**6))
    monkeypatch.setattr(_closest, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks) * tick))
    rel = types.SimpleNamespace(G=np.eye(3), c=np.array([0.5, 2.0, np.nan]))

    def iters(seconds: float) -> int:
        return _closest._box_iters(rel, next(ticks) * tick + seconds)

    assert iters(100.0) == _closest.BOX_ITERS
    # 1024 ticks from now: 8 readings (this one, the first look, three timed products) before the
    # time left is read again, which then pays for 1016 products
    assert iters(1024 * tick) == 1016 - _closest.BOX_FIXED
    assert iters(30 * tick) == 0 and iters(-1.0) == 0


def test_fewer_box_steps_weaken_the_bound_never_break_it(monkeypatch):
    """The box relaxation given 5 steps (as if the time left allowed no more): a valid lower bound,
    and the call says it was cut."""
    params = testing.gaussian(5, 18)
    given, real = [], _closest.box_relaxation

    def recording(*args, **kwargs):
        given.append(kwargs.get("iters"))
        return real(*args, **kwargs)

    monkeypatch.setattr(_closest, "box_relaxation", recording)
    full = condition.distance(params, "relu")
    assert given == [_closest.BOX_ITERS] and full.stopped == ""  # today's default: 3000 steps
    monkeypatch.setattr(_closest, "_box_iters", lambda rel, deadline: 5)
    short = condition.distance(params, "relu")
    assert given[-1] == 5 and short.stopped == "time_limit"
    assert short.relaxation == full.relaxation and short.lower >= short.relaxation
    _sound(short, params)


@pytest.mark.parametrize("d,n", [(4, 18), (8, 256)])
def test_a_generous_limit_changes_nothing(monkeypatch, d, n):
    """With time to spare every stage runs in full (the box relaxation's default steps, a local
    search from each of the seven starts) and two runs agree exactly."""
    params = testing.gaussian(d, n, seed=2)
    calls, real = [], _closest.descend
    monkeypatch.setattr(_closest, "descend", lambda *a, **k: (calls.append(k.get("swaps", True)), real(*a, **k))[1])
    first = condition.distance(params, "relu")
    assert first.stopped == "" and calls.count(False) == 7  # single flips from each start; then the swaps
    second = condition.distance(params, "relu")
    assert _same(first, second), (first, second)
    if n <= 18:
        _sound(first, params)


def test_the_wide_path_takes_no_frank_wolfe_step_past_the_deadline(monkeypatch):
    """A block decided by the ``O(n d²)`` screen (``n = 2048``, ``M_i = w_i w_iᵀ`` positive
    semidefinite: no ``S`` gets closer than ``∅``): with time, its Frank–Wolfe step is taken; past
    the deadline it is not (the trace test's bound), the search takes no step, and the call says so."""
    rng = np.random.default_rng(0)
    D = rng.normal(size=(2, 2048)) / np.sqrt(2048)
    params = models.MLPParams(D.T.copy(), D)
    steps, real = [], _wide.distance_bounds
    monkeypatch.setattr(_wide, "distance_bounds", lambda *a, **k: (steps.append(k.get("steps")), real(*a, **k))[1])
    full = condition.distance(params, "relu")
    assert steps == [None] and full.stopped == "" and full.certificate.status == "not_absorbable"
    monkeypatch.setattr(_search, "_per_unit", _refuse("the search"))
    late = condition.distance(params, "relu", decision=condition.Decision(time_limit=1e-9))
    assert steps[-1] == 0 and late.stopped == "time_limit"
    assert 0.0 <= late.lower <= 1.0 <= late.upper * (1 + 1e-12)  # ∅ is the closest set: exactly 1


def test_how_the_set_was_found_and_what_stopped_are_typed_words():
    """``Distance.method`` is a :class:`condition.FoundBy`, ``stopped`` a :class:`condition.Stopped`:
    each equals its plain word, which the records hold, and a word outside them is refused."""
    dist = condition.distance(testing.gaussian(3, 6))
    assert dist.method is condition.FoundBy.EXHAUSTIVE and dist.stopped is condition.Stopped.NOTHING
    assert json.loads(json.dumps(dist.to_dict()))["method"] == "exhaustive" and dist.stopped == ""
    with pytest.raises(ValueError, match="'nearest' is not a valid FoundBy"):
        dataclasses.replace(dist, method="nearest")
