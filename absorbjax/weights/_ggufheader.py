"""GGUF headers read in one pass, the weights left where they are.

``gguf.GGUFReader`` builds a NumPy view for every element of every metadata array (a 49k-token
vocabulary is ~150k views: ~20 s of CPU before the first tensor is listed). Here the header is
walked with ``struct`` following the GGUF layout (little-endian: magic ``GGUF``, ``uint32``
version 2 or 3, ``uint64`` tensor and key-value counts; key-values as ``(string key, uint32 type,
value)``, arrays as ``(uint32 item type, uint64 count, items)``, strings as ``uint64`` length +
bytes; tensor infos as ``(name, uint32 rank, uint64 dims fastest first, uint32 ggml type, uint64
offset)``; data aligned to ``general.alignment``, 32 by default). Arrays are skipped, scalars kept
as metadata strings. Tensors are memory-mapped on demand and dequantised with
``gguf.quants.dequantize`` (type sizes from ``gguf.GGML_QUANT_SIZES``), as the reader does;
plain float types (F32, F16, F64) are read as they are; integer types (I8–I64) are never weights.

The file is untrusted (:mod:`~absorbjax.weights._limits`): at most ``B / 16`` bytes of header are
read; a duplicate metadata key or tensor name is refused, arrays nest at most 8 deep, a tensor has
1–4 dimensions and a known type, and its data must lie inside the file, start at a multiple of the
alignment and share no byte with another tensor's (checked when the header is read, so that a block
decided without reading its weights still has them, and one byte range cannot be listed under
20,000 names); the counts of tensors and of key-values the header declares are at most
:func:`~absorbjax.weights._limits.max_tensors` each, checked before the first is read. Tensor names, metadata keys and string values are made printable as they are read
(:func:`~absorbjax.weights._conventions.printable`: control characters escaped).
"""

from __future__ import annotations

import struct
from pathlib import Path

import ml_dtypes
import numpy as np

from absorbjax.weights import _limits as limits
from absorbjax.weights._conventions import printable

# GGUF value type → struct format of one scalar (8 = string, 9 = array)
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_PLAIN = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
_INTEGER = ("I8", "I16", "I32", "I64")
_MAX_NEST = 8


class _Header:
    def __init__(self, raw: memoryview):
        self.raw, self.offs = raw, 0

    def take(self, fmt: str):
        out = struct.unpack_from("<" + fmt, self.raw, self.offs)
        self.offs += struct.calcsize("<" + fmt)
        return out[0] if len(out) == 1 else out

    def string(self) -> str:
        n = self.take("Q")
        if n > len(self.raw) - self.offs:
            raise ValueError("a string runs past the end of the file")
        out = bytes(self.raw[self.offs : self.offs + n]).decode("utf-8", errors="replace")
        self.offs += n
        return out

    def value(self, kind: int, depth: int = 0):
        if kind == 8:
            return self.string()
        if kind == 9:
            if depth >= _MAX_NEST:
                raise ValueError(f"metadata arrays nested more than {_MAX_NEST} deep")
            item, count = self.take("IQ")
            if item in SCALARS:
                self.offs += count * struct.calcsize(SCALARS[item])
                if self.offs > len(self.raw):
                    raise ValueError("a metadata array runs past the end of the header")
            else:
                for _ in range(count):
                    self.value(item, depth + 1)
            return None
        if kind not in SCALARS:
            raise ValueError(f"unknown GGUF value type {kind}")
        return self.take(SCALARS[kind])


def _loader(path: Path, offset: int, dims: tuple[int, ...], qtype, n_bytes: int):
    def load() -> np.ndarray:
        import gguf

        np_dims = tuple(reversed(dims))
        if qtype.name in _INTEGER:
            raise ValueError(f"GGUF type {qtype.name} is an integer type, not weights")
        raw = np.memmap(path, mode="r", dtype=np.uint8, offset=offset, shape=(n_bytes,))
        if qtype.name == "F64":
            return np.array(raw.view(np.float64).reshape(np_dims))
        if qtype.name in ("F32", "F16", "BF16"):  # unquantised: the memory map itself, in the stored dtype
            return raw.view(ml_dtypes.bfloat16 if qtype.name == "BF16" else _PLAIN[qtype.name]).reshape(np_dims)
        if qtype.name in _PLAIN:
            data = raw.view(_PLAIN[qtype.name]).reshape(np_dims)
        else:
            data = raw.reshape(gguf.quants.quant_shape_to_byte_shape(np_dims, qtype))
        try:
            return np.asarray(gguf.quants.dequantize(data, qtype))
        except NotImplementedError:
            version = getattr(gguf, "__version__", "installed")
            raise ValueError(f"GGUF type {qtype.name} is not dequantised by the gguf package ({version})") from None

    return load


def read_gguf(path: Path):
    """``(tensors, metadata)``: name → ``(shape in NumPy order, ggml type name, loader)``; scalar
    key-values as strings."""
    import gguf

    size = path.stat().st_size
    with open(path, "rb") as f:
        raw = memoryview(f.read(min(size, limits.metadata_bytes())))
    h = _Header(raw)
    if bytes(raw[:4]) != b"GGUF":
        raise ValueError("GGUF magic invalid")
    h.offs = 4
    version, n_tensors, n_kv = h.take("IQQ")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} (or big-endian) is not read")
    limits.count("the tensors the header declares", n_tensors)  # before any is listed
    limits.count("the metadata key-values the header declares", n_kv)
    meta = {}
    for _ in range(n_kv):
        key, kind = printable(h.string()), h.take("I")  # names and strings made printable as read
        if key in meta:
            raise ValueError(f"metadata key '{printable(key, 80)}' appears twice; refusing to choose one")
        value = h.value(kind)
        meta[key] = None if value is None else printable(str(value), 1000)
    meta = {k: v for k, v in meta.items() if v is not None}
    infos, names = [], set()
    for _ in range(n_tensors):
        name, rank = printable(h.string()), h.take("I")
        if name in names:
            raise ValueError(f"tensor '{printable(name, 80)}' appears twice; refusing to choose one")
        names.add(name)
        if not 1 <= rank <= 4:
            raise ValueError(f"tensor '{printable(name, 80)}' has {rank} dimensions (GGUF allows 1 to 4)")
        dims = struct.unpack_from(f"<{rank}Q", raw, h.offs)
        h.offs += 8 * rank
        kind = h.take("I")
        try:
            qtype = gguf.GGMLQuantizationType(kind)
        except ValueError:
            raise ValueError(f"tensor '{printable(name, 80)}' has unknown GGML type {kind}") from None
        infos.append((name, dims, qtype, h.take("Q")))
    align = meta.get("general.alignment", "32")
    if not align.isdigit() or not 0 < int(align) <= 1 << 16 or int(align) & (int(align) - 1):
        raise ValueError(f"general.alignment {align[:20]!r} is not a power of two up to 65536")
    align = int(align)
    start = -(-h.offs // align) * align
    tensors, ranges = {}, []
    for name, dims, qtype, offset in infos:
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        if dims[0] % block:
            raise ValueError(
                f"tensor '{printable(name, 80)}': its first dimension {dims[0]} is not a multiple of {block}"
            )
        n_bytes = int(np.prod(dims, dtype=object)) // block * type_size  # Python ints: no overflow
        if start + offset + n_bytes > size:
            raise ValueError(
                f"tensor '{printable(name, 80)}': its data ({n_bytes} bytes at {start + offset}) lie outside the "
                f"file of {size} bytes; the file is truncated or damaged"
            )
        if offset % align:
            raise ValueError(
                f"tensor '{printable(name, 80)}': its data offset {offset} is not a multiple of the alignment "
                f"{align}; the file is damaged"
            )
        ranges.append((offset, offset + n_bytes, name))
        tensors[name] = (tuple(reversed(dims)), qtype.name, _loader(path, start + offset, dims, qtype, n_bytes))
    _disjoint(ranges)
    return tensors, meta


def _disjoint(ranges) -> None:
    """``ValueError`` naming two tensors whose data ranges ``[offset, end)`` share a byte: each
    tensor has its own bytes (as every GGUF writer lays them out), so that a file cannot list
    one range under many names."""
    last_end, last_name = 0, None
    for offset, end, name in sorted(r for r in ranges if r[1] > r[0]):
        if offset < last_end:
            raise ValueError(
                f"tensors '{printable(last_name, 80)}' and '{printable(name, 80)}' share bytes of the file "
                f"(data offsets overlap at {offset}); each tensor's data must have its own range"
            )
        last_end, last_name = end, name
