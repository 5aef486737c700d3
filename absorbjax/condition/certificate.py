"""The answers: :class:`Certificate` (the decision) and :class:`Distance` (how far from absorbing)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from absorbjax import activations
from absorbjax.io import to_jsonable

STATUSES = ("absorbable", "not_absorbable", "degenerate", "undecided")
METHODS = ("auto", "relaxation", "milp", "exhaustive")


# ---------------------------------------------------------------------------------------------
# Results


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.3g}"


@dataclasses.dataclass(frozen=True, eq=False)
class Certificate:
    """The answer of :func:`find_absorbing_set` and the numbers that justify it.

    Attributes:
      status: ``"absorbable"`` (a verified ``S`` exists; no genericity needed),
        ``"not_absorbable"`` (no ``S`` and the hypotheses of Thm 8/10 hold),
        ``"degenerate"`` (no ``S``, but a hypothesis fails, so the theorem does not decide) or
        ``"undecided"`` (time limit, or ``method="relaxation"`` without a decision).
      S: sorted hidden-unit indices with ``W_down[:,S] W_up[S,:] = −A`` (when absorbable).
      method: what decided: ``"relaxation"``, ``"rounding"``, ``"milp"``, ``"exhaustive"``.
      reason: one sentence saying why.
      d, n: input dimension ``d`` and width ``n``.
      tol: entrywise tolerance of ``W_down[:,S] W_up[S,:] + A``.
      residual: ``‖W_down[:,S] W_up[S,:] + A‖_max`` of ``S``, or of the only candidate that the
        rounding step checked; ``None`` when no single candidate was checked.
      relaxation_residual: ``ρ = ‖Σ c_i M_i + A‖_F`` at the least-squares real ``c``.
      lower_bound: certified ``‖Σ m_i M_i + A‖_F ≥ lower_bound`` for every ``m ∈ {0,1}^n``
        (from real ``c``, or from ``c ∈ [0,1]^n`` when the box relaxation ran).
      rank: numerical rank of ``G`` (``n`` when Cholesky certifies it positive definite, else
        the number of eigenvalues above ``τ = 4·max(n,d)·eps·‖G‖_∞``).
      dist01: ``‖c − round(c)‖_∞``, the real solution's distance from ``{0,1}^n``.
      radius: ``δ``: every valid ``m`` has ``‖m − c‖_2 ≤ δ`` (full rank only, else ``None``).
      nondegenerate: whether the hypotheses of Thm 8/10 hold.
      failed: the hypotheses that fail, in words.
      min_row_sin: smallest ``|sin|`` of the angle between two nonzero rows of ``W_up``.
      skip: ``"identity"`` or ``"matrix"`` (Lemma 4 form, condition ``= −A``).
      input_dtype: dtype of the given weights (the check itself runs in float64).
      activation: the activation named by the caller, if any.
      seconds, timings: wall time, total and per phase.
    """

    status: str
    S: np.ndarray | None
    method: str
    reason: str
    d: int
    n: int
    tol: float
    residual: float | None
    relaxation_residual: float
    lower_bound: float
    rank: int
    dist01: float
    radius: float | None
    nondegenerate: bool
    failed: tuple[str, ...]
    min_row_sin: float | None
    skip: str
    input_dtype: str
    activation: str | None = None
    seconds: float = 0.0
    timings: dict = dataclasses.field(default_factory=dict)

    @property
    def absorbable(self) -> bool:
        return self.status == "absorbable"

    def summary(self) -> str:
        target = "I" if self.skip == "identity" else "A"
        lines = [f"{self.status}  [method: {self.method}]  {self.reason}"]
        if self.S is not None:
            lines.append(
                f"  S = {_few(self.S)} (|S| = {self.S.size}): "
                f"‖W_down[:,S] W_up[S,:] + {target}‖_max = {_fmt(self.residual)} <= tol = {_fmt(self.tol)}"
            )
        elif self.residual is not None:
            lines.append(f"  candidate round(c): residual {_fmt(self.residual)} > tol = {_fmt(self.tol)}")
        lines.append(
            f"  relaxation: rank G = {self.rank} of n = {self.n}, ρ = {_fmt(self.relaxation_residual)}, "
            f"every S misses by >= {_fmt(self.lower_bound)} (Frobenius; threshold d·tol = "
            f"{_fmt(self.d * self.tol)}), ‖c − round(c)‖_∞ = {_fmt(self.dist01)}, δ = {_fmt(self.radius)}"
        )
        hyp = "hold" if self.nondegenerate else "fail: " + "; ".join(self.failed)
        lines.append(
            f"  hypotheses of Thm 8/10 (d >= 2, rows of W_up nonzero and pairwise non-parallel, "
            f"columns of W_down nonzero) {hyp}; min |sin| between rows {_fmt(self.min_row_sin)}"
        )
        if self.activation is not None:
            lines.append(f"  activation {self.activation}: {activations.get(self.activation).result}")
        lines.append(
            f"  d = {self.d}, n = {self.n}, skip {self.skip}, input {self.input_dtype} (checked in "
            f"float64), {self.seconds:.3g} s"
        )
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (non-finite floats become ``None``)."""
        return {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True, eq=False)
class Distance:
    """How far a block is from absorbing, relative to ``‖A‖_F`` (``√d`` for ``A = I``).

    ``lower ≤ min_S ‖W_down[:,S] W_up[S,:] + A‖_F / ‖A‖_F ≤ upper``; ``upper`` is attained by ``S``
    (``S = ∅`` gives 1: the zero map). ``lower = max(relaxation, box)``: the certified bounds
    from real coefficients and from coefficients in ``[0, 1]``. ``method`` says how ``S`` was
    found: ``"exact"`` (an absorbing set), ``"exhaustive"`` (the true minimum, small ``n``) or
    ``"local"`` (single-unit flips from roundings of the relaxation). ``certificate`` is the
    decision of :func:`find_absorbing_set`.
    """

    lower: float
    upper: float
    S: np.ndarray
    method: str
    relaxation: float
    box: float
    certificate: Certificate

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["certificate"] = self.certificate.to_dict()
        return out


def _few(idx: np.ndarray) -> str:
    return str(idx[:10].tolist()) + (f" and {idx.size - 10} more" if idx.size > 10 else "")
