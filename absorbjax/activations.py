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
- ``gate_at_zero``: the declared ``g(0)`` for gates (Prop 6 needs ``g(0) = 0``), ``None`` when not
  declared (and for ungated activations): a user's gate is never evaluated to supply it;
- ``smooth_at_zero``: whether the function is declared differentiable at 0 (Prop 6 needs it);
  ``None`` when a user's registration does not declare it (the built-ins declare it);
- ``paper_theorem``: the paper's theorem proving the bias-free converse (relu: Thm 8, gelu: Thm 10);
- ``builtin``: registered by absorbjax, its facts proved on the page; a user's registration is
  not, and a certificate resting on it lists the declarations in ``Activation.assumes``.

:func:`register` never infers a fact; its sanity checks at a few points can only *refuse* a
declaration that is visibly false. :meth:`Activation.converse` is the one place that says which
theorem decides which block.

``family`` derives from these: ``"homogeneous"`` (degree ``k ≠ 1``, Prop 5), ``"gated"``
(Prop 6 when ``g(0) = 0`` and smooth are both declared), ``"ungated"`` (Thm 8/10 territory). No
default stands in for a user's fact: an undeclared one leaves Prop 5/6 silent (``result`` names it).

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
from typing import TYPE_CHECKING, Callable

import numpy as np

from absorbjax._declared import (
    _as_degree,
    _as_fraction,
    _as_gate_value,
    _fmt,
    _num,
    _refuse_degree,
    _refuse_gate_at_zero,
    _refuse_kink,
    _refuse_odd_slope,
    _refuse_ray_limit,
    _refuse_smooth,
)

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
    gate_at_zero: float | Fraction | None = None
    smooth_at_zero: bool | None = None
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
        whose facts are proved in ``docs/theory``. The degree is listed when declared (unless a
        declared kink implies it), and for gates ``g(0)`` and differentiability at 0 when declared
        (a declared "not differentiable" supports no answer and is not listed)."""
        return tuple(self._declared().values())

    def _declared(self) -> dict[str, str]:
        """``{fact: text}`` of the declarations (none for the built-ins)."""
        if self.builtin:
            return {}
        out = {}
        if self.odd_slope is not None:
            out["odd_slope"] = f"declared odd part: sigma(z) - sigma(-z) = {_fmt(self.odd_slope)} z"
        if self.ray_limit is not None:
            out["ray_limit"] = f"declared ray limit: sigma - {self.ray_limit} = o(|z|)"
        if self.kink:
            out["kink"] = "declared kink: sigma(z) = p z (z > 0), q z (z < 0), p != q"
        elif self.degree is not None:
            out["degree"] = f"declared degree: f(t x) = t^{_num(self.degree)} f(x) for t > 0"
        if self.gated and self.gate_at_zero is not None:
            out["gate_at_zero"] = f"declared gate value at zero: g(0) = {_num(self.gate_at_zero)}"
        if self.gated and self.smooth_at_zero:
            out["smooth_at_zero"] = "declared differentiable at 0"
        return out

    def _result_assumes(self) -> tuple[str, ...]:
        """The declarations that :attr:`result` rests on where Prop 5 or Prop 6 decides
        (:attr:`never_absorbs`): the degree (Prop 5), or ``g(0) = 0`` and differentiability at 0
        (Prop 6); ``()`` otherwise and for the built-ins."""
        facts = self._declared()
        if self.family == "homogeneous":
            keys = ("degree",)
        elif self.never_absorbs:
            keys = ("gate_at_zero", "smooth_at_zero")
        else:
            keys = ()
        return tuple(facts[k] for k in keys if k in facts)

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
        """Whether Prop 5 or Prop 6 rules absorption out whatever the weights: a declared degree
        ``k ≠ 1``, or a gate declared differentiable at 0 with ``g(0) = 0`` declared."""
        prop6 = self.gated and self.gate_at_zero is not None and self.gate_at_zero == 0 and self.smooth_at_zero is True
        return self.family == "homogeneous" or prop6

    def _missing(self) -> str | None:
        """For a gate that Prop 6 would decide but for an undeclared fact, what to declare."""
        if not self.gated or self.never_absorbs or self.smooth_at_zero is False:
            return None
        if self.gate_at_zero is not None and self.gate_at_zero != 0:
            return None
        need = []
        if self.gate_at_zero is None:
            need.append("gate_at_zero declared (g(0) = 0)")
        if self.smooth_at_zero is None:
            need.append("smooth_at_zero declared (g differentiable at 0)")
        return f"Prop 6 needs {' and '.join(need)}; not covered until then"

    @property
    def result(self) -> str:
        """The result that decides absorption for blocks with this activation."""
        given = "" if self.builtin else "given the declared facts, "
        if self.family == "homogeneous":
            return f"{given}Prop 5: never absorbs (homogeneous of degree k != 1)"
        if self.gated:
            if self.never_absorbs:
                return f"{given}Prop 6: never absorbs (gate differentiable at 0 with g(0) = 0)"
            return self._missing() or "not covered: gate with g(0) != 0 or not differentiable at 0"
        c = "" if self.odd_slope in (None, 1) else f"{_fmt(self.odd_slope)} "
        theorem = self.converse()
        if theorem is not None:
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


def _register(name, fn, *, builtin=False, gated=False, degree=None, odd_slope=None, smooth_at_zero=None,
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
    """A checked :class:`Activation` (not registered): refuses visibly false declarations. Every
    gate fact is declared (``gate_at_zero``, ``smooth_at_zero``), never evaluated; a built-in that
    leaves ``smooth_at_zero`` out is differentiable at 0 (its facts are proved on the page)."""
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    if smooth_at_zero is not None and not isinstance(smooth_at_zero, (bool, np.bool_)):
        raise ValueError(f"smooth_at_zero of {name!r} must be True, False or None, got {smooth_at_zero!r}")
    if builtin and smooth_at_zero is None:
        smooth_at_zero = True
    smooth_at_zero = None if smooth_at_zero is None else bool(smooth_at_zero)
    degree = _as_degree(name, degree)
    gate_at_zero = _as_gate_value(name, gate_at_zero)
    if gate_at_zero is not None and not gated:
        raise ValueError(f"activation {name!r} declares gate_at_zero but is not a gate; pass gated=True")
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
    elif degree is not None and not builtin:
        _refuse_degree(name, fn, degree, gated)
    if gate_at_zero is not None and not builtin:
        _refuse_gate_at_zero(name, fn, gate_at_zero)
    if smooth_at_zero and not builtin:
        _refuse_smooth(name, fn)
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
    smooth_at_zero: bool | None = None,
    ray_limit: str | None = None,
    kink: bool = False,
    gate_at_zero: float | Fraction | None = None,
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
    degree ``k`` the gated block has degree ``k + 1``; a declared ``k ≠ 1`` decides by Prop 5). For
    a gate (``gated=True``), ``gate_at_zero`` declares ``g(0)`` (an exact number) and
    ``smooth_at_zero=True`` that ``g`` is differentiable at 0: Prop 6 ("never absorbs") needs both
    declared, ``g(0) = 0`` and differentiable; nothing is evaluated to supply them, and undeclared
    they leave the block ``undecided``. A degree, ``g(0)`` or differentiability that a few points
    show false (``σ(2 z) ≠ 2^k σ(z)``, ``g(0)`` visibly another number, a kink or jump at 0) is
    refused like the other declarations.
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
                     ray_limit=ray_limit, kink=kink, gate_at_zero=gate_at_zero, overwrite=overwrite)  # fmt: skip


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
