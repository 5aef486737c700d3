"""Tests for absorbjax.fit. float64 is enabled by conftest.py (exactness claims need it).

Statistical claims state their sample size; every search uses a fixed key, so each test is
deterministic.
"""

import os
import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from absorbjax import condition, fit, models

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

KEY = jax.random.key(0)
SMALL = dict(restarts=4, steps=50, polish=fit.Polish(steps=20, screen=5, top=2), batch_size=2, progress=False)


# ---------------------------------------------------------------------------------------------
# Loss and inputs


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_absorber_has_zero_loss(activation):
    W, S = models.absorbable(KEY, 3, 6, activation)
    V = W._replace(up=W.up.at[S].multiply(-1))
    xs, _ = fit.sample_inputs(KEY, 3, fit.Inputs(num=512), jnp.float64)
    assert fit.relative_loss(V, W, xs, activation) < 1e-28


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_dropping_the_skip_costs_exactly_one(activation):
    # V = W reproduces f(x) − x, so the relative error is ‖x‖²/‖x‖² = 1 at every input.
    W = models.init(KEY, 3, 5, activation)
    xs, _ = fit.sample_inputs(KEY, 3, fit.Inputs(num=256), jnp.float64)
    np.testing.assert_allclose(fit.relative_loss(W, W, xs, activation), 1.0, rtol=1e-12)


def test_inputs_shapes_and_radii():
    spec = fit.Inputs(num=1000, low=1e-3, high=1e2, holdout=50)
    xs, xh = fit.sample_inputs(KEY, 4, spec, jnp.float64)
    edges = fit.decade_edges(spec.low, spec.high)
    assert xs.shape == (1000, 4) and xh.shape == (5, 50, 4)
    r = np.linalg.norm(xs, axis=-1)
    assert r.min() >= 1e-3 and r.max() <= 1e2
    assert np.histogram(np.log10(r), bins=5)[0].min() > 150  # log-uniform: ~200 per decade
    rh = np.linalg.norm(xh, axis=-1)
    for b in range(5):
        assert np.all((rh[b] >= edges[b] * (1 - 1e-12)) & (rh[b] <= edges[b + 1] * (1 + 1e-12)))
    np.testing.assert_allclose(fit.decade_edges(0.03, 20), [0.03, 0.1, 1, 10, 20])


# ---------------------------------------------------------------------------------------------
# Arguments


def test_bad_arguments():
    W = models.sample(KEY, 3, 2, 4, "relu")
    kw = dict(key=KEY, progress=False)
    with pytest.raises(ValueError, match="unknown activation"):
        fit.search(W, "nope", **kw)
    with pytest.raises(ValueError, match="needs target GatedParams"):
        fit.search(W, "swiglu", **kw)
    with pytest.raises(ValueError, match=r"params.up must have shape"):
        fit.search(W._replace(up=W.up[:, :3]), "relu", **kw)
    with pytest.raises(ValueError, match="width must be an integer >= n = 4"):
        fit.search(W, "relu", width=3, **kw)
    with pytest.raises(ValueError, match="float32 can resolve"):
        fit.search(jax.tree.map(lambda a: a.astype(jnp.float32), W), "relu", tol=1e-20, **kw)
    with pytest.raises(ValueError, match="NaN or Inf"):
        fit.search(W._replace(down=W.down.at[0, 0, 0].set(jnp.nan)), "relu", **kw)
    with pytest.raises(ValueError, match="init must be one of"):
        fit.search(W, "relu", init="zeros", **kw)
    with pytest.raises(ValueError, match="skip must have shape"):
        fit.search(W, "relu", skip=jnp.eye(3), **kw)
    with pytest.raises(ValueError, match="depth"):
        fit.search(W, "relu", depth=2, **kw)
    with pytest.raises(ValueError, match="polish.method"):
        fit.search(W, "relu", polish=fit.Polish(method="newton"), **kw)
    with pytest.raises(ValueError, match="init.down must have shape"):
        fit.search(W, "relu", init=models.sample(KEY, 5, 2, 4, "relu"), restarts=3, **kw)
    with pytest.raises(ValueError, match="linear must be True or False"):
        fit.search(W, "relu", linear=1, **kw)
    lin = fit.Linear(models.sample(KEY, 3, 2, 4, "relu"), jnp.zeros((3, 2, 2)))
    with pytest.raises(ValueError, match="pass linear=True"):
        fit.search(W, "relu", init=lin, restarts=3, **kw)
    with pytest.raises(ValueError, match="init.linear must have shape"):
        fit.search(W, "relu", init=lin._replace(linear=jnp.zeros((3, 2, 3))), restarts=3, linear=True, **kw)


def test_float32_runs_with_its_own_tolerance():
    W = jax.tree.map(lambda a: a.astype(jnp.float32), models.sample(KEY, 2, 2, 4, "gelu"))
    r = fit.search(W, "gelu", key=KEY, **SMALL)
    assert r.config["dtype"] == "float32" and r.config["tol"] == 1e-10
    assert r.best_params.down.dtype == jnp.float32 and np.all(np.isfinite(r.best_loss))


# ---------------------------------------------------------------------------------------------
# Result object


def test_result_shapes_and_record(tmp_path, capsys):
    W = models.sample(KEY, 3, 2, 4, "gelu")
    r = fit.search(W, "gelu", key=KEY, **SMALL)
    assert r.best_loss.shape == (3,) and r.losses.shape == r.failed.shape == (3, 4)
    assert r.best_params.up.shape == (3, 4, 2) and r.best_params.down.shape == (3, 2, 4)
    assert r.profile.shape == (3, 4) and len(r.edges) == 5
    np.testing.assert_array_equal(r.best_loss, np.nanmin(r.losses, 1))
    for i in range(3):  # best_params really has best_loss on draw i's inputs
        xs, _ = fit.sample_inputs(jax.random.split(jax.random.fold_in(KEY, i))[0], 2,
                                  fit.Inputs(r.config["num"]), jnp.float64)
        V, Wi = (jax.tree.map(lambda a: a[i], p) for p in (r.best_params, W))
        np.testing.assert_allclose(fit.relative_loss(V, Wi, xs, "gelu"), r.best_loss[i], rtol=1e-10)
    assert "3 draws x 4 restarts" in r.summary()
    from absorbjax import io

    path = io.save_record(tmp_path / "r.json", name="fit", seed=0, config=r.config, results=r.to_dict())
    assert io.load_record(path)["results"]["best_params"]["type"] == "MLPParams"
    single = fit.search(jax.tree.map(lambda a: a[0], W), "gelu", key=KEY, **{**SMALL, "progress": True})
    np.testing.assert_array_equal(single.losses[0], r.losses[0])
    assert "search gelu" in capsys.readouterr().err  # the tqdm bar


# ---------------------------------------------------------------------------------------------
# Determinism, devices, faults, resume


def test_deterministic_across_chunk_sizes():
    W = models.sample(KEY, 7, 2, 4, "gelu")
    runs = [fit.search(W, "gelu", key=KEY, chunk_size=c, **SMALL) for c in (8, 4, 2)]
    for r in runs[1:]:
        chex.assert_trees_all_equal((r.losses, r.profile, r.best_params), (runs[0].losses, runs[0].profile,
                                                                          runs[0].best_params))


def test_batch_step_is_traced_once_across_chunks(monkeypatch):
    """Four chunks of one batch each go through one compiled step: a retrace per chunk (a
    shape or a static argument that changes between batches) would fail the trace count."""
    counted = chex.assert_max_traces(fit.draw.one_draw, n=1)
    monkeypatch.setattr(fit.draw, "one_draw", counted)  # a new function: a fresh compile-cache entry
    steps = []
    real = fit.drawmap.compiled
    monkeypatch.setattr(fit.drawmap, "compiled", lambda *a: steps.append(real(*a)) or steps[-1])
    W = models.sample(KEY, 7, 2, 4, "gelu")
    r = fit.search(W, "gelu", key=KEY, chunk_size=2, **SMALL)
    assert r.config["chunk_size"] == 2 and len(steps) == 1
    assert steps[0]._cache_size() == 1
    fit.search(W, "gelu", key=jax.random.key(3), chunk_size=4, **SMALL)  # another key, same compile
    assert steps[1] is steps[0] and steps[0]._cache_size() == 1


DEVICE_SCRIPT = """
import sys
import jax
out, process, processes, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if processes > 1:
    jax.distributed.initialize(f"localhost:{port}", num_processes=processes, process_id=process)
jax.config.update("jax_enable_x64", True)
import numpy as np
from absorbjax import condition, fit, models
assert jax.device_count() == 4 and jax.process_count() == processes, (jax.devices(), jax.process_count())
key = jax.random.key(0)
W = models.sample(key, 7, 2, 4, "gelu")
r = fit.search(W, "gelu", key=key, batch_size=2, restarts=4, steps=50,
               polish=fit.Polish(steps=20, screen=5, top=2), progress=False, checkpoint=out + ".ckpt")
assert r.config["devices"] == 4 and r.config["chunk_size"] % 8 == 0
np.savez(out, losses=r.losses, profile=r.profile, up=np.asarray(r.best_params.up))
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("processes", [1, 2], ids=["1 process x 4 devices", "2 processes x 2 devices"])
def test_deterministic_across_device_and_process_counts(tmp_path, processes):
    """Four fake CPU devices, in one process or split over two ``jax.distributed`` processes
    (the multi-host path: sharded inputs built per process, results gathered to every
    process, checkpoints written by process 0 only), give bit-identical results to one device."""
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={4 // processes}",
           "JAX_PLATFORMS": "cpu"}
    port = str(_free_port())
    outs = [tmp_path / f"process{i}.npz" for i in range(processes)]
    procs = [subprocess.Popen([sys.executable, "-c", DEVICE_SCRIPT, str(o), str(i), str(processes), port],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, o in enumerate(outs)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
    assert jax.device_count() == 1
    W = models.sample(KEY, 7, 2, 4, "gelu")
    r = fit.search(W, "gelu", key=KEY, **SMALL)
    for out in outs:
        got = np.load(out)
        np.testing.assert_array_equal(got["losses"], r.losses)
        np.testing.assert_array_equal(got["profile"], r.profile)
        np.testing.assert_array_equal(got["up"], r.best_params.up)
    assert len(list((tmp_path / "process0.npz.ckpt").glob("chunk_*.npz"))) == 1  # 7 draws, one chunk of 8
    if processes == 2:
        assert not (tmp_path / "process1.npz.ckpt").exists()  # process 1 never writes


def test_nan_restart_is_marked_failed_and_isolated():
    W = models.sample(KEY, 3, 2, 4, "relu")
    init = jax.vmap(lambda k: models.init(k, 2, 4, "relu"))(jax.random.split(KEY, 4))
    bad = init._replace(up=init.up.at[1, 0, 0].set(jnp.nan))
    pol = fit.Polish(steps=10, screen=10)  # every restart polished: no selection couples them
    kw = dict(key=KEY, restarts=4, steps=30, polish=pol, progress=False)
    clean = fit.search(W, "relu", init=init, **kw)
    r = fit.search(W, "relu", init=bad, **kw)
    assert not clean.failed.any()
    np.testing.assert_array_equal(r.failed[:, 1], True)
    np.testing.assert_array_equal(r.failed[:, [0, 2, 3]], False)
    np.testing.assert_array_equal(r.losses[:, [0, 2, 3]], clean.losses[:, [0, 2, 3]])
    assert np.all(np.isfinite(r.best_loss)) and np.all(np.isfinite(r.profile))
    assert np.all(np.isfinite(np.asarray(r.best_params.up)))
    # A draw whose restarts all fail reports inf, and leaves the other draws alone.
    all_bad = jnp.broadcast_to(bad.up, (3,) + bad.up.shape).at[0].set(jnp.nan)
    init3 = bad._replace(up=all_bad, down=jnp.broadcast_to(bad.down, (3,) + bad.down.shape))
    r3 = fit.search(W, "relu", init=init3, **kw)
    assert r3.best_loss[0] == np.inf and r3.failed[0].all()
    np.testing.assert_array_equal(r3.losses[1:], r.losses[1:])


def test_diverging_optimizer_fails_cleanly():
    W = models.sample(KEY, 2, 2, 4, "gelu")
    r = fit.search(W, "gelu", key=KEY, restarts=3, steps=40, optimizer=optax.sgd(1e9),
                   polish=False, progress=False)
    assert r.failed.all() and np.all(r.best_loss == np.inf)


def test_resume_gives_the_same_result(tmp_path, monkeypatch):
    W = models.sample(KEY, 7, 2, 4, "gelu")
    kw = dict(key=KEY, chunk_size=2, **SMALL)
    fresh = fit.search(W, "gelu", **kw)

    saves = []
    real_save = fit.drawmap.atomic_save

    def interrupt_after_two(path, arrays):
        if len(saves) == 2:
            raise KeyboardInterrupt
        saves.append(path)
        real_save(path, arrays)

    monkeypatch.setattr(fit.drawmap, "atomic_save", interrupt_after_two)
    with pytest.raises(KeyboardInterrupt):
        fit.search(W, "gelu", checkpoint=tmp_path, **kw)
    monkeypatch.setattr(fit.drawmap, "atomic_save", real_save)
    assert len(list(tmp_path.glob("chunk_*.npz"))) == 2 and not list(tmp_path.glob("*.tmp"))

    computed = []
    real_batch = fit.drawmap.compiled

    def counting(*args):
        f = real_batch(*args)
        return lambda *a: computed.append(1) or f(*a)

    monkeypatch.setattr(fit.drawmap, "compiled", counting)
    resumed = fit.search(W, "gelu", checkpoint=tmp_path, **kw)
    assert len(computed) == 2  # 4 chunks of one batch each, 2 loaded from the checkpoint
    for field in ("best_loss", "losses", "failed", "profile", "weight_norms", "holdout_loss"):
        np.testing.assert_array_equal(getattr(resumed, field), getattr(fresh, field))
    chex.assert_trees_all_equal(resumed.best_params, fresh.best_params)
    with pytest.raises(ValueError, match="different search"):
        fit.search(W, "gelu", checkpoint=tmp_path, **{**kw, "steps": 51})


# ---------------------------------------------------------------------------------------------
# Variants: skip, depth, width, warm start, custom optimiser, lbfgs polish


def test_linear_skip_target_is_absorbed():
    # Lemma 4: A x + A D σ(U x) = A (x + D σ(U x)) absorbs whenever the reduced block does.
    W, _ = models.absorbable_sample(KEY, 2, 2, 4, "relu")
    A = jnp.array([[2.0, 0.5], [-0.3, 1.5]])
    target = W._replace(down=A @ W.down)
    r = fit.search(target, "relu", key=KEY, skip=A, init="warm", progress=False)
    assert np.all(r.best_loss < 1e-20)


@pytest.mark.slow
def test_d_extra_units_absorb_gaussian_relu_blocks():
    """Extra width: next to each of d hidden units i with spanning rows, one more unit on the
    same kink line adds an arbitrary rank-one term e_i W_up[i,:] (σ(z) − σ(−z) = z), so width
    n + d absorbs every generic ReLU block. The random-init search finds an exact absorber on
    75–95% of draws (40 Gaussian draws each at (2,3), (2,4), (3,6)); here ≥ 70% of 10, while
    at width n no Gaussian draw gets below 1e-12 (test_separation_on_gaussian_draws)."""
    d, n = 2, 3
    W = models.sample(jax.random.fold_in(KEY, 7), 10, d, n, "relu")
    r = fit.search(W, "relu", key=KEY, width=n + d, progress=False)
    assert r.best_params.up.shape == (10, n + d, d)
    assert r.solved().mean() >= 0.7, r.summary()


def test_free_linear_term_fits_every_orientation():
    """``linear=True`` fits ``L x + V_down σ(V_up x)``: started from the target's units with random
    sign flips (no absorber among them for a generic block), ``L`` absorbs the flips exactly
    (``σ(z) − σ(−z) = z``) and comes back as ``best_linear``; the residual-free search from the same
    starts cannot get below 1e-6."""
    W = models.sample(jax.random.fold_in(KEY, 3), 2, 2, 4, "gelu")
    signs = jnp.array([[1.0, -1, -1, 1], [-1, 1, 1, 1]])[:, None, :, None]  # (draws, restarts=1, n, 1)
    start = jax.tree.map(lambda a: a[:, None], W)._replace(up=W.up[:, None] * signs)
    kw = dict(key=KEY, restarts=1, steps=0, polish=fit.Polish(steps=30, screen=30, top=1), progress=False)
    r = fit.search(W, "gelu", init=start, linear=True, **kw)
    assert r.best_linear.shape == (2, 2, 2) and np.all(r.solved()), r.summary()
    # The fit keeps the target's units up to sign (the polish may turn a small one over), and L
    # is I plus the negated units' terms.
    neg = np.sum(np.asarray(r.best_params.up) * np.asarray(W.up), -1) < 0
    np.testing.assert_allclose(np.abs(r.best_params.up), np.abs(W.up), atol=1e-8)
    flipped = jnp.einsum("bdn,bn,bnk->bdk", W.down, neg.astype(float), W.up)
    np.testing.assert_allclose(r.best_linear, jnp.eye(2) + flipped, atol=1e-8)
    plain = fit.search(W, "gelu", init=start, **kw)
    assert np.all(plain.best_loss > 1e-6)


def test_depth_two_stack_runs():
    W = models.sample(KEY, 2, 2, 3, "gelu", depth=2)
    r = fit.search(W, "gelu", depth=2, key=KEY, **SMALL)
    assert r.best_params.up.shape == (2, 2, 3, 2) and np.all(np.isfinite(r.best_loss))
    assert np.all(r.best_loss > 1e-12)


def test_lbfgs_polish_and_custom_optimizer():
    W, _ = models.absorbable_sample(KEY, 2, 2, 4, "gelu")
    r = fit.search(W, "gelu", key=KEY, init="warm", restarts=8, steps=100, optimizer=optax.adam(1e-3),
                   polish=fit.Polish(method="lbfgs", steps=300, screen=0, top=2), progress=False)
    assert r.config["polish"]["method"] == "lbfgs" and r.config["optimizer"] == "custom"
    # Both draws reach the absorber's basin; with these draws one stops at ~3e-12 after 300 steps.
    assert np.min(r.best_loss) < 1e-12 and np.all(r.best_loss < 1e-10)


# ---------------------------------------------------------------------------------------------
# The claims at small sizes (default settings)


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_recall_on_absorbable_draws(activation):
    """Thm 8/10: with random init, ≥ 90% of absorbable draws reach loss ≤ 1e-20 on training and
    held-out inputs, pooled over 20 draws at (2, 4) and 10 at (3, 6) (30 draws). The per-size
    measurement on 100 draws each is ``experiments/bench_fit.py --claims``."""
    solved = []
    for d, n, draws in [(2, 4, 20), (3, 6, 10)]:
        W, _ = models.absorbable_sample(jax.random.fold_in(KEY, d), draws, d, n, activation)
        r = fit.recall(W, activation, key=KEY)
        assert r.tol == 1e-20  # solved: loss <= 1e-20 on training and held-out inputs
        np.testing.assert_array_equal(r.solved, (r.best_loss <= 1e-20) & (r.holdout_loss <= 1e-20))
        solved.append(r.solved)
    assert np.concatenate(solved).mean() >= 0.9, [s.mean() for s in solved]


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_separation_on_gaussian_draws(activation):
    """Cor 11: no Gaussian draw (10 at (2, 4), 6 at (3, 6)) gets below loss 1e-12."""
    for d, n, draws in [(2, 4, 10), (3, 6, 6)]:
        G = models.sample(jax.random.fold_in(KEY, 100 + d), draws, d, n, activation)
        r = fit.recall(G, activation, key=KEY)
        assert r.below(1e-12) == 0 and r.best_loss.min() > 1e-12, r.result.summary()
        assert r.count == 0


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["swiglu", "geglu", "relu2", "reglu"])
def test_near_origin_error_of_gated_and_homogeneous_blocks(activation):
    """Props 5/6: in the smallest radius decade the mean relative squared error of the best
    fit stays ≥ 0.5 (4 draws at (2, 4)), and dropping the skip (V = W, loss 1) is not beaten
    by much: the best loss stays above 0.1."""
    W = models.sample(KEY, 4, 2, 4, activation)
    r = fit.search(W, activation, key=KEY, progress=False)
    assert r.profile[:, 0].min() >= 0.5, r.summary()
    assert r.best_loss.min() > 0.1


# ---------------------------------------------------------------------------------------------
# Expand, merge, decide (fit.expand)


def _split_absorber(activation):
    """An absorbable target ``W`` and a width-``n + 6`` residual-free block equal to ``f_W``: the
    absorber with unit 0 split in two (ReLU: one copy rescaled by 1/2), a pair on ``−u_1`` that
    cancels, and a cancelling pair on a new direction."""
    d, n = 3, 6
    W, S = models.absorbable(jax.random.fold_in(KEY, 11), d, n, activation)
    V = condition.absorber(W, S)
    up, down = np.asarray(V.up), np.asarray(V.down)
    c = 0.5 if activation == "relu" else 1.0  # ReLU: σ(c z) = c σ(z); GELU copies keep their scale
    v, e = np.array([0.3, -1.1, 0.7]), np.array([1.0, 2.0, 0.5])
    wide_up = np.concatenate([up, [c * up[0], -up[1], -up[1], v, v]])
    wide_down = np.concatenate([down.T * np.r_[0.25, np.ones(n - 1)][:, None],
                                [0.75 * down[:, 0] / c, down[:, 1], -down[:, 1], e, -e]]).T
    return W, models.MLPParams(jnp.asarray(wide_up), jnp.asarray(wide_down))


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_merged_units_reproduce_the_wide_block(activation):
    """``L x + D σ(U x)`` from :func:`fit.merge.merge_units`, all clusters kept, is the wide block."""
    W, wide = _split_absorber(activation)
    xs, _ = fit.sample_inputs(KEY, 3, fit.Inputs(num=512), jnp.float64)
    merged, L = fit.merge.merge_units(wide, activation, 100)
    assert merged.up.shape == (7, 3)  # the 6 target directions and the new one (a zero cluster)
    g = jax.vmap(lambda x: models.mlp(wide, x, activation))(xs)
    h = jax.vmap(lambda x: L @ x + models.mlp(merged, x, activation))(xs)
    np.testing.assert_allclose(h, g, rtol=0, atol=1e-12 * float(np.abs(g).max()))
    np.testing.assert_allclose(jax.vmap(lambda x: models.skip_mlp(W, x, activation))(xs), g, atol=1e-10)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_condition_on_merged_units_proposes_the_absorber(activation):
    """Merged to width n, the condition (with the merge's linear term as skip) finds ``S`` and the
    proposed block reproduces the target to rounding error (a proposal is only a start: the
    search judges it by its polished loss, so no test of what generic blocks propose)."""
    W, wide = _split_absorber(activation)
    merged, L = fit.merge.merge_units(wide, activation, 6)
    V = fit.convert.absorber_from_units(merged, activation, linear=L)
    assert V is not None and V.up.shape == (6, 3)
    xs, _ = fit.sample_inputs(KEY, 3, fit.Inputs(num=512), jnp.float64)
    assert fit.relative_loss(V, W, xs, activation) < 1e-26


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_a_proposal_of_an_exact_wide_block_is_that_block(activation):
    """Cutting the line tree at the right height merges the wide block exactly (the cancelling
    pair's cluster is the one dropped), and the condition on that proposal gives the absorber."""
    W, wide = _split_absorber(activation)
    xs, _ = fit.sample_inputs(KEY, 3, fit.Inputs(num=512), jnp.float64)
    g = jax.vmap(lambda x: models.mlp(wide, x, activation))(xs)
    found = []
    for block, L in fit.merge.proposals(wide, np.zeros((3, 3)), activation, 6, count=8):
        assert block.up.shape == (6, 3) and L.shape == (3, 3)
        h = jax.vmap(lambda x: L @ x + models.mlp(block, x, activation))(xs)
        if np.abs(h - g).max() < 1e-10 * float(np.abs(g).max()):
            found.append(fit.convert.absorber_from_units(block, activation, linear=L))
    assert found and all(V is not None and fit.relative_loss(V, W, xs, activation) < 1e-26 for V in found)


def _directions(rng, count, low, high):
    """``count`` unit vectors of ℝ² at angles uniform in ``[low, high]`` (radians)."""
    a = rng.uniform(low, high, count)
    return np.stack([np.cos(a), np.sin(a)], 1)


def _cone_layer(rng, axis=0.4, half=0.9):
    """A free-``L`` ReLU layer ``L h + D σ(U h)`` (``d = 2``, ``n = 4``) that equals a residual-free
    block on the sector ``|angle(h) − axis| < half``: the block's units 2, 3 have rows within 0.2 rad
    of ``axis`` (always on there), moved into ``L`` and replaced by units that are off there."""
    V = models.MLPParams(rng.normal(size=(4, 2)), rng.normal(size=(2, 4)))
    b = _directions(rng, 2, axis - 0.2, axis + 0.2)
    V = models.MLPParams(np.r_[V.up[:2], b], V.down)
    L = V.down[:, 2:] @ b
    G = models.MLPParams(np.r_[V.up[:2], -b], np.c_[V.down[:, :2], rng.normal(size=(2, 2))])
    return V, G, L


def test_absorber_on_inputs_is_exact_on_their_cone_only_where_needed():
    """A layer that no ``S`` makes residual-free on the whole plane is made residual-free on the
    sector its inputs fill (checked on fresh inputs there); with inputs in every direction the
    rewrite is the condition: the absorbable block is rewritten, the Gaussian one is not."""
    rng = np.random.default_rng(0)
    _, G, L = _cone_layer(rng)
    assert fit.convert.absorber_from_units(G, "relu", linear=L) is None
    found = fit.convert.absorber_on_inputs(G, _directions(rng, 256, -0.5, 1.3), linear=L)
    h = _directions(rng, 512, -0.5, 1.3) * rng.uniform(0.1, 10, (512, 1))
    g = h @ L.T + np.maximum(h @ G.up.T, 0) @ G.down.T
    rewritten = np.maximum(h @ found.up.T, 0) @ found.down.T
    np.testing.assert_allclose(rewritten, g, rtol=0, atol=1e-12 * np.abs(g).max())

    everywhere = _directions(rng, 1024, -np.pi, np.pi)
    W, _ = models.absorbable(KEY, 2, 4, "relu")
    W = models.MLPParams(*(np.asarray(a) for a in W))
    found = fit.convert.absorber_on_inputs(W, everywhere, linear=np.eye(2))
    x = rng.normal(size=(64, 2))
    np.testing.assert_allclose(np.maximum(x @ found.up.T, 0) @ found.down.T,
                               x + np.maximum(x @ W.up.T, 0) @ W.down.T, atol=1e-12)
    gaussian = models.MLPParams(*(np.asarray(a) for a in models.init(KEY, 2, 4, "relu")))
    assert fit.convert.absorber_on_inputs(gaussian, everywhere, linear=np.eye(2)) is None


def test_absorber_on_inputs_merges_kinked_units_on_one_line_and_ignores_zero_images():
    """Width 3 on the sector of angles (−0.5, 2.1): units 0 and 1 share a line (``u`` and ``2u``)
    and unit 2 is kinked too, ``L = a bᵀ`` with ``b`` inside the dual cone. Merged, the two units on
    one line leave one unit for ``L`` (unmerged, three kinked units leave none). Inputs that are
    rounding noise at the apex (norm 1e-20, outside the sector) do not widen the cone."""
    rng = np.random.default_rng(2)
    u = np.array([1.0, 0.0])
    W = models.MLPParams(np.stack([u, 2 * u, [0.0, 1.0]]), rng.normal(size=(2, 3)))
    L = np.outer(rng.normal(size=2), [np.cos(0.8), np.sin(0.8)])
    noise = 1e-20 * _directions(rng, 16, 3.0, 4.0)
    found = fit.convert.absorber_on_inputs(W, np.r_[_directions(rng, 256, -0.5, 2.1), noise], linear=L)
    assert found is not None
    h = _directions(rng, 512, -0.5, 2.1) * rng.uniform(0.1, 10, (512, 1))
    g = h @ L.T + np.maximum(h @ W.up.T, 0) @ W.down.T
    rewritten = np.maximum(h @ found.up.T, 0) @ found.down.T
    np.testing.assert_allclose(rewritten, g, rtol=0, atol=1e-12 * np.abs(g).max())


def test_a_later_stack_layer_is_made_residual_free_on_the_image_of_the_first():
    """Depth 2: layer 1 maps the plane into a sector (its output columns lie there), layer 2
    absorbs only on that sector; the rewritten stack equals the fitted one everywhere."""
    rng = np.random.default_rng(1)
    first = models.MLPParams(rng.normal(size=(4, 2)), _directions(rng, 4, -0.5, 1.3).T * rng.uniform(0.5, 2, 4))
    _, second, L = _cone_layer(rng)
    Ls = np.stack([np.zeros((2, 2)), L])
    layers = fit.convert.residual_free([first, second], Ls, "relu", 1e-6, _directions(rng, 1024, -np.pi, np.pi))
    assert layers is not None and fit.convert.absorber_from_units(second, "relu", linear=L) is None
    x = rng.normal(size=(256, 2))
    h = x
    for block, Ll in zip([first, second], Ls):
        h = h @ Ll.T + np.maximum(h @ block.up.T, 0) @ block.down.T
    V = models.MLPParams(np.stack([v.up for v in layers]), np.stack([v.down for v in layers]))
    got = np.asarray(jax.vmap(lambda v: models.stack(V, v, "relu", residual=False))(x))
    np.testing.assert_allclose(got, h, rtol=0, atol=1e-12 * np.abs(h).max())


def test_a_wide_stack_s_units_that_are_linear_on_their_inputs_fold_into_L_before_merging():
    """Layer 1 maps the plane into the sector of angles (0.2, 1.2); of layer 2's five units two
    are always on there, one always off and two kinked. Folded, every width-2 start equals the
    wide stack on fresh inputs (cut to width 2 unfolded, it would drop kinked or linear terms)."""
    rng = np.random.default_rng(3)
    edges = np.array([0.2, 1.2])
    first = models.MLPParams(rng.normal(size=(2, 2)), np.stack([np.cos(edges), np.sin(edges)]) * [0.7, 1.6])
    angles = np.array([0.7, 0.3, 0.7 + np.pi, 0.7 + np.pi / 2, 0.9 + np.pi / 2])  # on, on, off, kinked, kinked
    second = models.MLPParams(np.stack([np.cos(angles), np.sin(angles)], 1), rng.normal(size=(2, 5)))
    wide = [(first, np.zeros((2, 2))), (second, rng.normal(size=(2, 2)))]

    def forward(layers, x):
        for block, L in layers:
            x = x @ np.asarray(L).T + np.maximum(x @ np.asarray(block.up).T, 0) @ np.asarray(block.down).T
        return x

    folded = fit.convert.fold_stack(wide, rng.normal(size=(1024, 2)), 1e-6)
    assert [len(block.up) for block, _ in folded] == [2, 2]
    x = rng.normal(size=(256, 2))
    g = forward(wide, x)
    for V, Ls in fit.merge.stack_proposals(folded, "relu", 2, 4):
        got = forward([(models.MLPParams(V.up[i], V.down[i]), Ls[i]) for i in range(2)], x)
        np.testing.assert_allclose(got, g, rtol=0, atol=1e-12 * np.abs(g).max())


def test_expand_search_on_a_stack_keeps_the_better_block():
    """Depth 2: the expansion runs layer by layer and never returns a worse block than the
    first search (what it finds is judged by the final block's loss only)."""
    W = models.sample(KEY, 2, 2, 3, "relu", depth=2)
    kw = dict(restarts=4, steps=30, polish=fit.Polish(steps=10, screen=5, top=2), batch_size=2)
    first = fit.search(W, "relu", key=KEY, depth=2, progress=False, **kw)
    r = fit.expand.expand_search(W, "relu", key=KEY, depth=2, factor=2, proposals_per_draw=2, rounds=1,
                                 lines_restarts=4, **kw)
    rec = r.config["expand"]
    assert rec["unsolved"] == 2 and rec["improved"] <= rec["proposed"] <= 6  # 2 line rounds, 1 wide round
    assert rec["lines"]["restarts"] == 4 and rec["lines"]["rounds"] == 2 and rec["lines"]["segments"] == [128, 2048]
    assert rec["lines"]["improved"] <= rec["lines"]["proposed"] <= 4
    assert r.best_params.up.shape == (2, 2, 3, 2) and r.losses.shape == (2, 5)
    assert np.all(r.best_loss <= first.best_loss) and np.all(r.best_loss > 1e-12)


# ---------------------------------------------------------------------------------------------
# First-layer kink lines (fit.lines)


def _unit_rows(a):
    a = np.asarray(a, np.float64)
    return a / np.linalg.norm(a, axis=1, keepdims=True)


@pytest.mark.parametrize("residual", [True, False])
def test_first_layer_lines_are_the_first_layers_and_no_later_kink(residual):
    """Every first-layer hyperplane of a Gaussian depth-2 ReLU stack in d = 3, to rounding, and
    nothing else: the second layer's kink surfaces do not recur at the antipode."""
    W = models.sample(KEY, 1, 3, 5, "relu", depth=2)
    W = jax.tree.map(lambda a: a[0], W)
    found = fit.lines.first_layer_lines(lambda x: models.stack(W, x, "relu", residual=residual), 3,
                                        jax.random.key(4))
    cos = np.abs(found @ _unit_rows(W.up[0]).T)
    assert found.shape == (5, 3)
    np.testing.assert_allclose(np.sort(cos.max(0)), 1.0, rtol=0, atol=1e-12)  # each line found once
    assert np.abs(found @ _unit_rows(W.up[1]).T).max() < 1 - 1e-6  # no second-layer normal


def test_second_layer_lines_are_read_through_the_first_layer_and_give_an_exact_start():
    """A Gaussian d = 3 stack's second-layer hyperplanes, read from its kinks through its first
    layer, to rounding; with them and least squares for ``(D₂, L₂)`` the start is the stack."""
    W = jax.tree.map(lambda a: a[0], models.sample(KEY, 1, 3, 5, "relu", depth=2))
    f = lambda x: models.stack(W, x, "relu")
    first = models.MLPParams(W.up[0], W.down[0])
    found = fit.lines.kinks(f, 3, jax.random.key(4))
    lines = fit.lines.lines_of(found)
    u2, counts = fit.lines.second_layer_lines(found, first, np.eye(3), lines)
    assert len(lines) == 5 and np.all(np.diff(counts) <= 0)
    cos = np.abs(u2[:5] @ _unit_rows(W.up[1]).T)
    np.testing.assert_allclose(np.sort(cos.max(0)), 1.0, rtol=0, atol=1e-10)  # each layer-2 unit once
    wrong = models.MLPParams(jnp.stack([W.up[0], -W.up[1]]), jnp.stack([W.down[0], 0 * W.down[1]]))
    eye = jnp.stack([jnp.eye(3)] * 2)
    xs = np.asarray(jax.random.normal(jax.random.key(5), (256, 3)))
    start = fit.expand.second_layer_start(fit.Linear(wrong, eye), found, lines, xs, np.asarray(jax.vmap(f)(xs)))
    x = jax.random.normal(jax.random.key(9), (256, 3))
    want = jax.vmap(f)(x)
    got = jax.vmap(lambda v: fit.loss.candidate_fn(start, v, "relu", 2))(x)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10 * float(jnp.abs(want).max()))


def test_first_layer_from_kinks_is_the_first_layer_up_to_the_junction_gauge():
    """A Gaussian d = 3 stack's first layer ``h = x + W_down σ(W_up x)``, from its second layer's
    kinks and its lines alone: ``L₁ x + D₁ σ(ℓ x) = A h(x)`` for one ``A ∈ GL(3)``, to rounding."""
    W = jax.tree.map(lambda a: a[0], models.sample(KEY, 1, 3, 5, "relu", depth=2))
    found = fit.lines.kinks(lambda x: models.stack(W, x, "relu"), 3, jax.random.key(4), segments=512)
    lines = fit.lines.lines_of(found)
    assert len(lines) == 5
    D1, L1 = fit.lines.first_layer_from_kinks(found, lines)
    np.testing.assert_allclose(np.r_[L1.T, D1.T].T @ np.r_[L1.T, D1.T], np.eye(3), atol=1e-12)
    x = np.asarray(jax.random.normal(jax.random.key(9), (256, 3)))
    got = x @ L1.T + np.maximum(x @ lines.T, 0.0) @ D1.T
    want = np.asarray(jax.vmap(lambda v: models.skip_mlp(models.MLPParams(W.up[0], W.down[0]), v, "relu"))(x))
    A = np.linalg.lstsq(want, got, rcond=None)[0]
    assert np.linalg.svd(A, compute_uv=False).min() > 1e-3
    np.testing.assert_allclose(want @ A, got, rtol=0, atol=1e-9)


def test_fit_with_lines_residual_free_first_holds_L_at_zero_and_tries_orientations():
    """With ``L₁ = 0`` held, the restarts orient the held lines at random; of the ``2⁴``
    orientations of an absorbable (2, 4) block's lines only the absorber's fits exactly
    (another one differs from it by a linear map ``Σ_F ±D_i ℓ_iᵀ ≠ 0``)."""
    W, S = models.absorbable_sample(KEY, 1, 2, 4, "relu")
    one = jax.tree.map(lambda a: a[0], W)
    found = fit.lines.first_layer_lines(lambda x: models.skip_mlp(one, x, "relu"), 2, jax.random.key(3))
    assert found.shape == (4, 2)
    fitted, loss = fit.lines.fit_with_lines(W, found[None], np.ones((1, 4), bool), key=KEY, depth=1,
                                            inputs=fit.Inputs(num=256), restarts=64, steps=100,
                                            polish=fit.Polish(steps=200, screen=40, top=64),
                                            residual_free_first=True)
    up, loss = np.asarray(fitted.block.up[0]), np.asarray(loss[0])
    np.testing.assert_array_equal(np.asarray(fitted.linear), 0.0)  # L held at 0 on every restart
    np.testing.assert_array_equal(np.abs(up), np.abs(found)[None].repeat(64, 0))  # rows ±ℓ_i
    V_up = np.asarray(one.up) * np.where(np.isin(np.arange(4), S[0]), -1.0, 1.0)[:, None]  # the absorber's rows
    match = np.abs(found @ _unit_rows(V_up).T).argmax(1)
    assert sorted(match) == [0, 1, 2, 3]
    want = np.sign(np.sum(found * V_up[match], 1))  # the absorber's orientation of each found line
    right = np.all(np.sign(np.sum(up * found, -1)) == want, 1)
    assert right.any() and not right.all()
    assert np.all(loss[right] < 1e-24) and np.all(loss[~right] > 1e-12)


def test_fit_with_lines_makes_an_absorbable_block_exact():
    """With ``U`` on an absorbable ReLU block's lines (n = 4d, where the default search mostly
    fails) the free-``L`` fit is exact and the condition finds the absorber's ``S``."""
    W, S = models.absorbable_sample(KEY, 2, 2, 8, "relu")
    found = np.stack([fit.lines.first_layer_lines(lambda x: models.skip_mlp(jax.tree.map(lambda a: a[j], W), x, "relu"),
                                                  2, jax.random.key(j)) for j in range(2)])
    assert found.shape == (2, 8, 2)
    fitted, loss = fit.lines.fit_with_lines(W, found, np.ones((2, 8), bool), key=KEY, depth=1,
                                            inputs=fit.Inputs(num=512), restarts=4, steps=50)
    loss = np.asarray(loss)
    assert loss.shape == (2, 4) and np.all(np.diff(loss, axis=1) >= 0)  # every restart, best first
    assert np.all(loss[:, 0] < 1e-24)
    np.testing.assert_array_equal(np.asarray(fitted.block.up[:, 0]), found)  # held on the lines
    for j in range(2):
        block = models.MLPParams(fitted.block.up[j, 0], fitted.block.down[j, 0])
        V = fit.convert.absorber_from_units(block, "relu", linear=fitted.linear[j, 0])
        x = jax.random.normal(jax.random.key(9), (64, 2))
        want = jax.vmap(lambda v: models.skip_mlp(jax.tree.map(lambda a: a[j], W), v, "relu"))(x)
        got = jax.vmap(lambda v: models.mlp(V, v, "relu"))(x)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9 * float(jnp.abs(want).max()))
