"""The decision of Thm 8/10 (Lemma 4 for a skip ``A``), with a certificate; the absorber it
promises is built in :func:`~absorbjax.condition.absorber` (``condition/_absorber.py``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from absorbjax import activations
from absorbjax._shorthand import with_shorthand
from absorbjax.condition import _large as large, _scale as scale, _stored as stored
from absorbjax.condition._arith import ETA, ONE, balance, miss_bound, output_bias, sigma_min_lower
from absorbjax.condition._certificate import Certificate, RelaxationEvidence, Status, WithinRounding
from absorbjax.condition._inputs import (
    Rule,
    absolute_rounding,
    decidable_activation,
    float_weights,
    hypotheses,
    skip_matrix,
    storage_dtypes,
    storage_rtol,
    storage_rtol_pair,
)
from absorbjax.condition._integer import EXHAUSTIVE_MAX_N, exhaustive, milp
from absorbjax.condition._options import Decision
from absorbjax.condition._relax import Relaxation, box_lower, relax
from absorbjax.condition._text import few, fmt
from absorbjax.condition._verdict import absence, found_theorem, hyperplanes
from absorbjax.models import MLPParams, check_layout

# ---------------------------------------------------------------------------------------------
# The decision

_SMALL_N = 16  # below this the 2^n enumeration (one chunk) is the cheapest proof


class _Outcome(NamedTuple):
    found: np.ndarray | None  # a mask accepted by rule (★)
    method: str
    why: str  # the proof of absence, or why there is none; "" when found
    lower: float  # certified lower bound on ‖Σ m_i M_i + A‖_F over m ∈ {0,1}^n
    residual: float | None  # ‖miss‖_max of the one candidate checked, if any
    undecided: bool = False  # no set found and no proof of absence


def _search(U, D, rule: Rule, rel, *, method: str, time_limit: float, target: str) -> _Outcome:
    """Find a set that ``rule`` (★) accepts, or prove that none exists (on ``A = rule.Ac``)."""
    n, d = U.shape
    A = rule.Ac
    thr = rule.threshold(U, D)
    lower = rel.lower
    radius = rel.radius(thr)
    if method in ("auto", "relaxation"):
        if lower > thr:
            return _Outcome(
                None,
                "relaxation",
                f"no real c brings Σ c_i M_i within {fmt(lower)} "
                f"(Frobenius) of {target}; an accepted S would be within {fmt(thr)}",
                lower,
                None,
            )
        if radius is not None and radius < 0.5:
            m = rel.c > 0.5
            ok, residual = rule.accepts(U, D, m)
            if ok:
                return _Outcome(m, "rounding", "", lower, residual)
            return _Outcome(
                None,
                "rounding",
                f"the real solution c is unique (rank n = {n}) and every "
                f"accepted m lies within δ = {fmt(radius)} < 1/2 of it, so round(c) is the only "
                f"candidate; it misses by {fmt(residual)}, outside the tolerance",
                lower,
                residual,
            )
        lower = max(lower, box_lower(U, D, A, rel, target=2 * thr))
        if lower > thr:
            return _Outcome(
                None,
                "relaxation",
                f"no c in [0,1]^{n} brings Σ c_i M_i within "
                f"{fmt(lower)} (Frobenius) of {target}; an accepted S would be within {fmt(thr)}",
                lower,
                None,
            )
        if method == "relaxation":
            return _Outcome(
                None,
                "relaxation",
                f"the relaxations leave freedom (rank G = {rel.rank}, n = {n}); use method='auto'",
                lower,
                None,
                undecided=True,
            )
    verdict, form = None, None
    if method == "milp" or (method == "auto" and n > _SMALL_N):
        verdict, found, form = milp(U, D, rule, rel, thr, time_limit)
        if found is not None:
            return _Outcome(found, "milp", "", lower, rule.accepts(U, D, found)[1])
        if n > EXHAUSTIVE_MAX_N:
            return _Outcome(
                None,
                "milp",
                f"{verdict} ({form} constraints; n = {n} is too large to "
                f"confirm by enumerating 2^n subsets, n <= {EXHAUSTIVE_MAX_N})",
                lower,
                None,
                undecided=True,
            )
    found, best = exhaustive(U, D, rule, rel, thr)
    if found is not None:
        return _Outcome(found, "exhaustive", "", lower, rule.accepts(U, D, found)[1])
    after = "" if verdict is None else f" (after HiGHS, {form} constraints: {verdict})"
    return _Outcome(
        None,
        "exhaustive",
        f"none of the 2^{n} subsets passes; the closest misses by {fmt(best)} (Frobenius){after}",
        max(lower, best),
        None,
    )


class BlockContext(NamedTuple):
    """What :func:`decide` needs besides the weights: the stored dtypes of ``W_up`` and ``W_down``
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


class _Rounding(NamedTuple):
    """The storage-rounding answer: ``within`` (:class:`WithinRounding`),
    the looser ``rtol`` used, the set ``S`` that passes with it, and the ``reason``."""

    within: WithinRounding
    rtol: float | None
    S: np.ndarray | None
    reason: str


class _Answer(NamedTuple):
    """What a strategy concludes, the one form :func:`_certificate` reads: the Gram relaxation and
    search (:func:`_gram`) or the ``O(n d²)`` screen of wide blocks (:func:`_screened`).

    ``S``: the sorted indices of a set that rule (★) accepts, or ``None``; ``method``; ``why``: the
    proof of absence, or why there is none (``""`` when found); ``lower``: certified lower bound on
    ``‖Σ m_i M_i + A‖_F`` over ``m ∈ {0,1}^n``; ``residual``: ``‖miss‖_max`` of the one candidate
    checked (the found set's), if any; ``undecided``: no set and no proof of absence;
    ``threshold``: the Frobenius bound on every accepted set's miss; ``failed``: the hypotheses
    that fail; ``hyper``: :func:`verdict.hyperplanes`; ``units(S)``: ``(W_up[S,:], W_down[:,S])``
    balanced in float64 and the stored ``W_down[:,S]`` in float64 (``O(|S| d)``: all a found set
    needs); ``loose(rtol)``: the storage-rounding answer with the looser ``rtol`` when no set
    passes; ``found_by``: what a found set's reason adds; ``relaxation``: the strategy's own
    evidence (``None`` for the screen); ``timings``: seconds per phase."""

    S: np.ndarray | None
    method: str
    why: str
    lower: float
    residual: float | None
    undecided: bool
    threshold: float
    failed: tuple
    hyper: tuple[str, bool]
    units: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]
    loose: Callable[[float], _Rounding]
    found_by: str
    relaxation: RelaxationEvidence | None
    timings: dict


def decide(U, D, A, context: BlockContext, decision: Decision):
    """The decision on ``U = W_up (n, d)``, ``D = W_down (d, n)`` and ``A (d, d)`` with the checked
    ``decision``'s ``rtol``, ``skip_rtol``, ``method`` and ``time_limit``; returns
    ``(Certificate, Relaxation)`` (``Relaxation`` ``None`` when the screen decided). The weights are
    balanced first (exact, :func:`_arith.balance`).

    ``U, D`` are float64, or (from :func:`read_block`, ``n ≥ large.SCREEN_MIN_N``) the stored arrays
    in their own dtype, often memory-mapped: the wide screen reads them in blocks of units, balanced
    block by block (:func:`stored.balance_scales`); float64 copies are made only for the Gram path."""
    t0 = time.perf_counter()
    n = U.shape[0]
    rtol, skip_rtol, method, time_limit = decision.rtol, decision.skip_rtol, decision.method, decision.time_limit
    absolute = _absolute(U, D, context.dtypes)
    rule = Rule.of(A, rtol, ONE if context.slope is None else context.slope)  # c·W_down[:,S] W_up[S,:] = −A
    timings: dict[str, float] = {}
    if method == "auto" and n >= large.SCREEN_MIN_N:  # O(n d²) first; the Gram path only if undecided
        t = time.perf_counter()
        scales = stored.balance_scales(U, D)
        scr = large.wide_screen(U, D, rule, scales=scales)
        if scr is not None:
            res = _screened(U, D, rule, scr, context, scales=scales, absolute=absolute)
            return _certificate(res, rule, context, shape=U.shape, skip_rtol=skip_rtol, t0=t0), None
        timings["screen"] = time.perf_counter() - t
    res, rel = _gram(U, D, rule, context, method=method, time_limit=time_limit, absolute=absolute, timings=timings)
    return _certificate(res, rule, context, shape=U.shape, skip_rtol=skip_rtol, t0=t0), rel


def _gram(
    U, D, rule: Rule, context: BlockContext, *, method, time_limit, absolute, timings
) -> tuple[_Answer, Relaxation]:
    """The Gram strategy: float64 copies of ``U, D``, balanced; the hypotheses with ``W_up W_upᵀ``;
    the relaxations (:func:`relax`) and the search (:func:`_search`). ``O(n² d + n³)``."""
    t = time.perf_counter()
    U0, D0 = _float64(U), _float64(D)
    U, D = balance(U0, D0)
    UUt = U @ U.T
    dtype = (
        np.result_type(*context.dtypes)
        if all(not str(x).startswith("bfloat") for x in context.dtypes)
        else context.dtypes[0]
    )
    failed, min_sin = hypotheses(U, D, UUt, dtype)
    timings["hypotheses"] = time.perf_counter() - t
    rel = relax(U, D, rule.Ac, UUt, timings)
    threshold = rule.threshold(U, D)
    t = time.perf_counter()
    out = _search(U, D, rule, rel, method=method, time_limit=time_limit, target=context.target)
    timings["search"] = time.perf_counter() - t

    def loose(rtol: float) -> _Rounding:  # the search again, with storage rounding's rtol
        t = time.perf_counter()
        again = _search(U, D, rule.loose(rtol), rel, method=method, time_limit=time_limit, target=context.target)
        timings["storage"] = time.perf_counter() - t
        if again.found is not None:
            found = f"S passes with rtol {fmt(rtol)} (found by {again.method})"
            return _Rounding(WithinRounding.YES, rtol, np.flatnonzero(again.found), found)
        if again.undecided:
            return _Rounding(WithinRounding.UNDECIDED, rtol, None, again.why)
        if absolute:
            why = (
                "no S passes the relative storage rule, but some stored entries are zero or subnormal, "
                "where rounding is absolute (not covered by the relative rule)"
            )
            return _Rounding(WithinRounding.UNDECIDED, rtol, None, why)
        return _Rounding(WithinRounding.NO, rtol, None, f"{again.why} [{again.method}]")

    evidence = RelaxationEvidence(
        rank=rel.rank,
        residual=rel.rho,
        dist01=float(np.max(np.abs(rel.c - np.clip(np.round(rel.c), 0, 1)), initial=0.0)),
        radius=rel.radius(threshold),
        min_row_sin=min_sin,
    )
    res = _Answer(
        S=None if out.found is None else np.flatnonzero(out.found),
        method=out.method,
        why=out.why,
        lower=out.lower,
        residual=out.residual,
        undecided=out.undecided,
        threshold=threshold,
        failed=failed,
        hyper=hyperplanes(U0, context.bias, failed) if out.found is None else ("", False),
        units=lambda S: (U[S], D[:, S], D0[:, S]),
        loose=loose,
        found_by="",
        relaxation=evidence,
        timings=timings,
    )
    return res, rel


def _screened(U, D, rule: Rule, scr: scale.Screen, context: BlockContext, *, scales, absolute) -> _Answer:
    """The screen's strategy: :func:`large.wide_screen`'s answer in the one form. ``U, D`` as
    stored (never copied whole); a found set's units are read balanced (``scales``)."""
    n, d = U.shape
    unchecked = [f for f in scr.failed if getattr(f, "kind", "") == "unchecked"]
    why, undecided = scr.reason, scr.status != "absent"
    if scr.status == "absent" and unchecked:
        why, undecided = f"no S exists ({scr.reason}), but a hypothesis is unchecked: {unchecked[0]}", True
    elif scr.status == "undecided":
        why = f"{scr.reason}; n = {n} > {large.GRAM_MAX_N} is too wide for the Gram relaxation"

    def units(S):  # the units of S, balanced, and the stored W_down[:,S] for the output bias
        return *stored.units(U, D, scales.balance, S), stored.as_float64(D[:, S])

    def loose(rtol: float) -> _Rounding:  # the screen's bound against the looser tolerance
        tau_r = rule.widen(scale.miss_threshold(U, D, rule.Ac, rtol, scales=scales.total) + (n + 2) * d * ETA)
        if scr.lower > tau_r and not absolute:
            return _Rounding(
                WithinRounding.NO, rtol, None, f"every S misses by >= {fmt(scr.lower)} > {fmt(tau_r)} [{scr.method}]"
            )
        return _Rounding(WithinRounding.UNDECIDED, rtol, None, "the screen's bound does not reach the looser tolerance")

    return _Answer(
        S=None if scr.status != "found" else np.sort(np.asarray(scr.S)),
        method=scr.method,
        why=why,
        lower=scr.lower,
        residual=None if scr.check is None else scr.check.miss_max,
        undecided=undecided,
        threshold=scr.tau,
        failed=scr.failed,
        hyper=hyperplanes(U, context.bias, scr.failed, wide=True) if scr.status == "absent" else ("", False),
        units=units,
        loose=loose,
        found_by=f"; S found by the O(n d²) screen ({scr.method})",
        relaxation=None,
        timings=dict(scr.timings),
    )


def _certificate(res: _Answer, rule: Rule, context: BlockContext, *, shape, skip_rtol, t0) -> Certificate:
    """The one place a :class:`Certificate` is built, from either strategy: a found set is judged by
    rule (E) (:func:`_promise`), "no S" by :func:`absence`; then the storage-rounding answer."""
    n, d = shape
    S, theorem, bound, exact, offset = None, None, None, None, None
    if res.S is not None:
        status, why, bound, exact, offset = _promise(*res.units(res.S), res.S, rule, skip_rtol, context)
        why += res.found_by
        theorem = found_theorem(status, context, narrow=n < d)
        if status == Status.ABSORBABLE:
            S = res.S
    else:
        status, why, theorem = absence(res, res.failed, context, res.hyper, narrow=n < d)
    extra = storage_rtol_pair(*context.dtypes)
    if extra == 0:
        rounding = _Rounding(WithinRounding.NOT_APPLICABLE, None, None, "float64 or integer storage")
    elif res.S is not None:  # rule (★) with a looser rtol passes the same set
        rounding = _Rounding(WithinRounding.YES, rule.rtol + extra, res.S, "the set S passes already")
    else:
        rounding = res.loose(rule.rtol + extra)
    if S is None and rounding.within == WithinRounding.YES:
        why += (
            f"; but within {'/'.join(map(str, context.dtypes))} storage rounding (rtol "
            f"{fmt(rounding.rtol)}) the set {few(rounding.S)} passes: see within_rounding"
        )
    return Certificate(
        status=status,
        S=S,
        method=res.method,
        reason=why,
        d=d,
        n=n,
        rtol=rule.rtol,
        threshold=res.threshold,
        residual=res.residual,
        lower_bound=res.lower,
        nondegenerate=not res.failed,
        failed=res.failed,
        relaxation=res.relaxation,
        skip=context.skip_kind,
        stored_dtype="/".join(dict.fromkeys(map(str, context.dtypes))),
        within_rounding=rounding.within,
        rounding_rtol=rounding.rtol,
        rounding_S=rounding.S,
        rounding_reason=rounding.reason,
        biased=context.bias is not None,
        activation=context.activation,
        theorem=theorem,
        assumes=context.assumes,
        miss_bound=bound,
        miss_exact=exact,
        offset_bound=offset,
        skip_rtol=skip_rtol,
        seconds=time.perf_counter() - t0,
        timings=res.timings,
    )


def _absolute(U, D, dtypes, block: int = stored.BLOCK) -> bool:
    """:func:`absolute_rounding` of ``W_up`` and of ``W_down``, read in blocks of ``block`` units."""
    blocks = [slice(s, s + block) for s in range(0, U.shape[0], block)]
    up, down = (storage_rtol(dt) > 0 for dt in dtypes)  # else float64 or integers: never absolute
    return (up and any(absolute_rounding(stored.as_float64(U[s]), dtypes[0]) for s in blocks)) or (
        down and any(absolute_rounding(stored.as_float64(D[:, s]), dtypes[1]) for s in blocks)
    )


def _float64(X) -> np.ndarray:
    """``X`` as a float64 array (no copy when it is one)."""
    return X if isinstance(X, np.ndarray) and X.dtype == np.float64 else stored.as_float64(X)


def _promise(u, dd, d0, S, rule: Rule, skip_rtol, context):
    """``(status, reason, bound, exact, offset)`` for a set ``S`` (sorted indices) that passes rule
    (★), from its units only: ``u = W_up[S,:]``, ``dd = W_down[:,S]`` (balanced float64) and the
    stored ``d0 = W_down[:,S]`` (float64). ``absorbable`` when the exact miss
    ``c·W_down[:,S] W_up[S,:] + A`` is small against the skip (rule (E)) and the activation declares
    its odd slope ``c``, else ``undecided`` (cancellation; no declared ``c``). ``offset`` bounds
    ``‖absorber(0) − block(0)‖``: the rounding of the absorber's output bias
    (:func:`_arith.output_bias` on the stored ``W_down[:,S]``; 0 without biases)."""
    A = rule.A
    m = np.ones(S.size, bool)
    smin = sigma_min_lower(A)
    bound, exact = miss_bound(u, dd, A, m, enough=skip_rtol * smin, c=rule.c)  # rule (E), float64 first
    how = "exact rational arithmetic" if exact else "float64 with a rigorous error bound"
    if context.slope is None:
        return (
            Status.UNDECIDED,
            (
                f"W_down[:,S] W_up[S,:] = {context.target} up to {fmt(bound)} for S = {few(S)}, "
                f"but {context.activation} declares no odd slope (sigma(z) - sigma(-z) = c z), so the sign "
                "flip is not known to absorb: absorbable is never issued on a measured fact"
            ),
            bound,
            exact,
            None,
        )
    if bound <= skip_rtol * smin:
        c = "" if rule.c == 1 else "c·"
        why = (
            f"{c}W_down[:,S] W_up[S,:] = {'−I' if context.skip_kind == 'identity' else '−A'} up to a miss "
            f"‖M_S‖_2 <= {fmt(bound)} ({how}): the absorber differs from the block by at most "
            f"{fmt(bound)}·‖x‖ <= {fmt(skip_rtol)}·‖A x‖"
        )
        offset = 0.0
        if context.bias is not None or context.out_bias is not None:
            b = np.zeros(S.size) if context.bias is None else context.bias[S]
            e0 = np.zeros(u.shape[1]) if context.out_bias is None else context.out_bias
            offset = output_bias(d0, b, m, e0, rule.c)[1]
        if context.bias is not None:
            why += (
                f"; with the hidden bias b the absorber also flips b[S] (output bias e = c_out + {c}W_down[:,S] "
                f"b[S], rounded: ‖absorber(0) − block(0)‖ <= {fmt(offset) if offset else 0})"
            )
        return Status.ABSORBABLE, why, bound, exact, offset
    cancel = float(np.max(np.abs(dd) @ np.abs(u)))
    return (
        Status.UNDECIDED,
        (
            f"a set S passes rule (★) (relative to Σ_(i∈S)|W_down||W_up| up to {fmt(cancel)}), but its exact "
            f"miss ‖M_S‖_2 <= {fmt(bound)} is not small against the skip (σ_min(A) >= {fmt(smin)}, skip_rtol "
            f"{fmt(skip_rtol)}): cancellation inside S beyond what float64 resolves"
        ),
        bound,
        exact,
        None,
    )


def read_block(params: MLPParams, activation: str | None, decision: Decision):
    """One ungated block as the decision reads it: ``W_up`` ``(n, d)`` and ``W_down`` ``(d, n)`` in
    float64 (from ``n = large.SCREEN_MIN_N`` on: as stored, float16/32/64 or bfloat16, often
    memory-mapped; :func:`decide` reads them in blocks), ``A`` ``(d, d)`` and the :class:`BlockContext`,
    each argument (and ``decision``'s ``skip``, ``bias``, ``out_bias``) checked (ValueError)."""
    skip, bias, out_bias = decision.skip, decision.bias, decision.out_bias
    act = decidable_activation(activation)
    U, D, _ = float_weights(params, batched=False, stream=large.SCREEN_MIN_N)
    A = stored.identity(U.shape[1]) if skip is None else skip_matrix(skip, U.shape[1])
    kind = "identity" if skip is None else "matrix"
    c = _bias_vector(out_bias, U.shape[1], "out_bias", "the output bias c of W_down σ(W_up x + b) + c")
    slope, assumes = ONE, ()
    if act is not None:
        entry = activations.get(act)
        slope, assumes = entry.odd_slope, entry.assumes
    return U, D, A, BlockContext(storage_dtypes(params), _bias_vector(bias, U.shape[0]), act, kind, c, slope, assumes)


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


def find_absorbing_set(
    params: MLPParams, activation: str | None = None, *, decision: Decision = Decision(), **shorthand
) -> Certificate:
    """Decide whether some ``S`` has ``W_down[:,S] W_up[S,:] = −A`` (Thm 8/10, Lemma 4, and
    Thm 8 via the ray limit for biased blocks and gelu_tanh, silu, softplus).

    The options beside the weights are one :class:`Decision`, ``decision``, whose fields (``skip``
    to ``narrow`` below) may also be passed by keyword as a shorthand that replaces that field
    (``find_absorbing_set(params, "relu", method="milp")``); any other keyword is a ``TypeError``.

    Args:
      params: one ungated block, ``up`` = ``W_up`` ``(n, d)``, ``down`` = ``W_down`` ``(d, n)``
        (NumPy or JAX, any real dtype; decided in float64 on the stored values, the stored dtype is
        recorded). A leading draws axis belongs to :func:`find_absorbing_sets`; gated params raise.
      activation: optional name; gated and homogeneous activations raise, since other results
        decide them. The theorem that reads "no S" is :meth:`activations.Activation.converse`:
        Thm 8 (relu), Thm 10 (gelu), Thm 8 via the ray limit (gelu_tanh, silu, softplus, and every
        biased block of these five), the kink theorem (leaky_relu; every activation with a kink or
        ray limit when ``n < d``); an activation with no declared odd slope, or neither a ray limit
        nor a kink, gets ``undecided``; a user's declared facts are listed in ``cert.assumes``.
        Without a name, "no S" is read with these theorems (the five activations).
      decision: the options, a :class:`Decision`; its fields:
      skip: ``A`` ``(d, d)``; ``None`` is ``I``. Singular or ill-conditioned (condition number
        above ``1/√eps``) raises ``ValueError``.
      rtol: the slack of rule (★) (module docstring), in ``[0, 0.5)``; default ``1e3·eps64``.
      time_limit: seconds for the MILP; reaching it gives ``"undecided"``, never a guess.
      method: ``"auto"`` (relaxations, rounding, then enumeration or MILP), ``"relaxation"``
        (relaxations and rounding only), ``"milp"`` (straight to the MILP; an infeasible verdict is
        confirmed by enumeration for ``n ≤ 24``) or ``"exhaustive"`` (all ``2^n`` subsets, ``n ≤ 24``).
      bias: the hidden bias ``b`` ``(n,)`` of ``σ(W_up x + b)``, if the block has one (an all-zero
        ``b`` is bias-free). An ``S`` gives the absorber (flip ``(w_i, b_i)`` for ``i ∈ S``; the
        output bias ``c`` becomes ``c + W_down[:,S] b[S]``: :func:`absorber_biases`); "no S" is
        ``not_absorbable`` by Thm 8 via the ray limit (any output bias ``c``, any free biases of the
        absorber). Parallel rows are ``degenerate``, except for kink activations (relu,
        leaky_relu) whose biases keep the kink hyperplanes distinct: the kink theorem
        (``docs/theory/kink.md``). The output bias ``c`` never changes the answer.
      skip_rtol: rule (E): ``absorbable`` promises ``‖absorber(x) − block(x)‖ ≤ ‖M_S‖_2 ‖x‖`` with
        ``‖M_S‖_2 ≤ skip_rtol · σ_min(A)`` (default ``1e-6``), ``M_S`` the exact miss; a set that
        passes rule (★) but not this is ``undecided`` (cancellation float64 cannot resolve).
      out_bias: the output bias ``c`` ``(d,)`` (``None``: 0). It never changes the status; an
        ``absorbable`` certificate's ``offset_bound`` bounds ``‖absorber(0) − block(0)‖``, the
        rounding of the output bias ``e = c + W_down[:,S] b[S]`` that :func:`absorber_biases` returns
        (0 where ``e`` is exact), so ``‖absorber(x) − block(x)‖ ≤ miss_bound·‖x‖ + offset_bound``.
      narrow: a block narrower than its input (``n < d``) is decided either way (the kink theorem
        holds at every width), but warns (:class:`models.NarrowBlockWarning`: flax kernels are
        ``(in, out)``, use ``MLPParams.from_flax``) unless ``narrow=True`` says it is meant.

    Returns:
      a :class:`Certificate`; ``str(cert)`` is a readable summary, ``cert.to_dict()`` is JSON.

    Examples:
      >>> import jax
      >>> from absorbjax import condition, models
      >>> with jax.enable_x64(True):
      ...     params, S = models.planted("relu", 2, 4, key=jax.random.key(0))
      ...     generic = models.init("relu", 2, 4, key=jax.random.key(1))
      >>> cert = condition.find_absorbing_set(params, "relu")
      >>> cert.status, cert.S.tolist() == S.tolist()
      ('absorbable', True)
      >>> condition.find_absorbing_set(generic, "relu").status
      'not_absorbable'

    References:
      Mijoski & Karbevski (2026), Thm 8 (ReLU), Thm 10 (GELU), Lemma 4 (invertible skips).
    """
    decision = with_shorthand((decision,), shorthand, "find_absorbing_set")[0]
    U, D, A, context = read_block(params, activation, decision)
    check_layout(params, narrow=decision.narrow)  # after read_block's checks of the shapes
    return decide(U, D, A, context, decision)[0]


def find_absorbing_sets(
    params: MLPParams,
    activation: str | None = None,
    *,
    progress: bool = True,
    decision: Decision = Decision(),
    **shorthand,
) -> list[Certificate]:
    """:func:`find_absorbing_set` for each block along a leading draws axis (``models.sample``).

    ``params.up`` ``(draws, n, d)``, ``params.down`` ``(draws, d, n)``. The options are
    :func:`find_absorbing_set`'s (a :class:`Decision`, or its fields by keyword), except that
    ``skip`` is ``None``, one ``(d, d)`` matrix for all draws or ``(draws, d, d)``, ``bias`` one
    ``(n,)`` or ``(draws, n)``, and ``out_bias`` one ``(d,)`` or ``(draws, d)``; ``narrow`` warns
    once for all draws.
    A plain loop: small blocks take about a millisecond each (``d = 3, n = 12``: over a thousand
    draws per second on two cores, see ``experiments/bench_condition.py``), so a batched
    eigensolver would not change the picture; the MILP, when needed, is per draw anyway.
    ``progress`` shows a tqdm bar over the draws (the MILP can take up to ``time_limit`` each).
    """
    decision = with_shorthand((decision,), shorthand, "find_absorbing_sets")[0]
    U, _, _ = float_weights(params, batched=True)
    draws, n, d = U.shape
    check_layout(params, narrow=decision.narrow)  # warned once, here, for all draws
    skips = _per_draw(decision.skip, (d, d), draws, "skip")
    biases = _per_draw(decision.bias, (n,), draws, "bias")
    outs = _per_draw(decision.out_bias, (d,), draws, "out_bias")
    from tqdm.auto import tqdm

    return [
        find_absorbing_set(
            MLPParams(params.up[k], params.down[k]),
            activation,
            decision=dataclasses.replace(decision, skip=skips[k], bias=biases[k], out_bias=outs[k], narrow=True),
        )
        for k in tqdm(range(draws), desc="find_absorbing_sets", unit="draw", disable=not progress)
    ]


def _per_draw(value, shape: tuple[int, ...], draws: int, name: str) -> list:
    """``value`` for each draw: ``None`` or one array of ``shape`` for all, or ``(draws, *shape)``."""
    if value is None or np.shape(value) == shape:
        return [value] * draws
    if np.shape(value) == (draws, *shape):
        return list(np.asarray(value))
    raise ValueError(f"{name} must have shape {shape} or {(draws, *shape)}, got {np.shape(value)}")
