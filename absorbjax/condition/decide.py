"""The decision of Thm 8/10 (Lemma 4 for a skip ``A``), with a certificate, and the absorber."""

from __future__ import annotations

import math
import time

import jax.numpy as jnp
import numpy as np

from absorbjax.condition.certificate import METHODS, Certificate, _fmt
from absorbjax.condition.inputs import (
    _check_activation,
    _hypotheses,
    _mask,
    _miss,
    _resolve_tol,
    _skip,
    _weights,
)
from absorbjax.condition.integer import _exhaustive, _milp
from absorbjax.condition.relax import _box_lower, _relax
from absorbjax.models import MLPParams

# ---------------------------------------------------------------------------------------------
# The decision


def _decide(U, D, A, dtype, *, tol, method, time_limit, activation, skip_kind):
    t0 = time.perf_counter()
    n, d = U.shape
    timings: dict[str, float] = {}
    t = time.perf_counter()
    tol = _resolve_tol(tol, U, D, A, dtype)
    UUt = U @ U.T
    failed, min_sin = _hypotheses(U, D, UUt)
    timings["hypotheses"] = time.perf_counter() - t
    rel = _relax(U, D, A, UUt, timings)
    c = rel.c
    dist01 = float(np.max(np.abs(c - np.clip(np.round(c), 0, 1)), initial=0.0))
    sigma = math.sqrt(max(rel.lam_low, 0.0))
    radius = (d * tol + rel.rho + rel.err) / sigma if sigma > 0 else None

    found, residual, how, why = None, None, None, None
    t = time.perf_counter()
    lower, target = rel.lower, "−I" if skip_kind == "identity" else "−A"
    if method in ("auto", "relaxation"):
        if lower > d * tol:
            how = "relaxation"
            why = (f"no real c brings Σ c_i M_i within {_fmt(lower)} (Frobenius) of {target}, "
                   f"above d·tol = {_fmt(d * tol)}")
        elif radius is not None and radius < 0.5:
            how = "rounding"
            m = c > 0.5
            residual = float(np.max(np.abs(_miss(U, D, A, m))))
            if residual <= tol:
                found = m
            else:
                why = (f"the real solution c is unique (rank n = {n}) and every valid m lies within "
                       f"δ = {_fmt(radius)} < 1/2 of it, so round(c) is the only candidate; "
                       f"it misses by {_fmt(residual)} > tol")
        else:
            lower = max(lower, _box_lower(U, D, A, rel, target=2 * d * tol))
            if lower > d * tol:
                how = "relaxation"
                why = (f"no c in [0,1]^{n} brings Σ c_i M_i within {_fmt(lower)} (Frobenius) of "
                       f"{target}, above d·tol = {_fmt(d * tol)}")
            elif method == "relaxation":
                how = "relaxation"
                why = (f"undecided: the relaxation leaves freedom (rank G = {rel.rank}, n = {n}); "
                       "use method='auto' or 'milp'")
    if how is None and method in ("auto", "milp"):
        how = "milp"
        outcome, found, form = _milp(U, D, A, rel, tol, time_limit)
        if outcome == "none":
            why = (f"HiGHS proved m ∈ {{0,1}}^{n} infeasible for Σ m_i M_i = −A within tol "
                   f"({form} constraints)")
        elif outcome.startswith("undecided"):
            why = outcome
    if how is None:
        how = "exhaustive"
        found, best = _exhaustive(U, D, A, rel, tol)
        if found is None:
            why = f"none of the 2^{n} subsets is within tol; the closest misses by {_fmt(best)} (Frobenius)"
    timings["search"] = time.perf_counter() - t

    if found is not None:
        S = np.flatnonzero(found)
        residual = float(np.max(np.abs(_miss(U, D, A, found))))
        status = "absorbable"
        why = f"W_down[:,S] W_up[S,:] = {target} within tol"
    else:
        S = None
        if why.startswith("undecided"):
            status, why = "undecided", why.removeprefix("undecided: ")
        elif failed:
            status = "degenerate"
            why = f"no S exists ({why}), but Thm 8/10 needs nondegenerate weights"
        else:
            status = "not_absorbable"
            why = f"no S exists: {why}"
    return Certificate(
        status=status, S=S, method=how, reason=why, d=d, n=n, tol=tol, residual=residual,
        relaxation_residual=rel.rho, lower_bound=lower, rank=rel.rank, dist01=dist01,
        radius=radius, nondegenerate=not failed, failed=failed, min_row_sin=min_sin,
        skip=skip_kind, input_dtype=str(dtype), activation=activation,
        seconds=time.perf_counter() - t0, timings=timings,
    ), rel


def _check_method(method, time_limit):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")


def find_absorbing_set(
    params: MLPParams,
    *,
    skip=None,
    tol: float | None = None,
    time_limit: float = 60.0,
    method: str = "auto",
    activation: str | None = None,
) -> Certificate:
    """Decide whether some ``S`` has ``W_down[:,S] W_up[S,:] = −A`` (Thm 8/10, Lemma 4).

    Args:
      params: one ungated block, ``up`` = ``W_up`` ``(n, d)``, ``down`` = ``W_down`` ``(d, n)``
        (NumPy or JAX, any real dtype; checked in float64, the input dtype is recorded). A
        leading draws axis belongs to :func:`find_absorbing_sets`; gated params raise.
      skip: ``A`` ``(d, d)``; ``None`` is ``I``. Singular or ill-conditioned (condition number
        above ``1/√eps``) raises ``ValueError``.
      tol: entrywise tolerance on ``W_down[:,S] W_up[S,:] + A``; default :func:`default_tol`.
      time_limit: seconds for the MILP; reaching it gives ``"undecided"``, never a guess.
      method: ``"auto"`` (relaxations, rounding, then MILP), ``"relaxation"`` (relaxations and
        rounding only), ``"milp"`` (straight to the MILP) or ``"exhaustive"`` (all ``2^n``
        subsets, ``n ≤ 24``).
      activation: optional name, recorded; gated and homogeneous activations raise, since other
        results decide them. Thm 8/10 covers ``relu`` and ``gelu``; for other activations with
        ``σ(z) − σ(−z) = z`` an ``S`` still gives the absorber, but "no S" proves nothing.

    Returns:
      a :class:`Certificate`; ``str(cert)`` is a readable summary, ``cert.to_dict()`` is JSON.
    """
    _check_method(method, time_limit)
    act = _check_activation(activation)
    U, D, dtype = _weights(params, batched=False)
    A = _skip(skip, U.shape[1])
    return _decide(U, D, A, dtype, tol=tol, method=method, time_limit=time_limit, activation=act,
                   skip_kind="identity" if skip is None else "matrix")[0]


def find_absorbing_sets(
    params: MLPParams,
    *,
    skip=None,
    tol: float | None = None,
    time_limit: float = 60.0,
    method: str = "auto",
    activation: str | None = None,
    progress: bool = True,
) -> list[Certificate]:
    """:func:`find_absorbing_set` for each block along a leading draws axis (``models.sample``).

    ``params.up`` ``(draws, n, d)``, ``params.down`` ``(draws, d, n)``; ``skip`` is ``None``,
    one ``(d, d)`` matrix for all draws, or ``(draws, d, d)``. ``tol`` is per draw when ``None``.
    A plain loop: small blocks take about a millisecond each (``d = 3, n = 12``: over a thousand
    draws per second on two cores, see ``experiments/bench_condition.py``), so a batched
    eigensolver would not change the picture; the MILP, when needed, is per draw anyway.
    ``progress`` shows a tqdm bar over the draws (the MILP can take up to ``time_limit`` each).
    """
    _check_method(method, time_limit)
    act = _check_activation(activation)
    U, D, dtype = _weights(params, batched=True)
    draws, n, d = U.shape
    sk = None if skip is None else np.asarray(skip)
    if sk is None or sk.shape == (d, d):
        skips = [_skip(sk, d)] * draws  # one A, checked once
    elif sk.shape == (draws, d, d):
        skips = [_skip(a, d) for a in sk]
    else:
        raise ValueError(f"skip must have shape ({d}, {d}) or ({draws}, {d}, {d}), got {sk.shape}")
    kind = "identity" if skip is None else "matrix"
    from tqdm.auto import tqdm

    return [
        _decide(U[k], D[k], skips[k], dtype, tol=tol, method=method,
                time_limit=time_limit, activation=act, skip_kind=kind)[0]
        for k in tqdm(range(draws), desc="find_absorbing_sets", unit="draw", disable=not progress)
    ]


# ---------------------------------------------------------------------------------------------
# The absorber and the distance


def absorber(
    params: MLPParams,
    S,
    *,
    skip=None,
    tol: float | None = None,
    check: bool = True,
) -> MLPParams:
    """The residual-free block that equals ``x ↦ A x + W_down σ(W_up x)``.

    ``V_up = W_up`` with the rows in ``S`` negated, ``V_down = W_down``. For activations with
    ``σ(z) − σ(−z) = z`` (relu, gelu, gelu_tanh, silu, softplus):
    ``V_down σ(V_up x) = W_down σ(W_up x) − W_down[:,S] W_up[S,:] x``, which is
    ``A x + W_down σ(W_up x)`` exactly when ``W_down[:,S] W_up[S,:] = −A``. The same weights serve
    every invertible ``A`` (Lemma 4: the reduced block has ``V_down' = A⁻¹W_down``, and
    multiplying back by ``A`` returns ``W_down``); ``skip`` only changes the condition checked.

    Args:
      params: ungated block ``(W_up (n, d), W_down (d, n))``.
      S: indices ``(|S|,)`` or a boolean mask ``(n,)``.
      skip: ``A`` ``(d, d)``, ``None`` = ``I``.
      tol, check: with ``check=True`` a set with ``‖W_down[:,S] W_up[S,:] + A‖_max > tol``
        (default :func:`default_tol`) raises ``ValueError``.

    Returns:
      ``MLPParams`` of JAX arrays ``(V_up (n, d), V_down (d, n))`` in the dtype of ``params``
      (as far as ``jax_enable_x64`` allows).
    """
    U, D, dtype = _weights(params, batched=False)
    n, d = U.shape
    m = _mask(S, n)
    if check:
        A = _skip(skip, d)
        tol = _resolve_tol(tol, U, D, A, dtype)
        miss = float(np.max(np.abs(_miss(U, D, A, m))))
        if not miss <= tol:
            raise ValueError(
                f"S does not satisfy W_down[:,S] W_up[S,:] = −A: entrywise miss {miss:.3g} > tol {tol:.3g}"
            )
    up = jnp.asarray(params.up)
    sign = jnp.asarray(np.where(m, -1, 1), dtype=up.dtype)
    return MLPParams(up * sign[:, None], jnp.asarray(params.down))
