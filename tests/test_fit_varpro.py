"""The default search (``Solver(method="varpro")``): its pieces, its independence from the
condition, and what it finds on planted and Gaussian blocks (float64)."""

import ast
import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from absorbjax import fit, models
from absorbjax.fit import _signs as signs, _varpro as varpro

pytestmark = pytest.mark.x64
KEY = jax.random.key(3)
FIT = Path(fit.__file__).parent
# What the default search runs: the driver, one draw, the projected fit and the sign step, and
# what they build on. None of it may read the condition or the theory-assisted search.
DEFAULT_PATH = ["_driver", "_draw", "_projected", "_varpro", "_signs", "_loss", "_config", "_drawmap", "_result"]
THEORY = ("absorbjax.condition", "absorbjax.fit._expand", "absorbjax.fit._merge", "absorbjax.fit._convert")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_the_default_search_imports_nothing_from_the_condition():
    for name in DEFAULT_PATH:
        bad = sorted(i for i in _imports(FIT / f"{name}.py") if i.startswith(THEORY))
        assert not bad, f"fit/{name}.py imports {bad}"
    # ... and the planted sets are not consulted at run time either: the searches of planted blocks
    # and stacks below run with every function of the condition failing the test (without_condition).
    assert fit.Solver().method == "varpro"


@pytest.fixture
def without_condition(monkeypatch):
    """Every function of ``absorbjax.condition`` fails the test when called: the searches below
    solve their planted blocks and stacks with the condition unreachable."""
    from absorbjax import condition

    for name in condition.__all__:
        if callable(getattr(condition, name)):
            monkeypatch.setattr(condition, name, lambda *a, **k: pytest.fail("the default search called condition"))


@pytest.mark.slow
def test_negations_recover_the_planted_set_from_the_residual_block_itself():
    # A residual block is the free-linear fit with A = I: the negations that remove A are S.
    for d, n in ((3, 9), (4, 16)):  # n <= 12 enumerates, n = 16 rounds the least-squares point
        W, S = models.planted("gelu", d, n, key=jax.random.key(d), dtype=jnp.float64)
        tau = signs.negations(W.up, W.down, jnp.eye(d), 1.0)
        assert np.flatnonzero(np.asarray(tau)).tolist() == list(S)
        V = W._replace(up=signs.negate(W.up, tau))
        x = jax.random.normal(jax.random.key(9), (d,), jnp.float64)
        assert jnp.allclose(models.mlp(V, x, "gelu"), models.skip_mlp(W, x, "gelu"), atol=1e-12)


@pytest.mark.slow
def test_unitwise_normal_equations_equal_the_dense_ones():
    d, m, K = 3, 5, 40
    xs = jax.random.normal(jax.random.key(0), (K, d), jnp.float64)
    Y = jax.random.normal(jax.random.key(1), (K, d), jnp.float64)
    U = jax.random.normal(jax.random.key(2), (m, d), jnp.float64)
    unit_features = lambda u: jax.nn.gelu(xs @ u.T, approximate=False)
    features = lambda t: jnp.concatenate([unit_features(t.reshape(m, d)), xs], 1)
    proj = varpro.project(features, Y, U.ravel())
    H1, g1 = varpro.dense_normal(features)(U.ravel(), proj)
    H2, g2 = varpro.unitwise_normal(unit_features, m)(U.ravel(), proj)
    assert jnp.allclose(H1, H2, rtol=1e-10, atol=1e-12) and jnp.allclose(g1, g2, rtol=1e-10, atol=1e-12)
    # the projection is least squares: the residual is orthogonal to every feature
    assert float(jnp.abs(features(U.ravel()).T @ proj.residual).max()) < 1e-10


@pytest.mark.slow
def test_projected_levenberg_marquardt_fits_a_realisable_target_to_rounding():
    d, m, K = 2, 3, 64
    xs = jax.random.normal(jax.random.key(0), (K, d), jnp.float64)
    U = jax.random.normal(jax.random.key(1), (m, d), jnp.float64)
    Y = jnp.tanh(xs @ U.T) @ jax.random.normal(jax.random.key(2), (m, d), jnp.float64) / math.sqrt(K)
    unit_features = lambda u: jnp.tanh(xs @ u.T) / math.sqrt(K)
    start = U + 0.1 * jax.random.normal(jax.random.key(3), U.shape, jnp.float64)
    _, v = varpro.levenberg_marquardt(
        unit_features_flat := (lambda t: unit_features(t.reshape(m, d))),
        Y,
        start.ravel(),
        40,
        varpro.unitwise_normal(unit_features, m),
    )
    assert float(v) < 1e-25 and float(varpro.loss(unit_features_flat, Y, start.ravel())) > 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_default_search_solves_planted_blocks_at_n_4d_and_no_gaussian_one(activation, without_condition):
    # d = 2 draws are often nearly degenerate: draw 1 here has two rows of W_up 0.09° apart and
    # W_down[:,S] of size ~2000, and is not asserted: relu solves it for 2 of the search keys 0–3,
    # with 256 inputs as with the default 1024 (keys 2, 3 and 0, 2). Draw 3 is: with 256 inputs its
    # relu fit was exact on the training inputs and missed held-out ones by 1e-9 for keys 1 and 3
    # (a kink between two training directions); with 1024 it is solved for all four keys.
    planted, _ = models.planted_sample(activation, 2, 8, key=jax.random.key(41), draws=4, dtype=jnp.float64)
    gaussian = models.sample(activation, 2, 8, key=jax.random.key(42), draws=3, dtype=jnp.float64)
    yes = fit.search(planted, activation, key=KEY, run=fit.Run(progress=False))
    no = fit.search(gaussian, activation, key=KEY, run=fit.Run(progress=False))
    assert yes.solved()[[0, 2, 3]].all() and not no.solved().any()
    assert yes.config.method == "varpro" and yes.config.to_dict()["method"] == "varpro"
    # a reader tells solved and Gaussian draws apart from the losses alone: ten orders between them
    solved = yes.solved()
    assert float(no.best_loss.min()) > 1e10 * float(yes.best_loss[solved].max())
    assert float(yes.holdout_loss[solved].max()) < 1e-20


@pytest.mark.slow
def test_varpro_refuses_the_adam_options_and_covers_the_free_linear_class():
    """The Adam-only options are refused; the free-linear class runs and gives finite losses.

    The other problems the default search covers run, each with its own compiled program, in the
    tests that already search them with the defaults and check their losses are finite: a wider
    candidate in ``test_fit.py::test_d_extra_units_absorb_gaussian_relu_blocks``, a skip ``A`` in
    ``test_fit.py::test_linear_skip_target_is_absorbed``, an activation without an odd part
    (relu2) and gated ones (swiglu, geglu, reglu) in
    ``test_fit.py::test_near_origin_error_of_gated_and_homogeneous_blocks``."""
    W = models.sample("gelu", 2, 4, key=jax.random.key(0), draws=1, dtype=jnp.float64)
    kw = dict(key=KEY, run=fit.Run(progress=False))
    with pytest.raises(ValueError, match="configure method='adam'"):
        fit.search(W, "gelu", solver=fit.Solver(restarts=2, steps=3, polish=False), **kw)
    with pytest.raises(ValueError, match="configure method='adam'"):
        fit.search(W, "gelu", solver=fit.Solver(restarts=2, steps=3, optimizer=optax.sgd(1e-3)), **kw)
    with pytest.raises(ValueError, match="method must be one of"):
        fit.search(W, "gelu", solver=fit.Solver(restarts=2, steps=3, method="newton"), **kw)
    r = fit.search(W, "gelu", problem=fit.Problem(linear=True), solver=fit.Solver(restarts=2, steps=3), **kw)
    assert r.config.method == "varpro" and isinstance(r.best_params, fit.Linear)
    assert np.isfinite(r.best_loss).all()


@pytest.mark.slow
def test_default_search_solves_planted_gelu_stacks_and_refuses_gaussian_ones(without_condition):
    # depth 2: the free-linear stack fit, the negations in each layer, the residual-free polish
    planted, _ = models.planted_sample("gelu", 2, 4, key=jax.random.key(10), draws=3, dtype=jnp.float64, depth=2)
    gaussian = models.sample("gelu", 2, 4, key=jax.random.key(11), draws=2, dtype=jnp.float64, depth=2)
    yes = fit.search(planted, "gelu", key=jax.random.key(2), problem=fit.Problem(depth=2), run=fit.Run(progress=False))
    no = fit.search(gaussian, "gelu", key=jax.random.key(2), problem=fit.Problem(depth=2), run=fit.Run(progress=False))
    assert yes.solved().all() and not no.solved().any()
    assert float(no.best_loss.min()) > 1e10 * float(yes.best_loss.max())


@pytest.mark.slow
def test_hops_bring_a_fit_one_unit_off_back_to_the_block():
    # a planted relu block's absorber (the rows of S negated) with one unit's row replaced: the loss
    # is far from 0 and a refit of the whole block from there need not recover (steps 1–3 left such
    # fits at 1e-9…1e-5); the hop re-initialises the units in turn and one variant is exact again
    planted, sets = models.planted_sample("relu", 3, 6, key=jax.random.key(21), draws=1, dtype=jnp.float64)
    W = jax.tree.map(lambda a: a[0], planted)
    tau = jnp.zeros(6).at[jnp.asarray(sets[0])].set(1.0)
    exact = W._replace(up=signs.negate(W.up, tau))
    off = exact._replace(up=exact.up.at[2].set(jnp.asarray([1.0, -0.5, 0.25])))
    cfg = fit._config.validate(W, "relu", problem=fit.Problem(), solver=fit.Solver(restarts=6, hops=2)).cfg
    xs, _ = fit.sample_inputs(fit.Inputs(num=cfg.num), 3, key=jax.random.key(1), dtype=jnp.float64)
    ys = jax.vmap(lambda x: models.skip_mlp(W, x, "relu"))(xs)
    loss_fn = lambda p: jnp.sum(jnp.square(fit._loss.residuals(p, xs, ys, "relu", 1)))
    assert float(loss_fn(exact)) < 1e-28 and float(loss_fn(off)) > 1e-4
    p = jax.tree.map(lambda a: jnp.stack([a, a]), off)  # two restarts, both one unit off
    losses = jax.vmap(loss_fn)(p)
    for hops, solved in ((0, False), (2, True)):
        got = fit._projected.hop(dataclasses.replace(cfg, hops=hops), xs, ys, p, losses, loss_fn, jax.random.key(2))
        assert (float(got[1].min()) <= 1e-20) is solved, (hops, got[1])
    with pytest.raises(ValueError, match="method='adam' takes none"):
        fit.search(planted, "relu", key=KEY, solver=fit.Solver(method="adam", hops=2), run=fit.Run(progress=False))


def test_levenberg_marquardt_skipped_does_no_iteration():
    xs = jnp.linspace(-1.0, 1.0, 16)[:, None]
    features = lambda theta: jnp.tanh(xs * theta[None, :])
    Y = jnp.tanh(2.0 * xs)
    theta0 = jnp.asarray([0.5])
    normal = varpro.dense_normal(features)
    skipped, v0 = varpro.levenberg_marquardt(features, Y, theta0, 20, normal, skip=True)
    moved, v = varpro.levenberg_marquardt(features, Y, theta0, 20, normal)
    assert np.array_equal(skipped, theta0) and float(v0) == float(varpro.loss(features, Y, theta0))
    assert float(v) < 1e-20 < float(v0)


def test_blockwise_is_resolved_for_stacks_and_refused_where_it_means_nothing():
    W, _ = models.planted_sample("relu", 2, 4, key=KEY, draws=1, dtype=jnp.float64, depth=2)
    cfg = lambda depth=2, **kw: (
        fit._config.validate(
            jax.tree.map(lambda a: a[0] if depth == 1 else a, W), "relu", problem=fit.Problem(depth=depth), **kw
        ).cfg
    )
    assert cfg(solver=fit.Solver()).blockwise and not cfg(solver=fit.Solver(blockwise=False)).blockwise
    assert not cfg(depth=1, solver=fit.Solver(blockwise=True)).blockwise  # one block: nothing to split
    assert not cfg(solver=fit.Solver(method="adam")).blockwise
    for solver in (fit.Solver(method="adam", blockwise=True), fit.Solver(blockwise="yes")):
        with pytest.raises(ValueError, match="blockwise"):
            cfg(solver=solver)
    with pytest.raises(ValueError, match="blockwise"):
        fit._config.validate(W, "relu", problem=fit.Problem(depth=2, linear=True), solver=fit.Solver(blockwise=True))


@pytest.mark.slow
def test_default_search_solves_planted_relu_stacks_at_n_4d_and_the_joint_search_is_kept(without_condition):
    # the default on two planted relu (2,8) stacks: solved (step 0), recorded as blockwise; with
    # blockwise=False the joint search alone runs, and its result is a residual-free stack too
    planted, _ = models.planted_sample("relu", 2, 8, key=jax.random.key(32), draws=2, dtype=jnp.float64, depth=2)
    kw = dict(key=jax.random.key(4), problem=fit.Problem(depth=2), run=fit.Run(progress=False))
    r = fit.search(planted, "relu", **kw)
    assert r.solved().all() and r.config.blockwise, r.best_loss
    joint = fit.search(planted, "relu", solver=fit.Solver(restarts=2, steps=4, hops=0, blockwise=False), **kw)
    assert not joint.config.blockwise and joint.best_params.up.shape == planted.up.shape
