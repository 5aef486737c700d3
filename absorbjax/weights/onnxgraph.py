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
``QLinearMatMul`` / ``MatMulInteger`` / ``DequantizeLinear`` are reported as such.
"""

from __future__ import annotations

import collections
from pathlib import Path

__all__ = ["ELEMENTWISE", "ACTIVATION_OPS", "QUANTISED_OPS", "read_onnx"]

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


class _Graph:
    def __init__(self, graph):
        self.inits = {t.name: t for t in graph.initializer}
        self.producer = {o: node for node in graph.node for o in node.output}
        self.consumers = collections.defaultdict(list)
        for node in graph.node:
            for i in node.input:
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
    """From the pre-activation ``start``: ``(chain nodes, value matmul, down matmul)`` or ``None``."""
    x = up.input[0]
    frontier, seen, nodes, value, downs = [start], {start}, [], None, []
    while frontier:
        t = frontier.pop()
        for node in g.consumers.get(t, []):
            if g.weight(node):
                if node.input[0] == t:
                    downs.append(node)
                continue
            if node.op_type not in ELEMENTWISE or len(nodes) >= _MAX_CHAIN:
                return None
            if node not in nodes:
                nodes.append(node)
            for i in node.input:
                if i in seen or i in g.inits or i not in g.producer or g.producer[i].op_type == "Constant":
                    continue
                _, mm = g.bias_before(i)
                if node.op_type == "Mul" and mm is not None and mm is not up and mm.input[0] == x:
                    value = mm
                    seen.add(i)
            for o in node.output:
                if o not in seen:
                    seen.add(o)
                    frontier.append(o)
    if len(downs) != 1 or not nodes:
        return None
    return nodes, value, downs[0]


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
        nodes, value, down = found
        act = _activation(g, nodes)
        if act is None:
            continue
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


def read_onnx(path: Path):
    """``(tensors, metadata, blocks)`` of an ``.onnx`` file: initializer name → ``(shape, dtype,
    loader)``; ``blocks`` as found in the graph (see the module docstring)."""
    try:
        import onnx
        from onnx import helper
    except ImportError:
        raise ValueError("reading ONNX needs the onnx package: pip install 'absorbjax[onnx]' (or onnx)") from None
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    tensors = {}
    for t in graph.initializer:
        dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        tensors[t.name] = (tuple(int(s) for s in t.dims), str(dtype), _loader(t, path.parent))
    meta = {"onnx.producer": f"{model.producer_name} {model.producer_version}".strip()}
    quantised = sorted({n.op_type for n in graph.node} & QUANTISED_OPS)
    if quantised:
        meta["quantisation"] = f"ONNX quantised graph ({', '.join(quantised)} nodes)"
    g = _Graph(graph)
    blocks = _blocks(g, graph)
    acts = {b["activation"] for b in blocks}
    if len(acts) == 1:
        meta["hidden_act"] = acts.pop()
        meta["hidden_act_source"] = "onnx graph"
    return tensors, meta, blocks
