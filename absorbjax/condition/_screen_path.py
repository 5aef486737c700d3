"""The ``O(n d²)`` screen of wide blocks as the decision's second strategy: the answer of
:func:`_wide.wide_screen` in the one form (:class:`_assemble.Answer`, :func:`screened`) with
:class:`ScreenPath`, its :class:`_assemble.Strategy`. ``W_up``, ``W_down`` are read as stored
(never copied whole)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from absorbjax.condition import _hypotheses as hyp, _reader as reader, _screen as screen, _wide as wide
from absorbjax.condition._assemble import Answer
from absorbjax.condition._block import StoredBlock
from absorbjax.condition._certificate import StorageRounding, WithinRounding
from absorbjax.condition._rule import Rule
from absorbjax.condition._text import fmt
from absorbjax.condition._verdict import hyperplanes


class ScreenPath(NamedTuple):
    """The ``O(n d²)`` screen as a :class:`_assemble.Strategy`: ``block``'s weights as stored (never
    copied whole), read balanced by ``block.scales``; ``nu`` the :func:`screen.norm_sum` its ``τ`` was
    made from."""

    block: StoredBlock
    rule: Rule
    scr: screen.Screen
    nu: float

    def units(self, S):
        U, D = self.block.up, self.block.down
        return *reader.units(U, D, self.block.scales.balance, S), reader.as_float64(D[:, S])

    def loose(self, rtol: float) -> StorageRounding:
        """The screen's bound against the looser tolerance."""
        tau_r = self.rule.loose(rtol).threshold(self.block.up, self.block.down, nu=self.nu)
        scr = self.scr
        if scr.lower > tau_r and not self.block.absolute:
            why = f"every S misses by >= {fmt(scr.lower)} > {fmt(tau_r)} [{scr.method}]"
            return StorageRounding(WithinRounding.NO, rtol, None, why)
        why = "the screen's bound does not reach the looser tolerance"
        return StorageRounding(WithinRounding.UNDECIDED, rtol, None, why)

    def witness(self):
        return None if self.scr.witness is None else (*self.scr.witness, self.scr.lower)


def screened(block: StoredBlock, rule: Rule, scr: screen.Screen, *, nu) -> Answer:
    """The screen's strategy: :func:`wide.wide_screen`'s answer on ``block`` in the one form (its
    weights as stored, never copied whole; a found set's units read balanced by ``block.scales``);
    ``nu`` the :func:`screen.norm_sum` the screen's ``τ`` was made from."""
    n, d = block.shape
    unchecked = [f for f in scr.failed if hyp.kind_of(f) is hyp.Hypothesis.UNCHECKED]
    why, undecided = scr.reason, scr.status is not screen.ScreenStatus.ABSENT
    if scr.status is screen.ScreenStatus.ABSENT and unchecked:
        why, undecided = f"no S exists ({scr.reason}), but a hypothesis is unchecked: {unchecked[0]}", True
    elif scr.status is screen.ScreenStatus.UNDECIDED:
        why = f"{scr.reason}; n = {n} > {wide.GRAM_MAX_N} is too wide for the Gram relaxation"

    return Answer(
        S=None if scr.status is not screen.ScreenStatus.FOUND else np.sort(np.asarray(scr.S)),
        method=scr.method,
        why=why,
        lower=scr.lower,
        residual=None if scr.check is None else scr.check.miss_max,
        undecided=undecided,
        threshold=scr.tau,
        failed=scr.failed,
        hyper=hyperplanes(block.up, block.context.bias, scr.failed, wide=True)
        if scr.status is screen.ScreenStatus.ABSENT
        else ("", False),
        found_by=f"; S found by the O(n d²) screen ({scr.method})",
        relaxation=None,
        timings=dict(scr.timings),
        path=ScreenPath(block, rule, scr, nu),
    )
