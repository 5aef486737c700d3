"""Issue 57, the medium findings and two costs: names from files escaped wherever they are printed,
ONNX counts bounded before the graph is parsed, GGUF byte ranges their own, integer tensors
refused per tensor, and the table's short reasons.

Every file is made here, small, in the layout its format has (the writers of tests/test_hostile.py
and tests/test_formats.py); no test is timed: costs are bounded by counts.
"""

import json
import struct

import numpy as np
import pytest
from test_formats import save_ct2
from test_hostile import DOWN, UP, _g, _tensor, gguf_file, onnx_file, safetensors_file, torch_zip

from absorbjax import cli
from absorbjax.weights._conventions import printable

D, N = 4, 8
# a name that, printed raw, returns the carriage, writes a row of its own that says absorbable,
# starts a new line and colours the terminal
FORGED = "x\r0      evil  4  8  float32  -     absorbable      relaxation  0.0000  0.0000  1    0.01\n1 \x1b[31mred"


def check(capsys, *args):
    """``absorbjax check ARGS``: (exit code, stdout, stderr)."""
    code = cli.main(["check", *map(str, args), "--no-progress"])
    out, err = capsys.readouterr()
    return code, out, err


def one_line(code, err, *words):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("absorbjax check:"), err
    assert "Traceback" not in err and "\x1b" not in err and "\r" not in err, err
    for w in words:
        assert w in err, f"{w!r} not in {err!r}"
    return lines[0]


# ---------------------------------------------------------------------------------------------
# names: escaped in the table, the JSON and the errors


def _key(x: str) -> bytes:  # a pickle BINUNICODE as torch writes it, lone surrogates kept
    b = x.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(b)) + b


def hostile_torch(path, prefixes):
    items, records = [], {}
    for i, prefix in enumerate(prefixes):
        items.append((f"{prefix}.fc1.weight", _tensor(str(2 * i), N * D, 0, (N, D), (D, 1))))
        items.append((f"{prefix}.fc2.weight", _tensor(str(2 * i + 1), D * N, 0, (D, N), (N, 1))))
        records |= {str(2 * i): UP.tobytes(), str(2 * i + 1): DOWN.tobytes()}
    body = b"".join(_key(k) + v for k, v in items)
    pkl = b"\x80\x02" + _g("collections", "OrderedDict") + b")R(" + body + b"u."
    return torch_zip(path, pkl, records)


def hostile_files(d):
    prefixes = ["lone\ud800.0", FORGED, "esc\x1b[2J.2"]
    out = {"torch": (hostile_torch(d / "names.pt", prefixes), 3)}
    entries = []
    for prefix in ("cr\r.0", "esc\x1b[31m.1"):
        entries += [(f"{prefix}.fc1.weight", "F32", UP.shape, UP.tobytes())]
        entries += [(f"{prefix}.fc2.weight", "F32", DOWN.shape, DOWN.tobytes())]
    out["safetensors"] = (
        safetensors_file(d / "names.safetensors", [(json.dumps(n)[1:-1], *r) for n, *r in entries]),
        2,
    )
    tensors = [(f"blk.{k}.ffn_{r}.weight", a, 0) for k in (0, 1) for r, a in (("up", UP), ("down", DOWN))]
    out["gguf"] = (
        gguf_file(d / "names.gguf", [("blk.0\n\x1b[31m" + n[5:], *r) for n, *r in tensors[:2]] + tensors[2:]),
        2,
    )
    np.savez(
        d / "names.npz",
        **{f"{p}.fc1.weight": UP for p in ("a\r", "b\n")} | {f"{p}.fc2.weight": DOWN for p in ("a\r", "b\n")},
    )
    out["npz"] = (d / "names.npz", 2)
    return out


def _rows(out: str, blocks: int):
    """The table's rows (lines after the header that start with a layer number) and the status
    column of each, read at the header's offsets."""
    lines = out.splitlines()
    header = lines[1]
    rows = [line for line in lines[2:] if line[:1].isdigit()]
    at = header.index("status")
    return rows, [row[at:].split()[0] for row in rows]


@pytest.mark.parametrize("fmt", ["torch", "safetensors", "gguf", "npz"])
def test_hostile_names_forge_no_row_and_reach_no_terminal(tmp_path, capsys, fmt):
    path, blocks = hostile_files(tmp_path)[fmt]
    code, out, err = check(capsys, path, "--activation", "relu")
    assert code == 0 and "Traceback" not in err, err
    out.encode("utf-8")  # strict: a lone surrogate printed raw fails here, as it does on a terminal
    assert "\r" not in out and "\x1b" not in out and all(line.isprintable() for line in out.split("\n")), out
    rows, status = _rows(out, blocks)
    assert len(rows) == blocks and status == ["not_absorbable"] * blocks, out
    code, out, _ = check(capsys, path, "--activation", "relu", "--json")
    record = json.loads(out)
    assert code == 0 and "\\u001b" not in out, out
    names = [b["name"] for b in record["blocks"]] + list(record["unused"])
    assert len(record["blocks"]) == blocks and all(n.isprintable() for n in names), names


def test_a_block_is_chosen_by_its_name_as_printed(tmp_path, capsys):
    path, _ = hostile_files(tmp_path)["torch"]
    code, out, err = check(capsys, path, "--activation", "relu", "--layer", printable("esc\x1b[2J.2"), "--json")
    assert code == 0, err
    assert [b["name"] for b in json.loads(out)["blocks"]] == ["esc\\x1b[2J.2"]


def test_errors_escape_the_names_they_hold(tmp_path, capsys):
    i32 = np.arange(N * D, dtype=np.int32).reshape(N, D)
    entries = [
        (json.dumps("l\x1b[31m\r.fc1.weight")[1:-1], "I32", i32.shape, i32.tobytes()),
        (json.dumps("l\x1b[31m\r.fc2.weight")[1:-1], "F32", DOWN.shape, DOWN.tobytes()),
    ]
    path = safetensors_file(tmp_path / "m.safetensors", entries)
    one_line(*check(capsys, path, "--activation", "relu")[::2], "int32", "l\\x1b[31m")
    path, _ = hostile_files(tmp_path)["torch"]
    one_line(*check(capsys, path, "--activation", "relu", "--layer", "no\x1b[2Jsuch")[::2], "no\\x1b[2Jsuch")


def test_printable_escapes_what_moves_the_cursor_and_nothing_else():
    assert printable("a\rb\nc\x1b[31m\ud800\u202e\u2028") == "a\\rb\\nc\\x1b[31m\\ud800\\u202e\\u2028"
    for name in ("encoder.layer.3.intermediate.dense", "blk.0.ffn_up", "模型.层", "a b\\c"):
        assert printable(name) == name
    assert printable(printable("x\x1by")) == printable("x\x1by")  # idempotent: safe to apply twice
    assert printable("x" * 300, 80) == "x" * 80 + "…"


# ---------------------------------------------------------------------------------------------
# ONNX: nodes, initializers and fields counted from the wire format before anything is parsed

MIB = str(1 << 20)  # the smallest budget: 256 nodes and initializers, 4096 fields


def _grown(path, grow):
    import onnx

    model = onnx.load(onnx_file(path))
    grow(model.graph)
    onnx.save(model, path)
    return path


def _subgraph(graph):
    from onnx import TensorProto, helper

    inner = helper.make_graph(
        [helper.make_node("Identity", ["c"], [f"i{k}"]) for k in range(300)],
        "inner",
        [],
        [helper.make_tensor_value_info("i0", TensorProto.BOOL, [])],
    )
    graph.node.append(helper.make_node("If", ["c"], ["z"], then_branch=inner, else_branch=inner))


@pytest.mark.parametrize(
    "grow, words",
    [
        (lambda g: [g.node.add() for _ in range(300)], "nodes and initializers"),
        (lambda g: [g.initializer.add() for _ in range(300)], "nodes and initializers"),
        (_subgraph, "nodes and initializers"),
        (lambda g: [g.value_info.add() for _ in range(5000)], "protobuf fields"),
    ],
    ids=["empty nodes", "empty initializers", "nodes in a subgraph", "empty value infos"],
)
def test_onnx_counts_are_bounded_before_the_graph_is_parsed(tmp_path, capsys, monkeypatch, grow, words):
    pytest.importorskip("onnx")
    import onnx

    path = _grown(tmp_path / "m.onnx", grow)
    parsed = []
    for name in ("load", "load_model", "load_model_from_string", "load_from_string"):
        real = getattr(onnx, name)
        monkeypatch.setattr(onnx, name, lambda *a, _real=real, **k: parsed.append(1) or _real(*a, **k))
    line = one_line(*check(capsys, path, "--activation", "relu", "--max-bytes", MIB)[::2], words, "budget")
    assert parsed == [], "the onnx package parsed the file before the counts were checked"
    assert "256" in line or "4,096" in line
    code, _, err = check(capsys, path, "--activation", "relu")  # the default budget reads it
    assert code == 0 or "more than" not in err, err


def test_census_counts_what_the_onnx_package_parses(tmp_path):
    pytest.importorskip("onnx")
    import onnx

    from absorbjax.weights import _onnxgraph

    path = _grown(tmp_path / "m.onnx", _subgraph)
    model = onnx.load(path)
    nodes, fields = _onnxgraph.census(path.read_bytes(), onnx.ModelProto.DESCRIPTOR)
    assert nodes == len(model.graph.node) + len(model.graph.initializer) + 2 * 300
    assert fields > nodes
    with pytest.raises(ValueError, match="not an ONNX model"):
        _onnxgraph.census(path.read_bytes()[:-3], onnx.ModelProto.DESCRIPTOR)


# ---------------------------------------------------------------------------------------------
# GGUF: each tensor's bytes its own, at a multiple of the alignment


def _offsets(raw: bytes, names) -> dict[str, int]:
    """name → the byte of its tensor info's offset field (after name, rank, dims, type)."""
    out = {}
    for name in names:
        b = name.encode()
        at = raw.index(struct.pack("<Q", len(b)) + b) + 8 + len(b)
        (rank,) = struct.unpack_from("<I", raw, at)
        out[name] = at + 4 + 8 * rank + 4
    return out


def _patched(path, offsets: dict[str, int]):
    raw = bytearray(path.read_bytes())
    for name, at in _offsets(bytes(raw), offsets).items():
        struct.pack_into("<Q", raw, at, offsets[name])
    path.write_bytes(bytes(raw))
    return path


def test_gguf_tensors_sharing_bytes_are_refused(tmp_path, capsys):
    blocks = 200  # the issue's 20,000 blocks listing one byte range, scaled down: refused on the header
    tensors = [(f"blk.{k}.ffn_{r}.weight", a, 0) for k in range(blocks) for r, a in (("up", UP), ("down", DOWN))]
    path = gguf_file(tmp_path / "shared.gguf", tensors)
    _patched(path, {n: 0 if "up" in n else UP.nbytes for n, _, _ in tensors})
    one_line(*check(capsys, path, "--activation", "relu")[::2], "share bytes", "blk.")


def test_gguf_tensor_off_the_alignment_is_refused(tmp_path, capsys):
    tensors = [("blk.0.ffn_up.weight", UP, 0), ("blk.0.ffn_down.weight", DOWN, 0)]
    path = _patched(gguf_file(tmp_path / "odd.gguf", tensors), {"blk.0.ffn_down.weight": UP.nbytes - 4})
    one_line(*check(capsys, path, "--activation", "relu")[::2], "alignment", "blk.0.ffn_down.weight")


# ---------------------------------------------------------------------------------------------
# integer tensors: refused per tensor, whatever the container


def _onnx_int_bias(path):
    import onnx
    from onnx import numpy_helper

    model = onnx.load(onnx_file(path))
    up = next(n for n in model.graph.node if n.name == "/mlp/up")
    up.output[0] = "h0"
    model.graph.node.append(onnx.helper.make_node("Add", ["h0", "b_int"], ["h"]))
    model.graph.initializer.append(numpy_helper.from_array(np.arange(N, dtype=np.int32), "b_int"))
    onnx.save(model, path)
    return path


def _mixed_index(d):
    """An index naming a CTranslate2 shard with int8 weights and a GGUF shard."""
    save_ct2(d / "model.bin", {"ffn/linear_0/weight": UP.astype(np.int8), "ffn/linear_1/weight": DOWN.astype(np.int8)})
    gguf_file(d / "extra.gguf", [("token_embd.weight", UP, 0)])
    index = {
        "weight_map": {
            "ffn.linear_0.weight": "model.bin",
            "ffn.linear_1.weight": "model.bin",
            "token_embd.weight": "extra.gguf",
        }
    }
    (d / "model.index.json").write_text(json.dumps(index))
    return d / "model.index.json"


def integer_files(d, kind):
    bias = np.arange(N, dtype=np.int8)
    if kind == "npz":
        np.savez(d / "m.npz", **{"fc1.weight": UP, "fc2.weight": DOWN, "fc1.bias": bias})
        return d / "m.npz", "fc1.bias"
    if kind == "safetensors":
        entries = [("fc1.weight", "F32", UP.shape, UP.tobytes()), ("fc2.weight", "F32", DOWN.shape, DOWN.tobytes())]
        entries.append(("fc1.bias", "I32", (N,), bias.astype(np.int32).tobytes()))
        return safetensors_file(d / "m.safetensors", entries), "fc1.bias"
    if kind == "ctranslate2":
        variables = {"ffn/linear_0/weight": UP, "ffn/linear_1/weight": DOWN, "ffn/linear_0/bias": bias}
        return save_ct2(d / "model.bin", variables), "ffn.linear_0.bias"
    if kind == "gguf":
        tensors = [("blk.0.ffn_up.weight", UP, 0), ("blk.0.ffn_down.weight", DOWN, 0)]
        return gguf_file(
            d / "m.gguf", tensors + [("blk.0.ffn_up.bias", bias.astype(np.int32), 26)]
        ), "blk.0.ffn_up.bias"
    if kind == "onnx":
        pytest.importorskip("onnx")
        return _onnx_int_bias(d / "m.onnx"), "b_int"
    return _mixed_index(d), "ffn.linear_0.weight"


@pytest.mark.parametrize("kind", ["npz", "safetensors", "ctranslate2", "gguf", "onnx", "ct2+gguf index"])
def test_integer_weights_and_biases_are_refused_naming_the_tensor(tmp_path, capsys, kind):
    path, tensor = integer_files(tmp_path, kind)
    one_line(*check(capsys, path, "--activation", "relu")[::2], tensor, "integers are never read")


def test_integer_weights_of_a_gated_block_are_refused_before_prop6(tmp_path, capsys):
    variables = {
        "ffn/linear_0/weight": UP.astype(np.int8),
        "ffn/linear_0_noact/weight": UP.astype(np.int8),
        "ffn/linear_1/weight": DOWN.astype(np.int8),
    }
    save_ct2(tmp_path / "model.bin", variables)
    gguf_file(tmp_path / "extra.gguf", [("token_embd.weight", UP, 0)])
    index = {"weight_map": {k.replace("/", "."): "model.bin" for k in variables} | {"token_embd.weight": "extra.gguf"}}
    (tmp_path / "model.index.json").write_text(json.dumps(index))
    code, _, err = check(capsys, tmp_path / "model.index.json", "--activation", "swiglu")
    one_line(code, err, "ffn.linear_", "integers are never read")


# ---------------------------------------------------------------------------------------------
# the table: short reasons for degenerate and undecided rows; gated rows decided unread


def test_degenerate_and_undecided_rows_show_their_short_reason(tmp_path, capsys):
    zero_col, parallel = DOWN.copy(), UP.copy()
    zero_col[:, 5] = 0
    parallel[3] = 2 * parallel[2]
    arrays = {"l.0.fc1.weight": UP, "l.0.fc2.weight": zero_col, "l.1.fc1.weight": parallel, "l.1.fc2.weight": DOWN}
    np.savez(tmp_path / "m.npz", **arrays)
    code, out, err = check(capsys, tmp_path / "m.npz", "--activation", "relu")
    assert code == 0, err
    assert "  layer 0: degenerate: columns of W_down are zero: [5]" in out.splitlines(), out
    assert "  layer 1: degenerate: rows of W_up are parallel: pairs [(2, 3)]" in out.splitlines(), out
    gate = {"l.0.gate.weight": UP, "l.0.value.weight": UP, "l.0.down.weight": DOWN, "l.0.gate.bias": np.ones(N)}
    np.savez(tmp_path / "g.npz", **gate)
    code, out, err = check(capsys, tmp_path / "g.npz", "--activation", "swiglu")
    assert (
        code == 0
        and "  layer 0: undecided: Prop 5/6 are proved for bias-free blocks; it has a nonzero hidden bias"
        in out.splitlines()
    ), out + err


def test_a_gated_row_decided_without_reading_its_weights_says_so(tmp_path, capsys):
    nan = UP.copy()
    nan[0, 0] = np.nan  # never read: Prop 6 decides from the activation alone
    np.savez(tmp_path / "g.npz", gate=nan, value=UP, down=DOWN)
    code, out, err = check(capsys, tmp_path / "g.npz", "--activation", "swiglu")
    assert code == 0, err
    assert "layer 0: gated, no hidden bias: decided by Prop 6 from the activation alone, without reading" in out
    code, out, _ = check(capsys, tmp_path / "g.npz", "--activation", "swiglu", "--json")
    assert json.loads(out)["blocks"][0]["weights_read"] is False
    np.savez(tmp_path / "u.npz", up=UP, down=DOWN)
    code, out, _ = check(capsys, tmp_path / "u.npz", "--activation", "relu", "--json")
    assert json.loads(out)["blocks"][0]["weights_read"] is True
