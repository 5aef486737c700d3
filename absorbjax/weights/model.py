"""Every MLP block of a checkpoint, layer by layer: shapes and layout checked from the headers,
weights and biases read on demand."""

from __future__ import annotations

import dataclasses

import numpy as np

from absorbjax.models import GatedParams, MLPParams
from absorbjax.weights import activation as _activation
from absorbjax.weights import conventions, formats

__all__ = ["Block", "blocks", "load_block", "load_skip"]


@dataclasses.dataclass(frozen=True)
class Block:
    """One MLP block of a checkpoint.

    Attributes:
      path, layer, name: the file, the block's position in the file (0, 1, …, natural order of
        names) and its name prefix (``encoder.layer.3``, ``blk.12``; ``""`` for a bare block).
      convention: naming convention (:mod:`absorbjax.weights.conventions`); gated: its kind.
      d, n: input dimension ``d`` and width ``n``.
      dtype: stored dtype of the weights (``float32``, ``Q4_1``, …).
      activation, activation_source: registered name and where it came from.
      params: after :meth:`load`, ``MLPParams(up (n, d), down (d, n))`` or
        ``GatedParams(gate (n, d), value (n, d), down (d, n))`` as NumPy arrays, PyTorch layout.
      biases: after :meth:`load`, role → bias: ``up`` / ``gate`` / ``value`` ``(n,)`` (the hidden
        bias ``b`` of ``σ(W_up x + b)``), ``down`` ``(d,)`` (the output bias, which passes unchanged
        through both the residual and the residual-free block and so does not enter the decision).
      tensors: role → tensor name in the file (biases as ``"<role>_bias"``).
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
    params: MLPParams | GatedParams | None = None
    biases: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    _ckpt: formats.Checkpoint | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def hidden_bias(self) -> np.ndarray | None:
        """The hidden bias ``b`` ``(n,)`` of an ungated block, or ``None`` when the file has none."""
        return self.biases.get("up")

    def load(self) -> Block:
        """This block with ``params`` and ``biases`` read, in the stored dtype (GGUF dequantised)."""
        if self.params is not None:
            return self
        where = f"{self.path}: {self.name or 'block'}"
        arrays, biases = {}, {}
        for key, tname in self.tensors.items():
            a = np.asarray(self._ckpt.tensors[tname].load())
            if a.dtype.kind not in "fiu" and a.dtype.name != "bfloat16":
                raise ValueError(f"{where}: {tname} must hold real numbers, got dtype {a.dtype}")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{where}: {tname} contains NaN or inf")
            if key.endswith("_bias"):
                biases[key[: -len("_bias")]] = a
            else:
                arrays[key] = a.T if self.transposed else a
        kind = GatedParams if self.gated else MLPParams
        return dataclasses.replace(self, params=kind(**arrays), biases=biases)


def _layout(ckpt, g: conventions.Group, transpose: bool, allow_narrow: bool):
    """``(d, n, transposed)`` from the stored shapes, or a one-line ``ValueError``."""
    conv = g.convention
    where = f"{ckpt.path}: {g.prefix or 'block'}"
    flip = conv.transposed != transpose
    shapes = {}
    for role, tname in g.weights.items():
        shape = ckpt.tensors[tname].shape
        if len(shape) != 2:
            raise ValueError(f"{where}: {tname} must be a 2-D matrix, got shape {shape}")
        shapes[role] = shape[::-1] if flip else shape
    layout = "(in, out), transposed" if flip else "(out, in), PyTorch"
    n, d = shapes[conv.key]
    for role in conv.roles:
        want = (d, n) if role == "down" else (n, d)
        if shapes[role] != want:
            hint = ("; it fits transposed, so the file mixes layouts: store every matrix the same way"
                    if shapes[role][::-1] == want else "")
            raise ValueError(f"{where}: {g.weights[role]} has shape {shapes[role]}, expected {want} to match "
                             f"{g.weights[conv.key]} in layout {layout}{hint}")
    if n < d and not allow_narrow:
        flag = "without --transpose (transpose=False)" if transpose else "with --transpose (transpose=True)"
        raise ValueError(
            f"{where}: width n = {n} < d = {d} in layout {layout}, as a matrix stored the other way "
            f"round gives (Flax/JAX store (in, out)); read it {flag}, or pass --allow-narrow "
            "(allow_narrow=True) if the block really is narrower than its input"
        )
    for role, tname in g.biases.items():
        shape, want = ckpt.tensors[tname].shape, (d,) if role == "down" else (n,)
        if shape != want:
            raise ValueError(f"{where}: bias {tname} has shape {shape}, expected {want}")
    return d, n, flip


def blocks(path, activation: str | None = None, *, transpose: bool = False,
           allow_narrow: bool = False) -> list[Block]:
    """Every MLP block in ``path`` (``.npz``, ``.safetensors``, ``.gguf``), weights not yet read.

    Args:
      path: the checkpoint file.
      activation: registered name; else from ``config.json`` beside the file, GGUF metadata or an
        ``activation`` entry (:func:`absorbjax.weights.activation.resolve`); else ``ValueError``.
      transpose: read every matrix the other way round from its convention's layout (Flax/JAX
        files store ``(in, out)``).
      allow_narrow: accept ``n < d`` (refused by default: the usual sign of a transposed file).

    Raises ``ValueError`` naming the file: no block, an incomplete block, shapes that do not fit
    (or fit only transposed), ``n < d``, biases of the wrong shape, no or a mismatched activation.
    """
    ckpt = formats.read(path)
    found, incomplete = conventions.group(ckpt.tensors)
    broken = [g for g in incomplete if len(g.weights) >= 2 or not found]
    if broken:
        g = broken[0]
        raise ValueError(f"{ckpt.path}: {g.convention.name} block {g.prefix or '(top level)'} needs "
                         f"{[g._full(r) for r in g.convention.roles]}, missing {g.missing}")
    if not found:
        some = sorted(ckpt.tensors)
        listed = ", ".join(some[:6]) + (f" and {len(some) - 6} more" if len(some) > 6 else "")
        raise ValueError(
            f"{ckpt.path}: no MLP block found; expected BERT intermediate.dense/output.dense, GPT-2 "
            "mlp.c_fc/mlp.c_proj, LLaMA mlp.gate_proj/up_proj/down_proj, fc1/fc2, GGUF "
            f"ffn_up/ffn_down, or up/down (gate/value/down); found {listed or 'no tensors'}"
        )
    kinds = {g.convention.gated for g in found}
    if len(kinds) > 1:
        raise ValueError(f"{ckpt.path}: the file mixes gated and ungated blocks; check them one file at a time")
    name, source = _activation.resolve(ckpt, kinds.pop(), activation)
    out = []
    for layer, g in enumerate(found):
        d, n, flip = _layout(ckpt, g, transpose, allow_narrow)
        tensors = dict(g.weights) | {f"{r}_bias": t for r, t in g.biases.items()}
        dtypes = sorted({ckpt.tensors[t].dtype for t in g.weights.values()})
        out.append(Block(ckpt.path, layer, g.prefix, g.convention.name, g.convention.gated, d, n,
                         "/".join(dtypes), name, source, tensors, flip, _ckpt=ckpt))
    return out


def load_block(path, activation: str | None = None, *, layer: int | None = None,
               transpose: bool = False, allow_narrow: bool = False) -> Block:
    """One block, read: the only one in ``path``, or ``layer`` (its position, see :func:`blocks`)."""
    found = blocks(path, activation, transpose=transpose, allow_narrow=allow_narrow)
    if layer is None:
        if len(found) > 1:
            raise ValueError(f"{found[0].path}: the file holds {len(found)} MLP blocks (layers 0–"
                             f"{len(found) - 1}); choose one with layer= (--layer)")
        layer = 0
    if not (isinstance(layer, (int, np.integer)) and 0 <= layer < len(found)):
        raise ValueError(f"{found[0].path}: layer must be one of 0–{len(found) - 1}, got {layer!r}")
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
        raise ValueError(f"{ckpt.path}: expected one array or an entry 'skip', found {sorted(ckpt.tensors)}")
    A = np.asarray(t.load())
    what = t.name or "the array"
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"{ckpt.path}: the skip matrix must be square (d, d), got shape {A.shape}")
    if A.dtype.kind not in "fiu":
        raise ValueError(f"{ckpt.path}: {what} must hold real numbers, got dtype {A.dtype}")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{ckpt.path}: {what} contains NaN or inf")
    return A
