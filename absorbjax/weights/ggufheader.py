"""GGUF headers read in one pass, the weights left where they are.

``gguf.GGUFReader`` builds a NumPy view for every element of every metadata array (a 49k-token
vocabulary is ~150k views: ~20 s of CPU before the first tensor is listed). Here the header is
walked with ``struct`` following the GGUF layout (little-endian: magic ``GGUF``, ``uint32``
version 2 or 3, ``uint64`` tensor and key-value counts; key-values as ``(string key, uint32 type,
value)``, arrays as ``(uint32 item type, uint64 count, items)``, strings as ``uint64`` length +
bytes; tensor infos as ``(name, uint32 rank, uint64 dims fastest first, uint32 ggml type, uint64
offset)``; data aligned to ``general.alignment``, 32 by default). Arrays are skipped, scalars kept
as metadata strings. Tensors are memory-mapped on demand and dequantised with
``gguf.quants.dequantize`` (type sizes from ``gguf.GGML_QUANT_SIZES``), as the reader does.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

__all__ = ["SCALARS", "read_gguf"]

# GGUF value type → struct format of one scalar (8 = string, 9 = array)
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_PLAIN = {
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I8": np.int8,
    "I16": np.int16,
    "I32": np.int32,
    "I64": np.int64,
}


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

    def value(self, kind: int):
        if kind == 8:
            return self.string()
        if kind == 9:
            item, count = self.take("IQ")
            if item in SCALARS:
                self.offs += count * struct.calcsize(SCALARS[item])
            else:
                for _ in range(count):
                    self.value(item)
            return None
        if kind not in SCALARS:
            raise ValueError(f"unknown GGUF value type {kind}")
        return self.take(SCALARS[kind])


def _loader(path: Path, offset: int, dims: tuple[int, ...], qtype):
    def load() -> np.ndarray:
        import gguf

        np_dims = tuple(reversed(dims))
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        n_bytes = int(np.prod(dims, dtype=np.int64)) * size // block
        raw = np.memmap(path, mode="r", dtype=np.uint8, offset=offset, shape=(n_bytes,))
        if qtype.name in _PLAIN:
            data = raw.view(_PLAIN[qtype.name]).reshape(np_dims)
        else:
            data = raw.reshape(gguf.quants.quant_shape_to_byte_shape(np_dims, qtype))
        return np.asarray(gguf.quants.dequantize(data, qtype))

    return load


def read_gguf(path: Path):
    """``(tensors, metadata)``: name → ``(shape in NumPy order, ggml type name, loader)``; scalar
    key-values as strings."""
    import gguf

    with open(path, "rb") as f:
        raw = memoryview(f.read(min(path.stat().st_size, 1 << 26)))  # headers of real files fit in 64 MiB
    h = _Header(raw)
    if bytes(raw[:4]) != b"GGUF":
        raise ValueError("GGUF magic invalid")
    h.offs = 4
    version, n_tensors, n_kv = h.take("IQQ")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version} (or big-endian) is not read")
    meta = {}
    for _ in range(n_kv):
        key, kind = h.string(), h.take("I")
        value = h.value(kind)
        if value is not None:
            meta[key] = str(value)
    infos = []
    for _ in range(n_tensors):
        name, rank = h.string(), h.take("I")
        dims = struct.unpack_from(f"<{rank}Q", raw, h.offs)
        h.offs += 8 * rank
        qtype, offset = gguf.GGMLQuantizationType(h.take("I")), h.take("Q")
        infos.append((name, dims, qtype, offset))
    align = int(meta.get("general.alignment", 32))
    start = -(-h.offs // align) * align
    tensors = {
        name: (tuple(reversed(dims)), qtype.name, _loader(path, start + offset, dims, qtype))
        for name, dims, qtype, offset in infos
    }
    return tensors, meta
