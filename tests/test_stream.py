"""Streamed reading: checkpoint tensors as memory maps in their stored dtype, and the wide path of the
decision (``n ≥ 2048``) reading them in blocks without a float64 copy of a matrix, with the answers
of the float64 path."""

import json
import tracemalloc

import gguf
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from absorbjax import cli, condition, testing, weights
from absorbjax.condition import _decide as decision
from absorbjax.condition._block import StoredBlock
from absorbjax.condition._validate import float_weights, stored_weights
from absorbjax.models import MLPParams
from absorbjax.weights import _formats as formats, _limits as limits

pytestmark = pytest.mark.x64  # exactness claims: float64 (see conftest.py)

BF16 = np.dtype(ml_dtypes.bfloat16)


def neox_file(path, blocks):
    """A safetensors file of ``[(U, D), ...]`` under GPT-NeoX / Falcon names."""
    tensors = {}
    for k, (U, D) in enumerate(blocks):
        tensors[f"transformer.h.{k}.mlp.dense_h_to_4h.weight"] = U
        tensors[f"transformer.h.{k}.mlp.dense_4h_to_h.weight"] = D
    save_file(tensors, str(path))
    return path


def test_safetensors_and_gguf_tensors_are_memory_maps(tmp_path):
    """bf16, float16 and float32 tensors come back as read-only maps of the file, values exact; a mapped
    tensor larger than the budget is read (nothing is allocated), an ``.npz`` one is refused."""
    rng = np.random.default_rng(0)
    arrays = {"b": rng.standard_normal((1024, 1024)).astype(BF16), "h": rng.standard_normal((3, 5)).astype(np.float16)}
    arrays["f"] = rng.standard_normal((7, 2)).astype(np.float32)
    save_file(arrays, str(tmp_path / "m.safetensors"))
    ckpt = formats.read(tmp_path / "m.safetensors")
    with limits.budget(1 << 20):  # 1 MiB, below the 2 MiB bf16 tensor
        for name, want in arrays.items():
            got = ckpt.tensors[name].load()
            assert ckpt.tensors[name].mapped and isinstance(got, np.memmap) and not got.flags.writeable
            assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))
        np.savez(tmp_path / "m.npz", b=arrays["b"].astype(np.float32))
        with pytest.raises(ValueError, match="max-bytes"):
            formats.read(tmp_path / "m.npz").tensors["b"].load()
    w = gguf.GGUFWriter(tmp_path / "m.gguf", "llama")
    w.add_tensor("x", arrays["f"])
    for step in (w.write_header_to_file, w.write_kv_data_to_file, w.write_tensors_to_file, w.close):
        step()
    t = formats.read(tmp_path / "m.gguf").tensors["x"]
    got = t.load()
    assert t.mapped and not got.flags.writeable and np.array_equal(got, arrays["f"])


def test_the_wide_path_keeps_the_stored_arrays():
    """``stored_weights(stream=N)``: from ``n = N`` units on, the arrays as stored (no copy), checked in
    blocks (NaN refused), with the per-unit maxima of that pass; narrower blocks, and every block
    through ``float_weights``, as float64 copies."""
    U, D = testing.gaussian(64, 2048, 0, BF16)
    got_u, got_d, dtype, (mu, md) = stored_weights(MLPParams(U, D), stream=2048)
    assert got_u is U and got_d is D and dtype == BF16
    assert np.array_equal(mu, np.max(np.abs(U.astype(np.float64)), axis=1))
    assert np.array_equal(md, np.max(np.abs(D.astype(np.float64)), axis=0))
    wide, _, _ = float_weights(MLPParams(U, D), batched=False)
    assert wide.dtype == np.float64 and np.array_equal(wide, U.astype(np.float64))
    narrow, _, _, maxima = stored_weights(MLPParams(U[:1024], D[:, :1024]), stream=2048)
    assert narrow.dtype == np.float64 and maxima is None
    U[5, 7] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        stored_weights(MLPParams(U, D), stream=2048)


def test_a_wide_bf16_block_is_decided_without_a_copy(tmp_path):
    """``weights.check`` of a 512 × 8192 bf16 block read from safetensors allocates less than one float64
    copy of ``W_up`` (33.5 MB; the file is 16.8 MB): the decision reads the memory map in blocks."""
    neox_file(tmp_path / "model.safetensors", [testing.gaussian(512, 8192, 1, BF16)])
    block = weights.load_block(tmp_path / "model.safetensors", "gelu", layer=0)
    assert block.params.up.dtype == BF16
    tracemalloc.start()
    try:
        found = weights.check(block)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found.status == "not_absorbable" and found.method == "trace", found
    assert peak < 8192 * 512 * 8, peak


def test_bf16_and_float64_storage_give_the_same_bounds():
    """The same values stored as bf16 (read in blocks) and as float64: the same status, the same certified
    bound and threshold; only the storage-rounding answer differs (bf16 rounding is covered)."""
    U, D = testing.gaussian(96, 2048, 2, BF16)
    a = condition.find_absorbing_set(MLPParams(U, D), "gelu", decision=condition.Decision(narrow=True))
    b = condition.find_absorbing_set(
        MLPParams(U.astype(np.float64), D.astype(np.float64)), "gelu", decision=condition.Decision(narrow=True)
    )
    assert (a.status, a.method, a.lower_bound, a.threshold) == (b.status, b.method, b.lower_bound, b.threshold)
    assert (a.stored_dtype, a.rounding.within, b.rounding.within) == ("bfloat16", "no", "n/a")


def test_blockwise_balance_answers_as_the_balanced_copy():
    """Units rescaled by powers of two up to 2^±600 (float64, exact) around a planted set: the wide path on
    the stored arrays gives the certificate it gives on the balanced copy the Gram path makes, field by
    field."""
    d, n = 12, 2048
    rng = np.random.default_rng(3)
    U, D = rng.standard_normal((n, d)), rng.standard_normal((d, n))
    S = np.sort(rng.permutation(n)[:d])
    D[:, S] = -np.linalg.inv(U[S])
    k = rng.integers(-600, 600, size=n)
    U, D = np.ldexp(U, k[:, None]), np.ldexp(D, -k[None, :])
    A = np.eye(d)
    context = decision.BlockContext((np.dtype(np.float64),) * 2, None, "relu", "identity")
    opts = condition.Decision(time_limit=10.0)
    raw = decision.decide(StoredBlock(U, D, A, context), opts)[0]
    e = np.frexp(np.max(np.abs(U), axis=1))[1]  # _arith.balance's copy (every rescaling exact here)
    copy = decision.decide(StoredBlock(np.ldexp(U, -e[:, None]), np.ldexp(D, e[None, :]), A, context), opts)[0]
    assert raw.status == "absorbable" and raw.S.tolist() == S.tolist()
    fields = ("status", "method", "lower_bound", "threshold", "residual", "miss_bound", "within_rounding")
    assert [raw.to_dict()[f] for f in fields] == [copy.to_dict()[f] for f in fields]


def test_check_a_sharded_bf16_checkpoint(tmp_path, capsys):
    """Two bf16 blocks in two shards and their index: ``absorbjax check`` decides each (no progress bar
    with ``--no-progress``)."""
    wmap = {}
    for k in range(2):
        shard = f"model-{k + 1:05d}-of-00002.safetensors"
        save_file(
            {
                f"transformer.h.{k}.mlp.{r}.weight": a
                for r, a in zip(("dense_h_to_4h", "dense_4h_to_h"), testing.gaussian(32, 2048, k, BF16))
            },
            str(tmp_path / shard),
        )
        wmap.update({f"transformer.h.{k}.mlp.{r}.weight": shard for r in ("dense_h_to_4h", "dense_4h_to_h")})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    assert cli.main(["check", str(tmp_path), "--activation", "gelu", "--json", "--no-progress"]) == 0
    out = capsys.readouterr()
    blocks = json.loads(out.out)["blocks"]
    assert [(b["status"], b["dtype"], b["n"]) for b in blocks] == [("not_absorbable", "bfloat16", 2048)] * 2
    assert "check" not in out.err


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not hasattr(__import__("mmap"), "MADV_DONTNEED"), reason="madvise(MADV_DONTNEED) is Linux/BSD")
def test_a_map_read_window_by_window_stays_out_of_the_resident_set(tmp_path):
    """Issue 57: the pages a memory map makes resident counted against nothing (a block read in
    windows left the whole map resident: the Falcon-size block's 3.9 GB peak). Reading a 64 MiB map
    window by window, as the decision, the finite check and the fingerprint do, now keeps about one
    window resident; without the release the whole map stays."""
    from absorbjax import _resident
    from absorbjax._fingerprint import fingerprint
    from absorbjax.condition._reader import as_float64
    from absorbjax.weights._model import _finite

    path = tmp_path / "w.bin"
    np.arange(1 << 24, dtype=np.float32).tofile(path)  # 64 MiB
    for read in (
        lambda m: [as_float64(m[s : s + 512]) for s in range(0, m.shape[0], 512)],
        lambda m: [as_float64(m[:, s : s + 512]) for s in range(0, m.shape[1], 512)],
        lambda m: _finite(m),
        lambda m: fingerprint(m, m.T),
    ):
        m = np.memmap(path, np.float32, "r", shape=(1 << 14, 1 << 10))
        before = _resident_mib()
        read(m)
        assert _resident_mib() - before < 24, read  # the map is 64 MiB
        del m
    m = np.memmap(path, np.float32, "r", shape=(1 << 14, 1 << 10))
    before, keep = _resident_mib(), _resident._DONTNEED
    try:
        _resident._DONTNEED = None  # the control: nothing released
        [as_float64(m[s : s + 512]) for s in range(0, m.shape[0], 512)]
    finally:
        _resident._DONTNEED = keep
    assert _resident_mib() - before > 48
