"""Reading a block's units as stored, in blocks: ``W_up[s,:]`` and ``W_down[:,s]`` for a range ``s`` of
units, upcast to float64 one block at a time (``bfloat16`` through its bits), rescaled per unit by
exact powers of two. The matrices may be memory-mapped in any float dtype; no float64 copy of a
whole matrix is made. :class:`Scales` reproduces :func:`_arith.balance` block by block.

The one blocked reader of ``condition``: the decision (both paths), the matrix-free search
(:mod:`absorbjax.condition._search`, which computes in :func:`as_working`'s dtype, in windows of
:func:`entry_block` units) and the float64 copies of :func:`_validate.float_weights` read through
:func:`as_float64`, :func:`as_working`, :func:`window` and :func:`windows`."""

from __future__ import annotations

import sys
from typing import NamedTuple

import ml_dtypes
import numpy as np

from absorbjax._resident import mapped, release

BLOCK = 512  # units per block: small enough for malloc to reuse (no page faults), ≈ 3 · BLOCK · d float64 numbers
SAFE = 400  # binary exponents within ±SAFE: squares and products neither over- nor underflow
_BF16 = np.dtype(ml_dtypes.bfloat16)
_NARROW_SHIFT = 600  # 2^(−149−600) and 2^(128+600) are normal float64 numbers
_CHUNK = 1 << 22  # entries of a d×d product formed at once (d ≤ 2048: the whole matrix)


def blocks(n: int, block: int) -> list[slice]:
    """The ranges ``s`` of ``block`` consecutive units that cover ``0..n`` (the last one shorter)."""
    return [slice(s, min(s + block, n)) for s in range(0, n, block)]


def entry_block(d: int, entries: int) -> int:
    """Units per window when a window holds ``entries`` entries of ``W_up`` (and of ``W_down``):
    ``max(1, entries // d)`` for units of ``d`` entries each."""
    return max(1, entries // d)


def _upcast(x: np.ndarray, dtype) -> np.ndarray:
    """A copy of ``x`` in ``dtype`` (float32 or float64), exactly for any narrower float; ``bfloat16`` to
    float64 through its bits (the high half of a float32: exact, and much faster than ``ml_dtypes``'
    cast to float64; its cast to float32 is faster than the bits, so that one is kept)."""
    if x.dtype == _BF16 and dtype == np.float64 and sys.byteorder == "little":
        bits = np.zeros((*x.shape, 2), np.uint16)
        bits[..., 1] = x.view(np.uint16)
        return bits.view(np.float32)[..., 0].astype(np.float64)
    return x.astype(dtype)


def as_float64(x) -> np.ndarray:
    """A float64 copy of ``x`` (any real dtype; ``bfloat16`` through its bits, exactly and fast); a
    memory-mapped ``x`` is released once copied (:func:`absorbjax._resident.release`), so reading a
    map window by window keeps one window resident, not the map."""
    x = np.asarray(x)
    out = _upcast(x, np.float64)
    release(x)
    return out


def float64(X) -> np.ndarray:
    """``X`` as a float64 array (no copy when it is one)."""
    return X if isinstance(X, np.ndarray) and X.dtype == np.float64 else as_float64(X)


def as_working(x) -> np.ndarray:
    """``x`` in a dtype NumPy computes with, for the search's guiding numbers: float32 and float64 as
    they are (no copy, unless memory-mapped: then a copy, and the map released as :func:`as_float64`
    releases it), any other dtype (float16, ``bfloat16``) upcast to float32 (exact for the narrower floats)."""
    x = np.asarray(x)
    wide = x.dtype in (np.float32, np.float64)
    if wide and not mapped(x):
        return x
    out = _upcast(x, x.dtype if wide else np.float32)
    release(x)  # a memory map's pages: read, not kept resident
    return out


def window(U, D, s, upcast=as_float64) -> tuple[np.ndarray, np.ndarray]:
    """``(upcast(W_up[s,:]), upcast(W_down[:,s]))`` for ``U = W_up (n, d)``, ``D = W_down (d, n)`` and
    units ``s`` (a slice, an index array or one index); ``upcast`` :func:`as_float64` or :func:`as_working`."""
    return upcast(U[s]), upcast(D[:, s])


def windows(U, D, block: int = BLOCK, upcast=as_float64, scales=None):
    """``(s, W_up[s,:], W_down[:,s])`` for the ranges ``s`` of :func:`blocks` in order, each read by
    :func:`window` (``(|s|, d)`` and ``(d, |s|)``), or by :func:`load` rescaled by the exponents
    ``scales`` ``(n,)`` when given (float64): one window in memory at a time."""
    for s in blocks(U.shape[0], block):
        yield (s, *(window(U, D, s, upcast) if scales is None else load(U, D, scales, s)))


def per_unit(U, D, f, block: int = BLOCK, upcast=as_float64) -> np.ndarray:
    """``f(W_up[s,:], W_down[:,s])`` ``(|s|,)`` over the :func:`windows`, joined ``(n,)``."""
    return np.concatenate([f(u, dd) for _, u, dd in windows(U, D, block, upcast)])


def _times(x: np.ndarray, k: np.ndarray, axis: int) -> np.ndarray:
    """``x·2^k`` along ``axis`` (``k`` per row, ``axis = 0``, or per column, ``axis = 1``) for exponents
    whose results the caller knows to be exact: a product by a power of two then (faster than ldexp)."""
    p = np.ldexp(1.0, k) if np.all(np.abs(k) <= 1000) else None
    if p is None:
        return np.ldexp(x, k[:, None] if axis == 0 else k[None, :])
    return x * (p[:, None] if axis == 0 else p[None, :])


def unit_max(U, D, *, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """``(max_j |W_up[i,j]|, max_k |W_down[k,i]|)`` per unit ``(n,)`` each, float64, read in blocks of
    ``block`` units (NaN where a NaN is stored, so ``isfinite`` of both says whether every entry is)."""
    n = U.shape[0]
    mu, md = np.empty(n), np.empty(n)
    for s, u, dd in windows(U, D, block):
        mu[s] = np.max(np.abs(u), axis=1, initial=0.0)
        md[s] = np.max(np.abs(dd), axis=0, initial=0.0)
    return mu, md


def identity(d: int) -> np.ndarray:
    """``I`` ``(d, d)`` float64, read-only, on anonymous pages mapped when first touched: its zeros share
    the kernel's zero page, so it costs ``d`` pages (the diagonal), not ``8 d²`` bytes (``np.eye`` asks
    for huge pages and takes all of them: 1.7 GB at ``d = 14848``)."""
    import mmap

    pages = mmap.mmap(
        -1, max(8, 8 * d * d), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    )  # private: reads map the zero page
    A = np.frombuffer(pages, dtype=np.float64, count=d * d).reshape(d, d)
    A[np.arange(d), np.arange(d)] = 1.0
    A.flags.writeable = False
    return A


def is_identity(A: np.ndarray) -> bool:
    """``A == I`` without forming ``I`` (``d×d``)."""
    d = A.shape[0]
    return A.shape == (d, d) and bool(np.all(np.diagonal(A) == 1)) and np.count_nonzero(A) == d


def inner(X: np.ndarray, Y: np.ndarray, f=None) -> float:
    """``Σ_kj f(X)_kj f(Y)_kj`` for ``d×d`` arrays (``f`` e.g. ``np.abs``), formed ``_CHUNK`` entries at a time."""
    rows = max(1, _CHUNK // max(1, X.shape[1]))
    f = (lambda a: a) if f is None else f
    return sum(float(np.sum(f(X[r : r + rows]) * f(Y[r : r + rows]))) for r in range(0, X.shape[0], rows))


def up_rows(U, e, idx) -> np.ndarray:
    """Float64 ``W_up[idx,:]·2^−e`` (``e`` exact exponents from :func:`balance_scales`, or ``None``)."""
    u = as_float64(U[idx])
    return u if e is None or not np.any(e[idx]) else _times(u, -e[idx], 0)


def down_cols(D, e, idx) -> np.ndarray:
    """Float64 ``W_down[:,idx]·2^e`` (``e`` exact exponents from :func:`balance_scales`, or ``None``)."""
    dd = as_float64(D[:, idx])
    return dd if e is None or not np.any(e[idx]) else _times(dd, e[idx], 1)


def units(U, D, e, S) -> tuple[np.ndarray, np.ndarray]:
    """Float64 ``(W_up[S,:]·2^−e, W_down[:,S]·2^e)`` for the indices ``S`` (``O(|S| d)`` memory)."""
    S = np.asarray(S, dtype=np.int64)
    return up_rows(U, e, S), down_cols(D, e, S)


class Scales(NamedTuple):
    """Per-unit exponents ``(n,)``: ``balance`` those of :func:`_arith.balance` (``max|W_up[i,:]·2^−e_i|``
    in ``[1/2, 1)`` where exact), ``total`` those followed by :func:`unit_scales` of the balanced units
    (each step kept only where exact), so that loading ``W_up[i,:]·2^−total_i`` gives bit for bit what
    ``unit_scales`` gives on the balanced copy, without that copy; ``maxima`` the stored units'
    :func:`unit_max`, read in the same pass (or handed in), so no later step reads them again."""

    balance: np.ndarray
    total: np.ndarray
    maxima: tuple[np.ndarray, np.ndarray]


def unit_scales(U: np.ndarray, D: np.ndarray, *, block: int = BLOCK) -> np.ndarray:
    """Per-unit power-of-two exponents ``k_i`` that balance ``W_up[i,:]·2^−k`` and ``W_down[:,i]·2^k``.

    ``U = W_up (n, d)``, ``D = W_down (d, n)`` in any float dtype. ``k_i = 0`` for moderate units
    (both maxima within ``2^±400``) and where the rescaling would not be exact (a result outside the normal float64 range). Rescaling by ``2^±k`` is exact
    otherwise and leaves every ``M_i = W_down[:,i] W_up[i,:]`` unchanged.
    """
    mu, md = unit_max(U, D, block=block)
    return _exponents(mu, md)


def _exponents(mu: np.ndarray, md: np.ndarray) -> np.ndarray:
    """:func:`unit_scales` from the per-unit maxima ``(n,)``."""
    eu, ed = np.frexp(mu)[1], np.frexp(md)[1]
    k = (eu - ed) // 2
    k[(eu == 0) | (ed == 0)] = 0  # a zero row or column: nothing to balance
    k[(np.abs(eu) < SAFE) & (np.abs(ed) < SAFE)] = 0  # moderate units: no need
    return k.astype(np.int64)


def load(U, D, k, s: slice) -> tuple[np.ndarray, np.ndarray]:
    """Float64 ``(W_up[s,:]·2^−k, W_down[:,s]·2^k)``, exactly (units whose rescaling is inexact keep k = 0)."""
    (u, dd), ks = window(U, D, s), k[s]
    if _narrow(U, D) and np.all(np.abs(ks) <= _NARROW_SHIFT):  # exact: no test needed
        return (_times(u, -ks, 0), _times(dd, ks, 1)) if np.any(ks) else (u, dd)
    return _rescale(u, dd, ks)[:2]


def _narrow(U, D) -> bool:
    """Both stored in a float dtype of at most 32 bits (float16, bfloat16, float32): every nonzero entry
    lies in ``[2^−149, 2^128]``, so in float64 a rescaling by ``2^±k``, ``|k| ≤ _NARROW_SHIFT``, is exact."""
    return all(X.dtype in (np.float16, np.float32, _BF16) for X in (U, D))


def _rescale(u: np.ndarray, dd: np.ndarray, ks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(u·2^−k, dd·2^k, exact)`` for a loaded block; the units whose rescaling is inexact keep their
    values (``exact`` False)."""
    if not np.any(ks):
        return u, dd, np.ones(ks.size, bool)
    with np.errstate(over="ignore", under="ignore"):
        us, ds = np.ldexp(u, -ks[:, None]), np.ldexp(dd, ks[None, :])
        exact = np.all(np.ldexp(us, ks[:, None]) == u, axis=1) & np.all(np.ldexp(ds, -ks[None, :]) == dd, axis=0)
    if not np.all(exact):
        us[~exact], ds[:, ~exact] = u[~exact], dd[:, ~exact]
    return us, ds, exact


def _low_bits(x: np.ndarray, axis: int) -> np.ndarray:
    """The binary exponent of the lowest set bit over the nonzero entries of ``x`` along ``axis``
    (``x = Σ bits``, every entry an integer multiple of ``2^low``); a large number where all are zero."""
    mant, ex = np.frexp(np.abs(x))
    m = (mant * 2.0**53).astype(np.int64)  # exact: an integer below 2^53 (subnormals are normalised by frexp)
    tz = np.zeros(m.shape, np.int64)
    nz = m != 0
    low = m[nz] & -m[nz]  # the lowest set bit, a power of two
    tz[nz] = np.frexp(low.astype(np.float64))[1] - 1
    out = np.where(nz, ex.astype(np.int64) - 53 + tz, 1 << 20)
    return out.min(axis=axis, initial=1 << 20)


def exact_exponents(u: np.ndarray, dd: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per unit, the exponent ``e`` nearest ``want`` for which ``u[i,:]·2^−e`` and ``dd[:,i]·2^e`` are
    both exact float64 numbers (``u (k, d)``, ``dd (d, k)`` float64). The exact exponents of a unit form
    an interval that holds 0: scaling down is exact while the lowest set bit stays at or above
    ``2⁻¹⁰⁷⁴``, scaling up while the largest entry stays below ``2¹⁰²⁴``. So a unit whose ideal
    rescaling would round is rescaled as far towards it as exactness allows, never left at its stored
    scale for want of one bit."""
    big = 1 << 20
    top_u = np.frexp(np.max(np.abs(u), axis=1, initial=0.0))[1].astype(np.int64)
    top_d = np.frexp(np.max(np.abs(dd), axis=0, initial=0.0))[1].astype(np.int64)
    low_u, low_d = _low_bits(u, 1), _low_bits(dd, 0)
    zu, zd = ~np.any(u != 0, axis=1), ~np.any(dd != 0, axis=0)
    hi = np.minimum(np.where(zu, big, low_u + 1074), np.where(zd, big, 1024 - top_d))
    lo = np.maximum(np.where(zd, -big, -(low_d + 1074)), np.where(zu, -big, top_u - 1024))
    e = np.clip(np.asarray(want, np.int64), np.minimum(lo, 0), np.maximum(hi, 0))
    with np.errstate(over="ignore", under="ignore"):  # the test of exactness, kept as a guard
        ub, db = np.ldexp(u, -e[:, None]), np.ldexp(dd, e[None, :])
        ok = (
            np.all(np.ldexp(ub, e[:, None]) == u, axis=1)
            & np.all(np.ldexp(db, -e[None, :]) == dd, axis=0)
            & np.all(np.isfinite(db), axis=0)
            & np.all(np.isfinite(ub), axis=1)
        )
    return np.where(ok, e, 0).astype(np.int64)


def balance_scales(U, D, *, block: int = BLOCK, maxima=None) -> Scales:
    """:class:`Scales` of ``W_up = U (n, d)``, ``W_down = D (d, n)`` (any float dtype, finite), in one
    pass over blocks of ``block`` units (none for narrow dtypes when ``maxima``, :func:`unit_max` of
    ``U, D``, is handed in); the exponents of :func:`_arith.balance` (:func:`exact_exponents`: the
    ideal one, ``max|W_up[i,:]·2^−e| ∈ [1/2, 1)``, moved only as far as exactness requires)."""
    n = U.shape[0]
    if _narrow(U, D):  # every rescaling below is exact (|e| ≤ 149 + 128, and then k = 0): from the maxima
        mu, md = unit_max(U, D, block=block) if maxima is None else maxima
        e = np.where(mu > 0, np.frexp(mu)[1], 0).astype(np.int64)
        return Scales(e, e + _exponents(np.ldexp(mu, -e), np.ldexp(md, e)), (mu, md))
    e, t = np.zeros(n, np.int64), np.zeros(n, np.int64)
    mu, md = np.empty(n), np.empty(n)
    for s, u, dd in windows(U, D, block):
        top = mu[s] = np.max(np.abs(u), axis=1, initial=0.0)
        md[s] = np.max(np.abs(dd), axis=0, initial=0.0)
        es = exact_exponents(u, dd, np.where(top > 0, np.frexp(top)[1], 0))
        ub, db = _times(u, -es, 0), _times(dd, es, 1)
        k = _exponents(np.max(np.abs(ub), axis=1, initial=0.0), np.max(np.abs(db), axis=0, initial=0.0))
        k[~_rescale(ub, db, k)[2]] = 0
        e[s], t[s] = es, es + k
    return Scales(e, t, (mu, md))
