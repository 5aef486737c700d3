"""The entry points' path for wide blocks: a :class:`Certificate` or :class:`Distance` from the
``O(n d²)`` screen of :mod:`absorbjax.condition.scale`, before (or instead of) the Gram path.

``find_absorbing_set`` and ``distance`` call :func:`certificate` / :func:`distance_bounds` for
``n ≥ SCREEN_MIN_N``; ``None`` means "the screen did not decide, run the Gram path". Beyond
``GRAM_MAX_N`` the Gram path (``O(n³)`` time, ``O(n²)`` memory) is not run: the answer is then
``undecided`` with the screen's bounds. Fields of the Gram relaxation that were not computed are
``rank = -1``, ``relaxation_residual = dist01 = nan``, ``radius = min_row_sin = None``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from absorbjax.condition import scale
from absorbjax.condition.certificate import Certificate, Distance
from absorbjax.condition.inputs import storage_rtol

__all__ = ["FW_BUDGET", "GRAM_MAX_N", "SCREEN_MIN_N", "certificate", "distance_bounds"]

SCREEN_MIN_N = 2048  # the entry points screen blocks at least this wide first
GRAM_MAX_N = 8192  # wider blocks never reach the Gram path (≈ 30 s and 4 GB at n = 8192)
FW_BUDGET = 2**37  # n d² up to which distance takes a Frank–Wolfe step (2048×8192: 2^36)
_CONVERSE = {"relu": "Thm 8", "gelu": "Thm 10"}  # activations whose "no S ⇒ no absorber" is proved


def _absent_status(scr: scale.Screen, activation, biased: bool) -> tuple[str, str]:
    """The status a proof of "no S" supports, as in :func:`condition.find_absorbing_set`."""
    undecided_hyp = [f for f in scr.failed if f.startswith("undecided")]
    if biased:
        return "undecided", (f"no S exists ({scr.reason}), but the block has a hidden bias: an S would "
                             "give an absorber, the converse is not proved for biased blocks")
    if activation is not None and activation not in _CONVERSE:
        return "undecided", (f"no S exists ({scr.reason}), but for {activation} only the 'if' direction "
                             "is known; Thm 8/10 prove the converse for relu and gelu only")
    if undecided_hyp:
        return "undecided", f"no S exists ({scr.reason}), but the hypotheses are unchecked: {undecided_hyp[0]}"
    if scr.failed:
        return "degenerate", f"no S exists ({scr.reason}), but Thm 8/10 needs nondegenerate weights"
    return "not_absorbable", f"no S exists, so by {_CONVERSE.get(activation, 'Thm 8/10 (relu, gelu)')}: {scr.reason}"


def certificate(U, D, A, dtype, *, rtol: float, activation=None, skip_kind: str = "identity",
                biased: bool = False, steps: int = 2, threshold: Callable = scale.miss_threshold,
                verify: Callable | None = None) -> Certificate | None:
    """The screen's :class:`Certificate` for ``W_up = U (n, d)``, ``W_down = D (d, n)``, skip ``A (d, d)``.

    ``dtype`` is the stored dtype (storage rounding is answered with ``rtol + storage_rtol(dtype)``);
    ``threshold(U, D, A, rtol)`` is the acceptance rule's Frobenius bound ``τ`` and ``verify`` its
    check of one set (defaults: rule (★)). Returns ``None`` when the screen does not decide and
    ``n ≤ GRAM_MAX_N`` (the caller runs the Gram path).
    """
    t0 = time.perf_counter()
    n, d = U.shape
    tau = threshold(U, D, A, rtol)
    scr = scale.screen(U, D, A, tau=tau, rtol=rtol, steps=steps, verify=verify)
    if scr.status == "undecided" and n <= GRAM_MAX_N:
        return None
    target = "−I" if skip_kind == "identity" else "−A"
    extra = storage_rtol(dtype)
    rounding_rtol = rtol + extra if extra > 0 else None
    rounding, rounding_S, rounding_reason = "n/a", None, "float64 or integer storage"
    if scr.status == "found":
        status, S = "absorbable", scr.S
        why = (f"W_down[:,S] W_up[S,:] = {target} within rtol {rtol:.3g} per entry (relative to the units "
               f"in S, float64 rounding included); S found by the O(n d²) screen ({scr.method})")
        if biased:
            why += "; with the hidden bias b the absorber also flips b[S] (the output bias gains W_down[:,S] b[S])"
        if rounding_rtol is not None:
            rounding, rounding_S, rounding_reason = "yes", S, "the set S passes already"
    else:
        S = None
        if scr.status == "absent":
            status, why = _absent_status(scr, activation, biased)
        else:
            status, why = "undecided", (f"{scr.reason}; n = {n} > {GRAM_MAX_N} is too wide for the Gram "
                                        "relaxation (O(n³) time, O(n²) memory)")
        if rounding_rtol is not None:
            tau_r = threshold(U, D, A, rounding_rtol)
            if scr.lower > tau_r:
                rounding, rounding_reason = "no", (f"every S misses by >= {scr.lower:.3g} > {tau_r:.3g} "
                                                   f"[{scr.method}]")
            else:
                rounding, rounding_reason = "undecided", "the screen's bound does not reach the looser tolerance"
    return Certificate(
        status=status, S=S, method=scr.method, reason=why, d=d, n=n, rtol=rtol, threshold=tau,
        residual=None if scr.check is None else scr.check.miss_max, relaxation_residual=math.nan,
        lower_bound=scr.lower, rank=-1, dist01=math.nan, radius=None, nondegenerate=not scr.failed,
        failed=scr.failed, min_row_sin=None, skip=skip_kind, stored_dtype=str(dtype),
        within_rounding=rounding, rounding_rtol=rounding_rtol, rounding_S=rounding_S,
        rounding_reason=rounding_reason, biased=biased, activation=activation,
        seconds=time.perf_counter() - t0, timings=dict(scr.timings),
    )


def distance_bounds(U, D, A, cert: Certificate, *, steps: int | None = None) -> Distance:
    """:class:`Distance` from the screen: ``lower`` certified by bound (D) after ``steps``
    Frank–Wolfe steps (each about ``1.5 n d²`` multiply-adds; default 1 up to ``n d² = FW_BUDGET``,
    else 0: the trace test's ``O(n d)`` bound), ``upper`` the certified miss of the best set met
    (``∅``, a sign set, the rounded box point), or of ``cert.S`` when it is absorbable.
    All relative to ``‖A‖_F``."""
    norm_a = float(np.linalg.norm(A))
    g = (A.size + 4) * 2.0**-52  # ≥ the relative rounding of norm_a and of one division
    if cert.S is not None:
        chk = scale.verify_set(U, D, A, cert.S, cert.rtol)
        up = chk.miss_frobenius / norm_a * (1 + g)
        return Distance(0.0, up, cert.S, "exact", math.nan, 0.0, cert)
    n, d = U.shape
    steps = (1 if n * d * d <= FW_BUDGET else 0) if steps is None else steps
    lower, upper, S, _ = scale.box_bounds(U, D, A, steps=steps)
    lower = max(lower, cert.lower_bound) / norm_a * (1 - g)
    upper = 1.0 if S.size == 0 else upper / norm_a * (1 + g)  # S = ∅ misses by exactly ‖A‖_F
    return Distance(lower, upper, S, "frank-wolfe", math.nan, lower, cert)
