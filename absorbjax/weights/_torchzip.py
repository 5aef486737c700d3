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

The file is untrusted (:mod:`~absorbjax.weights._limits`): zip members must have unique names,
be stored or deflated and unencrypted, and declare sizes within the budget before anything is
inflated; ``data.pkl`` is at most ``B / 16`` bytes and is pre-scanned (:func:`prescan`) before the
unpickler sees it; every tensor view must fit its storage (element count, strides ≥ 1 on every
dimension longer than 1, the extent) and every storage record must hold exactly dtype × count
bytes; a name reached twice (two members ``data/0``, ``{"fc1": {"weight": A}, "fc1.weight": B}``)
is refused.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import pickle
import pickletools
from pathlib import Path

import numpy as np

from absorbjax.weights import _limits as limits
from absorbjax.weights._conventions import printable

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

    def __setstate__(self, state):
        raise pickle.UnpicklingError("the pickle rewrites a storage record (BUILD on a storage)")


@dataclasses.dataclass(frozen=True)
class TensorRef:
    """A tensor view ``(offset, shape, stride)`` (in elements) into a storage."""

    storage: StorageRef
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    def __setstate__(self, state):
        raise pickle.UnpicklingError("the pickle rewrites a tensor (BUILD on a tensor)")


class _StorageType:
    __slots__ = ("dtype",)

    def __init__(self, name: str):
        self.dtype = STORAGES[name]

    def __setstate__(self, state):
        raise pickle.UnpicklingError("the pickle rewrites a storage type (BUILD on a storage class)")


def rebuild_tensor(
    storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None
) -> TensorRef:
    """Stand-in for ``torch._utils._rebuild_tensor_v2``: records the view, reads nothing."""
    if not isinstance(storage, StorageRef):
        raise pickle.UnpicklingError("a tensor refers to something other than a storage record")
    if not all(isinstance(v, (tuple, list)) and len(v) <= 64 for v in (size, stride)) or len(size) != len(stride):
        raise pickle.UnpicklingError("a tensor's size and stride must be two tuples of one length")
    ints = (storage_offset, *size, *stride)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
        raise pickle.UnpicklingError("a tensor's offset, size and stride must be integers")
    return TensorRef(storage, storage_offset, tuple(size), tuple(stride))


def rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None):
    """Stand-in for ``torch._utils._rebuild_parameter(_with_state)``: the tensor itself."""
    if not isinstance(data, TensorRef):
        raise pickle.UnpicklingError("a parameter wraps something other than a tensor")
    return data


def encode(text, encoding="utf-8", errors="strict"):
    """``_codecs.encode`` as ``torch.save`` uses it (bytes stored as latin-1 text), nothing else."""
    if not isinstance(text, str) or encoding != "latin1" or errors != "strict":
        raise pickle.UnpicklingError("_codecs.encode is read only as encode(str, 'latin1')")
    return text.encode("latin1")


ALLOWED = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): rebuild_parameter,
    ("_codecs", "encode"): encode,
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
        if not (
            type(pid) is tuple
            and len(pid) == 5
            and pid[0] == "storage"
            and isinstance(pid[1], _StorageType)
            and type(pid[2]) is str
            and len(pid[2]) <= 256
            and type(pid[4]) is int
            and pid[4] >= 0
        ):
            raise pickle.UnpicklingError(
                "a persistent id that is not ('storage', <storage type>, key, location, numel)"
            )
        return StorageRef(pid[1].dtype, pid[2], pid[4])


def _flatten(obj, prefix: str, tensors: dict, meta: dict, budget: list, depth: int = 0) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError("the pickle's state dict expands past the budget (shared references)")
    if depth > limits.MAX_DEPTH:
        raise ValueError(f"the state dict is nested more than {limits.MAX_DEPTH} deep")
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                continue  # not a name: neither tensors nor metadata
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), tensors, meta, budget, depth + 1)
        return
    if isinstance(obj, (TensorRef, str, int, float, bool)) and (prefix in tensors or prefix in meta):
        raise ValueError(
            f"the name '{printable(prefix, 80)}' is reached twice in the state dict; refusing to choose one"
        )
    if isinstance(obj, TensorRef):
        tensors[prefix] = obj
    elif isinstance(obj, (str, int, float, bool)):
        meta[prefix] = str(obj)[:1000] if not isinstance(obj, int) or abs(obj) < 1 << 64 else "(a large integer)"
    # lists, tuples, None (optimizer states, hyper-parameters): neither tensors nor metadata


# pickletools' stack markers: a MARK, and ops that change the object below them in place
_MUTATORS = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"}
_PUTS = {"PUT", "BINPUT", "LONG_BINPUT"}
_GETS = {"GET", "BINGET", "LONG_BINGET"}
_CALLS = {"REDUCE", "BUILD", "NEWOBJ", "NEWOBJ_EX", "OBJ", "INST"}
_SMALL = 256  # the most nodes of a dict key, a set item or a persistent id (their hash or repr is taken)


def prescan(data: bytes) -> None:
    """Walk a pickle's opcodes (``pickletools.genops``) without building anything and refuse it
    when unpickling or walking it would not be bounded: more opcodes than ``B / 256``, a memo index
    beyond the opcode count, an object whose expanded size (shared references counted each time
    they are used) passes ``B / 256`` nodes, a dict key, set item or persistent id of more than
    :data:`_SMALL` nodes (hashing one walks it whole), or a malformed stream."""
    cap = limits.pickle_nodes()
    stack: list = []
    work = 0  # nodes walked by the calls (REDUCE, BUILD, …) the unpickler will make
    memo: dict[int, list] = {}
    mark = object()
    for count, (op, arg, _) in enumerate(pickletools.genops(data), 1):
        name = op.name
        if count > cap:
            raise ValueError(f"data.pkl has more than {cap:,} opcodes; {limits.HINT}")
        if name == "MARK":
            stack.append(mark)
            continue
        if name in _PUTS or name == "MEMOIZE":
            if not stack or stack[-1] is mark:
                raise ValueError("data.pkl memoises nothing (a malformed pickle)")
            idx = len(memo) if name == "MEMOIZE" else arg
            if not isinstance(idx, int) or idx < 0 or idx > count:
                raise ValueError(f"data.pkl uses memo index {idx} beyond its {count} opcodes")
            memo[idx] = stack[-1]
            continue
        if name in _GETS:
            if arg not in memo:
                raise ValueError(f"data.pkl reads memo index {arg}, never stored")
            stack.append(memo[arg])
            continue
        if name == "STOP":
            break
        if name == "POP" and stack and stack[-1] is mark:
            stack.pop()
            continue
        before, after = op.stack_before, op.stack_after
        items: list = []
        if pickletools.markobject in before:
            try:
                at = len(stack) - 1 - stack[::-1].index(mark)
            except ValueError:
                raise ValueError(f"data.pkl: {name} without a MARK (a malformed pickle)") from None
            items = stack[at + 1 :]
            del stack[at:]
            rest = len(before) - 2
        else:
            rest = len(before)
        if rest > len(stack) or any(x is mark for x in stack[len(stack) - rest :]):
            raise ValueError(f"data.pkl: {name} finds too few objects (a malformed pickle)")
        below = stack[len(stack) - rest :] if rest else []
        del stack[len(stack) - rest :]
        if name in ("SETITEM", "SETITEMS"):
            keys = (below[1:] + items)[0::2]
            if any(k[0] > _SMALL for k in keys):
                raise ValueError("data.pkl uses a nested object as a dict key (hashing it would not end)")
        if name in ("FROZENSET", "ADDITEMS") and any(k[0] > _SMALL for k in items):
            raise ValueError("data.pkl puts a nested object in a set (hashing it would not end)")
        if name in ("PERSID", "BINPERSID") and below and below[-1][0] > _SMALL:
            raise ValueError("data.pkl has a persistent id that is not a storage reference")
        size = 1 + sum(x[0] for x in below + items)
        if name in _CALLS:
            work += sum(x[0] for x in (below[1:] if name == "BUILD" else below) + items)
            if work > cap:
                raise ValueError(f"data.pkl's calls walk more than {cap:,} nodes in all; {limits.HINT}")
        if size > cap:
            raise ValueError(f"an object of data.pkl expands to more than {cap:,} nodes; {limits.HINT}")
        if name in _MUTATORS and below:
            cell = below[0]
            cell[0] = size
            out = [cell]
        elif name == "DUP":
            out = [below[0], below[0]]
        else:
            out = [[size] for _ in after]
        stack.extend(out)


def _dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _view(name: str, ref: TensorRef, record: int) -> None:
    """Refuse a view that does not fit its storage, before anything is read."""
    itemsize = _dtype(ref.storage.dtype).itemsize
    numel = ref.storage.numel
    where = f"tensor '{printable(name, 80)}'"
    if record != numel * itemsize:
        raise ValueError(
            f"{where}: its storage record holds {record} bytes, not {numel} × {itemsize} ({ref.storage.dtype})"
        )
    count = 1
    for n in ref.shape:
        count *= n
    if ref.offset < 0 or any(n < 0 for n in ref.shape):
        raise ValueError(f"{where}: a negative offset or size")
    if count == 0:
        return
    if any(st < 1 for n, st in zip(ref.shape, ref.stride) if n > 1):
        raise ValueError(f"{where}: stride {ref.stride} repeats elements (strides must be ≥ 1 where a size is > 1)")
    extent = ref.offset + sum((n - 1) * st for n, st in zip(ref.shape, ref.stride) if n > 1) + 1
    if count > numel or extent > numel:
        raise ValueError(
            f"{where}: view (offset {ref.offset}, shape {ref.shape}, stride {ref.stride}) needs more "
            f"than its storage's {numel} elements"
        )


def _loader(reader: limits.ZipReader, member: str, ref: TensorRef):
    def load() -> np.ndarray:
        dtype = _dtype(ref.storage.dtype)
        if any(s == 0 for s in ref.shape):
            return np.zeros(ref.shape, dtype)
        raw = reader.read(member)  # one archive opened for all the tensors (limits.ZipReader)
        raw = np.frombuffer(raw, dtype=dtype.newbyteorder("<"), count=ref.storage.numel)
        strides = [(s * dtype.itemsize if n > 1 else 0) for n, s in zip(ref.shape, ref.stride)]
        view = np.lib.stride_tricks.as_strided(raw[ref.offset :], shape=ref.shape, strides=strides)
        return np.array(view, dtype=dtype)

    return load


def read_torch_zip(path: Path):
    """``(tensors, metadata)`` of a ``torch.save`` zip: name → ``(shape, dtype, loader)``."""
    with limits.zip_open(path) as zf:
        members = limits.zip_members(zf, "the zip")
        pkls = [n for n in members if n == "data.pkl" or n.endswith("/data.pkl")]
        if len(pkls) != 1:
            raise ValueError(f"a torch zip holds one data.pkl, found {len(pkls)}")
        root = pkls[0][: -len("data.pkl")]
        order = root + "byteorder"
        if order in members and limits.read_member(zf, members[order], 64).strip() not in (b"little", b""):
            raise ValueError("big-endian torch checkpoints are not read")
        data = limits.read_member(zf, members[pkls[0]], limits.metadata_bytes())
    prescan(data)
    obj = RestrictedUnpickler(io.BytesIO(data)).load()
    refs: dict[str, TensorRef] = {}
    meta: dict[str, str] = {}
    _flatten(obj, "", refs, meta, [limits.pickle_nodes()])
    limits.count("the state dict's tensors", len(refs))
    out, reader = {}, limits.ZipReader(path)
    for name, ref in refs.items():
        member = f"{root}data/{ref.storage.key}"
        if member not in members:
            raise ValueError(f"tensor '{printable(name, 80)}' refers to a missing record '{printable(member, 120)}'")
        _view(name, ref, members[member].file_size)
        out[name] = (ref.shape, ref.storage.dtype, _loader(reader, member, ref))
    return out, meta
