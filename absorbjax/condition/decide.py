"""The decision of Thm 8/10 (Lemma 4 for a skip ``A``), with a certificate, and the absorber."""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from absorbjax.condition import large
from absorbjax.condition.certificate import METHODS, Certificate, _few, _fmt
from absorbjax.condition.inputs import (
    _accepts,
    _check_activation,
    _check_rtol,
    _hypotheses,
    _mask,
    _skip,
    _threshold,
    _weights,
    storage_rtol,
)
from absorbjax.condition.integer import _EXHAUSTIVE_MAX_N, _exhaustive, _milp
from absorbjax.condition.relax import _box_lower, _relax
from absorbjax.models import MLPParams

# ---------------------------------------------------------------------------------------------
# The decision

_THEOREM = {"relu": "Thm 8", "gelu": "Thm 10"}  # the activations whose converse is proved
_SMALL_N = 16  # below this the 2^n enumeration (one chunk) is the cheapest proof


class _Outcome(NamedTuple):
    found: np.ndarray | None  # a mask accepted by rule (★)
    method: str
    why: str  # the proof of absence, or "undecided: ..."; "" when found
    lower: float  # certified lower bound on ‖Σ m_i M_i + A‖_F over m ∈ {0,1}^n
    residual: float | None  # ‖miss‖_max of the one candidate checked, if any


def _search(U, D, A, rel, rtol: float, *, method: str, time_limit: float, target: str) -> _Outcome:
    """Find a set that rule (★) accepts with this ``rtol``, or prove that none exists."""
    n, d = U.shape
    thr = _threshold(U, D, A, rtol)
    lower = rel.lower
    sigma = math.sqrt(max(rel.lam_low, 0.0))
    radius = (thr + rel.rho + rel.err) / sigma if sigma > 0 else None
    if method in ("auto", "relaxation"):
        if lower > thr:
            return _Outcome(None, "relaxation", f"no real c brings Σ c_i M_i within {_fmt(lower)} "
                            f"(Frobenius) of {target}; an accepted S would be within {_fmt(thr)}", lower, None)
        if radius is not None and radius < 0.5:
            m = rel.c > 0.5
            ok, residual = _accepts(U, D, A, m, rtol)
            if ok:
                return _Outcome(m, "rounding", "", lower, residual)
            return _Outcome(None, "rounding", f"the real solution c is unique (rank n = {n}) and every "
                            f"accepted m lies within δ = {_fmt(radius)} < 1/2 of it, so round(c) is the only "
                            f"candidate; it misses by {_fmt(residual)}, outside the tolerance", lower, residual)
        lower = max(lower, _box_lower(U, D, A, rel, target=2 * thr))
        if lower > thr:
            return _Outcome(None, "relaxation", f"no c in [0,1]^{n} brings Σ c_i M_i within "
                            f"{_fmt(lower)} (Frobenius) of {target}; an accepted S would be within {_fmt(thr)}",
                            lower, None)
        if method == "relaxation":
            return _Outcome(None, "relaxation", f"undecided: the relaxations leave freedom (rank G = "
                            f"{rel.rank}, n = {n}); use method='auto'", lower, None)
    verdict, form = None, None
    if method == "milp" or (method == "auto" and n > _SMALL_N):
        verdict, found, form = _milp(U, D, A, rel, rtol, thr, time_limit)
        if found is not None:
            return _Outcome(found, "milp", "", lower, _accepts(U, D, A, found, rtol)[1])
        if n > _EXHAUSTIVE_MAX_N:
            return _Outcome(None, "milp", f"{verdict} ({form} constraints; n = {n} is too large to "
                            f"confirm by enumerating 2^n subsets, n <= {_EXHAUSTIVE_MAX_N})", lower, None)
    found, best = _exhaustive(U, D, A, rel, rtol, thr)
    if found is not None:
        return _Outcome(found, "exhaustive", "", lower, _accepts(U, D, A, found, rtol)[1])
    after = "" if verdict is None else f" (after HiGHS, {form} constraints: {verdict.removeprefix('undecided: ')})"
    return _Outcome(None, "exhaustive", f"none of the 2^{n} subsets passes; the closest misses by "
                    f"{_fmt(best)} (Frobenius){after}", max(lower, best), None)


def _decide(U, D, A, dtype, *, rtol, method, time_limit, activation, skip_kind, bias=None):
    t0 = time.perf_counter()
    n, d = U.shape
    timings: dict[str, float] = {}
    t = time.perf_counter()
    rtol = _check_rtol(rtol)
    biased = bias is not None and bool(np.any(bias != 0))
    if method == "auto" and n >= large.SCREEN_MIN_N:  # O(n d²) first; None: not decided, n small enough
        cert = large.certificate(U, D, A, dtype, rtol=rtol, activation=activation, skip_kind=skip_kind,
                                 biased=biased)
        if cert is not None:
            return cert, None
    UUt = U @ U.T
    failed, min_sin = _hypotheses(U, D, UUt, dtype)
    timings["hypotheses"] = time.perf_counter() - t
    rel = _relax(U, D, A, UUt, timings)
    c = rel.c
    dist01 = float(np.max(np.abs(c - np.clip(np.round(c), 0, 1)), initial=0.0))
    sigma = math.sqrt(max(rel.lam_low, 0.0))
    threshold = _threshold(U, D, A, rtol)
    radius = (threshold + rel.rho + rel.err) / sigma if sigma > 0 else None
    target = "−I" if skip_kind == "identity" else "−A"

    t = time.perf_counter()
    out = _search(U, D, A, rel, rtol, method=method, time_limit=time_limit, target=target)
    timings["search"] = time.perf_counter() - t

    # Storage rounding: a separate, looser question for weights stored in fewer bits than float64.
    rounding_rtol, rounding, rounding_S, rounding_reason = None, "n/a", None, "float64 or integer storage"
    extra = storage_rtol(dtype)
    if extra > 0:
        rounding_rtol = rtol + extra
        if out.found is not None:
            rounding, rounding_S, rounding_reason = "yes", np.flatnonzero(out.found), "the set S passes already"
        else:
            t = time.perf_counter()
            loose = _search(U, D, A, rel, rounding_rtol, method=method, time_limit=time_limit, target=target)
            timings["storage"] = time.perf_counter() - t
            if loose.found is not None:
                rounding, rounding_S = "yes", np.flatnonzero(loose.found)
                rounding_reason = f"S passes with rtol {_fmt(rounding_rtol)} (found by {loose.method})"
            elif loose.why.startswith("undecided"):
                rounding, rounding_reason = "undecided", loose.why.removeprefix("undecided: ")
            else:
                rounding, rounding_reason = "no", f"{loose.why} [{loose.method}]"

    lower = out.lower
    if out.found is not None:
        S, status = np.flatnonzero(out.found), "absorbable"
        why = (f"W_down[:,S] W_up[S,:] = {target} within rtol {_fmt(rtol)} per entry "
               "(relative to the units in S, float64 rounding included)")
        if biased:
            why += "; with the hidden bias b the absorber also flips b[S] (the output bias gains W_down[:,S] b[S])"
    else:
        S = None
        if out.why.startswith("undecided"):
            status, why = "undecided", out.why.removeprefix("undecided: ")
        elif biased:
            status = "undecided"
            why = (f"no S exists ({out.why}), but the block has a hidden bias: an S would give an "
                   "absorber, the converse is not proved for biased blocks")
        elif activation is not None and activation not in _THEOREM:
            status = "undecided"
            why = (f"no S exists ({out.why}), but for {activation} only the 'if' direction is known "
                   "(an S gives an absorber); Thm 8/10 prove the converse for relu and gelu only")
        elif failed:
            status = "degenerate"
            why = f"no S exists ({out.why}), but Thm 8/10 needs nondegenerate weights"
        else:
            status = "not_absorbable"
            theorem = _THEOREM.get(activation, "Thm 8/10 (relu, gelu)")
            why = f"no S exists, so by {theorem}: {out.why}"
        if rounding == "yes":
            why += (f"; but within {dtype} storage rounding (rtol {_fmt(rounding_rtol)}) the set "
                    f"{_few(rounding_S)} passes: see within_rounding")
    return Certificate(
        status=status, S=S, method=out.method, reason=why, d=d, n=n, rtol=rtol, threshold=threshold,
        residual=out.residual if S is None else _accepts(U, D, A, out.found, rtol)[1],
        relaxation_residual=rel.rho, lower_bound=lower, rank=rel.rank, dist01=dist01,
        radius=radius, nondegenerate=not failed, failed=failed, min_row_sin=min_sin,
        skip=skip_kind, stored_dtype=str(dtype), within_rounding=rounding, rounding_rtol=rounding_rtol,
        rounding_S=rounding_S, rounding_reason=rounding_reason, biased=biased, activation=activation,
        seconds=time.perf_counter() - t0, timings=timings,
    ), rel


def _check_method(method, time_limit):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not (
            0 < time_limit < math.inf):
        raise ValueError(f"time_limit must be a positive finite number of seconds, got {time_limit!r}")


def _bias(bias, n: int) -> np.ndarray | None:
    if bias is None:
        return None
    b = np.asarray(bias)
    if b.dtype == np.bool_ or not (np.issubdtype(b.dtype, np.floating) or np.issubdtype(b.dtype, np.integer)):
        raise ValueError(f"bias must hold real numbers, got dtype {b.dtype}")
    if b.shape != (n,):
        raise ValueError(f"bias must be the hidden bias b of σ(W_up x + b), shape ({n},), got {b.shape}")
    if not np.all(np.isfinite(b)):
        raise ValueError("bias contains NaN or inf")
    return b


def find_absorbing_set(
    params: MLPParams,
    *,
    skip=None,
    rtol: float | None = None,
    time_limit: float = 60.0,
    method: str = "auto",
    activation: str | None = None,
    bias=None,
) -> Certificate:
    """Decide whether some ``S`` has ``W_down[:,S] W_up[S,:] = −A`` (Thm 8/10, Lemma 4).

    Args:
      params: one ungated block, ``up`` = ``W_up`` ``(n, d)``, ``down`` = ``W_down`` ``(d, n)``
        (NumPy or JAX, any real dtype; decided in float64 on the stored values, the stored dtype is
        recorded). A leading draws axis belongs to :func:`find_absorbing_sets`; gated params raise.
      skip: ``A`` ``(d, d)``; ``None`` is ``I``. Singular or ill-conditioned (condition number
        above ``1/√eps``) raises ``ValueError``.
      rtol: the slack of rule (★) (module docstring), in ``[0, 0.5)``; default ``1e3·eps64``.
      time_limit: seconds for the MILP; reaching it gives ``"undecided"``, never a guess.
      method: ``"auto"`` (relaxations, rounding, then enumeration or MILP), ``"relaxation"``
        (relaxations and rounding only), ``"milp"`` (straight to the MILP; an infeasible verdict is
        confirmed by enumeration for ``n ≤ 24``) or ``"exhaustive"`` (all ``2^n`` subsets, ``n ≤ 24``).
      activation: optional name, recorded; gated and homogeneous activations raise, since other
        results decide them. Thm 8/10 prove the converse for ``relu`` and ``gelu`` only: for other
        activations with ``σ(z) − σ(−z) = z`` an ``S`` still gives the absorber, and "no S" is
        ``undecided``. Without a name, "no S" is read with Thm 8/10 (relu, gelu).
      bias: the hidden bias ``b`` ``(n,)`` of ``σ(W_up x + b)``, if the block has one. With a nonzero
        ``b`` an ``S`` is still an absorber (flip ``(w_i, b_i)`` for ``i ∈ S``; the constant
        the output bias gains ``W_down[:,S] b_S``), but "no S" is ``undecided``: the converse is
        not proved for biased blocks. An output bias never matters (it passes through unchanged).

    Returns:
      a :class:`Certificate`; ``str(cert)`` is a readable summary, ``cert.to_dict()`` is JSON.

    Examples:
      >>> import jax
      >>> from absorbjax import condition, models
      >>> with jax.enable_x64(True):
      ...     params, S = models.absorbable(jax.random.key(0), 2, 4, "relu")
      ...     generic = models.init(jax.random.key(1), 2, 4, "relu")
      >>> cert = condition.find_absorbing_set(params, activation="relu")
      >>> cert.status, cert.S.tolist() == S.tolist()
      ('absorbable', True)
      >>> condition.find_absorbing_set(generic, activation="relu").status
      'not_absorbable'

    References:
      Mijoski & Karbevski (2026), Thm 8 (ReLU), Thm 10 (GELU), Lemma 4 (invertible skips).
    """
    _check_method(method, time_limit)
    act = _check_activation(activation)
    U, D, dtype = _weights(params, batched=False)
    A = _skip(skip, U.shape[1])
    return _decide(U, D, A, dtype, rtol=rtol, method=method, time_limit=time_limit, activation=act,
                   skip_kind="identity" if skip is None else "matrix", bias=_bias(bias, U.shape[0]))[0]


def find_absorbing_sets(
    params: MLPParams,
    *,
    skip=None,
    rtol: float | None = None,
    time_limit: float = 60.0,
    method: str = "auto",
    activation: str | None = None,
    progress: bool = True,
) -> list[Certificate]:
    """:func:`find_absorbing_set` for each block along a leading draws axis (``models.sample``).

    ``params.up`` ``(draws, n, d)``, ``params.down`` ``(draws, d, n)``; ``skip`` is ``None``,
    one ``(d, d)`` matrix for all draws, or ``(draws, d, d)``.
    A plain loop: small blocks take about a millisecond each (``d = 3, n = 12``: over a thousand
    draws per second on two cores, see ``experiments/bench_condition.py``), so a batched
    eigensolver would not change the picture; the MILP, when needed, is per draw anyway.
    ``progress`` shows a tqdm bar over the draws (the MILP can take up to ``time_limit`` each).
    """
    _check_method(method, time_limit)
    act = _check_activation(activation)
    rtol = _check_rtol(rtol)
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
        _decide(U[k], D[k], skips[k], dtype, rtol=rtol, method=method,
                time_limit=time_limit, activation=act, skip_kind=kind)[0]
        for k in tqdm(range(draws), desc="find_absorbing_sets", unit="draw", disable=not progress)
    ]


# ---------------------------------------------------------------------------------------------
# The absorber


def absorber(
    params: MLPParams,
    S,
    *,
    skip=None,
    rtol: float | None = None,
    check: bool = True,
) -> MLPParams:
    """The residual-free block that equals ``x ↦ A x + W_down σ(W_up x)``.

    ``V_up = W_up`` with the rows in ``S`` negated, ``V_down = W_down``. For activations with
    ``σ(z) − σ(−z) = z`` (relu, gelu, gelu_tanh, silu, softplus):
    ``V_down σ(V_up x) = W_down σ(W_up x) − W_down[:,S] W_up[S,:] x``, which is
    ``A x + W_down σ(W_up x)`` exactly when ``W_down[:,S] W_up[S,:] = −A``. The same weights serve
    every invertible ``A`` (Lemma 4: the reduced block has ``V_down' = A⁻¹W_down``, and
    multiplying back by ``A`` returns ``W_down``); ``skip`` only changes the condition checked.
    A block with a hidden bias ``b`` is absorbed by also negating ``b[S]`` and adding
    ``W_down[:,S] b[S]`` to the output bias (``σ(−z) = σ(z) − z``).

    Args:
      params: ungated block ``(W_up (n, d), W_down (d, n))``.
      S: indices ``(|S|,)`` or a boolean mask ``(n,)``.
      skip: ``A`` ``(d, d)``, ``None`` = ``I``.
      rtol, check: with ``check=True`` a set that rule (★) rejects raises ``ValueError``.

    Returns:
      ``MLPParams`` of JAX arrays ``(V_up (n, d), V_down (d, n))`` in the dtype of ``params``
      (as far as ``jax_enable_x64`` allows).

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import condition, models
      >>> with jax.enable_x64(True):
      ...     params, S = models.absorbable(jax.random.key(0), 3, 6, "gelu")
      ...     V = condition.absorber(params, S)
      ...     x = jnp.array([0.3, -1.2, 2.0])
      ...     gap = models.skip_mlp(params, x, "gelu") - models.mlp(V, x, "gelu")
      ...     print(bool(jnp.max(jnp.abs(gap)) < 1e-12))
      True

    References:
      Mijoski & Karbevski (2026), the absorber in the proofs of Thm 8 and Thm 10.
    """
    U, D, dtype = _weights(params, batched=False)
    n, d = U.shape
    m = _mask(S, n)
    if check:
        ok, miss = _accepts(U, D, _skip(skip, d), m, _check_rtol(rtol))
        if not ok:
            raise ValueError(
                f"S does not satisfy W_down[:,S] W_up[S,:] = −A: entrywise miss {miss:.3g} is outside "
                "the tolerance (condition.tolerance(params, S))"
            )
    up = jnp.asarray(params.up)
    sign = jnp.asarray(np.where(m, -1, 1), dtype=up.dtype)
    return MLPParams(up * sign[:, None], jnp.asarray(params.down))
