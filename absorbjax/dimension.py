"""Functional dimension of deep ReLU/GELU stacks, and certificates of generic disjointness at depth.

A residual stack of depth ``L`` is ``f_W = b_L ∘ … ∘ b_1`` with ``b_ℓ(x) = x + W_down^ℓ σ(W_up^ℓ x)``
(``W_up^ℓ ∈ R^{n×d}``, ``W_down^ℓ ∈ R^{d×n}``, no biases); a residual-free (free) stack composes
``x ↦ V_down^ℓ σ(V_up^ℓ x)``. Both have ``P = 2Lnd`` weights. The paper settles ``L = 1``; this
module answers ``L ≥ 2`` size by size, by counting dimensions. Everything below is beyond the paper;
each statement is labelled *proved* (argument given here), *computed exactly* (modular arithmetic on
exact rational or polynomial data) or *float* (an SVD, evidence only).

Proof sketch (checked step by step in ``tests/test_dimension.py``)
-------------------------------------------------------------------
Fix finitely many *probes* of a function that are polynomial in the weights: for GELU the Taylor
coefficients of ``t ↦ f(t x_k)`` at ``t = 0`` up to order ``k`` (the ``k``-jet along directions
``x_k``); for ReLU the values ``f(x_k)`` at inputs ``x_k``. Write ``R(W)`` for the residual probes and
``F(V)`` for the free ones; ``f_W = g_V`` implies ``R(W) = F(V)``.

1. *Free bound (proved).* At each of the ``L − 1`` junctions of a free stack,
   ``V_down^ℓ → T V_down^ℓ``, ``V_up^{ℓ+1} → V_up^{ℓ+1} T⁻¹`` (``T ∈ GL(d)``) leaves the function
   unchanged; for ReLU, so does ``V_up^ℓ[i,:] → a V_up^ℓ[i,:]``, ``V_down^ℓ[:,i] → V_down^ℓ[:,i]/a``
   (``a > 0``, every unit). Their tangents lie in the kernel of ``DF``. They are independent where
   the rows of every ``V_up^ℓ`` are nonzero and every ``V_down^ℓ`` has full row rank (``n ≥ d``):
   in ``Σ_ℓ gauge(A_ℓ) + Σ_ℓ scale(s_ℓ) = 0`` the ``V_up^1`` block reads ``diag(s_1) V_up^1 = 0``,
   so ``s_1 = 0``; then the ``V_down^1`` block reads ``A_1 V_down^1 = 0``, so ``A_1 = 0``; and so on
   up the stack. Hence ``rank DF ≤ b = 2Lnd − (L−1)d² (− nL for ReLU)`` on a dense open set, and,
   ``F`` being polynomial (GELU jets: polynomial in ``V`` and ``c = 1/√(2π)``; ReLU: one polynomial
   map ``Q_π`` per activation pattern ``π``, each with the same symmetries, and ``F(V) = Q_π(V)``
   for the pattern ``π`` of ``V``), everywhere. So the free probes lie in a semialgebraic set of
   dimension ``≤ b`` (a finite union of images of polynomial maps of rank ``≤ b``). Checked: the
   tangents annihilate the float Jacobian of free stacks and are independent; free GELU stacks
   attain ``b`` exactly (the count is tight); free ReLU stacks attain it at some points for
   ``n = 2d`` but their rank varies with the point, and for ``n = d`` none of the points tried
   attains it (``(d,n,L) = (2,2,3)``: 8 vs ``b = 10``): there ``b`` is an upper bound only, which
   is all the certificate uses.
2. *Residual rank (computed exactly).* At one rational point ``W_0`` the rank ``r`` of ``DR(W_0)``
   is computed modulo a prime ``p``. This is a lower bound on the rank over ``R``: the modular
   matrix is *exactly* the image of the true matrix under the ring homomorphism
   ``Z[1/2, 1/m][c] → F_p`` (``c ↦`` a residue ``c_0``), because every entry is produced by ring
   operations (and divisions by the constants ``2``, the weights' denominator ``2^s`` and the
   Taylor denominators ``2^j j! (2j+1)``, all units mod ``p``) on exact data. (The residues are
   held in float64 for BLAS speed, but every intermediate is an integer below ``2^53``: products of
   residues below ``p < 2^21`` and sums of at most ``2^11`` of them, each followed by ``fmod``.) A minor that is nonzero mod ``p`` is therefore a nonzero element of ``Q[c]``; for GELU
   that polynomial in ``c`` is nonzero at the transcendental ``c = 1/√(2π)``; for ReLU (no ``c``)
   it is a nonzero rational. So ``rank_R DR(W_0) ≥ r``. A wrong residue or prime can only make
   ``r`` smaller (an *inconclusive* answer), never larger.
3. *Generic rank (proved).* ``R`` is polynomial on the region ``N`` of weights where nothing
   changes qualitatively: for GELU all of ``R^P`` (jets are polynomials), for ReLU the open set of
   weights at which every probe input keeps its activation pattern (checked exactly at ``W_0``:
   every pre-activation is a nonzero rational). A polynomial map has rank ``≥ r`` off a proper
   algebraic subset of ``N``.
4. *Disjointness (proved).* If ``r > b``: where ``rank DR = r_max ≥ r`` the constant-rank theorem
   makes ``R`` locally a submersion onto an ``r_max``-dimensional manifold, which meets the
   ``≤ b``-dimensional free set in a null set; its preimage is null. So the residual weights in
   ``N`` that some free stack of the same width reproduces form a Lebesgue-null set:
   GELU, *almost all weights*; ReLU, *almost all weights of the open region* ``N`` around ``W_0``
   (ReLU's functional dimension varies across weight space, so not automatically everywhere).
   At ``L = 1`` the gap ``b − P`` is zero and the count decides nothing (the paper needed its
   index-set argument there). A restricted family (``subfamily``: ``W_0 + B θ``) is certified the
   same way within its own parameter space.
5. *Narrow ReLU width (proved; checked exactly).* For ``d ≤ n < 2d`` at any input ``x`` off the
   kinks of a free stack's first layer, ``x`` and ``−x`` activate complementary sets of its units,
   so one of them activates fewer than ``d``; there the first block's Jacobian
   ``V_down diag(m) V_up`` has rank ``< d`` and the stack's Jacobian is singular, on an open set.
   A residual stack whose layers satisfy ``det(I + W_down[:,S] W_up[S,:]) ≠ 0`` for every ``S``
   (true off finitely many hypersurfaces, so for almost all weights) has an invertible Jacobian on
   every linear region. So it is never absorbed, by a free stack of width ``n`` and any depth.
6. *GELU → ReLU (proved; checked numerically).* ``GELU(t z)/t → ReLU(z)`` uniformly
   (``|GELU(tz)/t − ReLU(z)| ≤ 0.17/t``), and ``f(t x)/t`` is the stack with activation
   ``GELU(t ·)/t``; so a GELU absorption at weights ``(W, V)`` is a ReLU absorption at the same
   weights, and step 5 transfers to GELU.

Floating-point ranks (:func:`float_rank`: ``jax.jacfwd`` of weights ↦ outputs at the same rational
point and inputs, SVD, the singular-value gap reported) are the quick check beside the exact
ones, never a certificate.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from absorbjax import activations, models
from absorbjax.io import to_jsonable

__all__ = [
    "RationalPoint",
    "FloatRank",
    "ExactRank",
    "DepthCertificate",
    "ACTIVATIONS",
    "STATUSES",
    "PRIME",
    "param_count",
    "free_bound",
    "residual_max",
    "rational_point",
    "float_rank",
    "exact_rank",
    "narrow_invertible",
    "gelu_taylor",
    "certify",
]

ACTIVATIONS = ("relu", "gelu")
STATUSES = ("certified_disjoint", "inconclusive")
PRIME = 2097143  # largest prime below 2^21: products < 2^42, so float64 sums of 2^11 of them are exact


# ---------------------------------------------------------------------------------------------
# Counting


def _check_sizes(activation: str, d: int, n: int, depth: int) -> str:
    name = activations.get(activation).name
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    for arg, v in (("d", d), ("n", n), ("depth", depth)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{arg} must be a positive integer, got {v!r}")
    if n < d:
        raise ValueError(f"n must be >= d for the gauge count (V_down full row rank), got n={n} < d={d}")
    return name


def param_count(d: int, n: int, depth: int) -> int:
    """``P = 2 L n d``: the weights of a depth-``L`` stack of width ``n`` on ``R^d``."""
    return 2 * depth * n * d


def free_bound(activation: str, d: int, n: int, depth: int) -> int:
    """Upper bound (proved) on the functional dimension of free stacks:
    ``2Lnd − (L−1)d²``, minus ``nL`` for ReLU.

    Examples:
      >>> free_bound("gelu", 2, 2, 2), free_bound("relu", 3, 6, 2)
      (12, 51)
    """
    name = _check_sizes(activation, d, n, depth)
    return param_count(d, n, depth) - (depth - 1) * d * d - (n * depth if name == "relu" else 0)


def residual_max(activation: str, d: int, n: int, depth: int) -> int:
    """The largest functional dimension a residual stack can have: ``P``, minus ``nL`` for ReLU
    (the positive rescalings of each unit survive the skip; the junction gauge does not)."""
    name = _check_sizes(activation, d, n, depth)
    return param_count(d, n, depth) - (n * depth if name == "relu" else 0)


# ---------------------------------------------------------------------------------------------
# The point


class RationalPoint(NamedTuple):
    """A stack with rational weights and rational inputs, exact in float64 too.

    Attributes:
      up: integer numerators of ``W_up^ℓ``, ``(L, n, d)``.
      down: integer numerators of ``W_down^ℓ``, ``(L, d, n)``.
      inputs: integer numerators of the probe inputs / directions ``x_k``, ``(K, d)``.
      denominator: the common denominator ``Q = 2^s`` (so every value is a dyadic rational and
        the float64 weights are exactly the rational ones).
    """

    up: np.ndarray
    down: np.ndarray
    inputs: np.ndarray
    denominator: int

    def params(self, dtype=None) -> models.MLPParams:
        """The weights as floats (exact in float64): ``MLPParams(up (L,n,d), down (L,d,n))``."""
        q = float(self.denominator)
        return models.MLPParams(jnp.asarray(self.up / q, dtype), jnp.asarray(self.down / q, dtype))

    def xs(self, dtype=None) -> jax.Array:
        """The probe inputs as floats, ``(K, d)``."""
        return jnp.asarray(self.inputs / float(self.denominator), dtype)


def rational_point(key: jax.Array, d: int, n: int, depth: int, *, inputs: int, denominator: int = 256,
                   weights: models.MLPParams | None = None) -> RationalPoint:
    """Gaussian weights (variance ``1/fan_in``) and standard Gaussian inputs rounded to multiples of
    ``1/denominator``; the inputs are a prefix-stable stream (``inputs=K`` is a prefix of ``inputs=2K``).

    Args:
      key: PRNG key; its data seeds NumPy generators (weights, then inputs).
      d, n, depth: ``d``, width ``n``, depth ``L``.
      inputs: number ``K`` of probe inputs.
      denominator: a power of two ``Q``.
      weights: round these ``MLPParams`` (``(L,n,d)``, ``(L,d,n)``) instead of drawing new ones.

    Examples:
      >>> pt = rational_point(jax.random.key(0), 2, 4, 3, inputs=5)
      >>> pt.up.shape, pt.down.shape, pt.inputs.shape, pt.denominator
      ((3, 4, 2), (3, 2, 4), (5, 2), 256)
    """
    if not isinstance(denominator, (int, np.integer)) or denominator < 1 or denominator & (denominator - 1):
        raise ValueError(f"denominator must be a power of two, got {denominator!r}")
    if not isinstance(inputs, (int, np.integer)) or inputs < 1:
        raise ValueError(f"inputs must be a positive integer, got {inputs!r}")
    for arg, v in (("d", d), ("n", n), ("depth", depth)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{arg} must be a positive integer, got {v!r}")
    # NumPy's generator seeded by the key's data: exact, and no compilation per draw.
    typed = jnp.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key) if typed else key).ravel().tolist())
    if weights is None:
        up = rng.standard_normal((depth, n, d)) / math.sqrt(d)
        down = rng.standard_normal((depth, d, n)) / math.sqrt(n)
    else:
        if np.shape(weights.up) != (depth, n, d) or np.shape(weights.down) != (depth, d, n):
            raise ValueError(f"weights must have up ({depth}, {n}, {d}) and down ({depth}, {d}, {n}), "
                             f"got {np.shape(weights.up)} and {np.shape(weights.down)}")
        up, down = np.asarray(weights.up, np.float64), np.asarray(weights.down, np.float64)
    xs = np.random.default_rng([*rng.bit_generator.seed_seq.entropy, 1]).standard_normal((inputs, d))
    q = int(denominator)
    return RationalPoint(*(np.rint(np.asarray(a, np.float64) * q).astype(np.int64) for a in (up, down, xs)), q)


# ---------------------------------------------------------------------------------------------
# Float rank


class FloatRank(NamedTuple):
    """Numerical rank of the Jacobian of weights ↦ outputs on the probe inputs (float64 SVD).

    ``rank`` counts singular values above ``tol = max(rows, cols) · eps · s_max``; ``gap`` is
    ``s_rank / max(s_{rank+1}, tol)`` (with ``s_{rank+1} = 0`` at full column rank): a large gap
    makes the numerical rank believable, a small one says the float answer is not sharp.
    """

    rank: int
    singular: np.ndarray
    tol: float
    gap: float
    rows: int
    cols: int


def float_rank(point: RationalPoint, activation: str, *, residual: bool = True) -> FloatRank:
    """Float64 rank of ``J = ∂(f_W(x_1), …, f_W(x_K)) / ∂W`` at ``point`` (``jax.jacfwd``, SVD).

    Needs float64 (``jax.config.update("jax_enable_x64", True)`` or ``jax.enable_x64``); absorbjax
    does not switch it on.

    Examples:
      >>> with jax.enable_x64(True):
      ...     fr = float_rank(rational_point(jax.random.key(0), 2, 2, 2, inputs=24), "gelu")
      >>> fr.rank, fr.gap > 1e3
      (16, True)
    """
    name = activations.get(activation).name
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if not jax.config.jax_enable_x64:
        raise ValueError("float_rank needs float64: enable it with jax.enable_x64(True) or "
                         "jax.config.update('jax_enable_x64', True)")
    params, xs = point.params(jnp.float64), point.xs(jnp.float64)
    flat, unravel = ravel_pytree(params)

    def outputs(w):
        p = unravel(w)
        return jax.vmap(lambda x: models.stack(p, x, name, residual=residual))(xs).ravel()

    J = jax.jit(jax.jacfwd(outputs))(flat)
    s = np.asarray(jnp.linalg.svd(J, compute_uv=False))
    rows, cols = J.shape
    tol = max(rows, cols) * np.finfo(np.float64).eps * (s[0] if s.size else 0.0)
    rank = int(np.sum(s > tol))
    below = s[rank] if rank < s.size else 0.0
    gap = float(s[rank - 1] / max(below, tol)) if rank > 0 and tol > 0 else math.inf
    return FloatRank(rank, s, float(tol), gap, rows, cols)


# ---------------------------------------------------------------------------------------------
# Exact rank: forward-mode over truncated power series, modulo a prime


def gelu_taylor(order: int) -> list[tuple[int, int, int, int]]:
    """GELU's Taylor coefficients at 0 up to ``z^order``: ``GELU(z) = z/2 + c Σ_j a_j z^j`` with
    ``c = 1/√(2π)`` and rational ``a_{2k+2} = (−1)^k / (2^k k! (2k+1))``.

    Returns ``(power, has_c, numerator, denominator)`` per nonzero term.

    Examples:
      >>> gelu_taylor(6)
      [(1, 0, 1, 2), (2, 1, 1, 1), (4, 1, -1, 6), (6, 1, 1, 40)]
    """
    terms = [(1, 0, 1, 2)]
    k = 0
    while 2 * k + 2 <= order:
        terms.append((2 * k + 2, 1, (-1) ** k, 2**k * math.factorial(k) * (2 * k + 1)))
        k += 1
    return terms


def _mul(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """Truncated power-series product mod ``p`` along axis ``-2`` (broadcast on the others).

    Arrays hold integers ``< p < 2^21`` in float64: products stay below ``2^42`` and are exact."""
    T = a.shape[-2]
    out = np.zeros(np.broadcast_shapes(a.shape, b.shape))
    for i in range(T):
        if not a[..., i, :].any():
            continue
        for j in range(T - i):
            out[..., i + j, :] += np.fmod(a[..., i, :] * b[..., j, :], p)
    return np.fmod(out, p)


def _gelu_series(h: np.ndarray, p: int, c0: int) -> tuple[np.ndarray, np.ndarray]:
    """``σ(h)`` and ``σ'(h)`` as truncated series mod ``p`` along axis ``-2`` (``h`` has zero
    constant term, so powers up to the truncation order suffice)."""
    order = h.shape[-2] - 1
    one = np.zeros_like(h)
    one[..., 0, :] = 1
    powers = [one, h]
    for _ in range(2, order + 1):
        powers.append(_mul(powers[-1], h, p))
    val = np.zeros_like(h)
    der = np.zeros_like(h)
    for power, has_c, num, den in gelu_taylor(order):
        coef = num % p * pow(den, p - 2, p) % p
        if has_c:
            coef = coef * c0 % p
        val = np.fmod(val + np.fmod(coef * powers[power], p), p)
        der = np.fmod(der + np.fmod(coef * power % p * powers[power - 1], p), p)
    return val, der


def _matmul(x: np.ndarray, m: np.ndarray, p: int) -> np.ndarray:
    """``x @ m`` mod ``p`` over the last axis, one float64 GEMM (exact: every sum of products stays
    below ``2^53`` while the summed axis is at most ``2^11``)."""
    return np.fmod((x.reshape(-1, x.shape[-1]) @ m).reshape(*x.shape[:-1], m.shape[1]), p)


def _forward_jacobian(point: RationalPoint, residual: bool, order: int, p: int, c0: int,
                      masks: list[np.ndarray] | None, chunk: int) -> np.ndarray:
    """Rows ``(K·d·order, P)``: ``∂/∂W`` of the Taylor coefficients of ``t ↦ f(t x_k)`` (orders
    1..``order``) mod ``p``; for ReLU (``masks`` given) the one coefficient is ``f(x_k)`` (a ReLU
    stack is positively homogeneous: ``f(t x) = t f(x)``). Columns follow
    ``ravel_pytree(MLPParams(up, down))``. Layout: values ``(K, T, d)``, tangents ``(K, P, T, d)``."""
    L, n, d = point.up.shape
    if max(n, d) > 2**11:
        raise ValueError(f"exact ranks need n, d <= 2048 (exact float64 sums), got n={n}, d={d}")
    qinv = pow(int(point.denominator), p - 2, p)
    up = (point.up % p * qinv % p).astype(np.float64)
    down = (point.down % p * qinv % p).astype(np.float64)
    xs = (point.inputs % p * qinv % p).astype(np.float64)
    P = param_count(d, n, L)
    T = 1 if masks is not None else order + 1
    first = 0 if masks is not None else 1  # index of the t^1 coefficient
    blocks = []
    for start in range(0, xs.shape[0], chunk):
        x = xs[start:start + chunk]
        K = x.shape[0]
        z = np.zeros((K, T, d))
        z[:, first, :] = x
        dz = np.zeros((K, P, T, d))
        for l in range(L):
            U, D = up[l], down[l]
            ii, jj = np.meshgrid(np.arange(n), np.arange(d), indexing="ij")
            ucols = l * n * d + ii * d + jj
            h = _matmul(z, U.T, p)  # (K, T, n)
            dh = _matmul(dz, U.T, p)  # (K, P, T, n)
            dh[:, ucols.ravel(), :, ii.ravel()] += z[:, :, jj.ravel()].transpose(2, 0, 1)
            dh = np.fmod(dh, p)
            if masks is None:
                a, da_dh = _gelu_series(h, p, c0)
                da = _mul(da_dh[:, None], dh, p)
            else:
                m = masks[l][start:start + chunk].astype(np.float64)  # (K, n)
                a = h * m[:, None, :]
                da = dh * m[:, None, None, :]
            out = _matmul(a, D.T, p)  # (K, T, d)
            dout = _matmul(da, D.T, p)  # (K, P, T, d)
            ii, jj = np.meshgrid(np.arange(d), np.arange(n), indexing="ij")
            dcols = L * n * d + l * d * n + ii * n + jj
            dout[:, dcols.ravel(), :, ii.ravel()] += a[:, :, jj.ravel()].transpose(2, 0, 1)
            dout = np.fmod(dout, p)
            z, dz = (np.fmod(z + out, p), np.fmod(dz + dout, p)) if residual else (out, dout)
        # (K, P, T, d) -> rows (K, d, orders 1..order), columns P
        blocks.append(np.transpose(dz[:, :, first:, :], (0, 3, 2, 1)).reshape(-1, P))
    return np.concatenate(blocks).astype(np.int64) if blocks else np.zeros((0, P), np.int64)


def _relu_masks(point: RationalPoint, residual: bool) -> tuple[list[np.ndarray], np.ndarray]:
    """Exact activation patterns ``(K, n)`` per layer at the rational point (Python integers), and
    which inputs sit on a kink (some pre-activation exactly 0)."""
    L, n, d = point.up.shape
    q = int(point.denominator)
    up = point.up.astype(object)
    down = point.down.astype(object)
    z = point.inputs.astype(object).T  # numerators of z, denominator q^(1 + 2l)
    masks, on_kink = [], np.zeros(point.inputs.shape[0], bool)
    for l in range(L):
        h = up[l].dot(z)  # (n, K), denominator scaled by q
        on_kink |= np.any(h == 0, axis=0)
        m = np.vectorize(lambda v: v > 0, otypes=[bool])(h)
        masks.append(m.T)
        out = down[l].dot(h * m)  # denominator scaled by q^2
        z = z * q * q + out if residual else out
    return masks, on_kink


class ExactRank(NamedTuple):
    """A rank computed modulo a prime: a lower bound on the real rank (see the module docstring).

    Attributes:
      rank: rank over ``F_p`` of the probe Jacobian (restricted to ``subfamily`` when given).
      rows, cols: its shape.
      prime: ``p``.
      residue: ``c_0`` standing in for ``c = 1/√(2π)`` (GELU), else ``None``.
      order: jet order ``k`` (GELU), ``1`` for ReLU values.
      inputs: probe inputs used; ``dropped``: inputs discarded because they sit on a kink (ReLU).
      seconds: wall time.
    """

    rank: int
    rows: int
    cols: int
    prime: int
    residue: int | None
    order: int
    inputs: int
    dropped: int
    seconds: float


def _modular_rank(M: np.ndarray, p: int) -> int:
    import flint

    if M.size == 0:
        return 0
    return flint.nmod_mat(M.shape[0], M.shape[1], (M % p).ravel().tolist(), p).rank()


def exact_rank(point: RationalPoint, activation: str, *, residual: bool = True, order: int | None = None,
               prime: int = PRIME, residue: int | None = None, subfamily: np.ndarray | None = None,
               chunk: int = 16) -> ExactRank:
    """Rank mod ``prime`` of the probe Jacobian at ``point``: a certified lower bound on the rank
    over ``R`` (module docstring, step 2).

    Args:
      point: a :class:`RationalPoint` (weights and probe inputs / jet directions).
      activation: ``"gelu"`` (Taylor coefficients of ``t ↦ f(t x_k)`` up to ``t^order``) or
        ``"relu"`` (values ``f(x_k)``; inputs on a kink, checked exactly, are dropped).
      residual: residual stack (``True``) or free stack.
      order: jet order ``k`` for GELU (default 4); ignored for ReLU.
      prime: an odd prime ``p < 2^21`` (sums of products must stay exact in float64).
      residue: ``c_0`` for GELU (default: derived from the point, so reruns agree).
      subfamily: integer matrix ``B`` ``(P, m)``: the rank of ``J B`` (the affine family
        ``W_0 + B θ``).
      chunk: inputs per vectorised pass (memory ``∝ chunk · P · n · k``).

    Examples:
      >>> pt = rational_point(jax.random.key(0), 2, 2, 2, inputs=4)
      >>> exact_rank(pt, "gelu", order=5).rank, exact_rank(pt, "gelu", order=5, residual=False).rank
      (16, 12)
    """
    start = time.perf_counter()
    name = activations.get(activation).name
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if not isinstance(prime, (int, np.integer)) or not 3 <= prime < 2**21:
        raise ValueError(f"prime must be an odd prime below 2^21, got {prime!r}")
    import flint

    if not flint.fmpz(int(prime)).is_prime():
        raise ValueError(f"prime must be prime, got {prime}")
    L, n, d = point.up.shape
    P = param_count(d, n, L)
    if subfamily is not None:
        subfamily = np.asarray(subfamily)
        if subfamily.ndim != 2 or subfamily.shape[0] != P or not np.issubdtype(subfamily.dtype, np.integer):
            raise ValueError(f"subfamily must be an integer matrix of shape ({P}, m), got {subfamily.shape} "
                             f"{subfamily.dtype}")
    p = int(prime)
    dropped = 0
    if name == "gelu":
        order = 4 if order is None else order
        if not isinstance(order, (int, np.integer)) or order < 1:
            raise ValueError(f"order must be a positive integer, got {order!r}")
        if residue is None:
            residue = 2 + int(np.abs(point.up).sum() * 7919 + np.abs(point.down).sum() * 104729) % (p - 3)
        M = _forward_jacobian(point, residual, int(order), p, int(residue) % p, None, chunk)
    else:
        order, residue = 1, None
        masks, on_kink = _relu_masks(point, residual)
        dropped = int(on_kink.sum())
        keep = ~on_kink
        point = point._replace(inputs=point.inputs[keep])
        masks = [m[keep] for m in masks]
        M = _forward_jacobian(point, residual, 1, p, 0, masks, chunk)
    if subfamily is not None:
        import flint

        Mf = flint.nmod_mat(M.shape[0], M.shape[1], M.ravel().tolist(), p)
        Bf = flint.nmod_mat(P, subfamily.shape[1], (subfamily % p).ravel().tolist(), p)
        rank = (Mf * Bf).rank()
        cols = subfamily.shape[1]
    else:
        rank, cols = _modular_rank(M, p), P
    return ExactRank(int(rank), M.shape[0], cols, p, residue, int(order), int(point.inputs.shape[0]), dropped,
                     time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------
# Narrow width (step 5)


def narrow_invertible(point: RationalPoint) -> bool:
    """Whether every layer has ``det(I + W_down[:,S] W_up[S,:]) ≠ 0`` for all ``S ⊆ [n]``, checked
    exactly (rational determinants); then the residual ReLU stack's Jacobian is invertible on every
    linear region (module docstring, step 5). Enumerates ``2^n`` subsets: ``n ≤ 16``.

    Examples:
      >>> narrow_invertible(rational_point(jax.random.key(0), 3, 3, 2, inputs=1))
      True
    """
    import itertools

    import flint

    L, n, d = point.up.shape
    if n > 16:
        raise ValueError(f"narrow_invertible enumerates 2^n subsets; n must be <= 16, got {n}")
    q = int(point.denominator)
    for l in range(L):
        # det(I + D_S U_S) = det(q² I + D_num,S U_num,S) / q^{2d}: an integer determinant.
        outer = [flint.fmpz_mat(d, d, (np.outer(point.down[l][:, i], point.up[l][i]).astype(object)).ravel().tolist())
                 for i in range(n)]
        base = flint.fmpz_mat(d, d, (q * q * np.eye(d, dtype=np.int64)).astype(object).ravel().tolist())
        for size in range(1, n + 1):
            for S in itertools.combinations(range(n), size):
                m = base
                for i in S:
                    m = m + outer[i]
                if m.det() == 0:
                    return False
    return True


# ---------------------------------------------------------------------------------------------
# Certificate


def _fmt(x) -> str:
    return "n/a" if x is None else (f"{x:.3g}" if isinstance(x, float) else str(x))


@dataclasses.dataclass(frozen=True, eq=False)
class DepthCertificate:
    """Whether residual stacks of one size are generically disjoint from free stacks of the same size.

    Attributes:
      status: ``"certified_disjoint"`` (proved, with ``scope``) or ``"inconclusive"`` (nothing is
        claimed; ``reason`` says why).
      method: which argument decided: ``"rank"`` (module docstring, steps 1–4), ``"narrow"``
        (step 5, ReLU; step 6 for GELU) or ``"none"``.
      reason: one sentence.
      scope: the weights the conclusion covers.
      activation, d, n, depth: the size; ``residual``: which family was counted (``False`` only
        as a control: a free family can never exceed its own bound).
      params: ``P = 2Lnd`` (or the subfamily's dimension ``m``).
      rank: exact rank mod ``prime`` at the point: a lower bound on the family's functional
        dimension (``probes``: what was differentiated).
      free_bound: ``b``, the proved upper bound on the free family's functional dimension.
      maximum: the family's largest possible rank (``P``, ``− nL`` for ReLU).
      narrow: for ``n < 2d``, whether ``det(I + W_down[:,S] W_up[S,:]) ≠ 0`` held exactly for every
        layer and ``S``; ``None`` when not checked.
      prime, residue, order, inputs, dropped: how the exact rank was computed (see :class:`ExactRank`).
      point: the rational point: ``up``/``down``/``inputs`` numerators over ``denominator``.
      float_rank, float_gap: the float64 SVD rank at the same point and inputs and its gap
        (``None`` when not run).
      seconds: wall time.
    """

    status: str
    method: str
    reason: str
    scope: str
    activation: str
    d: int
    n: int
    depth: int
    residual: bool
    params: int
    rank: int
    free_bound: int
    maximum: int
    narrow: bool | None
    probes: str
    prime: int
    residue: int | None
    order: int
    inputs: int
    dropped: int
    point: RationalPoint
    float_rank: int | None = None
    float_gap: float | None = None
    seconds: float = 0.0

    @property
    def certified(self) -> bool:
        return self.status == "certified_disjoint"

    def summary(self) -> str:
        fam = "residual" if self.residual else "free (control)"
        lines = [
            f"{self.status}  [method: {self.method}]  {self.reason}",
            f"  {self.activation} d={self.d} n={self.n} L={self.depth}: {fam} family rank >= {self.rank} "
            f"(exact mod p={self.prime}; of {self.params} parameters, max {self.maximum}) vs free bound "
            f"b = {self.free_bound}",
            f"  probes: {self.probes}; {self.inputs} inputs ({self.dropped} on a kink dropped)"
            + (f"; c -> residue {self.residue}" if self.residue is not None else ""),
            f"  point: rational weights over {self.point.denominator} (numerators stored in the certificate)",
            f"  float64 SVD at the same point: rank {_fmt(self.float_rank)}, gap {_fmt(self.float_gap)}",
        ]
        if self.narrow is not None:
            lines.append(f"  n < 2d: det(I + W_down[:,S] W_up[S,:]) != 0 for every layer and S: {self.narrow}")
        lines.append(f"  scope: {self.scope}")
        lines.append(f"  {self.seconds:.3g} s")
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values."""
        out = {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["point"] = to_jsonable(self.point._asdict())
        return out


def _default_inputs(name: str, d: int, n: int, depth: int, order: int) -> int:
    target = param_count(d, n, depth)
    if name == "relu":
        return max(8, math.ceil(2 * target / d))
    return max(2, math.ceil(1.5 * target / (d * order)) + 2)


def _default_order(d: int, P: int) -> int:
    """Smallest jet order whose jet space (``d · (C(d+k, k) − 1)`` coefficients) holds ``1.5 P``."""
    k = 1
    while d * (math.comb(d + k, k) - 1) < 1.5 * P:
        k += 1
    return k + 1


def certify(activation: str, d: int, n: int, depth: int, *, key: jax.Array, residual: bool = True,
            order: int | None = None, inputs: int | None = None, denominator: int = 256,
            prime: int = PRIME, float_check: bool = True, subfamily: np.ndarray | None = None,
            weights: models.MLPParams | None = None, max_order: int | None = None) -> DepthCertificate:
    """Certify (or not) that almost all residual stacks of this size are reproduced by no free
    stack of the same width and depth.

    Computes the exact rank of the probe Jacobian at a rational point drawn from ``key`` and
    compares it with :func:`free_bound`; for ``n < 2d`` also checks the narrow-width condition
    exactly. For GELU the jet order grows (up to ``max_order``, default ``order + 4``) until the
    rank reaches the family's maximum or stops growing.

    Args:
      activation: ``"relu"`` or ``"gelu"``.
      d, n, depth: the size (``n ≥ d``).
      key: PRNG key of the point (:func:`rational_point`).
      residual: ``False`` counts the free family instead (a control: never certified).
      order: first GELU jet order (default: the smallest whose jet space holds ``1.5 P``).
      inputs: probe inputs / jet directions (default: about ``1.5 P`` rows for GELU, ``2 P / d``
        inputs for ReLU).
      denominator: power of two, the weights' and inputs' denominator.
      prime: modulus of the exact rank.
      float_check: also compute the float64 SVD rank at the same point (needs float64).
      subfamily: integer ``(P, m)`` matrix ``B``: certify the affine family ``W_0 + B θ``.
      weights: round these ``MLPParams`` (leading ``L`` axis) instead of drawing the point.
      max_order: largest GELU jet order tried.

    Examples:
      >>> cert = certify("gelu", 2, 2, 2, key=jax.random.key(0), float_check=False)
      >>> cert.status, cert.rank, cert.free_bound
      ('certified_disjoint', 16, 12)
      >>> certify("gelu", 2, 4, 1, key=jax.random.key(0), float_check=False).status
      'inconclusive'
    """
    start = time.perf_counter()
    name = _check_sizes(activation, d, n, depth)
    P = param_count(d, n, depth)
    bound = free_bound(name, d, n, depth)
    maximum = residual_max(name, d, n, depth) if residual else bound
    if subfamily is not None:
        if np.ndim(subfamily) != 2:
            raise ValueError(f"subfamily must be an integer matrix of shape ({P}, m), got {np.shape(subfamily)}")
        P = np.shape(subfamily)[1]
        maximum = min(maximum, P)
    if name == "gelu":
        order = _default_order(d, P) if order is None else order
        max_order = order + 4 if max_order is None else max_order
    else:
        order = 1
    k_inputs = inputs if inputs is not None else _default_inputs(name, d, n, depth, order)
    # The float check needs K d >= P outputs; the jets use the first k_inputs directions.
    k_float = max(k_inputs, math.ceil(2 * param_count(d, n, depth) / d)) if float_check else k_inputs
    full = rational_point(key, d, n, depth, inputs=k_float, denominator=denominator, weights=weights)
    point = full._replace(inputs=full.inputs[:k_inputs])

    best = exact_rank(point, name, residual=residual, order=order, prime=prime, subfamily=subfamily)
    while name == "gelu" and best.rank < maximum and best.order < max_order:
        step = best.order + 2
        nxt = exact_rank(point, name, residual=residual, order=step, prime=prime, subfamily=subfamily)
        if nxt.rank <= best.rank:
            best = nxt if nxt.rank == best.rank else best
            break
        best = nxt

    narrow = None
    if n < 2 * d and residual and subfamily is None:
        narrow = narrow_invertible(point)

    fr = float_rank(full, name, residual=residual) if float_check and subfamily is None else None

    if name == "gelu":
        probes = f"Taylor coefficients of t -> f(t x_k) at t = 0, orders 1..{best.order}"
        rank_scope = ("almost all weights (a proper algebraic subset excepted: the jets are polynomials in "
                      "the weights)")
    else:
        probes = "values f(x_k) at rational inputs off every kink (checked exactly)"
        rank_scope = ("almost all weights in the open region around the point where every probe input keeps "
                      "its activation pattern (ReLU's functional dimension varies across weight space)")
    if subfamily is not None:
        rank_scope = f"almost all theta of the affine family W_0 + B theta ({P} parameters)"
    if not residual:
        status, method = "inconclusive", "none"
        reason = (f"a free family has rank {best.rank} <= its bound {bound}; nothing to certify (control)"
                  if best.rank <= bound else
                  f"free family rank {best.rank} EXCEEDS the proved bound {bound}: the count is wrong")
        scope = "nothing is claimed"
    elif best.rank > bound:
        status, method, scope = "certified_disjoint", "rank", rank_scope
        reason = (f"the residual family's functional dimension is at least {best.rank} (exact), above the free "
                  f"bound {bound}: residual stacks that a free stack reproduces have measure zero")
    elif narrow:
        status, method = "certified_disjoint", "narrow"
        scope = ("almost all weights: every residual stack whose layers have det(I + W_down[:,S] W_up[S,:]) != 0 "
                 "for all S (verified exactly at this point)" + ("; GELU via the GELU -> ReLU limit"
                                                                   if name == "gelu" else ""))
        reason = (f"n = {n} < 2d = {2 * d}: a free stack's Jacobian is singular on an open set, the residual "
                  f"stack's is invertible on every linear region (rank count {best.rank} vs bound {bound} alone "
                  f"would not decide)")
    else:
        status, method, scope = "inconclusive", "none", "nothing is claimed"
        why = ("depth 1: the gauge count has no gap" if depth == 1 else
               f"exact rank {best.rank} does not exceed the free bound {bound}")
        reason = f"{why}; a larger rank may exist at other points, orders or inputs, or the families may meet"
    return DepthCertificate(
        status, method, reason, scope, name, d, n, depth, residual, P,
        best.rank, bound, maximum, narrow, probes, best.prime, best.residue, best.order, best.inputs,
        best.dropped, point, None if fr is None else fr.rank, None if fr is None else fr.gap,
        time.perf_counter() - start)
