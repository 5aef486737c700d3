"""Ranks of the probe Jacobian: float64 SVD (evidence) and exact ranks modulo a prime (proof).

The exact rank is a lower bound on the real rank of the probe Jacobian at a rational point
(``docs/theory/depth.md``, step 2): every entry is produced by ring operations on exact data, so the
modular matrix is the image of the true one under a ring homomorphism, and a minor nonzero mod
``p`` is nonzero over ``Q[c]``. For that the prime must exceed the GELU jet order (every Taylor
denominator ``2^k k! (2k+1)`` a unit mod ``p``): :func:`exact_rank` refuses smaller primes.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import NamedTuple

import flint
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from absorbjax import activations, models
from absorbjax.dimension._counts import ACTIVATIONS, PRIME, param_count
from absorbjax.dimension._options import check_count, check_jet_order, check_prime
from absorbjax.dimension._points import RationalPoint

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
    With biases (``point.bias``) the blocks of :mod:`absorbjax.models` are composed with their
    ``bias`` argument and ``β``, ``γ`` are differentiated too: a path independent of the exact one.

    Needs float64 (``jax.config.update("jax_enable_x64", True)`` or ``jax.enable_x64``); absorbjax
    does not switch it on.

    Examples:
      >>> from absorbjax.dimension import rational_point
      >>> with jax.enable_x64(True):
      ...     fr = float_rank(rational_point(2, 2, 2, key=jax.random.key(0), inputs=24), "gelu")
      >>> fr.rank, fr.gap > 1e3
      (16, True)
    """
    name = activations.get(activation).name
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if not jax.config.jax_enable_x64:
        raise ValueError(
            "float_rank needs float64: enable it with jax.enable_x64(True) or jax.config.update('jax_enable_x64', True)"
        )
    params, xs = point.params(jnp.float64), point.xs(jnp.float64)
    if point.bias:  # columns (up, down, β, γ), as in forward_jacobian; the blocks of models, layer by layer
        q = float(point.denominator)
        params = (params, jnp.asarray(point.hidden_bias / q), jnp.asarray(point.out_bias / q))
    flat, unravel = ravel_pytree(params)

    def one(p, x):
        if not point.bias:
            return models.stack(p, x, name, residual=residual)
        weights, beta, gamma = p
        block = models.skip_mlp if residual else models.mlp
        for layer in range(beta.shape[0]):
            w = models.MLPParams(weights.up[layer], weights.down[layer])
            x = block(w, x, name, bias={"up": beta[layer], "down": gamma[layer]})
        return x

    def outputs(w):
        p = unravel(w)
        return jax.vmap(lambda x: one(p, x))(xs).ravel()

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


def forward_jacobian(
    point: RationalPoint, residual: bool, order: int, p: int, c0: int, masks: list[np.ndarray] | None, chunk: int
) -> np.ndarray:
    """Rows ``(K·d·order, P)``: ``∂/∂W`` of the Taylor coefficients of ``t ↦ f(t x_k)`` (orders
    1..``order``; 0..``order`` with biases) mod ``p``; for ReLU (``masks`` given) the one
    coefficient is ``f(x_k)`` (without biases a ReLU stack is positively homogeneous:
    ``f(t x) = t f(x)``). Columns follow ``ravel_pytree(MLPParams(up, down))``, then with biases
    ``β`` ``(L, n)`` and ``γ`` ``(L, d)``. Layout: values ``(K, T, d)``, tangents ``(K, P, T, d)``.

    GELU jets are polynomial only at points with zero biases (pre-activations with zero constant
    term); a GELU point with a nonzero bias is refused."""
    L, n, d = point.up.shape
    if max(n, d) > 2**11:
        raise ValueError(f"exact ranks need n, d <= 2048 (exact float64 sums), got n={n}, d={d}")
    bias = point.bias
    if bias and masks is None and (np.any(point.hidden_bias != 0) or np.any(point.out_bias != 0)):
        raise ValueError("GELU jets need zero biases at the point (bias='zero'): the series is taken at 0")
    qinv = pow(int(point.denominator), p - 2, p)

    def mod(a):
        return (np.asarray(a) % p * qinv % p).astype(np.float64)

    up, down, xs = mod(point.up), mod(point.down), mod(point.inputs)
    beta, gamma = (mod(point.hidden_bias), mod(point.out_bias)) if bias else (None, None)
    P0 = param_count(d, n, L)
    P = param_count(d, n, L, bias=bias)
    T = 1 if masks is not None else order + 1
    first = 0 if masks is not None or bias else 1  # first coefficient kept (t^1, or t^0 with biases)
    blocks = []
    for start in range(0, xs.shape[0], chunk):
        x = xs[start : start + chunk]
        K = x.shape[0]
        z = np.zeros((K, T, d))
        z[:, 0 if masks is not None else 1, :] = x  # x t: the t^1 coefficient (ReLU: the value)
        dz = np.zeros((K, P, T, d))
        for layer in range(L):
            U, D = up[layer], down[layer]
            ii, jj = np.meshgrid(np.arange(n), np.arange(d), indexing="ij")
            ucols = layer * n * d + ii * d + jj
            h = _matmul(z, U.T, p)  # (K, T, n)
            dh = _matmul(dz, U.T, p)  # (K, P, T, n)
            dh[:, ucols.ravel(), :, ii.ravel()] += z[:, :, jj.ravel()].transpose(2, 0, 1)
            if bias:  # ∂h_i/∂β_i = 1, a constant (t^0) coefficient
                h[:, 0, :] = np.fmod(h[:, 0, :] + beta[layer], p)
                dh[:, P0 + layer * n + np.arange(n), 0, np.arange(n)] += 1
            dh = np.fmod(dh, p)
            if masks is None:
                a, da_dh = _gelu_series(h, p, c0)
                da = _mul(da_dh[:, None], dh, p)
            else:
                m = masks[layer][start : start + chunk].astype(np.float64)  # (K, n)
                a = h * m[:, None, :]
                da = dh * m[:, None, None, :]
            out = _matmul(a, D.T, p)  # (K, T, d)
            dout = _matmul(da, D.T, p)  # (K, P, T, d)
            ii, jj = np.meshgrid(np.arange(d), np.arange(n), indexing="ij")
            dcols = L * n * d + layer * d * n + ii * n + jj
            dout[:, dcols.ravel(), :, ii.ravel()] += a[:, :, jj.ravel()].transpose(2, 0, 1)
            if bias:  # ∂out_j/∂γ_j = 1
                out[:, 0, :] = np.fmod(out[:, 0, :] + gamma[layer], p)
                dout[:, P0 + L * n + layer * d + np.arange(d), 0, np.arange(d)] += 1
            dout = np.fmod(dout, p)
            z, dz = (np.fmod(z + out, p), np.fmod(dz + dout, p)) if residual else (out, dout)
        # (K, P, T, d) -> rows (K, d, orders 1..order), columns P
        blocks.append(np.transpose(dz[:, :, first:, :], (0, 3, 2, 1)).reshape(-1, P))
    return np.concatenate(blocks).astype(np.int64) if blocks else np.zeros((0, P), np.int64)


def relu_masks(point: RationalPoint, residual: bool) -> tuple[list[np.ndarray], np.ndarray]:
    """Exact activation patterns ``(K, n)`` per layer at the rational point (Python integers), and
    which inputs sit on a kink (some pre-activation exactly 0)."""
    L = point.up.shape[0]
    q = int(point.denominator)
    up = point.up.astype(object)
    down = point.down.astype(object)
    z = point.inputs.astype(object).T  # numerators of z, denominator q^(1 + 2l)
    masks, on_kink = [], np.zeros(point.inputs.shape[0], bool)
    for layer in range(L):
        h = up[layer].dot(z)  # (n, K), denominator scaled by q
        if point.bias:  # β / q = β q^(1+2l) / q^(2+2l)
            h = h + point.hidden_bias[layer].astype(object)[:, None] * q ** (1 + 2 * layer)
        on_kink |= np.any(h == 0, axis=0)
        m = np.vectorize(lambda v: v > 0, otypes=[bool])(h)
        masks.append(m.T)
        out = down[layer].dot(h * m)  # denominator scaled by q^2
        if point.bias:  # γ / q = γ q^(2+2l) / q^(3+2l)
            out = out + point.out_bias[layer].astype(object)[:, None] * q ** (2 + 2 * layer)
        z = z * q * q + out if residual else out
    return masks, on_kink


class ExactRank(NamedTuple):
    """A rank computed modulo a prime: a lower bound on the real rank (``docs/theory/depth.md``, step 2).

    Attributes:
      rank: rank over ``F_p`` of the probe Jacobian (restricted to ``subfamily`` when given).
      rows, cols: its shape.
      prime: ``p``.
      residue: ``c_0`` standing in for ``c = 1/√(2π)`` (GELU), else ``None``.
      order: jet order ``k`` (GELU), ``1`` for ReLU values.
      inputs: probe inputs used; ``dropped``: inputs discarded because they sit on a kink (ReLU).
      seconds: wall time.
      minor: ``(rows, cols)`` of an ``r × r`` submatrix nonsingular mod ``prime`` (``r = rank``), the
        evidence that :func:`absorbjax.verify` checks: each row a triple ``(k, a, j)``, output ``a`` of
        input ``k`` of the point (before kink inputs are dropped), coefficient of ``t^j`` of
        ``f(t x_k)`` (GELU; ReLU: ``j = 0``, the value ``f(x_k)``); each column a parameter index in
        the order of ``ravel_pytree(MLPParams(up, down))``, then ``β``, ``γ``; with a ``subfamily``
        ``B``, a minor of ``J B``, its columns coordinates of ``θ`` (columns of ``B``).
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
    minor: tuple | None = None


def _pivots(M: flint.nmod_mat) -> list[int]:
    """The pivot columns of ``M``'s reduced row echelon form (independent columns, first ones first)."""
    R, rank = M.rref()
    cols, j = [], 0
    for i in range(rank):
        while R[i, j] == 0:
            j += 1
        cols.append(j)
    return cols


def _modular_minor(M: np.ndarray, p: int, kept: np.ndarray, d: int, first: int) -> tuple[int, tuple]:
    """``(rank, (rows, cols))`` of ``M`` mod ``p``: ``M[rows][:, cols]`` is ``rank × rank`` and nonsingular
    mod ``p`` (the pivot columns, then the pivot rows of those columns); rows as ``(k, a, j)`` (input
    ``kept[·]``, output ``a``, power ``t^j``) for the layout ``(K, d, orders)`` of :func:`forward_jacobian`."""
    if M.size == 0:
        return 0, ([], [])
    cols = _pivots(flint.nmod_mat(M.shape[0], M.shape[1], (M % p).ravel().tolist(), p))
    sub = (M[:, cols] % p).T
    rows = _pivots(flint.nmod_mat(sub.shape[0], sub.shape[1], sub.ravel().tolist(), p))
    orders = M.shape[0] // (len(kept) * d)
    triples = [[int(kept[r // (d * orders)]), r % (d * orders) // orders, first + r % orders] for r in rows]
    return len(cols), (triples, [int(c) for c in cols])


def exact_rank(
    point: RationalPoint,
    activation: str,
    *,
    residual: bool = True,
    order: int | None = None,
    prime: int = PRIME,
    residue: int | None = None,
    subfamily: np.ndarray | None = None,
    chunk: int = 16,
) -> ExactRank:
    """Rank mod ``prime`` of the probe Jacobian at ``point``: a certified lower bound on the rank
    over ``R`` (``docs/theory/depth.md``, step 2).

    Args:
      point: a :class:`RationalPoint` (weights and probe inputs / jet directions); with biases
        (``point.bias``) their columns are differentiated too, and for GELU the biases must be 0
        at the point (the jets are then polynomial; step 9) and the jets include ``t^0``.
      activation: ``"gelu"`` (Taylor coefficients of ``t ↦ f(t x_k)`` up to ``t^order``) or
        ``"relu"`` (values ``f(x_k)``; inputs on a kink, checked exactly, are dropped).
      residual: residual stack (``True``) or free stack.
      order: jet order ``k`` for GELU (default 4); ignored for ReLU.
      prime: an odd prime ``p < 2^21`` (sums of products must stay exact in float64), larger than
        the GELU jet order (so every Taylor denominator ``2^k k! (2k+1)`` is a unit mod ``p``; a
        smaller prime would silently drop terms of the series, and the rank would not be a bound).
      residue: ``c_0`` for GELU (default: derived from the point, so reruns agree).
      subfamily: integer matrix ``B`` ``(P, m)``: the rank of ``J B`` (the affine family
        ``W_0 + B θ``).
      chunk: inputs per vectorised pass (memory ``∝ chunk · P · n · k``).

    Examples:
      >>> from absorbjax.dimension import rational_point
      >>> pt = rational_point(2, 2, 2, key=jax.random.key(0), inputs=4)
      >>> exact_rank(pt, "gelu", order=5).rank, exact_rank(pt, "gelu", order=5, residual=False).rank
      (16, 12)
    """
    start = time.perf_counter()
    name = activations.get(activation).name
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    p = check_prime(prime)
    L, n, d = point.up.shape
    P = param_count(d, n, L, bias=point.bias)
    if subfamily is not None:
        subfamily = np.asarray(subfamily)
        if subfamily.ndim != 2 or subfamily.shape[0] != P or not np.issubdtype(subfamily.dtype, np.integer):
            raise ValueError(
                f"subfamily must be an integer matrix of shape ({P}, m), got {subfamily.shape} {subfamily.dtype}"
            )
    dropped = 0
    kept = np.arange(point.inputs.shape[0])  # the point's inputs that rows come from
    if name == "gelu":
        order = check_count("order", 4 if order is None else order)
        check_jet_order(p, order)
        if residue is None:  # a residue in [2, p − 1], derived from the point so that reruns agree
            residue = 2 + int(np.abs(point.up).sum() * 7919 + np.abs(point.down).sum() * 104729) % (p - 2)
        M = forward_jacobian(point, residual, int(order), p, int(residue) % p, None, chunk)
    else:
        order, residue = 1, None
        masks, on_kink = relu_masks(point, residual)
        dropped = int(on_kink.sum())
        keep = ~on_kink
        kept = np.flatnonzero(keep)
        point = point._replace(inputs=point.inputs[keep])
        masks = [m[keep] for m in masks]
        M = forward_jacobian(point, residual, 1, p, 0, masks, chunk)
    cols = P
    if subfamily is not None:  # the family W_0 + B θ: its Jacobian J B, columns the m coordinates θ
        Mf = flint.nmod_mat(M.shape[0], M.shape[1], M.ravel().tolist(), p)
        Bf = flint.nmod_mat(P, subfamily.shape[1], [int(v) % p for v in subfamily.ravel().tolist()], p)
        cols = subfamily.shape[1]
        M = np.array([int(v) for v in (Mf * Bf).entries()], np.int64).reshape(M.shape[0], cols)
    first = 0 if name == "relu" or point.bias else 1  # the t-power of each input's first row
    rank, minor = _modular_minor(M, p, kept, d, first)
    return ExactRank(
        int(rank),
        M.shape[0],
        cols,
        p,
        residue,
        int(order),
        int(point.inputs.shape[0]),
        dropped,
        time.perf_counter() - start,
        minor,
    )


# ---------------------------------------------------------------------------------------------
# Narrow width (step 5)


def narrow_invertible(point: RationalPoint) -> bool:
    """Whether every layer has ``det(I + W_down[:,S] W_up[S,:]) ≠ 0`` for all ``S ⊆ [n]``, checked
    exactly (rational determinants); then the residual ReLU stack's Jacobian is invertible on every
    linear region (``docs/theory/depth.md``, step 6). Enumerates ``2^n`` subsets: ``n ≤ 16``.

    Examples:
      >>> from absorbjax.dimension import rational_point
      >>> narrow_invertible(rational_point(3, 3, 2, key=jax.random.key(0), inputs=1))
      True
    """
    L, n, d = point.up.shape
    if n > 16:
        raise ValueError(f"narrow_invertible enumerates 2^n subsets; n must be <= 16, got {n}")
    q = int(point.denominator)
    for layer in range(L):
        # det(I + D_S U_S) = det(q² I + D_num,S U_num,S) / q^{2d}: an integer determinant.
        down, up = point.down[layer].astype(object), point.up[layer].astype(object)
        outer = [flint.fmpz_mat(d, d, np.outer(down[:, i], up[i]).ravel().tolist()) for i in range(n)]
        base = flint.fmpz_mat(d, d, (q * q * np.eye(d, dtype=np.int64)).astype(object).ravel().tolist())
        for size in range(1, n + 1):
            for S in itertools.combinations(range(n), size):
                m = base
                for i in S:
                    m = m + outer[i]
                if m.det() == 0:
                    return False
    return True
