"""What a decision concludes, and from which theorem: the one table from what it established to
its status (:data:`VERDICTS`, read by :func:`status_of`), the status and reason when no set passes
(:func:`absence`), the theorem behind an ``absorbable`` answer (:func:`found_theorem`), the kink
theorem's hypothesis for parallel rows with biases (:func:`hyperplanes`), and how a certificate
cites a theorem for an activation with declared facts (:func:`given`).

``context`` is :class:`absorbjax.condition._decide.BlockContext` (its ``activation``, ``bias``,
``assumes``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from absorbjax import activations
from absorbjax.activations import KINK_THEOREM, RAY_LIMIT_KINK_THEOREM, RAY_LIMIT_THEOREM
from absorbjax.condition import _hypotheses as hyp, _reader as reader
from absorbjax.condition._arith import balance
from absorbjax.condition._certificate import Status
from absorbjax.condition._hypotheses import parallel_pairs
from absorbjax.results import Word

if TYPE_CHECKING:
    from absorbjax.condition._block import BlockContext


def given(theorem: str | None, context: BlockContext) -> str | None:
    """The theorem as a certificate cites it: with the declared facts it rests on, for an activation
    outside the built-ins."""
    if theorem is None or not context.assumes:
        return theorem
    return f"{theorem}, given the declared facts ({'; '.join(context.assumes)})"


class Established(Word):
    """What the decision's set search established, the first column of :data:`VERDICTS`."""

    PROMISED = "a set passes rules (★) and (E)"
    UNPROMISED = "a set passes rule (★) but not rule (E), or the activation declares no odd slope"
    UNKNOWN = "no set found and no proof that none exists"
    NO_SET = "no set passes rule (★), proved"
    LINE = "the line theorem's absorber (d = 1, a kink activation)"
    REFUTED = "the independent check refuted what the decision claimed"


class Hypotheses(Word):
    """The hypotheses of the theorem a "no S" would cite (rows of ``W_up`` nonzero and pairwise
    non-parallel, columns of ``W_down`` nonzero), the second column of :data:`VERDICTS`."""

    HOLD = "hold"
    KINK = "only parallel rows fail, their kink hyperplanes (w_i, b_i) distinct"
    FAIL = "fail"


class Converse(Word):
    """What the activation proves from "no S", the third column of :data:`VERDICTS`
    (:meth:`absorbjax.activations.Activation.converse`)."""

    PROVED = "a converse theorem"
    KINK = "the kink theorem, which allows parallel rows with distinct kink hyperplanes"
    NONE = "only the 'if' direction (an S gives an absorber)"
    NO_SLOPE = "no declared odd slope"


VERDICTS: dict[tuple[Established, Hypotheses | None, Converse | None], Status] = {
    (Established.PROMISED, None, None): Status.ABSORBABLE,
    (Established.UNPROMISED, None, None): Status.UNDECIDED,
    (Established.UNKNOWN, None, None): Status.UNDECIDED,
    (Established.LINE, None, None): Status.ABSORBABLE,
    (Established.REFUTED, None, None): Status.UNDECIDED,
    (Established.NO_SET, None, Converse.NO_SLOPE): Status.UNDECIDED,
    (Established.NO_SET, None, Converse.NONE): Status.UNDECIDED,
    (Established.NO_SET, Hypotheses.HOLD, Converse.PROVED): Status.NOT_ABSORBABLE,
    (Established.NO_SET, Hypotheses.KINK, Converse.KINK): Status.NOT_ABSORBABLE,
    (Established.NO_SET, Hypotheses.KINK, Converse.PROVED): Status.DEGENERATE,
    (Established.NO_SET, Hypotheses.FAIL, Converse.PROVED): Status.DEGENERATE,
}
"""The one table from what a decision established to its status (``None``: whatever the column
holds). Only ``not_absorbable`` and ``degenerate`` cite a theorem (and ``absorbable``, for a named
activation, the theorem behind "iff": :func:`found_theorem`)."""


def status_of(established: Established, hypotheses: Hypotheses | None = None, converse: Converse | None = None):
    """The :class:`Status` that :data:`VERDICTS` gives: the row matching all three columns, a
    ``None`` in the table matching anything."""
    for key in ((established, hypotheses, converse), (established, None, converse), (established, None, None)):
        if key in VERDICTS:
            return VERDICTS[key]
    raise KeyError(f"no verdict for {(established, hypotheses, converse)}")


def _converse(context: BlockContext, hypotheses: Hypotheses, narrow: bool) -> tuple[Converse, str | None]:
    """What ``context``'s activation proves from "no S" under ``hypotheses``, and the theorem cited."""
    act, biased = context.activation, context.bias is not None
    if act is None:  # the built-ins together
        if narrow:
            return (
                Converse.PROVED,
                f"{KINK_THEOREM} for relu, {RAY_LIMIT_KINK_THEOREM} for gelu, gelu_tanh, silu, softplus",
            )
        if biased:
            return Converse.PROVED, RAY_LIMIT_THEOREM + " (relu, gelu, gelu_tanh, silu, softplus)"
        return Converse.PROVED, "Thm 8/10 (relu, gelu; Thm 8 via the ray limit for gelu_tanh, silu, softplus)"
    entry = activations.get(act)
    if entry.odd_slope is None:
        return Converse.NO_SLOPE, None
    if hypotheses is Hypotheses.KINK and (kink := entry.converse(biased=biased, parallel_rows=True)) is not None:
        return Converse.KINK, given(kink, context)
    theorem = entry.converse(biased=biased, narrow=narrow)
    return (Converse.NONE, None) if theorem is None else (Converse.PROVED, given(theorem, context))


def absence(out, failed, context, hyper, narrow: bool) -> tuple[str, str, str | None]:
    """``(status, reason, theorem)`` when no set passes (or the search is undecided), from
    :data:`VERDICTS`. ``hyper``: :func:`hyperplanes`; ``narrow``: ``n < d``."""
    if out.undecided:
        return status_of(Established.UNKNOWN), out.why, None
    par_text, distinct = hyper
    only_parallel = failed and all(hyp.kind_of(f) is hyp.Hypothesis.PARALLEL for f in failed)
    hypotheses = Hypotheses.HOLD if not failed else Hypotheses.KINK if only_parallel and distinct else Hypotheses.FAIL
    converse, theorem = _converse(context, hypotheses, narrow)
    status = status_of(Established.NO_SET, hypotheses, converse)
    act = context.activation
    if converse is Converse.NO_SLOPE:
        why = (
            f"no S exists ({out.why}), but {act} declares no odd slope (sigma(z) - sigma(-z) = c z): no theorem applies"
        )
    elif converse is Converse.NONE:
        lack = (
            "Thm 8 assumes width n >= d and no every-width theorem covers it"
            if narrow
            else "no declared ray limit or kink"
        )
        why = (
            f"no S exists ({out.why}), but for {act} only the 'if' direction is known "
            f"(an S gives an absorber); no converse is proved ({lack})"
        )
    elif converse is Converse.KINK:
        why = f"no S exists, so by {theorem} (parallel rows, distinct kink hyperplanes: {par_text}): {out.why}"
    elif status == Status.DEGENERATE:
        why = f"no S exists ({out.why}), but {theorem} needs nondegenerate weights"
        if par_text and distinct:
            why += (
                "; parallel rows with distinct biases (distinct kink hyperplanes) merge in the ray "
                f"limit: {par_text}; not decided"
            )
    else:
        why = f"no S exists, so by {theorem}: {out.why}"
    return status, why, theorem if status != Status.UNDECIDED else None


def hyperplanes(U, bias, failed, *, wide: bool = False) -> tuple[str, bool]:
    """``(text, distinct)``: the parallel pairs of rows whose hyperplanes ``w·x + b = 0`` differ, in
    words ("" if none), and whether every parallel pair has distinct hyperplanes (pairwise
    non-proportional ``(w_i, b_i)``, the kink theorem's (H2)). ``U = W_up (n, d)``; ``wide``: as
    stored, read in blocks (:func:`wide_hyperplanes`, no ``n × n`` matrix), else float64."""
    if bias is None or not any(hyp.kind_of(f) is hyp.Hypothesis.PARALLEL for f in failed):
        return "", False
    if wide:
        pairs, distinct = wide_hyperplanes(U, bias)
        return f"pairs {pairs[:5]}" + (" and more" if len(pairs) > 5 else ""), distinct
    V = balance(np.concatenate([U, bias[:, None]], axis=1), np.ones((1, U.shape[0])))[0]
    same = set(parallel_pairs(V, V @ V.T, np.float64))
    Ub = balance(U, np.ones((1, U.shape[0])))[0]
    pairs = [p for p in parallel_pairs(Ub, Ub @ Ub.T, np.float64) if p not in same]
    text = "" if not pairs else f"pairs {pairs[:5]}" + (f" and {len(pairs) - 5} more" if len(pairs) > 5 else "")
    return text, bool(pairs) and not same


def found_theorem(status: str, context: BlockContext, *, narrow: bool) -> str | None:
    """The theorem behind "iff" of an ``absorbable`` answer for a named activation, if any."""
    if context.activation is None or status != Status.ABSORBABLE:
        return None
    entry = activations.get(context.activation)
    return given(entry.converse(biased=context.bias is not None, narrow=narrow), context)


class _WithBias:
    """The rows ``(W_up[i,:], b_i)`` ``(n, d + 1)`` in float64, read by index or block of units (the
    whole matrix is never copied)."""

    def __init__(self, U, b):
        self.U, self.b, self.shape = U, np.asarray(b, np.float64), (U.shape[0], U.shape[1] + 1)

    def __getitem__(self, idx):
        return np.concatenate([reader.as_float64(self.U[idx]), self.b[idx, None]], axis=1)


def wide_hyperplanes(U, b, *, block: int = reader.BLOCK) -> tuple[list[tuple[int, int]], bool]:
    """``(pairs, distinct)`` for the kink theorem's (H2) on a wide block: up to six exactly parallel
    pairs of rows of ``W_up`` ``(n, d)``, and whether the hyperplanes ``w_i·x + b_i = 0`` are
    pairwise distinct (no two ``(w_i, b_i)`` proportional, proved exactly; ``False`` when the search
    could not finish). ``O(n d + n log n)``, blockwise, like :func:`_hypotheses.blockwise`."""
    n = U.shape[0]
    live = np.concatenate([np.any(reader.as_float64(U[s]) != 0, axis=1) for s in reader.blocks(n, block)])
    pairs = hyp.parallel_rows(U, live, block=block, cap=10 * n, enough=6)[0]
    same, tested, _ = hyp.parallel_rows(_WithBias(U, b), live, block=block, cap=10 * n, enough=1)
    return sorted(pairs), bool(pairs) and not same and tested <= 10 * n
