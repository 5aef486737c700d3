"""Every MLP block of a checkpoint, layer by layer: shapes and layout checked from the headers,
weights and biases read on demand, and every tensor of the file either used or listed as not used
(:func:`scan`)."""

from __future__ import annotations

import dataclasses
import functools
import re

import numpy as np

from absorbjax._resident import release
from absorbjax.weights import _activation, _conventions as conventions, _formats as formats, _limits as limits
from absorbjax.weights._conventions import printable


@dataclasses.dataclass(frozen=True, kw_only=True)
class Layout:
    """How a checkpoint stores its MLP matrices, where the file does not say: the options of
    :func:`scan`, :func:`blocks` and :func:`load_block` (``scan(path, layout=Layout(transpose=True))``).

    Attributes:
      transpose: read every matrix the other way round from its convention's layout (Flax/JAX
        files store ``(in, out)``).
      allow_narrow: accept ``n < d`` (refused by default: the usual sign of a transposed file).
      fused: ``"gate-value"`` or ``"value-gate"``: each block's ``up`` tensor ``(2n, d)`` stacks
        ``W_gate`` and ``W_value`` in that order (Phi-3's ``gate_up_proj`` is read so without it).

    Examples:
      >>> from absorbjax import weights
      >>> weights.Layout(fused="gate-up")
      Traceback (most recent call last):
      ValueError: fused must be one of gate-value, value-gate, got 'gate-up'
    """

    transpose: bool = False
    allow_narrow: bool = False
    fused: str | None = None

    def __post_init__(self):
        for name in ("transpose", "allow_narrow"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.fused is not None and self.fused not in conventions.FUSED_ORDERS:
            raise ValueError(f"fused must be one of {', '.join(conventions.FUSED_ORDERS)}, got {self.fused!r}")


@dataclasses.dataclass(frozen=True)
class Block:
    """One MLP block of a checkpoint.

    Attributes:
      path, layer, name: the file, the block's position in the file (0, 1, …, natural order of
        names) and its name in the file (``encoder.layer.3``, ``blk.12``, ``decoder.layer_0``, an
        ONNX node path; ``""`` for a bare block), made printable as the file was read (a control
        character escaped, :func:`~absorbjax.weights._conventions.printable`), as are ``tensors``.
      convention: naming convention (:mod:`absorbjax.weights._conventions`); gated: its kind.
      d, n: input dimension ``d`` and width ``n``.
      dtype: stored dtype of the weights (``float32``, ``Q4_1``, …).
      activation, activation_source: registered name and where it came from.
      params: after :meth:`load`, ``MLPParams(up (n, d), down (d, n))`` or
        ``GatedParams(gate (n, d), value (n, d), down (d, n))`` as NumPy arrays, PyTorch layout.
      biases: after :meth:`load`, role → bias: ``up`` / ``gate`` / ``value`` ``(n,)`` (the hidden
        bias ``b`` of ``σ(W_up x + b)``), ``down`` ``(d,)`` (the output bias, which passes unchanged
        through both the residual and the residual-free block and so does not enter the decision).
      tensors: role → tensor name in the file (biases as ``"<role>_bias"``; a fused
        ``gate_value`` ``(2n, d)`` is split into ``gate`` and ``value`` on :meth:`load`).
      fused: ``"gate-value"`` / ``"value-gate"``: the order of a fused tensor, else ``None``.
      residual: ``True`` / ``False`` when a graph (ONNX) shows whether the block's input is added
        to its output; ``None`` for files without a graph.
      unread: 1-D tensors beside the block of shape ``(n,)`` or ``(d,)`` that no name rule read
        as its bias (``weights.check`` will not claim a bias-free answer while one is left).
    """

    path: object
    layer: int
    name: str
    convention: str
    gated: bool
    d: int
    n: int
    dtype: str
    activation: str
    activation_source: str
    tensors: dict[str, str]
    transposed: bool
    fused: str | None = None
    residual: bool | None = None
    unread: tuple[str, ...] = ()
    params: object = None
    biases: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    _ckpt: formats.Checkpoint | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def hidden_bias(self) -> np.ndarray | None:
        """The hidden bias ``b`` ``(n,)`` of an ungated block, or ``None`` when the file has none."""
        return self.biases.get("up")

    @property
    def bias_names(self) -> dict[str, str]:
        """role → tensor name of the biases the file holds for this block."""
        return {k[: -len("_bias")]: v for k, v in self.tensors.items() if k.endswith("_bias")}

    def load(self) -> Block:
        """This block with ``params`` and ``biases`` read, in the stored dtype (GGUF and ONNX integers
        with their scale dequantised); a tensor read as integers (or booleans) is a ``ValueError``
        naming it (:func:`integer_message`), never read as weights or biases."""
        if self.params is not None:
            return self
        where = f"{printable(self.path)}: {printable(self.name, 120) or 'block'}"
        arrays, biases = {}, {}
        for key, tname in self.tensors.items():
            raw = self._ckpt.tensors[tname].load()
            a = np.asarray(raw)
            if a.dtype.kind in "iub":  # never weights: dequantised types come back as floats
                raise ValueError(f"{where}: {integer_message(key, tname, a.dtype)}")
            if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
                raise ValueError(f"{where}: {printable(tname, 80)} must hold real numbers, got dtype {a.dtype}")
            if not _finite(a, formats.watch(raw)):
                raise ValueError(f"{where}: {printable(tname, 80)} contains NaN or inf")
            if key.endswith("_bias"):
                biases[key[: -len("_bias")]] = a
            else:
                arrays[key] = a.T if self.transposed else a
        if "gate_value" in arrays:
            first, second = np.split(arrays.pop("gate_value"), 2, axis=0)
            arrays["gate"], arrays["value"] = (first, second) if self.fused == "gate-value" else (second, first)
        if "gate_value" in biases:
            first, second = np.split(biases.pop("gate_value"), 2)
            biases["gate"], biases["value"] = (first, second) if self.fused == "gate-value" else (second, first)
        from absorbjax.models import GatedParams, MLPParams

        kind = GatedParams if self.gated else MLPParams
        return dataclasses.replace(self, params=kind(**arrays), biases=biases)


def _finite(a: np.ndarray, watch=None, rows: int = 256) -> bool:
    """Every entry finite, read in chunks of ``rows`` along the first axis (a memory-mapped matrix is
    never copied whole, nor kept resident: :func:`absorbjax._resident.release`); ``watch`` (:func:`formats.watch`, for a map) runs before each chunk of a
    matrix of several, so that a file truncated meanwhile is a ``ValueError``, not ``SIGBUS`` (one
    chunk is read just after the map was made, which checked the file's size)."""
    if a.ndim < 2 or a.shape[0] <= rows:
        return bool(np.all(np.isfinite(a)))
    for s in range(0, a.shape[0], rows):
        if watch is not None:
            watch()
        ok = np.all(np.isfinite(a[s : s + rows]))
        release(a[s : s + rows])  # a map's pages read: not kept resident
        if not ok:
            return False
    return True


def _fuse(g: conventions.Group, fused: str | None) -> tuple[conventions.Group, str | None]:
    """The group with its ``up`` read as a fused ``gate_value`` when the caller declared one."""
    if "gate_value" in g.weights:
        return g, fused or "gate-value"  # a fused convention (Phi-3: gate first)
    if fused is None or g.convention.gated:
        return g, None
    conv = g.convention
    roles = {("gate_value" if r == "up" else r): sfx for r, sfx in conv.roles.items()}
    fconv = conventions.Convention(conv.name + "-fused", roles, gated=True, transposed=conv.transposed)
    rename = {"up": "gate_value"}
    return dataclasses.replace(
        g,
        convention=fconv,
        weights={rename.get(r, r): t for r, t in g.weights.items()},
        biases={rename.get(r, r): t for r, t in g.biases.items()},
    ), fused


def _layout(ckpt, g: conventions.Group, transpose: bool, allow_narrow: bool):
    """``(d, n, transposed)`` from the stored shapes, or a one-line ``ValueError``."""
    conv = g.convention
    where = f"{printable(ckpt.path)}: {printable(g.prefix, 120) or 'block'}"
    flip = conv.transposed != transpose
    _real_dtypes(ckpt, g, where)
    shapes = {}
    for role, tname in g.weights.items():
        shape = ckpt.tensors[tname].shape
        if len(shape) != 2:
            raise ValueError(f"{where}: {printable(tname, 80)} must be a 2-D matrix, got shape {shape}")
        shapes[role] = shape[::-1] if flip else shape
    layout = "(in, out), transposed" if flip else "(out, in), PyTorch"
    n, d = shapes[conv.key]
    if conv.key == "gate_value":
        n //= 2
    for role in conv.roles:
        want = (d, n) if role == "down" else (2 * n, d) if role == "gate_value" else (n, d)
        if shapes[role] != want:
            hint = (
                "; it fits transposed, so the file mixes layouts: store every matrix the same way"
                if shapes[role][::-1] == want
                else ""
            )
            if role == "down" and shapes[role] == (d, n // 2) and n % 2 == 0:
                hint = (
                    "; the up tensor may stack two matrices: declare a fused gate/value with --fused "
                    "gate-value or value-gate (fused=)"
                )
            raise ValueError(
                f"{where}: {printable(g.weights[role], 80)} has shape {shapes[role]}, expected {want} to match "
                f"{printable(g.weights[conv.key], 80)} in layout {layout}{hint}"
            )
    if n < d and not allow_narrow:
        flag = "without --transpose (transpose=False)" if transpose else "with --transpose (transpose=True)"
        raise ValueError(
            f"{where}: width n = {n} < d = {d} in layout {layout}, as a matrix stored the other way "
            f"round gives (Flax/JAX store (in, out)); read it {flag}, or pass --allow-narrow "
            "(allow_narrow=True) if the block really is narrower than its input"
        )
    for role, tname in g.biases.items():
        shape = ckpt.tensors[tname].shape
        want = (d,) if role == "down" else (2 * n,) if role == "gate_value" else (n,)
        if shape != want:
            raise ValueError(f"{where}: bias {printable(tname, 80)} has shape {shape}, expected {want}")
    return d, n, flip


_FLOATS = ("float16", "float32", "float64", "bfloat16")
INTEGERS = re.compile(r"u?int\d+|bool|BOOL|[IU]\d+")  # stored dtypes of integers (NumPy, safetensors, GGUF)


@functools.cache
def _gguf_types() -> frozenset[str]:
    """The GGUF types ``gguf.quants.dequantize`` reads as real numbers: floats and block types
    (Q4_0, Q8_0, Q4_K, …), not the integer types I8–I64."""
    import gguf

    return frozenset(t.name for t in gguf.GGMLQuantizationType if not INTEGERS.fullmatch(t.name))


def _is_float(dtype: str, fmt: str) -> bool:
    """Whether a stored dtype is read as real numbers: a float type, ONNX integers with their scale
    (dequantised exactly to float64 by weights._onnxquant, dtype ``"int8 (dequantised)"``), or, in a
    GGUF file (or an index with GGUF shards), a GGUF float or block type; never an integer type,
    whatever the container says it is."""
    if dtype in _FLOATS or ("onnx" in fmt and dtype.endswith(" (dequantised)")):
        return True
    return "gguf" in fmt and dtype in _gguf_types()


def integer_message(key: str, tname: str, dtype) -> str:
    """Why the tensor ``tname`` (role ``key`` of a block), stored as integers, is refused."""
    what = "a bias" if key.endswith("_bias") else "weights"
    return (
        f"tensor {printable(tname, 80)} ({what}) is stored as {printable(dtype, 40)}: integers are never read "
        "as weights or biases (ONNX int8 weights with their scale, and GGUF block types, are dequantised); "
        "check a float export of the model"
    )


def _real_dtypes(ckpt, g: conventions.Group, where: str) -> None:
    """``ValueError`` naming the first weight or bias of the group ``g`` whose stored dtype is not
    read as real numbers (:func:`_is_float`): integers with :func:`integer_message`."""
    roles = [(r, t) for r, t in g.weights.items()] + [(f"{r}_bias", t) for r, t in g.biases.items()]
    for key, tname in roles:
        dtype = str(ckpt.tensors[tname].dtype)
        if _is_float(dtype, ckpt.format):
            continue
        if INTEGERS.fullmatch(dtype):
            raise ValueError(f"{where}: {integer_message(key, tname, dtype)}")
        raise ValueError(
            f"{where}: {printable(tname, 80)} is stored as {printable(dtype, 40)}, not as float weights; "
            "absorbjax reads float16/32/64 and bfloat16 (and GGUF block types, ONNX int8 with its scale); "
            "check a float export of the model"
        )


@dataclasses.dataclass(frozen=True)
class Model:
    """What :func:`scan` found in a checkpoint: ``blocks`` in file order, and ``unused``: every
    tensor no block uses, name (printable, as read) → shape (attention, norms, embeddings, …)."""

    path: object
    format: str
    blocks: list[Block]
    unused: dict[str, tuple[int, ...]]

    def __bool__(self):
        raise TypeError("a Model is not a truth value; read model.blocks")


def _groups(ckpt) -> list[conventions.Group]:
    """Candidate blocks: from the graph (ONNX) or by names; refusals for quantised or no blocks, or
    more than :func:`limits.max_blocks` of them (before a block is laid out or built)."""
    quant = ckpt.metadata.get("quantisation") or conventions.quantisation(ckpt.tensors)
    if ckpt.graph_blocks is not None:
        found = [
            conventions.Group(
                b["prefix"],
                conventions.Convention(
                    "onnx", {r: r for r in b["weights"]}, gated="gate" in b["weights"], transposed=b["transposed"]
                ),
                b["weights"],
                b["biases"],
                b["activation"],
                b["residual"],
            )
            for b in ckpt.graph_blocks
        ]
        incomplete = []
    else:
        found, incomplete = conventions.group(ckpt.tensors)
    if quant and (not found or ckpt.graph_blocks is None):
        raise ValueError(
            f"{printable(ckpt.path)}: the MLP weights are quantised ({quant}), which absorbjax does not "
            "dequantise; check a float (fp32/fp16/bf16) export of the model, or GGUF"
        )
    broken = [g for g in incomplete if len(g.weights) >= 2 or not found]
    if broken:
        g = broken[0]
        raise ValueError(
            f"{printable(ckpt.path)}: {g.convention.name} block {printable(g.prefix, 120) or '(top level)'} needs "
            f"{[g.full(r) for r in g.convention.roles]}, missing {g.missing}"
        )
    if not found:
        some = sorted(ckpt.tensors)
        listed = ", ".join(printable(k, 80) for k in some[:6]) + (f" and {len(some) - 6} more" if len(some) > 6 else "")
        what = (
            "no MatMul → activation → MatMul chain with weight initializers in the graph"
            if ckpt.graph_blocks is not None
            else "expected BERT intermediate.dense/output.dense, GPT-2 mlp.c_fc/mlp.c_proj, LLaMA "
            "mlp.gate_proj/up_proj/down_proj, fc1/fc2, GGUF ffn_up/ffn_down, or up/down (gate/value/down)"
        )
        raise ValueError(f"{printable(ckpt.path)}: no MLP block found; {what}; found {listed or 'no tensors'}")
    limits.count(f"{printable(ckpt.path)}: the MLP blocks of the file", len(found), limits.max_blocks())
    return found


def _candidates(ckpt) -> dict[str, list[str]]:
    """1-D tensors that may be biases no rule read, by the prefixes they sit under: not norm-like,
    not the bias of a matrix of the file (``attention.dense.bias`` beside ``attention.dense.weight``).
    Built once per file, so that finding a block's candidates costs its own, not blocks × tensors."""
    owners = {conventions.split_name(k)[0] for k, t in ckpt.tensors.items() if len(t.shape) >= 2}

    def norm_like(k: str) -> bool:  # 1-D weights and scales are normalisation parameters
        return (
            "norm" in k.lower() or "ln_" in k.lower() or k.endswith((".weight", "_weight", ".scale", "gamma", "beta"))
        )

    by_prefix: dict[str, list[str]] = {}
    for k, t in ckpt.tensors.items():
        if len(t.shape) != 1 or norm_like(k) or conventions.split_name(k)[0] in owners:
            continue
        parts = k.split(".")
        by_prefix.setdefault("", []).append(k)
        for i in range(1, len(parts)):
            by_prefix.setdefault(".".join(parts[:i]), []).append(k)
    return by_prefix


def _unread(ckpt, candidates: dict, prefix: str, used: set, d: int, n: int) -> tuple[str, ...]:
    """1-D tensors of shape ``(n,)``/``(d,)`` under ``prefix`` that are not used and are not the
    bias of another matrix: possible biases of this block under a name no rule reads."""
    return tuple(
        sorted(
            k for k in candidates.get(prefix, ()) if k not in used and ckpt.tensors[k].shape in ((n,), (d,), (2 * n,))
        )
    )


def _graph_activations(ckpt, groups, gated: bool, activation: str | None) -> list[tuple[str, str]]:
    """``(name, source)`` for each block of an ONNX graph: what its nodes compute (source ``onnx
    graph``); an ``activation`` argument or a ``config.json`` must name the same for every block,
    else ``ValueError`` (the graph is what runs)."""
    from absorbjax import activations

    graph = [g.activation for g in groups]
    probe = dataclasses.replace(ckpt, metadata={**ckpt.metadata, "activation": graph[0]})
    name, source = _activation.resolve(probe, gated, activation)
    if source == "file":  # nothing declared beside the graph
        return [(activations.get(a).name, "onnx graph") for a in graph]
    for g, a in zip(groups, graph):
        if activations.get(a).name != name:
            raise ValueError(
                f"{printable(ckpt.path)}: {source} names {name}, but the graph's block {printable(g.prefix, 120) or '(top level)'} computes "
                f"{activations.get(a).name}; refusing to decide a block as an activation its graph does not compute"
            )
    return [(name, source)] * len(groups)


def scan(path, activation: str | None = None, *, layout: Layout = Layout()) -> Model:
    """Every MLP block in ``path`` (a file or model directory, see :mod:`~absorbjax.weights._formats`),
    weights not yet read, and the tensors no block uses.

    Args:
      path: the checkpoint file or model directory.
      activation: registered name; else from ``config.json`` beside the file, GGUF metadata, an
        ONNX graph, a CTranslate2 scalar or an ``activation`` entry
        (:func:`absorbjax.weights._activation.resolve`); else ``ValueError``.
      layout: how the file lays its blocks out, a :class:`Layout` (``transpose``, ``allow_narrow``,
        ``fused``): ``scan(path, layout=Layout(transpose=True))``.

    Raises ``ValueError`` naming the file: no block, an incomplete block, quantised MLP weights,
    a weight or bias stored as integers (naming it; ONNX integers with their scale and GGUF block
    types are dequantised, not integers), shapes that do not fit (or fit only transposed), ``n <
    d``, biases of the wrong shape, no or a mismatched activation, a ``config.json`` that resolves
    outside the checkpoint's folder, more tensors or blocks than the budget allows
    (:func:`~absorbjax.weights._limits.max_tensors`, :func:`~absorbjax.weights._limits.max_blocks`).
    """
    ckpt = formats.read(path)
    if activation is None:  # config.json will be read: it must be the folder's own
        formats.config_inside(ckpt.path)
    found = [_fuse(g, layout.fused) for g in _groups(ckpt)]
    kinds = {g.convention.gated for g, _ in found}
    if len(kinds) > 1:
        raise ValueError(
            f"{printable(ckpt.path)}: the file mixes gated and ungated blocks; check them one file at a time"
        )
    gated = kinds.pop()
    if ckpt.graph_blocks is not None:
        acts = _graph_activations(ckpt, [g for g, _ in found], gated, activation)
    else:
        acts = [_activation.resolve(ckpt, gated, activation)] * len(found)
    laid = [(g, order, *_layout(ckpt, g, layout.transpose, layout.allow_narrow)) for g, order in found]
    used = {t for g, *_ in laid for t in (*g.weights.values(), *g.biases.values())}
    used |= {t for b in ckpt.graph_blocks or () for t in b.get("uses", ())}  # scales, zero points
    out, candidates = [], (_candidates(ckpt) if ckpt.graph_blocks is None else {})
    for layer, ((g, order, d, n, flip), (name, source)) in enumerate(zip(laid, acts)):
        tensors = dict(g.weights) | {f"{r}_bias": t for r, t in g.biases.items()}
        dtypes = sorted({ckpt.tensors[t].dtype for t in g.weights.values()})
        unread = _unread(ckpt, candidates, g.prefix, used, d, n) if g.convention.name != "onnx" else ()
        out.append(
            Block(
                ckpt.path,
                layer,
                g.prefix,
                g.convention.name,
                g.convention.gated,
                d,
                n,
                "/".join(dtypes),
                name,
                source,
                tensors,
                flip,
                order,
                g.residual,
                unread if g.convention.name != "onnx" else (),
                _ckpt=ckpt,
            )
        )
    unused = {k: t.shape for k, t in ckpt.tensors.items() if k not in used}
    return Model(ckpt.path, ckpt.format, out, unused)


def blocks(path, activation: str | None = None, *, layout: Layout = Layout()) -> list[Block]:
    """Every MLP block in ``path``, weights not yet read: :func:`scan`'s ``blocks``, with its arguments."""
    return scan(path, activation, layout=layout).blocks


def load_block(path, activation: str | None = None, *, layer: int | None = None, layout: Layout = Layout()) -> Block:
    """One block, read: the only one in ``path``, or ``layer`` (its position, see :func:`blocks`);
    ``layout`` as for :func:`scan`."""
    found = blocks(path, activation, layout=layout)
    if layer is None:
        if len(found) > 1:
            raise ValueError(
                f"{printable(found[0].path)}: the file holds {len(found)} MLP blocks (layers 0–"
                f"{len(found) - 1}); choose one with layer= (--layer)"
            )
        layer = 0
    if not (isinstance(layer, (int, np.integer)) and 0 <= layer < len(found)):
        raise ValueError(f"{printable(found[0].path)}: layer must be one of 0–{len(found) - 1}, got {layer!r}")
    return found[layer].load()


def load_skip(path) -> np.ndarray:
    """The skip matrix ``A`` ``(d, d)``: a file with one array or an entry ``skip``. Conditioning
    is checked where it is used (:func:`absorbjax.condition.find_absorbing_set`)."""
    ckpt = formats.read(path)
    if "skip" in ckpt.tensors:
        t = ckpt.tensors["skip"]
    elif len(ckpt.tensors) == 1:
        (t,) = ckpt.tensors.values()
    else:
        raise ValueError(
            f"{printable(ckpt.path)}: expected one array or an entry 'skip', found {', '.join(printable(k, 80) for k in sorted(ckpt.tensors)[:6])}"
        )
    A = np.asarray(t.load())
    what = t.name or "the array"
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{printable(ckpt.path)}: the skip matrix must be square (d, d), got shape {A.shape}")
    if A.dtype.kind not in "fiu":
        raise ValueError(f"{printable(ckpt.path)}: {what} must hold real numbers, got dtype {A.dtype}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{printable(ckpt.path)}: {what} contains NaN or inf")
    return A
