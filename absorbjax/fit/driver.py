"""The driver: :func:`search` validates, lays the draws out, maps one draw over all, assembles."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from absorbjax.fit import config as _config, draw, drawmap
from absorbjax.fit.config import Inputs, Polish
from absorbjax.fit.loss import decade_edges
from absorbjax.fit.result import SearchResult, assemble
from absorbjax.models import Params

__all__ = ["search"]


def search(
    params: Params,
    activation: str,
    *,
    key: jax.Array,
    skip: jax.Array | None = None,
    depth: int = 1,
    width: int | None = None,
    linear: bool = False,
    restarts: int = 32,
    steps: int = 200,
    inputs: Inputs = Inputs(),
    init: str | Params = "random",
    optimizer: optax.GradientTransformation | None = None,
    polish: bool | Polish = True,
    tol: float | None = None,
    batch_size: int | None = None,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
) -> SearchResult:
    """Search for residual-free blocks ``g_V`` that reproduce residual blocks ``f_W``.

    Args:
      params: residual block weights ``W`` (``MLPParams`` ``(W_up (n,d), W_down (d,n))`` or
        ``GatedParams``), optionally with a leading draws axis; for ``depth=L`` each field has
        an ``L`` axis after the draws axis (``models.stack`` layout).
      activation: registered name (``σ``, or the gate ``g`` for gated blocks); static.
      key: base PRNG key; draw ``i`` uses ``fold_in(key, i)``.
      skip: linear skip ``A`` ``(d, d)`` or ``(draws, d, d)`` (``None``: ``A = I``); depth 1 only.
      depth: number of layers ``L`` of both the residual stack and the candidate stack.
      width: candidate width ``m ≥ n`` (default ``n``).
      linear: fit ``L x + V_down σ(V_up x)`` with a free linear term ``L`` per layer (a
        :class:`Linear` candidate, ``L`` starting at 0) instead of a residual-free block: the
        class where every unit's orientation fits (:func:`absorbjax.fit.expand.expand_search`
        then decides the orientation exactly). ``best_linear`` holds ``L``.
      restarts: independent initialisations per draw.
      steps: first-phase optimiser steps (the default 200 is a short Adam warm-up; for small
        candidates the Gauss–Newton polish does most of the work).
      inputs: an :class:`Inputs` (training and held-out inputs per draw).
      init: ``"random"`` (the honest search: Gaussian weights with variance ``1/fan_in``, every
        other restart rescaled to the target's per-field Frobenius norm; nothing else about the
        target is used), ``"warm"`` (the target's ``W_up``/``W_gate`` with random row sign flips,
        widened with random units), or candidate params with leading ``(restarts, ...)`` or
        ``(draws, restarts, ...)`` axes (``linear=True``: a :class:`Linear` of such params and
        ``L``); non-finite entries make that restart fail, nothing else.
      optimizer: first-phase ``optax.GradientTransformation`` (default
        :func:`default_optimizer` ``(steps)``: Adam, cosine decay 1e-2 → 1e-4).
      polish: ``True`` (the default :class:`Polish`: Gauss–Newton for candidates with at most
        1024 parameters, else L-BFGS; 300 iterations, the first 40 on every restart, the rest on
        the best 8), a :class:`Polish`, or ``False``.
      tol: loss below which a draw counts as solved (default 1e-20 in float64, 1e-10 in
        float32); below :func:`min_tol` of the dtype it is an error, not a claim.
      batch_size: draws vmapped together per device in one jitted call (default: as many as
        fit a fixed memory budget, at most ``draws``); memory stays bounded at any number of
        draws. Results depend on it only through floating-point rounding.
      chunk_size: draws per progress update and checkpoint file, a multiple of
        ``batch_size`` × devices (default: about 20 chunks). Results do not depend on it,
        nor on the number of devices.
      mesh: a ``jax.sharding.Mesh`` with a ``"draws"`` axis (default: all devices when there are
        several). Multi-host: call ``jax.distributed.initialize()`` first; every process runs
        the same call.
      progress: show a tqdm bar advanced between chunks.
      checkpoint: directory; finished chunks are written there atomically and a rerun with the
        same arguments resumes from them (a directory from a different target, key or setting
        is refused; a custom ``optimizer`` is recorded only as "custom", so keep it the same).

    Returns a :class:`SearchResult`. Thm 8 (ReLU) and Thm 10 (GELU) say when an exact absorber
    exists; Props 5 and 6 and Cor 11 when none does.

    Examples:
      Two absorbable ReLU blocks (Thm 8), each found to rounding error in float64 from random init:

      >>> import jax
      >>> from absorbjax import fit, models
      >>> with jax.enable_x64(True):
      ...     W, _ = models.absorbable_sample("relu", 2, 4, key=jax.random.key(0), draws=2)
      ...     r = fit.search(W, "relu", key=jax.random.key(1), restarts=8, progress=False)
      >>> r.solved().tolist(), bool(r.best_loss.max() < 1e-20)
      ([True, True], True)
    """
    options = dict(skip=skip, depth=depth, width=width, restarts=restarts, steps=steps, inputs=inputs, init=init)
    setup = _config.validate(params, activation, optimizer=optimizer, polish=polish, tol=tol, linear=linear, **options)
    return _run(
        setup, key, batch_size=batch_size, chunk_size=chunk_size, mesh=mesh, checkpoint=checkpoint, progress=progress
    )


def _run(setup: _config.Setup, key: jax.Array, *, batch_size, chunk_size, mesh, checkpoint, progress) -> SearchResult:
    """The validated search of :func:`search`: its draws mapped in batches, assembled."""
    cfg, target = setup.cfg, setup.target
    dtype = jnp.dtype(target.down.dtype)
    record = setup.record()
    per_draw = draw.bytes_per_draw(cfg, len(target._fields), dtype.itemsize)
    lay = drawmap.layout(setup.draws, per_draw, batch_size=batch_size, chunk_size=chunk_size, mesh=mesh)
    key_data, _ = drawmap.split_key(key)
    out = drawmap.map_draws(
        draw.one_draw,
        (cfg, setup.optimizer),
        key,
        (target, setup.skip, setup.given),
        draws=setup.draws,
        layout=lay,
        record=record,
        checkpoint=checkpoint,
        progress=progress,
        desc=f"search {cfg.activation.name}",
    )
    config = {
        **record,
        "batch_size": lay.batch_size,
        "chunk_size": lay.chunk_size,
        "devices": lay.devices,
        "dtype": dtype.name,
        "key": key_data.tolist(),
        "jax": jax.__version__,
    }
    if setup.single:
        config["single"] = True
    return assemble(out, type(target), decade_edges(cfg.low, cfg.high), config)
