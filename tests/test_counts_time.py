"""Issue 57, the rest: names made printable when a file is read (for Python callers too), integer
tensors refused by ``scan`` and ``Block.load`` (dequantised types kept), tensor and block counts
capped from the budget before an object is built for any of them, and an archive opened once for
all its tensors (reading ``k`` tensors of an ``.npz`` or PyTorch zip was ``O(k²)``).

Every file is made here, small, in its format's layout (the writers of tests/test_hostile.py,
tests/test_formats.py and tests/test_names_counts.py); no test is timed: costs are bounded by
counting calls and objects. The timings are in the issue's report.
"""

import dataclasses
import json
import struct
import zipfile

import numpy as np
import pytest
from test_containment import count_reads
from test_formats import save_ct2
from test_hostile import DOWN, UP, _tensor, gguf_file, safetensors_file, torch_zip
from test_names_counts import check, hostile_torch, one_line

from absorbjax import weights
from absorbjax.weights import _formats as formats, _ggufheader as ggufheader, _model as model

D, N = 4, 8
MIB = str(1 << 20)  # the smallest budget: 256 tensors, 64 blocks


def raises_printable(call, *words) -> str:
    """``call()`` raises one ``ValueError`` whose message is one printable line holding ``words``."""
    with pytest.raises(ValueError) as err:
        call()
    text = str(err.value)
    assert text.isprintable() and "\n" not in text, repr(text)
    for w in words:
        assert w in text, f"{w!r} not in {text!r}"
    return text


def _entries(names_arrays):
    return [(json.dumps(n)[1:-1], "F32", a.shape, a.tobytes()) for n, a in names_arrays]


# ---------------------------------------------------------------------------------------------
# names: printable as read, so that Block.name, Model.unused and errors are safe from Python too


def test_python_callers_get_printable_names(tmp_path):
    entries = _entries([("ab\r.fc1.weight", UP), ("ab\r.fc2.weight", DOWN), ("emb\x1b[2J", UP)])
    path = safetensors_file(tmp_path / "m.safetensors", entries)
    pt = hostile_torch(tmp_path / "m.pt", ["esc\x1b[31m.0", "lone\ud800.1"])
    ct2 = save_ct2(tmp_path / "model.bin", {"l\x1b[2J/ffn/linear_0/weight": UP, "l\x1b[2J/ffn/linear_1/weight": DOWN})
    for file in (path, pt, ct2):
        found = weights.scan(file, "relu")
        names = [b.name for b in found.blocks] + list(found.unused)
        names += [t for b in found.blocks for t in b.tensors.values()]
        assert names and all(n.isprintable() for n in names), names
        block = weights.load_block(file, "relu", layer=0)
        assert block.params.up.shape == (N, D)
    assert weights.scan(path, "relu").blocks[0].name == "ab\\r"
    assert list(weights.scan(path, "relu").unused) == ["emb\\x1b[2J"]


def test_two_names_that_print_alike_are_refused(tmp_path):
    entries = _entries([("a\rb.fc1.weight", UP), ("a\\rb.fc1.weight", UP), ("a\rb.fc2.weight", DOWN)])
    path = safetensors_file(tmp_path / "m.safetensors", entries)
    raises_printable(lambda: weights.scan(path, "relu"), "a\\rb.fc1.weight", "refusing to choose")


def _bad_view(path):
    """A torch zip whose tensor under a hostile name needs more than its storage."""
    items = [("bad\x1b[31m.fc1.weight", _tensor("0", 3, 0, (N, D), (D, 1)))]
    body = b"".join(b"X" + struct.pack("<I", len(k.encode())) + k.encode() + v for k, v in items)
    pkl = b"\x80\x02" + b"ccollections\nOrderedDict\n)R(" + body + b"u."
    return torch_zip(path, pkl, {"0": UP.tobytes()[:12]})


def test_reader_errors_hold_printable_names(tmp_path):
    raises_printable(lambda: weights.scan(_bad_view(tmp_path / "v.pt"), "relu"), "bad\\x1b[31m.fc1.weight")
    raw = bytearray(save_ct2(tmp_path / "model.bin", {"x\x1b[2J/w": UP}).read_bytes())
    raw[raw.index(b"x\x1b[2J/w") + 7 + 1 + 1 + 8] = 9  # the dtype id after name, NUL, rank, two dimensions
    (tmp_path / "model.bin").write_bytes(bytes(raw))
    raises_printable(lambda: weights.scan(tmp_path / "model.bin", "relu"), "x\\x1b[2J.w", "dtype id")
    d = tmp_path / "index"
    d.mkdir()
    safetensors_file(d / "s.safetensors", _entries([("fc1.weight", UP), ("fc2.weight", DOWN)]))
    wmap = {"fc1.weight": "s.safetensors", "fc2.weight": "s.safetensors", "no\x1b[2Jne": "s.safetensors"}
    (d / "m.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    raises_printable(lambda: weights.scan(d / "m.safetensors.index.json", "relu"), "no\\x1b[2Jne")


# ---------------------------------------------------------------------------------------------
# integers: refused by scan and by Block.load, naming the tensor; dequantised types kept


def _ct2_gguf_index(d):
    save_ct2(d / "model.bin", {"ffn/linear_0/weight": UP.astype(np.int8), "ffn/linear_1/weight": DOWN.astype(np.int8)})
    gguf_file(d / "extra.gguf", [("token_embd.weight", UP, 0)])
    wmap = {"ffn.linear_0.weight": "model.bin", "ffn.linear_1.weight": "model.bin", "token_embd.weight": "extra.gguf"}
    (d / "model.index.json").write_text(json.dumps({"weight_map": wmap}))
    return d / "model.index.json"


def test_scan_refuses_integer_weights_beside_gguf_and_keeps_gguf_block_types(tmp_path):
    path = _ct2_gguf_index(tmp_path)
    raises_printable(lambda: weights.scan(path, "relu"), "ffn.linear_0.weight", "int8", "integers are never read")
    raises_printable(lambda: weights.load_block(path, "relu"), "ffn.linear_0.weight", "integers are never read")
    gguf = pytest.importorskip("gguf")  # GGUF Q8_0 in the same kind of index: dequantised, read
    n = 32  # Q8_0 blocks of 32 along W_down's rows
    rng = np.random.default_rng(1)
    up, down = rng.normal(size=(n, D)).astype(np.float32), rng.normal(size=(D, n)).astype(np.float32)
    q = gguf.quants.quantize(down, gguf.GGMLQuantizationType.Q8_0)
    gguf_file(tmp_path / "m.gguf", [("blk.0.ffn_up.weight", up, 0), ("blk.0.ffn_down.weight", q, 8, (n, D))])
    wmap = {"blk.0.ffn_up.weight": "m.gguf", "blk.0.ffn_down.weight": "m.gguf"}
    (tmp_path / "m.index.json").write_text(json.dumps({"weight_map": wmap}))
    (block,) = weights.blocks(tmp_path / "m.index.json", "relu")
    assert block.dtype == "F32/Q8_0"
    read = block.load()
    assert read.params.down.dtype.kind == "f" and np.abs(read.params.down - down).max() <= np.abs(down).max() / 127
    assert weights.check(block, distance=False).d == D


def test_scan_refuses_integer_biases(tmp_path):
    np.savez(tmp_path / "m.npz", **{"fc1.weight": UP, "fc2.weight": DOWN, "fc1.bias": np.arange(N, dtype=np.int16)})
    raises_printable(lambda: weights.scan(tmp_path / "m.npz", "relu"), "fc1.bias", "a bias", "int16")


def test_block_load_refuses_arrays_read_as_integers(tmp_path):
    np.savez(tmp_path / "m.npz", up=UP, down=DOWN)
    (block,) = weights.blocks(tmp_path / "m.npz", "relu")
    t = block._ckpt.tensors["up"]  # a loader that hands back integers whatever the header said
    block._ckpt.tensors["up"] = dataclasses.replace(t, load=lambda: UP.astype(np.int32))
    raises_printable(block.load, "up", "int32", "integers are never read")
    block._ckpt.tensors["up"] = t
    assert block.load().params.up.dtype == np.float32


# ---------------------------------------------------------------------------------------------
# counts: at most B / 4096 tensors and B / 16384 blocks, refused before an object is built for any


def many_tensors(d, fmt: str, count: int = 400):
    """A file of one 1 × 2 block and ``count`` one-element tensors, in ``fmt``."""
    one = np.ones((1,), np.float32)
    up, down = np.ones((2, 1), np.float32), np.ones((1, 2), np.float32)
    arrays = {"fc1.weight": up, "fc2.weight": down} | {f"t{k}": one for k in range(count)}
    if fmt == "safetensors":
        return safetensors_file(d / "m.safetensors", _entries(arrays.items()))
    if fmt == "gguf":
        return gguf_file(d / "m.gguf", [(k, a, 0) for k, a in arrays.items()])
    if fmt == "npz":
        np.savez(d / "m.npz", **arrays)
        return d / "m.npz"
    if fmt == "ctranslate2":
        return save_ct2(d / "model.bin", {k.replace(".", "/"): a for k, a in arrays.items()})
    safetensors_file(d / "s.safetensors", _entries(list(arrays.items())[:2]))
    wmap = dict.fromkeys(arrays, "s.safetensors")
    (d / "m.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    return d / "m.safetensors.index.json"


@pytest.mark.parametrize("fmt", ["safetensors", "gguf", "npz", "ctranslate2", "index"])
def test_tensor_counts_are_refused_before_a_tensor_is_listed(tmp_path, capsys, monkeypatch, fmt):
    path = many_tensors(tmp_path, fmt)
    built, parsed = [], []
    real = formats.Tensor
    monkeypatch.setattr(formats, "Tensor", lambda *a, **k: built.append(1) or real(*a, **k))
    monkeypatch.setattr(json, "loads", lambda *a, _real=json.loads, **k: parsed.append(1) or _real(*a, **k))
    monkeypatch.setattr(zipfile.ZipFile, "_RealGetContents", lambda self: parsed.append(1))
    monkeypatch.setattr(ggufheader._Header, "string", lambda self: parsed.append(1))
    shards = count_reads(monkeypatch) if fmt == "index" else []  # the index's shard is never opened
    line = one_line(*check(capsys, path, "--activation", "relu", "--max-bytes", MIB)[::2], "more than", "budget")
    assert "402" not in line  # the count the file declares is not printed
    assert built == [] and shards == [], "a tensor was listed before the count was checked"
    assert parsed == ([1] if fmt == "index" else []), "the header was parsed before the count was checked"


def test_a_million_declared_gguf_tensors_are_refused_on_the_header(tmp_path, capsys):
    path = gguf_file(tmp_path / "m.gguf", [("blk.0.ffn_up.weight", UP, 0), ("blk.0.ffn_down.weight", DOWN, 0)])
    raw = bytearray(path.read_bytes())
    struct.pack_into("<Q", raw, 8, 10**6)  # the tensor count after magic and version
    path.write_bytes(bytes(raw))
    line = one_line(*check(capsys, path, "--activation", "relu")[::2], "tensors the header declares", "262,144")
    assert "1000000" not in line and "1,000,000" not in line


def tiny_blocks(d, count: int):
    arrays = {f"l.{k}.{r}.weight": a for k in range(count) for r, a in (("fc1", UP), ("fc2", DOWN))}
    np.savez(d / "m.npz", **arrays)
    return d / "m.npz"


def test_block_counts_are_refused_before_a_block_is_built(tmp_path, capsys, monkeypatch):
    path = tiny_blocks(tmp_path, 70)  # 140 tensors: within 256, but 70 blocks over 64
    laid = []
    monkeypatch.setattr(model, "_layout", lambda *a, _real=model._layout: laid.append(1) or _real(*a))
    one_line(*check(capsys, path, "--activation", "relu", "--max-bytes", MIB)[::2], "MLP blocks", "more than 64")
    assert laid == []
    code, out, err = check(capsys, path, "--activation", "relu", "--layer", "0")  # the default budget reads it
    assert code == 0 and len(laid) == 70, err


# ---------------------------------------------------------------------------------------------
# an archive is opened once for all its tensors: reading k tensors was k openings of k members


@pytest.mark.parametrize("fmt", ["npz", "torch"])
def test_an_archive_is_opened_once_for_all_its_tensors(tmp_path, monkeypatch, fmt):
    blocks = 40
    if fmt == "npz":
        path = tiny_blocks(tmp_path, blocks)
    else:
        path = hostile_torch(tmp_path / "m.pt", [f"l.{k}" for k in range(blocks)])
    opened = []
    real = zipfile.ZipFile.__init__
    monkeypatch.setattr(zipfile.ZipFile, "__init__", lambda self, *a, **k: opened.append(1) or real(self, *a, **k))
    found = weights.scan(path, "relu")
    assert len(found.blocks) == blocks
    for block in found.blocks:
        assert weights.check(block, distance=False).n == N
    assert len(opened) <= 2, f"{len(opened)} openings of the archive for {2 * blocks} tensors"
