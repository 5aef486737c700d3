"""The ``O(n d²)`` screen of wide blocks as the decision's second strategy: the answer of
:func:`_large.wide_screen` in the one form (:class:`_assemble.Answer`, :func:`screened`) with
:class:`ScreenPath`, its :class:`_assemble.Strategy`. ``W_up``, ``W_down`` are read as stored
(never copied whole)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from absorbjax.condition import _hypotheses as hyp, _large as large, _scale as scale, _stored as stored
from absorbjax.condition._assemble import Answer
from absorbjax.condition._block import BlockContext
from absorbjax.condition._certificate import StorageRounding, WithinRounding
from absorbjax.condition._rule import Rule
from absorbjax.condition._text import fmt
from absorbjax.condition._verdict import hyperplanes


class ScreenPath(NamedTuple):
    """The ``O(n d²)`` screen as a :class:`_assemble.Strategy`: ``U, D`` as stored (never copied
    whole), read balanced by ``scales``; ``nu`` the :func:`scale.norm_sum` its ``τ`` was made from."""

    U: np.ndarray
    D: np.ndarray
    rule: Rule
    scr: scale.Screen
    scales: stored.Scales
    nu: float
    absolute: bool

    def units(self, S):
        return *stored.units(self.U, self.D, self.scales.balance, S), stored.as_float64(self.D[:, S])

    def loose(self, rtol: float) -> StorageRounding:
        """The screen's bound against the looser tolerance."""
        tau_r = self.rule.loose(rtol).threshold(self.U, self.D, nu=self.nu)
        scr = self.scr
        if scr.lower > tau_r and not self.absolute:
            why = f"every S misses by >= {fmt(scr.lower)} > {fmt(tau_r)} [{scr.method}]"
            return StorageRounding(WithinRounding.NO, rtol, None, why)
        why = "the screen's bound does not reach the looser tolerance"
        return StorageRounding(WithinRounding.UNDECIDED, rtol, None, why)

    def witness(self):
        return None if self.scr.witness is None else (*self.scr.witness, self.scr.lower)


def screened(U, D, rule: Rule, scr: scale.Screen, context: BlockContext, *, scales, nu, absolute) -> Answer:
    """The screen's strategy: :func:`large.wide_screen`'s answer in the one form. ``U, D`` as
    stored (never copied whole); a found set's units are read balanced (``scales``); ``nu`` the
    :func:`scale.norm_sum` the screen's ``τ`` was made from."""
    n, d = U.shape
    unchecked = [f for f in scr.failed if hyp.kind_of(f) is hyp.Hypothesis.UNCHECKED]
    why, undecided = scr.reason, scr.status is not scale.ScreenStatus.ABSENT
    if scr.status is scale.ScreenStatus.ABSENT and unchecked:
        why, undecided = f"no S exists ({scr.reason}), but a hypothesis is unchecked: {unchecked[0]}", True
    elif scr.status is scale.ScreenStatus.UNDECIDED:
        why = f"{scr.reason}; n = {n} > {large.GRAM_MAX_N} is too wide for the Gram relaxation"

    return Answer(
        S=None if scr.status is not scale.ScreenStatus.FOUND else np.sort(np.asarray(scr.S)),
        method=scr.method,
        why=why,
        lower=scr.lower,
        residual=None if scr.check is None else scr.check.miss_max,
        undecided=undecided,
        threshold=scr.tau,
        failed=scr.failed,
        hyper=hyperplanes(U, context.bias, scr.failed, wide=True)
        if scr.status is scale.ScreenStatus.ABSENT
        else ("", False),
        found_by=f"; S found by the O(n d²) screen ({scr.method})",
        relaxation=None,
        timings=dict(scr.timings),
        path=ScreenPath(U, D, rule, scr, scales, nu, absolute),
    )
