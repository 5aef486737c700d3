"""PyTorch ``.bin`` / ``.pt`` / ``.pth`` zip checkpoints, read without torch and without running code.

``torch.save`` (PyTorch ≥ 1.6) writes a zip: ``<root>/data.pkl`` (a pickle of the state dict whose
tensors refer to storages by key) and ``<root>/data/<key>`` (each storage's raw little-endian
bytes). A pickle can call any importable function, so ``pickle.load`` on a downloaded file runs
whatever its author chose. Here the pickle is read by :class:`RestrictedUnpickler`, whose
``find_class`` resolves only an allow-list (:data:`ALLOWED`): ``collections.OrderedDict``,
``torch._utils._rebuild_tensor_v2`` / ``_rebuild_parameter`` (replaced by functions that record
offset, shape and strides), the typed storage classes (replaced by their NumPy dtypes) and
``_codecs.encode``. Anything else (a pickled ``nn.Module``, a NumPy array, ``os.system``) is refused
with a ``ValueError`` naming it. Tensors are read on demand from their storage records with
``numpy.lib.stride_tricks.as_strided``.
"""

from __future__ import annotations

import codecs
import collections
import dataclasses
import io
import pickle
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["ALLOWED", "STORAGES", "RestrictedUnpickler", "read_torch_zip"]

# torch storage class → NumPy dtype name (bfloat16 through ml_dtypes)
STORAGES = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}


@dataclasses.dataclass(frozen=True)
class StorageRef:
    """A storage record ``data/<key>`` of ``numel`` elements of ``dtype``."""

    dtype: str
    key: str
    numel: int


@dataclasses.dataclass(frozen=True)
class TensorRef:
    """A tensor view ``(offset, shape, stride)`` (in elements) into a storage."""

    storage: StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


class _StorageType:
    def __init__(self, name: str):
        self.dtype = STORAGES[name]


def rebuild_tensor(
    storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None
) -> TensorRef:
    """Stand-in for ``torch._utils._rebuild_tensor_v2``: records the view, reads nothing."""
    if not isinstance(storage, StorageRef):
        raise pickle.UnpicklingError("a tensor refers to something other than a storage record")
    return TensorRef(storage, int(storage_offset), tuple(int(s) for s in size), tuple(int(s) for s in stride))


def rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None):
    """Stand-in for ``torch._utils._rebuild_parameter(_with_state)``: the tensor itself."""
    return data


ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): rebuild_parameter,
    ("_codecs", "encode"): codecs.encode,
    **{("torch", name): _StorageType(name) for name in STORAGES},
}


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves only :data:`ALLOWED`; storages come back as :class:`StorageRef`."""

    def find_class(self, module, name):
        # fresh objects for the storages and stand-ins, so that a BUILD opcode in one file cannot
        # change what another file's tensors resolve to
        try:
            target = ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refused to unpickle {module}.{name}: only state dicts of tensors are read (a pickle can "
                "run code); save model.state_dict() instead of the model, or convert the file to "
                "safetensors"
            ) from None
        if isinstance(target, _StorageType):
            return _StorageType(name)
        if target in (rebuild_tensor, rebuild_parameter):
            return lambda *args: target(*args)
        return target

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], _StorageType)):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r:.80}")
        return StorageRef(pid[1].dtype, str(pid[2]), int(pid[4]))


def _flatten(obj, prefix: str, tensors: dict, meta: dict) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), tensors, meta)
    elif isinstance(obj, TensorRef):
        tensors[prefix] = obj
    elif isinstance(obj, (str, int, float, bool)):
        meta[prefix] = str(obj)
    # lists, tuples, None (optimizer states, hyper-parameters): neither tensors nor metadata


def _dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _loader(path: Path, member: str, ref: TensorRef):
    def load() -> np.ndarray:
        dtype = _dtype(ref.storage.dtype)
        with zipfile.ZipFile(path) as zf:
            raw = np.frombuffer(zf.read(member), dtype=dtype.newbyteorder("<"), count=ref.storage.numel)
        extent = ref.offset + sum((s - 1) * st for s, st in zip(ref.shape, ref.stride)) + 1
        if any(s == 0 for s in ref.shape):
            return np.zeros(ref.shape, dtype)
        if ref.offset < 0 or extent > raw.size or any(st < 0 for st in ref.stride):
            raise ValueError(
                f"tensor view (offset {ref.offset}, shape {ref.shape}, stride {ref.stride}) "
                f"leaves its storage of {raw.size} elements"
            )
        view = np.lib.stride_tricks.as_strided(
            raw[ref.offset :], shape=ref.shape, strides=[s * dtype.itemsize for s in ref.stride]
        )
        return np.array(view, dtype=dtype)

    return load


def read_torch_zip(path: Path):
    """``(tensors, metadata)`` of a ``torch.save`` zip: name → ``(shape, dtype, loader)``."""
    with zipfile.ZipFile(path) as zf:
        pkls = [n for n in zf.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
        if len(pkls) != 1:
            raise ValueError(f"a torch zip holds one data.pkl, found {len(pkls)}")
        root = pkls[0][: -len("data.pkl")]
        order = root + "byteorder"
        if order in zf.namelist() and zf.read(order).strip() not in (b"little", b""):
            raise ValueError("big-endian torch checkpoints are not read")
        obj = RestrictedUnpickler(io.BytesIO(zf.read(pkls[0]))).load()
        names = set(zf.namelist())
    refs: dict[str, TensorRef] = {}
    meta: dict[str, str] = {}
    _flatten(obj, "", refs, meta)
    out = {}
    for name, ref in refs.items():
        member = f"{root}data/{ref.storage.key}"
        if member not in names:
            raise ValueError(f"tensor {name} refers to a missing record {member}")
        out[name] = (ref.shape, ref.storage.dtype, _loader(path, member, ref))
    return out, meta
