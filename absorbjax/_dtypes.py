"""Dtype facts without importing JAX: which dtypes hold real numbers, and their ``finfo``.

NumPy alone does not know the ML float formats (``bfloat16``, the ``float8`` family, ``int4``) that
JAX arrays and checkpoints store; ``ml_dtypes`` (a JAX dependency that does not import JAX) does.
The NumPy decision in :mod:`absorbjax.condition` reads dtypes through these, so it runs on numpy
weights without importing JAX.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np


def is_float(dtype) -> bool:
    """Whether ``dtype`` is a real floating format (NumPy's or ml_dtypes': ``bfloat16``,
    ``float8_*``), like ``jnp.issubdtype(dtype, jnp.floating)``; complex is not."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return True
    if dtype.kind != "V":
        return False
    try:
        ml_dtypes.finfo(dtype)
    except ValueError:
        return False
    return True


def is_integer(dtype) -> bool:
    """Whether ``dtype`` is a signed or unsigned integer format (NumPy's or ml_dtypes' ``int4``,
    ``uint4``, …), like ``jnp.issubdtype(dtype, jnp.integer)``; ``bool`` is not."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return True
    if dtype.kind != "V":
        return False
    try:
        ml_dtypes.iinfo(dtype)
    except ValueError:
        return False
    return True


def finfo(dtype) -> np.finfo:
    """``finfo`` of a real floating ``dtype`` (``eps``, ``nmant``, ``smallest_normal``, …),
    ml_dtypes' formats included, like ``jnp.finfo``."""
    if not is_float(dtype):
        raise ValueError(f"finfo needs a real floating dtype, got {np.dtype(dtype)}")
    return ml_dtypes.finfo(np.dtype(dtype))
