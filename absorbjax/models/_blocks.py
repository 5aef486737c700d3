"""The blocks: ``mlp``, ``skip_mlp`` and ``stack`` on one input ``x`` of shape ``(d,)``, and
Lemma 4 (:func:`reduce_skip`). The params types they take, and their layout checks, are defined
without JAX in ``models/_params.py`` and exported by :mod:`absorbjax.models`. The shape and
activation conventions are the package's (:mod:`absorbjax.models`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from absorbjax import activations
from absorbjax.models._params import GatedParams, MLPParams, Params, dims


def _check(params: Params, x: jax.Array, activation: str) -> activations.Activation:
    act = activations.get(activation)
    want = GatedParams if act.gated else MLPParams
    if not isinstance(params, want):
        raise ValueError(f"activation {act.name!r} needs {want.__name__}, got {type(params).__name__}")
    if jnp.ndim(params.down) != 2:  # one block; draws (B, d, n) go through jax.vmap
        raise ValueError(f"params.down must be (d, n), got {jnp.shape(params.down)}: stacks: models.stack, depth=L")
    d, _ = dims(params)
    if jnp.shape(x) != (d,):
        raise ValueError(f"x must have shape ({d},) (one example; vmap for batches), got {jnp.shape(x)}")
    return act


def _hidden(params: Params, x: jax.Array, act: activations.Activation, bias: dict | None) -> jax.Array:
    def lin(field):
        z = getattr(params, field) @ x
        return z if bias is None else z + bias[field]

    return act.fn(lin("gate")) * lin("value") if act.gated else act.fn(lin("up"))


def hidden(params: Params, x: jax.Array, activation: str) -> jax.Array:
    """The hidden units ``σ(V_up x)`` (gated: ``g(V_gate x) ⊙ V_value x``), shape ``(n,)``: what
    ``V_down`` multiplies in :func:`mlp`, so ``mlp(params, x, σ) = params.down @ hidden(params, x, σ)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import models
      >>> params = models.init("relu", 2, 3, key=jax.random.key(0))
      >>> x = jnp.array([1.0, -2.0])
      >>> bool(jnp.allclose(params.down @ models.hidden(params, x, "relu"), models.mlp(params, x, "relu")))
      True
    """
    return _hidden(params, x, _check(params, x, activation), None)


def mlp(params: Params, x: jax.Array, activation: str, *, bias: dict | None = None) -> jax.Array:
    """Residual-free block ``V_down σ(V_up x)`` (or its gated form); ``x: (d,)`` → ``(d,)``.

    Args:
      params: :class:`MLPParams` (``V_up (n, d)``, ``V_down (d, n)``) for an ungated activation,
        :class:`GatedParams` for a gated one (``V_down (g(V_gate x) ⊙ V_value x)``).
      x: one input, shape ``(d,)``; ``jax.vmap`` for batches.
      activation: registered name (:mod:`absorbjax.activations`), static under ``jit``.
      bias: optional biases keyed like the params' fields: ``{"up": b (n,), "down": c (d,)}``
        (gated: ``"gate"``, ``"value"``, ``"down"``) for ``V_down σ(V_up x + b) + c``; the paper's
        blocks have none. :mod:`absorbjax.nn` modules run this same function.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import models
      >>> params = models.init("gelu", 2, 4, key=jax.random.key(0))
      >>> models.mlp(params, jnp.ones(2), "gelu").shape
      (2,)
      >>> xs = jnp.ones((5, 2))  # a batch: vmap over x, not over the params
      >>> jax.vmap(models.mlp, (None, 0, None))(params, xs, "gelu").shape
      (5, 2)
    """
    act = _check(params, x, activation)
    out = params.down @ _hidden(params, x, act, bias)
    return out if bias is None else out + bias["down"]


def skip_mlp(
    params: Params, x: jax.Array, activation: str, skip: jax.Array | None = None, *, bias: dict | None = None
) -> jax.Array:
    """Residual block ``A x + W_down σ(W_up x)``; ``skip`` is ``A`` ``(d, d)``, ``None`` = ``I``;
    ``bias`` as in :func:`mlp`.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import models
      >>> params = models.init("swiglu", 2, 4, key=jax.random.key(0))
      >>> x = jnp.array([1.0, -2.0])
      >>> bool(jnp.allclose(models.skip_mlp(params, x, "swiglu") - models.mlp(params, x, "swiglu"), x))
      True
      >>> bool(jnp.allclose(models.skip_mlp(params, x, "swiglu", 2 * jnp.eye(2)),
      ...                   2 * x + models.mlp(params, x, "swiglu")))
      True

    References:
      Lemma 4 (an invertible ``A`` reduces to ``I``: :func:`reduce_skip`).
    """
    out = mlp(params, x, activation, bias=bias)
    if skip is None:
        return x + out
    d = x.shape[0]
    if jnp.shape(skip) != (d, d):
        raise ValueError(f"skip must have shape ({d}, {d}), got {jnp.shape(skip)}")
    return skip @ x + out


def stack(
    params: Params, x: jax.Array, activation: str, *, residual: bool = True, skip: jax.Array | None = None
) -> jax.Array:
    """Depth-``L`` composition of blocks; ``params`` carry a leading ``L`` axis (``lax.scan``).

    ``residual=True`` composes ``x ↦ x + W_down σ(W_up x)`` (with ``skip`` ``(L, d, d)``:
    ``x ↦ A_l x + W_down σ(W_up x)`` in layer ``l``), ``False`` composes ``mlp``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import models
      >>> layers = models.init("relu", 2, 4, key=jax.random.key(0), depth=3)
      >>> layers.up.shape  # (L, n, d)
      (3, 4, 2)
      >>> x = jnp.array([0.5, 1.0])
      >>> h = x
      >>> for l in range(3):
      ...     h = models.skip_mlp(jax.tree.map(lambda a: a[l], layers), h, "relu")
      >>> bool(jnp.allclose(models.stack(layers, x, "relu"), h))
      True

    References:
      Cor 7 (residual-free gated stacks vanish to order ``2^L`` at the origin).
    """
    if jnp.ndim(params.down) != 3:
        raise ValueError(f"stack params need a leading depth axis: params.down (L, d, n), got {jnp.shape(params.down)}")
    d, _ = dims(params)
    if skip is not None:
        if not residual:
            raise ValueError("skip needs residual=True")
        if jnp.shape(skip) != (params.down.shape[0], d, d):
            raise ValueError(f"skip must have shape (L, d, d) = {(params.down.shape[0], d, d)}, got {jnp.shape(skip)}")

    def layer(h, p):
        block, A = p
        out = skip_mlp(block, h, activation, A) if residual else mlp(block, h, activation)
        return out, None

    # The carry takes the promoted dtype one block would return (float32 x, float64 weights → float64).
    x = jnp.asarray(x, jnp.result_type(x, *jax.tree.leaves(params)))
    return lax.scan(layer, x, (params, skip))[0]


def reduce_skip(params: Params, skip: jax.Array, *, max_cond: float | None = None) -> Params:
    """Lemma 4: ``A x + D σ(U x) = A (x + A⁻¹D σ(U x))``; returns the params with ``down = A⁻¹ D``.

    So ``skip_mlp(params, x, act, A) == A @ skip_mlp(reduce_skip(params, A), x, act)`` and a
    residual-free ``V`` absorbs the ``A``-block iff ``(V_up, A⁻¹ V_down)`` absorbs the reduced one.
    ``skip`` is ``A``, ``(d, d)`` (or ``(..., d, d)`` matching leading axes of ``params``). Runs
    eagerly: a non-square ``A`` or one with condition number above ``max_cond`` (default
    ``1/√eps`` of its dtype: 6.7e7 in float64) raises ``ValueError`` instead of returning garbage.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import models
      >>> with jax.enable_x64(True):
      ...     params = models.init("gelu", 2, 4, key=jax.random.key(0))
      ...     A = jnp.array([[2.0, 1.0], [0.0, 1.0]])
      ...     x = jnp.array([0.3, -1.2])
      ...     lhs = models.skip_mlp(params, x, "gelu", A)
      ...     rhs = A @ models.skip_mlp(models.reduce_skip(params, A), x, "gelu")
      ...     print(bool(jnp.abs(lhs - rhs).max() < 1e-14))
      True
      >>> models.reduce_skip(models.init("gelu", 2, 4, key=jax.random.key(0)), jnp.zeros((2, 2)))
      Traceback (most recent call last):
      ValueError: skip is singular or ill-conditioned (condition number inf > max_cond 2.9e+03); Lemma 4 needs an invertible skip

    References:
      Lemma 4 (the condition becomes ``W_down[:,S] W_up[S,:] = −A``).
    """
    d, _ = dims(params)
    A = jnp.asarray(skip)
    if A.ndim < 2 or A.shape[-2:] != (d, d):
        raise ValueError(f"skip must have shape (..., {d}, {d}) to match params (d={d}), got {A.shape}")
    if isinstance(A, jax.core.Tracer):
        raise ValueError("reduce_skip checks the skip's conditioning eagerly; call it outside jit/vmap")
    max_cond = 1.0 / np.sqrt(np.finfo(A.dtype).eps) if max_cond is None else max_cond
    cond = np.asarray(jnp.linalg.cond(A))
    bad = ~np.isfinite(cond) | (cond > max_cond)
    if np.any(bad):
        worst = np.max(np.where(np.isfinite(cond), cond, np.inf))
        raise ValueError(
            f"skip is singular or ill-conditioned (condition number {worst:.3g} > max_cond "
            f"{max_cond:.3g}); Lemma 4 needs an invertible skip"
        )
    return params._replace(down=jnp.linalg.solve(A, params.down))
