"""The decision's options: one :class:`condition.Decision` taken by ``find_absorbing_set``,
``find_absorbing_sets`` and ``distance``, its fields by keyword as a shorthand."""

import dataclasses
import functools
import inspect

import jax
import numpy as np
import pytest

from absorbjax import condition, models
from absorbjax.models import MLPParams

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)


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
    dist = condition.distance(params, method="exhaustive", skip_rtol=1e-3, rtol=1e-10)
    cert = condition.find_absorbing_set(params, method="exhaustive", skip_rtol=1e-3, rtol=1e-10)
    assert dist.certificate.method == cert.method == "exhaustive"
    assert dist.certificate.skip_rtol == 1e-3 and dist.certificate.rtol == 1e-10
    assert dist.S.tolist() == S.tolist() == cert.S.tolist() and dist.method == "exact"
    biased = condition.distance(gaussian(3, 6), "gelu", bias=np.linspace(-1.0, 1.0, 6))
    assert biased.certificate.biased and biased.certificate.theorem == "Thm 8 via the ray limit"
    assert inspect.signature(condition.distance).parameters["decision"].default.time_limit == 10.0
    given = condition.distance(params, decision=condition.Decision(method="exhaustive", skip_rtol=1e-3, rtol=1e-10))
    clock = {"seconds": 0, "timings": {}}
    assert given.certificate.to_dict() | clock == dist.certificate.to_dict() | clock
    with pytest.raises(TypeError, match="unexpected keyword argument 'tol'"):
        condition.distance(params, tol=1e-3)


def test_the_decisions_options_are_one_checked_decision():
    """``find_absorbing_set``, ``find_absorbing_sets`` and ``distance`` take one :class:`Decision`
    (its defaults shown by ``help()``), built by keyword and checked when built; its fields by
    keyword are a shorthand for it, a keyword that is none of them a ``TypeError`` naming them."""
    params, S = planted(3, 8, 3)
    fields = [f.name for f in dataclasses.fields(condition.Decision)]
    assert fields == ["skip", "bias", "out_bias", "rtol", "skip_rtol", "method", "time_limit", "narrow"]
    default = condition.Decision()
    assert (default.rtol, default.skip_rtol, default.time_limit) == (condition.DEFAULT_RTOL, 1e-6, 60.0)
    assert condition.Decision(rtol=None, skip_rtol=None).rtol == condition.DEFAULT_RTOL  # None: the default
    for f in (condition.find_absorbing_set, condition.find_absorbing_sets, condition.distance):
        shown = inspect.signature(f).parameters["decision"].default
        assert isinstance(shown, condition.Decision) and "time_limit=" in repr(shown)
        with pytest.raises(TypeError, match=f"{f.__name__}\\(\\) got an unexpected keyword argument 'tol' .*rtol"):
            f(params, tol=1e-3)
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
        with pytest.raises(ValueError, match=match):
            condition.find_absorbing_set(params, **bad)
    short = condition.find_absorbing_set(params, "relu", method="exhaustive", rtol=1e-10)
    built = condition.find_absorbing_set(params, "relu", decision=condition.Decision(method="exhaustive", rtol=1e-10))
    assert (short.method, short.rtol, short.S.tolist()) == (built.method, built.rtol, built.S.tolist())
    replaced = condition.find_absorbing_set(params, decision=condition.Decision(method="milp"), method="exhaustive")
    assert replaced.method == "exhaustive"  # the shorthand replaces the decision's field
