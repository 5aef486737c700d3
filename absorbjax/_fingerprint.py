"""A block's fingerprint: :func:`fingerprint`, the hash of its stored numbers that a certificate
carries (``Certificate.evidence``) and :func:`absorbjax.verify` compares, so that a certificate is
checked against the block it was made for."""

from __future__ import annotations

import hashlib

import numpy as np

from absorbjax._resident import release

_WINDOW = 2**18  # entries read at a time (2 MiB of float64)


def fingerprint(up, down, skip=None, bias=None, out_bias=None, *, dtypes=None) -> str:
    """A hash of a block's stored numbers: ``W_up (n, d)`` and ``W_down (d, n)`` as the bytes of their
    stored dtypes (``dtypes = (up, down)``; ``None``: as given), so that float64 copies of float32
    weights hash as the float32 weights they are, and a value that dtype cannot hold hashes as no stored
    value; the skip ``A``, hidden bias and output bias (when given; an all-zero bias counts as none) in
    float64. Read in windows of about ``2^18`` entries (memory maps stay maps, their pages released)."""
    h = hashlib.sha256()  # SHA-NI where the CPU has it: 1.3 GB/s here, blake2b 0.9
    up_dt, down_dt = dtypes if dtypes is not None else (None, None)
    for name, x, dt in (
        ("up", up, up_dt),
        ("down", down, down_dt),
        ("skip", skip, np.float64),
        ("bias", bias, np.float64),
        ("out_bias", out_bias, np.float64),
    ):
        if x is None or (name != "skip" and not np.any(np.asarray(x) != 0)):
            continue
        dt = np.dtype(x.dtype if dt is None else dt)
        h.update(f"{name}{tuple(np.shape(x))}{dt}".encode())
        wide = np.ndim(x) == 2 and np.shape(x)[1] > np.shape(x)[0]  # W_down (d, n): blocks of columns
        step = max(1, _WINDOW // max(1, np.shape(x)[0] if wide else int(np.prod(np.shape(x)[1:]))))
        for s in range(0, max(np.shape(x)[1 if wide else 0], 1), step):
            part = x[:, s : s + step] if wide else x[s : s + step]
            h.update(_stored_bytes(np.asarray(part), dt))
            release(part)
    return h.hexdigest()[:32]


def _stored_bytes(x: np.ndarray, dt: np.dtype) -> bytes:
    """The bytes of ``x`` stored as ``dt`` (``b"?"`` when some value is not one of ``dt``'s)."""
    if x.dtype == dt:
        return np.ascontiguousarray(x).tobytes()
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(dt)
        if not np.array_equal(np.asarray(y, np.float64), np.asarray(x, np.float64)):
            return b"?"
    return np.ascontiguousarray(y).tobytes()


def dtypes_of(stored: str | None) -> tuple | None:
    """``(up, down)`` from a certificate's ``stored_dtype`` (``"float32"``, ``"float16/float32"``), or ``None``."""
    import ml_dtypes

    try:
        parts = [np.dtype(ml_dtypes.bfloat16 if p == "bfloat16" else p) for p in str(stored).split("/")]
    except TypeError:
        return None
    return (parts[0], parts[-1]) if 1 <= len(parts) <= 2 else None
