"""Every file contained, every shard read once, every byte bounded (issue 57): shard names
canonicalised (one file under 1,000 spellings is read once), a tensor in two shards and a shard
tensor the index does not list refused, a folder's checkpoint file and ``config.json`` kept inside
the folder (a Hugging Face snapshot's links into its own ``blobs/`` allowed, nowhere else), no raw
header number printed, the holes of a sparse file counted against the budget, and a file truncated
while it is read answered in one line. Files are written in their real layouts
(:mod:`tests.test_hostile`'s writers)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from test_hostile import DOWN, UP, ct2_file, safetensors_file, valid_safetensors

import absorbjax
from absorbjax import cli, weights
from absorbjax.weights import _formats as formats, _limits as limits


def one_line(err) -> str:
    assert "\n" not in str(err.value)
    return str(err.value)


def refused(args, capsys) -> str:
    """``absorbjax check ARGS``: exit 2 and one line on stderr, returned."""
    assert cli.main(["check", *map(str, args), "--no-progress"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("absorbjax check:"), lines
    return lines[0]


def count_reads(monkeypatch, suffix=".safetensors") -> list[str]:
    """Every file the reader of ``suffix`` is asked to read, in order."""
    calls, inner = [], formats._READERS[suffix]

    def counted(path):
        calls.append(os.path.realpath(path))
        return inner(path)

    monkeypatch.setitem(formats._READERS, suffix, counted)
    return calls


def tiny_blocks(path, count: int):
    """A safetensors file of ``count`` 1 × 2 blocks (``l.K.fc1.weight`` / ``l.K.fc2.weight``)."""
    rng = np.random.default_rng(0)
    entries = []
    for k in range(count):
        for role, shape in (("fc1", (2, 1)), ("fc2", (1, 2))):
            a = rng.normal(size=shape).astype(np.float32)
            entries.append((f"l.{k}.{role}.weight", "F32", shape, a.tobytes()))
    safetensors_file(path, entries)
    return [name for name, *_ in entries]


# ---------------------------------------------------------------------------------------------
# Shards: one file read once, each tensor in one shard, every tensor listed


def test_one_shard_under_a_thousand_spellings_is_read_once(tmp_path, monkeypatch):
    """An index naming one shard 1,000 ways (``F``, ``./F``, ``.//./F``, …, a link to ``F``) reads
    the file once (before: once per spelling, ~30 s for this 200 KB file)."""
    names = tiny_blocks(tmp_path / "F.safetensors", 500)
    os.symlink("F.safetensors", tmp_path / "alias.safetensors")
    spellings = ["F.safetensors", "alias.safetensors"] + [
        "./" * k + "/./" * (k % 3) + "F.safetensors" for k in range(1, 999)
    ]
    assert len(set(spellings)) == 1000
    wmap = dict(zip(names, spellings))
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    calls = count_reads(monkeypatch)
    model = weights.scan(tmp_path, "relu")
    assert calls == [str((tmp_path / "F.safetensors").resolve())]
    assert len(model.blocks) == 500 and model.format == "sharded safetensors"
    assert model.blocks[499].load().params.up.shape == (2, 1)


def test_an_index_naming_too_many_files_is_refused_before_any_is_opened(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_SHARD_FILES", 5)
    wmap = {f"t{k}": f"s{k}.safetensors" for k in range(6)}  # none exists: the count is refused first
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    with pytest.raises(ValueError, match="more than 5 shard files") as err:
        weights.scan(tmp_path, "relu")
    one_line(err)


def two_shards(d, first, second, wmap):
    safetensors_file(d / "a.safetensors", first)
    safetensors_file(d / "b.safetensors", second)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    return d


FC1 = ("fc1.weight", "F32", UP.shape, UP.tobytes())
FC2 = ("fc2.weight", "F32", DOWN.shape, DOWN.tobytes())


def test_a_tensor_in_two_shards_is_refused(tmp_path, capsys):
    """``fc1.weight`` in both shards, the index placing it in one: refused, not resolved silently."""
    other = ("fc1.weight", "F32", UP.shape, (2 * UP).tobytes())
    d = two_shards(tmp_path, [FC1, FC2], [other], {"fc1.weight": "b.safetensors", "fc2.weight": "a.safetensors"})
    line = refused([d, "--activation", "relu"], capsys)
    assert "'fc1.weight' is in two shards" in line and "a.safetensors" in line and "b.safetensors" in line


def test_a_shard_tensor_the_index_does_not_list_is_refused(tmp_path, capsys):
    extra = ("fc3.weight", "F32", DOWN.shape, DOWN.tobytes())
    d = two_shards(tmp_path, [FC1], [FC2, extra], {"fc1.weight": "a.safetensors", "fc2.weight": "b.safetensors"})
    line = refused([d, "--activation", "relu"], capsys)
    assert "'b.safetensors' holds 1 tensor(s) the index does not list, e.g. 'fc3.weight'" in line


def test_a_tensor_the_index_places_in_another_shard_is_named(tmp_path):
    d = two_shards(tmp_path, [FC1, FC2], [], {"fc1.weight": "a.safetensors", "fc2.weight": "b.safetensors"})
    with pytest.raises(ValueError, match="not in their shards, e.g. 'fc2.weight' \\(it is in shard 'a.safetensors'\\)"):
        weights.scan(d, "relu")


# ---------------------------------------------------------------------------------------------
# Containment: a folder's files stay in the folder (or its Hugging Face repository's blobs/)


def test_a_folder_checkpoint_linking_outside_is_refused_unread(tmp_path, capsys, monkeypatch):
    """``model.safetensors`` a link to another model's file, to ``/etc/passwd``, to
    ``/proc/self/environ``: one line naming the link, the target never opened, no bytes of it printed
    (before: another model's verdict, or the environment as a header length)."""
    valid_safetensors(tmp_path / "elsewhere.safetensors")
    calls = count_reads(monkeypatch)
    for k, target in enumerate((tmp_path / "elsewhere.safetensors", "/etc/passwd", "/proc/self/environ")):
        folder = tmp_path / f"model{k}"
        folder.mkdir()
        os.symlink(target, folder / "model.safetensors")
        line = refused([folder, "--activation", "relu"], capsys)
        assert str(folder / "model.safetensors") in line and "outside" in line, line
        assert "bytes" not in line and "header" not in line
    assert calls == []


def test_config_json_linking_outside_is_refused(tmp_path):
    """A ``config.json`` that links to another model's sets no activation: refused before it is read,
    with the way out (``--activation``); with ``activation=`` it is not read, and not refused."""
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text('{"hidden_act": "relu"}')
    model = tmp_path / "model"
    model.mkdir()
    valid_safetensors(model / "model.safetensors")
    os.symlink("../other/config.json", model / "config.json")
    for path in (model, model / "model.safetensors"):
        with pytest.raises(ValueError, match="config.json resolves to .*outside .*--activation NAME") as err:
            weights.scan(path)
        assert str(model / "config.json") in one_line(err)
    assert weights.scan(model, "relu").blocks[0].activation == "relu"


def hf_repo(root, name):
    """A Hugging Face cache repository folder: ``models--org--NAME/{blobs,snapshots/REV}``."""
    repo = root / f"models--org--{name}"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "0123abc").mkdir(parents=True)
    return repo, repo / "snapshots" / "0123abc"


def test_a_hugging_face_snapshot_reads_its_own_blobs_only(tmp_path, capsys):
    """Snapshot files that link to ``../../blobs/HASH`` (the checkpoint, ``config.json``, an index and
    its shards) are read; a snapshot link to another repository's blob is refused, whether the folder
    or the file is named (before: read, another model's verdict)."""
    repo, snap = hf_repo(tmp_path, "mine")
    valid_safetensors(repo / "blobs" / "aaaa")
    (repo / "blobs" / "cccc").write_text('{"hidden_act": "relu"}')
    os.symlink("../../blobs/aaaa", snap / "model.safetensors")
    os.symlink("../../blobs/cccc", snap / "config.json")
    (block,) = weights.scan(snap).blocks
    assert block.activation_source.startswith("config.json") and block.load().params.up.shape == UP.shape
    other, osnap = hf_repo(tmp_path, "theirs")
    valid_safetensors(other / "blobs" / "bbbb")
    os.symlink("../../../models--org--mine/blobs/aaaa", osnap / "model.safetensors")
    for path in (osnap, osnap / "model.safetensors"):
        line = refused([path, "--activation", "relu"], capsys)
        assert "outside" in line and "blobs/" in line and str(osnap / "model.safetensors") in line
    repo, snap = hf_repo(tmp_path, "sharded")  # an index and its shards, all links into blobs/
    for name, entry in (("a1", FC1), ("b2", FC2)):
        safetensors_file(repo / "blobs" / name, [entry])
    os.symlink("../../blobs/a1", snap / "model-1.safetensors")
    os.symlink("../../blobs/b2", snap / "model-2.safetensors")
    index = {"weight_map": {"fc1.weight": "model-1.safetensors", "fc2.weight": "./model-2.safetensors"}}
    (repo / "blobs" / "i3").write_text(json.dumps(index))
    os.symlink("../../blobs/i3", snap / "model.safetensors.index.json")
    (block,) = weights.scan(snap, "relu").blocks
    np.testing.assert_array_equal(block.load().params.down, DOWN)


def test_no_raw_header_number_is_printed(tmp_path, capsys):
    """A safetensors file whose first 8 bytes are text: the 64-bit number they spell is not printed."""
    path = tmp_path / "text.safetensors"
    path.write_bytes(b"SECRET=hunter2\n" * 4)
    n = int.from_bytes(b"SECRET=h", "little")
    line = refused([path, "--activation", "relu"], capsys)
    assert str(n) not in line and f"{n:,}" not in line and "past the end of the file (60 bytes)" in line


# ---------------------------------------------------------------------------------------------
# Bytes bounded: holes of sparse files, truncation while reading


def sparse_safetensors(path, size: int):
    """``fc1.weight`` / ``fc2.weight`` of ``size`` bytes each, their data a hole (nothing on disk)."""
    n = size // 4 // 1024
    header = {
        "fc1.weight": {"dtype": "F32", "shape": [n, 1024], "data_offsets": [0, size]},
        "fc2.weight": {"dtype": "F32", "shape": [1024, n], "data_offsets": [size, 2 * size]},
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        f.truncate(8 + len(raw) + 2 * size)
    if limits.holes(path, 0, 8 + len(raw) + 2 * size, cap=1 << 40) < size:
        pytest.skip("this file system does not report holes (SEEK_HOLE)")
    return path


def test_the_holes_of_a_sparse_file_count_against_the_budget(tmp_path):
    """Mapped tensors whose data are holes (pages a map makes resident from nothing): over the budget
    together, refused (before: mapped, bounded by nothing); a file holding its bytes is mapped as
    before, whatever the budget."""
    path = sparse_safetensors(tmp_path / "sparse.safetensors", 3 << 20)
    ckpt = formats.read(path)
    with limits.budget(4 << 20):  # each tensor's 3 MiB of holes fits, the two together do not
        assert isinstance(ckpt.tensors["fc1.weight"].load(), np.memmap)
        with pytest.raises(ValueError, match="holes of a sparse file .* over the budget") as err:
            ckpt.tensors["fc2.weight"].load()
        assert "fc2.weight" in one_line(err)
        dense = valid_safetensors(tmp_path / "dense.safetensors")
        assert isinstance(formats.read(dense).tensors["fc1.weight"].load(), np.memmap)


def test_a_file_truncated_before_its_tensor_is_read(tmp_path):
    """Shortened between listing and reading: one line saying so (safetensors: before the map is made;
    CTranslate2: a short read)."""
    path = valid_safetensors(tmp_path / "model.safetensors")
    (block,) = weights.blocks(path, "relu")
    os.truncate(path, path.stat().st_size - 8)
    with pytest.raises(ValueError, match="shorter than when it was listed") as err:
        block.load()
    one_line(err)
    layer = "encoder/layer_0/ffn"
    ct2 = ct2_file(tmp_path / "model.bin", [(f"{layer}/linear_0/weight", UP), (f"{layer}/linear_1/weight", DOWN)])
    (block,) = weights.blocks(ct2, "relu")
    os.truncate(ct2, ct2.stat().st_size - 40)
    with pytest.raises(ValueError, match="truncated") as err:
        block.load()
    one_line(err)


_TRUNCATE_WHILE_MAPPED = textwrap.dedent(
    """
    import dataclasses, os, sys
    import numpy as np
    from safetensors.numpy import save_file
    from absorbjax import weights
    path = sys.argv[1]
    save_file({"fc1.weight": np.ones((512, 128), np.float32), "fc2.weight": np.ones((128, 512), np.float32)}, path)
    (block,) = weights.blocks(path, "relu")
    t = block._ckpt.tensors["fc1.weight"]
    def mapped_then_truncated():
        a = t.load()
        os.truncate(path, 8)  # the map's pages now lie past the end of the file
        return a
    block._ckpt.tensors["fc1.weight"] = dataclasses.replace(t, load=mapped_then_truncated)
    try:
        block.load()
    except ValueError as err:
        print(err)
    """
)


def test_a_file_truncated_after_it_is_mapped_gives_one_line(tmp_path):
    """Truncated once its tensor is mapped, before the block is read: one line (before: the first page
    read past the new end killed the process with SIGBUS). The decision reads the maps again later;
    a truncation then is still SIGBUS (see docs/guides/checkpoints.md)."""
    path = tmp_path / "model.safetensors"
    run = subprocess.run(
        [sys.executable, "-c", _TRUNCATE_WHILE_MAPPED, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(Path(absorbjax.__file__).parents[1])},
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 1 and "truncated while being read" in lines[0], lines


def test_the_map_watch_ignores_arrays_and_sees_truncation(tmp_path):
    path = valid_safetensors(tmp_path / "model.safetensors")
    a = formats.read(path).tensors["fc1.weight"].load()
    check = formats.watch(a)
    assert formats.watch(np.ones(3)) is None and check() is None
    os.truncate(path, 8)
    with pytest.raises(ValueError, match="truncated while being read"):
        check()
