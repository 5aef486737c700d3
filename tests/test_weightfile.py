"""Loading blocks and skips from .npz / .safetensors files."""

import sys

import numpy as np
import pytest

from absorbjax import condition, weightfile
from absorbjax.models import GatedParams, MLPParams

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

try:
    import safetensors.numpy as safetensors_numpy
except ImportError:  # optional dependency
    safetensors_numpy = None

needs_safetensors = pytest.mark.skipif(safetensors_numpy is None, reason="safetensors not installed")
SUFFIXES = [".npz", pytest.param(".safetensors", marks=needs_safetensors)]

RNG = np.random.default_rng(0)
D, N = 3, 8
UP, DOWN = RNG.normal(size=(N, D)), RNG.normal(size=(D, N))
GATE, VALUE = RNG.normal(size=(N, D)), RNG.normal(size=(N, D))


def save(path, tensors, metadata=None):
    if path.suffix == ".npz":
        np.savez(path, **tensors)
    else:
        safetensors_numpy.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path,
                                    metadata=metadata)
    return path


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_roundtrip_ungated(tmp_path, suffix):
    path = save(tmp_path / f"block{suffix}", {"up": UP, "down": DOWN})
    params, activation = weightfile.load_block(path)
    assert isinstance(params, MLPParams) and activation == "relu"
    np.testing.assert_array_equal(params.up, UP)
    np.testing.assert_array_equal(params.down, DOWN)
    params, activation = weightfile.load_block(path, "gelu")
    assert activation == "gelu"
    assert condition.find_absorbing_set(params).status == "not_absorbable"


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_roundtrip_gated_and_hf_names(tmp_path, suffix):
    path = save(tmp_path / f"gated{suffix}", {"gate": GATE, "value": VALUE, "down": DOWN})
    params, activation = weightfile.load_block(path)
    assert isinstance(params, GatedParams) and activation == "swiglu"
    np.testing.assert_array_equal(params.value, VALUE)
    hf = {
        "model.layers.0.mlp.gate_proj.weight": GATE,
        "model.layers.0.mlp.up_proj.weight": VALUE,  # HF up_proj is the linear (value) branch
        "model.layers.0.mlp.down_proj.weight": DOWN,
    }
    params, _ = weightfile.load_block(save(tmp_path / f"hf{suffix}", hf), "geglu")
    np.testing.assert_array_equal(params.gate, GATE)
    np.testing.assert_array_equal(params.value, VALUE)
    np.testing.assert_array_equal(params.down, DOWN)


@needs_safetensors
def test_fc_names_and_stored_activation(tmp_path):
    path = tmp_path / "vit.npz"
    np.savez(path, **{"fc1.weight": UP, "fc2.weight": DOWN}, activation="gelu")
    params, activation = weightfile.load_block(path)
    assert activation == "gelu"
    np.testing.assert_array_equal(params.up, UP)
    path = save(tmp_path / "vit.safetensors", {"fc1": UP, "fc2": DOWN}, metadata={"activation": "silu"})
    assert weightfile.load_block(path)[1] == "silu"
    assert weightfile.load_block(path, "relu")[1] == "relu"  # the argument wins


@needs_safetensors
def test_float32_kept(tmp_path):
    path = save(tmp_path / "f32.safetensors", {"up": UP.astype(np.float32), "down": DOWN.astype(np.float32)})
    params, _ = weightfile.load_block(path)
    assert params.up.dtype == np.float32
    assert condition.find_absorbing_set(params).stored_dtype == "float32"


def one_line(message):
    return "\n" not in message


@pytest.mark.parametrize(
    "tensors,match",
    [
        ({"up": UP}, r"missing \['down'\]"),
        ({"gate": GATE, "down": DOWN}, r"missing \['value'\]"),
        ({"weights": UP}, "no MLP block found"),
        ({"up": UP, "down": DOWN.T}, r"up must have shape \(3, 8\)"),
        ({"up": UP, "down": DOWN[:, :5]}, "must have shape"),
        ({"up": UP[None], "down": DOWN}, "2-D"),
        ({"up": np.where(UP > 1, np.nan, UP), "down": DOWN}, "NaN"),
        ({"fc1.weight": UP, "fc1.bias": np.zeros(N), "fc2.weight": DOWN}, "bias"),
        ({"a.up": UP, "b.up": UP, "down": DOWN}, "several tensors named up"),
    ],
)
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_block_errors(tmp_path, tensors, match, suffix):
    path = save(tmp_path / f"bad{suffix}", tensors)
    with pytest.raises(ValueError, match=match) as err:
        weightfile.load_block(path)
    assert str(path) in str(err.value) and one_line(str(err.value))


def test_missing_safetensors_package(tmp_path, monkeypatch):
    (tmp_path / "w.safetensors").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import fails as if not installed
    with pytest.raises(ValueError, match="optional package 'safetensors'"):
        weightfile.load_block(tmp_path / "w.safetensors")


@needs_safetensors
def test_file_errors(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        weightfile.load_block(tmp_path / "missing.npz")
    for name in ("junk.npz", "junk.safetensors"):
        (tmp_path / name).write_bytes(b"this is not a weight file\n" * 3)
        with pytest.raises(ValueError, match="not a readable") as err:
            weightfile.load_block(tmp_path / name)
        assert one_line(str(err.value))
    (tmp_path / "w.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="unknown format"):
        weightfile.load_block(tmp_path / "w.pt")
    path = save(tmp_path / "ok.npz", {"up": UP, "down": DOWN})
    with pytest.raises(ValueError, match="unknown activation"):
        weightfile.load_block(path, "tanh")
    with pytest.raises(ValueError, match="is gated but the file holds"):
        weightfile.load_block(path, "swiglu")


@needs_safetensors
def test_load_skip(tmp_path):
    A = np.eye(D) + 0.1 * RNG.normal(size=(D, D))
    np.savez(tmp_path / "one.npz", A)
    np.testing.assert_array_equal(weightfile.load_skip(tmp_path / "one.npz"), A)
    np.savez(tmp_path / "named.npz", skip=A, other=np.zeros(2))
    np.testing.assert_array_equal(weightfile.load_skip(tmp_path / "named.npz"), A)
    save(tmp_path / "skip.safetensors", {"skip": A})
    np.testing.assert_array_equal(weightfile.load_skip(tmp_path / "skip.safetensors"), A)
    np.savez(tmp_path / "two.npz", a=A, b=A)
    with pytest.raises(ValueError, match="one array or an entry 'skip'"):
        weightfile.load_skip(tmp_path / "two.npz")
    np.savez(tmp_path / "rect.npz", skip=np.ones((2, 3)))
    with pytest.raises(ValueError, match="square"):
        weightfile.load_skip(tmp_path / "rect.npz")
    np.savez(tmp_path / "nan.npz", skip=np.full((2, 2), np.nan))
    with pytest.raises(ValueError, match="NaN"):
        weightfile.load_skip(tmp_path / "nan.npz")
    with pytest.raises(ValueError, match="no such file"):
        weightfile.load_skip(tmp_path / "nope.npz")
