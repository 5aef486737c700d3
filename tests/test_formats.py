"""Formats read by their own layout: ONNX graphs (blocks found by structure), PyTorch zip
checkpoints (a restricted unpickler, no torch), CTranslate2 ``model.bin``; each file is written
here by hand in the real layout."""

import json
import struct
import sys

import numpy as np
import pytest

from absorbjax import weights

RNG = np.random.default_rng(1)
D, N = 4, 32
UP, DOWN, VALUE = RNG.normal(size=(N, D)), RNG.normal(size=(D, N)), RNG.normal(size=(N, D))
B_UP, B_DOWN = RNG.normal(size=N), RNG.normal(size=D)


def one_line(err) -> str:
    assert "\n" not in str(err.value)
    return str(err.value)


# ---------------------------------------------------------------------------------------------
# ONNX: blocks found by the graph, whatever the initializers are called


def save_onnx(path, act="erf", gated=False, quantised=False):
    """A residual MLP graph as PyTorch exports it: weights stored (in, out), generated names."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, checker, helper, numpy_helper

    f32 = np.float32
    inits = [
        numpy_helper.from_array(UP.T.astype(f32), "onnx::MatMul_101"),
        numpy_helper.from_array(DOWN.T.astype(f32), "onnx::MatMul_102"),
        numpy_helper.from_array(B_UP.astype(f32), "mlp.fc1.bias"),
        numpy_helper.from_array(B_DOWN.astype(f32), "mlp.fc2.bias"),
        numpy_helper.from_array(np.ones((D, D), f32), "onnx::MatMul_100"),
    ]  # an attention-like matrix
    const = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, f32)))  # noqa: E731
    nodes = [
        helper.make_node("MatMul", ["x", "onnx::MatMul_100"], ["attn"], name="/attn/MatMul"),
        helper.make_node("MatMul", ["x", "onnx::MatMul_101"], ["h0"], name="/layer.0/mlp/fc1/MatMul"),
        helper.make_node("Add", ["mlp.fc1.bias", "h0"], ["h"], name="/layer.0/mlp/fc1/Add"),
    ]
    if act == "erf":  # x·½(1 + erf(x/√2)), as torch.onnx exports nn.GELU()
        nodes += [
            const("c_sqrt2", np.sqrt(2)),
            const("c_one", 1.0),
            const("c_half", 0.5),
            helper.make_node("Div", ["h", "c_sqrt2"], ["t1"]),
            helper.make_node("Erf", ["t1"], ["t2"]),
            helper.make_node("Add", ["t2", "c_one"], ["t3"]),
            helper.make_node("Mul", ["h", "t3"], ["t4"]),
            helper.make_node("Mul", ["t4", "c_half"], ["a"]),
        ]
    elif act == "gelu_tanh":
        nodes.append(helper.make_node("Gelu", ["h"], ["a"], approximate="tanh"))
    elif act == "relu":
        nodes.append(helper.make_node("Relu", ["h"], ["a"]))
    if gated:  # SiLU gate times a linear value branch
        inits.append(numpy_helper.from_array(VALUE.T.astype(f32), "onnx::MatMul_103"))
        nodes += [
            helper.make_node("Sigmoid", ["h"], ["sig"]),
            helper.make_node("Mul", ["h", "sig"], ["g"]),
            helper.make_node("MatMul", ["x", "onnx::MatMul_103"], ["v"], name="/layer.0/mlp/value/MatMul"),
            helper.make_node("Mul", ["g", "v"], ["a"]),
        ]
    nodes += [
        helper.make_node("MatMul", ["a", "onnx::MatMul_102"], ["o0"], name="/layer.0/mlp/fc2/MatMul"),
        helper.make_node("Add", ["o0", "mlp.fc2.bias"], ["o"]),
        helper.make_node("Add", ["o", "x"], ["r"]),
        helper.make_node("Add", ["r", "attn"], ["y"]),
    ]
    if quantised:
        inits[0] = numpy_helper.from_array(np.zeros((D, N), np.int8), "w_q")
        inits += [numpy_helper.from_array(np.array(0.1, f32), "w_scale")]
        nodes.insert(0, helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["onnx::MatMul_101"]))
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    checker.check_model(model)
    import onnx

    onnx.save(model, path)
    return path


@pytest.mark.parametrize("act, want", [("erf", "gelu"), ("gelu_tanh", "gelu_tanh"), ("relu", "relu")])
def test_onnx_graph_blocks(tmp_path, act, want):
    model = weights.scan(save_onnx(tmp_path / "m.onnx", act))
    (block,) = model.blocks
    assert (block.name, block.d, block.n, block.activation, block.activation_source) == (
        "layer.0/mlp",
        D,
        N,
        want,
        "onnx graph",
    )
    assert block.residual is True and model.format == "onnx"
    block = block.load()
    np.testing.assert_allclose(block.params.up, UP, rtol=1e-6)  # stored (in, out), read (out, in)
    np.testing.assert_allclose(block.params.down, DOWN, rtol=1e-6)
    np.testing.assert_allclose(block.hidden_bias, B_UP, rtol=1e-6)
    np.testing.assert_allclose(block.biases["down"], B_DOWN, rtol=1e-6)
    assert sorted(model.unused) == ["onnx::MatMul_100"]  # every initializer used or listed


def test_onnx_gated_and_quantised(tmp_path):
    block = weights.load_block(save_onnx(tmp_path / "g.onnx", "silu", gated=True))
    assert block.gated and block.activation == "swiglu" and block.activation_source == "onnx graph"
    np.testing.assert_allclose(block.params.gate, UP, rtol=1e-6)
    np.testing.assert_allclose(block.params.value, VALUE, rtol=1e-6)
    # int8 weights behind DequantizeLinear are dequantised exactly (tests/test_onnx_structure.py)
    block = weights.load_block(save_onnx(tmp_path / "q.onnx", quantised=True))
    assert block.dtype == "float32/int8 (dequantised)" and block.activation == "gelu"
    np.testing.assert_array_equal(block.params.up, np.zeros((N, D)))


# ---------------------------------------------------------------------------------------------
# PyTorch zip checkpoints, read without torch and without running the pickle's code


def save_torch(path, monkeypatch, state, storages, payload=None):
    """Write ``torch.save``'s zip layout by hand (pickle protocol 2 + ``data/<key>`` records).
    ``state``: name → (storage key, offset, shape, stride); ``storages``: key → array."""
    import collections
    import pickle
    import types
    import zipfile

    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):
        raise AssertionError("never called while writing")

    _rebuild_tensor_v2.__module__, _rebuild_tensor_v2.__qualname__ = "torch._utils", "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    kinds = {
        np.dtype(np.float32): "FloatStorage",
        np.dtype(np.float64): "DoubleStorage",
        np.dtype(np.float16): "HalfStorage",
    }
    for kind in kinds.values():
        setattr(torch, kind, type(kind, (), {"__module__": "torch"}))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)

    class Storage:
        def __init__(self, key):
            self.key = key

    class Ref:
        def __init__(self, key, offset, shape, stride):
            self.args = (Storage(key), offset, shape, stride, False, collections.OrderedDict())

        def __reduce__(self):
            return _rebuild_tensor_v2, self.args

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, Storage):
                a = storages[obj.key]
                return "storage", getattr(torch, kinds[a.dtype]), obj.key, "cpu", a.size
            return None

    buf = __import__("io").BytesIO()
    Pickler(buf, protocol=2).dump(
        payload if payload is not None else collections.OrderedDict((k, Ref(*v)) for k, v in state.items())
    )
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", buf.getvalue())
        zf.writestr("archive/byteorder", "little")
        for key, a in storages.items():
            zf.writestr(f"archive/data/{key}", np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())
        zf.writestr("archive/version", "3\n")
    return path


def test_torch_zip_state_dict(tmp_path, monkeypatch):
    # fc1.weight and fc1.bias share one storage (an offset); fc2.weight is a transposed view
    shared = np.concatenate([UP.ravel(), B_UP]).astype(np.float32)
    state = {
        "model.decoder.layers.0.fc1.weight": ("0", 0, (N, D), (D, 1)),
        "model.decoder.layers.0.fc1.bias": ("0", N * D, (N,), (1,)),
        "model.decoder.layers.0.fc2.weight": ("1", 0, (D, N), (1, D)),
        "model.decoder.layers.0.self_attn.v_proj.weight": ("2", 0, (D, D), (D, 1)),
    }
    storages = {"0": shared, "1": np.ascontiguousarray(DOWN.T), "2": np.eye(D, dtype=np.float16)}
    path = save_torch(tmp_path / "pytorch_model.bin", monkeypatch, state, storages)
    (tmp_path / "config.json").write_text(json.dumps({"activation_function": "relu"}))
    for where in (path, tmp_path):  # the file, or the model directory holding it
        model = weights.scan(where)
        (block,) = model.blocks
        assert model.format == "pytorch" and block.activation == "relu" and block.name == "model.decoder.layers.0"
        assert list(model.unused) == ["model.decoder.layers.0.self_attn.v_proj.weight"]
        block = block.load()
        assert block.params.up.dtype == np.float32 and block.params.down.dtype == np.float64
        np.testing.assert_array_equal(block.params.up, UP.astype(np.float32))
        np.testing.assert_array_equal(block.params.down, DOWN)
        np.testing.assert_array_equal(block.hidden_bias, B_UP.astype(np.float32))


def test_torch_zip_refuses_code(tmp_path, monkeypatch):
    import os as os_module

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return os_module.system, (f"touch {marker}",)

    path = save_torch(tmp_path / "evil.pt", monkeypatch, {}, {}, payload={"w": Evil()})
    with pytest.raises(ValueError, match=r"refused to unpickle (posix|os)\.system: only state dicts") as err:
        weights.scan(path)
    assert str(path) in one_line(err) and not marker.exists()
    (tmp_path / "legacy.pt").write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(ValueError, match="legacy torch.save file"):
        weights.scan(tmp_path / "legacy.pt")


# ---------------------------------------------------------------------------------------------
# CTranslate2 model.bin


def save_ct2(path, variables, aliases=(), version=6):
    """Write CTranslate2's binary layout (see :mod:`absorbjax.weights._ct2`)."""
    ids = {
        np.dtype(np.float32): 0,
        np.dtype(np.int8): 1,
        np.dtype(np.int16): 2,
        np.dtype(np.int32): 3,
        np.dtype(np.float16): 4,
    }

    def s(x):
        return struct.pack("<H", len(x) + 1) + x.encode() + b"\0"

    out = struct.pack("<I", version) + s("WhisperSpec") + struct.pack("<II", 3, len(variables))
    for name, a in variables.items():
        a = np.asarray(a)
        out += s(name) + struct.pack("<B", a.ndim) + struct.pack(f"<{a.ndim}I", *a.shape)
        out += struct.pack("<BI", ids[a.dtype], a.nbytes) + a.tobytes()
    out += struct.pack("<I", len(aliases)) + b"".join(s(a) + s(t) for a, t in aliases)
    path.write_bytes(out)
    return path


def ct2_layers(dtype=np.float16):
    out = {"decoder/activation": np.array(3, np.int8), "decoder/num_heads": np.array(6, np.int16)}
    for part in ("decoder", "encoder"):
        out |= {
            f"{part}/layer_0/ffn/linear_0/weight": UP.astype(dtype),
            f"{part}/layer_0/ffn/linear_0/bias": B_UP.astype(dtype),
            f"{part}/layer_0/ffn/linear_1/weight": DOWN.astype(dtype),
            f"{part}/layer_0/ffn/linear_1/bias": B_DOWN.astype(dtype),
            f"{part}/layer_0/ffn/layer_norm/gamma": np.ones(D, dtype),
        }
    return out


def test_ctranslate2(tmp_path):
    path = save_ct2(tmp_path / "model.bin", ct2_layers(), aliases=[("decoder/projection/weight", "x")])
    model = weights.scan(path)
    assert model.format == "ctranslate2"
    assert [(b.name, b.activation, b.activation_source, b.dtype) for b in model.blocks] == [
        (f"{part}.layer_0", "gelu", "ctranslate2 activation=3", "float16") for part in ("decoder", "encoder")
    ]
    block = model.blocks[1].load()
    np.testing.assert_array_equal(block.params.up, UP.astype(np.float16))
    np.testing.assert_array_equal(block.biases["down"], B_DOWN.astype(np.float16))
    assert sorted(model.unused) == [f"{p}.layer_0.ffn.layer_norm.gamma" for p in ("decoder", "encoder")]
    raw = path.read_bytes()
    (tmp_path / "cut.bin").write_bytes(raw[:-3])
    with pytest.raises(ValueError, match="not a readable .bin file"):
        weights.scan(tmp_path / "cut.bin")
    int8 = ct2_layers() | {
        "encoder/layer_0/ffn/linear_0/weight": np.ones((N, D), np.int8),
        "encoder/layer_0/ffn/linear_0/weight_scale": np.ones(N, np.float32),
    }
    with pytest.raises(ValueError, match=r"quantised \(int8/fp8 with weight_scale"):
        weights.scan(save_ct2(tmp_path / "int8.bin", int8))


def test_sharded_torch_index(tmp_path, monkeypatch):
    parts = {
        "pytorch_model-00001-of-00002.bin": {"fc1.weight": UP},
        "pytorch_model-00002-of-00002.bin": {"fc2.weight": DOWN},
    }
    wmap = {}
    for shard, tensors in parts.items():
        state = {k: (str(i), 0, a.shape, (a.shape[1], 1)) for i, (k, a) in enumerate(tensors.items())}
        save_torch(tmp_path / shard, monkeypatch, state, {str(i): a for i, a in enumerate(tensors.values())})
        wmap |= dict.fromkeys(tensors, shard)
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": wmap}))
    model = weights.scan(tmp_path, "gelu")
    assert model.format == "sharded pytorch" and len(model.blocks) == 1
    np.testing.assert_array_equal(model.blocks[0].load().params.down, DOWN)


def test_onnx_gemm_with_bias_inputs(tmp_path):
    """``nn.Linear`` exported as ``Gemm(x, W, b, transB=1)``: weights ``(out, in)``, biases as ``C``."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    f32 = np.float32
    inits = [
        numpy_helper.from_array(a.astype(f32), name)
        for a, name in ((UP, "w1"), (B_UP, "b1"), (DOWN, "w2"), (B_DOWN, "b2"))
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1, name="/ffn/fc1/Gemm"),
        helper.make_node("Relu", ["h"], ["a"]),
        helper.make_node("Gemm", ["a", "w2", "b2"], ["o"], transB=1, name="/ffn/fc2/Gemm"),
        helper.make_node("Add", ["x", "o"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), tmp_path / "gemm.onnx")
    model = weights.scan(tmp_path / "gemm.onnx")
    (block,) = model.blocks
    assert (block.name, block.activation, block.residual, model.unused) == ("ffn", "relu", True, {})
    block = block.load()
    np.testing.assert_allclose(block.params.up, UP, rtol=1e-6)
    np.testing.assert_allclose(block.hidden_bias, B_UP, rtol=1e-6)
    np.testing.assert_allclose(block.biases["down"], B_DOWN, rtol=1e-6)
