"""The checks on an activation's declared facts (:mod:`absorbjax.activations`): each declaration
parsed into an exact number, and refused in one line when it is visibly false at a few points.

Passing a check proves nothing: a certificate that rests on a declaration lists it in ``assumes``.
"""

import math
from fractions import Fraction
from numbers import Rational
from typing import Callable

import numpy as np


def _fmt(c: Fraction) -> str:
    """``c`` as short exact text: an integer, a float's repr when ``c`` is one, ``(1 + a)`` when
    ``c − 1`` is the float ``a`` (leaky_relu's ``1 + α``), else ``p/q``."""
    if c.denominator == 1:
        return str(c)
    for shift, text in ((0, "{}"), (1, "(1 + {})")):
        f = float(c - shift)
        if math.isfinite(f) and Fraction(f) == c - shift:
            return text.format(repr(f))
    return str(c)


def _num(x) -> str:
    """A declared degree or ``g(0)`` as short text: ``2``, ``1.5``, ``1/3``."""
    if isinstance(x, Fraction):
        return str(x) if x.denominator != 1 else str(x.numerator)
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _values(fn: Callable, z: np.ndarray) -> np.ndarray:
    """``fn`` at the float32 points ``z``, as float64 numbers; eager even when the first
    :func:`get` of a name happens while ``jit`` traces."""
    import jax
    import jax.numpy as jnp

    with jax.ensure_compile_time_eval():
        return np.asarray(fn(jnp.asarray(z, jnp.float32)), dtype=np.float64)


def _refuse_odd_slope(name: str, fn: Callable, c: Fraction) -> None:
    """Refuse ``σ(z) − σ(−z) = c z`` when it is visibly false at a few points (relative 1e-4)."""
    z = np.array([0.375, 1.0, 2.5, 7.0, 31.0], np.float32)
    plus, minus = _values(fn, z), _values(fn, -z)
    cz = float(c) * z.astype(np.float64)
    scale = np.abs(plus) + np.abs(minus) + np.abs(cz)
    bad = ~np.isfinite(plus - minus) | (np.abs(plus - minus - cz) > 1e-4 * scale + 1e-6)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(
            f"activation {name!r} declares odd_slope={_fmt(c)}, but sigma(z) - sigma(-z) = {plus[i] - minus[i]:.6g} "
            f"at z = {z[i]:g}, not {cz[i]:.6g}; do not declare it"
        )


def _refuse_degree(name: str, fn: Callable, degree: float, gated: bool) -> None:
    """Refuse a declared block degree ``k`` when visibly false at a few points (relative 1e-4):
    ``σ(2 z) = 2^k σ(z)``, or for a gate (the value branch adds 1) ``g(2 z) = 2^(k − 1) g(z)``."""
    z = np.array([0.375, 1.0, 2.5, 7.0, -0.375, -1.0, -2.5, -7.0], np.float32)
    k = degree - 1 if gated else degree
    with np.errstate(all="ignore"):
        at, at2 = _values(fn, z), _values(fn, 2 * z)
        want = 2.0**k * at
        bad = ~np.isfinite(at2 - want) | (np.abs(at2 - want) > 1e-4 * (np.abs(at2) + np.abs(want)) + 1e-6)
    if np.any(bad):
        i = int(np.argmax(bad))
        f, power = ("g" if gated else "sigma"), f"2^{_num(k)}"
        block = f" (a gated block of degree {_num(degree)}: g(t z) = t^{_num(k)} g(z))" if gated else ""
        raise ValueError(
            f"activation {name!r} declares degree={_num(degree)}{block}, but {f}(2 z) = {at2[i]:.6g} at z = {z[i]:g}, "
            f"not {power}·{f}(z) = {want[i]:.6g}; do not declare it"
        )


def _refuse_gate_at_zero(name: str, fn: Callable, g0) -> None:
    """Refuse a declared ``g(0)`` when the gate's float32 value at 0 is visibly another
    (``|g(0) − declared| > 1e-6 + 1e-4 |declared|``) or not finite."""
    at = float(_values(fn, np.zeros(1))[0])
    if not math.isfinite(at) or abs(at - float(g0)) > 1e-6 + 1e-4 * abs(float(g0)):
        raise ValueError(
            f"activation {name!r} declares gate_at_zero={_num(g0)}, but g(0) = {at:.6g} (float32); do not declare it"
        )


def _refuse_smooth(name: str, fn: Callable) -> None:
    """Refuse ``smooth_at_zero=True`` when a kink or a jump at 0 is visible: the one-sided difference
    quotients' gap ``D(h) = |(f(h) − f(0))/h − (f(0) − f(−h))/h|`` is above ``1e-2·m`` at ``h = 1e-3``
    and has not shrunk from ``h = 1e-2`` (it tends to 0 like ``h`` for a function differentiable at 0,
    stays for a kink, grows like ``1/h`` for a jump), ``m = max(1, |f|)`` at the five points."""
    h = np.array([1e-2, 1e-3], np.float32)
    with np.errstate(all="ignore"):
        at0 = float(_values(fn, np.zeros(1))[0])
        plus, minus = _values(fn, h), _values(fn, -h)
        h64 = h.astype(np.float64)
        gap = np.abs((plus - at0) / h64 - (at0 - minus) / h64)
        m = max(1.0, abs(at0), *np.abs(plus), *np.abs(minus))
    if np.all(np.isfinite(gap)) and math.isfinite(m) and gap[1] > 1e-2 * m and gap[1] >= 0.5 * gap[0]:
        raise ValueError(
            f"activation {name!r} declares smooth_at_zero=True (differentiable at 0), but its one-sided slopes at 0 "
            f"differ by {gap[1]:.3g} at h = 1e-3 and {gap[0]:.3g} at h = 1e-2 (a kink or a jump); do not declare it"
        )


def _as_degree(name: str, degree):
    if degree is None:
        return None
    if isinstance(degree, bool) or not isinstance(degree, (Rational, float, int, np.floating, np.integer)):
        raise ValueError(f"degree of {name!r} must be a real number or None, got {degree!r}")
    if not math.isfinite(float(degree)):
        raise ValueError(f"degree of {name!r} must be finite, got {degree!r}")
    return int(degree) if float(degree).is_integer() else float(degree)


def _as_gate_value(name: str, g0):
    """A declared ``g(0)``: a float when the number is one exactly, else its exact Fraction."""
    if g0 is None:
        return None
    if isinstance(g0, bool) or not isinstance(g0, (Rational, float, int, np.floating, np.integer)):
        raise ValueError(f"gate_at_zero of {name!r} must be a number (g(0)) or None, got {g0!r}")
    exact = Fraction(g0) if isinstance(g0, Rational) else Fraction(float(g0))
    if isinstance(g0, (float, np.floating)) and not math.isfinite(g0):
        raise ValueError(f"gate_at_zero of {name!r} must be finite, got {g0!r}")
    return float(exact) if Fraction(float(exact)) == exact else exact


def _refuse_ray_limit(name: str, fn: Callable, limit: tuple[str, float, float] = ("relu", 1.0, 0.0)) -> None:
    """Refuse ``σ − ρ = o(|z|)`` for the kink ``ρ(z) = p z (z ≥ 0), q z (z < 0)`` (``limit =
    (name, p, q)``; relu ``(1, 0)``) when visibly false: with ``r(s)`` the largest
    ``|σ(z) − ρ(z)|/|z|`` over four points ``|z| ≈ s`` of each sign, refuse when some value is not
    finite, when ``r(1e30) > 1e-3·m``, or when ``r`` has not halved from ``s = 1e2`` to ``s = 1e30``
    while above float32's rounding (``1e-6·m``), ``m = max(1, |p|, |q|)`` (1 for relu and
    ``|α| ≤ 1``). Passing proves nothing."""
    label, p, q = limit
    m = max(1.0, abs(p), abs(q))
    s = np.array([1e2, 1e6, 1e10, 1e14, 1e18, 1e22, 1e26, 1e30])
    z = (s[:, None] * np.array([1.0, 1.3721, 2.7183, 6.1803])).astype(np.float32)
    z = np.concatenate([z, -z], axis=1)
    with np.errstate(all="ignore"):
        vals = _values(fn, z)
        z64 = z.astype(np.float64)
        rho = p * np.maximum(z64, 0.0) + q * np.minimum(z64, 0.0)
        r = np.max(np.abs(vals - rho) / np.abs(z64), axis=1)
    what = f"activation {name!r} declares ray_limit={label!r} (sigma - {label} = o(|z|)), but"
    if not np.all(np.isfinite(r)):
        raise ValueError(
            f"{what} sigma is not finite in float32 at some |z| in 1e2 ... 1e30 (|sigma(z) - {label}(z)|/|z|: "
            f"{', '.join(f'{x:.2g}' for x in r)}); the declaration cannot be checked: evaluate sigma without overflow"
        )
    if r[-1] > 1e-3 * m or (r[-1] > 1e-6 * m and r[-1] >= r[0] / 2):
        raise ValueError(
            f"{what} |sigma(z) - {label}(z)|/|z| is {', '.join(f'{x:.2g}' for x in r)} at |z| = 1e2, 1e6, ..., 1e30, "
            "not tending to 0; do not declare it"
        )


def _refuse_kink(name: str, fn: Callable, c: Fraction | None) -> None:
    """Refuse a declared kink ``σ(z) = p z (z > 0), q z (z < 0), p ≠ q`` (``p = σ(1)``,
    ``q = −σ(−1)``) when visibly false at a few points, or when ``p + q`` is not the declared ``c``."""
    if c is None:
        raise ValueError(f"activation {name!r} declares kink=True without odd_slope (c = p + q); declare both")
    p, q = float(_values(fn, np.ones(1))[0]), -float(_values(fn, -np.ones(1))[0])
    z = np.array([0.5, 2.0, 10.0, 1000.0], np.float32)
    plus, minus = _values(fn, z), _values(fn, -z)
    z64 = z.astype(np.float64)
    tol = 1e-4 * (abs(p) + abs(q))
    if not (
        math.isfinite(p)
        and math.isfinite(q)
        and abs(p - q) > tol
        and abs(float(_values(fn, np.zeros(1))[0])) <= tol
        and np.all(np.abs(plus - p * z64) <= tol * z64)
        and np.all(np.abs(minus + q * z64) <= tol * z64)
        and abs(p + q - float(c)) <= tol
    ):
        raise ValueError(
            f"activation {name!r} declares kink=True (sigma(z) = p z for z > 0, q z for z < 0, p != q, "
            f"p + q = odd_slope = {_fmt(c)}), but p = sigma(1) = {p:.6g}, q = -sigma(-1) = {q:.6g} do not fit; "
            "do not declare it"
        )


def _as_fraction(name: str, c) -> Fraction:
    """A declared odd slope as an exact :class:`~fractions.Fraction` (a float's exact value)."""
    if isinstance(c, bool) or not isinstance(c, (Rational, float, int, np.floating, np.integer)):
        raise ValueError(f"odd_slope of {name!r} must be a Fraction, int or float, got {c!r}")
    if isinstance(c, (float, np.floating)) and not math.isfinite(c):
        raise ValueError(f"odd_slope of {name!r} must be finite, got {c!r}")
    return Fraction(c) if isinstance(c, Rational) else Fraction(float(c))
