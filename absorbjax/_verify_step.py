"""One step of an independent check (:func:`absorbjax.verify`): the claim checked and whether it holds.
The checkers of block, width and depth certificates (``_verify``, ``_verify_width``,
``_verify_depth``) all answer in steps; it lives here so that none of them imports another."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Step:
    """One checked claim: ``ok`` ``True`` (holds), ``False`` (refutes) or ``None`` (not checked: ``detail``)."""

    name: str
    ok: bool | None
    detail: str


def fingerprint_step(computed: str | None, claimed: str | None) -> Step:
    """The weights against the certificate's fingerprint (``unchecked`` without one)."""
    if not claimed:
        return Step("fingerprint", None, "no fingerprint in the certificate")
    same = computed == claimed
    return Step(
        "fingerprint", same, "the weights are the ones decided" if same else "these weights are not the ones decided"
    )
