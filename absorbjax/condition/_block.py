"""The block as the decision reads it: one value, :class:`StoredBlock` (the checked weights as
stored, the skip, the :class:`BlockContext`, and what both paths derive from them once), made by
:func:`read_block`; and each draw's options for :func:`~absorbjax.condition.find_absorbing_sets`
(:func:`per_draw`)."""

from __future__ import annotations

import dataclasses
import functools
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from absorbjax import activations
from absorbjax.condition import _reader as reader, _wide as wide
from absorbjax.condition._arith import ONE
from absorbjax.condition._validate import (
    absolute_rounding,
    decidable_activation,
    skip_matrix,
    storage_dtypes,
    storage_rtol,
    stored_weights,
)
from absorbjax.models import MLPParams


class BlockContext(NamedTuple):
    """What :func:`_decide.decide` needs besides the weights: the stored dtypes of ``W_up`` and ``W_down``
    (each array rounds in its own), the hidden bias ``b`` ``(n,)`` or ``None``, the activation name
    (or ``None``), the skip kind, the output bias ``c`` ``(d,)`` or ``None``, the activation's
    declared odd slope ``slope`` (``σ(z) − σ(−z) = slope·z``; ``None``: not declared, ``1`` without
    an activation) and the declared facts the answer rests on (``assumes``; empty for built-ins)."""

    dtypes: tuple
    bias: np.ndarray | None
    activation: str | None
    skip_kind: str
    out_bias: np.ndarray | None = None
    slope: Fraction | None = ONE
    assumes: tuple[str, ...] = ()

    @property
    def target(self) -> str:
        """What ``W_down[:,S] W_up[S,:]`` must equal, in words: ``"−I"`` or ``"−A"`` (``/c`` for an
        odd slope ``c ≠ 1``)."""
        core = "−I" if self.skip_kind == "identity" else "−A"
        return core if self.slope in (None, 1) else f"{core}/c (c = {float(self.slope):.6g})"


@dataclasses.dataclass(frozen=True, eq=False)
class StoredBlock:
    """One ungated block as both paths of the decision read it (:func:`read_block`).

    Attributes:
      up, down: ``W_up`` ``(n, d)`` and ``W_down`` ``(d, n)``: float64 below ``wide.SCREEN_MIN_N``
        units, from there on as stored (float16/32/64 or bfloat16, often memory-mapped), read in
        blocks of units through :mod:`~absorbjax.condition._reader` and never copied whole but by
        the Gram path.
      skip: ``A`` ``(d, d)``, float64.
      context: the :class:`BlockContext` (dtypes, biases, activation, declared facts).
      maxima: for a block read as stored, its per-unit maxima (:func:`reader.unit_max`: read once,
        when the weights were checked), or ``None``.

    What the paths derive from the stored arrays is computed once, when first asked for:
    :attr:`scales` (the exact power-of-two balance of every unit), :attr:`absolute` (whether some
    stored entry is zero or subnormal, where rounding is absolute) and :attr:`float64` (float64
    copies, the Gram path's).
    """

    up: np.ndarray
    down: np.ndarray
    skip: np.ndarray
    context: BlockContext
    maxima: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(n, d)``."""
        return self.up.shape

    @functools.cached_property
    def scales(self) -> reader.Scales:
        """:func:`reader.balance_scales` of the units, with the maxima read when the weights were checked."""
        return reader.balance_scales(self.up, self.down, maxima=self.maxima)

    @functools.cached_property
    def absolute(self) -> bool:
        """:func:`absolute_rounding` of ``W_up`` and of ``W_down``, read in blocks of units."""
        blocks = reader.blocks(self.shape[0], reader.BLOCK)
        dtypes = self.context.dtypes
        up, down = (storage_rtol(dt) > 0 for dt in dtypes)  # else float64 or integers: never absolute
        return (up and any(absolute_rounding(reader.as_float64(self.up[s]), dtypes[0]) for s in blocks)) or (
            down and any(absolute_rounding(reader.as_float64(self.down[:, s]), dtypes[1]) for s in blocks)
        )

    @functools.cached_property
    def float64(self) -> tuple[np.ndarray, np.ndarray]:
        """``(W_up, W_down)`` in float64 (the arrays themselves when they are float64 already)."""
        return reader.float64(self.up), reader.float64(self.down)


def read_block(params: MLPParams, activation: str | None, skip=None, bias=None, out_bias=None) -> StoredBlock:
    """One ungated block as the decision reads it, each argument checked (ValueError): ``W_up``
    ``(n, d)`` and ``W_down`` ``(d, n)`` in float64 (from ``n = wide.SCREEN_MIN_N`` on: as stored),
    ``A`` ``(d, d)`` and the :class:`BlockContext`, as one :class:`StoredBlock`."""
    act = decidable_activation(activation)
    U, D, _, maxima = stored_weights(params, stream=wide.SCREEN_MIN_N)
    A = reader.identity(U.shape[1]) if skip is None else skip_matrix(skip, U.shape[1])
    kind = "identity" if skip is None else "matrix"
    c = _bias_vector(out_bias, U.shape[1], "out_bias", "the output bias c of W_down σ(W_up x + b) + c")
    slope, assumes = ONE, ()
    if act is not None:
        entry = activations.get(act)
        slope, assumes = entry.odd_slope, entry.assumes
    b = _bias_vector(bias, U.shape[0])
    return StoredBlock(U, D, A, BlockContext(storage_dtypes(params), b, act, kind, c, slope, assumes), maxima)


def _bias_vector(bias, n: int, name="bias", what="the hidden bias b of σ(W_up x + b)") -> np.ndarray | None:
    if bias is None:
        return None
    b = np.asarray(bias)
    if b.dtype == np.bool_ or not (np.issubdtype(b.dtype, np.floating) or np.issubdtype(b.dtype, np.integer)):
        raise ValueError(f"{name} must hold real numbers, got dtype {b.dtype}")
    if b.shape != (n,):
        raise ValueError(f"{name} must be {what}, shape ({n},), got {b.shape}")
    if not np.all(np.isfinite(b)):
        raise ValueError(f"{name} contains NaN or inf")
    return b.astype(np.float64) if np.any(b != 0) else None


def per_draw(value, shape: tuple[int, ...], draws: int, name: str) -> list:
    """``value`` for each draw: ``None`` or one array of ``shape`` for all, or ``(draws, *shape)``."""
    if value is None or np.shape(value) == shape:
        return [value] * draws
    if np.shape(value) == (draws, *shape):
        return list(np.asarray(value))
    raise ValueError(f"{name} must have shape {shape} or {(draws, *shape)}, got {np.shape(value)}")
