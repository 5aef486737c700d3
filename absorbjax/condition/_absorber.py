"""The absorber of Thm 8/10: the residual-free block that a set ``S`` passing rule (★) gives, and
its biases when the block has them; for a certificate of the line theorem (``d = 1``), its
absorber (:class:`_line.LineAbsorber`)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from absorbjax import activations
from absorbjax._dtypes import is_float
from absorbjax.condition._arith import output_bias
from absorbjax.condition._certificate import Certificate
from absorbjax.condition._rule import accepts, mask_of
from absorbjax.condition._validate import check_rtol, float_weights, skip_matrix
from absorbjax.models import MLPParams

_NEEDS_C = (
    "the odd slope c of the condition c·W_down[:,S] W_up[S,:] = −A (sigma(z) - sigma(-z) = c z; relu, gelu: 1, "
    "leaky_relu(alpha): 1 + alpha) is not given and is never assumed: pass the certificate as S, the activation (activation='gelu', a name or an "
    "Activation), or odd_slope="
)


def _activation_slope(activation) -> Fraction:
    """The declared odd slope of an ungated activation (a name or an :class:`~absorbjax.activations.Activation`)."""
    act = activations.get(activation)
    if act.gated:
        raise ValueError(f"activation {act.name!r} is gated: the sign-flip absorber is for ungated blocks")
    if act.odd_slope is None:
        raise ValueError(f"activation {act.name!r} declares no odd slope: the sign flip is not known to absorb")
    return act.odd_slope


def odd_slope_of(odd_slope=None, activation=None) -> Fraction:
    """The exact odd slope ``c`` (``σ(z) − σ(−z) = c z``) from ``activation`` (a name or an
    :class:`~absorbjax.activations.Activation`: its declared ``odd_slope``) and/or ``odd_slope`` (a
    number, its exact value, or an activation name); both given must agree exactly. Neither given is
    a ``ValueError``: no ``c = 1`` is ever assumed (leaky_relu's is ``1 + α``)."""
    found = []
    if activation is not None:
        found.append((f"activation {activations.get(activation).name!r}", _activation_slope(activation)))
    if isinstance(odd_slope, (str, activations.Activation)):
        found.append((f"odd_slope={activations.get(odd_slope).name!r}", _activation_slope(odd_slope)))
    elif odd_slope is not None:
        if isinstance(odd_slope, bool) or not isinstance(odd_slope, (int, float, Fraction, np.integer, np.floating)):
            raise ValueError(f"odd_slope must be a number, an activation name or None, got {odd_slope!r}")
        c = Fraction(odd_slope) if isinstance(odd_slope, Fraction) else Fraction(float(odd_slope))
        if c == 0:
            raise ValueError("odd_slope must be nonzero")
        found.append((f"odd_slope={odd_slope!r}", c))
    if not found:
        raise ValueError(_NEEDS_C)
    if len({c for _, c in found}) > 1:
        said = ", ".join(f"{who} gives {activations._fmt(c)}" for who, c in found)
        raise ValueError(f"the odd slope c is given twice and the two differ ({said}); pass one")
    return found[0][1]


def _set_of(S, params, activation):
    """``(S, activation, line)`` from ``S`` (indices or a mask) or a :class:`Certificate`: its ``S``
    and its activation (``activation`` when the caller names one too: the two slopes are then
    compared by :func:`odd_slope_of`), or its line absorber."""
    if not isinstance(S, Certificate):
        return S, activation, None
    cert = S
    n = np.shape(params.up)[-2]
    if cert.n != n or cert.d != np.shape(params.up)[-1]:
        raise ValueError(f"the certificate is for d = {cert.d}, n = {cert.n}, params have shape {np.shape(params.up)}")
    if cert.line is not None:
        return None, activation, cert.line
    if cert.S is None:
        raise ValueError(f"the certificate is {cert.status}: it holds no absorber")
    if cert.activation is not None:
        if activation is not None and _activation_slope(activation) != _activation_slope(cert.activation):
            raise ValueError(
                f"the certificate is for activation {cert.activation!r}, whose odd slope differs from "
                f"{activations.get(activation).name!r}'s"
            )
        activation = cert.activation
    return cert.S, activation, None


def absorber(
    params: MLPParams,
    S,
    activation=None,
    *,
    skip=None,
    rtol: float | None = None,
    check: bool = True,
    odd_slope=None,
) -> MLPParams:
    """The residual-free block that equals ``x ↦ A x + W_down σ(W_up x)``.

    ``V_up = W_up`` with the rows in ``S`` negated, ``V_down = W_down``. For activations with
    ``σ(z) − σ(−z) = c z`` (``c = 1``: relu, gelu, gelu_tanh, silu, softplus, hardswish;
    ``leaky_relu(α)``: ``1 + α``): ``V_down σ(V_up x) = W_down σ(W_up x) − c·W_down[:,S] W_up[S,:] x``,
    which is ``A x + W_down σ(W_up x)`` exactly when ``c·W_down[:,S] W_up[S,:] = −A``: the flip uses
    only ``σ(−z) = σ(z) − c z``, so the same weights serve every ``A``, singular ones included;
    ``skip`` only changes the condition checked.

    The check needs ``c``, and nothing assumes it: it comes from the certificate (passed as ``S``),
    ``activation`` or ``odd_slope``; with none of them the check raises ``ValueError`` (with
    ``check=False`` no ``c`` is needed: the weights do not depend on it).

    ``S`` may be a :class:`Certificate`: its set (and its activation's odd slope), or, for a
    certificate of the line theorem (``d = 1``, ``cert.line``), its absorber
    ``V_up = (1, −1, 0, …)ᵀ``, ``V_down = (α₁, α₂, 0, …)`` in float64, which differs from the block by
    at most ``cert.promise.miss_bound·|x|`` (no check is needed: the weights were solved exactly).
    A block with a hidden bias ``b`` is absorbed by also negating ``b[S]`` and adding
    ``W_down[:,S] b[S]`` to the output bias (``σ(−z) = σ(z) − z``).

    Args:
      params: ungated block ``(W_up (n, d), W_down (d, n))``.
      S: indices ``(|S|,)``, a boolean mask ``(n,)``, or a :class:`Certificate`.
      activation: the block's activation (a name or an :class:`~absorbjax.activations.Activation`):
        its declared odd slope is ``c``.
      skip: ``A`` ``(d, d)``, ``None`` = ``I``.
      rtol, check: with ``check=True`` a set that rule (★) rejects raises ``ValueError``.
      odd_slope: ``c`` as a number or an activation name (its declared slope); given with
        ``activation`` or a certificate's activation, it must be the same ``c``.

    Returns:
      ``MLPParams`` of JAX arrays ``(V_up (n, d), V_down (d, n))`` in the dtype of ``params``
      (a line absorber: float64), as far as ``jax_enable_x64`` allows.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import condition, models
      >>> with jax.enable_x64(True):
      ...     params, S = models.planted("gelu", 3, 6, key=jax.random.key(0))
      ...     V = condition.absorber(params, S, "gelu")
      ...     x = jnp.array([0.3, -1.2, 2.0])
      ...     gap = models.skip_mlp(params, x, "gelu") - models.mlp(V, x, "gelu")
      ...     print(bool(jnp.max(jnp.abs(gap)) < 1e-12))
      True

    References:
      Mijoski & Karbevski (2026), the absorber in the proofs of Thm 8 and Thm 10.
    """
    S, activation, line = _set_of(S, params, activation)
    U, D, dtype = float_weights(params, batched=False)
    n, d = U.shape
    if line is not None:
        import jax.numpy as jnp

        up, down = line.weights(n)
        return MLPParams(jnp.asarray(up, jnp.float64), jnp.asarray(down, jnp.float64))
    m = mask_of(S, n)
    if check:
        c = odd_slope_of(odd_slope, activation)
        ok, miss = accepts(U, D, skip_matrix(skip, d), m, check_rtol(rtol), c)
        if not ok:
            hint = ""
            if np.dtype(dtype).itemsize < 8 and is_float(dtype):  # bfloat16 and float8 included
                hint = (
                    f"; the weights are {dtype}, whose rounding exceeds the float64 tolerance: build "
                    'them in float64 (enable x64: jax.config.update("jax_enable_x64", True))'
                )
            raise ValueError(
                f"S does not satisfy c·W_down[:,S] W_up[S,:] = −A (c = {float(c):.6g}): entrywise miss {miss:.3g} is outside "
                f"the tolerance (condition.tolerance(params, S)){hint}"
            )
    import jax.numpy as jnp  # the absorber is a JAX block; deciding never imports JAX

    up = jnp.asarray(params.up)
    sign = jnp.asarray(np.where(m, -1, 1), dtype=up.dtype)
    return MLPParams(up * sign[:, None], jnp.asarray(params.down))


def absorber_biases(
    params: MLPParams, S, bias, out_bias=None, *, activation=None, odd_slope=None
) -> tuple[np.ndarray, np.ndarray]:
    """The biases ``(β (n,), e (d,))`` of the absorber of a biased block.

    The block ``x ↦ A x + W_down σ(W_up x + b) + c`` with ``W_down[:,S] W_up[S,:] = −A`` equals
    ``V_down σ(V_up x + β) + e`` with ``(V_up, V_down)`` = :func:`absorber` (rows of ``W_up`` in ``S``
    negated), ``β = b`` with ``b[S]`` negated and ``e = c + W_down[:,S] b[S]``: for ``i ∈ S``,
    ``σ(−w_i·x − b_i) = σ(w_i·x + b_i) − c(w_i·x + b_i)`` (odd slope ``c``), so the flipped units add
    ``−c·W_down[:,S](W_up[S,:] x + b[S]) = A x − c·W_down[:,S] b[S]``: with ``c ≠ 1``
    (``odd_slope``, as for :func:`absorber`) ``e = c_out + c·W_down[:,S] b[S]``. ``c`` comes from the
    certificate (passed as ``S``), ``activation`` or ``odd_slope``, never a default: without one,
    ``ValueError``, unless ``b[S] = 0`` (then ``e = c_out`` whatever ``c``).

    ``e`` is the exact ``c + W_down[:,S] b[S]`` rounded once to float64 (:func:`_arith.output_bias`);
    the certificate's ``offset_bound`` (``find_absorbing_set(..., bias=b, out_bias=c)``) bounds that
    rounding, so ``‖absorber(x) − block(x)‖ ≤ miss_bound·‖x‖ + offset_bound`` for every ``x``.

    For a line certificate (``cert.line``, ``d = 1``, no hidden bias) ``β = 0`` and ``e = c``.

    Args:
      params: ``W_up (n, d)``, ``W_down (d, n)``; S: indices, a mask ``(n,)`` or a :class:`Certificate`;
      bias: the hidden bias ``b (n,)``; out_bias: the output bias ``c (d,)`` (``None``: 0).
      activation, odd_slope: the odd slope, as for :func:`absorber`.

    Returns:
      float64 NumPy arrays ``β (n,)`` and ``e (d,)``.
    """
    S, activation, line = _set_of(S, params, activation)
    U, D, _ = float_weights(params, batched=False)
    n, d = U.shape
    if line is not None:
        if bias is not None and np.any(np.asarray(bias) != 0):
            raise ValueError("the line theorem's absorber is for blocks without a hidden bias")
        e = np.zeros(d) if out_bias is None else np.asarray(out_bias, np.float64).reshape(d)
        return np.zeros(n), e
    m = mask_of(S, n)
    b = np.zeros(n) if bias is None else np.asarray(bias, np.float64)
    if b.shape != (n,):
        raise ValueError(f"bias must be the hidden bias b, shape ({n},), got {b.shape}")
    c = np.zeros(d) if out_bias is None else np.asarray(out_bias, np.float64)
    if c.shape != (d,):
        raise ValueError(f"out_bias must be the output bias c, shape ({d},), got {c.shape}")
    if odd_slope is None and activation is None and not np.any(b[m]):
        return np.where(m, -b, b), c.copy()  # nothing flipped carries a bias: e = c_out whatever the slope
    return np.where(m, -b, b), output_bias(D, b, m, c, odd_slope_of(odd_slope, activation))[0]
