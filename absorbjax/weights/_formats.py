"""Read the tensors of a checkpoint: ``.npz``, ``.safetensors`` (one file or shards with their
``*.index.json``), GGUF, ONNX, PyTorch zip (``.bin``/``.pt``/``.pth``, read without torch),
CTranslate2 ``model.bin``, or a model directory holding one of them.

Every tensor comes with its shape in NumPy order (for matrices PyTorch's ``(out, in)`` as stored;
GGUF's dimension list, fastest first, is reversed to that order), its stored dtype (``float32``,
``bfloat16``, kept as ``ml_dtypes.bfloat16``; a GGUF type such as ``Q4_1``) and a loader, so that a whole model is listed without
reading its weights. GGUF headers are walked in one pass (:mod:`~absorbjax.weights._ggufheader`; ``gguf.GGUFReader``
spends ~20 s on a vocabulary) and tensors dequantised with ``gguf.quants.dequantize``, never by
hand. ONNX through the ``onnx`` package
(:mod:`~absorbjax.weights._onnxgraph`), PyTorch zips with a restricted unpickler
(:mod:`~absorbjax.weights._torchzip`), CTranslate2 by its documented layout
(:mod:`~absorbjax.weights._ct2`). Every problem raises ``ValueError`` with a one-line message naming
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

import ml_dtypes
import numpy as np

from absorbjax.weights import _limits as limits

FORMATS = (".npz", ".npy", ".safetensors", ".gguf", ".onnx", ".bin", ".pt", ".pth", ".index.json")


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One stored tensor: ``shape`` in NumPy order, stored ``dtype`` name, ``load()`` → array.

    ``mapped``: ``load()`` returns a read-only memory map of the file in the stored dtype
    (safetensors, unquantised GGUF floats), not an allocation, so the budget
    (:func:`limits.array_bytes`) does not bound it; its byte range was checked against the file."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    load: Callable[[], np.ndarray] = dataclasses.field(repr=False, compare=False)
    mapped: bool = False


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The tensors of one checkpoint, and its string metadata (``.npz`` string entries, safetensors
    header metadata, GGUF scalar key-value fields, CTranslate2 scalars, torch non-tensor entries).
    ``graph_blocks``: for ONNX, the blocks found in the graph
    (:func:`absorbjax.weights._onnxgraph.read_onnx`); ``None`` where blocks are found by name."""

    path: Path
    format: str
    tensors: dict[str, Tensor]
    metadata: dict[str, str]
    graph_blocks: list | None = None


def _why(err: BaseException) -> str:
    if isinstance(err, MemoryError):
        return "MemoryError: more memory than this machine has"
    if isinstance(err, RecursionError):
        return "RecursionError: nested too deeply"
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


def read(path) -> Checkpoint:
    """List the tensors of ``path``: a file (:data:`FORMATS`) or a model directory."""
    path = Path(path)
    if path.is_dir():
        path = find_in_directory(path)
    limits.regular_file(path)
    name = path.name.lower()
    suffix = ".index.json" if name.endswith(".index.json") else path.suffix.lower()
    if suffix not in _READERS:
        raise ValueError(
            f"{path}: unknown format {suffix or '(no suffix)'!r}; use one of {', '.join(FORMATS)} or a model directory"
        )
    return _read(path, suffix)


def _read(path: Path, suffix: str) -> Checkpoint:
    try:
        tensors, meta, fmt, graph = _READERS[suffix](path)
    except Exception as err:  # noqa: BLE001 - any parse failure means "unreadable"
        raise ValueError(f"{path}: not a readable {suffix} file ({_why(err)})") from None
    tensors = {k: dataclasses.replace(t, load=_guard(path, t)) for k, t in tensors.items()}
    return Checkpoint(path, fmt, tensors, meta, graph)


def _itemsize(dtype: str) -> int:
    try:
        return max(np.dtype(dtype).itemsize, 4)
    except TypeError:
        return 4  # GGUF block types, bfloat16, float8: dequantised to float32 at most


def _guard(path: Path, t: Tensor) -> Callable[[], np.ndarray]:
    """``t.load`` with its size checked against the budget first and every failure one line."""
    inner = t.load

    def load() -> np.ndarray:
        try:
            if not t.mapped:
                limits.array_bytes(t.shape, _itemsize(t.dtype), f"tensor {t.name[:80]}")
            return inner()
        except Exception as err:  # noqa: BLE001 - a tensor that cannot be read, whatever the reason
            raise ValueError(f"{path}: tensor {t.name[:80]} is not readable ({_why(err)})") from None

    return load


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
    named = folder.name.lower().endswith(FORMATS)
    what = (
        "is a directory named like a checkpoint file, and holds no checkpoint"
        if named
        else "no checkpoint in this directory"
    )
    raise ValueError(f"{folder}: {what} (looked for {', '.join(p for p, _ in _DIRECTORY)}); pass a checkpoint file")


def _tensors(items: dict, mapped=()) -> dict[str, Tensor]:
    return {k: Tensor(k, shape, dtype, load, dtype in mapped) for k, (shape, dtype, load) in items.items()}


def _constant(a: np.ndarray) -> Callable[[], np.ndarray]:
    return lambda: a


def _npy_header(f, what: str, size: int | None = None):
    """``(shape, dtype, fortran)`` of an ``.npy`` stream of ``size`` bytes (when known), checked
    before any data is read: no Python objects, the data exactly what the header declares."""
    fmt = np.lib.format
    if f.read(6) != b"\x93NUMPY":
        raise ValueError(f"{what} is not an .npy array (no \\x93NUMPY magic)")
    major, _ = f.read(2)
    read_header = {1: fmt.read_array_header_1_0, 2: fmt.read_array_header_2_0}.get(major)
    if read_header is None:
        raise ValueError(f"{what}: .npy format version {major} is not read")
    shape, fortran, dtype = read_header(f, max_header_size=1 << 16)
    if dtype.hasobject:
        raise ValueError(f"{what} holds Python objects, which are never unpickled")
    if not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ValueError(f"{what} has an invalid shape")
    if size is not None and f.tell() + int(np.prod(shape, dtype=object)) * dtype.itemsize != size:
        raise ValueError(f"{what}: its header declares shape {shape} of {dtype}, not the data it holds")
    return shape, dtype, fortran


def _npz(path: Path):
    """``.npz`` (a zip of ``.npy`` members, read lazily) or one ``.npy``; headers checked first."""
    import zipfile

    if path.suffix.lower() == ".npy":
        with open(path, "rb") as f:
            shape, dtype, _ = _npy_header(f, path.name, path.stat().st_size)
        limits.array_bytes(shape, dtype.itemsize, path.name)
        a = np.load(path, allow_pickle=False)
        arrays = {"": (shape, dtype, _constant(a))}
    else:
        if not zipfile.is_zipfile(path):
            raise ValueError("not a zip archive (an .npz file is a zip of .npy arrays)")
        arrays = {}
        with zipfile.ZipFile(path) as zf:
            for member, info in limits.zip_members(zf, "the archive").items():
                key = member[:-4] if member.endswith(".npy") else member
                if key in arrays:
                    raise ValueError(f"two members hold the array {key[:80]!r}")
                with zf.open(info) as f:
                    shape, dtype, _ = _npy_header(f, f"member {member[:80]!r}", info.file_size)
                arrays[key] = (shape, dtype, _npz_loader(path, member))
    meta = {}
    for k, (shape, dtype, load) in arrays.items():
        if dtype.kind in "US" and shape == ():
            meta[k] = str(load())
    tensors = {k: Tensor(k, shape, str(dtype), load) for k, (shape, dtype, load) in arrays.items() if k not in meta}
    return tensors, meta, path.suffix.lower()[1:], None


def _npz_loader(path: Path, member: str):
    def load() -> np.ndarray:
        import io
        import zipfile

        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(member)
            raw = limits.read_member(zf, info)
        return np.asarray(np.lib.format.read_array(io.BytesIO(raw), allow_pickle=False))

    return load


_SAFETENSORS_FLOATS = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def _safetensors_header(path: Path) -> dict:
    """The JSON header of a safetensors file: its length checked against ``B / 16``, no duplicate
    name, every entry a dict."""
    import json
    import struct

    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > limits.metadata_bytes():
            raise limits.over("the safetensors header", n, limits.metadata_bytes())
        raw = f.read(n)
    if len(raw) != n:
        raise ValueError(f"the header declares {n} bytes, the file ends before")
    header = json.loads(raw, object_pairs_hook=limits.unique_keys)
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    return header


def _safetensors(path: Path):
    """Tensors as read-only memory maps in their stored dtype (``bfloat16`` as ``ml_dtypes.bfloat16``):
    each byte range checked against its shape and the file before it is mapped."""
    from safetensors import safe_open

    header = _safetensors_header(path)
    with open(path, "rb") as f:
        base, size = 8 + int.from_bytes(f.read(8), "little"), path.stat().st_size
    names = {
        **_SAFETENSORS_FLOATS,
        "I64": "int64",
        "I32": "int32",
        "I16": "int16",
        "I8": "int8",
        "U8": "uint8",
        "BOOL": "bool",
    }

    def loader(key: str, dtype: str, shape: tuple[int, ...]):
        def load():
            if dtype not in names:
                raise ValueError(f"dtype {dtype} is not read (float16/32/64 and bfloat16 weights are)")
            np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "BF16" else np.dtype(names[dtype]).newbyteorder("<")
            start, end = header[key]["data_offsets"]
            count = int(np.prod(shape, dtype=object))
            if end - start != count * np_dtype.itemsize or not 0 <= start <= end <= size - base:
                raise ValueError(f"its data_offsets [{start}, {end}) do not hold shape {shape} of {dtype} in the file")
            if count == 0:
                return np.zeros(shape, np_dtype)
            return np.memmap(path, dtype=np_dtype, mode="r", offset=base + start, shape=shape)

        return load

    with safe_open(str(path), framework="np") as f:
        meta = dict(f.metadata() or {})
        tensors = {}
        for key in f.keys():
            sl = f.get_slice(key)
            dtype, shape = sl.get_dtype(), tuple(sl.get_shape())
            tensors[key] = Tensor(key, shape, names.get(dtype, dtype), loader(key, dtype, shape), dtype in names)
    return tensors, meta, "safetensors", None


def _gguf(path: Path):
    from absorbjax.weights._ggufheader import read_gguf

    tensors, meta = read_gguf(path)
    return _tensors(tensors, mapped=("F32", "F16", "BF16")), meta, "gguf", None


def _onnx(path: Path):
    from absorbjax.weights._onnxgraph import read_onnx

    tensors, meta, blocks = read_onnx(path)
    return _tensors(tensors), meta, "onnx", blocks


def _bin(path: Path):
    """A PyTorch zip, a CTranslate2 model, or a refusal saying which it is not."""
    import zipfile

    from absorbjax.weights import _ct2 as ct2, _torchzip as torchzip

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
    """Shards listed by a Hugging Face ``*.index.json`` (``weight_map``: tensor → shard file): each
    shard a plain relative name inside the index's folder (:func:`limits.inside`), not itself an
    index, read once."""
    index = limits.read_json(path)
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        raise ValueError("no weight_map in the index")
    if not all(isinstance(v, str) for v in wmap.values()):
        raise ValueError("weight_map values must be shard file names")
    meta = index.get("metadata") or {}
    meta = {str(k): str(v)[:1000] for k, v in meta.items()} if isinstance(meta, dict) else {}
    tensors, formats_seen = {}, set()
    for shard in sorted(set(wmap.values())):
        shard_path = limits.inside(path.parent, shard, "shard")
        suffix = shard_path.suffix.lower()
        if shard.lower().endswith(".index.json") or suffix not in _READERS:
            raise ValueError(
                f"shard {shard[:120]!r} is not a checkpoint file (an index names .safetensors or .bin shards)"
            )
        ckpt = _read(shard_path, suffix)
        formats_seen.add(ckpt.format)
        for name, t in ckpt.tensors.items():
            if wmap.get(name) == shard:
                tensors[name] = t
    missing = sorted(set(wmap) - set(tensors))
    if missing:
        raise ValueError(f"{len(missing)} tensor(s) of the index are not in their shards, e.g. {missing[0][:80]}")
    return tensors, meta, "sharded " + "/".join(sorted(formats_seen)), None


_READERS = {
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
