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


def test_check_decides_and_prints_a_certificate(block_files, capsys):
    assert cli.main(["check", str(block_files["absorbing"]), "--activation", "relu"]) == 0
    out = capsys.readouterr().out
    assert "absorbable" in out and "not_absorbable" not in out
    assert cli.main(["check", str(block_files["generic"]), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["status"] == "not_absorbable" and record["S"] is None


def test_check_json_reports_the_set(block_files, capsys):
    assert cli.main(["check", str(block_files["absorbing"]), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["status"] == "absorbable" and record["S"] == list(block_files["S"])


@pytest.mark.parametrize("problem, says", [("missing", "no such file"), ("not_npz", "not a readable"),
                                           ("missing_key", r"missing \['down'\]"), ("shape", "must have shape")])
def test_check_bad_files_give_one_line_and_nonzero_exit(tmp_path, capsys, problem, says):
    path = tmp_path / "w.npz"
    if problem == "not_npz":
        path.write_text("hello")
    elif problem == "missing_key":
        np.savez(path, up=np.ones((8, 3)))
    elif problem == "shape":
        np.savez(path, up=np.ones((8, 3)), down=np.ones((3, 7)))
    code = cli.main(["check", str(path)])
    err = capsys.readouterr().err.strip()
    assert code != 0 and err.startswith("absorbjax check:") and "\n" not in err and "Traceback" not in err
    assert re.search(says, err), err


def test_info_lists_the_registry(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "swiglu" in out and "Prop 6" in out


def test_check_gated_file_is_decided_by_prop6(tmp_path, capsys):
    p = models.init(jax.random.key(0), 3, 8, "swiglu")
    path = tmp_path / "gated.npz"
    np.savez(path, gate=np.asarray(p.gate), value=np.asarray(p.value), down=np.asarray(p.down))
    assert cli.main(["check", str(path), "--activation", "swiglu", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["status"] == "not_absorbable" and "Prop 6" in record["reason"]
