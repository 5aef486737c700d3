"""Validated inputs of the decision: weights in float64, the skip ``A``, tolerances, masks, and the
hypotheses of Thm 8/10."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from absorbjax import activations
from absorbjax.condition.certificate import _few
from absorbjax.models import GatedParams, MLPParams

_EPS = float(np.finfo(np.float64).eps)
_TOL_FACTOR = 1e3


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
    if down.shape[-2:] != (d, n) or down.shape[:-2] != up.shape[:-2]:
        raise ValueError(
            f"params.down must have shape {up.shape[:-2] + (d, n)} to match params.up {up.shape}"
        )
    dtype = np.result_type(up, down)
    if not (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.integer)):
        raise ValueError(f"params must hold real numbers, got dtype {dtype}")
    U, D = up.astype(np.float64), down.astype(np.float64)
    if not (np.all(np.isfinite(U)) and np.all(np.isfinite(D))):
        raise ValueError("params contain NaN or inf")
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


def _scale(U: np.ndarray, D: np.ndarray, A: np.ndarray) -> float:
    return float(np.max(np.abs(A)) + np.max(np.abs(D) @ np.abs(U), initial=0.0))


def _default_tol(U, D, A, dtype) -> float:
    return _TOL_FACTOR * _eps(dtype) * _scale(U, D, A)


def default_tol(params: MLPParams, *, skip=None) -> float:
    """``tol = 1e3 · eps(dtype) · (‖A‖_max + ‖|W_down| |W_up|‖_max)``.

    Every partial sum ``Σ_{i∈S} W_down[k,i] W_up[i,j]`` is bounded by ``(|W_down| |W_up|)_kj``, so
    rounding the weights to their dtype (relative ``eps/2`` each) and summing in float64 moves
    each entry of ``W_down[:,S] W_up[S,:]`` by about ``eps · (|W_down||W_up|)_kj`` (plus
    ``√|S|·eps64`` of the same size for the sum); the factor ``1e3`` leaves room for weights that
    were themselves computed (a pseudo-inverse in ``models.absorbable`` loses ``cond(W_up[S,:])``).
    Distances of generic weights from the condition are ``O(1)``, far above this.
    """
    U, D, dtype = _weights(params, batched=False)
    return _default_tol(U, D, _skip(skip, U.shape[1]), dtype)


def _resolve_tol(tol, U, D, A, dtype) -> float:
    if tol is None:
        return _default_tol(U, D, A, dtype)
    tol = float(tol)
    if not tol >= 0:
        raise ValueError(f"tol must be a nonnegative number, got {tol!r}")
    return tol


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


def _hypotheses(U, D, UUt) -> tuple[tuple[str, ...], float | None]:
    """Failed hypotheses of Thm 8/10 and the smallest ``|sin|`` between rows of ``W_up``.

    Rows count as parallel when ``sin² ≤ 16·d·eps64``: below that the Gram-based angle cannot tell
    them from parallel rows.
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
        i, j = np.nonzero(cos2 >= 1.0 - 16 * d * _EPS)
        i, j = i[i < j], j[i < j]
        if i.size:
            pairs = [(int(live[a]), int(live[b])) for a, b in zip(i[:5], j[:5])]
            more = f" and {i.size - 5} more" if i.size > 5 else ""
            failed.append(f"rows of W_up are parallel: pairs {pairs}{more}")
    return tuple(failed), min_sin
