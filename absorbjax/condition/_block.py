"""The block as the decision reads it: the checked weights, skip and biases of one ungated block
(:func:`read_block`), the :class:`BlockContext` the decision needs besides the weights, and each
draw's options for :func:`~absorbjax.condition.find_absorbing_sets` (:func:`per_draw`)."""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np

from absorbjax import activations
from absorbjax.condition import _large as large, _stored as stored
from absorbjax.condition._arith import ONE
from absorbjax.condition._inputs import decidable_activation, skip_matrix, storage_dtypes, stored_weights
from absorbjax.models import MLPParams


class BlockContext(NamedTuple):
    """What :func:`_decide.decide` needs besides the weights: the stored dtypes of ``W_up`` and ``W_down``
    (each array rounds in its own), the hidden bias ``b`` ``(n,)`` or ``None``, the activation name
    (or ``None``), the skip kind, the output bias ``c`` ``(d,)`` or ``None``, the activation's
    declared odd slope ``slope`` (``σ(z) − σ(−z) = slope·z``; ``None``: not declared, ``1`` without
    an activation), the declared facts the answer rests on (``assumes``; empty for built-ins) and,
    for a block read as stored, its per-unit maxima (``maxima``, :func:`stored.unit_max`: read once,
    when the weights were checked)."""

    dtypes: tuple
    bias: np.ndarray | None
    activation: str | None
    skip_kind: str
    out_bias: np.ndarray | None = None
    slope: Fraction | None = ONE
    assumes: tuple[str, ...] = ()
    maxima: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def target(self) -> str:
        """What ``W_down[:,S] W_up[S,:]`` must equal, in words: ``"−I"`` or ``"−A"`` (``/c`` for an
        odd slope ``c ≠ 1``)."""
        core = "−I" if self.skip_kind == "identity" else "−A"
        return core if self.slope in (None, 1) else f"{core}/c (c = {float(self.slope):.6g})"


def read_block(params: MLPParams, activation: str | None, skip=None, bias=None, out_bias=None):
    """One ungated block as the decision reads it: ``W_up`` ``(n, d)`` and ``W_down`` ``(d, n)`` in
    float64 (from ``n = large.SCREEN_MIN_N`` on: as stored, float16/32/64 or bfloat16, often
    memory-mapped; :func:`_decide.decide` reads them in blocks), ``A`` ``(d, d)`` and the :class:`BlockContext`,
    each argument checked (ValueError)."""
    act = decidable_activation(activation)
    U, D, _, maxima = stored_weights(params, stream=large.SCREEN_MIN_N)
    A = stored.identity(U.shape[1]) if skip is None else skip_matrix(skip, U.shape[1])
    kind = "identity" if skip is None else "matrix"
    c = _bias_vector(out_bias, U.shape[1], "out_bias", "the output bias c of W_down σ(W_up x + b) + c")
    slope, assumes = ONE, ()
    if act is not None:
        entry = activations.get(act)
        slope, assumes = entry.odd_slope, entry.assumes
    b = _bias_vector(bias, U.shape[0])
    return U, D, A, BlockContext(storage_dtypes(params), b, act, kind, c, slope, assumes, maxima)


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
