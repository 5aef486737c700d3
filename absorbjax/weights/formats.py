"""Read the tensors of a checkpoint: ``.npz``, ``.safetensors`` (one file or shards with their
``*.index.json``), GGUF, ONNX, PyTorch zip (``.bin``/``.pt``/``.pth``, read without torch),
CTranslate2 ``model.bin``, or a model directory holding one of them.

Every tensor comes with its shape in NumPy order (for matrices PyTorch's ``(out, in)`` as stored;
GGUF's dimension list, fastest first, is reversed to that order), its stored dtype (``float32``,
``bfloat16``, kept as ``ml_dtypes.bfloat16``; a GGUF type such as ``Q4_1``) and a loader, so that a whole model is listed without
reading its weights. GGUF headers are walked in one pass (:mod:`~absorbjax.weights.ggufheader`; ``gguf.GGUFReader``
spends ~20 s on a vocabulary) and tensors dequantised with ``gguf.quants.dequantize``, never by
hand. ONNX through the ``onnx`` package
(:mod:`~absorbjax.weights.onnxgraph`), PyTorch zips with a restricted unpickler
(:mod:`~absorbjax.weights.torchzip`), CTranslate2 by its documented layout
(:mod:`~absorbjax.weights.ct2`). Every problem raises ``ValueError`` with a one-line message naming
the file.

A directory is read as the file it holds, looked for in this order: ``*.safetensors.index.json``,
``model.safetensors`` (or the only ``*.safetensors``), ``pytorch_model.bin.index.json``,
``pytorch_model.bin``, ``model.bin``, the only ``*.onnx``, ``*.gguf``, ``*.npz``; several
candidates of one kind are refused with their names.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = ["Tensor", "Checkpoint", "read", "FORMATS"]

FORMATS = (".npz", ".npy", ".safetensors", ".gguf", ".onnx", ".bin", ".pt", ".pth", ".index.json")


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One stored tensor: ``shape`` in NumPy order, stored ``dtype`` name, ``load()`` → array."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    load: Callable[[], np.ndarray] = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The tensors of one checkpoint, and its string metadata (``.npz`` string entries, safetensors
    header metadata, GGUF scalar key-value fields, CTranslate2 scalars, torch non-tensor entries).
    ``graph_blocks``: for ONNX, the blocks found in the graph
    (:func:`absorbjax.weights.onnxgraph.read_onnx`); ``None`` where blocks are found by name."""

    path: Path
    format: str
    tensors: dict[str, Tensor]
    metadata: dict[str, str]
    graph_blocks: list | None = None


def _why(err: Exception) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def read(path) -> Checkpoint:
    """List the tensors of ``path``: a file (:data:`FORMATS`) or a model directory."""
    path = Path(path)
    if path.is_dir():
        path = find_in_directory(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file or directory")
    name = path.name.lower()
    suffix = ".index.json" if name.endswith(".index.json") else path.suffix.lower()
    readers = {
        ".npz": _npz,
        ".npy": _npz,
        ".safetensors": _safetensors,
        ".gguf": _gguf,
        ".onnx": _onnx,
        ".bin": _bin,
        ".pt": _bin,
        ".pth": _bin,
        ".index.json": _index,
    }
    if suffix not in readers:
        raise ValueError(
            f"{path}: unknown format {suffix or '(no suffix)'!r}; use one of {', '.join(FORMATS)} or a model directory"
        )
    try:
        tensors, meta, fmt, graph = readers[suffix](path)
    except Exception as err:  # noqa: BLE001 - any parse failure means "unreadable"
        raise ValueError(f"{path}: not a readable {suffix} file ({_why(err)})") from None
    return Checkpoint(path, fmt, tensors, meta, graph)


# in order of preference: (glob, what it is)
_DIRECTORY = (
    ("*.safetensors.index.json", "sharded safetensors"),
    ("model.safetensors", "safetensors"),
    ("*.safetensors", "safetensors"),
    ("pytorch_model.bin.index.json", "sharded PyTorch"),
    ("pytorch_model.bin", "PyTorch"),
    ("model.bin", "CTranslate2 or PyTorch"),
    ("*.onnx", "ONNX"),
    ("*.gguf", "GGUF"),
    ("*.npz", "npz"),
)


def find_in_directory(folder: Path) -> Path:
    """The checkpoint file a model directory holds (see the module docstring)."""
    for pattern, what in _DIRECTORY:
        hits = sorted(folder.glob(pattern))
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise ValueError(
                f"{folder}: holds several {what} files ({', '.join(h.name for h in hits[:4])}); pass one of them"
            )
    raise ValueError(f"{folder}: no checkpoint in this directory (looked for {', '.join(p for p, _ in _DIRECTORY)})")


def _tensors(items: dict) -> dict[str, Tensor]:
    return {k: Tensor(k, shape, dtype, load) for k, (shape, dtype, load) in items.items()}


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
    return tensors, meta, path.suffix.lower()[1:], None


def _safetensors(path: Path):
    from safetensors import safe_open

    names = {
        "F64": "float64",
        "F32": "float32",
        "F16": "float16",
        "BF16": "bfloat16",
        "I64": "int64",
        "I32": "int32",
        "I16": "int16",
        "I8": "int8",
        "U8": "uint8",
        "BOOL": "bool",
    }

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
    return tensors, meta, "safetensors", None


def _gguf(path: Path):
    from absorbjax.weights.ggufheader import read_gguf

    tensors, meta = read_gguf(path)
    return _tensors(tensors), meta, "gguf", None


def _onnx(path: Path):
    from absorbjax.weights.onnxgraph import read_onnx

    tensors, meta, blocks = read_onnx(path)
    return _tensors(tensors), meta, "onnx", blocks


def _bin(path: Path):
    """A PyTorch zip, a CTranslate2 model, or a refusal saying which it is not."""
    import zipfile

    from absorbjax.weights import ct2, torchzip

    if zipfile.is_zipfile(path):
        tensors, meta = torchzip.read_torch_zip(path)
        return _tensors(tensors), meta, "pytorch", None
    if ct2.is_ct2(path):
        tensors, meta = ct2.read_ct2(path)
        return _tensors(tensors), meta, "ctranslate2", None
    with open(path, "rb") as f:
        head = f.read(2)
    if head[:1] == b"\x80":
        raise ValueError(
            "a legacy torch.save file (PyTorch < 1.6, a bare pickle), which is never unpickled "
            "here; re-save it with a current PyTorch or convert it to safetensors"
        )
    raise ValueError("neither a PyTorch zip checkpoint nor a CTranslate2 model")


def _index(path: Path):
    """Shards listed by a Hugging Face ``*.index.json`` (``weight_map``: tensor → shard file)."""
    import json

    index = json.loads(path.read_text())
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        raise ValueError("no weight_map in the index")
    tensors, meta = {}, {str(k): str(v) for k, v in (index.get("metadata") or {}).items()}
    for shard in sorted(set(wmap.values())):
        shard_path = path.parent / shard
        if not shard_path.is_file():
            raise ValueError(f"shard {shard} listed in the index is missing")
        ckpt = read(shard_path)
        for name, t in ckpt.tensors.items():
            if wmap.get(name) == shard:
                tensors[name] = t
    missing = sorted(set(wmap) - set(tensors))
    if missing:
        raise ValueError(f"{len(missing)} tensor(s) of the index are not in their shards, e.g. {missing[0]}")
    return tensors, meta, "sharded " + ckpt.format, None
