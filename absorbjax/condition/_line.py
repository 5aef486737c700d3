"""The line, ``d = 1``: every bias-free block of a kink activation with width ``n ≥ 2`` absorbs.

``docs/theory/kink.md``, section "The line, d = 1" (proved). With ``d = 1`` the block is
``f(x) = a·x + Σ_i v_i ρ(u_i x)`` (skip ``A = (a)``, ``W_up = u (n, 1)``, ``W_down = v (1, n)``) and
``ρ(z) = p z`` (``z ≥ 0``), ``q z`` (``z < 0``), ``p ≠ q``. ``f`` is positively homogeneous, so
``f(x) = f(1)·x`` for ``x ≥ 0`` and ``f(−1)·|x|`` for ``x ≤ 0``. The free block
``V_up = (1, −1, 0, …)ᵀ``, ``V_down = (α₁, α₂, 0, …)`` has the values ``α₁ p − α₂ q`` at 1 and
``−α₁ q + α₂ p`` at −1, so it equals ``f`` when

    [[p, −q], [−q, p]] (α₁, α₂)ᵀ = (f(1), f(−1))ᵀ,

solvable when ``p² ≠ q²`` (``p ≠ q``: the kink; ``p ≠ −q``: odd slope ``c = p + q ≠ 0``).

Everything here is exact: ``f(±1)`` and ``α`` are computed in rationals (:class:`fractions.Fraction`)
from the stored floats (dyadic rationals), ``α`` is rounded once to float64, and the absorber's miss
``sup_{x≠0} |g(x) − f(x)|/|x| = max(|p δ₁ − q δ₂|, |−q δ₁ + p δ₂|)`` (``δ = α̂ − α``, the rounding)
is computed exactly and rounded up. Pure functions; no JAX.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import numpy as np

from absorbjax import activations

LINE_THEOREM = "the line (d = 1, kink activation, n >= 2)"  # docs/theory/kink.md, "The line, d = 1"


@dataclasses.dataclass(frozen=True)
class LineAbsorber:
    """The free block of the line theorem (``Certificate.line``): ``V_up = (1, −1, 0, …)ᵀ`` ``(n, 1)``,
    ``V_down = (alpha[0], alpha[1], 0, …)`` ``(1, n)``; :func:`absorbjax.condition.absorber` builds it.

    Attributes:
      alpha: ``(α̂₁, α̂₂)``, the exact solution ``α`` rounded to float64.
      p, q: the activation's slopes (``ρ(z) = p z`` for ``z ≥ 0``, ``q z`` for ``z < 0``), as floats
        (exact: both are the values used).
      value_plus, value_minus: ``f(1)`` and ``f(−1)`` of the residual block, rounded to float64.
      miss_bound: a rigorous upper bound on ``sup_{x≠0} |g(x) − f(x)|/|x|`` for the float64 weights
        (0 when ``α`` is exact in float64).
    """

    alpha: tuple[float, float]
    p: float
    q: float
    value_plus: float
    value_minus: float
    miss_bound: float

    def weights(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``(V_up (n, 1), V_down (1, n))`` in float64."""
        up, down = np.zeros((n, 1)), np.zeros((1, n))
        up[0, 0], up[1, 0] = 1.0, -1.0
        down[0, :2] = self.alpha
        return up, down


def kink_slopes(activation: str | None) -> tuple[Fraction, Fraction] | None:
    """``(p, q)`` for a built-in kink activation (relu ``(1, 0)``, ``leaky_relu(α)``
    ``(1, α)``: ``p = 1``, ``q = c − 1`` exactly, ``p² ≠ q²``), else ``None``. A user's ``kink=True``
    declares ``c = p + q`` but not ``p``: its slopes would have to be measured, so the line theorem is
    not applied to it (its ``d = 1`` blocks keep the kink theorem's answer)."""
    if activation is None:
        return None
    act = activations.get(activation)
    c = act.odd_slope
    if not (act.kink and act.builtin) or c is None or c == 0:
        return None
    p = Fraction(1)
    q = c - p
    if p == q or p == -q:
        return None
    return p, q


def _value(U: np.ndarray, D: np.ndarray, a: Fraction, p: Fraction, q: Fraction, sign: int) -> Fraction:
    """``f(sign) = sign·a + Σ_i v_i ρ(sign·u_i)`` exactly (``U = u (n, 1)``, ``D = v (1, n)``)."""
    total = sign * a
    for u, v in zip(U[:, 0].tolist(), D[0, :].tolist()):
        if u == 0 or v == 0:
            continue
        z = sign * Fraction(u)
        total += Fraction(v) * (p * z if z >= 0 else q * z)
    return total


def _up(x: Fraction) -> float:
    """The float64 nearest ``x ≥ 0``, moved up when it lies below ``x``."""
    f = float(x)
    return f if Fraction(f) >= x else math.nextafter(f, math.inf)


def line_absorber(U: np.ndarray, D: np.ndarray, a: float, p: Fraction, q: Fraction) -> LineAbsorber:
    """The line theorem's absorber of ``f(x) = a x + Σ_i v_i ρ(u_i x)``.

    Args:
      U: ``W_up`` ``(n, 1)``, float64 (the stored values); D: ``W_down`` ``(1, n)``; a: the skip
        ``A`` (a scalar, any value); p, q: the slopes of ``ρ`` (exact, ``p² ≠ q²``).

    Returns:
      a :class:`LineAbsorber` with ``α`` solved exactly and rounded, and the exact miss bound.
    """
    a = Fraction(float(a))
    f1, fm1 = _value(U, D, a, p, q, 1), _value(U, D, a, p, q, -1)
    det = p * p - q * q
    al1, al2 = (p * f1 + q * fm1) / det, (q * f1 + p * fm1) / det
    h1, h2 = float(al1), float(al2)
    d1, d2 = Fraction(h1) - al1, Fraction(h2) - al2
    miss = max(abs(p * d1 - q * d2), abs(-q * d1 + p * d2))
    return LineAbsorber((h1, h2), float(p), float(q), float(f1), float(fm1), _up(miss))


def applies(d: int, n: int, biased: bool, activation: str | None) -> bool:
    """Whether the line theorem decides the block: ``d = 1``, no hidden bias, ``n ≥ 2`` and a kink
    activation with ``p² ≠ q²``."""
    return d == 1 and n >= 2 and not biased and kink_slopes(activation) is not None
