"""Each rigorous kernel of the decision lives in one place, and both paths (the Gram path for
``n < 2048`` and the ``O(n d²)`` screen from ``n = 2048`` on) call it: a kernel is wrapped in a
counter where it lives, a block is decided through each path, and the counter must move on both."""

import numpy as np
import pytest

from absorbjax import condition, models
from absorbjax.condition import _hypotheses as hyp, _inputs as inputs, _large as large, _stored as stored


def _block(n: int, seed: int = 0) -> models.MLPParams:
    """A Gaussian relu block ``(2, n)`` whose rows 0 and 1 are exactly parallel (row 1 = −4·row 0, exact)."""
    rng = np.random.default_rng(seed)
    U, D = rng.standard_normal((n, 2)), rng.standard_normal((2, n)) / n
    U[1] = -4.0 * U[0]
    return models.MLPParams(U, D)


@pytest.fixture
def calls(monkeypatch):
    """``calls[name]``: how often the wrapped kernel ``name`` ran."""
    seen = {}

    def wrap(name, *modules):  # every module that holds the name (imported by name, or where it lives)
        inner = getattr(modules[0], name)

        def counted(*args, **kwargs):
            seen[name] = seen.get(name, 0) + 1
            return inner(*args, **kwargs)

        for module in modules:
            monkeypatch.setattr(module, name, counted)

    wrap("exactly_parallel", hyp)
    wrap("unit_max", stored, hyp, inputs)
    return seen


@pytest.mark.parametrize("n", [8, large.SCREEN_MIN_N])
def test_both_paths_test_parallel_rows_with_the_one_exact_test(calls, n):
    """The parallel pair is found by :func:`_hypotheses.exactly_parallel` on either path (the Gram path
    through :func:`_hypotheses.from_gram`, the screen through :func:`_hypotheses.blockwise`), and the
    block is ``degenerate`` citing it."""
    cert = condition.find_absorbing_set(_block(n), "relu")
    assert calls.get("exactly_parallel", 0) >= 1
    assert cert.status == condition.Status.DEGENERATE and any("parallel" in f for f in cert.failed)


def test_the_screen_reads_the_units_maxima_once(calls):
    """On the wide path the per-unit maxima are read once, when the weights are checked, and every later
    step (balancing, the hypotheses) reuses them: one :func:`stored.unit_max` per decision."""
    rng = np.random.default_rng(1)
    n = large.SCREEN_MIN_N
    U, D = rng.standard_normal((n, 4)) / 2, rng.standard_normal((4, n)) / n  # small enough for the trace test
    params = models.MLPParams(U.astype(np.float32), D.astype(np.float32))
    cert = condition.find_absorbing_set(params, "gelu")
    assert cert.status == condition.Status.NOT_ABSORBABLE and cert.method == "trace"
    assert calls.get("unit_max") == 1
