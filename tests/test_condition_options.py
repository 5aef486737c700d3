"""The decision's options: one :class:`condition.Decision` taken by every entry point that decides
(``find_absorbing_set``, ``find_absorbing_sets``, ``distance``, ``min_extra_width``,
``weights.check``), the block's skip and biases as their own parameters, no keyword shorthand."""

import dataclasses
import functools
import inspect

import jax
import numpy as np
import pytest

from absorbjax import condition, models, weights
from absorbjax.models import MLPParams

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

ENTRY_POINTS = (
    condition.find_absorbing_set,
    condition.find_absorbing_sets,
    condition.distance,
    condition.min_extra_width,
)


@functools.cache
def planted(d, n, size):
    """``models.planted`` weights and their hidden ``S``."""
    return models.planted("relu", d, n, key=jax.random.key(100 * d + n + size), size=size)


def gaussian(d, n, seed=0):
    rng = np.random.default_rng(seed)
    return MLPParams(rng.standard_normal((n, d)), rng.standard_normal((d, n)))


def test_distance_decides_with_the_options_it_is_given():
    """``distance`` passes the decision's options on: its certificate is the decision they give."""
    params, S = planted(3, 8, 3)
    decision = condition.Decision(method="exhaustive", skip_rtol=1e-3, rtol=1e-10)
    dist = condition.distance(params, decision=decision)
    cert = condition.find_absorbing_set(params, decision=decision)
    assert dist.certificate.method == cert.method == "exhaustive"
    assert dist.certificate.promise.skip_rtol == 1e-3 and dist.certificate.rtol == 1e-10
    assert dist.S.tolist() == S.tolist() == cert.S.tolist() and dist.method == "exact"
    biased = condition.distance(gaussian(3, 6), "gelu", bias=np.linspace(-1.0, 1.0, 6))
    assert biased.certificate.biased and biased.certificate.theorem == "Thm 8 via the ray limit"


def test_the_decisions_options_are_one_checked_object_with_one_default_time_limit():
    """Every entry point that decides takes one :class:`Decision` (its defaults shown by
    ``help()``; the same 60 s everywhere), built by keyword and checked when built; a field by
    keyword is Python's own ``TypeError`` (no shorthand, so nothing overrides a field silently),
    and no signature hides parameters behind ``**``."""
    params, _ = planted(3, 8, 3)
    fields = [f.name for f in dataclasses.fields(condition.Decision)]
    assert fields == ["rtol", "skip_rtol", "method", "time_limit", "narrow"]
    default = condition.Decision()
    assert (default.rtol, default.skip_rtol, default.time_limit) == (condition.DEFAULT_RTOL, 1e-6, 60.0)
    assert condition.Decision(rtol=None, skip_rtol=None).rtol == condition.DEFAULT_RTOL  # None: the default
    for f in ENTRY_POINTS:
        signature = inspect.signature(f).parameters
        shown = signature["decision"].default
        assert isinstance(shown, condition.Decision) and shown.time_limit == 60.0 and "time_limit=" in repr(shown)
        assert "skip" in signature  # the block's own parameter
        with pytest.raises(TypeError, match=f"{f.__name__}\\(\\) got an unexpected keyword argument 'method'"):
            f(params, "relu", decision=condition.Decision(method="milp"), method="exhaustive")
    check = inspect.signature(weights.check).parameters
    assert "decision" in check  # no ``**kwargs`` anywhere: tests/test_api.py
    for bad, match in (
        ({"method": "simplex"}, "method must be one of"),
        ({"time_limit": 0}, "time_limit must be a positive"),
        ({"time_limit": True}, "time_limit must be a positive"),
        ({"rtol": 0.5}, "rtol must be in"),
        ({"skip_rtol": 1.0}, "skip_rtol must be a number"),
        ({"narrow": "yes"}, "narrow must be True or False"),
    ):
        with pytest.raises(ValueError, match=match):
            condition.Decision(**bad)
    built = condition.find_absorbing_set(params, "relu", decision=condition.Decision(method="exhaustive", rtol=1e-10))
    assert (built.method, built.rtol) == ("exhaustive", 1e-10)
