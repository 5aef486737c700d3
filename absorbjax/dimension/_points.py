"""Rational points: stacks with dyadic weights and probe inputs, exact in float64 and mod a prime."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import models
from absorbjax.dimension._options import check_count, check_denominator, check_shrink


class RationalPoint(NamedTuple):
    """A stack with rational weights and rational inputs, exact in float64 too.

    Attributes:
      up: integer numerators of ``W_up^ℓ``, ``(L, n, d)``.
      down: integer numerators of ``W_down^ℓ``, ``(L, d, n)``.
      inputs: integer numerators of the probe inputs / directions ``x_k``, ``(K, d)``.
      denominator: the common denominator ``Q = 2^s`` (so every value is a dyadic rational and
        the float64 weights are exactly the rational ones).
      hidden_bias: integer numerators of the hidden biases ``β_ℓ``, ``(L, n)``, or ``None`` (no biases).
      out_bias: integer numerators of the output biases ``γ_ℓ``, ``(L, d)``, or ``None``.
    """

    up: np.ndarray
    down: np.ndarray
    inputs: np.ndarray
    denominator: int
    hidden_bias: np.ndarray | None = None
    out_bias: np.ndarray | None = None

    @property
    def bias(self) -> bool:
        """Whether the stack has biases (their columns then follow ``up`` and ``down``)."""
        return self.hidden_bias is not None

    def params(self, dtype=None) -> models.MLPParams:
        """The weights as floats (exact in float64): ``MLPParams(up (L,n,d), down (L,d,n))``."""
        q = float(self.denominator)
        return models.MLPParams(jnp.asarray(self.up / q, dtype), jnp.asarray(self.down / q, dtype))

    def xs(self, dtype=None) -> jax.Array:
        """The probe inputs as floats, ``(K, d)``."""
        return jnp.asarray(self.inputs / float(self.denominator), dtype)


def rational_point(
    d: int,
    n: int,
    depth: int,
    *,
    key: jax.Array,
    inputs: int,
    denominator: int = 256,
    params: models.MLPParams | None = None,
    shrink: int = 0,
    bias: str | None = None,
) -> RationalPoint:
    """Gaussian weights (variance ``1/fan_in``) and standard Gaussian inputs rounded to multiples of
    ``1/denominator``; the inputs are a prefix-stable stream (``inputs=K`` is a prefix of ``inputs=2K``).

    Args:
      d, n, depth: ``d``, width ``n``, depth ``L``.
      key: PRNG key; its data seeds NumPy generators (weights, then inputs).
      inputs: number ``K`` of probe inputs.
      denominator: a power of two ``Q``.
      params: round these ``MLPParams`` (``(L,n,d)``, ``(L,d,n)``) instead of drawing new ones.
      shrink: multiply every ``W_down^ℓ`` by ``2^-shrink`` after rounding, exactly (the common
        denominator becomes ``Q · 2^shrink``): the near-identity stacks of the depth theorem
        (``docs/theory/depth.md``, step 4).
      bias: ``None`` (no biases), ``"zero"`` (biases present, equal to 0: the point at which GELU
        jets stay polynomial, step 9) or ``"gaussian"`` (``β_ℓ[i] = −W_up^ℓ[i]·ξ`` with ``ξ ~ N(0, I/4)``, so that every unit's
        kink crosses the standard Gaussian inputs, and ``γ_ℓ ~ N(0, 1/64)``, rounded; ``γ_ℓ``
        scaled by ``2^-shrink`` like ``W_down^ℓ``). The weights and inputs do not depend on it.

    Examples:
      >>> pt = rational_point(2, 4, 3, key=jax.random.key(0), inputs=5)
      >>> pt.up.shape, pt.down.shape, pt.inputs.shape, pt.denominator
      ((3, 4, 2), (3, 2, 4), (5, 2), 256)
      >>> small = rational_point(2, 4, 3, key=jax.random.key(0), inputs=5, shrink=4)
      >>> bool(np.all(small.down == pt.down)), small.denominator, bool(np.all(small.up == 16 * pt.up))
      (True, 4096, True)
    """
    check_denominator(denominator)
    check_count("inputs", inputs)
    check_shrink(shrink)
    for arg, v in (("d", d), ("n", n), ("depth", depth)):
        check_count(arg, v)
    if bias not in (None, "zero", "gaussian"):
        raise ValueError(f"bias must be None, 'zero' or 'gaussian', got {bias!r}")
    # NumPy's generator seeded by the key's data: exact, and no compilation per draw.
    typed = jnp.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key) if typed else key).ravel().tolist())
    if params is None:
        up = rng.standard_normal((depth, n, d)) / math.sqrt(d)
        down = rng.standard_normal((depth, d, n)) / math.sqrt(n)
    else:
        if np.shape(params.up) != (depth, n, d) or np.shape(params.down) != (depth, d, n):
            raise ValueError(
                f"params must have up ({depth}, {n}, {d}) and down ({depth}, {d}, {n}), "
                f"got {np.shape(params.up)} and {np.shape(params.down)}"
            )
        up, down = np.asarray(params.up, np.float64), np.asarray(params.down, np.float64)
    xs = np.random.default_rng([*rng.bit_generator.seed_seq.entropy, 1]).standard_normal((inputs, d))
    q = int(denominator)
    up, down, xs = (np.rint(np.asarray(a, np.float64) * q).astype(np.int64) for a in (up, down, xs))
    s = 2 ** int(shrink)
    if bias is None:
        return RationalPoint(up * s, down, xs * s, q * s)
    brng = np.random.default_rng([*rng.bit_generator.seed_seq.entropy, 2])
    # β_ℓ[i] = −U_ℓ[i]·ξ_{ℓi}: unit i's kink passes through ξ_{ℓi} ~ N(0, I/4), among the inputs.
    beta = -np.einsum("lnd,lnd->ln", up / q, brng.standard_normal((depth, n, d)) / 2)
    gamma = brng.standard_normal((depth, d)) / 8
    if bias == "zero":
        beta, gamma = np.zeros_like(beta), np.zeros_like(gamma)
    beta, gamma = (np.rint(a * q).astype(np.int64) for a in (beta, gamma))
    # over the denominator q s: β keeps its value (× s), γ is scaled by 2^-shrink like W_down.
    return RationalPoint(up * s, down, xs * s, q * s, beta * s, gamma)
