"""One registry of activations, with the facts the paper's theorems use.

An ungated block applies ``σ`` to ``W_up x``; a gated block applies the gate ``g`` to
``W_gate x`` and multiplies by the linear value branch ``W_value x``. Each entry records:

- ``gated``: whether the function is a gate ``g`` (GLU family) or an activation ``σ``;
- ``degree``: the positive-homogeneity degree ``k`` of the *block*, when ``f(t x) = t^k f(x)``
  for ``t > 0`` (ReLU: 1, ReLU²: 2, ReGLU: 1 + 1 = 2), else ``None``;
- ``odd_part_half``: whether ``σ(z) − σ(−z) = z`` (odd part ``z/2``), which makes the
  sign-flip absorber exact;
- ``gate_at_zero``: ``g(0)`` for gates (Prop 6 needs ``g(0) = 0``), ``None`` otherwise;
- ``smooth_at_zero``: whether the function is differentiable at 0 (Prop 6 needs it);
- ``ray_limit``: ``"relu"`` when *declared* that ``σ − relu`` is bounded on ``R`` (relu, gelu,
  gelu_tanh, silu, softplus), so that ``σ(t a + b)/t → relu(a)`` for every ``a, b`` as ``t → ∞``
  (the *ray limit*, biases included; ``docs/theory/ray_limit.md``). Never inferred: a user
  activation declares it and :func:`register` checks it numerically;
- ``paper_theorem``: the paper's theorem proving the bias-free converse (relu: Thm 8, gelu: Thm 10).

:meth:`Activation.converse` is the one place that says which theorem decides which block.

``family`` derives from these: ``"homogeneous"`` (degree ``k ≠ 1``, Prop 5), ``"gated"``
(Prop 6 when ``g(0) = 0`` and smooth), ``"ungated"`` (Thm 8/10 territory).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Activation", "RAY_LIMIT_THEOREM", "get", "names", "register", "unregister"]

RAY_LIMIT_THEOREM = "Thm 8 via the ray limit"  # proved beyond the paper: docs/theory/ray_limit.md


@dataclasses.dataclass(frozen=True)
class Activation:
    """A registered activation ``σ`` (or gate ``g``) and the facts the theorems need.

    Examples:
      >>> from absorbjax import activations
      >>> act = activations.get("swiglu")
      >>> act.gated, act.gate_at_zero, act.family, act.never_absorbs
      (True, 0.0, 'gated', True)
      >>> float(act(1.0))  # the gate g = silu
      0.7310585975646973

    References:
      Prop 5 (``degree`` ``k ≠ 1``), Prop 6 (``gate_at_zero = 0``, ``smooth_at_zero``),
      Thm 8/10 (``odd_part_half``: the sign-flip absorber's identity ``σ(z) − σ(−z) = z``).
    """

    name: str
    fn: Callable[[jax.Array], jax.Array]
    gated: bool = False
    degree: float | None = None
    odd_part_half: bool = False
    gate_at_zero: float | None = None
    smooth_at_zero: bool = True
    ray_limit: str | None = None
    paper_theorem: str | None = None

    def converse(self, *, biased: bool = False) -> str | None:
        """The theorem proving "no ``S`` ⇒ no same-width absorber" for this ``σ``, or ``None``.

        Bias-free relu and gelu: the paper's Thm 8 and Thm 10. Every ungated ``σ`` with odd part
        ``z/2`` and a declared ray limit ``relu``, with or without hidden bias:
        :data:`RAY_LIMIT_THEOREM` (proved beyond the paper): put ``x → t x`` in an identity between
        the biased residual block and a biased free block, divide by ``t``, let ``t → ∞``: the
        bias-free ReLU blocks on the same ``W_up, W_down`` agree, and Thm 8 (Lemma 4) gives ``S``.
        """
        if self.gated or self.family == "homogeneous" or not self.odd_part_half:
            return None
        if not biased and self.paper_theorem is not None:
            return self.paper_theorem
        return RAY_LIMIT_THEOREM if self.ray_limit == "relu" else None

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
        """The paper's result that decides absorption for blocks with this activation."""
        if self.family == "homogeneous":
            return "Prop 5: never absorbs (homogeneous of degree k != 1)"
        if self.gated:
            if self.never_absorbs:
                return "Prop 6: never absorbs (gate differentiable at 0 with g(0) = 0)"
            return "not covered: gate with g(0) != 0 or not differentiable at 0"
        theorem = self.converse()
        if theorem is not None:
            return f"{theorem}: absorbs iff W_down[:,S] W_up[S,:] = -I for some S"
        if self.odd_part_half:
            return "sign-flip absorber exact when an S exists; converse not proven"
        return "not covered"

    def __call__(self, z: jax.Array) -> jax.Array:
        return self.fn(z)


_REGISTRY: dict[str, Activation] = {}


def _relu2(z):
    return jnp.square(jax.nn.relu(z))


def _gelu(z):
    return jax.nn.gelu(z, approximate=False)


def _gelu_tanh(z):
    return jax.nn.gelu(z, approximate=True)


def _odd_part_is_half(fn: Callable) -> bool:
    """Numerical check of ``σ(z) − σ(−z) = z`` on a grid in [−8, 8] (float32-safe, rtol 1e-5)."""
    z = np.linspace(-8.0, 8.0, 257, dtype=np.float32)
    lhs = np.asarray(fn(jnp.asarray(z)) - fn(jnp.asarray(-z)))
    return bool(np.allclose(lhs, z, rtol=1e-5, atol=1e-5))


def _check_ray_limit(name: str, fn: Callable) -> None:
    """Numerical sanity check of a declared ray limit ``relu``: ``|σ(t z + b)/t − relu(z)|`` at
    ``t = 1e3`` is below ``1e-2`` on ``z ∈ [−4, 4]`` (``z = 0`` included), ``b ∈ {−1, 0, 1}``, and
    ``|σ(z) − relu(z)|`` does not grow from ``|z| = 10²`` to ``|z| = 10⁴`` (``σ − relu`` bounded)."""
    z = np.concatenate([np.linspace(-4.0, 4.0, 33), [0.0]]).astype(np.float32)
    t = np.float32(1e3)
    relu = np.maximum(z, 0.0)
    gap = max(float(np.max(np.abs(np.asarray(fn(jnp.asarray(t * z + b))) / t - relu))) for b in (-1.0, 0.0, 1.0))
    far = np.array([1e2, -1e2, 1e4, -1e4], np.float32)
    tail = np.abs(np.asarray(fn(jnp.asarray(far))) - np.maximum(far, 0.0))
    if not (gap <= 1e-2 and np.all(np.isfinite(tail)) and max(tail[2:]) <= max(tail[:2]) + 1.0):
        raise ValueError(
            f"activation {name!r} declares ray_limit='relu', but sigma(t z + b)/t differs from relu(z) by "
            f"{gap:.3g} at t = 1e3 (or sigma - relu grows: {tail.tolist()}); do not declare it"
        )


def register(
    name: str,
    fn: Callable[[jax.Array], jax.Array],
    *,
    gated: bool = False,
    degree: float | None = None,
    odd_part_half: bool | None = None,
    smooth_at_zero: bool = True,
    ray_limit: str | None = None,
    paper_theorem: str | None = None,
    overwrite: bool = False,
) -> Activation:
    """Register an elementwise activation (or, with ``gated=True``, a gate ``g``).

    ``odd_part_half`` is measured numerically when not given; ``gate_at_zero`` is ``g(0)``.
    ``degree`` is the homogeneity degree of the whole block (for a gate of degree ``k`` the
    gated block has degree ``k + 1``). ``ray_limit="relu"`` declares that ``σ − relu`` is bounded
    (so ``σ(t a + b)/t → relu(a)``): checked numerically, a ``ValueError`` when the check fails;
    it is never inferred. ``paper_theorem`` is for the built-ins. Returns the new entry.

    Examples:
      >>> import jax.numpy as jnp
      >>> from absorbjax import activations
      >>> entry = activations.register("leaky", lambda z: jnp.where(z > 0, z, 0.1 * z), degree=1)
      >>> entry.odd_part_half, entry.family  # measured: leaky(z) − leaky(−z) = 1.1 z
      (False, 'ungated')
      >>> activations.unregister("leaky")
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"activation {name!r} is already registered; pass overwrite=True")
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    if odd_part_half is None:
        odd_part_half = _odd_part_is_half(fn)
    if ray_limit not in (None, "relu"):
        raise ValueError(f"ray_limit must be None or 'relu' (the only limit a theorem uses), got {ray_limit!r}")
    if ray_limit is not None:
        if gated:
            raise ValueError("ray_limit is a fact about ungated activations; pass gated=False")
        _check_ray_limit(name, fn)
    gate_at_zero = float(fn(jnp.zeros(()))) if gated else None
    entry = Activation(name, fn, gated, degree, odd_part_half, gate_at_zero, smooth_at_zero, ray_limit, paper_theorem)
    _REGISTRY[name] = entry
    return entry


def unregister(name: str) -> None:
    """Remove a registered activation (``ValueError`` when unknown); see :func:`register`."""
    get(name)
    del _REGISTRY[name]


def get(name: str | Activation) -> Activation:
    """The registry entry for ``name``; ``ValueError`` listing the known names if unknown.

    Examples:
      >>> from absorbjax import activations
      >>> activations.get("relu2").result
      'Prop 5: never absorbs (homogeneous of degree k != 1)'
      >>> activations.get("gelu").result
      'Thm 10: absorbs iff W_down[:,S] W_up[S,:] = -I for some S'
      >>> activations.get("silu").converse(biased=True)
      'Thm 8 via the ray limit'
      >>> activations.get("tanhh")
      Traceback (most recent call last):
      ValueError: unknown activation 'tanhh'; known: relu, gelu, gelu_tanh, silu, softplus, relu2, reglu, swiglu, geglu, glu
    """
    if isinstance(name, Activation):
        return name
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown activation {name!r}; known: {', '.join(names())}") from None


def names(*, gated: bool | None = None) -> tuple[str, ...]:
    """Registered names, optionally only the gated (``True``) or ungated (``False``) ones.

    Examples:
      >>> from absorbjax import activations
      >>> activations.names(gated=True)
      ('reglu', 'swiglu', 'geglu', 'glu')
    """
    return tuple(k for k, v in _REGISTRY.items() if gated is None or v.gated == gated)


# Ungated activations σ.
# σ − relu is bounded for these five: 0, −|z|Φ(−|z|), −|z|(1 − tanh(·))/2, −|z|·sigmoid(−|z|),
# log(1 + e^{−|z|}); hence the declared ray limit relu.
register(
    "relu", jax.nn.relu, degree=1, odd_part_half=True, smooth_at_zero=False, ray_limit="relu", paper_theorem="Thm 8"
)
register("gelu", _gelu, odd_part_half=True, ray_limit="relu", paper_theorem="Thm 10")  # exact z Φ(z)
register("gelu_tanh", _gelu_tanh, odd_part_half=True, ray_limit="relu")  # jax.nn.gelu's default
register("silu", jax.nn.silu, odd_part_half=True, ray_limit="relu")
register("softplus", jax.nn.softplus, odd_part_half=True, ray_limit="relu")
register("relu2", _relu2, degree=2, odd_part_half=False)
# Gates g of gated blocks W_down (g(W_gate x) ⊙ W_value x).
register("reglu", jax.nn.relu, gated=True, degree=2, odd_part_half=True, smooth_at_zero=False)
register("swiglu", jax.nn.silu, gated=True, odd_part_half=True)
register("geglu", _gelu, gated=True, odd_part_half=True)
register("glu", jax.nn.sigmoid, gated=True, odd_part_half=False)
