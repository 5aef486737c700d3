"""Validated inputs of the decision: weights in float64 (or as stored, for the wide path), the skip
``A``, the tolerances and the activation (rule (★) itself is :mod:`absorbjax.condition._rule`, the
hypotheses of Thm 8/10 :mod:`absorbjax.condition._hypotheses`)."""

from __future__ import annotations

import numpy as np

from absorbjax import activations
from absorbjax._dtypes import finfo, is_float, is_integer
from absorbjax.condition._arith import EPS
from absorbjax.condition._reader import as_float64, unit_max
from absorbjax.models import GatedParams, MLPParams

DEFAULT_RTOL = 1e3 * EPS  # slack for weights that were themselves computed (a pseudo-inverse)
_SCALE_MAX = 1e120  # max|W_down[:,i]|·max|W_up[i,:]| above this would overflow the Gram matrix
_SKIP_RANGE = (2.0**-400, 2.0**400)  # max|A| outside: refused (rescale A and W_down together)


# ---------------------------------------------------------------------------------------------
# Inputs


def float_weights(params, *, batched: bool) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    """``(W_up, W_down, dtype)`` checked (shapes, real and finite entries, a range float64 decides in),
    as float64 copies (:func:`stored.as_float64`, the one reader's upcast); ``dtype`` the stored one."""
    up, down, dtype = _checked(params, batched)
    U, D = as_float64(up), as_float64(down)
    if not (np.all(np.isfinite(U)) and np.all(np.isfinite(D))):
        raise ValueError("params contain NaN or inf")
    _in_range(np.max(np.abs(U), axis=-1), np.max(np.abs(D), axis=-2), *U.shape[-2:])
    return U, D, dtype


def stored_weights(params, *, stream: int):
    """``(W_up, W_down, dtype, maxima)`` of one block checked as :func:`float_weights` checks it; a float
    block of ``n ≥ stream`` units comes back as stored (float16/32/64, ``bfloat16``; a memory map stays
    one), every check made in one pass over blocks of units (no copy of a matrix is made), with the
    per-unit maxima that pass read (:func:`stored.unit_max`, ``(n,)`` each, for the decision to reuse);
    any other block as :func:`float_weights` gives it, ``maxima`` ``None``."""
    up, down, dtype = _checked(params, False)
    if up.shape[0] < stream or not all(_streamable(a.dtype) for a in (up, down)):
        return *float_weights(params, batched=False), None
    top_up, top_down = unit_max(up, down)  # NaN or inf where a stored entry is
    if not (np.all(np.isfinite(top_up)) and np.all(np.isfinite(top_down))):
        raise ValueError("params contain NaN or inf")
    _in_range(top_up, top_down, *up.shape)
    return up, down, dtype, (top_up, top_down)


def _checked(params, batched: bool) -> tuple[np.ndarray, np.ndarray, np.dtype]:
    """``(W_up, W_down, dtype)`` as given, their types, shapes and dtype checked (ValueError)."""
    if isinstance(params, GatedParams):
        raise ValueError(
            "params are GatedParams: Thm 8/10 is for ungated blocks; gated blocks are decided by "
            "Prop 5 (ReGLU) and Prop 6 (SwiGLU, GeGLU)"
        )
    if not isinstance(params, MLPParams):
        raise ValueError(f"params must be MLPParams, got {type(params).__name__}")
    up, down = np.asarray(params.up), np.asarray(params.down)
    lead = 1 if batched else 0
    if up.ndim != 2 + lead or down.ndim != 2 + lead:
        if not batched and up.ndim == 3:
            raise ValueError(f"params have a leading draws axis (up {up.shape}); use find_absorbing_sets")
        want = "(draws, n, d) and (draws, d, n)" if batched else "(n, d) and (d, n)"
        raise ValueError(f"params.up and params.down must have shapes {want}, got {up.shape}, {down.shape}")
    n, d = up.shape[-2:]
    if n == 0 or d == 0:
        raise ValueError(f"params must have n >= 1 hidden units and d >= 1 inputs, got up {up.shape}")
    if down.shape[-2:] != (d, n) or down.shape[:-2] != up.shape[:-2]:
        raise ValueError(f"params.down must have shape {up.shape[:-2] + (d, n)} to match params.up {up.shape}")
    try:
        dtype = np.result_type(up, down)
    except TypeError:  # e.g. bfloat16 with float16: record the coarser storage
        dtype = max((up.dtype, down.dtype), key=lambda t: storage_rtol(t))
    if not (is_float(dtype) or is_integer(dtype)):
        raise ValueError(f"params must hold real numbers, got dtype {dtype}")
    return up, down, dtype


def _in_range(top_up: np.ndarray, top_down: np.ndarray, n: int, d: int) -> None:
    """Refuse a unit whose ``max|W_down[:,i]|·max|W_up[i,:]|`` would overflow the Gram matrix."""
    with np.errstate(over="ignore", under="ignore"):
        scale = top_down * top_up * max(n, d)  # per unit
    if np.any(scale > _SCALE_MAX):
        raise ValueError(
            f"params are too large to decide in float64: a unit's max|W_down[:,i]|·max|W_up[i,:]| is "
            f"{np.max(scale):.3g} > {_SCALE_MAX:g} (its Gram entries would overflow); scale W_down and "
            "the skip down together (the condition W_down[:,S] W_up[S,:] = -A is homogeneous in them)"
        )


def _streamable(dtype) -> bool:
    """A float dtype the wide path reads as stored: float16/32/64 or ``bfloat16``."""
    return is_float(dtype) and np.dtype(dtype).itemsize in (2, 4, 8)


def storage_dtypes(params) -> tuple[np.dtype, np.dtype]:
    """The stored dtypes of ``W_up`` and ``W_down`` (each array keeps its own)."""
    return np.asarray(params.up).dtype, np.asarray(params.down).dtype


def _unit_roundoff(dtype) -> float:
    if not is_float(dtype) or finfo(dtype).nmant >= 52:
        return 0.0
    return float(finfo(dtype).eps) / 2


def storage_rtol_pair(dtype_up, dtype_down) -> float:
    """``(u₁ + u₂ + u₁u₂)/((1 − u₁)(1 − u₂))`` for the unit roundoffs of the two storage dtypes.

    If ``W̃_up = W_up(1 + δ₁)``, ``W̃_down = W_down(1 + δ₂)`` entrywise (``|δ_k| ≤ u_k``, normal
    range) and ``W_down[:,S] W_up[S,:] = −A`` exactly, every entry of the stored miss is at most this
    factor times ``Σ_{i∈S} |W̃_down[k,i]| |W̃_up[i,j]|``. Equal dtypes give :func:`storage_rtol`."""
    u1, u2 = _unit_roundoff(dtype_up), _unit_roundoff(dtype_down)
    return (u1 + u2 + u1 * u2) / ((1 - u1) * (1 - u2))


def absolute_rounding(array, dtype) -> bool:
    """Whether some stored entry of a narrower-than-float64 float array is zero or subnormal: there
    rounding is absolute (half the smallest subnormal, e.g. 2⁻²⁵ for float16), not relative."""
    if _unit_roundoff(dtype) == 0.0:
        return False
    tiny = float(finfo(dtype).smallest_normal)
    return bool(np.any(np.abs(np.asarray(array, np.float64)) < tiny))


def skip_matrix(skip, d: int) -> np.ndarray:
    """``A`` as float64 ``(d, d)``: any finite real matrix of that shape (singular, ill-conditioned
    and zero skips included: the kink theorem allows any ``A``) whose ``max|A|`` is 0 or in
    ``[2⁻⁴⁰⁰, 2⁴⁰⁰]``; ``ValueError`` otherwise. Where a decision needs an invertible ``A`` (the
    paper's Thm 8/10 through Lemma 4) it checks that itself (:func:`_arith.sigma_min_lower`)."""
    if skip is None:
        return np.eye(d)
    A = np.asarray(skip)
    if A.dtype == np.bool_ or not (np.issubdtype(A.dtype, np.floating) or np.issubdtype(A.dtype, np.integer)):
        raise ValueError(f"skip must hold real numbers, got dtype {A.dtype}")
    if A.shape != (d, d):
        raise ValueError(f"skip must have shape ({d}, {d}) to match params (d={d}), got {A.shape}")
    A64 = A.astype(np.float64)
    if not np.all(np.isfinite(A64)):
        raise ValueError("skip contains NaN or inf")
    top = float(np.max(np.abs(A64)))
    if top != 0 and not _SKIP_RANGE[0] <= top <= _SKIP_RANGE[1]:
        raise ValueError(
            f"skip A has max|A| = {top:.3g}, outside [2^-400, 2^400] where float64 decides safely; "
            "scale A and W_down by a common power of two (the condition is homogeneous in them)"
        )
    return A64


def storage_rtol(dtype) -> float:
    """``(2u + u²)/(1 − u)²`` for the unit roundoff ``u`` of ``dtype`` (0 for float64 and integers).

    If stored weights are the entrywise rounding to nearest of weights that satisfy
    ``W_down[:,S] W_up[S,:] = −A`` exactly (``w̃ = w(1 + δ)``, ``|δ| ≤ u``), every entry of the stored
    miss is at most this factor times ``Σ_{i∈S} |W̃_down[k,i]| |W̃_up[i,j]|``.
    """
    if not is_float(dtype) or finfo(dtype).nmant >= 52:
        return 0.0
    u = float(finfo(dtype).eps) / 2
    return (2 * u + u * u) / (1 - u) ** 2


SKIP_RTOL = 1e-6  # default: the absorber's error is at most 1e-6 of the skip's output


def check_skip_rtol(skip_rtol) -> float:
    """``skip_rtol`` of rule (E): ``absorbable`` needs ``‖M_S‖_2 ≤ skip_rtol · σ_min(A)``."""
    if skip_rtol is None:
        return SKIP_RTOL
    if (
        isinstance(skip_rtol, bool)
        or not isinstance(skip_rtol, (int, float, np.floating, np.integer))
        or not 0 <= float(skip_rtol) < 1
    ):
        raise ValueError(f"skip_rtol must be a number in [0, 1), got {skip_rtol!r}")
    return float(skip_rtol)


def check_rtol(rtol) -> float:
    if rtol is None:
        return DEFAULT_RTOL
    if isinstance(rtol, bool) or not isinstance(rtol, (int, float, np.floating, np.integer)):
        raise ValueError(f"rtol must be a number in [0, 0.5), got {rtol!r}")
    rtol = float(rtol)
    if not 0 <= rtol < 0.5:
        raise ValueError(f"rtol must be in [0, 0.5) (at 0.5 and above the empty set could pass), got {rtol!r}")
    return rtol


def decidable_activation(activation) -> str | None:
    """The registered name of ``activation`` if this condition decides it (ungated, not positively
    homogeneous), ``None`` for ``None``; gated and homogeneous activations raise ValueError naming
    the result that decides them (Prop 5, Prop 6)."""
    if activation is None:
        return None
    act = activations.get(activation)
    if act.gated:
        raise ValueError(f"activation {act.name!r} is gated; Thm 8/10 is for ungated blocks ({act.result})")
    if act.family == "homogeneous":
        raise ValueError(f"activation {act.name!r} is decided by {act.result}, not by this condition")
    return act.name
