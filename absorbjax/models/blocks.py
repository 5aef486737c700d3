"""The blocks: ``mlp``, ``skip_mlp`` and ``stack`` on one input ``x`` of shape ``(d,)``, the
params types they take, and Lemma 4 (:func:`reduce_skip`). The shape and activation conventions
are the package's (:mod:`absorbjax.models`)."""

from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from absorbjax import activations

__all__ = [
    "MLPParams",
    "GatedParams",
    "Params",
    "mlp",
    "skip_mlp",
    "stack",
    "reduce_skip",
    "dims",
    "flax_kernel",
    "check_layout",
    "NarrowBlockWarning",
]


def flax_kernel(layer, name: str, shape: tuple[int, int] | None = None) -> np.ndarray:
    """The weight of one flax ``nnx.Linear`` (or its kernel given as an array) in PyTorch layout.

    Flax stores ``kernel (in, out)``; the blocks here take ``(out, in)``, so the kernel is
    transposed. ``shape`` is the expected ``(out, in)``. A nonzero ``bias`` is refused: the
    params hold weights only, and dropping a bias silently would change the block.
    """
    kernel = getattr(layer, "kernel", layer)
    kernel = np.asarray(np.asarray(kernel)[...] if isinstance(kernel, (list, tuple)) else kernel[...])
    if kernel.ndim != 2:
        raise ValueError(f"{name} must be an nnx.Linear or a 2-D kernel (in, out), got shape {kernel.shape}")
    bias = getattr(layer, "bias", None)
    if bias is not None and np.any(np.asarray(bias[...]) != 0):
        raise ValueError(
            f"{name} has a nonzero bias: build the layers with use_bias=False, or use absorbjax.nn "
            "(bias=True keeps biases beside the params) and pass the hidden bias to find_absorbing_set(bias=...)"
        )
    if shape is not None and kernel.T.shape != shape:
        raise ValueError(
            f"{name}.kernel must have shape {shape[::-1]} (flax layout (in, out)), got {kernel.shape}; "
            "the layers are (up, down) = (nnx.Linear(d, n), nnx.Linear(n, d))"
        )
    return kernel.T


def _flax_dims(up, down) -> tuple[int, int]:
    """``(d, n)`` from the kernels of an up layer ``(d, n)`` and a down layer ``(n, d)``."""
    up_k, down_k = (flax_kernel(x, name) for x, name in ((up, "up"), (down, "down")))
    n, d = up_k.shape
    if down_k.shape != (d, n):
        raise ValueError(
            f"down.kernel must have shape ({n}, {d}) (flax layout (in, out)) to follow up.kernel ({d}, {n}); "
            f"got {down_k.T.shape}"
        )
    return d, n


class MLPParams(NamedTuple):
    """Ungated block weights: ``up`` = ``W_up`` ``(n, d)``, ``down`` = ``W_down`` ``(d, n)``.

    PyTorch layout, rows are hidden units. Flax's ``nnx.Linear`` stores ``(in, out)``, the
    transpose: convert a pair of layers with :meth:`from_flax`, not by passing their kernels here
    (they would be read as a block with ``d`` and ``n`` swapped).
    """

    up: jax.Array
    down: jax.Array

    @classmethod
    def from_flax(cls, up, down) -> MLPParams:
        """The params of ``x ↦ down(σ(up(x)))`` for flax layers ``up = nnx.Linear(d, n)`` and
        ``down = nnx.Linear(n, d)`` without biases (or their kernels, ``(d, n)`` and ``(n, d)``).

        Examples:
          >>> from flax import nnx
          >>> from absorbjax import models
          >>> up = nnx.Linear(3, 8, use_bias=False, rngs=nnx.Rngs(0))
          >>> down = nnx.Linear(8, 3, use_bias=False, rngs=nnx.Rngs(1))
          >>> params = models.MLPParams.from_flax(up, down)
          >>> params.up.shape, params.down.shape  # W_up (n, d), W_down (d, n)
          ((8, 3), (3, 8))
          >>> models.MLPParams.from_flax(up, up)
          Traceback (most recent call last):
          ValueError: down.kernel must have shape (8, 3) (flax layout (in, out)) to follow up.kernel (3, 8); got (3, 8)
        """
        _flax_dims(up, down)
        return cls(jnp.asarray(flax_kernel(up, "up")), jnp.asarray(flax_kernel(down, "down")))


class GatedParams(NamedTuple):
    """Gated block weights ``W_down (g(W_gate x) ⊙ W_value x)``.

    ``gate`` = ``W_gate`` ``(n, d)`` (through the gate ``g``; HF ``gate_proj``),
    ``value`` = ``W_value`` ``(n, d)`` (linear branch; HF ``up_proj``),
    ``down`` = ``W_down`` ``(d, n)``.
    """

    gate: jax.Array
    value: jax.Array
    down: jax.Array

    @classmethod
    def from_flax(cls, gate, value, down) -> GatedParams:
        """The params of ``x ↦ down(g(gate(x)) ⊙ value(x))`` for flax layers ``gate``, ``value``
        ``= nnx.Linear(d, n)`` and ``down = nnx.Linear(n, d)`` without biases (or their kernels)."""
        d, n = _flax_dims(gate, down)
        layers = ((gate, "gate", (n, d)), (value, "value", (n, d)), (down, "down", (d, n)))
        return cls(*(jnp.asarray(flax_kernel(layer, name, shape)) for layer, name, shape in layers))


Params = MLPParams | GatedParams


def dims(params: Params) -> tuple[int, int]:
    """``(d, n)`` of one block, checking that the weight shapes agree.

    Leading axes (draws, layers) are allowed and ignored; a mismatch raises ``ValueError``
    naming the offending field and the expected shape.

    Examples:
      >>> import numpy as np
      >>> from absorbjax import models
      >>> models.dims(models.MLPParams(up=np.zeros((10, 5, 3)), down=np.zeros((10, 3, 5))))
      (3, 5)
      >>> models.dims(models.MLPParams(up=np.zeros((5, 3)), down=np.zeros((3, 4))))
      Traceback (most recent call last):
      ValueError: params.up must have shape (..., 4, 3) to match params.down (3, 4) (n=4, d=3); got (5, 3)
    """
    if not isinstance(params, (MLPParams, GatedParams)):
        raise ValueError(f"params must be MLPParams or GatedParams, got {type(params).__name__}")
    down = jnp.shape(params.down)
    if len(down) < 2:
        raise ValueError(f"params.down must have shape (..., d, n), got {down}")
    d, n = down[-2:]
    for field in params._fields[:-1]:
        shape = jnp.shape(getattr(params, field))
        if len(shape) < 2 or shape[-2:] != (n, d):
            raise ValueError(
                f"params.{field} must have shape (..., {n}, {d}) to match params.down "
                f"{down} (n={n}, d={d}); got {shape}"
            )
    return d, n


class NarrowBlockWarning(UserWarning):
    """A block narrower than its input (``n < d``): often flax kernels ``(in, out)`` passed as
    PyTorch-layout params; see :func:`check_layout`."""


def check_layout(params: Params, *, narrow: bool = False, stacklevel: int = 3) -> Params:
    """``params`` unchanged, after a :class:`NarrowBlockWarning` when the block is narrower than
    its input (``n < d``) and ``narrow`` is false.

    The params are PyTorch layout, ``W_up (n, d)``; flax's ``nnx.Linear`` stores ``kernel (in, out)``,
    so kernels of ``nnx.Linear(d, n)``, ``nnx.Linear(n, d)`` passed as ``MLPParams(up, down)`` read as a
    block of width ``d`` on inputs of dimension ``n`` — narrow when the real block is wide. Callers
    that decide or draw conclusions from a block (``condition``) call this on the user's params;
    ``narrow=True`` says the narrow block is meant. ``stacklevel`` is passed to
    :func:`warnings.warn` (3: the warning points at the caller of the function that calls this).
    Leading axes (draws, layers) are allowed; shapes are checked by :func:`dims`.

    Examples:
      >>> import warnings
      >>> import numpy as np
      >>> from absorbjax import models
      >>> up_kernel, down_kernel = np.ones((8, 32)), np.ones((32, 8))  # nnx.Linear(8, 32), (32, 8)
      >>> with warnings.catch_warnings(record=True) as caught:
      ...     warnings.simplefilter("always")
      ...     _ = models.check_layout(models.MLPParams(up_kernel, down_kernel))
      >>> print(caught[0].message)  # doctest: +ELLIPSIS
      MLPParams read as W_up (n, d) = (8, 32): width n = 8 < input d = 32. ... MLPParams.from_flax(...) ...
      >>> models.dims(models.MLPParams.from_flax(up_kernel, down_kernel))  # (d, n): 8 inputs, width 32
      (8, 32)
    """
    d, n = dims(params)
    if n < d and not narrow:
        kind = type(params).__name__
        fields = ", ".join(params._fields)
        warnings.warn(
            f"{kind} read as W_up (n, d) = ({n}, {d}): width n = {n} < input d = {d}. The params are "
            f"PyTorch layout (out, in); flax nnx.Linear kernels are (in, out): for layers nnx.Linear({n}, {d}) "
            f"and nnx.Linear({d}, {n}) (a block of width {d} on inputs of dimension {n}) use "
            f"{kind}.from_flax(...) with the layers or kernels ({fields}). If the narrow block is meant, "
            "pass narrow=True.",
            NarrowBlockWarning,
            stacklevel=stacklevel,
        )
    return params


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
