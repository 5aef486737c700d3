"""MLP blocks of an ONNX graph, found by the graph's structure rather than by names.

Exporters name initializers as they like (``onnx::MatMul_481``), so a block is recognised by its
shape in the graph: a ``MatMul`` (or ``Gemm``) with an initializer weight ``W1`` (stored ``(in,
out)`` = ``W_upᵀ``; ``Gemm`` with ``transB=1`` stores ``(out, in)``), an optional ``Add`` of a 1-D
initializer (the hidden bias ``b``), a chain of elementwise nodes holding the activation, and a
second ``MatMul``/``Gemm`` with an initializer ``W2`` (``W_downᵀ``), an optional ``Add`` of a 1-D
initializer (the output bias ``c``) and the residual ``Add`` of the block's input. The activation
is read from the chain by exact node patterns (:mod:`~absorbjax.weights._onnxact`), never by
evaluating it: ``Relu``, ``LeakyRelu``, ``Gelu``, the ``Erf`` and ``Tanh`` GELU subgraphs PyTorch and
Hugging Face export, ``x·Sigmoid(x)``, ``Softplus``, ``HardSwish``; anything else between the two
matrices of a block with a residual ``Add`` (a ``Cast`` to an integer or a narrower type, ``Clip``/
``Min``/``Max``, an unknown op, a constant off its value, a scale) is refused naming the node. A
chain without a residual that is no activation (a classifier head) is not a block. A ``Mul``
joining a second weight ``MatMul`` of the same input is a gated block (the branch through the
activation is the gate, the other the value). Weights held in ``Constant`` nodes (paddle2onnx) are
read like initializers; integer weights (``DequantizeLinear``, ``Cast → Mul``, onnxruntime's
``MatMulInteger``) are dequantised exactly by :mod:`~absorbjax.weights._onnxquant`; other quantised
graphs (``QLinearMatMul``, ``MatMulNBits``, …) are reported as such.

A scale inside the block (a scalar ``Mul``, ``Gemm`` ``alpha``/``beta``) or ``Gemm`` ``transA``
is refused with what it is, never folded silently. The file is untrusted
(:mod:`~absorbjax.weights._limits`): an empty file says so, the file is parsed whole only within the
budget ``B`` and after its counts are read from the protobuf wire format (:func:`census`, nothing
built): at most ``B / 4096`` nodes and initializers (262,144 at 1 GiB; subgraphs and functions
included) and ``B / 256`` fields in all (:func:`caps`), else refused in one line; initializer (and
``Constant``) names and node outputs must be unique, external data must be a plain relative name
inside the model's folder (checked here, not left to the ``onnx`` package) and lie within its
file, each node is visited a bounded number of times and an elementwise node with
more than three inputs is refused.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

import numpy as np

from absorbjax.weights import _limits as limits, _onnxact as onnxact, _onnxquant as onnxquant
from absorbjax.weights._conventions import printable

ELEMENTWISE = onnxact.KNOWN
QUANTISED_OPS = {"QLinearMatMul", "MatMulInteger", "DequantizeLinear", "MatMulNBits", "DynamicQuantizeMatMul", "QGemm"}
_MAX_CHAIN = 24


_MAX_FAN_IN = 3


class _Graph:
    def __init__(self, nodes, inits, dequantised=()):
        self.inits, self.dequantised = inits, dequantised
        self.producer = {}
        self.consumers = collections.defaultdict(list)
        for node in nodes:
            for o in node.output:
                if o and o in self.producer:
                    raise ValueError(f"two nodes write the tensor '{onnxact.clean(o)}'; refusing to choose one")
                self.producer[o] = node
            if node.op_type in ELEMENTWISE and len(node.input) > _MAX_FAN_IN:
                raise ValueError(f"{onnxact.node_label(node)} has {len(node.input)} inputs (at most 3)")
            for i in dict.fromkeys(node.input):  # each node once per tensor it reads
                self.consumers[i].append(node)

    def weight(self, node):
        """``(initializer name, stored (in, out))`` of a weight ``MatMul``/``Gemm``, else ``None``."""
        if node.op_type not in ("MatMul", "Gemm") or len(node.input) < 2 or node.input[1] not in self.inits:
            return None
        if len(self.inits[node.input[1]].dims) != 2:
            return None
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return node.input[1], not trans_b

    def bias_after(self, tensor):
        """``(bias initializer, tensor after the Add)`` when ``tensor`` feeds only a bias ``Add``, or
        is the output of a ``Gemm`` with a bias ``C``."""
        node = self.producer.get(tensor)
        if node is not None and node.op_type == "Gemm" and len(node.input) > 2 and node.input[2] in self.inits:
            return node.input[2], tensor
        users = self.consumers.get(tensor, [])
        if len(users) == 1 and users[0].op_type == "Add":
            other = [i for i in users[0].input if i != tensor]
            if len(other) == 1 and other[0] in self.inits and len(self.inits[other[0]].dims) == 1:
                return other[0], users[0].output[0]
        return None, tensor

    def bias_before(self, tensor):
        """``(bias, matmul node)`` when ``tensor`` is a weight product, possibly plus a bias."""
        node = self.producer.get(tensor)
        if node is None:
            return None, None
        if node.op_type == "Add":
            for j, i in enumerate(node.input):
                other = node.input[1 - j] if len(node.input) == 2 else None
                prod = self.producer.get(i)
                if other in self.inits and prod is not None and self.weight(prod):
                    return other, prod
            return None, None
        return (None, node) if self.weight(node) else (None, None)


def _chain(g: _Graph, up, start: str):
    """From the pre-activation ``start``: ``(chain nodes, value matmul, value tensor, down matmul)``
    or ``None``."""
    x = up.input[0]
    frontier, seen, nodes, ids, value, value_in, downs = [start], {start}, [], set(), None, None, []
    while frontier:
        t = frontier.pop()
        for node in g.consumers.get(t, []):
            if g.weight(node):
                if node.input[0] == t:
                    downs.append(node)
                    if len(downs) > 1:
                        return None
                continue
            if node.op_type not in ELEMENTWISE or len(nodes) >= _MAX_CHAIN:
                return None
            if id(node) not in ids:
                ids.add(id(node))
                nodes.append(node)
            for i in node.input:
                if i in seen or i in g.inits or i not in g.producer or g.producer[i].op_type == "Constant":
                    continue
                _, mm = g.bias_before(i)
                if node.op_type == "Mul" and mm is not None and mm is not up and mm.input[0] == x:
                    value, value_in = mm, i
                    seen.add(i)
            for o in node.output:
                if o not in seen:
                    seen.add(o)
                    frontier.append(o)
    if len(downs) != 1 or not nodes:
        return None
    return nodes, value, value_in, downs[0]


def _constant(g: _Graph, name: str):
    """``(value, dtype name)`` of a scalar constant (a one-element initializer or ``Constant``
    node, not dequantised weights), else ``None``."""
    from onnx import numpy_helper

    if name in g.inits and name not in g.dequantised:
        t = g.inits[name]
        if math.prod(t.dims) != 1 or t.data_location == 1:
            return None
        a = np.asarray(numpy_helper.to_array(t))
        return float(np.asarray(a, np.float64).ravel()[0]), a.dtype.name
    node = g.producer.get(name)
    if node is not None and node.op_type == "Constant":
        attr = next((a for a in node.attribute if a.name == "value_float"), None)
        if attr is not None:
            return float(attr.f), "float32"
    return None


def _attr(node, name, default):
    a = next((a for a in node.attribute if a.name == name), None)
    if a is None:
        return default
    return a.s.decode() if a.type == 3 else a.f if a.type == 1 else a.i


def _gemm_plain(node, where: str) -> None:
    if node.op_type != "Gemm":
        return
    alpha, beta, trans_a = _attr(node, "alpha", 1.0), _attr(node, "beta", 1.0), _attr(node, "transA", 0)
    if alpha != 1.0 or beta != 1.0 or trans_a:
        raise ValueError(
            f"{where}: Gemm node '{onnxact.clean(node.name)}' has alpha={alpha:g}, beta={beta:g}, transA={trans_a}; "
            "absorbjax reads Gemm only as x·W + b (alpha = beta = 1, transA = 0)"
        )


def _residual(g: _Graph, x: str, out: str) -> bool:
    for node in g.consumers.get(out, []):
        if node.op_type == "Add":
            other = [i for i in node.input if i != out]
            if not other:
                continue
            prod = g.producer.get(x)
            if other[0] == x or (prod is not None and prod.input and prod.input[0] == other[0]):
                return True
    return False


def _prefix(names: list[str], fallback: str) -> str:
    parts = [n.strip("/").split("/") for n in names if n]
    if len(parts) != len(names) or not parts:
        return fallback
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return "/".join(common) or fallback


def _dtype_of(g: _Graph, name: str) -> str | None:
    """The float type a weight product with weights ``name`` computes in."""
    spec = g.dequantised.get(name) if g.dequantised else None
    t = spec.scale if spec is not None else g.inits.get(name)
    return None if t is None else onnxquant._dtype(t)


def _blocks(g: _Graph, nodes):
    """One dict a block: roles → initializer names, biases, layout, activation, residual, and the
    scales / zero points its dequantised weights use."""
    out = []
    for up in nodes:
        wu = g.weight(up)
        if wu is None:
            continue
        b_up, h = g.bias_after(up.output[0])
        found = _chain(g, up, h)
        if found is None:
            continue
        nodes_, value, value_in, down = found
        if onnxact.is_linear(nodes_):
            continue  # two matrices in a row, perhaps scaled: no activation, no MLP block
        wd = g.weight(down)
        b_down, y = g.bias_after(down.output[0])
        residual = _residual(g, up.input[0], y)
        where = f"block {onnxact.clean(_prefix([up.name, down.name], fallback=wu[0]))}"
        try:
            act = onnxact.activation(
                g, nodes_, h, value_in, down.input[0], _dtype_of(g, wu[0]), lambda t: _constant(g, t)
            )
        except ValueError as err:
            if not residual:
                continue  # no residual Add and no activation: a head (pooler, classifier), not a block
            raise ValueError(f"{where}: {err}") from None
        for node in (up, down, value):
            if node is not None:
                _gemm_plain(node, where)
        roles = {"up": wu[0], "down": wd[0]}
        biases = {"up": b_up} if b_up else {}
        layouts = {wu[1], wd[1]}
        if value is not None:
            roles = {"gate": wu[0], "value": g.weight(value)[0], "down": wd[0]}
            biases = {"gate": b_up} if b_up else {}
            b_value, _ = g.bias_after(value.output[0])
            if b_value:
                biases["value"] = b_value
            layouts.add(g.weight(value)[1])
        if b_down:
            biases["down"] = b_down
        if len(layouts) != 1:
            continue  # mixed MatMul / Gemm transB layouts: not one block we can describe
        name = printable(_prefix([up.name, down.name], fallback=wu[0]))  # a name to print, never a key
        uses = [c for w in roles.values() if w in g.dequantised for c in g.dequantised[w].companions]
        out.append(
            {
                "prefix": name,
                "weights": roles,
                "biases": biases,
                "transposed": layouts.pop(),
                "activation": act,
                "residual": residual,
                "uses": uses,
            }
        )
    seen = collections.Counter()
    for b in out:  # names stay unique even when node names are not
        seen[b["prefix"]] += 1
        if seen[b["prefix"]] > 1:
            b["prefix"] = f"{b['prefix']}#{seen[b['prefix']]}"
    return out


def _loader(tensor, base: Path):
    def load():
        from onnx import numpy_helper

        return numpy_helper.to_array(tensor, base_dir=str(base))

    return load


def _external(t, folder: Path, dtype) -> None:
    """Refuse external data that is not a plain relative name inside ``folder`` or does not lie
    within its file, before anything opens it."""
    info = {e.key: e.value for e in t.external_data}
    where = f"initializer {onnxact.clean(t.name)}: external data"
    target = limits.inside(folder, info.get("location", ""), where)
    try:
        offset, length = int(info.get("offset", 0)), int(info.get("length", -1))
    except ValueError:
        raise ValueError(f"{where}: offset and length must be integers") from None
    need = math.prod(t.dims) * np.dtype(dtype).itemsize
    length = need if length < 0 else length
    if offset < 0 or length != need or offset + length > target.stat().st_size:
        raise ValueError(
            f"{where}: {length} bytes at offset {offset} of {target.name} do not hold shape {tuple(t.dims)}"
        )


def _inits(graph):
    """name → tensor of the initializers and of the ``Constant`` nodes holding a tensor (``value``,
    as paddle2onnx stores weights), and the nodes left; a name given twice is refused."""
    inits, nodes, constants = {}, [], set()
    for t in graph.initializer:
        if t.name in inits:
            raise ValueError(f"two initializers are named '{onnxact.clean(t.name)}'; refusing to choose one")
        inits[t.name] = t
    for node in graph.node:
        attr = next((a for a in node.attribute if a.name == "value"), None) if node.op_type == "Constant" else None
        if attr is None or node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            nodes.append(node)
            continue
        name = node.output[0]
        if name in inits:
            raise ValueError(
                f"the Constant node '{onnxact.clean(node.name)}' writes '{onnxact.clean(name)}', which another "
                "tensor of the file is named too; refusing to choose one"
            )
        inits[name] = attr.t
        constants.add(name)
    return inits, nodes, constants


# ---------------------------------------------------------------------------------------------
# the graph's size, bounded before the onnx package builds an object of it

NODE_BYTES = 4096
FIELD_BYTES = 256
_COUNTED = {("onnx.GraphProto", 1), ("onnx.GraphProto", 5), ("onnx.GraphProto", 15), ("onnx.FunctionProto", 7)}
_TABLES: dict[str, dict] = {}


def caps() -> tuple[int, int]:
    """``(nodes, fields)``: the most nodes plus initializers (every graph, subgraph and function
    counted) an ONNX file may hold, ``B / 4096`` (262,144 at the default 1 GiB), and the most
    protobuf fields in all, ``B / 256`` (4 Mi: a parsed field costs the ``onnx`` package up to
    ~160 bytes, an empty node 2 bytes of file), ``B`` the budget (:func:`limits.max_bytes`)."""
    return limits.max_bytes() // NODE_BYTES, limits.max_bytes() // FIELD_BYTES


def _table(desc) -> dict:
    """field number → the message type of a message field (``None`` for other fields)."""
    out = _TABLES.get(desc.full_name)
    if out is None:
        out = {f.number: f.message_type if f.type == f.TYPE_MESSAGE else None for f in desc.fields}
        _TABLES[desc.full_name] = out
    return out


def _varint(raw, pos: int) -> tuple[int, int]:
    out = shift = 0
    while shift < 70:
        b = raw[pos]
        out |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return out, pos
        shift += 7
    raise ValueError(f"not an ONNX model: a varint longer than 10 bytes at byte {pos}")


def census(raw, top) -> tuple[int, int]:
    """``(nodes and initializers, fields)`` of the serialised message ``raw`` of type ``top``
    (``onnx.ModelProto.DESCRIPTOR``), read from the protobuf wire format and the ``onnx`` schema
    alone, nothing parsed: message fields are entered depth first (at most
    :data:`limits.MAX_DEPTH` deep, so the walk holds one position a level), bytes skipped.
    ``ValueError`` in one line as soon as a count passes :func:`caps`, or for a damaged encoding
    (a field past the end of its message, a group)."""
    max_nodes, max_fields = caps()
    nodes = fields = 0
    stack, desc, pos, end = [], top, 0, len(raw)
    table = _table(desc)
    try:
        while True:
            if pos >= end:
                if pos > end:
                    raise ValueError(f"not an ONNX model: a field runs past the end of its message at byte {pos}")
                if not stack:
                    return nodes, fields
                desc, pos, end = stack.pop()
                table = _table(desc)
                continue
            key = raw[pos]
            pos += 1
            if key >= 0x80:
                key, pos = _varint(raw, pos - 1)
            fields += 1
            wire = key & 7
            if wire == 2:
                n, pos = _varint(raw, pos)
                sub = table.get(key >> 3)
                if sub is not None and pos + n <= end:
                    nodes += (desc.full_name, key >> 3) in _COUNTED
                    if len(stack) >= limits.MAX_DEPTH:
                        raise ValueError(f"not an ONNX model: messages nested more than {limits.MAX_DEPTH} deep")
                    stack.append((desc, pos + n, end))
                    desc, end, table = sub, pos + n, _table(sub)
                else:
                    pos += n
            elif wire == 0:
                _, pos = _varint(raw, pos)
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            else:
                raise ValueError(f"not an ONNX model: protobuf wire type {wire} at byte {pos}")
            if nodes > max_nodes or fields > max_fields:
                what, cap, per = (
                    ("nodes and initializers", max_nodes, NODE_BYTES)
                    if nodes > max_nodes
                    else ("protobuf fields", max_fields, FIELD_BYTES)
                )
                raise ValueError(
                    f"the ONNX file holds more than {cap:,} {what} (one per {per:,} bytes of the budget); "
                    f"refusing to parse it; {limits.HINT}"
                )
    except IndexError:
        raise ValueError("not an ONNX model: the file ends inside a field") from None


def _parse(path: Path, onnx):
    """The ``ModelProto`` of ``path``: the file within the budget, its counts within :func:`caps`
    (:func:`census`) before the ``onnx`` package parses it."""
    size = path.stat().st_size
    if size == 0:
        raise ValueError("an empty file (0 bytes), not an ONNX model")
    if size > limits.max_bytes():
        raise limits.over("the ONNX file (parsed whole)", size, limits.max_bytes())
    raw = path.read_bytes()
    census(raw, onnx.ModelProto.DESCRIPTOR)
    return onnx.load_model_from_string(raw)


def read_onnx(path: Path):
    """``(tensors, metadata, blocks)`` of an ``.onnx`` file: initializer name → ``(shape, dtype,
    loader)`` (``Constant`` node tensors of rank ≥ 1 included, integer weights dequantised by
    :mod:`~absorbjax.weights._onnxquant` read as float64 under the integers' name, dtype ``"int8
    (dequantised)"``); ``blocks`` as found in the graph (see the module docstring)."""
    try:
        import onnx
        from onnx import helper
    except ImportError:
        raise ValueError("reading ONNX needs the onnx package: pip install 'absorbjax[onnx]' (or onnx)") from None
    model = _parse(path, onnx)
    graph = model.graph
    if not graph.node and not graph.initializer:
        raise ValueError("no graph in the file (not an ONNX model, or an empty one)")
    inits, nodes, constants = _inits(graph)
    tensors = {}
    for name, t in inits.items():
        dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        if t.data_location == 1:  # EXTERNAL
            _external(t, path.parent, dtype)
        if name not in constants or len(t.dims) >= 1:  # a scalar Constant is part of the graph, not a weight
            tensors[name] = (tuple(int(s) for s in t.dims), str(dtype), _loader(t, path.parent))
    nodes, specs = onnxquant.rewrite(nodes, inits)
    for name, spec in specs.items():
        tensors[name] = (tuple(int(s) for s in spec.q.dims), spec.dtype, _dequantiser(spec, path.parent))
    meta = {"onnx.producer": printable(f"{model.producer_name} {model.producer_version}".strip(), 200)}
    quantised = sorted({n.op_type for n in nodes} & QUANTISED_OPS)
    casts = [
        n
        for n in nodes
        if n.op_type == "Cast"
        and n.input
        and n.input[0] in inits
        and helper.tensor_dtype_to_np_dtype(inits[n.input[0]].data_type).kind in "iu"
    ]
    if quantised:
        meta["quantisation"] = f"ONNX quantised graph ({', '.join(quantised)} nodes)"
    elif casts:
        meta["quantisation"] = (
            f"integer initializers dequantised in the graph (Cast → Mul, e.g. {onnxact.clean(casts[0].input[0], 60)})"
        )
    if specs:
        meta["dequantised"] = onnxquant.NOTE
    g = _Graph(nodes, inits, specs)
    blocks = _blocks(g, nodes)
    acts = {b["activation"] for b in blocks}
    if len(acts) == 1:
        meta["activation"] = acts.pop()
        meta["activation_source"] = "onnx graph"
    return tensors, meta, blocks


def _dequantiser(spec, base: Path):
    return lambda: onnxquant.dequantise(spec, base)
