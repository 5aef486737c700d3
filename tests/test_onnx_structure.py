"""ONNX blocks read by their structure (issue 57): the activation between the two matrices is
recognised by exact node patterns with their constants checked, never by sampling; quantised
weights are dequantised exactly (``DequantizeLinear``, ``Cast → Mul``, ``MatMulInteger``); weights
held in ``Constant`` nodes are read like initializers; a ``config.json`` that disagrees with the graph
is refused. Each graph is written here with ``onnx.helper`` in the layout its exporter produces."""

import contextlib
import io
import json
import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from absorbjax import cli, condition, weights  # noqa: E402

f32 = np.float32
D, N = 4, 8
# relu(x) - relu(-x) = x: the block x + W_down relu(W_up x) is 0 and absorbs its skip with S = the
# first d units. Read as relu, a graph computing anything else would be called absorbable.
UP = np.vstack([np.eye(D), -np.eye(D)]).astype(f32)  # (n, d)
DOWN = np.hstack([-np.eye(D), np.eye(D)]).astype(f32)  # (d, n)
RNG = np.random.default_rng(57)
B_UP = RNG.normal(size=N).astype(f32)


def const(name, v, dtype=f32):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, dtype)), name=name)


def save(path, act, *, extra_inits=(), up=None, down=None, bias=True, opset=20, residual=True, pre=()):
    """``x → MatMul(W1) → Add(b) → act(h → a) → MatMul(W2) → Add(x)``, weights stored ``(in, out)``
    as ``torch.onnx`` writes them; ``act(h, a)`` returns the nodes between."""
    inits = [
        numpy_helper.from_array(UP.T.copy() if up is None else up, "onnx::MatMul_11"),
        numpy_helper.from_array(DOWN.T.copy() if down is None else down, "onnx::MatMul_12"),
        *extra_inits,
    ]
    nodes = [*pre, helper.make_node("MatMul", ["x", "onnx::MatMul_11"], ["h0"], name="/mlp/fc1/MatMul")]
    if bias:
        inits.append(numpy_helper.from_array(B_UP, "mlp.fc1.bias"))
        nodes.append(helper.make_node("Add", ["mlp.fc1.bias", "h0"], ["h"], name="/mlp/fc1/Add"))
    else:
        nodes.append(helper.make_node("Identity", ["h0"], ["h"], name="/mlp/id"))
    nodes += act("h", "a")
    nodes.append(helper.make_node("MatMul", ["a", "onnx::MatMul_12"], ["o"], name="/mlp/fc2/MatMul"))
    nodes.append(helper.make_node("Add", ["o", "x"] if residual else ["o", "o"], ["y"], name="/Add"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def run(*args):
    """``absorbjax check ARGS``: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["check", *map(str, args), "--no-progress"])
    return code, out.getvalue(), err.getvalue()


def refused(path, *words, args=()):
    code, _, err = run(path, *args)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    return err


# ---------------------------------------------------------------------------------------------
# activations that agree with relu on [-4, 4] only: refused, naming the node


def min_relu_5(h, a):  # min(relu z, 5)
    return [
        helper.make_node("Relu", [h], ["r"], name="/act/Relu"),
        const("five", 5.0),
        helper.make_node("Min", ["r", "five"], [a], name="/act/Min"),
    ]


def min_relu_5_by_sub(h, a):  # min(relu z, 5) = relu z - relu(relu z - 5)
    return [
        helper.make_node("Relu", [h], ["r"], name="/act/Relu"),
        const("five", 5.0),
        helper.make_node("Sub", ["r", "five"], ["r5"], name="/act/Sub"),
        helper.make_node("Relu", ["r5"], ["rr"], name="/act/Relu_1"),
        helper.make_node("Sub", ["r", "rr"], [a], name="/act/Sub_1"),
    ]


def relu_bump(h, a):  # relu(z)(1 + relu(z - 4.5))
    return [
        helper.make_node("Relu", [h], ["r"], name="/act/Relu"),
        const("c45", 4.5),
        const("one", 1.0),
        helper.make_node("Sub", [h, "c45"], ["s"], name="/act/Sub"),
        helper.make_node("Relu", ["s"], ["rs"], name="/act/Relu_1"),
        helper.make_node("Add", ["one", "rs"], ["p"], name="/act/Add"),
        helper.make_node("Mul", ["r", "p"], [a], name="/act/Mul"),
    ]


def int_cast_relu(h, a):  # Cast(int32) → Cast(float) → Relu: rounds z
    return [
        helper.make_node("Cast", [h], ["i"], to=TensorProto.INT32, name="/act/Cast"),
        helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT, name="/act/Cast_1"),
        helper.make_node("Relu", ["f"], [a], name="/act/Relu"),
    ]


def clip_relu(h, a):
    return [
        const("lo", 0.0),
        const("hi", 6.0),
        helper.make_node("Clip", [h, "lo", "hi"], [a], name="/act/Clip"),
    ]


def narrowing_cast(h, a):  # float32 → float16 → Relu → float32: rounds z to half precision
    return [
        helper.make_node("Cast", [h], ["c"], to=TensorProto.FLOAT16, name="/act/Cast"),
        helper.make_node("Relu", ["c"], ["r"], name="/act/Relu"),
        helper.make_node("Cast", ["r"], [a], to=TensorProto.FLOAT, name="/act/Cast_1"),
    ]


def elu(h, a):
    return [helper.make_node("Elu", [h], [a], name="/act/Elu")]


def foreign_relu(h, a):  # a "Relu" of some other operator set: not the ONNX Relu
    return [helper.make_node("Relu", [h], [a], name="/act/Relu", domain="com.example")]


@pytest.mark.parametrize(
    "act, words",
    [
        (min_relu_5, ["Min", "/act/Min"]),
        (min_relu_5_by_sub, ["Sub", "/act/Sub_1"]),
        (relu_bump, ["Mul", "/act/Mul"]),
        (int_cast_relu, ["Cast", "/act/Cast", "int32"]),
        (clip_relu, ["Clip", "/act/Clip"]),
        (narrowing_cast, ["Cast", "/act/Cast", "float16"]),
        (elu, ["Elu", "/act/Elu"]),
        (foreign_relu, ["Relu", "com.example"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_non_relu_chains_are_refused_naming_the_node(tmp_path, act, words):
    path = save(tmp_path / "m.onnx", act, opset=20 if act is not foreign_relu else 20)
    refused(path, *words)
    refused(path, *words, args=("--activation", "relu"))  # naming relu does not make it one


def test_a_node_name_is_sanitised(tmp_path):
    def act(h, a):
        return [
            helper.make_node("Cast", [h], ["i"], to=TensorProto.INT32, name="evil\nname\x1b[31m" + "x" * 300),
            helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
            helper.make_node("Relu", ["f"], [a]),
        ]

    err = refused(save(tmp_path / "m.onnx", act), "Cast")
    assert "\x1b" not in err and "x" * 100 not in err


# ---------------------------------------------------------------------------------------------
# the activations accepted, each in its exporter's layout


def erf_gelu_torch(h, a):  # torch.onnx nn.GELU(): x·(1 + erf(x/√2))·0.5
    return [
        const("sqrt2", math.sqrt(2)),
        const("one", 1.0),
        const("half", 0.5),
        helper.make_node("Div", [h, "sqrt2"], ["t1"], name="/act/Div"),
        helper.make_node("Erf", ["t1"], ["t2"], name="/act/Erf"),
        helper.make_node("Add", ["t2", "one"], ["t3"], name="/act/Add"),
        helper.make_node("Mul", [h, "t3"], ["t4"], name="/act/Mul"),
        helper.make_node("Mul", ["t4", "half"], [a], name="/act/Mul_1"),
    ]


def erf_gelu_hf(h, a):  # x·0.5·(1 + erf(x·(1/√2))), the Mul-by-1/√2 ordering
    return [
        const("half", 0.5),
        const("rsqrt2", 1 / math.sqrt(2)),
        const("one", 1.0),
        helper.make_node("Mul", [h, "half"], ["p"]),
        helper.make_node("Mul", [h, "rsqrt2"], ["q"]),
        helper.make_node("Erf", ["q"], ["e"]),
        helper.make_node("Add", ["one", "e"], ["s"]),
        helper.make_node("Mul", ["p", "s"], [a]),
    ]


def tanh_gelu(h, a, *, kappa=0.044715, cube="mul"):  # 0.5·x·(1 + tanh(√(2/π)(x + 0.044715 x³)))
    nodes = [const("beta", math.sqrt(2 / math.pi)), const("kappa", kappa), const("one", 1.0), const("half", 0.5)]
    if cube == "mul":  # torch.onnx's gelu(approximate="tanh") below opset 20
        nodes += [helper.make_node("Mul", [h, h], ["x2"]), helper.make_node("Mul", [h, "x2"], ["x3"])]
    else:  # Hugging Face's NewGELU: torch.pow(x, 3.0)
        nodes += [const("three", 3.0), helper.make_node("Pow", [h, "three"], ["x3"])]
    return nodes + [
        helper.make_node("Mul", ["kappa", "x3"], ["kx3"]),
        helper.make_node("Add", [h, "kx3"], ["inner"]),
        helper.make_node("Mul", ["beta", "inner"], ["arg"]),
        helper.make_node("Tanh", ["arg"], ["t"], name="/act/Tanh"),
        helper.make_node("Add", ["one", "t"], ["s"]),
        helper.make_node("Mul", [h, "s"], ["xs"]),
        helper.make_node("Mul", ["half", "xs"], [a], name="/act/Mul_out"),
    ]


def single(op, **attrs):
    return lambda h, a: [helper.make_node(op, [h], [a], name=f"/act/{op}", **attrs)]


def silu(h, a):
    return [helper.make_node("Sigmoid", [h], ["s"]), helper.make_node("Mul", [h, "s"], [a])]


def widening(h, a):  # float32 → float64 → Relu → float32 would narrow; float32 → float32 is no cast
    return [
        helper.make_node("Cast", [h], ["c"], to=TensorProto.FLOAT, name="/act/Cast"),
        helper.make_node("Identity", ["c"], ["i"]),
        helper.make_node("Relu", ["i"], [a]),
    ]


@pytest.mark.parametrize(
    "act, want",
    [
        (erf_gelu_torch, "gelu"),
        (erf_gelu_hf, "gelu"),
        (tanh_gelu, "gelu_tanh"),
        (lambda h, a: tanh_gelu(h, a, cube="pow"), "gelu_tanh"),
        (single("Gelu"), "gelu"),
        (single("Gelu", approximate="tanh"), "gelu_tanh"),
        (single("Relu"), "relu"),
        (silu, "silu"),
        (single("Softplus"), "softplus"),
        (single("HardSwish"), "hardswish"),
        (single("LeakyRelu", alpha=0.2), f"leaky_relu({float(f32(0.2))!r})"),
        (widening, "relu"),
    ],
    ids=[
        "erf-torch",
        "erf-hf",
        "tanh-mul",
        "tanh-pow",
        "Gelu",
        "Gelu-tanh",
        "Relu",
        "silu",
        "Softplus",
        "HardSwish",
        "LeakyRelu",
        "float-cast",
    ],
)
def test_each_accepted_pattern_is_read_as_its_registry_name(tmp_path, act, want):
    from absorbjax import activations

    (block,) = weights.scan(save(tmp_path / "m.onnx", act)).blocks
    assert (block.activation, block.activation_source) == (activations.get(want).name, "onnx graph")
    assert block.residual is True


@pytest.mark.parametrize(
    "act, words",
    [
        (lambda h, a: [n if n.name != "sqrt2" else const("sqrt2", 1.5) for n in erf_gelu_torch(h, a)], ["Div"]),
        (lambda h, a: tanh_gelu(h, a, kappa=0.04), ["Mul", "0.04"]),
        (lambda h, a: [n if n.name != "half" else const("half", 0.6) for n in erf_gelu_torch(h, a)], ["1.2"]),
        (lambda h, a: single("LeakyRelu", alpha=1.0)(h, a), ["LeakyRelu", "alpha"]),
        (lambda h, a: single("Gelu", approximate="fast")(h, a), ["Gelu", "approximate"]),
    ],
    ids=["sqrt2-is-1.5", "kappa-0.04", "half-is-0.6", "leaky-alpha-1", "gelu-approximate-fast"],
)
def test_a_constant_off_the_pattern_is_refused(tmp_path, act, words):
    refused(save(tmp_path / "m.onnx", act), *words)


def test_constants_within_a_few_float32_ulps_are_accepted(tmp_path):
    off = float(np.nextafter(np.nextafter(f32(math.sqrt(2)), f32(2)), f32(2)))  # two ulps up

    def act(h, a):
        return [n if n.name != "sqrt2" else const("sqrt2", off) for n in erf_gelu_torch(h, a)]

    assert weights.scan(save(tmp_path / "m.onnx", act)).blocks[0].activation == "gelu"


def test_a_scale_between_the_matrices_is_named(tmp_path):
    def act(h, a):
        return [helper.make_node("Relu", [h], ["r"]), const("q", 0.25), helper.make_node("Mul", ["r", "q"], [a])]

    refused(save(tmp_path / "m.onnx", act), "0.25")


@pytest.mark.parametrize("op, want", [("Relu", "reglu"), ("Gelu", "geglu")])
def test_gated_graphs(tmp_path, op, want):
    value = RNG.normal(size=(N, D)).astype(f32)

    def act(h, a):
        return [
            helper.make_node(op, [h], ["g"]),
            helper.make_node("MatMul", ["x", "Wv"], ["v"], name="/mlp/value/MatMul"),
            helper.make_node("Mul", ["g", "v"], [a]),
        ]

    inits = [numpy_helper.from_array(value.T.copy(), "Wv")]
    block = weights.load_block(save(tmp_path / "g.onnx", act, extra_inits=inits))
    assert (block.gated, block.activation, block.activation_source) == (True, want, "onnx graph")
    np.testing.assert_array_equal(block.params.value, value)


# ---------------------------------------------------------------------------------------------
# quantised weights: dequantised exactly, and said so


def _q(rng, shape, dtype=np.int8):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def test_dequantize_linear_per_axis_and_per_tensor(tmp_path):
    rng = np.random.default_rng(1)
    q_up, q_down = _q(rng, (D, N)), _q(rng, (N, D), np.uint8)  # stored (in, out)
    s_up = rng.uniform(0.001, 0.1, size=N).astype(f32)  # per output column: axis 1
    z_up = _q(rng, (N,))
    s_down, z_down = f32(0.0123), np.uint8(131)  # per tensor
    inits = [
        numpy_helper.from_array(q_up, "w1_q"),
        numpy_helper.from_array(s_up, "w1_scale"),
        numpy_helper.from_array(z_up, "w1_zp"),
        numpy_helper.from_array(q_down, "w2_q"),
        numpy_helper.from_array(np.array(s_down), "w2_scale"),
        numpy_helper.from_array(np.array(z_down), "w2_zp"),
    ]
    pre = [
        helper.make_node("DequantizeLinear", ["w1_q", "w1_scale", "w1_zp"], ["W1"], axis=1, name="/dq1"),
        helper.make_node("DequantizeLinear", ["w2_q", "w2_scale", "w2_zp"], ["W2"], name="/dq2"),
    ]

    def act(h, a):
        return [helper.make_node("Relu", [h], [a])]

    path = tmp_path / "q.onnx"
    save(path, act, extra_inits=inits, pre=pre, up=np.zeros((1, 1), f32), down=np.zeros((1, 1), f32))
    # point the MatMuls at the dequantised tensors
    model = onnx.load(str(path))
    for n in model.graph.node:
        if n.op_type == "MatMul":
            n.input[1] = {"onnx::MatMul_11": "W1", "onnx::MatMul_12": "W2"}[n.input[1]]
    keep = [t for t in model.graph.initializer if not t.name.startswith("onnx::MatMul")]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    onnx.checker.check_model(model)
    onnx.save(model, path)

    want_up = (s_up.astype(np.float64) * (q_up.astype(np.float64) - z_up.astype(np.float64))).T
    want_down = (np.float64(s_down) * (q_down.astype(np.float64) - np.float64(z_down))).T
    block = weights.load_block(path)
    assert "int8" in block.dtype and "dequantised" in block.dtype
    assert block.params.up.dtype == np.float64
    np.testing.assert_array_equal(block.params.up, want_up)
    np.testing.assert_array_equal(block.params.down, want_down)
    assert set(weights.scan(path).unused) == set()  # scales and zero points are the weights' own
    code, out, err = run(path, "--json")
    assert code == 0, err
    (row,) = json.loads(out)["blocks"]
    assert "dequantised" in row["dtype"] and "activation" in row["quantisation"]


def quantize_dynamic_matmul(x, w_q, w_scale, w_zp, y, name):
    """onnxruntime ``quantize_dynamic``'s MatMul: DynamicQuantizeLinear on the input, MatMulInteger,
    Cast to float, the two scales multiplied, the product applied."""
    return [
        helper.make_node(
            "DynamicQuantizeLinear",
            [x],
            [f"{x}_quantized", f"{x}_scale", f"{x}_zero_point"],
            name=f"{x}_QuantizeLinear",
        ),
        helper.make_node(
            "MatMulInteger", [f"{x}_quantized", w_q, f"{x}_zero_point", w_zp], [f"{y}_output_quantized"], name=name
        ),
        helper.make_node(
            "Cast", [f"{y}_output_quantized"], [f"{y}_output_quantized_cast_output"], to=1, name=f"{name}_cast"
        ),
        helper.make_node("Mul", [f"{x}_scale", w_scale], [f"{name}_scales_mul:0"], name=f"{name}_scales_mul"),
        helper.make_node(
            "Mul",
            [f"{y}_output_quantized_cast_output", f"{name}_scales_mul:0"],
            [y],
            name=f"{name}_output_scale_mul",
        ),
    ]


def save_dynamic(path, rng, per_channel=False, a_side=None):
    q1, q2 = _q(rng, (D, N)), _q(rng, (N, D))
    if per_channel:
        s1, s2 = rng.uniform(0.001, 0.1, size=N).astype(f32), rng.uniform(0.001, 0.1, size=D).astype(f32)
        z1, z2 = _q(rng, (N,)), _q(rng, (D,))
    else:
        s1, s2, z1, z2 = np.array(f32(0.031)), np.array(f32(0.017)), np.array(np.int8(0)), np.array(np.int8(-3))
    inits = [
        numpy_helper.from_array(a, n)
        for a, n in (
            (q1, "W1_quantized"),
            (s1, "W1_scale"),
            (z1, "W1_zero_point"),
            (q2, "W2_quantized"),
            (s2, "W2_scale"),
            (z2, "W2_zero_point"),
            (B_UP, "b1"),
        )
    ]
    nodes = quantize_dynamic_matmul("x", "W1_quantized", "W1_scale", "W1_zero_point", "h0", "/mlp/fc1/MatMul_quant")
    nodes += [helper.make_node("Add", ["h0", "b1"], ["h"]), *erf_gelu_torch("h", "a")]
    nodes += quantize_dynamic_matmul("a", "W2_quantized", "W2_scale", "W2_zero_point", "o", "/mlp/fc2/MatMul_quant")
    nodes.append(helper.make_node("Add", ["o", "x"], ["y"]))
    if a_side == "static":  # a QuantizeLinear with a fixed scale clips the activation: not the block
        nodes[0] = helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["x_quantized"], name="/static/QuantizeLinear")
        nodes.insert(0, const("xs", 0.1))
        nodes.insert(0, const("xz", 128, np.uint8))
        nodes = [n for n in nodes if n.op_type != "Mul" or "x_scale" not in n.input]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if a_side is None:
        onnx.checker.check_model(model)
    onnx.save(model, path)
    deq = lambda q, s, z: (s.astype(np.float64) * (q.astype(np.float64) - z.astype(np.float64))).T  # noqa: E731
    return path, deq(q1, s1, z1), deq(q2, s2, z2)


@pytest.mark.parametrize("per_channel", [False, True])
def test_matmulinteger_blocks_are_decided_on_dequantised_weights(tmp_path, per_channel):
    path, want_up, want_down = save_dynamic(tmp_path / "dyn.onnx", np.random.default_rng(2), per_channel)
    model = weights.scan(path)
    (block,) = model.blocks
    assert (block.name, block.activation, block.residual) == ("mlp", "gelu", True)
    assert block.dtype == "int8 (dequantised)" and model.unused == {}
    block = block.load()
    np.testing.assert_array_equal(block.params.up, want_up)
    np.testing.assert_array_equal(block.params.down, want_down)
    np.testing.assert_array_equal(block.hidden_bias, B_UP)
    result = weights.check(block, decision=condition.Decision(time_limit=5))
    assert result.status in ("absorbable", "not_absorbable", "undecided") and result.dtype == block.dtype
    code, out, err = run(path)
    assert code == 0 and "dequantised from int8" in out and "not part of the block" in out, err


def test_static_activation_quantisation_is_refused(tmp_path):
    path, *_ = save_dynamic(tmp_path / "static.onnx", np.random.default_rng(3), a_side="static")
    refused(path, "MatMulInteger", "/mlp/fc1/MatMul_quant")


def test_cast_mul_sub_dequantisation(tmp_path):
    rng = np.random.default_rng(4)
    q1, q2 = _q(rng, (D, N)), _q(rng, (N, D))
    s1, s2, z1 = rng.uniform(0.001, 0.1, size=N).astype(f32), np.array(f32(0.02)), np.array(f32(3.0))
    inits = [numpy_helper.from_array(a, n) for a, n in ((q1, "q1"), (s1, "s1"), (q2, "q2"), (s2, "s2"), (z1, "z1"))]
    pre = [  # (Cast(q1) - z1)·s1 and Cast(q2)·s2, as tf2onnx writes a dequantised constant
        helper.make_node("Cast", ["q1"], ["q1f"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["q1f", "z1"], ["q1z"]),
        helper.make_node("Mul", ["q1z", "s1"], ["onnx::MatMul_11"]),
        helper.make_node("Cast", ["q2"], ["q2f"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["s2", "q2f"], ["onnx::MatMul_12"]),
    ]
    path = tmp_path / "cm.onnx"
    save(path, single("Relu"), extra_inits=inits, pre=pre)
    model = onnx.load(str(path))
    keep = [t for t in model.graph.initializer if not t.name.startswith("onnx::MatMul")]
    del model.graph.initializer[:]
    model.graph.initializer.extend(keep)
    onnx.save(model, path)
    block = weights.load_block(path)
    np.testing.assert_array_equal(block.params.up, (s1.astype(np.float64) * (q1.astype(np.float64) - 3.0)).T)
    np.testing.assert_array_equal(block.params.down, (np.float64(s2) * q2.astype(np.float64)).T)


@pytest.mark.parametrize("how", ["direct", "cast-only"])
def test_integer_weights_without_dequantisation_are_refused_per_tensor(tmp_path, how):
    q = _q(np.random.default_rng(5), (D, N))
    if how == "direct":
        path = save(tmp_path / "i.onnx", single("Relu"), up=q)
    else:
        pre = [helper.make_node("Cast", ["w_int"], ["onnx::MatMul_11"], to=TensorProto.FLOAT, name="/w/Cast")]
        path = save(tmp_path / "i.onnx", single("Relu"), pre=pre, extra_inits=[numpy_helper.from_array(q, "w_int")])
        model = onnx.load(str(path))
        keep = [t for t in model.graph.initializer if t.name != "onnx::MatMul_11"]
        del model.graph.initializer[:]
        model.graph.initializer.extend(keep)
        onnx.save(model, path)
    refused(path, "int8", "onnx::MatMul_11" if how == "direct" else "w_int")


# ---------------------------------------------------------------------------------------------
# weights in Constant nodes (paddle2onnx)


def paddle_file(path, acts, rng):
    """Blocks as paddle2onnx writes them: ``linear_k.w_0`` / ``.b_0`` in ``Constant`` nodes, MatMul + Add."""
    blocks, nodes, x = [], [], "x"
    for k, act in enumerate(acts):
        arrays = (
            rng.normal(size=(D, N)).astype(f32),
            rng.normal(size=N).astype(f32),
            rng.normal(size=(N, D)).astype(f32),
            rng.normal(size=D).astype(f32),
        )
        blocks.append(arrays)
        names = [f"linear_{2 * k}.w_0", f"linear_{2 * k}.b_0", f"linear_{2 * k + 1}.w_0", f"linear_{2 * k + 1}.b_0"]
        for name, arr in zip(names, arrays):
            nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name)))
        nodes += [
            helper.make_node("MatMul", [x, names[0]], [f"m{k}"], name=f"p2o.MatMul.{2 * k}"),
            helper.make_node("Add", [f"m{k}", names[1]], [f"h{k}"], name=f"p2o.Add.{4 * k}"),
            helper.make_node(act, [f"h{k}"], [f"a{k}"], name=f"p2o.{act}.{k}"),
            helper.make_node("MatMul", [f"a{k}", names[2]], [f"o{k}"], name=f"p2o.MatMul.{2 * k + 1}"),
            helper.make_node("Add", [f"o{k}", names[3]], [f"c{k}"], name=f"p2o.Add.{4 * k + 1}"),
            helper.make_node("Add", [f"c{k}", x], [f"y{k}"], name=f"p2o.Add.{4 * k + 2}"),
        ]
        x = f"y{k}"
    graph = helper.make_graph(
        nodes,
        "paddle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, D])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path, blocks


def test_constant_node_weights_read_like_initializers(tmp_path):
    path, arrays = paddle_file(tmp_path / "paddle.onnx", ("Relu", "Relu"), np.random.default_rng(6))
    found = weights.scan(path)
    assert len(found.blocks) == 2 and found.unused == {}
    for block, (w1, b1, w2, b2) in zip(found.blocks, arrays):
        block = block.load()
        assert (block.activation, block.residual) == ("relu", True)
        np.testing.assert_array_equal(block.params.up, w1.T)
        np.testing.assert_array_equal(block.params.down, w2.T)
        np.testing.assert_array_equal(block.hidden_bias, b1)
        np.testing.assert_array_equal(block.biases["down"], b2)
    code, out, err = run(path)
    assert code == 0 and "2 MLP block(s)" in out, err


def test_blocks_with_different_activations_each_read_their_own(tmp_path):
    path, _ = paddle_file(tmp_path / "mixed.onnx", ("Relu", "Gelu"), np.random.default_rng(7))
    assert [b.activation for b in weights.scan(path).blocks] == ["relu", "gelu"]
    refused(path, "gelu", "relu", args=("--activation", "relu"))  # the argument disagrees with block 1


def test_constant_node_with_an_initializer_name_is_refused(tmp_path):
    twin = helper.make_node("Constant", [], ["onnx::MatMul_11"], value=numpy_helper.from_array(UP.T * 2, "t"))
    refused(save(tmp_path / "twin.onnx", single("Relu"), pre=[twin]), "onnx::MatMul_11")


# ---------------------------------------------------------------------------------------------
# config.json against the graph


def test_config_json_disagreeing_with_the_graph_is_refused(tmp_path):
    path = save(tmp_path / "model.onnx", single("Relu"))
    (tmp_path / "config.json").write_text(json.dumps({"hidden_act": "gelu"}))
    refused(path, "config.json", "gelu", "relu")
    (tmp_path / "config.json").write_text(json.dumps({"hidden_act": "relu"}))
    (block,) = weights.scan(path).blocks
    assert block.activation == "relu" and "config.json" in block.activation_source
