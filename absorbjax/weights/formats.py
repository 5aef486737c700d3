"""Read the tensors of a checkpoint file: ``.npz``, ``.safetensors`` and GGUF.

Every tensor comes with its shape in NumPy order (for matrices PyTorch's ``(out, in)`` as stored;
GGUF's dimension list, fastest first, is reversed to that order), its stored dtype (``float32``,
``bfloat16``, kept as ``ml_dtypes.bfloat16``; a GGUF type such as ``Q4_1``) and a loader, so that a whole model is listed without
reading its weights. GGUF tensors are read with ``gguf.GGUFReader`` and dequantised with
``gguf.quants.dequantize``, never by hand. Every problem raises ``ValueError`` with a one-line
message naming the file.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["Tensor", "Checkpoint", "read", "FORMATS"]

FORMATS = (".npz", ".npy", ".safetensors", ".gguf")


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One stored tensor: ``shape`` in NumPy order, stored ``dtype`` name, ``load()`` → array."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    load: Callable[[], np.ndarray] = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The tensors of one file, and its string metadata (``.npz`` string entries, safetensors
    header metadata, GGUF scalar key-value fields)."""

    path: Path
    format: str
    tensors: dict[str, Tensor]
    metadata: dict[str, str]


def _why(err: Exception) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def read(path) -> Checkpoint:
    """List the tensors of ``path`` (``.npz``, ``.npy``, ``.safetensors`` or ``.gguf``)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    suffix = path.suffix.lower()
    readers = {".npz": _npz, ".npy": _npz, ".safetensors": _safetensors, ".gguf": _gguf}
    if suffix not in readers:
        raise ValueError(f"{path}: unknown format {suffix or '(no suffix)'!r}; use one of {', '.join(FORMATS)}")
    try:
        tensors, meta = readers[suffix](path)
    except Exception as err:  # noqa: BLE001 - any parse failure means "unreadable"
        raise ValueError(f"{path}: not a readable {suffix} file ({_why(err)})") from None
    return Checkpoint(path, suffix[1:], tensors, meta)


def _constant(a: np.ndarray) -> Callable[[], np.ndarray]:
    return lambda: a


def _npz(path: Path):
    if path.suffix.lower() == ".npz":
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    else:
        arrays = {"": np.load(path, allow_pickle=False)}
    meta = {k: str(v) for k, v in arrays.items() if v.dtype.kind in "US" and v.ndim == 0}
    tensors = {k: Tensor(k, v.shape, str(v.dtype), _constant(v)) for k, v in arrays.items() if k not in meta}
    return tensors, meta


def _safetensors(path: Path):
    from safetensors import safe_open

    names = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
             "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}

    def loader(key: str, dtype: str):
        def load():
            if dtype == "BF16":  # NumPy has no bfloat16 of its own: read through JAX (ml_dtypes)
                with safe_open(str(path), framework="flax") as f:
                    return np.asarray(f.get_tensor(key))
            with safe_open(str(path), framework="np") as f:
                return f.get_tensor(key)
        return load

    with safe_open(str(path), framework="np") as f:
        meta = dict(f.metadata() or {})
        tensors = {}
        for key in f.keys():
            sl = f.get_slice(key)
            dtype = sl.get_dtype()
            tensors[key] = Tensor(key, tuple(sl.get_shape()), names.get(dtype, dtype.lower()), loader(key, dtype))
    return tensors, meta


def _gguf(path: Path):
    import gguf

    reader = gguf.GGUFReader(path)
    meta = {}
    for key, field in reader.fields.items():
        if len(field.types) == 1 and field.types[0] != gguf.GGUFValueType.ARRAY:
            meta[key] = str(field.contents())

    def loader(t):
        return lambda: np.asarray(gguf.quants.dequantize(t.data, t.tensor_type))

    tensors = {
        t.name: Tensor(t.name, tuple(int(s) for s in reversed(t.shape.tolist())), t.tensor_type.name, loader(t))
        for t in reader.tensors
    }
    return tensors, meta
