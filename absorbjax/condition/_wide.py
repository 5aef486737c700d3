"""The entry points' path for wide blocks: a :class:`Certificate` or :class:`Distance` from the
``O(n d²)`` screen of :mod:`absorbjax.condition._screen`, before (or instead of) the Gram path
(:mod:`absorbjax.condition._gram_path`); ``_screen_path.py`` puts the screen's answer in the
decision's one form.

``find_absorbing_set`` (through ``decide``) and ``distance`` call :func:`wide_screen` /
:func:`distance_bounds` for ``n ≥ SCREEN_MIN_N``; ``None`` means "the screen did not decide, run the
Gram path". Beyond
``GRAM_MAX_N`` the Gram path (``O(n³)`` time, ``O(n²)`` memory) is not run: the answer is then
``undecided`` with the screen's bounds. The screen computes none of the Gram relaxation's
evidence: its certificates have ``relaxation = None``.
"""

from __future__ import annotations

import math

import numpy as np

from absorbjax.condition import _reader as reader, _screen as screen
from absorbjax.condition._arith import miss_bound
from absorbjax.condition._certificate import Certificate, Distance, FoundBy
from absorbjax.condition._rule import Rule

SCREEN_MIN_N = 2048  # the entry points screen blocks at least this wide first
GRAM_MAX_N = 8192  # wider blocks never reach the Gram path (≈ 30 s and 4 GB at n = 8192)
_SCREENED = (
    "trace",
    "frank-wolfe",
    "none",
)  # methods of a certificate whose lower bound is the screen's (≥ the trace test's)
FW_BUDGET = 2**37  # n d² up to which distance takes a Frank–Wolfe step (2048×8192: 2^36)


def wide_screen(
    U, D, rule: Rule, *, steps: int = 2, scales: reader.Scales | None = None, nu: float | None = None
) -> screen.Screen | None:
    """The ``O(n d²)`` screen of ``W_up = U (n, d)``, ``W_down = D (d, n)``, skip ``A (d, d)``.

    ``τ`` bounds the exact miss of every set that rule (★) accepts (:meth:`Rule.threshold` from
    ``nu``, the one pass's :func:`screen.norm_sum`: never below the Gram path's). Returns
    ``None`` when the screen does not decide and ``n ≤ GRAM_MAX_N`` (the caller runs the Gram path);
    otherwise the :class:`screen.Screen` (``ABSENT``, ``FOUND``, or ``UNDECIDED`` beyond the
    Gram path's reach). A found set is only a candidate: the caller judges it by rule (E).

    ``U, D`` in any float dtype (memory-mapped, read in blocks); they are read as
    :func:`_arith.balance` stores them (``scales``, default :func:`reader.balance_scales`), so the
    answer is the one on the balanced float64 copy, which is never made. ``nu``: their
    :func:`screen.norm_sum` when already computed.
    """
    n, d = U.shape
    A = rule.Ac  # the search's skip A/c; the found set is checked on the exact c and A
    scales = reader.balance_scales(U, D) if scales is None else scales

    def verify(U, D, _A, S, _rtol):
        S = np.sort(np.asarray(S))
        u, dd = reader.units(U, D, scales.balance, S)  # the balanced units of S only
        m = np.ones(S.size, bool)
        ok, miss = rule.accepts(u, dd, m)
        return screen.SetCheck(S, ok, miss, math.inf if not ok else miss_bound(u, dd, rule.A, m, c=rule.c)[0])

    nu = screen.norm_sum(U, D, scales=scales.total) if nu is None else nu
    tau = rule.threshold(U, D, nu=nu)
    scr = screen.screen(U, D, A, tau=tau, rtol=rule.rtol, steps=steps, verify=verify, scales=scales)
    if scr.status is screen.ScreenStatus.UNDECIDED and n <= GRAM_MAX_N:
        return None
    return scr


def distance_bounds(U, D, A, cert: Certificate, *, steps: int | None = None) -> Distance:
    """:class:`Distance` from the screen: ``lower`` certified by bound (D) after ``steps``
    Frank–Wolfe steps (each about ``1.5 n d²`` multiply-adds; default 1 up to ``n d² = FW_BUDGET``,
    else 0: the trace test's ``O(n d)`` bound), ``upper`` the certified miss of the best set met
    (``∅``, a sign set, the rounded box point), or of ``cert.S`` when it is absorbable.
    All relative to ``‖A‖_F``."""
    norm_a = float(np.linalg.norm(A))
    g = (A.size + 4) * 2.0**-52  # ≥ the relative rounding of norm_a and of one division
    if cert.S is not None:
        chk = screen.screen_check(U, D, A, cert.S, cert.rtol)
        up = chk.miss_frobenius / norm_a * (1 + g)
        return Distance(0.0, up, cert.S, FoundBy.EXACT, math.nan, 0.0, cert)
    n, d = U.shape
    steps = (1 if n * d * d <= FW_BUDGET else 0) if steps is None else steps
    if steps == 0 and cert.method in _SCREENED:  # the trace test's bound: the screen's first, already in cert
        lower = cert.lower_bound / norm_a * (1 - g)
        return Distance(lower, 1.0, np.zeros(0, np.int64), FoundBy.FRANK_WOLFE, math.nan, lower, cert)
    lower, upper, S, *_ = screen.box_bounds(U, D, A, steps=steps)
    lower = max(lower, cert.lower_bound) / norm_a * (1 - g)
    upper = 1.0 if S.size == 0 else upper / norm_a * (1 + g)  # S = ∅ misses by exactly ‖A‖_F
    return Distance(lower, upper, S, FoundBy.FRANK_WOLFE, math.nan, lower, cert)
