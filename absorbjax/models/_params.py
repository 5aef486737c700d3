"""The params types of the blocks, their shapes and layout, without importing JAX.

:class:`MLPParams` and :class:`GatedParams` are NamedTuples of arrays (JAX or NumPy); the NumPy
decision (:mod:`absorbjax.condition`) reads them without JAX, so this module imports only NumPy
(``from_flax`` imports JAX when called). Users reach every name here as ``models.<name>``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    import jax


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
        import jax.numpy as jnp

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
        import jax.numpy as jnp

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
    down = np.shape(params.down)
    if len(down) < 2:
        raise ValueError(f"params.down must have shape (..., d, n), got {down}")
    d, n = down[-2:]
    for field in params._fields[:-1]:
        shape = np.shape(getattr(params, field))
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
            "pass decision=condition.Decision(narrow=True).",
            NarrowBlockWarning,
            stacklevel=stacklevel,
        )
    return params
