"""CTranslate2 ``model.bin`` (binary versions 5 and 6), read without ctranslate2.

Layout (little-endian; ``ctranslate2/specs/model_spec.py``): ``uint32`` version, the spec name and
an ``uint32`` revision, ``uint32`` count of variables, then per variable its name, ``uint8`` rank,
``uint32`` dimensions, ``uint8`` dtype id (0 float32, 1 int8, 2 int16, 3 int32, 4 float16,
5 bfloat16), ``uint32`` byte count and the bytes; then ``uint32`` count of aliases and
``(alias, target)`` name pairs. Strings are ``uint16`` length (with the NUL) + bytes + NUL.
Scopes are joined with ``/`` in the file; here with ``.`` (``encoder/layer_0/ffn/linear_0/weight``
→ ``encoder.layer_0.ffn.linear_0.weight``), names made printable as they are read
(:func:`~absorbjax.weights._conventions.printable`), at most :func:`limits.max_tensors` of them. Scalars become metadata; an ``activation`` scalar
(``ActivationType``: 0 ReLU, 1 GELUTanh, 2 Swish, 3 GELU) becomes ``hidden_act``. The parse must
end exactly at the end of the file, otherwise the file is refused. A variable is read with
``read`` calls into one buffer (:func:`limits.read_range`), never mapped: a file truncated meanwhile
is a one-line error.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from absorbjax.weights import _limits as limits
from absorbjax.weights._conventions import printable

DTYPES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}
ACTIVATIONS = {0: "relu", 1: "gelu_pytorch_tanh", 2: "silu", 3: "gelu"}
VERSIONS = (5, 6)


def is_ct2(path: Path) -> bool:
    """Whether ``path`` starts like a CTranslate2 model: a small version and a ``...Spec`` name."""
    with open(path, "rb") as f:
        head = f.read(64)
    if len(head) < 8:
        return False
    version, length = struct.unpack_from("<IH", head)
    return 1 <= version <= 64 and 0 < length <= len(head) - 6 and head[6 : 6 + length - 1].endswith(b"Spec")


class _Stream:
    def __init__(self, f, size: int):
        self.f, self.size = f, size

    def take(self, fmt: str):
        n = struct.calcsize("<" + fmt)
        raw = self.f.read(n)
        if len(raw) != n:
            raise ValueError("the file ends inside a header")
        return struct.unpack("<" + fmt, raw)

    def string(self) -> str:
        (n,) = self.take("H")
        raw = self.f.read(n)
        if len(raw) != n or n == 0 or raw[-1] != 0:
            raise ValueError("a malformed name")
        return raw[:-1].decode("utf-8")


def _loader(path: Path, offset: int, shape, dtype: str):
    def load() -> np.ndarray:
        if dtype == "bfloat16":
            import ml_dtypes

            dt = np.dtype(ml_dtypes.bfloat16)
        else:
            dt = np.dtype(dtype).newbyteorder("<")
        count = int(np.prod(shape, dtype=np.int64))
        raw = limits.read_range(path, offset, count * dt.itemsize, "the variable's data")
        return np.frombuffer(raw, dtype=dt, count=count).reshape(shape)

    return load


def read_ct2(path: Path):
    """``(tensors, metadata)`` of a CTranslate2 ``model.bin``: name → ``(shape, dtype, loader)``."""
    size = path.stat().st_size
    tensors, meta, scalars = {}, {}, {}
    with open(path, "rb") as f:
        s = _Stream(f, size)
        (version,) = s.take("I")
        if version not in VERSIONS:
            raise ValueError(
                f"CTranslate2 binary version {version} is not read (known: {VERSIONS}); "
                "convert the model to safetensors"
            )
        meta["ctranslate2.spec"] = s.string()
        meta["ctranslate2.revision"] = str(s.take("I")[0])
        (count,) = s.take("I")
        limits.count("the variables the file declares", count)
        for _ in range(count):
            name = printable(s.string().replace("/", "."))  # made printable as read, then unique
            if name in tensors or name in meta:
                raise ValueError(f"variable '{printable(name, 80)}' appears twice; refusing to choose one")
            (rank,) = s.take("B")
            shape = s.take("I" * rank)
            dtype_id, nbytes = s.take("BI")
            if dtype_id not in DTYPES:
                raise ValueError(f"variable '{printable(name, 80)}' has unknown dtype id {dtype_id}")
            dtype = DTYPES[dtype_id]
            width = 2 if dtype in ("float16", "bfloat16", "int16") else 1 if dtype == "int8" else 4
            if nbytes != width * int(np.prod(shape, dtype=object)):
                raise ValueError(
                    f"variable '{printable(name, 80)}': {nbytes} bytes do not fit shape {shape} of {dtype}"
                )
            offset = f.tell()
            if offset + nbytes > size:
                raise ValueError(f"variable '{printable(name, 80)}': its {nbytes} bytes run past the end of the file")
            if rank == 0:
                scalars[name] = np.frombuffer(f.read(nbytes), np.dtype(dtype).newbyteorder("<"))[0].item()
                meta[name] = str(scalars[name])
            else:
                tensors[name] = (tuple(shape), dtype, _loader(path, offset, shape, dtype))
                f.seek(nbytes, 1)
        (aliases,) = s.take("I")
        for _ in range(aliases):
            alias, target = printable(s.string()), printable(s.string())
            key = f"alias:{alias.replace('/', '.')}"
            if key in meta:
                raise ValueError(f"alias '{printable(alias, 80)}' appears twice; refusing to choose one")
            meta[key] = target.replace("/", ".")
        if f.tell() != size:
            raise ValueError(f"{size - f.tell()} bytes left after the last alias")
    acts = {v for k, v in scalars.items() if k == "activation" or k.endswith(".activation")}
    if len(acts) == 1:
        code = acts.pop()
        if code in ACTIVATIONS:
            meta["hidden_act"] = ACTIVATIONS[code]
            meta["hidden_act_source"] = f"ctranslate2 activation={code}"
    return tensors, meta
