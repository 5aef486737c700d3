"""Tests for absorbjax.fit's public API: the compile cache follows the activation registry, the
typed options (``fit.Solver``, ``fit.Run``) and their keyword shorthand, the result's config.

float64 is enabled by conftest.py (the ``x64`` marker).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import activations, fit, models

pytestmark = pytest.mark.x64

KEY = jax.random.key(0)
TINY = dict(restarts=2, steps=5, polish=False, progress=False)


def _training_inputs(result, i):
    """Draw ``i``'s training inputs, as :func:`absorbjax.fit.draw.one_draw` samples them."""
    k_in = jax.random.split(jax.random.fold_in(KEY, i))[0]
    xs, _ = fit.sample_inputs(fit.Inputs(result.config["num"]), 2, key=k_in, dtype=jnp.float64)
    return xs


def test_reregistered_activation_compiles_the_new_function():
    """The compiled step is keyed on the activation entry, not its name: after
    ``register(name, g, overwrite=True)`` a search with the same settings uses ``g``."""
    name = "fit_api_test_act"
    W = models.sample("relu", 2, 4, key=jax.random.key(3), draws=2)
    try:
        activations.register(name, lambda z: jnp.maximum(z, 0.0))
        first = fit.search(W, name, key=KEY, **TINY)
        activations.register(name, lambda z: jnp.tanh(z), overwrite=True)
        second = fit.search(W, name, key=KEY, **TINY)
        for i in range(2):  # the reported loss is the new function's, recomputed outside the search
            V = jax.tree.map(lambda a: a[i], second.best_params)
            target = jax.tree.map(lambda a: a[i], W)
            want = float(fit.relative_loss(V, target, name, xs=_training_inputs(second, i)))
            np.testing.assert_allclose(second.best_loss[i], want, rtol=1e-9)
        assert not np.allclose(first.best_loss, second.best_loss)
    finally:
        activations.unregister(name)
