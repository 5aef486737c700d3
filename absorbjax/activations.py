"""One registry of activations, with the facts the theorems need, all *declared*, never measured.

An ungated block applies ``σ`` to ``W_up x``; a gated block applies the gate ``g`` to
``W_gate x`` and multiplies by the linear value branch ``W_value x``. Each entry records:

- ``gated``: whether the function is a gate ``g`` (GLU family) or an activation ``σ``;
- ``degree``: the positive-homogeneity degree ``k`` of the *block*, when ``f(t x) = t^k f(x)``
  for ``t > 0`` (ReLU: 1, ReLU²: 2, ReGLU: 1 + 1 = 2), else ``None``;
- ``odd_slope``: the declared ``c`` (an exact :class:`~fractions.Fraction`) with
  ``σ(z) − σ(−z) = c·z`` for every ``z``, which makes the sign-flip absorber exact
  (``σ(−z) = σ(z) − c z``); ``None`` when not declared (relu, gelu, gelu_tanh, silu, softplus,
  hardswish: ``1``; ``leaky_relu(α)``: ``1 + α``);
- ``ray_limit``: the name of a built-in kink activation ``ρ`` — ``"relu"`` or ``"leaky_relu(α)"`` —
  when declared that ``σ − ρ = o(|z|)`` as ``|z| → ∞`` (``"relu"``: relu, gelu, gelu_tanh, silu,
  softplus, hardswish), so that ``σ(t a + b)/t → ρ(a)`` for every ``a, b`` as ``t → ∞``; then a
  declared odd slope must be ``ρ``'s ``p + q`` (``docs/theory/ray_limit.md``);
- ``kink``: declared that ``σ(z) = p z`` for ``z > 0`` and ``q z`` for ``z < 0`` with ``p ≠ q``
  (relu, leaky_relu): the kink theorem decides every width and any skip (``docs/theory/kink.md``);
- ``gate_at_zero``: ``g(0)`` for gates (Prop 6 needs ``g(0) = 0``), ``None`` otherwise;
- ``smooth_at_zero``: whether the function is differentiable at 0 (Prop 6 needs it);
- ``paper_theorem``: the paper's theorem proving the bias-free converse (relu: Thm 8, gelu: Thm 10);
- ``builtin``: registered by absorbjax, its facts proved on the page; a user's registration is
  not, and a certificate resting on it lists the declarations in ``Activation.assumes``.

:func:`register` never infers a fact; its sanity checks at a few points can only *refuse* a
declaration that is visibly false. :meth:`Activation.converse` is the one place that says which
theorem decides which block.

``family`` derives from these: ``"homogeneous"`` (degree ``k ≠ 1``, Prop 5), ``"gated"``
(Prop 6 when ``g(0) = 0`` and smooth), ``"ungated"`` (Thm 8/10 territory).

Importing this module does not import JAX: the built-ins' bodies import it when first called, so
the NumPy decision (:mod:`absorbjax.condition`) reads the registry and its facts without JAX.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import warnings
from fractions import Fraction
from numbers import Rational
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    import jax

__all__ = [
    "Activation",
    "KINK_THEOREM",
    "RAY_LIMIT_KINK_THEOREM",
    "RAY_LIMIT_THEOREM",
    "get",
    "leaky_relu",
    "names",
    "register",
    "unregister",
]

RAY_LIMIT_THEOREM = "Thm 8 via the ray limit"  # n ≥ d; proved beyond the paper: docs/theory/ray_limit.md
KINK_THEOREM = "kink theorem (every width)"  # every n, any skip A, biases: docs/theory/kink.md
RAY_LIMIT_KINK_THEOREM = "kink theorem via the ray limit (every width)"  # docs/theory/ray_limit.md


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


@dataclasses.dataclass(frozen=True)
class Activation:
    """A registered activation ``σ`` (or gate ``g``) and the declared facts the theorems need.

    Examples:
      >>> from absorbjax import activations
      >>> act = activations.get("swiglu")
      >>> act.gated, act.gate_at_zero, act.family, act.never_absorbs
      (True, 0.0, 'gated', True)
      >>> float(act(1.0))  # the gate g = silu
      0.7310585975646973
      >>> leaky = activations.get("leaky_relu(0.25)")
      >>> leaky.odd_slope, leaky.kink, leaky.converse(biased=True, narrow=True)
      (Fraction(5, 4), True, 'kink theorem (every width)')

    References:
      Prop 5 (``degree`` ``k ≠ 1``), Prop 6 (``gate_at_zero = 0``, ``smooth_at_zero``),
      Thm 8/10 and the generalised flip (``odd_slope``: ``σ(z) − σ(−z) = c z``), the ray limit
      (``docs/theory/ray_limit.md``), the kink theorem (``docs/theory/kink.md``).
    """

    name: str
    fn: Callable[[jax.Array], jax.Array]
    gated: bool = False
    degree: float | None = None
    odd_slope: Fraction | None = None
    gate_at_zero: float | None = None
    smooth_at_zero: bool = True
    ray_limit: str | None = None
    kink: bool = False
    paper_theorem: str | None = None
    builtin: bool = False

    @property
    def odd_part_half(self) -> bool:
        """Whether ``σ(z) − σ(−z) = z`` is declared (``odd_slope == 1``); kept for older callers."""
        return self.odd_slope == 1

    @property
    def assumes(self) -> tuple[str, ...]:
        """The declared facts a certificate for this activation rests on; empty for the built-ins,
        whose facts are proved in ``docs/theory``."""
        if self.builtin:
            return ()
        out = []
        if self.odd_slope is not None:
            out.append(f"declared odd part: sigma(z) - sigma(-z) = {_fmt(self.odd_slope)} z")
        if self.ray_limit is not None:
            out.append(f"declared ray limit: sigma - {self.ray_limit} = o(|z|)")
        if self.kink:
            out.append("declared kink: sigma(z) = p z (z > 0), q z (z < 0), p != q")
        return tuple(out)

    def converse(self, biased: bool = False, narrow: bool = False, *, parallel_rows: bool = False) -> str | None:
        """The theorem proving "no ``S`` ⇒ no same-width absorber" for this ``σ``, or ``None``.

        ``S`` means ``c·W_down[:,S] W_up[S,:] = −A`` with ``c = odd_slope``; without a declared
        ``c`` nothing is proved. ``narrow`` (width ``n < d``): the kink theorem for kink
        activations, the kink theorem via the ray limit for ray-limit ones (both every width, any
        ``A``). ``n ≥ d``: bias-free relu and gelu the paper's Thm 8 and Thm 10; an ungated ``σ``
        with a declared ray limit ``relu``, with or without hidden bias, :data:`RAY_LIMIT_THEOREM`;
        a kink ``σ`` (leaky_relu) :data:`KINK_THEOREM`; a ``σ`` with a declared ray limit
        ``leaky_relu(α)`` :data:`RAY_LIMIT_KINK_THEOREM` at every width. ``parallel_rows``: some rows of
        ``W_up`` are parallel but the pairs ``(w_i, b_i)`` are pairwise non-proportional (distinct
        kink hyperplanes, biased blocks): only the kink theorem covers that (``None`` otherwise).
        Each theorem's hypotheses are on its page; the caller checks them.
        """
        if self.gated or self.family == "homogeneous" or self.odd_slope is None:
            return None
        if parallel_rows:
            return KINK_THEOREM if self.kink and biased else None
        if narrow:
            if self.kink:
                return KINK_THEOREM
            return RAY_LIMIT_KINK_THEOREM if self.ray_limit is not None else None
        if not biased and self.paper_theorem is not None:
            return self.paper_theorem
        if self.ray_limit == "relu":  # Thm 8 (relu) in the limit; Lemma 4 for an invertible A
            return RAY_LIMIT_THEOREM
        if self.kink:
            return KINK_THEOREM
        return RAY_LIMIT_KINK_THEOREM if self.ray_limit is not None else None  # a leaky limit

    @property
    def family(self) -> str:
        """``"homogeneous"`` (degree ≠ 1), ``"gated"`` or ``"ungated"``."""
        if self.degree is not None and self.degree != 1:
            return "homogeneous"
        return "gated" if self.gated else "ungated"

    @property
    def never_absorbs(self) -> bool:
        """Whether Prop 5 or Prop 6 rules absorption out whatever the weights."""
        prop6 = self.gated and self.gate_at_zero == 0 and self.smooth_at_zero
        return self.family == "homogeneous" or prop6

    @property
    def result(self) -> str:
        """The result that decides absorption for blocks with this activation."""
        if self.family == "homogeneous":
            return "Prop 5: never absorbs (homogeneous of degree k != 1)"
        if self.gated:
            if self.never_absorbs:
                return "Prop 6: never absorbs (gate differentiable at 0 with g(0) = 0)"
            return "not covered: gate with g(0) != 0 or not differentiable at 0"
        c = "" if self.odd_slope in (None, 1) else f"{_fmt(self.odd_slope)} "
        theorem = self.converse()
        if theorem is not None:
            given = "" if self.builtin else "given the declared facts, "
            return f"{given}{theorem}: absorbs iff {c}W_down[:,S] W_up[S,:] = -I for some S"
        if self.odd_slope is not None:
            return "sign-flip absorber exact when an S exists; converse not proven"
        return "not covered"

    def __call__(self, z: jax.Array) -> jax.Array:
        return self.fn(z)


_REGISTRY: dict[str, Activation] = {}


# The built-ins' bodies: each imports JAX when called (after the first call a lookup in
# sys.modules), so that reading the registry never imports it.


def _relu(z):
    import jax

    return jax.nn.relu(z)


def _gelu(z):  # the exact z Φ(z)
    import jax

    return jax.nn.gelu(z, approximate=False)


def _gelu_tanh(z):
    import jax

    return jax.nn.gelu(z, approximate=True)


def _silu(z):
    import jax

    return jax.nn.silu(z)


def _softplus(z):
    import jax

    return jax.nn.softplus(z)


def _sigmoid(z):
    import jax

    return jax.nn.sigmoid(z)


def _leaky(z, negative_slope):
    import jax

    return jax.nn.leaky_relu(z, negative_slope=negative_slope)


def _relu2(z):
    import jax.numpy as jnp

    return jnp.square(_relu(z))


def _hardswish(z):
    import jax.numpy as jnp

    # z·relu6(z + 3)/6 (PyTorch's Hardswish), exactly z above 3 and 0 below −3; `where` for jet
    return jnp.where(z >= 3.0, z, jnp.where(z <= -3.0, 0.0, z * (z + 3.0) / 6.0))


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


def _ray_limit_of(name: str, ray_limit) -> tuple[str, float, float, Fraction]:
    """The declared limit ``ρ`` as ``(canonical name, p, q, c = p + q)``: ``"relu"`` is
    ``(1, 0, 1)``, ``"leaky_relu(α)"`` (or ``"leaky_relu"``, ``α = 0.01``) ``(1, α, 1 + α)`` named
    ``"leaky_relu(α)"`` with ``α``'s repr; anything else (a non-kink activation, a user's kink,
    an :class:`Activation` object) is refused: a limit's slopes must be proved, not declared."""
    if ray_limit == "relu":
        return "relu", 1.0, 0.0, _ONE
    entry = None
    if isinstance(ray_limit, str) and (ray_limit == "leaky_relu" or _LEAKY.fullmatch(ray_limit)):
        try:
            entry = get(ray_limit)
        except ValueError:
            entry = None
    if entry is None or not (entry.kink and entry.builtin) or entry.odd_slope is None:
        raise ValueError(
            f"ray_limit must be None or 'relu' or 'leaky_relu(alpha)' (a built-in kink activation rho, "
            f"sigma - rho = o(|z|); docs/theory/ray_limit.md), got {ray_limit!r} for activation {name!r}"
        )
    alpha = float(entry.odd_slope - 1)  # leaky_relu(α): p = 1, q = α, c = 1 + α exactly
    return leaky_relu(alpha).name, 1.0, alpha, entry.odd_slope


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


def _register(name, fn, *, builtin=False, gated=False, degree=None, odd_slope=None, smooth_at_zero=True,
              ray_limit=None, kink=False, paper_theorem=None, gate_at_zero=None, overwrite=False) -> Activation:  # fmt: skip
    """:func:`register` with the built-ins' fields (``builtin``, ``paper_theorem``, a declared
    ``gate_at_zero``)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"activation {name!r} is already registered; pass overwrite=True")
    entry = _entry(name, fn, builtin=builtin, gated=gated, degree=degree, odd_slope=odd_slope,
                   smooth_at_zero=smooth_at_zero, ray_limit=ray_limit, kink=kink, paper_theorem=paper_theorem,
                   gate_at_zero=gate_at_zero)  # fmt: skip
    _REGISTRY[name] = entry
    return entry


def _entry(name, fn, *, builtin, gated, degree, odd_slope, smooth_at_zero, ray_limit, kink, paper_theorem,
           gate_at_zero=None):  # fmt: skip
    """A checked :class:`Activation` (not registered): refuses visibly false declarations. A
    built-in gate declares ``g(0)`` (``gate_at_zero``); a user's gate is evaluated at 0."""
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    c = None if odd_slope is None else _as_fraction(name, odd_slope)
    limit = None if ray_limit is None else _ray_limit_of(name, ray_limit)
    if gated and (ray_limit is not None or kink):
        raise ValueError("ray_limit and kink are facts about ungated activations; pass gated=False")
    if limit is not None and c is not None and c != limit[3]:
        raise ValueError(
            f"activation {name!r} declares ray_limit={limit[0]!r} and odd_slope={_fmt(c)}: a ray limit "
            f"{limit[0]} forces sigma(z) - sigma(-z) = {_fmt(limit[3])} z (c = p + q, exactly; "
            "docs/theory/ray_limit.md); do not declare both"
            + ("" if limit[3] == 1 else f", or declare odd_slope=activations.get({limit[0]!r}).odd_slope")
        )
    if kink and degree not in (None, 1):
        raise ValueError(f"activation {name!r} declares kink=True (degree 1) and degree={degree}")
    # a user's declarations are checked where they can be refuted; the built-ins' facts are proved
    # on the page (docs/theory) and tested, not re-checked at every import
    if c is not None and not builtin:
        _refuse_odd_slope(name, fn, c)
    if limit is not None and not builtin:
        _refuse_ray_limit(name, fn, limit[:3])
    if kink:
        if not builtin:
            _refuse_kink(name, fn, c)
        degree = 1
    if not gated:
        gate_at_zero = None
    elif not builtin or gate_at_zero is None:
        gate_at_zero = float(_values(fn, np.zeros(())))
    ray_limit = None if limit is None else limit[0]
    return Activation(
        name, fn, gated, degree, c, gate_at_zero, smooth_at_zero, ray_limit, bool(kink), paper_theorem, builtin
    )


def register(
    name: str,
    fn: Callable[[jax.Array], jax.Array],
    *,
    gated: bool = False,
    degree: float | None = None,
    odd_slope: Fraction | float | None = None,
    smooth_at_zero: bool = True,
    ray_limit: str | None = None,
    kink: bool = False,
    overwrite: bool = False,
    odd_part_half: bool | None = None,
) -> Activation:
    """Register an elementwise activation (or, with ``gated=True``, a gate ``g``).

    Facts are declared, never measured: ``odd_slope=c`` declares ``σ(z) − σ(−z) = c z`` (kept as
    the exact :class:`~fractions.Fraction` of the number given; without it no certificate says
    ``absorbable``), ``ray_limit="relu"`` declares ``σ − relu = o(|z|)`` and
    ``ray_limit="leaky_relu(α)"`` (the name :func:`get` parses; ``"leaky_relu"`` is ``α = 0.01``)
    declares ``σ − leaky_relu(α) = o(|z|)``: the limit is a built-in kink ``ρ`` (slopes ``p = 1``,
    ``q = α``), a declared ``odd_slope`` must be its ``p + q`` exactly (relu: 1, ``leaky_relu(α)``:
    ``1 + α``, the float ``α``'s exact value), and it is not inferred from the limit (the limit does
    not imply ``σ(z) − σ(−z) = c z``; without it nothing is decided). With both, the kink theorem via
    the ray limit decides every width, biased or not (``docs/theory/ray_limit.md``). ``kink=True`` declares
    ``σ(z) = p z (z > 0), q z (z < 0)`` with ``p ≠ q`` (and needs ``odd_slope = p + q``). Each
    declaration is sanity-checked at a few points and refused (``ValueError``) when visibly false;
    passing the check proves nothing, and certificates list the declarations in
    ``Activation.assumes``. ``degree`` is the homogeneity degree of the whole block (for a gate of
    degree ``k`` the gated block has degree ``k + 1``); ``gate_at_zero`` is ``g(0)``.
    ``odd_part_half=True`` is the older spelling of ``odd_slope=1`` (deprecated). Returns the new
    entry.

    Examples:
      >>> import jax.numpy as jnp
      >>> from absorbjax import activations
      >>> entry = activations.register("leaky", lambda z: jnp.where(z > 0, z, 0.1 * z), degree=1)
      >>> entry.odd_slope, entry.converse()  # nothing declared, nothing measured, nothing proved
      (None, None)
      >>> entry = activations.register(
      ...     "leaky", lambda z: jnp.where(z > 0, z, 0.1 * z), odd_slope=1.1, kink=True, overwrite=True
      ... )
      >>> entry.converse(), entry.assumes[0]
      ('kink theorem (every width)', 'declared odd part: sigma(z) - sigma(-z) = 1.1 z')
      >>> activations.unregister("leaky")
      >>> import jax
      >>> entry = activations.register(  # σ − leaky_relu(0.25) = 0.75 log(1 + e^(−|z|)) is bounded
      ...     "soft_leaky", lambda z: 0.25 * z + 0.75 * jax.nn.softplus(z), odd_slope=1.25,
      ...     ray_limit="leaky_relu(0.25)",
      ... )
      >>> entry.converse(biased=True), entry.assumes[1]
      ('kink theorem via the ray limit (every width)', 'declared ray limit: sigma - leaky_relu(0.25) = o(|z|)')
      >>> activations.register("soft_leaky", entry.fn, odd_slope=1, ray_limit="leaky_relu(0.25)", overwrite=True)
      Traceback (most recent call last):
      ValueError: activation 'soft_leaky' declares ray_limit='leaky_relu(0.25)' and odd_slope=1: ...
      >>> activations.unregister("soft_leaky")
    """
    if odd_part_half is not None:
        warnings.warn("odd_part_half is deprecated: declare odd_slope=1", DeprecationWarning, stacklevel=2)
        if odd_part_half and odd_slope is None:
            odd_slope = 1
    return _register(name, fn, gated=gated, degree=degree, odd_slope=odd_slope, smooth_at_zero=smooth_at_zero,
                     ray_limit=ray_limit, kink=kink, overwrite=overwrite)  # fmt: skip


def unregister(name: str) -> None:
    """Remove a registered activation (``ValueError`` when unknown); see :func:`register`."""
    get(name)
    del _REGISTRY[name]


@functools.lru_cache(maxsize=64)
def leaky_relu(alpha: float = 0.01) -> Activation:
    """The built-in leaky ReLU ``σ(z) = max(z, α z)`` (``z`` for ``z ≥ 0``, ``α z`` below): a
    kink with ``p = 1``, ``q = α``, odd slope ``c = 1 + α`` exactly (the float ``α``'s exact
    value); PReLU is the same block with a per-model ``α``. Named ``"leaky_relu(α)"``, which
    :func:`get` parses; ``"leaky_relu"`` is ``α = 0.01``. ``α = 1`` (linear) and ``α = −1``
    (``|z|``) are refused.

    Examples:
      >>> from absorbjax import activations
      >>> from fractions import Fraction
      >>> act = activations.leaky_relu(0.2)
      >>> act.name, act.odd_slope == 1 + Fraction(0.2), act.odd_slope == Fraction(6, 5)
      ('leaky_relu(0.2)', True, False)
    """
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating, np.integer)):
        raise ValueError(f"alpha must be a real number, got {alpha!r}")
    alpha = float(alpha)
    if not math.isfinite(alpha) or alpha in (1.0, -1.0):
        raise ValueError(f"leaky_relu needs a finite alpha other than 1 (linear) and -1 (|z|), got {alpha!r}")
    fn = functools.partial(_leaky, negative_slope=alpha)
    return _entry(f"leaky_relu({alpha!r})", fn, builtin=True, gated=False, degree=1, odd_slope=1 + Fraction(alpha),
                  smooth_at_zero=False, ray_limit=None, kink=True, paper_theorem=None)  # fmt: skip


_LEAKY = re.compile(r"leaky_relu\(\s*([^()\s]+)\s*\)")


def get(name: str | Activation) -> Activation:
    """The registry entry for ``name``; ``ValueError`` listing the known names if unknown.
    ``"leaky_relu(α)"`` is :func:`leaky_relu` of the number ``α``.

    Examples:
      >>> from absorbjax import activations
      >>> activations.get("relu2").result
      'Prop 5: never absorbs (homogeneous of degree k != 1)'
      >>> activations.get("gelu").result
      'Thm 10: absorbs iff W_down[:,S] W_up[S,:] = -I for some S'
      >>> activations.get("silu").converse(biased=True)
      'Thm 8 via the ray limit'
      >>> activations.get("leaky_relu(0.5)").result
      'kink theorem (every width): absorbs iff 1.5 W_down[:,S] W_up[S,:] = -I for some S'
      >>> activations.get("leaky_relu").result  # c = 1 + α exactly, α the double nearest 0.01
      'kink theorem (every width): absorbs iff (1 + 0.01) W_down[:,S] W_up[S,:] = -I for some S'
      >>> activations.get("tanhh")
      Traceback (most recent call last):
      ValueError: unknown activation 'tanhh'; known: relu, gelu, gelu_tanh, silu, softplus, leaky_relu, hardswish, relu2, reglu, swiglu, geglu, glu (and leaky_relu(alpha))
    """
    if isinstance(name, Activation):
        return name
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        pass
    match = _LEAKY.fullmatch(name) if isinstance(name, str) else None
    if match is not None:
        try:
            alpha = float(match.group(1))
        except ValueError:
            raise ValueError(f"activation {name!r}: alpha {match.group(1)!r} is not a number") from None
        return leaky_relu(alpha)
    raise ValueError(f"unknown activation {name!r}; known: {', '.join(names())} (and leaky_relu(alpha))") from None


def names(*, gated: bool | None = None) -> tuple[str, ...]:
    """Registered names, optionally only the gated (``True``) or ungated (``False``) ones.

    Examples:
      >>> from absorbjax import activations
      >>> activations.names(gated=True)
      ('reglu', 'swiglu', 'geglu', 'glu')
    """
    return tuple(k for k, v in _REGISTRY.items() if gated is None or v.gated == gated)


# Ungated activations σ: the facts proved in docs/theory (ray_limit.md, kink.md).
# σ(z) − σ(−z) = z for the first six; σ − relu is bounded for relu, gelu, gelu_tanh, silu,
# softplus, hardswish: 0, −|z|Φ(−|z|), −|z|(1 − tanh(·))/2, −|z|·sigmoid(−|z|), log(1 + e^{−|z|}),
# and hardswish − relu = 0 outside (−3, 3); hence the declared ray limit relu.
_ONE = Fraction(1)
_register("relu", _relu, builtin=True, degree=1, odd_slope=_ONE, smooth_at_zero=False, ray_limit="relu",
          kink=True, paper_theorem="Thm 8")  # fmt: skip
_register("gelu", _gelu, builtin=True, odd_slope=_ONE, ray_limit="relu", paper_theorem="Thm 10")  # exact z Φ(z)
_register("gelu_tanh", _gelu_tanh, builtin=True, odd_slope=_ONE, ray_limit="relu")  # jax.nn.gelu's default
_register("silu", _silu, builtin=True, odd_slope=_ONE, ray_limit="relu")
_register("softplus", _softplus, builtin=True, odd_slope=_ONE, ray_limit="relu")
_REGISTRY["leaky_relu"] = dataclasses.replace(leaky_relu(0.01), name="leaky_relu")
_register("hardswish", _hardswish, builtin=True, odd_slope=_ONE, ray_limit="relu")  # z·relu6(z + 3)/6
_register("relu2", _relu2, builtin=True, degree=2)  # odd part z|z|: no odd slope
# Gates g of gated blocks W_down (g(W_gate x) ⊙ W_value x).
# g(0) is declared: relu(0) = silu(0) = gelu(0) = 0, sigmoid(0) = 1/2 (a test evaluates them).
_register("reglu", _relu, builtin=True, gated=True, degree=2, odd_slope=_ONE, smooth_at_zero=False, gate_at_zero=0.0)
_register("swiglu", _silu, builtin=True, gated=True, odd_slope=_ONE, gate_at_zero=0.0)
_register("geglu", _gelu, builtin=True, gated=True, odd_slope=_ONE, gate_at_zero=0.0)
_register("glu", _sigmoid, builtin=True, gated=True, gate_at_zero=0.5)  # sigmoid(z) − sigmoid(−z) = tanh(z/2)
