"""What a decision concludes, and from which theorem: the status and reason when no set passes
(:func:`absence`), the theorem behind an ``absorbable`` answer (:func:`found_theorem`), the kink
theorem's hypothesis for parallel rows with biases (:func:`hyperplanes`), and how a certificate
cites a theorem for an activation with declared facts (:func:`given`).

``inputs`` is :class:`absorbjax.condition.decide.Inputs` (its ``activation``, ``bias``,
``assumes``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from absorbjax import activations
from absorbjax.activations import KINK_THEOREM, RAY_LIMIT_KINK_THEOREM, RAY_LIMIT_THEOREM
from absorbjax.condition._arith import balance
from absorbjax.condition.certificate import Status
from absorbjax.condition.inputs import parallel_pairs

if TYPE_CHECKING:
    from absorbjax.condition.decide import Inputs

__all__ = ["absence", "found_theorem", "given", "hyperplanes"]


def given(theorem: str | None, inputs: Inputs) -> str | None:
    """The theorem as a certificate cites it: with the declared facts it rests on, for an activation
    outside the built-ins."""
    if theorem is None or not inputs.assumes:
        return theorem
    return f"{theorem}, given the declared facts ({'; '.join(inputs.assumes)})"


def absence(out, failed, inputs, hyper, narrow: bool) -> tuple[str, str, str | None]:
    """``(status, reason, theorem)`` when no set passes (or the search is undecided). ``hyper``:
    :func:`hyperplanes`; ``narrow``: ``n < d``."""
    if out.undecided:
        return Status.UNDECIDED, out.why, None
    biased = inputs.bias is not None
    act = inputs.activation
    par_text, distinct = hyper
    if act is None:
        if narrow:
            theorem = f"{KINK_THEOREM} for relu, {RAY_LIMIT_KINK_THEOREM} for gelu, gelu_tanh, silu, softplus"
        elif biased:
            theorem = RAY_LIMIT_THEOREM + " (relu, gelu, gelu_tanh, silu, softplus)"
        else:
            theorem = "Thm 8/10 (relu, gelu; Thm 8 via the ray limit for gelu_tanh, silu, softplus)"
    else:
        entry = activations.get(act)
        if entry.odd_slope is None:
            return (
                Status.UNDECIDED,
                (
                    f"no S exists ({out.why}), but {act} declares no odd slope (sigma(z) - sigma(-z) = c z): "
                    "no theorem applies"
                ),
                None,
            )
        only_parallel = failed and all(getattr(f, "kind", "") == "parallel" for f in failed)
        if only_parallel and distinct and entry.converse(biased=biased, parallel_rows=True) is not None:
            theorem = given(entry.converse(biased=biased, parallel_rows=True), inputs)
            why = f"no S exists, so by {theorem} (parallel rows, distinct kink hyperplanes: {par_text}): {out.why}"
            return Status.NOT_ABSORBABLE, why, theorem
        theorem = entry.converse(biased=biased, narrow=narrow)
        if theorem is None:
            lack = (
                "Thm 8 assumes width n >= d and no every-width theorem covers it"
                if narrow
                else "no declared ray limit or kink"
            )
            return (
                Status.UNDECIDED,
                (
                    f"no S exists ({out.why}), but for {act} only the 'if' direction is known "
                    f"(an S gives an absorber); no converse is proved ({lack})"
                ),
                None,
            )
        theorem = given(theorem, inputs)
    if failed:
        why = f"no S exists ({out.why}), but {theorem} needs nondegenerate weights"
        if par_text and distinct:
            why += (
                "; parallel rows with distinct biases (distinct kink hyperplanes) merge in the ray "
                f"limit: {par_text}; not decided"
            )
        return Status.DEGENERATE, why, theorem
    return Status.NOT_ABSORBABLE, f"no S exists, so by {theorem}: {out.why}", theorem


def hyperplanes(U, bias, failed) -> tuple[str, bool]:
    """``(text, distinct)``: the parallel pairs of rows whose hyperplanes ``w·x + b = 0`` differ, in
    words ("" if none), and whether every parallel pair has distinct hyperplanes (pairwise
    non-proportional ``(w_i, b_i)``, the kink theorem's (H2))."""
    if bias is None or not any(getattr(f, "kind", "") == "parallel" for f in failed):
        return "", False
    V = balance(np.concatenate([U, bias[:, None]], axis=1), np.ones((1, U.shape[0])))[0]
    same = set(parallel_pairs(V, V @ V.T, np.float64))
    Ub = balance(U, np.ones((1, U.shape[0])))[0]
    pairs = [p for p in parallel_pairs(Ub, Ub @ Ub.T, np.float64) if p not in same]
    text = "" if not pairs else f"pairs {pairs[:5]}" + (f" and {len(pairs) - 5} more" if len(pairs) > 5 else "")
    return text, bool(pairs) and not same


def found_theorem(status: str, inputs: Inputs, *, narrow: bool) -> str | None:
    """The theorem behind "iff" of an ``absorbable`` answer for a named activation, if any."""
    if inputs.activation is None or status != Status.ABSORBABLE:
        return None
    entry = activations.get(inputs.activation)
    return given(entry.converse(biased=inputs.bias is not None, narrow=narrow), inputs)
