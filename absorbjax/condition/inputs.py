"""Validated inputs of the decision: weights in float64, the skip ``A``, tolerances, masks, and the
hypotheses of Thm 8/10."""

from __future__ import annotations

import math
from fractions import Fraction

import jax.numpy as jnp
import numpy as np

from absorbjax import activations
from absorbjax.condition.certificate import _few
from absorbjax.models import GatedParams, MLPParams

_EPS = float(np.finfo(np.float64).eps)
_U64 = _EPS / 2
DEFAULT_RTOL = 1e3 * _EPS  # slack for weights that were themselves computed (a pseudo-inverse)
_SCALE_MAX = 1e150  # |W_down[:,i]| |W_up[i,:]| above this could overflow the Gram matrix
_SCALE_MIN = 1e-150  # ... and nonzero below this could underflow it


# ---------------------------------------------------------------------------------------------
# Inputs


def _weights(params, *, batched: bool) -> tuple[np.ndarray, np.ndarray, np.dtype]:
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
            raise ValueError(
                f"params have a leading draws axis (up {up.shape}); use find_absorbing_sets"
            )
        want = "(draws, n, d) and (draws, d, n)" if batched else "(n, d) and (d, n)"
        raise ValueError(f"params.up and params.down must have shapes {want}, got {up.shape}, {down.shape}")
    n, d = up.shape[-2:]
    if n == 0 or d == 0:
        raise ValueError(f"params must have n >= 1 hidden units and d >= 1 inputs, got up {up.shape}")
    if down.shape[-2:] != (d, n) or down.shape[:-2] != up.shape[:-2]:
        raise ValueError(
            f"params.down must have shape {up.shape[:-2] + (d, n)} to match params.up {up.shape}"
        )
    try:
        dtype = np.result_type(up, down)
    except TypeError:  # e.g. bfloat16 with float16: record the coarser storage
        dtype = max((up.dtype, down.dtype), key=lambda t: storage_rtol(t))
    if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
        raise ValueError(f"params must hold real numbers, got dtype {dtype}")
    U, D = up.astype(np.float64), down.astype(np.float64)
    if not (np.all(np.isfinite(U)) and np.all(np.isfinite(D))):
        raise ValueError("params contain NaN or inf")
    with np.errstate(over="ignore", under="ignore"):
        scale = np.max(np.abs(D), axis=-2) * np.max(np.abs(U), axis=-1) * max(n, d)  # per unit
    if np.any(scale > _SCALE_MAX) or np.any((scale > 0) & (scale < _SCALE_MIN)):
        raise ValueError(
            "params are too large or too small to decide in float64: a unit's "
            f"max|W_down[:,i]|·max|W_up[i,:]| spans {np.min(scale[scale > 0], initial=0):.3g}.."
            f"{np.max(scale):.3g}, outside [{_SCALE_MIN:g}, {_SCALE_MAX:g}]; rescale the weights "
            "(the condition is invariant under W_up[i,:] → t W_up[i,:], W_down[:,i] → W_down[:,i] / t)"
        )
    return U, D, dtype


def _eps(dtype) -> float:
    """Machine epsilon of a float dtype (bfloat16 included); integers are exact: float64's."""
    if np.issubdtype(dtype, np.integer):
        return _EPS
    return float(jnp.finfo(dtype).eps)


def _skip(skip, d: int) -> np.ndarray:
    """``A`` as float64 ``(d, d)``; singular or ill-conditioned skips raise (Lemma 4)."""
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
    max_cond = 1.0 / math.sqrt(_eps(A.dtype))
    cond = float(np.linalg.cond(A64))
    if not cond <= max_cond:
        raise ValueError(
            f"skip A is singular or ill-conditioned (condition number {cond:.3g} > {max_cond:.3g}); "
            "Lemma 4 needs an invertible skip"
        )
    return A64


def _gamma(k: int) -> float:
    """``γ_k = k·u / (1 − k·u)``, ``u = 2⁻⁵³``: the relative error bound of a float64 sum of ``k`` terms."""
    ku = k * _U64
    if not ku < 0.5:
        raise ValueError(f"a float64 sum of {k} terms has no useful error bound")
    return ku / (1 - ku)


def storage_rtol(dtype) -> float:
    """``(2u + u²)/(1 − u)²`` for the unit roundoff ``u`` of ``dtype`` (0 for float64 and integers).

    If stored weights are the entrywise rounding to nearest of weights that satisfy
    ``W_down[:,S] W_up[S,:] = −A`` exactly (``w̃ = w(1 + δ)``, ``|δ| ≤ u``), every entry of the stored
    miss is at most this factor times ``Σ_{i∈S} |W̃_down[k,i]| |W̃_up[i,j]|``.
    """
    if not jnp.issubdtype(dtype, jnp.floating) or jnp.finfo(dtype).nmant >= 52:
        return 0.0
    u = float(jnp.finfo(dtype).eps) / 2
    return (2 * u + u * u) / (1 - u) ** 2


def _check_rtol(rtol) -> float:
    if rtol is None:
        return DEFAULT_RTOL
    if isinstance(rtol, bool) or not isinstance(rtol, (int, float, np.floating, np.integer)):
        raise ValueError(f"rtol must be a number in [0, 0.5), got {rtol!r}")
    rtol = float(rtol)
    if not 0 <= rtol < 0.5:
        raise ValueError(f"rtol must be in [0, 0.5) (at 0.5 and above the empty set could pass), got {rtol!r}")
    return rtol


def _allowed(U, D, A, m: np.ndarray, rtol: float) -> np.ndarray:
    """The entrywise bound ``r_S · (Σ_{i∈S} |W_down[k,i]| |W_up[i,j]| + |A_kj|)`` (``d×d``) of rule (★)."""
    r = rtol + 2 * _gamma(int(m.sum()) + 1)
    return r * (np.abs(D[:, m]) @ np.abs(U[m, :]) + np.abs(A))


def _accepts(U, D, A, m: np.ndarray, rtol: float) -> tuple[bool, float]:
    """Whether rule (★) accepts the mask ``m``, and its miss ``‖W_down[:,S] W_up[S,:] + A‖_max``."""
    miss = np.abs(_miss(U, D, A, m))
    return bool(np.all(miss <= _allowed(U, D, A, m, rtol))), float(np.max(miss, initial=0.0))


def _threshold(U, D, A, rtol: float) -> float:
    """A Frobenius bound on the exact miss of every set that rule (★) can accept.

    An accepted ``S`` has exact ``|miss_kj| ≤ (rtol + 4γ_{n+1}) (Σ_{i∈S}|D_ki||U_ij| + |A_kj|)``, and
    ``Σ_{i∈S}|D_ki||U_ij| ≤ (|W_down| |W_up|)_kj``; so a certified lower bound above this value on
    ``‖Σ m_i M_i + A‖_F`` for every ``m`` rules every ``S`` out.
    """
    r = rtol + 4 * _gamma(U.shape[0] + 1)
    return r * (1 + _gamma(U.shape[0] + 1)) * float(np.linalg.norm(np.abs(D) @ np.abs(U) + np.abs(A)))


def tolerance(params: MLPParams, S, *, skip=None, rtol: float | None = None) -> np.ndarray:
    """The entrywise tolerance ``(d, d)`` that rule (★) of :mod:`absorbjax.condition` allows ``S``.

    ``|(W_down[:,S] W_up[S,:] + A)_kj| ≤ r_S (Σ_{i∈S} |W_down[k,i]| |W_up[i,j]| + |A_kj|)`` with
    ``r_S = rtol + 2γ_{|S|+1}``; ``rtol`` defaults to ``1e3·eps64``. It depends only on the units in
    ``S`` (a huge unit outside ``S`` does not loosen it) and the empty set can never meet it
    (``r_S < 1``). Examples:

    >>> import numpy as np
    >>> from absorbjax import condition, models
    >>> p = models.MLPParams(np.array([[1.0], [2.0]]), np.array([[-1.0, 3.0]]))
    >>> float(condition.tolerance(p, [0])[0, 0]) < 1e-12
    True
    """
    U, D, _ = _weights(params, batched=False)
    A = _skip(skip, U.shape[1])
    return _allowed(U, D, A, _mask(S, U.shape[0]), _check_rtol(rtol))


def _check_activation(activation):
    if activation is None:
        return None
    act = activations.get(activation)
    if act.gated:
        raise ValueError(f"activation {act.name!r} is gated; Thm 8/10 is for ungated blocks ({act.result})")
    if act.family == "homogeneous":
        raise ValueError(f"activation {act.name!r} is decided by {act.result}, not by this condition")
    return act.name


def _mask(S, n: int) -> np.ndarray:
    S = np.asarray(S)
    if S.size == 0 and S.ndim == 1:
        return np.zeros(n, bool)
    if S.dtype == bool:
        if S.shape != (n,):
            raise ValueError(f"a boolean S must have shape ({n},), got {S.shape}")
        return S.copy()
    if S.ndim != 1 or (S.size and not np.issubdtype(S.dtype, np.integer)):
        raise ValueError(f"S must be a 1-D array of hidden-unit indices, got {S!r}")
    if S.size and (S.min() < 0 or S.max() >= n):
        raise ValueError(f"S must index hidden units 0..{n - 1}, got {S.tolist()}")
    if np.unique(S).size != S.size:
        raise ValueError(f"S has repeated indices: {S.tolist()}")
    m = np.zeros(n, bool)
    m[S] = True
    return m


def _miss(U, D, A, m: np.ndarray) -> np.ndarray:
    """``W_down[:,S] W_up[S,:] + A`` (``d×d``) for the mask ``m``."""
    return D[:, m] @ U[m, :] + A


# ---------------------------------------------------------------------------------------------
# Hypotheses and relaxation


def _hypotheses(U, D, UUt, dtype) -> tuple[tuple[str, ...], float | None]:
    """Failed hypotheses of Thm 8/10 on the stored values, and the smallest ``|sin|`` between rows.

    Exact, so invariant under the changes of coordinates and unit rescalings that preserve the
    function class (``W_up → W_up P⁻¹``, ``W_up[i,:] → t W_up[i,:]``): a row or column is zero when
    every stored entry is, and two rows are parallel when ``rank [u; v] = 1`` for the stored values.
    Pairs whose Gram cosine is below ``1 − 1e-6`` are certainly not parallel (the cosine's rounding
    error is ``O(d·eps)``); the rest are checked exactly (:func:`_exactly_parallel`).
    """
    n, d = U.shape
    failed = []
    if d < 2:
        failed.append(f"d = {d} < 2")
    zero_rows = np.flatnonzero(~U.any(axis=1))
    zero_cols = np.flatnonzero(~D.any(axis=0))
    if zero_rows.size:
        failed.append(f"rows of W_up are zero: {_few(zero_rows)}")
    if zero_cols.size:
        failed.append(f"columns of W_down are zero: {_few(zero_cols)}")
    live = np.flatnonzero(U.any(axis=1))
    min_sin = None
    if live.size >= 2:
        sq = np.diag(UUt)[live]
        cos2 = (UUt if live.size == n else UUt[np.ix_(live, live)]) ** 2
        cos2 /= sq[:, None]
        cos2 /= sq[None, :]
        np.fill_diagonal(cos2, 0.0)
        min_sin = math.sqrt(max(1.0 - float(cos2.max()), 0.0))
        i, j = np.nonzero(np.triu(cos2 >= 1.0 - 1e-6, 1))
        pairs = [(int(live[a]), int(live[b])) for a, b in zip(i, j)
                 if _exactly_parallel(U[live[a]], U[live[b]], dtype)]
        if pairs:
            more = f" and {len(pairs) - 5} more" if len(pairs) > 5 else ""
            failed.append(f"rows of W_up are parallel: pairs {pairs[:5]}{more}")
    return tuple(failed), min_sin


def _exactly_parallel(u: np.ndarray, v: np.ndarray, dtype) -> bool:
    """``v_b u_a = v_a u_b`` for every ``b`` (``a`` the pivot of ``u``), in exact arithmetic.

    Products of two values stored with at most 26 significant bits (float32 and narrower, small
    integers) are exact in float64; otherwise the check runs on Python fractions.
    """
    a = int(np.argmax(np.abs(u)))
    narrow = (jnp.issubdtype(dtype, jnp.floating) and jnp.finfo(dtype).nmant <= 23) or (
        np.issubdtype(dtype, np.integer) and max(np.abs(u).max(), np.abs(v).max()) < 2**26)
    if narrow:
        return bool(np.all(v * u[a] == u * v[a]))
    ua, va = Fraction(float(u[a])), Fraction(float(v[a]))
    return all(Fraction(float(y)) * ua == Fraction(float(x)) * va for x, y in zip(u, v))
