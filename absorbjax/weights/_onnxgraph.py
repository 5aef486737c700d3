"""MLP blocks of an ONNX graph, found by the graph's structure rather than by names.

Exporters name initializers as they like (``onnx::MatMul_481``), so a block is recognised by its
shape in the graph: a ``MatMul`` (or ``Gemm``) with an initializer weight ``W1`` (stored ``(in,
out)`` = ``W_upᵀ``; ``Gemm`` with ``transB=1`` stores ``(out, in)``), an optional ``Add`` of a 1-D
initializer (the hidden bias ``b``), a chain of elementwise nodes holding the activation, and a
second ``MatMul``/``Gemm`` with an initializer ``W2`` (``W_downᵀ``), an optional ``Add`` of a 1-D
initializer (the output bias ``c``) and the residual ``Add`` of the block's input. The activation
is read from the chain: a ``Gelu`` node (``approximate="tanh"`` → ``gelu_tanh``), ``Erf`` (the
exact GELU that PyTorch exports as ``x·½(1 + erf(x/√2))``), ``Tanh`` (the tanh GELU), ``Relu``,
``Sigmoid`` (SiLU). A ``Mul`` joining a second weight ``MatMul`` of the same input is a gated
block (the branch through the activation is the gate, the other the value). Graphs quantised with
``QLinearMatMul`` / ``MatMulInteger`` / ``DequantizeLinear``, or integer initializers turned into
floats in the graph (``Cast`` → ``Mul``), are reported as such.

Nothing between the two matrices is skipped: the elementwise chain is evaluated on sample inputs
(scalar constants only) and must equal the activation it names, ``g(z)`` (gated: ``g(z)·v``);
a scale inside the block (a scalar ``Mul``, ``Gemm`` ``alpha``/``beta``) or ``Gemm`` ``transA``
is refused with what it is, never folded silently. The file is untrusted
(:mod:`~absorbjax.weights._limits`): an empty file says so, the file is parsed whole only within the
budget, initializer names and node outputs must be unique, external data must be a plain relative
name inside the model's folder (checked here, not left to the ``onnx`` package) and lie within its
file, each node is visited a bounded number of times and an elementwise node with more than
three inputs is refused.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

import numpy as np

from absorbjax.weights import _limits as limits

ELEMENTWISE = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Sqrt",
    "Erf",
    "Tanh",
    "Sigmoid",
    "Relu",
    "Gelu",
    "Softplus",
    "Identity",
    "Cast",
    "FastGelu",
    "BiasGelu",
}
ACTIVATION_OPS = {
    "Gelu": "gelu",
    "FastGelu": "gelu_pytorch_tanh",
    "BiasGelu": "gelu",
    "Erf": "gelu",
    "Tanh": "gelu_pytorch_tanh",
    "Relu": "relu",
    "Sigmoid": "silu",
    "Softplus": None,
}
QUANTISED_OPS = {"QLinearMatMul", "MatMulInteger", "DequantizeLinear", "MatMulNBits", "DynamicQuantizeMatMul", "QGemm"}
_MAX_CHAIN = 24


_MAX_FAN_IN = 3


class _Graph:
    def __init__(self, graph):
        self.inits = {t.name: t for t in graph.initializer}
        self.producer = {}
        self.consumers = collections.defaultdict(list)
        for node in graph.node:
            for o in node.output:
                if o and o in self.producer:
                    raise ValueError(f"two nodes write the tensor {o[:80]!r}; refusing to choose one")
                self.producer[o] = node
            if node.op_type in ELEMENTWISE and len(node.input) > _MAX_FAN_IN:
                raise ValueError(f"{node.op_type} node {node.name[:80]!r} has {len(node.input)} inputs (at most 3)")
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


def _activation(g: _Graph, nodes) -> str | None:
    found = set()
    for node in nodes:
        if node.op_type == "Gelu":
            approx = next((a.s.decode() for a in node.attribute if a.name == "approximate"), "none")
            found.add("gelu_pytorch_tanh" if approx == "tanh" else "gelu")
        elif node.op_type in ACTIVATION_OPS:
            found.add(ACTIVATION_OPS[node.op_type])
    return found.pop() if len(found) == 1 else None


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


_REFERENCE = {
    "gelu": lambda z: z * 0.5 * (1 + _erf(z / math.sqrt(2))),
    "gelu_pytorch_tanh": lambda z: 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3))),
    "relu": lambda z: np.maximum(z, 0),
    "silu": lambda z: z / (1 + np.exp(-z)),
}


def _erf(z):
    return np.vectorize(math.erf)(z)


def _constant(g: _Graph, name: str):
    """A scalar constant (a one-element initializer or ``Constant`` node), else ``None``."""
    from onnx import numpy_helper

    if name in g.inits:
        t = g.inits[name]
        if math.prod(t.dims) != 1 or t.data_location == 1:
            return None
        return float(np.asarray(numpy_helper.to_array(t), np.float64).ravel()[0])
    node = g.producer.get(name)
    if node is not None and node.op_type == "Constant":
        attr = next((a for a in node.attribute if a.name in ("value", "value_float")), None)
        if attr is None:
            return None
        if attr.name == "value_float":
            return float(attr.f)
        if math.prod(attr.t.dims) == 1:
            return float(np.asarray(numpy_helper.to_array(attr.t), np.float64).ravel()[0])
    return None


def _attr(node, name, default):
    a = next((a for a in node.attribute if a.name == name), None)
    if a is None:
        return default
    return a.s.decode() if a.type == 3 else a.f if a.type == 1 else a.i


def _apply(node, args):
    op = node.op_type
    if op in ("Add", "BiasGelu"):
        out = args[0] + args[1]
        return 0.5 * out * (1 + _erf(out / math.sqrt(2))) if op == "BiasGelu" else out
    if op in ("Sub", "Mul", "Div", "Pow"):
        return {"Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power}[op](args[0], args[1])
    if op in ("Identity", "Cast"):
        return args[0]
    if op == "Gelu":
        return _REFERENCE["gelu_pytorch_tanh" if _attr(node, "approximate", "none") == "tanh" else "gelu"](args[0])
    if op == "FastGelu":
        return _REFERENCE["gelu_pytorch_tanh"](args[0] + (args[1] if len(args) > 1 else 0))
    return {
        "Sqrt": np.sqrt,
        "Erf": _erf,
        "Tanh": np.tanh,
        "Sigmoid": lambda z: 1 / (1 + np.exp(-z)),
        "Relu": lambda z: np.maximum(z, 0),
        "Softplus": lambda z: np.log1p(np.exp(z)),
    }[op](args[0])


def _verify(g: _Graph, nodes, start: str, value_in: str | None, out: str, act: str, where: str) -> None:
    """Evaluate the chain between the matrices on sample inputs and refuse it unless it is the
    activation ``act`` (``g(z)·v`` when gated): a scale, an unrecognised input or op is an error."""
    z = np.linspace(-4.0, 4.0, 33)
    v = np.cos(np.arange(33.0)) + 1.5
    known = {start: z, **({value_in: v} if value_in else {})}
    todo = list(nodes)
    with np.errstate(all="ignore"):
        while todo:
            ready = [n for n in todo if all(i in known or _constant(g, i) is not None for i in n.input if i)]
            if not ready:
                names = sorted({i for n in todo for i in n.input if i and i not in known})
                raise ValueError(
                    f"{where}: the chain between the two matrices reads {names[0][:80]!r}, which is neither "
                    "the block's own tensor nor a scalar constant; refusing to guess what it computes"
                )
            for n in ready:
                args = [known[i] if i in known else _constant(g, i) for i in n.input if i]
                known[n.output[0]] = _apply(n, args)
                todo.remove(n)
    if out not in known:
        raise ValueError(f"{where}: the second matrix does not read the chain's output")
    want = _REFERENCE[act](z) * (v if value_in else 1)
    got = known[out]
    if np.allclose(got, want, rtol=1e-5, atol=1e-6):
        return
    c = got[-1] / want[-1] if want[-1] else float("nan")
    if np.isfinite(c) and np.allclose(got, c * want, rtol=1e-5, atol=1e-6):
        raise ValueError(
            f"{where}: the block scales its activation by {c:.6g} between the two matrices; absorbjax "
            "decides unscaled blocks only (fold the scale into the second matrix and re-export)"
        )
    raise ValueError(
        f"{where}: the nodes between the two matrices ({', '.join(n.op_type for n in nodes)}) do not compute "
        f"{act}{'(z)·v' if value_in else ''}; refusing to guess the block"
    )


def _gemm_plain(node, where: str) -> None:
    if node.op_type != "Gemm":
        return
    alpha, beta, trans_a = _attr(node, "alpha", 1.0), _attr(node, "beta", 1.0), _attr(node, "transA", 0)
    if alpha != 1.0 or beta != 1.0 or trans_a:
        raise ValueError(
            f"{where}: Gemm {node.name[:80]!r} has alpha={alpha:g}, beta={beta:g}, transA={trans_a}; "
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


def _blocks(g: _Graph, graph):
    """One dict a block: roles → initializer names, biases, layout, activation, residual."""
    out = []
    for up in graph.node:
        wu = g.weight(up)
        if wu is None:
            continue
        b_up, h = g.bias_after(up.output[0])
        found = _chain(g, up, h)
        if found is None:
            continue
        nodes, value, value_in, down = found
        act = _activation(g, nodes)
        if act is None:
            continue
        where = f"block {_prefix([up.name, down.name], fallback=wu[0])[:80]}"
        for node in (up, down, value):
            if node is not None:
                _gemm_plain(node, where)
        _verify(g, nodes, h, value_in, down.input[0], act, where)
        wd = g.weight(down)
        b_down, y = g.bias_after(down.output[0])
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
        name = _prefix([up.name, down.name], fallback=wu[0])
        out.append(
            {
                "prefix": name,
                "weights": roles,
                "biases": biases,
                "transposed": layouts.pop(),
                "activation": act,
                "residual": _residual(g, up.input[0], y),
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
    where = f"initializer {t.name[:80]}: external data"
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


def read_onnx(path: Path):
    """``(tensors, metadata, blocks)`` of an ``.onnx`` file: initializer name → ``(shape, dtype,
    loader)``; ``blocks`` as found in the graph (see the module docstring)."""
    try:
        import onnx
        from onnx import helper
    except ImportError:
        raise ValueError("reading ONNX needs the onnx package: pip install 'absorbjax[onnx]' (or onnx)") from None
    size = path.stat().st_size
    if size == 0:
        raise ValueError("an empty file (0 bytes), not an ONNX model")
    if size > limits.max_bytes():
        raise limits.over("the ONNX file (parsed whole)", size, limits.max_bytes())
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    if not graph.node and not graph.initializer:
        raise ValueError("no graph in the file (not an ONNX model, or an empty one)")
    tensors = {}
    for t in graph.initializer:
        if t.name in tensors:
            raise ValueError(f"two initializers are named {t.name[:80]!r}; refusing to choose one")
        dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        if t.data_location == 1:  # EXTERNAL
            _external(t, path.parent, dtype)
        tensors[t.name] = (tuple(int(s) for s in t.dims), str(dtype), _loader(t, path.parent))
    meta = {"onnx.producer": f"{model.producer_name} {model.producer_version}".strip()[:200]}
    quantised = sorted({n.op_type for n in graph.node} & QUANTISED_OPS)
    inits = {t.name: t for t in graph.initializer}
    casts = [
        n
        for n in graph.node
        if n.op_type == "Cast"
        and n.input
        and n.input[0] in inits
        and helper.tensor_dtype_to_np_dtype(inits[n.input[0]].data_type).kind in "iu"
    ]
    if quantised:
        meta["quantisation"] = f"ONNX quantised graph ({', '.join(quantised)} nodes)"
    elif casts:
        meta["quantisation"] = (
            f"integer initializers dequantised in the graph (Cast → Mul, e.g. {casts[0].input[0][:60]})"
        )
    g = _Graph(graph)
    blocks = _blocks(g, graph)
    acts = {b["activation"] for b in blocks}
    if len(acts) == 1:
        meta["hidden_act"] = acts.pop()
        meta["hidden_act_source"] = "onnx graph"
    return tensors, meta, blocks
