"""What a decision does with its own certificate's check: one policy for every certificate.

Every deciding entry point (``condition``'s block decision, ``condition.min_extra_width``,
``dimension.certify``) hands its certificate to :func:`absorbjax.verify` before returning it. A
refuted certificate is never returned as it stands: it becomes ``undecided`` naming the step that
failed, or, with ``ABSORBJAX_STRICT_VERIFY`` set (the test suite sets it), the refutation raises so
that no test passes on a certificate its own checker rejects.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from absorbjax._verify import REFUTED, Verification

C = TypeVar("C")


def strict() -> bool:
    """Whether ``ABSORBJAX_STRICT_VERIFY`` is set: every certificate checked whatever its size, a
    refuted one raises."""
    return bool(os.environ.get("ABSORBJAX_STRICT_VERIFY"))


def settle(cert: C, check: Verification, *, who: str, undecided: Callable[[str], C]) -> C:
    """``cert`` when ``check`` did not refute it; else, in strict mode, an ``AssertionError``; else
    ``undecided(why)``, where ``why`` names the failed step and what the certificate claimed.

    ``cert``: any certificate with ``status`` and ``reason``; ``who``: the entry point, for messages;
    ``undecided``: how that certificate kind becomes ``undecided`` with a given reason."""
    if check.verdict != REFUTED:
        return cert
    if strict():
        raise AssertionError(f"{who}'s certificate is refuted by absorbjax.verify:\n{check}\n{cert}")
    step = check.failed
    return undecided(
        f"the decision's own check refuted its {cert.status} certificate at '{step.name}' ({step.detail}); "
        f"it said: {cert.reason}"
    )
