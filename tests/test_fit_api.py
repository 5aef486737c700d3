"""Tests for absorbjax.fit's public API: the compile cache follows the activation registry, the
typed options (``fit.Solver``, ``fit.Run``), objects only, the result's config.

float64 is enabled by conftest.py (the ``x64`` marker).
"""

import dataclasses
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from absorbjax import activations, fit, io, models

pytestmark = pytest.mark.x64

KEY = jax.random.key(0)
TINY = dict(solver=fit.Solver(restarts=2, steps=5, method="adam", polish=False), run=fit.Run(progress=False))


def _training_inputs(result, i):
    """Draw ``i``'s training inputs, as :func:`absorbjax.fit._draw.one_draw` samples them."""
    k_in = jax.random.split(jax.random.fold_in(KEY, i))[0]
    xs, _ = fit.sample_inputs(fit.Inputs(result.config.num), 2, key=k_in, dtype=jnp.float64)
    return xs


@pytest.mark.slow
def test_reregistered_activation_compiles_the_new_function():
    """The compiled step is keyed on the activation entry, not its name: after
    ``register(name, g, overwrite=True)`` a search with the same settings uses ``g``."""
    name = "fit_api_test_act"
    W = models.sample("relu", 2, 4, key=jax.random.key(3), draws=2)
    try:
        activations.register(name, lambda z: jnp.maximum(z, 0.0))
        first = fit.search(W, name, key=KEY, **TINY)
        before = fit._drawmap.compiled.cache_info()
        again = fit.search(W, name, key=KEY, **TINY)  # the same entry: the compiled step is reused
        after = fit._drawmap.compiled.cache_info()
        assert (after.hits, after.misses) == (before.hits + 1, before.misses)
        np.testing.assert_array_equal(again.losses, first.losses)
        activations.register(name, lambda z: jnp.tanh(z), overwrite=True)
        second = fit.search(W, name, key=KEY, **TINY)
        assert fit._drawmap.compiled.cache_info().misses == after.misses + 1  # the new entry compiles anew
        for i in range(2):  # the reported loss is the new function's, recomputed outside the search
            V = jax.tree.map(lambda a: a[i], second.best_params)
            target = jax.tree.map(lambda a: a[i], W)
            want = float(fit.relative_loss(V, target, name, xs=_training_inputs(second, i)))
            np.testing.assert_allclose(second.best_loss[i], want, rtol=1e-9)
        assert not np.allclose(first.best_loss, second.best_loss)
    finally:
        activations.unregister(name)


@pytest.mark.slow
def test_a_checkpoint_resumes_only_with_the_same_activation_function(tmp_path, monkeypatch):
    """The fingerprint holds the activation's code, not only its name: re-registered with the same
    function, a search resumes from the chunks; with another one, the directory is refused."""
    name = "fit_api_ckpt_act"
    W = models.sample("relu", 2, 4, key=jax.random.key(3), draws=4)
    kw = dict(
        key=KEY, solver=TINY["solver"], run=fit.Run(progress=False, batch_size=1, chunk_size=1, checkpoint=tmp_path)
    )
    relu = lambda z: jnp.maximum(z, 0.0)  # noqa: E731
    computed = []
    real = fit._drawmap.compiled
    monkeypatch.setattr(fit._drawmap, "compiled", lambda *a: lambda *b: computed.append(1) or real(*a)(*b))
    try:
        activations.register(name, relu)
        first = fit.search(W, name, **kw)
        assert len(computed) == 4 and len(list(tmp_path.glob("chunk_*.npz"))) == 4
        activations.register(name, lambda z: jnp.maximum(z, 0.0), overwrite=True)  # the same code again
        again = fit.search(W, name, **kw)
        assert len(computed) == 4  # every chunk loaded, none computed
        np.testing.assert_array_equal(again.losses, first.losses)
        activations.register(name, lambda z: jnp.maximum(z, 0.0) + 0.5 * z, overwrite=True)
        with pytest.raises(ValueError, match="different search"):
            fit.search(W, name, **kw)
        assert len(computed) == 4
    finally:
        activations.unregister(name)


@pytest.mark.integration  # a child process
def test_code_identity_is_stable_across_processes_and_tells_functions_apart():
    code = "from absorbjax import activations; from absorbjax.fit import _drawmap as drawmap; "
    code += "print(drawmap.code_identity(activations.get('gelu').fn), drawmap.code_identity(activations.get('leaky_relu(0.2)').fn))"
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
        for _ in range(2)
    ]
    assert (
        runs[0] == runs[1] == [fit._drawmap.code_identity(activations.get(a).fn) for a in ("gelu", "leaky_relu(0.2)")]
    )
    ids = {
        fit._drawmap.code_identity(activations.get(a).fn)
        for a in ("relu", "gelu", "leaky_relu(0.2)", "leaky_relu(0.3)")
    }
    assert len(ids) == 4  # a partial's bound slope counts


def test_options_are_objects_only():
    """A search's options are its three objects: a field by keyword is Python's own ``TypeError``
    (no shorthand that could silently override a field of an object also passed; no ``**kwargs``
    anywhere in the public API: tests/test_api.py)."""
    W = models.sample("gelu", 2, 4, key=KEY, draws=2)
    for search in (fit.search, fit.expand_search, fit.recall):
        with pytest.raises(TypeError, match="unexpected keyword argument 'restarts'"):
            search(W, "gelu", key=KEY, solver=fit.Solver(restarts=3), restarts=2)


def test_options_are_keyword_built_frozen_and_checked():
    with pytest.raises(TypeError):
        fit.Solver(8)  # keyword only
    with pytest.raises(TypeError):
        fit.Run(None, None)
    solver = fit.Solver(restarts=8)
    with pytest.raises(AttributeError):
        solver.restarts = 4  # frozen
    W = models.sample("relu", 2, 4, key=KEY, draws=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'widht'"):
        fit.expand_search(W, "relu", key=KEY, widht=8)
    # a problem expand_search cannot do (it adds the width and the linear term itself) is refused
    for problem in (fit.Problem(width=8), fit.Problem(linear=True)):
        with pytest.raises(ValueError, match="expand_search searches residual-free blocks of the target's width n"):
            fit.expand_search(W, "relu", key=KEY, problem=problem)
    with pytest.raises(ValueError, match="problem must be an absorbjax.fit.Problem"):
        fit.search(W, "relu", key=KEY, problem={"depth": 2})
    with pytest.raises(ValueError, match="solver must be an absorbjax.fit.Solver"):
        fit.search(W, "relu", key=KEY, solver={"restarts": 8})
    with pytest.raises(ValueError, match="restarts must be a positive integer"):
        fit.search(W, "relu", key=KEY, solver=fit.Solver(restarts=0))
    assert "restarts" in fit.Solver.__doc__ and "checkpoint" in fit.Run.__doc__  # help() shows the fields
    assert all(f in fit.Problem.__doc__ for f in ("skip", "depth", "width", "linear", "inputs"))
    with pytest.raises(TypeError):
        fit.Problem(None)  # keyword only


@pytest.mark.slow
def test_search_config_is_frozen_and_its_record_keeps_its_keys():
    W = models.sample("gelu", 2, 4, key=KEY, draws=2)
    r = fit.search(W, "gelu", key=KEY, **TINY)
    assert isinstance(r.config, fit.SearchConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.config.tol = 1.0
    # the JSON record's keys, in the order records have always had them (hops since 2026-12-05,
    # blockwise since 2026-12-06)
    keys = "activation depth d n width method restarts steps init linear hops blockwise num low high holdout polish"
    keys += " optimizer skip"
    keys += " draws tol batch_size chunk_size devices dtype key jax"
    assert list(r.config.to_dict()) == keys.split()
    assert io.to_jsonable(r.config) == io.to_jsonable(r.config.to_dict())
    assert r.config.to_dict()["polish"] is None and r.config.to_dict()["key"] == list(r.config.key)
    assert "final_loss" not in r.to_dict() and "single" not in r.config.to_dict()


@pytest.mark.slow
def test_init_and_polish_method_are_str_enums_with_unchanged_records():
    """Misspelt values are refused. That a search's config holds the enums and its JSON record the
    plain strings is checked on a search that already runs with an L-BFGS polish,
    ``test_fit.py::test_lbfgs_polish_and_custom_optimizer`` (no search of its own here)."""
    W = models.sample("relu", 2, 4, key=KEY, draws=1)
    assert fit._config.Init("random") is fit._config.Init.RANDOM and fit._config.Init.RANDOM == "random"
    assert fit._config.PolishMethod("lbfgs") is fit._config.PolishMethod.LBFGS
    with pytest.raises(ValueError, match="polish.method must be one of"):
        fit.Polish(method="lbgfs").resolve(10)
    with pytest.raises(ValueError, match="init must be one of"):
        fit.search(W, "relu", key=KEY, solver=fit.Solver(init="cold"))


@pytest.mark.slow
def test_expand_search_keeps_the_restarts_apart_from_the_final_block():
    """``losses`` keeps the first search's restarts (``summary()`` counts them), the final block's
    loss is ``final_loss``; one block without a draws axis gives fields without one."""
    W, _ = models.planted("gelu", 2, 4, key=jax.random.key(5))
    solver = fit.Solver(restarts=2, steps=5, method="adam", polish=fit.Polish(steps=4, screen=2, top=1))
    r = fit.expand_search(W, "gelu", key=KEY, solver=solver, wide=fit.Wide(factor=2, proposals=2, rounds=1))
    first = fit.search(W, "gelu", key=KEY, solver=solver, run=fit.Run(progress=False))
    assert r.losses.shape == r.failed.shape == (2,) and np.shape(r.final_loss) == () and r.config.single
    np.testing.assert_array_equal(r.losses, first.losses)
    assert "1 draws x 2 restarts" in r.summary() and "final block" in r.summary()
    assert r.config.expand.unsolved >= r.config.expand.proposed >= r.config.expand.improved
    assert "final_loss" in r.to_dict() and "final_loss" not in first.to_dict()
    keys = "factor wide_restarts wide_steps wide_polish rounds proposals_per_draw dense merge_tol unsolved proposed improved"
    assert list(r.to_dict()["config"]["expand"]) == keys.split()  # GELU: no line step, no "lines"


def test_the_progress_bar_is_text_where_no_widget_can_draw(monkeypatch):
    """Without ipywidgets (a fresh notebook kernel) the bar is tqdm's text bar and nothing warns;
    ``tqdm.auto`` would pick the widget there and warn (issue 58, the front door)."""
    import sys
    import warnings

    import tqdm.std

    from absorbjax._progress import tqdm as progress

    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # importing it raises ImportError
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bar = progress(range(3), disable=True)
    assert type(bar) is tqdm.std.tqdm
