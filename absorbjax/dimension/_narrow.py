"""The arguments at one residual point that decide more than the rank count: the exact narrow-width
determinants (``n < d``: the Jacobian argument of §8; ``d ≤ n < 2d``: step 6) and the line
(``d = 1``, ReLU without biases: §10, decided exactly by ``f(1) f(−1)``), each with the reason and
scope its verdict states.

Sections refer to ``docs/theory/depth.md``. Everything here is exact (rationals, integer
determinants); :func:`absorbjax.dimension.certify` turns the results into a :class:`DepthCertificate`.
"""

from __future__ import annotations

import math
from fractions import Fraction

import flint
import numpy as np

from absorbjax import models
from absorbjax.dimension._points import RationalPoint
from absorbjax.dimension._ranks import narrow_invertible


def rational(x: Fraction, digits: int = 40) -> str:
    """An exact rational as ``a/b``; one longer than ``digits`` characters as ``≈ m·10^e`` (and its size)."""
    text = str(x)
    if len(text) <= digits or x == 0:
        return text
    e = math.log10(abs(x.numerator)) - math.log10(x.denominator)
    k = math.floor(e)
    return f"{'-' if x < 0 else ''}{10 ** (e - k):.6f}e{k:+d} (an exact rational of {len(text)} characters)"


def gelu_jacobian_det(point: RationalPoint) -> Fraction:
    """``det J_W(0) = Π_ℓ det(I + ½ D_ℓ U_ℓ)``, exactly (§8): ``GELU(0) = 0``, ``GELU′(0) = ½``; with the
    denominator ``q``, ``det(I + ½ D U) = det(2q² I + D_num U_num) / (2q²)^d``, an integer determinant."""
    L, n, d = point.up.shape
    q2 = 2 * int(point.denominator) ** 2
    det = Fraction(1)
    for layer in range(L):
        down = flint.fmpz_mat(d, n, point.down[layer].astype(object).ravel().tolist())
        up = flint.fmpz_mat(n, d, point.up[layer].astype(object).ravel().tolist())
        base = flint.fmpz_mat(d, d, [q2 if i == j else 0 for i in range(d) for j in range(d)])
        det *= Fraction(int((base + down * up).det()), q2**d)
    return det


def narrow_check(point: RationalPoint, name: str, d: int, n: int, bias: bool) -> tuple[bool | None, Fraction | None]:
    """``(narrow, det)`` at a residual point: GELU with ``n < d``, whether ``det J(0) ≠ 0`` (§8; GELU
    points with biases have zero biases) and ``det``; ReLU with ``n < d``, or either activation with
    ``d ≤ n < 2d`` and no biases (step 6), whether every ``det(I + D_ℓ[:,S] U_ℓ[S,:]) ≠ 0`` (``n ≤ 16``);
    ``None`` when not checked."""
    if name == "gelu" and n < d:
        det = gelu_jacobian_det(point)
        return det != 0, det
    if n <= 16 and (n < d or (n < 2 * d and not bias)):
        return narrow_invertible(point), None
    return None, None


def jacobian_argument(name: str, d: int, n: int, det: Fraction | None, bias: bool = False) -> tuple[str, str]:
    """``(reason, scope)`` of §8 (``n < d``) where its determinants are nonzero at the point."""
    reason = (
        f"n = {n} < d = {d}: the residual stack's Jacobian is invertible "
        + ("at 0" if name == "gelu" else "on every linear region")
        + f", while every free stack whose last block has width < {d} (any depth, with or without biases) has a "
        "Jacobian of rank < d wherever it is differentiable: reproduced by no such free stack (docs/theory/depth.md §8)"
    )
    if name == "gelu" and bias:
        scope = (
            f"almost all weights and biases: det J(0) is analytic in them and nonzero here (zero biases: "
            f"det J(0) = det prod_l (I + D_l U_l / 2) = {rational(det)}, checked exactly); every bias-free W with "
            "det prod_l (I + D_l U_l / 2) != 0 (proved)"
        )
    elif name == "gelu":
        scope = (
            f"every W with det prod_l (I + D_l U_l / 2) != 0 (proved; this point's det = {rational(det)}, "
            "checked exactly); those W are almost every W"
        )
    else:
        scope = (
            "almost every W: every W whose determinants det(I + D_l[:,S] U_l[S,:]) are nonzero for every layer "
            "and S (proved; checked exactly at this point)"
        )
    return reason, scope


def jacobian_undecided(narrow: bool | None, plain: bool) -> str:
    """Why §8 did not decide (``n < d``): the clause an undecided reason gains, or ``""``."""
    if narrow is None and plain:
        return "n > 16: the 2^n determinants of §8 were not enumerated"
    return "a determinant of §8 vanishes at this point" if narrow is False else ""


def line_ends(point: RationalPoint) -> tuple[Fraction, Fraction]:
    """``(f(1), f(−1))`` of the bias-free residual ReLU stack on the line, in exact rationals."""
    q = int(point.denominator)
    ends = []
    for x in (Fraction(1), Fraction(-1)):
        for up, down in zip(point.up, point.down):  # (n, 1), (1, n)
            x = x + sum(Fraction(int(down[0, i]), q) * max(Fraction(int(up[i, 0]), q) * x, 0) for i in range(len(up)))
        ends.append(x)
    return ends[0], ends[1]


def line_free_stack(n: int, depth: int, p: Fraction, m: Fraction) -> models.MLPParams:
    """A free ReLU stack of width ``n`` and depth ``L`` on the line with ``g(1) = p``, ``g(−1) = m``
    (§10); for ``n = 1`` it needs ``p m = 0``."""
    up, down = np.zeros((depth, n, 1)), np.zeros((depth, 1, n))
    if n >= 2:  # p relu(x) + m relu(−x), then relu(y) − relu(−y) = y
        up[:, 0, 0], up[:, 1, 0] = 1.0, -1.0
        down[:, 0, 0], down[:, 0, 1] = 1.0, -1.0
        down[0, 0, 0], down[0, 0, 1] = float(p), float(m)
        return models.MLPParams(up, down)
    # f = p relu(x) (m = 0) or m relu(−x) (p = 0); later blocks relu(y) (identity on y ≥ 0) or
    # −relu(−y) (identity on y ≤ 0), by the sign of the value that survives.
    v_up, value = (1.0, p) if m == 0 else (-1.0, m)
    up[0, 0, 0], down[0, 0, 0] = v_up, float(value)
    up[1:, 0, 0] = down[1:, 0, 0] = 1.0 if value >= 0 else -1.0
    return models.MLPParams(up, down)


def line_decision(point: RationalPoint, n: int, depth: int) -> tuple[bool, str, str, models.MLPParams | None]:
    """``(disjoint, reason, scope, free_stack)`` of §10: ``d = 1``, ReLU, no biases, decided exactly.
    ``disjoint``: reproduced by no free stack of width ``n`` (``n = 1`` and ``f(1) f(−1) ≠ 0``);
    otherwise ``free_stack`` is the free stack of the same width and depth that equals it."""
    p, m = line_ends(point)
    ends = f"f(1) = {rational(p)}, f(-1) = {rational(m)} (exact)"
    if n == 1 and p * m != 0:
        reason = (
            f"d = 1, n = 1: {ends}, so f(1)f(-1) != 0, while every free stack of width 1 vanishes on a half-line: "
            "reproduced by no free stack of width 1, any depth (docs/theory/depth.md §10)"
        )
        return True, reason, "this W; exactly the W with f(1)f(-1) != 0", None
    if n == 1:
        reason = (
            f"d = 1, n = 1: {ends}, so f(1)f(-1) = 0 and f is c relu(+-x); free_stack (c relu(+-x), then relu(y) "
            "or -relu(-y)) equals it (docs/theory/depth.md §10)"
        )
        scope = "this W; exactly the W with f(1)f(-1) = 0"
    else:
        reason = (
            f"d = 1, n = {n} >= 2: {ends}; free_stack (f(1) relu(x) + f(-1) relu(-x), then relu(y) - relu(-y) = y) "
            "equals it (docs/theory/depth.md §10)"
        )
        scope = f"this W; every bias-free residual ReLU stack on the line with n = {n} >= 2"
    return False, reason, scope, line_free_stack(n, depth, p, m)
