import json
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from absorbjax import cli, models

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)


@pytest.fixture
def block_files(tmp_path):
    absorbing, S = models.planted("relu", 3, 8, key=jax.random.key(0))
    generic = models.init("relu", 3, 8, key=jax.random.key(1))
    paths = {}
    for name, p in (("absorbing", absorbing), ("generic", generic)):
        paths[name] = tmp_path / f"{name}.npz"
        np.savez(paths[name], up=np.asarray(p.up), down=np.asarray(p.down))
    paths["S"] = S
    return paths


def test_check_decides_and_prints_a_table(block_files, capsys):
    assert cli.main(["check", str(block_files["absorbing"]), "--activation", "relu"]) == 0
    out = capsys.readouterr().out
    title, header, row = out.splitlines()[:3]
    assert "1 MLP block(s), activation relu (argument)" in title
    assert header.split()[:4] == ["layer", "name", "d", "n"] and "lower" in header and "|S|" in header
    assert row.split()[:7] == ["0", "-", "3", "8", "float64", "-", "absorbable"]
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
    assert "3 MLP block(s), activation gelu (config.json hidden_act=gelu)" in out.splitlines()[0]
    rows = [line.split() for line in out.splitlines()[2:5]]
    assert [r[:2] for r in rows] == [["0", "encoder.layer.0"], ["1", "encoder.layer.1"], ["2", "encoder.layer.2"]]
    assert all(r[5] == "bc" for r in rows)  # hidden and output bias read
    assert "not used: 3 tensor(s)" in out  # the attention matrices
    for layer in ("2", "encoder.layer.2"):  # a position or the file's own name
        assert cli.main(["check", str(path), "--layer", layer, "--json"]) == 0
        record = json.loads(capsys.readouterr().out)
        (row,) = record["blocks"]
        assert row["layer"] == 2 and row["name"] == "encoder.layer.2"
        assert row["hidden_bias"] == "encoder.layer.2.intermediate.dense.bias" and row["hidden_bias_nonzero"]
        assert row["output_bias"] == "encoder.layer.2.output.dense.bias"
        assert row["seconds"] >= 0 and row["lower"] <= row["upper"]
        assert sorted(record["unused"]) == [f"encoder.layer.{i}.attention.output.dense.weight" for i in range(3)]


def test_check_gated_file_is_decided_by_prop6(tmp_path, capsys):
    p = models.init("swiglu", 3, 8, key=jax.random.key(0))
    path = tmp_path / "gated.npz"
    np.savez(path, gate=np.asarray(p.gate), value=np.asarray(p.value), down=np.asarray(p.down))
    assert cli.main(["check", str(path), "--activation", "swiglu", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["blocks"]
    assert record["status"] == "not_absorbable" and "Prop 6" in record["reason"]
    assert (record["d"], record["n"]) == (3, 8) and record["seconds"] >= 0
    # a gated block with a hidden bias is not covered by Prop 6
    np.savez(
        path,
        **{
            "gate.weight": np.asarray(p.gate),
            "gate.bias": np.ones(8),
            "value.weight": np.asarray(p.value),
            "down.weight": np.asarray(p.down),
        },
    )
    assert cli.main(["check", str(path), "--activation", "swiglu", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)["blocks"]
    assert record["status"] == "undecided" and "bias" in record["reason"]


@pytest.mark.parametrize(
    "problem, says",
    [
        ("missing", "no such file"),
        ("not_npz", "not a readable"),
        ("missing_key", r"missing \['down'\]"),
        ("shape", r"expected \(3, 8\)"),
        ("no_activation", "pass --activation"),
        ("transposed", "--transpose"),
        ("layer", "no layer 7.*--layer"),
        ("skip", r"layer 0 \(encoder.layer.0\): skip must have shape"),
    ],
)
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


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and re.fullmatch(r"absorbjax \S+", capsys.readouterr().out.strip())


@pytest.mark.integration  # a child process
def test_check_answers_file_errors_before_importing_anything_heavy(tmp_path):
    # cli.py loaded on its own (without the package): a missing or unknown file is answered with
    # the standard library only, so the command's own start-up cost is the interpreter's
    code = (
        "import importlib.util, sys, time\n"
        f"spec = importlib.util.spec_from_file_location('standalone_cli', {cli.__file__!r})\n"
        "mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)\n"
        "start = time.perf_counter()\n"
        f"codes = [mod.main(['check', {str(tmp_path / 'missing.safetensors')!r}]),\n"
        f"         mod.main(['check', {str(tmp_path / 'w.txt')!r}])]\n"
        "heavy = sorted(m for m in ('jax', 'numpy', 'onnx', 'absorbjax', 'tqdm') if m in sys.modules)\n"
        "print(codes, heavy, time.perf_counter() - start)\n"
    )
    (tmp_path / "w.txt").write_text("x")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("[2, 2] []"), out.stdout + out.stderr
    seconds = float(out.stdout.split()[-1])
    assert "no such file or directory" in out.stderr and "unknown format '.txt'" in out.stderr
    assert seconds < 0.5


def test_json_into_a_closed_pipe_is_quiet(block_files, monkeypatch):
    read, write = os.pipe()
    os.close(read)  # the reader (`| head`) has gone
    stream = os.fdopen(write, "w")
    monkeypatch.setattr(sys, "stdout", stream)
    assert cli.main(["check", str(block_files["generic"]), "--activation", "relu", "--json"]) == 0
    stream.close()  # what is left in the buffer goes to /dev/null, no BrokenPipeError


def test_plot_draws_trained_against_gaussian(tmp_path, capsys):
    path = _bert(tmp_path, layers=2)
    figure = tmp_path / "distances.png"
    assert cli.main(["check", str(path), "--plot", str(figure), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(record["gaussian"]) == ["0", "1"]
    for row in record["gaussian"].values():  # the reference has no bias and the block's shape
        assert row["hidden_bias"] is None and (row["d"], row["n"]) == (4, 20) and row["lower"] <= row["upper"]


@pytest.mark.integration  # a child process
@pytest.mark.slow
def test_python_dash_m(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "absorbjax", "check", str(tmp_path / "missing.npz")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2 and "no such file or directory" in out.stderr


def test_plot_labels_drop_the_shared_path():
    from absorbjax.weights._plot import short_names

    assert short_names([f"model/m.0/encoder/layer.{i}" for i in (0, 12)]) == ["layer.0", "layer.12"]
    assert short_names(["decoder.layer_0", "encoder.layer_0"]) == ["decoder.layer_0", "encoder.layer_0"]


def test_reproduce_names_missing_data_packages_before_running(tmp_path, capsys):
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "needs_data.py").write_text(
        'NAME = "needs_data"\nTITLE = "needs a data package"\nPRESETS = {"quick": {}}\n'
        'PACKAGES = ("no-such-absorbjax-data",)\n'
        'def run(out, *, preset, key):\n    raise AssertionError("must not run")\n'
    )
    code = cli.main(["reproduce", "--experiments", str(folder), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert "pip install --no-deps no-such-absorbjax-data" in err


def test_reproduce_replot_redraws_figures_from_the_records_only(tmp_path, capsys):
    """``reproduce --replot``: figure(results) of each record saved at the figure's own size; run()
    is never called; experiments without figure(results) or without a record are skipped in one line."""
    from absorbjax import io
    from absorbjax.lab import plotting

    folder, out = tmp_path / "experiments", tmp_path / "out"
    folder.mkdir()
    head = 'TITLE = "t"\nPRESETS = {"quick": {}}\ndef run(config, out, seed):\n    raise AssertionError("computed")\n'
    (folder / "drawn.py").write_text(
        'NAME = "drawn"\n' + head + "from absorbjax.lab import figstyle\n"
        "def figure(results):\n"
        "    with figstyle.context():\n"
        "        fig, ax = figstyle.subplots(width=figstyle.SINGLE, height=2.0)\n"
        '        ax.plot(results["x"], results["y"])\n'
        "    return fig\n"
    )
    (folder / "nofigure.py").write_text('NAME = "nofigure"\n' + head)
    (folder / "norecord.py").write_text(
        'NAME = "norecord"\n' + head + "def figure(results):\n    raise AssertionError\n"
    )
    for name in ("drawn", "nofigure"):
        io.save_record(out / f"{name}.json", name=name, seed=0, config={}, results={"x": [0, 1], "y": [1, 3]})
    assert cli.main(["reproduce", "--replot", "--experiments", str(folder), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines == [
        f"replotted from the records in {out}: drawn",
        "skipped: nofigure (no figure(results)), norecord (no record)",
    ]
    png = (out / "drawn.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and (out / "drawn.pdf").stat().st_size > 1000
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (
        round(3.5 * plotting.DPI),
        round(2.0 * plotting.DPI),
    )
    assert sorted(p.name for p in out.iterdir()) == ["drawn.json", "drawn.pdf", "drawn.png", "nofigure.json"]


@pytest.mark.slow
def test_max_bytes_bounds_this_command_only(tmp_path, capsys, monkeypatch):
    """``--max-bytes N`` is the reading budget for this command (a 2 MiB tensor read into memory,
    from an ``.npz``, is refused under 1 MiB, read under the default) and leaves nothing behind for
    the next call in the process. (Safetensors tensors are memory maps, outside the budget.)"""
    from absorbjax.weights import _limits as limits

    monkeypatch.delenv("ABSORBJAX_MAX_BYTES", raising=False)
    rng = np.random.default_rng(0)
    path = tmp_path / "wide.npz"
    np.savez(path, **{"fc1.weight": rng.normal(size=(2048, 256)), "fc2.weight": rng.normal(size=(256, 2048))})
    args = ["check", str(path), "--activation", "relu", "--layer", "0"]
    assert cli.main([*args, "--max-bytes", str(1 << 20)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-bytes" in err[0], err
    assert "ABSORBJAX_MAX_BYTES" not in os.environ and limits.max_bytes() == limits.DEFAULT_MAX_BYTES
    assert cli.main([*args, "--max-bytes", "1000"]) == 2 and "at least 1048576" in capsys.readouterr().err
    assert cli.main(args) == 0


def test_max_bytes_bounds_the_decisions_own_memory(tmp_path, capsys, monkeypatch):
    """A safetensors block is a memory map (not an allocation), but a block narrower than the
    screen's reach is decided on float64 copies and ``n × n`` matrices: their bytes are checked
    against the budget before the decision runs (one line), and decided under the default."""
    from safetensors.numpy import save_file

    monkeypatch.delenv("ABSORBJAX_MAX_BYTES", raising=False)
    rng = np.random.default_rng(1)
    path = tmp_path / "narrow.safetensors"
    save_file({"fc1.weight": rng.normal(size=(256, 64)), "fc2.weight": rng.normal(size=(64, 256))}, str(path))
    args = ["check", str(path), "--activation", "relu", "--layer", "0"]
    assert cli.main([*args, "--max-bytes", str(1 << 20)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "deciding" in err[0] and "--max-bytes" in err[0], err
    assert cli.main(args) == 0
