"""The decision's options as one typed object: :class:`Decision`, taken by
:func:`~absorbjax.condition.find_absorbing_set`, :func:`~absorbjax.condition.find_absorbing_sets` and
:func:`~absorbjax.condition.distance`; its fields also work as keyword shorthand
(``find_absorbing_set(params, "relu", rtol=1e-9)``, through ``absorbjax._shorthand``)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from absorbjax.condition._certificate import METHODS
from absorbjax.condition._inputs import DEFAULT_RTOL, SKIP_RTOL, check_rtol, check_skip_rtol


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Decision:
    """What the decision is asked besides the weights and the activation, and how it answers: the
    options of :func:`~absorbjax.condition.find_absorbing_set` (whose docstring says what each one
    means), :func:`~absorbjax.condition.find_absorbing_sets` and :func:`~absorbjax.condition.distance`.

    Built by keyword and checked when built (``ValueError``); each of those calls also takes the
    fields by keyword as a shorthand that replaces them (``find_absorbing_set(params, "relu",
    method="milp")`` is ``find_absorbing_set(params, "relu", decision=Decision(method="milp"))``).

    Attributes:
      skip: ``A`` ``(d, d)``; ``None`` is ``I`` (``find_absorbing_sets``: also ``(draws, d, d)``).
      bias: the hidden bias ``b`` ``(n,)`` of ``σ(W_up x + b)``, or ``None`` (also ``(draws, n)``).
      out_bias: the output bias ``c`` ``(d,)``, or ``None`` (also ``(draws, d)``).
      rtol: the slack of rule (★) in ``[0, 0.5)`` (``None``: :data:`DEFAULT_RTOL`, ``1e3·eps64``).
      skip_rtol: rule (E)'s bound on the miss relative to ``σ_min(A)``, in ``[0, 1)`` (``None``: ``1e-6``).
      method: one of :data:`METHODS`.
      time_limit: seconds for the MILP (:func:`~absorbjax.condition.distance`'s default: 10).
      narrow: a block narrower than its input (``n < d``) is meant (no ``NarrowBlockWarning``).

    Examples:
      >>> from absorbjax import condition
      >>> condition.Decision(method="milp", time_limit=5).time_limit
      5.0
      >>> condition.Decision(method="simplex")
      Traceback (most recent call last):
      ValueError: method must be one of ('auto', 'relaxation', 'milp', 'exhaustive'), got 'simplex'
    """

    skip: np.ndarray | None = None
    bias: np.ndarray | None = None
    out_bias: np.ndarray | None = None
    rtol: float = DEFAULT_RTOL
    skip_rtol: float = SKIP_RTOL
    method: str = "auto"
    time_limit: float = 60.0
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
