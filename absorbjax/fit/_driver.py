"""The driver: :func:`search` validates, lays the draws out, maps one draw over all, assembles."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from absorbjax.fit import _config, _draw as draw, _drawmap as drawmap
from absorbjax.fit._config import Problem, Run, Solver
from absorbjax.fit._loss import decade_edges
from absorbjax.fit._result import SearchConfig, SearchResult, assemble, unbatch
from absorbjax.models import Params


def search(
    params: Params,
    activation: str,
    *,
    key: jax.Array,
    problem: Problem = Problem(),
    solver: Solver = Solver(),
    run: Run = Run(),
) -> SearchResult:
    """Search for residual-free blocks ``g_V`` that reproduce residual blocks ``f_W``.

    What is searched for comes as a :class:`Problem` (skip, depth, width, linear, inputs), how each
    draw is searched as a :class:`Solver` (restarts, steps, init, optimizer, polish, tol, hops) and how
    the search executes as a :class:`Run` (batch_size, chunk_size, mesh, progress, checkpoint).
    Each is one object, built by keyword: ``search(W, "relu", key=k, problem=Problem(depth=2),
    solver=Solver(restarts=8), run=Run(progress=False))``.

    Args:
      params: residual block weights ``W`` (``MLPParams`` ``(W_up (n,d), W_down (d,n))`` or
        ``GatedParams``), optionally with a leading draws axis; for ``depth=L`` each field has
        an ``L`` axis after the draws axis (``models.stack`` layout).
      activation: registered name (``σ``, or the gate ``g`` for gated blocks); its registry entry
        (function included) is what the compiled step specialises on.
      key: base PRNG key; draw ``i`` uses ``fold_in(key, i)``.
      problem: a :class:`Problem` (its fields are documented there; ``depth=L`` wants the
        ``L`` axis in ``params``).
      solver: a :class:`Solver` (its fields are documented there).
      run: a :class:`Run` (its fields are documented there).

    Returns a :class:`SearchResult`. Thm 8 (ReLU) and Thm 10 (GELU) say when an exact absorber
    exists; Props 5 and 6 and Cor 11 when none does.

    Examples:
      Two absorbable ReLU blocks (Thm 8), each found to rounding error in float64 from random init:

      >>> import jax
      >>> from absorbjax import fit, models
      >>> with jax.enable_x64(True):
      ...     W, _ = models.planted_sample("relu", 2, 4, key=jax.random.key(0), draws=2)
      ...     r = fit.search(
      ...         W, "relu", key=jax.random.key(1), solver=fit.Solver(restarts=8), run=fit.Run(progress=False)
      ...     )
      >>> r.solved().tolist(), bool(r.best_loss.max() < 1e-20)
      ([True, True], True)
    """
    _config.check_options(problem, solver, run)
    return _run(_config.validate(params, activation, problem=problem, solver=solver), key, run)


def _run(setup: _config.Setup, key: jax.Array, run: Run) -> SearchResult:
    """The validated search of :func:`search`: its draws mapped in batches, assembled."""
    cfg, target = setup.cfg, setup.target
    dtype = jnp.dtype(target.down.dtype)
    record = setup.record()
    per_draw = draw.bytes_per_draw(cfg, len(target._fields), dtype.itemsize)
    lay = drawmap.layout(setup.draws, per_draw, batch_size=run.batch_size, chunk_size=run.chunk_size, mesh=run.mesh)
    key_data, _ = drawmap.split_key(key)
    out = drawmap.map_draws(
        draw.one_draw,
        (cfg, setup.optimizer),
        key,
        (target, setup.skip, setup.given),
        draws=setup.draws,
        layout=lay,
        record={**record, "activation_code": drawmap.code_identity(cfg.activation.fn)},
        checkpoint=run.checkpoint,
        progress=run.progress,
        desc=f"search {cfg.activation.name}",
    )
    config = SearchConfig(
        **{**record, "polish": cfg.polish},
        batch_size=lay.batch_size,
        chunk_size=lay.chunk_size,
        devices=lay.devices,
        dtype=dtype.name,
        key=tuple(key_data.tolist()),
        jax=jax.__version__,
        single=setup.single,
    )
    result = assemble(out, type(target), decade_edges(cfg.low, cfg.high), config)
    return unbatch(result) if setup.single else result
