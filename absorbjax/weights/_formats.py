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
candidates of one kind are refused with their names. The file a directory holds, and the
``config.json`` beside a checkpoint (:func:`config_inside`), must resolve inside the directory, or
in a Hugging Face cache snapshot inside its repository's ``blobs/`` (:func:`limits.contained`); a
file named explicitly inside such a snapshot must too. An index's shards are read once per file,
however many spellings name them, and every tensor of a shard must be listed by the index in that
shard, once (:func:`_index`).

Every tensor name is made printable as the file is read
(:func:`~absorbjax.weights._conventions.printable`: a control character, ESC or a lone surrogate
escaped; two names that print alike are refused), and so are metadata keys and values and the names
in errors. A checkpoint holds at most :func:`limits.max_tensors` tensors, each reader checking the
count its header declares before it builds an object for any; an ``.npz`` or PyTorch zip is opened
once for all its tensors (:class:`limits.ZipReader`).
"""

from __future__ import annotations

import dataclasses
import mmap
import os
from pathlib import Path
from typing import Callable

import ml_dtypes
import numpy as np

from absorbjax.weights import _limits as limits
from absorbjax.weights._conventions import printable

FORMATS = (".npz", ".npy", ".safetensors", ".gguf", ".onnx", ".bin", ".pt", ".pth", ".index.json")


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One stored tensor: ``shape`` in NumPy order, stored ``dtype`` name, ``load()`` → array.

    ``mapped``: ``load()`` returns a read-only memory map of the file in the stored dtype
    (safetensors, unquantised GGUF floats), not an allocation, so the budget
    (:func:`limits.array_bytes`) does not bound it; its byte range was checked against the file, and
    the holes under it (pages a sparse file does not hold on disk) count against the budget, for
    all the mapped tensors of the checkpoint together (:func:`limits.holes`)."""

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
        folder, path = path, find_in_directory(path)
        limits.contained(folder, path, "checkpoint file")
    elif limits.snapshot_blobs(Path(os.path.realpath(path.parent))) is not None:
        limits.contained(path.parent, path, "snapshot file")
    limits.regular_file(path)
    name = path.name.lower()
    suffix = ".index.json" if name.endswith(".index.json") else path.suffix.lower()
    if suffix not in _READERS:
        raise ValueError(
            f"{path}: unknown format {suffix or '(no suffix)'!r}; use one of {', '.join(FORMATS)} or a model directory"
        )
    return _read(path, suffix)


def config_inside(path: Path) -> None:
    """The ``config.json`` beside the checkpoint ``path``, when there is one, resolves inside the
    checkpoint's folder (:func:`limits.contained`); else a one-line ``ValueError``, before it is read."""
    config = path.parent / "config.json"
    if os.path.lexists(config):
        limits.contained(path.parent, config, "config.json", "; pass --activation NAME (activation=) instead")


def _read(path: Path, suffix: str) -> Checkpoint:
    try:
        tensors, meta, fmt, graph = _READERS[suffix](path)
        limits.count("the tensors of the checkpoint", len(tensors))
        names = _printable_names(tensors)
    except Exception as err:  # noqa: BLE001 - any parse failure means "unreadable"
        raise ValueError(printable(f"{path}: not a readable {suffix} file ({_why(err)})")) from None
    holes = _Holes()  # the holes under the maps of the whole checkpoint
    tensors = {
        names[k]: Tensor(names[k], t.shape, t.dtype, _guard(path, t, holes, names[k]), t.mapped)
        for k, t in tensors.items()
    }
    meta = {printable(k): printable(v) for k, v in meta.items()}
    if graph is not None:  # the graph's blocks name their tensors as the checkpoint now does
        graph = [
            b
            | {r: {k: names.get(t, t) for k, t in b[r].items()} for r in ("weights", "biases")}
            | {"uses": [names.get(t, t) for t in b.get("uses", ())]}
            for b in graph
        ]
    return Checkpoint(path, fmt, tensors, meta, graph)


def _printable_names(tensors: dict) -> dict[str, str]:
    """name in the file → the name it is known by (:func:`printable`: a control character, ESC or
    a lone surrogate escaped), made once as the file is read so that every name a checkpoint, a
    block or an error holds can be printed; two names that print alike are refused (no silent choice)."""
    out, seen = {}, {}
    for k in tensors:
        name = printable(k)
        if name in seen:
            raise ValueError(
                f"two tensors are named '{printable(name, 80)}' once their control characters are escaped; "
                "refusing to choose one"
            )
        seen[name] = k
        out[k] = name
    return out


def _itemsize(dtype: str) -> int:
    try:
        return max(np.dtype(dtype).itemsize, 4)
    except TypeError:
        return 4  # GGUF block types, bfloat16, float8: dequantised to float32 at most


def _guard(path: Path, t: Tensor, holes: _Holes, name: str) -> Callable[[], np.ndarray]:
    """``t.load`` with its size checked against the budget first (a memory map: the holes under it,
    with those of the checkpoint's other mapped tensors) and every failure one line, naming the
    tensor by ``name`` (printable)."""
    inner, shown = t.load, printable(name, 80)

    def load() -> np.ndarray:
        try:
            if not t.mapped:
                limits.array_bytes(t.shape, _itemsize(t.dtype), f"tensor {shown}")
            a = inner()
            if isinstance(a, np.memmap):
                holes.add(a, name)
            return a
        except Exception as err:  # noqa: BLE001 - a tensor that cannot be read, whatever the reason
            raise ValueError(printable(f"{path}: tensor {shown} is not readable ({_why(err)})")) from None

    return load


def _mapped_range(a: np.memmap) -> tuple[str, int, int] | None:
    """``(file, start, end)``: the bytes of the file the map ``a`` covers; ``None`` for no map."""
    mm = getattr(a, "_mmap", None)
    if mm is None or not a.filename:
        return None
    start = a.offset - a.offset % mmap.ALLOCATIONGRANULARITY
    return a.filename, start, start + len(mm)


@dataclasses.dataclass
class _Holes:
    """The holes (pages a sparse file holds on no disk, which a map makes resident from nothing)
    under the mapped tensors of one checkpoint, counted once per tensor against the budget
    together; a file with no hole at all is found so once (one ``SEEK_HOLE``) and costs nothing after."""

    total: int = 0
    seen: set = dataclasses.field(default_factory=set)
    dense: dict = dataclasses.field(default_factory=dict)  # file → it has no hole

    def add(self, a: np.memmap, name: str) -> None:
        where = _mapped_range(a)
        if where is None or name in self.seen:
            return
        self.seen.add(name)
        file = where[0]
        if file not in self.dense:
            self.dense[file] = limits.holes(file, 0, os.path.getsize(file), cap=0) == 0
        if self.dense[file]:
            return
        budget = limits.max_bytes()
        self.total += limits.holes(*where, cap=budget)
        if self.total > budget:
            raise limits.over(
                "the holes of a sparse file (pages on no disk) under its memory-mapped tensors", self.total, budget
            )


def watch(a) -> Callable[[], None] | None:
    """For a memory map ``a`` (a loaded tensor): a check that its file still holds the mapped bytes,
    to run before each part of it is read (reading a page of a map past the end of a file that was
    truncated meanwhile is ``SIGBUS``, which kills the process); a ``ValueError`` when it does not.
    ``None`` for an array that is not a map."""
    where = _mapped_range(a) if isinstance(a, np.memmap) else None
    if where is None:
        return None
    name, _, end = where
    ident = []  # the file's (device, inode), from the first check: a file renamed over it is not it

    def check() -> None:
        try:
            st = os.stat(name)
        except OSError:
            return  # removed: the map still reads the file it mapped
        ident[:] = ident or [st.st_dev, st.st_ino]
        if ident == [st.st_dev, st.st_ino] and st.st_size < end:
            raise ValueError(
                f"{name}: the file was truncated while being read (now {st.st_size:,} bytes, the tensor "
                f"ends at {end:,}); read a complete copy"
            )

    return check


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
                f"{folder}: holds several {what} files ({', '.join(printable(h.name, 120) for h in hits[:4])}); "
                "pass one of them"
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
        arrays, reader = {}, limits.ZipReader(path)  # one archive opened for every tensor's load
        with limits.zip_open(path) as zf:
            for member, info in limits.zip_members(zf, "the archive").items():
                key = member[:-4] if member.endswith(".npy") else member
                if key in arrays:
                    raise ValueError(f"two members hold the array '{printable(key, 80)}'")
                with zf.open(info) as f:
                    shape, dtype, _ = _npy_header(f, f"member '{printable(member, 80)}'", info.file_size)
                arrays[key] = (shape, dtype, _npz_loader(reader, member))
    meta = {}
    for k, (shape, dtype, load) in arrays.items():
        if dtype.kind in "US" and shape == ():
            meta[k] = str(load())
    tensors = {k: Tensor(k, shape, str(dtype), load) for k, (shape, dtype, load) in arrays.items() if k not in meta}
    return tensors, meta, path.suffix.lower()[1:], None


def _npz_loader(reader: limits.ZipReader, member: str):
    def load() -> np.ndarray:
        import io

        raw = reader.read(member)
        return np.asarray(np.lib.format.read_array(io.BytesIO(raw), allow_pickle=False))

    return load


_SAFETENSORS_FLOATS = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def _safetensors_header(path: Path) -> dict:
    """The JSON header of a safetensors file: its length checked against ``B / 16`` and its count of
    tensors against :func:`limits.max_tensors` (on the raw bytes first), no duplicate name."""
    import json
    import struct

    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError("shorter than a safetensors header")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:  # the number itself is not printed: it is 8 raw bytes of the file
            raise ValueError(f"its header length runs past the end of the file ({size:,} bytes)")
        if n > limits.metadata_bytes():
            raise limits.over("the safetensors header", n, limits.metadata_bytes())
        raw = f.read(n)
    if len(raw) != n:
        raise ValueError(f"the header declares {n} bytes, the file ends before")
    # every tensor's entry names its data_offsets: counted on the bytes, before JSON builds an object
    limits.count("the tensors the header declares", raw.count(b'"data_offsets"'))
    header = json.loads(raw, object_pairs_hook=limits.unique_keys)
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    limits.count("the tensors the header declares", len(header) - ("__metadata__" in header))
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

    def loader(offsets, dtype: str, shape: tuple[int, ...]):
        def load():
            if dtype not in names:
                raise ValueError(f"dtype {printable(dtype, 20)} is not read (float16/32/64 and bfloat16 weights are)")
            np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "BF16" else np.dtype(names[dtype]).newbyteorder("<")
            start, end = offsets
            count = int(np.prod(shape, dtype=object))
            if end - start != count * np_dtype.itemsize or not 0 <= start <= end <= size - base:
                raise ValueError(f"its data_offsets [{start}, {end}) do not hold shape {shape} of {dtype} in the file")
            if count == 0:
                return np.zeros(shape, np_dtype)
            try:
                return np.memmap(str(path), dtype=np_dtype, mode="r", offset=base + start, shape=shape)
            except ValueError:  # mmap: the range is past the end of the file
                now = path.stat().st_size
                if now >= base + end:
                    raise
                raise ValueError(f"the file is now {now:,} bytes, shorter than when it was listed ({size:,})") from None

        return load

    with safe_open(str(path), framework="np") as f:
        meta = dict(f.metadata() or {})
        tensors = {}
        for key in f.keys():
            sl = f.get_slice(key)
            dtype, shape = sl.get_dtype(), tuple(sl.get_shape())
            offsets = header[key]["data_offsets"]  # kept alone: the header is dropped once listed
            tensors[key] = Tensor(key, shape, names.get(dtype, dtype), loader(offsets, dtype, shape), dtype in names)
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


def _shard_files(folder: Path, spellings) -> tuple[dict[str, tuple], dict[tuple, tuple[Path, str, str]]]:
    """The files an index's shard names lead to: ``(spelling → file id, file id → (path, suffix,
    name))``, each name normalised (:func:`limits.relative_name`) and checked inside ``folder``
    (:func:`limits.inside`) once, and every spelling of one file (``F``, ``./F``, a link to ``F``)
    given that file's id (device, inode), so that it is read once."""
    by_name: dict[str, list[str]] = {}
    for shard in spellings:
        by_name.setdefault(limits.relative_name(shard, "shard"), []).append(shard)
        if len(by_name) > limits.MAX_SHARD_FILES:
            raise ValueError(f"the index names more than {limits.MAX_SHARD_FILES:,} shard files")
    key_of: dict[str, tuple] = {}
    files: dict[tuple, tuple[Path, str, str]] = {}
    for name in sorted(by_name):
        suffix = Path(name).suffix.lower()
        if name.lower().endswith(".index.json") or suffix not in _READERS:
            raise ValueError(
                f"shard '{printable(name, 120)}' is not a checkpoint file (an index names .safetensors or .bin shards)"
            )
        shard_path = limits.inside(folder, name, "shard")
        key = limits.file_id(shard_path)
        first = files.setdefault(key, (shard_path, suffix, name))
        if first[1] != suffix:
            raise ValueError(
                f"shards '{printable(first[2], 120)}' and '{printable(name, 120)}' are one file, named as two formats"
            )
        key_of.update(dict.fromkeys(by_name[name], key))
    return key_of, files


def _index(path: Path):
    """Shards listed by a Hugging Face ``*.index.json`` (``weight_map``: tensor → shard file): each
    shard a plain relative name inside the index's folder (:func:`limits.inside`), not itself an
    index; each file read once, however many names lead to it (:func:`_shard_files`). Every tensor
    of a shard must be the index's, in that shard, in no other: a tensor in two shards, one the
    index does not list or places elsewhere, or one the index lists and no shard holds, is refused."""
    index = limits.read_json(path)
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        raise ValueError("no weight_map in the index")
    if not all(isinstance(v, str) for v in wmap.values()):
        raise ValueError("weight_map values must be shard file names")
    limits.count("the tensors the index lists", len(wmap))
    names = _printable_names(wmap)  # as the shards' tensors are named (_read)
    wmap = {names[k]: v for k, v in wmap.items()}
    meta = index.get("metadata") or {}
    meta = {str(k): str(v)[:1000] for k, v in meta.items()} if isinstance(meta, dict) else {}
    key_of, files = _shard_files(path.parent, set(wmap.values()))
    found, formats_seen, held = [], set(), {}
    for key, (shard_path, suffix, name) in files.items():
        ckpt = _read(shard_path, suffix)
        formats_seen.add(ckpt.format)
        for tname, t in ckpt.tensors.items():
            if tname in held:
                raise ValueError(
                    f"tensor '{printable(tname, 80)}' is in two shards, '{printable(held[tname], 120)}' and "
                    f"'{printable(name, 120)}'; refusing to choose one"
                )
            held[tname] = name
            found.append((tname, t, key, name))
    tensors = {tname: t for tname, t, key, _ in found if tname in wmap and key_of[wmap[tname]] == key}
    missing = sorted(set(wmap) - set(tensors))
    if missing:
        where = f" (it is in shard '{printable(held[missing[0]], 120)}')" if missing[0] in held else ""
        raise ValueError(
            f"{len(missing)} tensor(s) of the index are not in their shards, e.g. '{printable(missing[0], 80)}'{where}"
        )
    unlisted = [(tname, name) for tname, _, _, name in found if tname not in wmap]
    if unlisted:
        tname, name = unlisted[0]
        raise ValueError(
            f"shard '{printable(name, 120)}' holds {len(unlisted)} tensor(s) the index does not list, e.g. "
            f"'{printable(tname, 80)}'; refusing to guess whether they belong to the model"
        )
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
