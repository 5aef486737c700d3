"""The activation between an ONNX block's two matrices, read from the nodes by exact pattern,
never by evaluating them.

The nodes from the pre-activation ``h`` to the second matrix's input are read back as an
expression (``Identity`` and float-to-float widening ``Cast`` are transparent; products and
divisions by scalar constants are flattened to a constant times factors) and must be one of:

=================================================  ====================================
pattern                                             name
=================================================  ====================================
``Relu(h)``                                          ``relu``
``LeakyRelu(h, alpha)``                              ``leaky_relu(alpha)`` (float32 alpha, exactly)
``Gelu(h)`` (opset 20, ``approximate`` none / tanh)  ``gelu`` / ``gelu_tanh``
``½·h·(1 + Erf(h/√2))`` (``Div`` by √2 or ``Mul``     ``gelu``
by 1/√2, factors in any order)
``½·h·(1 + Tanh(√(2/π)·(h + 0.044715·h³)))``         ``gelu_tanh``
(``h³`` as ``Pow(h, 3)`` or products of ``h``)
``h·Sigmoid(h)``                                     ``silu``
``Softplus(h)``                                      ``softplus``
``HardSwish(h)``, ``h·HardSigmoid(h, 1/6, ½)``       ``hardswish``
=================================================  ====================================

(``com.microsoft`` ``Gelu`` / ``FastGelu`` with one input: ``gelu`` / ``gelu_tanh``.) A gated block
is ``pattern · v``, ``v`` the value branch; its gate must have a gated name (``reglu``, ``geglu``,
``swiglu``; ``Sigmoid(h)·v`` is ``glu``). Each constant must equal the true one within
:data:`ULPS` units in the last place of its own stored type (float32: about 5e-7 relative).

Anything else is refused with the node named: a ``Cast`` to an integer type or a narrowing one,
``Clip``/``Min``/``Max``, an op of another domain, an unknown op, a constant off its value, a scale
(``c·pattern``, refused with ``c``), a tensor that is neither ``h``, ``v`` nor a scalar constant.
"""

from __future__ import annotations

import math

import numpy as np

from absorbjax.weights._conventions import printable

ULPS = 4
_MAX_TERMS = 64
# the ops a block's chain may hold: the walk in _onnxgraph follows these, and then this module
# accepts or refuses them; LINEAR ones alone do not make a block
LINEAR = {"Add", "Sub", "Mul", "Div", "Identity", "Cast", "Dropout"}
KNOWN = LINEAR | {
    "Pow", "Sqrt", "Erf", "Tanh", "Sigmoid", "Relu", "LeakyRelu", "Gelu", "FastGelu", "BiasGelu", "Softplus",
    "HardSwish", "HardSigmoid", "Clip", "Min", "Max", "Neg", "Abs", "Exp", "Log", "Elu", "Selu", "Celu", "PRelu",
    "ThresholdedRelu", "Mish", "Softsign", "Sign", "Floor", "Ceil", "Round", "Reciprocal", "Sin", "Cos", "Where",
    "Mod", "Sum", "Mean", "QuantizeLinear", "DequantizeLinear",
}  # fmt: skip
_UNARY = {"Relu": "relu", "Softplus": "softplus", "HardSwish": "hardswish"}
_GATED = {"relu": "reglu", "gelu": "geglu", "gelu_tanh": "geglu_tanh", "silu": "swiglu", "sigmoid": "glu"}
_FLOATS = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def clean(text: str, limit: int = 80) -> str:
    """A node or tensor name as it may be printed (:func:`~absorbjax.weights._conventions.printable`:
    control characters and surrogates escaped), at most ``limit`` characters."""
    return printable(text, limit)


def node_label(node) -> str:
    dom = f"{clean(node.domain, 40)}." if node.domain not in ("", "ai.onnx") else ""
    name = f"'{clean(node.name)}'" if node.name else "(unnamed)"
    return f"{dom}{clean(node.op_type, 40)} node {name}"


class _Node:
    """One node of the expression: ``op`` (``h``, ``v``, ``const``, or an op type), ``node``,
    ``args``, ``value`` (constants), ``dtype``."""

    __slots__ = ("op", "node", "args", "value", "dtype")

    def __init__(self, op, node=None, args=(), value=None, dtype=None):
        self.op, self.node, self.args, self.value, self.dtype = op, node, tuple(args), value, dtype


class _Refuse(ValueError):
    pass


def _dtype_name(onnx_type: int) -> str:
    from onnx import helper

    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(onnx_type)).name
    except (KeyError, TypeError, ValueError):
        return f"type {onnx_type}"


def _attr(node, name, default):
    a = next((a for a in node.attribute if a.name == name), None)
    if a is None:
        return default
    return a.s.decode("utf-8", "replace") if a.type == 3 else a.f if a.type == 1 else a.i if a.type == 2 else a


class _Reader:
    def __init__(self, g, nodes, start, value_in, start_dtype, constant):
        self.g, self.start, self.value_in, self.start_dtype = g, start, value_in, start_dtype
        self.chain = {n.output[0]: n for n in nodes if n.output}
        self.constant, self.terms = constant, 0

    def read(self, t: str, reader=None) -> _Node:
        self.terms += 1
        if self.terms > _MAX_TERMS:
            raise _Refuse(f"{node_label(reader)} reads an expression of more than {_MAX_TERMS} terms")
        if t == self.start:
            return _Node("h", dtype=self.start_dtype)
        if t == self.value_in:
            return _Node("v", dtype=self.start_dtype)
        node = self.chain.get(t)
        if node is None:
            c = self.constant(t)
            if c is None:
                what = f"{node_label(reader)} reads" if reader is not None else "the second matrix reads"
                raise _Refuse(
                    f"{what} '{clean(t)}', which is neither the block's own tensor nor a scalar constant; "
                    "refusing to guess what it computes"
                )
            return _Node("const", value=c[0], dtype=c[1])
        if node.domain not in ("", "ai.onnx") and not (
            node.domain == "com.microsoft" and node.op_type in ("Gelu", "FastGelu")
        ):
            raise _Refuse(f"{node_label(node)} is not an ONNX operator; refusing to guess what it computes")
        op = node.op_type
        if op not in KNOWN - {"Clip", "Min", "Max", "QuantizeLinear", "DequantizeLinear"}:
            if op in ("Clip", "Min", "Max"):
                raise _Refuse(f"{node_label(node)} clips the activation between the two matrices; refusing the block")
            raise _Refuse(f"{node_label(node)} is not part of a recognised activation; refusing to guess the block")
        inputs = [i for i in node.input if i]
        if op == "Dropout":
            if len(inputs) > 2 or len([o for o in node.output if o]) > 1:
                raise _Refuse(f"{node_label(node)} has a training mode or mask; refusing the block")
            inputs = inputs[:1]
        args = [self.read(i, node) for i in inputs]
        if op in ("Identity", "Dropout"):
            return args[0]
        if op == "Cast":
            to = _dtype_name(_attr(node, "to", 0))
            src = args[0].dtype
            if to not in _FLOATS:
                raise _Refuse(
                    f"{node_label(node)} casts to {to} between the two matrices, which rounds; refusing the block"
                )
            if src is not None and src != to and (src not in _FLOATS or _FLOATS[to] <= _FLOATS[src]):
                raise _Refuse(
                    f"{node_label(node)} casts {src} to {to}, a narrowing cast that rounds; refusing the block"
                )
            args[0].dtype = to
            return args[0]
        return _Node(op, node, args, dtype=next((a.dtype for a in args if a.op != "const"), None))


def _product(e: _Node):
    """``(c, k, factors)``: ``e`` = ``c`` × product of ``factors`` (constants folded, ``k`` of them)."""
    if e.op == "const":
        return e.value, 1, [], e.dtype
    if e.op == "Mul" and len(e.args) == 2:
        c1, k1, f1, d1 = _product(e.args[0])
        c2, k2, f2, d2 = _product(e.args[1])
        return c1 * c2, k1 + k2, f1 + f2, _coarser(d1, d2)
    if e.op == "Div" and len(e.args) == 2 and e.args[1].op == "const":
        c, k, f, d = _product(e.args[0])
        return c / e.args[1].value, k + 1, f, _coarser(d, e.args[1].dtype)
    if e.op == "Pow" and len(e.args) == 2 and e.args[1].op == "const" and e.args[1].value == 3 and e.args[0].op == "h":
        return 1.0, 0, [e.args[0]] * 3, None
    return 1.0, 0, [e], None


def _coarser(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a if _FLOATS.get(a, 4) <= _FLOATS.get(b, 4) else b


def _near(value: float, true: float, dtype, count: int = 1) -> bool:
    kind = {"float16": np.float16, "float64": np.float64}.get(dtype, np.float32)  # bfloat16: coarser
    ulp = float(np.spacing(kind(abs(true)))) * (2**16 if dtype == "bfloat16" else 1)
    return abs(value - true) <= ULPS * max(count, 1) * ulp


def _is_h(e):
    return e.op == "h"


def _one_plus(e: _Node, op: str):
    """``X`` when ``e`` is ``Add(1, op(X))`` (either order, 1 within tolerance), else ``None``."""
    if e.op != "Add" or len(e.args) != 2:
        return None
    for a, b in (e.args, e.args[::-1]):
        if a.op == "const" and b.op == op and _near(a.value, 1.0, a.dtype):
            return b
    return None


def _label(e: _Node) -> str:
    return node_label(e.node) if e.node is not None else "the chain"


def _h_times_one_plus(fs, op: str):
    """The ``op`` node of the factors ``fs = [h, Add(1, op(…))]`` (either order), else ``None``."""
    hs = [f for f in fs if _is_h(f)]
    rest = [f for f in fs if not _is_h(f)]
    if len(hs) != 1 or len(rest) != 1:
        return None
    return _one_plus(rest[0], op)


def _gelu_erf(fs, c, k, d, top):
    """``½·h·(1 + erf(h/√2))``: ``fs`` = [h, Add(1, Erf(…))]."""
    erf = _h_times_one_plus(fs, "Erf")
    if erf is None:
        return False
    ci, ki, fi, di = _product(erf.args[0])
    if len(fi) != 1 or not _is_h(fi[0]):
        raise _Refuse(f"{node_label(erf.node)} does not read h/√2; refusing the block")
    where = erf.args[0] if erf.args[0].node is not None else erf
    if not _near(ci, 1 / math.sqrt(2), di, ki):
        raise _Refuse(
            f"{_label(where)}: the Erf argument is h·{ci:.9g}, not h/√2 (within {ULPS} ulps); refusing the block"
        )
    return _scale(c, k, d, 0.5, top)


def _gelu_tanh(fs, c, k, d, top):
    """``½·h·(1 + tanh(√(2/π)(h + 0.044715 h³)))``."""
    th = _h_times_one_plus(fs, "Tanh")
    if th is None:
        return False
    cb, kb, fb, db = _product(th.args[0])
    ok = len(fb) == 1 and fb[0].op == "Add" and len(fb[0].args) == 2
    inner = fb[0] if ok else None
    cube = None
    if ok:
        for a, b in (inner.args, inner.args[::-1]):
            if _is_h(a):
                cube = b
    where = th.args[0] if th.args[0].node is not None else th
    if cube is None:
        raise _Refuse(f"{_label(where)} is not √(2/π)·(h + 0.044715·h³); refusing the block")
    ck, kk, fk, dk = _product(cube)
    if len(fk) != 3 or not all(_is_h(f) for f in fk):
        raise _Refuse(f"{_label(cube)} is not 0.044715·h³; refusing the block")
    if not _near(cb, math.sqrt(2 / math.pi), db, kb):
        raise _Refuse(f"{_label(where)}: the Tanh argument's scale is {cb:.9g}, not √(2/π); refusing the block")
    if not _near(ck, 0.044715, dk, kk):
        raise _Refuse(f"{_label(cube)}: the cubic coefficient is {ck:.9g}, not 0.044715; refusing the block")
    return _scale(c, k, d, 0.5, top)


def _scale(c, k, d, true, top):
    if _near(c, true, d, k):
        return True
    raise _Refuse(
        f"{_label(top)}: the block scales its activation by {c / true:.6g} between the two matrices; absorbjax "
        "decides unscaled blocks only (fold the scale into the second matrix and re-export)"
    )


def _single(f: _Node, c, k, d, top):
    """The name of a one-op activation ``f(h)``, checked, or ``None``."""
    if len(f.args) < 1 or not _is_h(f.args[0]):
        return None
    node, op = f.node, f.op
    if op in _UNARY and len(f.args) == 1:
        name = _UNARY[op]
    elif op == "LeakyRelu" and len(f.args) == 1:
        alpha = float(np.float32(_attr(node, "alpha", 0.01)))
        if not math.isfinite(alpha) or alpha in (1.0, -1.0):
            raise _Refuse(
                f"{node_label(node)} has alpha={alpha!r}, not a leaky ReLU (linear or |z|); refusing the block"
            )
        name = f"leaky_relu({alpha!r})"
    elif op == "Gelu" and len(f.args) == 1:
        approx = _attr(node, "approximate", "none") if node.domain in ("", "ai.onnx") else "none"
        if approx not in ("none", "tanh"):
            raise _Refuse(f"{node_label(node)} has approximate='{clean(str(approx), 20)}', not none or tanh")
        name = "gelu_tanh" if approx == "tanh" else "gelu"
    elif op == "FastGelu" and len(f.args) == 1:
        name = "gelu_tanh"
    elif op == "Sigmoid" and len(f.args) == 1:
        name = "sigmoid"
    else:
        return None
    _scale(c, k, d, 1.0, top)
    return name


def _hard_sigmoid_ok(f):
    a, b = float(np.float32(_attr(f.node, "alpha", 0.2))), float(np.float32(_attr(f.node, "beta", 0.5)))
    if not (_near(a, 1 / 6, "float32") and _near(b, 0.5, "float32")):
        raise _Refuse(f"{node_label(f.node)} has alpha={a:.9g}, beta={b:.9g}, not 1/6 and 0.5 (hardswish)")
    return True


def _match(top: _Node, gated: bool) -> str:
    c, k, fs, d = _product(top)
    if gated:
        vs = [f for f in fs if f.op == "v"]
        if len(vs) != 1:
            raise _Refuse(f"{_label(top)}: the gate is not multiplied by the value branch once; refusing the block")
        fs = [f for f in fs if f.op != "v"]
    elif any(f.op == "v" for f in fs):
        raise _Refuse(f"{_label(top)} reads the value branch outside a gate product; refusing the block")
    if len(fs) == 1 and (name := _single(fs[0], c, k, d, top)) is not None:
        return name
    if len(fs) == 2:
        hs = [f for f in fs if _is_h(f)]
        other = [f for f in fs if not _is_h(f)]
        if len(hs) == 1 and len(other) == 1 and len(other[0].args) == 1 and _is_h(other[0].args[0]):
            if other[0].op == "Sigmoid" and _scale(c, k, d, 1.0, top):
                return "silu"
            if other[0].op == "HardSigmoid" and _hard_sigmoid_ok(other[0]) and _scale(c, k, d, 1.0, top):
                return "hardswish"
        if _gelu_erf(fs, c, k, d, top):
            return "gelu"
        if _gelu_tanh(fs, c, k, d, top):
            return "gelu_tanh"
    ops = sorted({f.op for f in fs if f.node is not None})
    first = next((f for f in fs if f.node is not None), top)
    raise _Refuse(
        f"{_label(first if top.node is None else top)} does not form a recognised activation (relu, leaky_relu, "
        f"gelu, gelu_tanh, silu, softplus, hardswish) of the first matrix's output"
        + (f" (factors: {', '.join(ops)})" if ops else "")
        + "; refusing to guess the block"
    )


def is_linear(nodes) -> bool:
    """Whether the chain holds only ops that cannot be an activation (no block: two matrices in a
    row, perhaps scaled)."""
    from onnx import TensorProto

    for n in nodes:
        if n.op_type not in LINEAR:
            return False
        if n.op_type == "Cast" and _attr(n, "to", 0) not in (
            TensorProto.FLOAT,
            TensorProto.FLOAT16,
            TensorProto.DOUBLE,
            TensorProto.BFLOAT16,
        ):
            return False
    return True


def activation(g, nodes, start: str, value_in: str | None, out: str, start_dtype: str | None, constant) -> str:
    """The registered name of the activation the chain ``nodes`` computes from ``start`` to ``out``
    (gated: times ``value_in``); ``ValueError`` naming the node otherwise. ``constant(name)`` →
    ``(value, dtype name)`` of a scalar constant, else ``None``."""
    try:
        for n in nodes:  # what is refused whatever its place: named before the structure is read
            if n.op_type == "Cast" and _dtype_name(_attr(n, "to", 0)) not in _FLOATS:
                raise _Refuse(
                    f"{node_label(n)} casts to {_dtype_name(_attr(n, 'to', 0))} between the two matrices, which "
                    "rounds; refusing the block"
                )
            if n.op_type in ("Clip", "Min", "Max") and n.domain in ("", "ai.onnx"):
                raise _Refuse(f"{node_label(n)} clips the activation between the two matrices; refusing the block")
        top = _Reader(g, nodes, start, value_in, start_dtype, constant).read(out)
        name = _match(top, value_in is not None)
    except _Refuse as err:
        raise ValueError(str(err)) from None
    if value_in is not None:
        if name not in _GATED:
            raise ValueError(f"a {name} gate has no registered gated activation; refusing the block")
        from absorbjax import activations

        gated = _GATED[name]
        if gated not in activations.names():
            gated = "geglu" if gated == "geglu_tanh" else gated
        return gated
    if name == "sigmoid":
        raise ValueError("the chain computes sigmoid(h), which has no registered activation; refusing the block")
    return name
