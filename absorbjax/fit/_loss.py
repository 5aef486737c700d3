"""Inputs and loss: where ``ℓ(V) = mean_k ‖f_W(x_k) − g_V(x_k)‖² / ‖x_k‖²`` is measured, and ``ℓ``."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import models
from absorbjax.fit._config import Inputs, Linear, log_bounds
from absorbjax.models import Params


def decade_edges(low: float, high: float) -> np.ndarray:
    """Radius edges of the profile bins: the decades ``10^j`` between ``low`` and ``high``.

    Examples:
      >>> from absorbjax import fit
      >>> fit.decade_edges(0.03, 20).round(3).tolist()
      [0.03, 0.1, 1.0, 10.0, 20.0]
    """
    lo, hi = log_bounds(low, high)
    inner = np.arange(np.floor(lo) + 1, np.ceil(hi))
    inner = inner[(inner > lo + 1e-9) & (inner < hi - 1e-9)]
    return 10.0 ** np.concatenate([[lo], inner, [hi]])


def sample_inputs(inputs: Inputs, d: int, *, key: jax.Array, dtype, num: int | None = None):
    """Training and held-out inputs for one draw.

    Directions are uniform on the sphere ``S^{d−1}``; training radii are log-uniform on
    ``[inputs.low, inputs.high]``, held-out radii log-uniform within each decade bin of
    :func:`decade_edges`. Returns ``xs (num, d)`` and ``xh (bins, inputs.holdout, d)``.
    One normal and one uniform draw cover both sets (a single random op of each kind keeps
    compilation short). ``num`` overrides ``inputs.num``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import fit
      >>> xs, xh = fit.sample_inputs(fit.Inputs(num=100, holdout=8), 3, key=jax.random.key(0), dtype=jnp.float32)
      >>> xs.shape, xh.shape
      ((100, 3), (4, 8, 3))
    """
    num = inputs.num if num is None else num
    if not isinstance(num, (int, np.integer)) or num < 1:
        raise ValueError(f"inputs.num must be a positive integer, got {num!r}")
    lo, hi = log_bounds(inputs.low, inputs.high)
    e = np.log10(decade_edges(inputs.low, inputs.high))
    bins, per = len(e) - 1, inputs.holdout
    total = num + bins * per
    kd, kr = jax.random.split(key)
    u = jax.random.normal(kd, (total, d), dtype)
    u = u / jnp.linalg.norm(u, axis=-1, keepdims=True)
    t = jax.random.uniform(kr, (total, 1), dtype)
    lower = np.concatenate([np.full(num, lo), np.repeat(e[:-1], per)])[:, None]
    span = np.concatenate([np.full(num, hi - lo), np.repeat(np.diff(e), per)])[:, None]
    x = u * 10.0 ** (jnp.asarray(lower, dtype) + t * jnp.asarray(span, dtype))
    return x[:num], x[num:].reshape(bins, per, d)


def target_fn(params: Params, x, activation: str, depth: int, skip):
    """The residual block (``depth = 1``, skip ``A`` or ``I``) or residual stack ``f_W(x)``."""
    if depth == 1:
        return models.skip_mlp(params, x, activation, skip)
    return models.stack(params, x, activation, residual=True)


def candidate_fn(params: Params | Linear, x, activation: str, depth: int):
    """The residual-free block or stack ``g_V(x)`` (with a free linear term for :class:`Linear`)."""
    if isinstance(params, Linear):
        if depth == 1:
            return models.skip_mlp(params.block, x, activation, params.linear)
        return models.stack(params.block, x, activation, residual=True, skip=params.linear)
    if depth == 1:
        return models.mlp(params, x, activation)
    return models.stack(params, x, activation, residual=False)


def pointwise(cand: Params, xs, ys, activation: str, depth: int):
    """``‖y_k − g_V(x_k)‖² / ‖x_k‖²`` ``(K,)``."""
    pred = jax.vmap(candidate_fn, (None, 0, None, None))(cand, xs, activation, depth)
    return jnp.sum(jnp.square(ys - pred), -1) / jnp.sum(jnp.square(xs), -1)


def residual_weights(xs):
    """``1 / (‖x_k‖ √K)`` ``(K, 1)``: the residuals' scale, so that ``‖r‖² = ℓ(V)``."""
    return 1.0 / (jnp.linalg.norm(xs, axis=-1, keepdims=True) * math.sqrt(xs.shape[0]))


def residuals(cand: Params, xs, ys, activation: str, depth: int):
    """``r_k = (f(x_k) − g_V(x_k)) / (‖x_k‖ √K)`` flattened, so ``‖r‖² = ℓ(V)``."""
    pred = jax.vmap(candidate_fn, (None, 0, None, None))(cand, xs, activation, depth)
    return ((ys - pred) * residual_weights(xs)).ravel()


def loss(cand: Params, xs, ys, activation: str, depth: int):
    """``ℓ(V) = ‖r‖²`` (:func:`residuals`): the search's loss against the target's values ``ys``."""
    return jnp.sum(jnp.square(residuals(cand, xs, ys, activation, depth)))


def relative_loss(
    candidate: Params,
    params: Params,
    activation: str,
    *,
    xs: jax.Array,
    depth: int = 1,
    skip: jax.Array | None = None,
) -> jax.Array:
    """``mean_k ‖f(x_k) − g_V(x_k)‖² / ‖x_k‖²`` for one target ``f`` and one candidate ``g_V``.

    ``candidate`` = ``V`` (residual-free), ``params`` = ``W`` (residual, skip ``A`` = ``skip``
    or ``I``); ``xs`` is ``(K, d)``. Stacks (``depth > 1``) carry a leading ``L`` axis.

    Examples:
      Dropping the skip (``V = W``) misses ``x`` itself, a relative error of exactly 1:

      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import fit, models
      >>> W = models.init("gelu", 3, 5, key=jax.random.key(0))
      >>> xs, _ = fit.sample_inputs(fit.Inputs(num=64), 3, key=jax.random.key(1), dtype=jnp.float32)
      >>> round(float(fit.relative_loss(W, W, "gelu", xs=xs)), 4)
      1.0
    """
    ys = jax.vmap(target_fn, (None, 0, None, None, None))(params, xs, activation, depth, skip)
    return jnp.mean(pointwise(candidate, xs, ys, activation, depth))
