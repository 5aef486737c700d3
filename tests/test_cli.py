import json
import re

import jax
import numpy as np
import pytest

from absorbjax import cli, models

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)


@pytest.fixture
def block_files(tmp_path):
    absorbing, S = models.absorbable(jax.random.key(0), 3, 8, "relu")
    generic = models.init(jax.random.key(1), 3, 8, "relu")
    paths = {}
    for name, p in (("absorbing", absorbing), ("generic", generic)):
        paths[name] = tmp_path / f"{name}.npz"
        np.savez(paths[name], up=np.asarray(p.up), down=np.asarray(p.down))
    paths["S"] = S
    return paths


def test_check_decides_and_prints_a_table(block_files, capsys):
    assert cli.main(["check", str(block_files["absorbing"]), "--activation", "relu"]) == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()[1:3]
    assert header.split()[:3] == ["layer", "d", "n"] and "lower" in header and "|S|" in header
    assert row.split()[:6] == ["0", "3", "8", "relu", "(argument)", "float64"] and "absorbable" in row.split()
    assert cli.main(["check", str(block_files["generic"]), "--activation", "relu", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["blocks"]
    assert record["status"] == "not_absorbable" and record["certificate"]["S"] is None
    assert 0 < record["lower"] <= record["upper"] <= 1 and (record["d"], record["n"]) == (3, 8)


def test_check_json_reports_the_set(block_files, capsys):
    assert cli.main(["check", str(block_files["absorbing"]), "--activation", "gelu", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["blocks"]
    assert record["status"] == "absorbable" and record["certificate"]["S"] == list(block_files["S"])
    assert record["S"] == list(block_files["S"]) and record["upper"] < 1e-9


def _bert(tmp_path, layers=3, bias=True, config=True):
    rng = np.random.default_rng(0)
    t = {}
    for i in range(layers):
        t[f"encoder.layer.{i}.attention.output.dense.weight"] = rng.normal(size=(4, 4))
        t[f"encoder.layer.{i}.intermediate.dense.weight"] = rng.normal(size=(20, 4))
        t[f"encoder.layer.{i}.output.dense.weight"] = rng.normal(size=(4, 20))
        if bias:
            t[f"encoder.layer.{i}.intermediate.dense.bias"] = rng.normal(size=20)
            t[f"encoder.layer.{i}.output.dense.bias"] = rng.normal(size=4)
    np.savez(tmp_path / "model.npz", **t)
    if config:
        (tmp_path / "config.json").write_text(json.dumps({"hidden_act": "gelu"}))
    return tmp_path / "model.npz"


def test_check_whole_model_layer_by_layer(tmp_path, capsys):
    path = _bert(tmp_path)
    assert cli.main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()[2:5]]
    assert [r[0] for r in rows] == ["0", "1", "2"]
    assert all(r[3:6] == ["gelu", "(config.json", "hidden_act=gelu)"] for r in rows)
    # a hidden bias: "no S" is not a proof (the converse is open for biased blocks)
    assert all(r[7] == "undecided" for r in rows) and "output biases" in out
    assert cli.main(["check", str(path), "--layer", "2", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["blocks"]
    assert record["layer"] == 2 and record["name"] == "encoder.layer.2" and record["hidden_bias"]
    assert record["seconds"] >= 0 and record["lower"] <= record["upper"]


def test_check_gated_file_is_decided_by_prop6(tmp_path, capsys):
    p = models.init(jax.random.key(0), 3, 8, "swiglu")
    path = tmp_path / "gated.npz"
    np.savez(path, gate=np.asarray(p.gate), value=np.asarray(p.value), down=np.asarray(p.down))
    assert cli.main(["check", str(path), "--activation", "swiglu", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["blocks"]
    assert record["status"] == "not_absorbable" and "Prop 6" in record["reason"]
    assert (record["d"], record["n"]) == (3, 8) and record["seconds"] >= 0
    # a gated block with a hidden bias is not covered by Prop 6
    np.savez(path, **{"gate.weight": np.asarray(p.gate), "gate.bias": np.ones(8),
                      "value.weight": np.asarray(p.value), "down.weight": np.asarray(p.down)})
    assert cli.main(["check", str(path), "--activation", "swiglu", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["blocks"]
    assert record["status"] == "undecided" and "bias" in record["reason"]


@pytest.mark.parametrize("problem, says", [
    ("missing", "no such file"), ("not_npz", "not a readable"), ("missing_key", r"missing \['down'\]"),
    ("shape", r"expected \(3, 8\)"), ("no_activation", "pass --activation"),
    ("transposed", "--transpose"), ("layer", "no layer 7.*--layer"), ("skip", "layer 0: skip must have shape"),
])
def test_check_bad_files_give_one_line_and_exit_2(tmp_path, capsys, problem, says):
    path = tmp_path / "w.npz"
    args = ["--activation", "relu"]
    if problem == "not_npz":
        path.write_text("hello")
    elif problem == "missing_key":
        np.savez(path, up=np.ones((8, 3)))
    elif problem == "shape":
        np.savez(path, up=np.ones((8, 3)), down=np.ones((3, 7)))
    elif problem == "no_activation":
        path, args = _bert(tmp_path, config=False), []
    elif problem == "transposed":
        np.savez(path, up=np.ones((3, 8)), down=np.ones((8, 3)))
    elif problem == "layer":
        path, args = _bert(tmp_path), ["--layer", "7"]
    elif problem == "skip":
        path = _bert(tmp_path, layers=1)
        np.savez(tmp_path / "skip.npz", skip=np.eye(3))
        args = ["--skip", str(tmp_path / "skip.npz")]
    code = cli.main(["check", str(path), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("absorbjax check:") and "\n" not in err and "Traceback" not in err
    assert str(path) in err and re.search(says, err), err


def test_info_lists_the_registry(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "swiglu" in out and "Prop 6" in out


