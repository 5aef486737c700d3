"""How to decide, as one typed object: :class:`Decision`, taken by every entry point that decides
(:func:`~absorbjax.condition.find_absorbing_set`, :func:`~absorbjax.condition.find_absorbing_sets`,
:func:`~absorbjax.condition.distance`, :func:`~absorbjax.condition.min_extra_width`,
:func:`absorbjax.weights.check`). What describes the block (its skip and biases) is not here: those
are the functions' own parameters."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from absorbjax.condition._certificate import METHODS
from absorbjax.condition._validate import DEFAULT_RTOL, SKIP_RTOL, check_rtol, check_skip_rtol

TIME_LIMIT = 60.0  # seconds: every entry point's default deadline


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Decision:
    """How the decision answers: the one options object of every entry point that decides
    (``find_absorbing_set(params, "relu", decision=Decision(method="milp"))``); the block's skip
    and biases are those functions' own parameters. Built by keyword, checked when built
    (``ValueError``); change one field with ``dataclasses.replace``.

    Attributes:
      rtol: the slack of rule (★) in ``[0, 0.5)`` (``None``: :data:`DEFAULT_RTOL`, ``1e3·eps64``).
      skip_rtol: rule (E)'s bound on the miss relative to ``σ_min(A)``, in ``[0, 1)`` (``None``: ``1e-6``).
      method: one of :data:`METHODS` (:func:`~absorbjax.condition.find_absorbing_set` says what
        each does; the other entry points decide with it too).
      time_limit: seconds for the whole call, the same default (60) everywhere: one deadline,
        taken once the weights have been read (each entry point's docstring says what runs
        inside it).
      narrow: a block narrower than its input (``n < d``) is meant (no ``NarrowBlockWarning``).

    Examples:
      >>> from absorbjax import condition
      >>> condition.Decision(method="milp", time_limit=5).time_limit
      5.0
      >>> condition.Decision(method="simplex")
      Traceback (most recent call last):
      ValueError: method must be one of ('auto', 'relaxation', 'milp', 'exhaustive'), got 'simplex'
    """

    rtol: float = DEFAULT_RTOL
    skip_rtol: float = SKIP_RTOL
    method: str = "auto"
    time_limit: float = TIME_LIMIT
    narrow: bool = False

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        t = self.time_limit
        if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)) or not 0 < t < math.inf:
            raise ValueError(f"time_limit must be a positive finite number of seconds, got {t!r}")
        if not isinstance(self.narrow, (bool, np.bool_)):
            raise ValueError(f"narrow must be True or False, got {self.narrow!r}")
        object.__setattr__(self, "rtol", check_rtol(self.rtol))
        object.__setattr__(self, "skip_rtol", check_skip_rtol(self.skip_rtol))
        object.__setattr__(self, "time_limit", float(t))
        object.__setattr__(self, "narrow", bool(self.narrow))
