"""A :class:`Certificate` from a strategy's answer. The two strategies of
:func:`~absorbjax.condition._decide.decide`, the Gram path (``_gram_path.py``) and the ``O(n d²)``
screen of wide blocks (``_screen_path.py``), conclude in one form, an :class:`Answer` whose ``path`` is
their :class:`Strategy` (the small protocol :func:`certificate` and the evidence read); a found set
is judged by rule (E) (:func:`_promise`), "no S" by the theorem that reads it, then the
storage-rounding answer (:class:`StorageRounding`). The line theorem's certificate is built in
``_decide.py``."""

from __future__ import annotations

import time
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from absorbjax.condition._arith import miss_bound, output_bias, sigma_min_lower
from absorbjax.condition._block import BlockContext
from absorbjax.condition._certificate import (
    Certificate,
    Promise,
    RelaxationEvidence,
    Status,
    StorageRounding,
    WithinRounding,
)
from absorbjax.condition._hypotheses import margin_note
from absorbjax.condition._rule import Rule
from absorbjax.condition._screen import dual_lower
from absorbjax.condition._text import few, fmt
from absorbjax.condition._validate import storage_rtol_pair
from absorbjax.condition._verdict import Established, absence, found_theorem, status_of


@runtime_checkable
class Strategy(Protocol):
    """A path of the decision as :func:`certificate` and the evidence read it, besides its
    :class:`Answer`: three things only some certificates need, computed on request. The two
    strategies are the Gram path (:class:`_gram_path.GramPath`) and the ``O(n d²)`` screen of wide
    blocks (:class:`_screen_path.ScreenPath`)."""

    def units(self, S: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(W_up[S,:], W_down[:,S])`` balanced in float64 and the stored ``W_down[:,S]`` in float64
        (``O(|S| d)``: all a found set needs)."""

    def loose(self, rtol: float) -> StorageRounding:
        """The storage-rounding answer with the looser ``rtol`` when no set passes."""

    def witness(self) -> tuple[np.ndarray, np.ndarray, float] | None:
        """The best test matrix ``Z`` for bound (D), its box point and its certified bound, or ``None``."""


class Answer(NamedTuple):
    """What a strategy concludes, the one form :func:`certificate` reads.

    ``S``: the sorted indices of a set that rule (★) accepts, or ``None``; ``method``; ``why``: the
    proof of absence, or why there is none (``""`` when found); ``lower``: certified lower bound on
    ``‖Σ m_i M_i + A‖_F`` over ``m ∈ {0,1}^n``; ``residual``: ``‖miss‖_max`` of the one candidate
    checked (the found set's), if any; ``undecided``: no set and no proof of absence;
    ``threshold``: the Frobenius bound on every accepted set's miss; ``failed``: the hypotheses
    that fail; ``hyper``: :func:`verdict.hyperplanes`; ``found_by``: what a found set's reason adds;
    ``relaxation``: the strategy's own evidence (``None`` for the screen); ``timings``: seconds per
    phase; ``path``: the :class:`Strategy` that answered."""

    S: np.ndarray | None
    method: str
    why: str
    lower: float
    residual: float | None
    undecided: bool
    threshold: float
    failed: tuple
    hyper: tuple[str, bool]
    found_by: str
    relaxation: RelaxationEvidence | None
    timings: dict
    path: Strategy


def certificate(res: Answer, rule: Rule, context: BlockContext, *, shape, skip_rtol, t0, every: bool) -> Certificate:
    """The one place a :class:`Certificate` is built from a search, from either strategy (the line
    theorem's is :func:`_decide._line_certificate`): a found set is judged by rule (E) (:func:`_promise`),
    "no S" by :func:`absence`; then the storage-rounding answer. ``every``: :func:`_decide.every_width`."""
    n, d = shape
    S, theorem, bound, exact, offset = None, None, None, None, None
    if res.S is not None:
        status, why, bound, exact, offset = _promise(*res.path.units(res.S), res.S, rule, skip_rtol, context)
        why += res.found_by
        theorem = found_theorem(status, context, narrow=every)
        if status == Status.ABSORBABLE:
            S = res.S
    else:
        status, why, theorem = absence(res, res.failed, context, res.hyper, narrow=every)
        rel = res.relaxation
        if status == Status.NOT_ABSORBABLE and rel is not None:  # how far the hypotheses hold
            plane = rel.min_plane_sin is not None
            what = "kink hyperplanes (w_i, b_i)" if plane else "rows of W_up"
            why += margin_note(rel.min_plane_sin if plane else rel.min_row_sin, context.dtypes[0], d, what)
    extra = storage_rtol_pair(*context.dtypes)
    if extra == 0:
        rounding = StorageRounding(WithinRounding.NOT_APPLICABLE, None, None, "float64 or integer storage")
    elif res.S is not None:  # rule (★) with a looser rtol passes the same set
        rounding = StorageRounding(WithinRounding.YES, rule.rtol + extra, res.S, "the set S passes already")
    else:
        rounding = res.path.loose(rule.rtol + extra)
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
        rounding=rounding,
        biased=context.bias is not None,
        activation=context.activation,
        theorem=theorem,
        assumes=context.assumes,
        promise=Promise(bound, exact, offset, skip_rtol),
        seconds=time.perf_counter() - t0,
        timings=res.timings,
    )


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
            status_of(Established.UNPROMISED),
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
        return status_of(Established.PROMISED), why, bound, exact, offset
    cancel = float(np.max(np.abs(dd) @ np.abs(u)))
    if smin == 0:
        return (
            status_of(Established.UNPROMISED),
            (
                f"a set S passes rule (★), but its exact miss ‖M_S‖_2 <= {fmt(bound)} is not 0 and the skip A is "
                "singular or not provably invertible (no σ_min(A) > 0 is certified), so the absorber's error "
                "M_S x cannot be bounded by skip_rtol·‖A x‖: rule (E) accepts only an exact miss here"
            ),
            bound,
            exact,
            None,
        )
    return (
        status_of(Established.UNPROMISED),
        (
            f"a set S passes rule (★) (relative to Σ_(i∈S)|W_down||W_up| up to {fmt(cancel)}), but its exact "
            f"miss ‖M_S‖_2 <= {fmt(bound)} is not small against the skip (σ_min(A) >= {fmt(smin)}, skip_rtol "
            f"{fmt(skip_rtol)}): cancellation inside S beyond what float64 resolves"
        ),
        bound,
        exact,
        None,
    )


def best_witness(U, D, A, points: list) -> tuple[np.ndarray, np.ndarray, float]:
    """``(Z, c, bound)``: of the box points ``c`` ``(n,)`` in ``points``, the one whose residual
    ``Z = A + Σ c_i M_i`` (float64, ``U, D`` as given) has the largest bound (D) (:func:`dual_lower`),
    and that bound: the evidence of "no S" that :func:`absorbjax.verify` checks."""
    Zs = [A + (D * c) @ U if np.any(c) else A for c in points]  # c = 0: Z = A exactly (the trace test, O(n d))
    bounds = [dual_lower(U, D, A, Z) for Z in Zs]
    k = int(np.argmax(bounds))
    return Zs[k], points[k], bounds[k]
