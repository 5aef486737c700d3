"""Random weights: one block or stack (:func:`init`), many draws (:func:`sample`), and blocks that
absorb their skip by construction with a planted ``S`` (:func:`planted`, :func:`planted_sample`).

Draw ``i`` of many is ``init(..., key=fold_in(key, i))``; nearby draw counts and shapes share
compiled programs (:func:`size_bucket`).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import activations
from absorbjax._xla import after
from absorbjax.models._params import GatedParams, MLPParams, Params

DISTS = ("gaussian", "uniform", "orthogonal", "rademacher", "ternary", "grid")


def _float_dtype(dtype):
    if dtype is None:
        return jnp.result_type(float)  # float64 under jax_enable_x64, else float32
    dtype = jnp.dtype(dtype)
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"dtype must be a floating dtype, got {dtype}")
    if dtype == jnp.float64 and not jax.config.jax_enable_x64:
        raise ValueError("dtype=float64 needs jax.config.update('jax_enable_x64', True); absorbjax never sets it")
    return dtype


def _iid(key, size: int, dist: str, dtype, bits: int):
    """``size`` i.i.d. entries of an elementwise law, unscaled (gaussian: standard normal, uniform:
    ``U[−1, 1)``). The first ``m`` of them, reshaped, are the same key's draw of any shape with
    ``m`` entries (JAX's partitionable threefry draws each entry from its flat index)."""
    if dist == "gaussian":
        return jax.random.normal(key, (size,), dtype)
    if dist == "uniform":
        return jax.random.uniform(key, (size,), dtype, -1)
    if dist == "rademacher":
        return jax.random.rademacher(key, (size,), dtype)
    if dist == "ternary":
        return jax.random.randint(key, (size,), -1, 2).astype(dtype)
    if dist == "grid":  # symmetric signed integer grid of a `bits`-bit quantiser, |k| ≤ 2^(bits−1) − 1
        return jax.random.randint(key, (size,), 1 - 2 ** (bits - 1), 2 ** (bits - 1)).astype(dtype)
    raise ValueError(f"dist must be one of {DISTS}, got {dist!r}")


def init(
    activation: str,
    d: int,
    n: int,
    *,
    key: jax.Array,
    dist: str = "gaussian",
    dtype=None,
    depth: int | None = None,
    bits: int = 3,
) -> Params:
    """Random weights of one block (or, with ``depth=L``, a stack with a leading ``L`` axis).

    Args:
      activation: registered name; gated names give :class:`GatedParams`.
      d: input/output dimension ``d``.
      n: hidden width ``n``.
      key: PRNG key.
      dist: ``"gaussian"`` and ``"uniform"`` (variance ``1/fan_in``), ``"orthogonal"``
        (orthonormal rows/columns), or discrete integer weights as in quantised networks with
        the per-tensor scale folded out: ``"rademacher"`` (±1), ``"ternary"`` ({−1, 0, 1}),
        ``"grid"`` (integers in ``[−(2^{bits−1}−1), 2^{bits−1}−1]``; ``bits=2`` is ternary).
      dtype: float dtype; default follows ``jax_enable_x64``.
      depth: number of layers ``L``; layer ``l`` uses ``fold_in(key, l)``.
      bits: grid resolution for ``dist="grid"`` (≥ 2).

    The Gaussian and uniform laws are ``jax.nn.initializers.variance_scaling(1, "fan_in", …)``
    with ``fan_in`` the number of columns (``d`` for ``W_up``, ``n`` for ``W_down``): field ``f``
    (``W_up, W_down`` or ``W_gate, W_value, W_down``) is that initializer applied, outside
    ``jit``, to ``split(key, fields)[f]``, bit for bit (with JAX's default
    ``jax_threefry_partitionable``).

    Examples:
      >>> import jax
      >>> from absorbjax import models
      >>> p = models.init("relu", 3, 8, key=jax.random.key(0))
      >>> p.up.shape, p.down.shape, p.up.dtype  # float32 unless jax_enable_x64 is on
      ((8, 3), (3, 8), dtype('float32'))
      >>> models.init("swiglu", 3, 8, key=jax.random.key(0))._fields
      ('gate', 'value', 'down')
    """
    law = _law(activation, d, n, dist=dist, dtype=dtype, depth=depth, bits=bits)
    if dist == "orthogonal":
        return _orthogonal(key, d, n, _field_count(law.activation), law.dtype, depth)
    return _draw(key[None], d, n, law)


class _Law(NamedTuple):
    """The checked options of :func:`init` (and of :func:`sample`, which takes the same)."""

    activation: str
    dist: str
    dtype: jnp.dtype
    depth: int | None
    bits: int


def _law(activation, d, n, *, dist="gaussian", dtype=None, depth=None, bits=3) -> _Law:
    """The arguments of :func:`init`, checked; the activation's registered name, the float dtype."""
    act = activations.get(activation)
    for arg, v in (("d", d), ("n", n)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{arg} must be a positive integer, got {v!r}")
    if dist not in DISTS:
        raise ValueError(f"dist must be one of {DISTS}, got {dist!r}")
    if dist == "grid" and (not isinstance(bits, (int, np.integer)) or bits < 2):
        raise ValueError(f"bits must be an integer >= 2, got {bits!r}")
    if depth is not None and (not isinstance(depth, (int, np.integer)) or depth < 1):
        raise ValueError(f"depth must be a positive integer, got {depth!r}")
    return _Law(act.name, dist, _float_dtype(dtype), depth, bits)


def _fields(count: int, d: int, n: int) -> list[tuple[int, int]]:
    """The ``(rows, cols)`` of the ``count`` weight fields (3 gated, 2 not) in key-split order
    (``cols`` is ``fan_in``)."""
    return [(n, d)] * (count - 1) + [(d, n)]


def _field_count(activation: str) -> int:
    return 3 if activations.get(activation).gated else 2


@functools.partial(jax.jit, static_argnums=range(1, 6))
def _orthogonal(key, d, n, fields, dtype, depth):
    """:func:`init` with ``dist="orthogonal"`` (not elementwise: one program per shape); ``fields``:
    3 gated, 2 not (the count, not the activation's name, is static: a name re-registered from
    ungated to gated compiles anew)."""
    if depth is not None:
        keys = jax.vmap(lambda l: jax.random.fold_in(key, l))(jnp.arange(depth))
        return jax.vmap(lambda k: _orthogonal(k, d, n, fields, dtype, None))(keys)
    shapes = _fields(fields, d, n)
    mats = []
    for k, s in zip(jax.random.split(key, len(shapes)), shapes):
        if mats:  # QRs in turn, or two can deadlock XLA's CPU pool: the key waits for the last matrix
            k = jax.random.wrap_key_data(after(jax.random.key_data(k), mats[-1]), impl=jax.random.key_impl(k))
        mats.append(jax.nn.initializers.orthogonal()(k, s, dtype))
    return (GatedParams if len(mats) == 3 else MLPParams)(*mats)


@functools.partial(jax.jit, static_argnums=range(1, 7))
def _entries(keys, depth, fields, size, dist, dtype, bits):
    """``(B, [L,] fields, size)`` unscaled entries for the block keys ``keys (B,)``: field ``f`` of
    layer ``l`` from ``split(fold_in(keys[b], l), fields)[f]`` (no ``fold_in`` without a depth), as
    :func:`init` splits its key. Only the entry count reaches the program, so blocks of every shape
    with at most ``size`` entries per matrix share it."""

    def block(k):
        return jax.vmap(lambda kf: _iid(kf, size, dist, dtype, bits))(jax.random.split(k, fields))

    def one(k):
        if depth is None:
            return block(k)
        return jax.vmap(lambda l: block(jax.random.fold_in(k, l)))(jnp.arange(depth))

    return jax.vmap(one)(keys)


@functools.partial(jax.jit, static_argnums=range(1, 7))
def _matrices(entries, d, n, count, dist, dtype, draws):
    """The weight matrices from :func:`_entries`: each field's first ``rows·cols`` entries reshaped,
    gaussian and uniform scaled as ``variance_scaling(1, "fan_in", …)`` scales them; the first
    ``draws`` blocks (``None``: the only block, without a draws axis)."""
    lead = entries[0] if draws is None else entries[:draws]
    mats = []
    for f, (rows, cols) in enumerate(_fields(count, d, n)):
        a = lead[..., f, : rows * cols].reshape(lead.shape[:-2] + (rows, cols))
        variance = jnp.array(1.0 / cols, dtype)
        if dist == "gaussian":
            a = a * jnp.sqrt(variance)
        elif dist == "uniform":
            a = a * jnp.sqrt(3 * variance)
        mats.append(a)
    return (GatedParams if len(mats) == 3 else MLPParams)(*mats)


def _draw(keys, d, n, law: _Law, draws=None):
    """:func:`init` for each block key in ``keys (B,)`` (``draws=None``: ``B = 1``, no draws axis)."""
    count = _field_count(law.activation)
    bits = law.bits if law.dist == "grid" else None
    entries = _entries(keys, law.depth, count, size_bucket(d * n, 65536), law.dist, law.dtype, bits)
    return _matrices(entries, d, n, count, law.dist, law.dtype, draws)


def sample(
    activation: str,
    d: int,
    n: int,
    *,
    key: jax.Array,
    draws: int,
    start: int = 0,
    dist: str = "gaussian",
    dtype=None,
    depth: int | None = None,
    bits: int = 3,
) -> Params:
    """``draws`` independent blocks with a leading draws axis; ``dist``, ``dtype``, ``depth`` and
    ``bits`` as for :func:`init`.

    Draw ``i`` is ``init(..., key=fold_in(key, start + i))``, so ``draws=10`` is a prefix of
    ``draws=100`` and chunks ``start=0, 100, …`` concatenate to one big sample. Counts share
    compiled programs: up to 16 draws one, then one per power of two up to 1024, then one per
    multiple of 1024 (the extra draws are computed and dropped); so do shapes, except for
    ``dist="orthogonal"``: the random program sees only how many entries a matrix has (bucketed
    the same way, up to 65536).

    Examples:
      >>> import jax
      >>> from absorbjax import models
      >>> key = jax.random.key(0)
      >>> draws = models.sample("gelu", 2, 6, key=key, draws=4)
      >>> draws.up.shape  # (draws, n, d)
      (4, 6, 2)
      >>> more = models.sample("gelu", 2, 6, key=key, draws=4, start=4)  # draws 4..7, no recompilation
    """
    if not isinstance(draws, (int, np.integer)) or draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws!r}")
    law = _law(activation, d, n, dist=dist, dtype=dtype, depth=depth, bits=bits)
    keys = _keys(key, start, size_bucket(draws))
    if law.dist == "orthogonal":
        fields = _field_count(law.activation)
        out = jax.vmap(lambda k: _orthogonal(k, d, n, fields, law.dtype, law.depth))(keys)
        return jax.tree.map(lambda a: a[:draws], out)
    return _draw(keys, d, n, law, draws)


def size_bucket(count: int, cap: int = 1024) -> int:
    """How many draws (or matrix entries) are computed for ``count``, so that nearby counts share
    one compiled program: the next power of two from 16 up to ``cap``, then the next multiple of
    ``cap`` (entry ``i`` does not depend on how many are computed beside it)."""
    if count > cap:
        return -(-count // cap) * cap
    return max(16, 1 << (int(count) - 1).bit_length())


@functools.partial(jax.jit, static_argnums=2)
def _keys(key, start, draws):
    """The block keys ``fold_in(key, start + i)``, ``i < draws``."""
    return jax.vmap(lambda i: jax.random.fold_in(key, i))(start + jnp.arange(draws))


def planted(
    activation: str,
    d: int,
    n: int,
    *,
    key: jax.Array,
    size: int | None = None,
    dtype=None,
    depth: int | None = None,
) -> tuple[MLPParams, np.ndarray | list[np.ndarray]]:
    """Gaussian weights that satisfy ``c·W_down[:,S] W_up[S,:] = −I_d`` for a random index set ``S``,
    ``c`` the activation's declared odd slope (``σ(z) − σ(−z) = c z``; ``leaky_relu(α)``: ``1 + α``; 1
    for the others and where none is declared, e.g. relu2, whose blocks drawn here do not absorb).

    ``|S| = size`` (default ``d``, at most ``n``). ``W_down[:,S] = (−W_up[S,:]⁺ + Z (I − W_up[S,:]
    W_up[S,:]⁺))/c`` with random ``Z``: the negative pseudo-inverse plus a random component in the left
    null space (nonzero only when ``|S| > d``), divided by ``c`` (rounded to the dtype).
    Returns ``(params, S)`` with ``S`` sorted.
    Gated activations raise: the sign-flip absorber is for ungated blocks.

    ``depth=L``: a stack of ``L`` such blocks, layer ``l`` drawn from ``fold_in(key, l)``; returns
    params with a leading ``L`` axis (as :func:`stack` takes) and the list of the layers' sets. The
    residual-free stack of the blockwise absorbers equals the residual stack.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import models
      >>> with jax.enable_x64(True):  # the identity is exact: check it in float64
      ...     params, S = models.planted("gelu", 2, 6, key=jax.random.key(0))
      ...     print(len(S), bool(jnp.abs(params.down[:, S] @ params.up[S] + jnp.eye(2)).max() < 1e-12))
      2 True

    A ReLU block drawn here is identically 0 on the cone where exactly the units of ``S`` are active
    (its Jacobian there is ``I + W_down[:,S] W_up[S,:] = 0``), when that cone is not empty. In a
    stack of such blocks the function is 0 wherever a later block's input falls in its cone, which
    hides the kinks of the earlier blocks that lie there.

    References:
      Thm 8 (ReLU) and Thm 10 (GELU): for ``d ≥ 2`` and nondegenerate weights the block absorbs
      its skip iff such an ``S`` exists; the kink theorem (``docs/theory/kink.md``) for
      ``leaky_relu`` with ``c = 1 + α``; ``absorbjax.condition.absorber`` builds the absorber.
    """
    act = activations.get(activation)
    if act.gated:
        raise ValueError(f"planted needs an ungated activation, got gated {act.name!r}")
    if depth is not None:
        if not isinstance(depth, (int, np.integer)) or depth < 1:
            raise ValueError(f"depth must be a positive integer or None, got {depth!r}")
        layers = [
            planted(activation, d, n, key=jax.random.fold_in(key, layer), size=size, dtype=dtype)
            for layer in range(depth)
        ]
        return jax.tree.map(lambda *a: jnp.stack(a), *[p for p, _ in layers]), [S for _, S in layers]
    size = d if size is None else size
    if not isinstance(size, (int, np.integer)) or not d <= size <= n:
        raise ValueError(f"size must be an integer with d <= size <= n ({d} <= size <= {n}), got {size!r}")
    k0, ks, kz = jax.random.split(key, 3)
    params = init(act.name, d, n, key=k0, dtype=dtype)
    S = np.sort(np.asarray(jax.random.permutation(ks, n)[:size]))
    up_s = params.up[S]  # (|S|, d), full column rank almost surely
    pinv = jnp.linalg.pinv(up_s)  # (d, |S|)
    z = jax.random.normal(kz, (d, size), params.up.dtype) / math.sqrt(size)
    down_s = -pinv + z @ (jnp.eye(size, dtype=pinv.dtype) - up_s @ pinv)
    if act.odd_slope not in (None, 1):
        down_s = down_s / float(act.odd_slope)
    return MLPParams(params.up, params.down.at[:, S].set(down_s)), S


def planted_sample(
    activation: str,
    d: int,
    n: int,
    *,
    key: jax.Array,
    draws: int,
    size: int | None = None,
    dtype=None,
    depth: int | None = None,
) -> tuple[MLPParams, list]:
    """``draws`` blocks from :func:`planted`, draw ``i`` from ``fold_in(key, i)``: params with a
    leading draws axis (``up (draws, n, d)``, ``down (draws, d, n)``) and each draw's ``S``.
    ``depth=L``: ``draws`` stacks (``up (draws, L, n, d)``; layer ``l`` of draw ``i`` from
    ``fold_in(fold_in(key, i), l)``), each draw's list of ``L`` sets.

    Examples:
      >>> import jax
      >>> from absorbjax import models
      >>> params, sets = models.planted_sample("relu", 2, 6, key=jax.random.key(0), draws=3, size=3)
      >>> params.down.shape, [len(S) for S in sets]
      ((3, 2, 6), [3, 3, 3])
    """
    if not isinstance(draws, (int, np.integer)) or draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws!r}")
    pairs = [
        planted(activation, d, n, key=jax.random.fold_in(key, i), size=size, dtype=dtype, depth=depth)
        for i in range(draws)
    ]
    return jax.tree.map(lambda *a: jnp.stack(a), *[p for p, _ in pairs]), [S for _, S in pairs]
