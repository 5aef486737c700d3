"""Integer weights of an ONNX graph dequantised exactly: the graph rewritten so that each weight
product reads one float64 tensor ``W = scale × (q − zero_point)``.

Patterns (``q`` an int8/uint8/int16/uint16 initializer, ``scale`` a float32/float16/bfloat16
initializer, ``zero_point`` an initializer):

* ``DequantizeLinear(q, scale[, zero_point])`` feeding a ``MatMul``/``Gemm`` weight: per tensor, or
  per axis (``axis``, a 1-D scale); blocked (``block_size``) refused;
* ``Cast(q) → Mul(scale)``, with a zero point ``Cast(q) → Sub(zp) → Mul(scale)`` (``zp`` integral)
  and an offset ``… → Mul → Sub(o)`` (refused unless the subtraction is exact in float64);
* onnxruntime ``quantize_dynamic``'s ``MatMul``: ``DynamicQuantizeLinear(x)`` →
  ``MatMulInteger(x_q, q, x_zp, zero_point)`` → ``Cast`` to float → ``Mul`` by
  ``Mul(x_scale, scale)``, read as ``MatMul(x, W)``; the run-time quantisation of ``x`` is not part
  of the block (:data:`NOTE`). Its input quantised otherwise (a fixed ``QuantizeLinear``, which
  clips) is refused naming the node.

``scale × (q − zero_point)`` is exact in float64: ``|q − zero_point| < 2¹⁷`` and the scale has at
most 24 significant bits. ``q`` used as weights without a scale (a bare ``Cast``) is refused naming
the tensor. Memory is checked against the budget (16 bytes an element: the float64 result and the
stored integers) before anything is read.
"""

from __future__ import annotations

import collections
import math

import numpy as np

from absorbjax.weights import _limits as limits
from absorbjax.weights._onnxact import clean, node_label

NOTE = (
    "read as scale × (q − zero_point), exactly, in float64, and the block decided on those weights; "
    "activation quantisation at run time (DynamicQuantizeLinear) is not part of the block"
)


def note(dtype: str) -> str | None:
    """What a row whose weights were stored as integers says (``None`` for float weights)."""
    ints = [d[: -len(" (dequantised)")] for d in dtype.split("/") if d.endswith(" (dequantised)")]
    return f"weights dequantised from {'/'.join(ints)}: {NOTE}" if ints else None


_INTS = {"int8", "uint8", "int16", "uint16"}
_SCALES = {"float32", "float16", "bfloat16"}


def _dtype(t) -> str:
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).name
    except (KeyError, TypeError, ValueError):
        return f"type {t.data_type}"


def _attr(node, name, default):
    a = next((a for a in node.attribute if a.name == name), None)
    return default if a is None else a.i if a.type == 2 else a.f if a.type == 1 else a


class _Spec:
    """One dequantised weight: ``q``, ``scale``, ``zp`` (or ``None``), ``offset`` (or ``None``)
    initializers, ``axis`` of a 1-D scale (``None``: broadcast as stored), ``how`` (the pattern)."""

    def __init__(self, how, q, scale, zp=None, axis=None, offset=None):
        self.how, self.q, self.scale, self.zp, self.axis, self.offset = how, q, scale, zp, axis, offset

    @property
    def key(self):
        return (
            self.q.name,
            self.scale.name,
            getattr(self.zp, "name", None),
            self.axis,
            getattr(self.offset, "name", None),
        )

    @property
    def companions(self) -> list[str]:
        return [t.name for t in (self.scale, self.zp, self.offset) if t is not None]

    @property
    def dtype(self) -> str:
        return f"{_dtype(self.q)} (dequantised)"


class _Graph:
    def __init__(self, nodes, inits):
        self.inits, self.producer = inits, {}
        self.consumers = collections.defaultdict(list)
        for n in nodes:
            for o in n.output:
                if o:
                    self.producer[o] = n
            for i in dict.fromkeys(n.input):
                self.consumers[i].append(n)

    def init(self, name, what, where, kinds):
        t = self.inits.get(name)
        if t is None:
            raise ValueError(f"{where}: its {what} '{clean(name)}' is not an initializer; refusing to guess it")
        if _dtype(t) not in kinds:
            raise ValueError(
                f"{where}: its {what} '{clean(name)}' is {_dtype(t)}, not one of {', '.join(sorted(kinds))}"
            )
        return t

    def int_init(self, name):
        t = self.inits.get(name)
        return t if t is not None and _dtype(t) in _INTS | {"int32", "int64", "uint32", "uint64"} else None

    def above(self, name: str, depth: int = 4) -> list:
        """The nodes that produce ``name``, ``depth`` levels up."""
        node = self.producer.get(name)
        if node is None or depth == 0:
            return []
        return [node, *(p for i in node.input for p in self.above(i, depth - 1))]


def _shape_ok(small, q, axis) -> bool:
    n = math.prod(small.dims)
    if n == 1:
        return True
    if axis is not None:
        return len(small.dims) == 1 and small.dims[0] == q.dims[axis]
    if len(small.dims) > len(q.dims):
        return False
    return all(s in (1, w) for s, w in zip(small.dims[::-1], q.dims[::-1]))


def _dequantize_linear(g: _Graph, node) -> _Spec | None:
    if node.input[0] not in g.inits:
        return None  # the dequantisation of an activation, not of weights
    where = node_label(node)
    q = g.init(node.input[0], "input", where, _INTS)
    scale = g.init(node.input[1], "scale", where, _SCALES) if len(node.input) > 1 else None
    zp = g.init(node.input[2], "zero point", where, {_dtype(q)}) if len(node.input) > 2 and node.input[2] else None
    if scale is None:
        raise ValueError(f"{where} has no scale")
    if _attr(node, "block_size", 0):
        raise ValueError(f"{where} is blocked (block_size); absorbjax dequantises per tensor or per axis only")
    axis = _attr(node, "axis", 1)
    if not -len(q.dims) <= axis < len(q.dims):
        raise ValueError(f"{where}: axis {axis} does not fit the shape {tuple(q.dims)}")
    axis %= len(q.dims)
    for t in (scale, zp):
        if t is not None and not _shape_ok(t, q, axis):
            raise ValueError(
                f"{where}: '{clean(t.name)}' of shape {tuple(t.dims)} is neither per tensor nor per axis {axis}"
            )
    return _Spec("DequantizeLinear", q, scale, zp, axis)


def _cast_mul(g: _Graph, node) -> _Spec | None:
    """``Mul(Cast(q) [− zp], scale) [− offset]``, either operand order; ``None`` if no integer
    initializer is in sight."""
    offset = None
    if node.op_type == "Sub" and node.input[1] in g.inits and g.producer.get(node.input[0]) is not None:
        offset, node = g.inits[node.input[1]], g.producer[node.input[0]]
    if node.op_type != "Mul" or len(node.input) != 2:
        return None
    where = node_label(node)
    for a, b in (node.input, node.input[::-1]):
        src = g.producer.get(a)
        zp = None
        if src is not None and src.op_type == "Sub" and len(src.input) == 2:
            zp_name, src = src.input[1], g.producer.get(src.input[0])
            zsrc = g.producer.get(zp_name)
            if zsrc is not None and zsrc.op_type == "Cast" and zsrc.input[0] in g.inits:
                zp_name = zsrc.input[0]
            if zp_name not in g.inits:
                raise ValueError(f"{where}: the zero point '{clean(zp_name)}' is not an initializer")
            zp = g.inits[zp_name]
        if src is None or src.op_type != "Cast" or src.input[0] not in g.inits or g.int_init(src.input[0]) is None:
            continue
        q = g.init(src.input[0], "integer weights", where, _INTS)
        scale = g.init(b, "scale", where, _SCALES)
        for t in (scale, zp, offset):
            if t is not None and not _shape_ok(t, q, None):
                raise ValueError(
                    f"{where}: '{clean(t.name)}' of shape {tuple(t.dims)} does not broadcast to {tuple(q.dims)}"
                )
        if offset is not None and _dtype(offset) not in _SCALES:
            raise ValueError(f"{where}: the offset '{clean(offset.name)}' is {_dtype(offset)}, not a float")
        return _Spec("Cast → Mul", q, scale, zp, None, offset)
    return None


def _weight(g: _Graph, name: str) -> _Spec | None:
    """The dequantisation that produces the weight tensor ``name``; ``None`` when it comes from no
    integer initializer; ``ValueError`` for integers used another way."""
    node = g.producer.get(name)
    if node is None:
        return None
    if node.op_type == "DequantizeLinear":
        return _dequantize_linear(g, node)
    if node.op_type == "Cast" and node.input and g.int_init(node.input[0]) is not None:
        t = g.inits[node.input[0]]
        raise ValueError(
            f"the weights '{clean(t.name)}' are {_dtype(t)} used as floats without a scale ({node_label(node)}); "
            "refusing to guess their dequantisation"
        )
    if node.op_type in ("Mul", "Sub"):
        return _cast_mul(g, node)
    return None


def _matmul_integer(g: _Graph, node):
    """``(spec, x, y, pattern nodes, shared nodes)`` of onnxruntime's dynamic-quantised MatMul."""
    where = node_label(node)
    ins = list(node.input) + [""] * (4 - len(node.input))
    q = g.init(ins[1], "weight input", where, {"int8", "uint8"})
    dql = g.producer.get(ins[0])
    if dql is None or dql.op_type != "DynamicQuantizeLinear" or len(dql.output) < 3:
        what = node_label(dql) if dql is not None else clean(ins[0])
        raise ValueError(
            f"{where}: its input is quantised by {what}, not by DynamicQuantizeLinear; a fixed activation "
            "quantisation clips, refusing the block"
        )
    if ins[2] != dql.output[2]:
        raise ValueError(f"{where}: its input zero point is not the one DynamicQuantizeLinear computed")
    zp = g.init(ins[3], "weight zero point", where, {_dtype(q)}) if ins[3] else None
    users = g.consumers.get(node.output[0], [])
    cast = users[0] if len(users) == 1 else None
    if cast is None or cast.op_type != "Cast" or _attr(cast, "to", 0) != 1:
        raise ValueError(f"{where}: its output is not cast to float32 once")
    users = g.consumers.get(cast.output[0], [])
    mul = users[0] if len(users) == 1 and users[0].op_type == "Mul" and len(users[0].input) == 2 else None
    if mul is None:
        raise ValueError(f"{where}: its float output is not multiplied by the scales once")
    other = mul.input[1] if mul.input[0] == cast.output[0] else mul.input[0]
    smul = g.producer.get(other)
    scale_name = None
    if smul is not None and smul.op_type == "Mul" and len(smul.input) == 2 and dql.output[1] in smul.input:
        scale_name = smul.input[1] if smul.input[0] == dql.output[1] else smul.input[0]
    if scale_name is None or scale_name == dql.output[1]:
        raise ValueError(f"{where}: its output is not scaled by the input's scale times the weight's scale")
    scale = g.init(scale_name, "weight scale", where, _SCALES)
    for t in (scale, zp):
        if t is not None and not _shape_ok(t, q, 1):
            raise ValueError(
                f"{where}: '{clean(t.name)}' of shape {tuple(t.dims)} is neither per tensor nor per column"
            )
    return _Spec("MatMulInteger", q, scale, zp, 1), dql.input[0], mul.output[0], (node, cast, mul), (smul, dql)


def rewrite(nodes, inits):
    """``(nodes, specs)``: the graph's nodes with each recognised weight dequantisation replaced by
    a ``MatMul``/``Gemm`` reading the integer initializer's name, and ``specs``: that name →
    :class:`_Spec`. Integer weights in any other form raise ``ValueError`` naming them."""
    from onnx import NodeProto, helper

    g = _Graph(nodes, inits)
    specs, replace, dropped, spare = {}, {}, set(), []

    def add(spec, where):
        old = specs.get(spec.q.name)
        if old is not None and old.key != spec.key:
            raise ValueError(f"{where}: the weights '{clean(spec.q.name)}' are dequantised twice, differently")
        specs[spec.q.name] = spec

    for n in nodes:
        if n.op_type in ("MatMul", "Gemm") and n.domain in ("", "ai.onnx") and len(n.input) >= 2:
            if n.input[1] in inits or (spec := _weight(g, n.input[1])) is None:
                continue
            add(spec, node_label(n))
            new = NodeProto()
            new.CopyFrom(n)
            new.input[1] = spec.q.name
            replace[id(n)] = new
            spare += g.above(n.input[1])
        elif n.op_type == "MatMulInteger" and n.domain in ("", "ai.onnx"):
            if len(n.input) < 2 or n.input[1] not in inits:
                continue  # activations times activations: no weights
            spec, x, y, parts, shared = _matmul_integer(g, n)
            add(spec, node_label(n))
            replace[id(parts[2])] = helper.make_node("MatMul", [x, spec.q.name], [y], name=n.name)
            dropped.update(id(p) for p in parts[:2])
            spare += shared
    out = [replace.get(id(n), n) for n in nodes if id(n) not in dropped]
    spare_ids = {id(n) for n in spare}
    while True:  # the patterns' own nodes, once nothing reads them
        read = {i for n in out for i in n.input}
        gone = {id(n) for n in out if id(n) in spare_ids and not any(o in read for o in n.output if o)}
        if not gone:
            return out, specs
        out = [n for n in out if id(n) not in gone]


def dequantise(spec: _Spec, base):
    """``scale × (q − zero_point) [− offset]`` in float64, the budget checked first."""
    from onnx import numpy_helper

    limits.array_bytes(tuple(int(s) for s in spec.q.dims), 16, f"dequantising {clean(spec.q.name)}")
    ndim = len(spec.q.dims)

    def shaped(t):
        a = np.asarray(numpy_helper.to_array(t, base_dir=str(base)))
        if a.size == 1:
            return a.astype(np.float64).reshape(())
        if spec.axis is not None:
            shape = [1] * ndim
            shape[spec.axis] = a.size
            return a.astype(np.float64).reshape(shape)
        return a.astype(np.float64)

    w = np.asarray(numpy_helper.to_array(spec.q, base_dir=str(base))).astype(np.float64)
    if spec.zp is not None:
        zp = shaped(spec.zp)
        if not np.all(zp == np.round(zp)) or np.any(np.abs(zp) >= 1 << 16):
            raise ValueError(f"the zero point '{clean(spec.zp.name)}' is not an integer below 2^16")
        w -= zp
    w *= shaped(spec.scale)
    if spec.offset is not None:
        o = -shaped(spec.offset)
        s = w + o  # exact unless TwoSum's error term is nonzero
        bb = s - w
        err = (w - (s - bb)) + (o - bb)
        if np.any(err != 0):
            raise ValueError(f"subtracting '{clean(spec.offset.name)}' is not exact in float64; refusing to round")
        w = s
    return w
