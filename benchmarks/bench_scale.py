"""Benchmark: deciding Thm 8/10's condition at the size of real models (``condition._screen``).

Each case runs in its own process (so its peak memory is its own): Gaussian float32 blocks with the
law of ``models.init`` (``W_up ~ N(0, 1/d)``, ``W_down ~ N(0, 1/n)``, drawn with NumPy for speed),
``n = 4d`` from ``512×2048`` up to ``4096×16384`` (``--big`` adds ``8192×32768``, decision only),
through the public entry points, which take the ``O(n d²)`` screen for ``n ≥ 2048``:

* ``decide``: :func:`condition.find_absorbing_set`, relu and gelu draws (the weights' law is the same;
  the activation names the theorem, Thm 8 or Thm 10, that turns "no S" into ``not_absorbable``).
* ``distance``: :func:`condition.distance`: a certified lower and an attained upper bound on
  ``min_S ‖W_down[:,S] W_up[S,:] + I‖_F / √d``.
* ``large``: weights ×100, where the trace test fails and Frank–Wolfe decides (up to ``d = 2048``).
* ``planted``: float64 blocks with ``W_down[:,S] = −W_up[S,:]⁻¹`` for a random ``S`` (``|S| = d``).
* ``gram``: the Gram path (``method="relaxation"``) on the same law, side by side, up to ``d = 1024``.

CPU seconds are ``time.process_time`` of the call (both BLAS threads); memory is the process's peak
resident set (the weights, the float64 copies the entry points make, and ~0.3 GB of imports). The
machine is shared with other jobs: wall time is recorded, CPU time is the measure.

Checkpoints on disk, through ``absorbjax check`` (``cli.main`` in a child process; CPU = the child's
user + system seconds, imports included; peak = its ``VmHWM``, which counts the memory-mapped weights
it touched). The contract: peak ≤ 1.25 × the stored bytes of one block + 1 GB.

* ``--falcon [DIR]``: a Falcon-180B-sized Gaussian bf16 block (``d = 14848``, ``n = 59392``, 3.5 GB),
  written chunk by chunk (never whole in memory) as ``model.safetensors``; ``--activation gelu``.
  Contract also: ≤ 240 s CPU.
* ``--shards [DIR]``: two 8192 × 32768 bf16 blocks in two shards and a ``model.safetensors.index.json``.
* ``--growth``: the decision's CPU seconds against ``n`` (``d = 1024``) and ``d`` (``n = 16384``),
  float32 Gaussian blocks, the fitted exponents, and each time over the time of one ``n × d · d × d``
  float64 product at this machine's measured rate (the ``O(n d²)`` pass of Frank–Wolfe).
* ``--compare BASE``: 4096 × 16384 float32 (gelu) decided by this tree and by the tree at ``BASE``
  (another checkout), alternately, three times each: the ratio of the median CPU seconds.

    python benchmarks/bench_scale.py --falcon --shards --growth --compare /tmp/base48 --out docs/benchmarks/scale_stream.json

    python benchmarks/bench_scale.py                  # up to 4096×16384
    python benchmarks/bench_scale.py --quick          # 512×2048 and 1024×4096
    python benchmarks/bench_scale.py --big --out docs/benchmarks/scale.json
    python benchmarks/bench_scale.py --table docs/benchmarks/scale.json   # the markdown table
"""

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RTOL = 1e3 * 2.0**-52  # condition.DEFAULT_RTOL, without importing JAX in the parent
GRAM_MAX_D = 1024
FALCON = (14848, 59392)  # Falcon-180B's d, n
SHARD = (8192, 32768)
GB = 1e9


def weights(d, n, seed, dtype=np.float32, size=1.0):
    rng = np.random.default_rng(seed)
    U = rng.standard_normal((n, d), dtype=np.float32) * np.float32(size / math.sqrt(d))
    D = rng.standard_normal((d, n), dtype=np.float32) * np.float32(1 / math.sqrt(n))
    return U.astype(dtype), D.astype(dtype)


def planted(d, n, seed):
    U, D = weights(d, n, seed, np.float64)
    S = np.sort(np.random.default_rng(seed + 1).permutation(n)[:d])
    D[:, S] = -np.linalg.inv(U[S])
    return U, D, S


def run_case(case):
    """One measurement, in this process: the call's CPU and wall seconds and the peak memory."""
    from absorbjax import condition, models

    d, n, task, seed = case["d"], case["n"], case["task"], case["seed"]
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    S = None
    if task == "planted":
        U, D, S = planted(d, n, seed)
    else:
        U, D = weights(d, n, seed, size=100.0 if task == "large" else 1.0)
    params, act = models.MLPParams(U, D), case["act"] or None
    cpu, wall = time.process_time(), time.perf_counter()
    if task == "distance":
        dist = condition.distance(params, act)
        cert = dist.certificate
        out = {"lower": dist.lower, "upper": dist.upper, "S_size": int(dist.S.size), "how": dist.method}
    else:
        cert = condition.find_absorbing_set(
            params, act, decision=condition.Decision(method="relaxation" if task == "gram" else "auto")
        )
        out = {"lower": cert.lower_bound / math.sqrt(d)}
    out.update(
        code=str(Path(condition.__file__).parents[1]),
        status=cert.status,
        method=cert.method,
        reason=cert.reason,
        timings=cert.timings,
        cpu=time.process_time() - cpu,
        wall=time.perf_counter() - wall,
        peak_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        base_bytes=base,
        weight_bytes=U.nbytes + D.nbytes,
    )
    if S is not None:
        out["planted_found"] = cert.S is not None and cert.S.tolist() == S.tolist()
    return {**case, **out}


def write_blocks(path, blocks, seed):
    """A safetensors file of Gaussian bf16 blocks ``[(layer, d, n), ...]`` (``models.init``'s law, NeoX /
    Falcon names), written in chunks of 2^24 entries: the matrices are never whole in memory.
    Returns the bytes of tensor data."""
    import ml_dtypes

    header, off, plan = {}, 0, []
    for layer, d, n in blocks:
        for role, shape, std in (("dense_h_to_4h", (n, d), d**-0.5), ("dense_4h_to_h", (d, n), n**-0.5)):
            size = shape[0] * shape[1] * 2
            name = f"transformer.h.{layer}.mlp.{role}.weight"
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + size]}
            plan.append((shape, std))
            off += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        for (rows, cols), std in plan:
            step = max(1, (1 << 24) // cols)
            for r in range(0, rows, step):
                chunk = rng.standard_normal((min(step, rows - r), cols), dtype=np.float32) * np.float32(std)
                f.write(chunk.astype(ml_dtypes.bfloat16).tobytes())
    return off


def write_checkpoint(folder, kind, seed):
    """``kind = "falcon"``: one block, ``model.safetensors``; ``"shards"``: two blocks, one per shard, and
    the index. Returns the stored bytes of one block."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if kind == "falcon":
        return write_blocks(folder / "model.safetensors", [(0, *FALCON)], seed)
    wmap = {}
    for k in range(2):
        shard = f"model-{k + 1:05d}-of-00002.safetensors"
        size = write_blocks(folder / shard, [(k, *SHARD)], seed + k)
        wmap.update({f"transformer.h.{k}.mlp.{r}.weight": shard for r in ("dense_h_to_4h", "dense_4h_to_h")})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wmap}))
    return size


def peak_rss() -> int:
    """This process's peak resident set in bytes (``VmHWM``: anonymous and file-backed pages, so the
    memory-mapped weights it touched count)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_cli(case):
    """``absorbjax check FOLDER --activation gelu --json`` in this process: the answers, the process's
    CPU seconds (user + system, imports included) and its peak resident set."""
    import contextlib
    import io

    from absorbjax import cli

    buf = io.StringIO()
    wall = time.perf_counter()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["check", case["folder"], "--activation", "gelu", "--json"])
    usage = resource.getrusage(resource.RUSAGE_SELF)
    blocks = json.loads(buf.getvalue())["blocks"] if rc == 0 else []
    keep = ("layer", "d", "n", "dtype", "status", "method", "lower", "upper", "seconds")
    return {
        **case,
        "rc": rc,
        "blocks": [{k: b.get(k) for k in keep} for b in blocks],
        "cpu": usage.ru_utime + usage.ru_stime,
        "wall": time.perf_counter() - wall,
        "peak_bytes": peak_rss(),
    }


def checkpoint_case(kind, folder, seed, timeout=1800):
    """Write the checkpoint (into ``folder``, or a temporary folder removed after), run ``check`` on it in
    a child process, and judge the contract."""
    tmp = None if folder else tempfile.mkdtemp(prefix=f"absorbjax-{kind}-", dir="/tmp")
    where = Path(folder or tmp)
    try:
        t = time.perf_counter()
        block = write_checkpoint(where, kind, seed)
        written = time.perf_counter() - t
        case = {"task": kind, "folder": str(where), "block_bytes": block}
        row = spawn(case, timeout, flag="--cli-case")
        if "error" in row:
            return row
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    limit = 1.25 * block + GB
    row.update(
        write_seconds=written,
        peak_limit_bytes=limit,
        within_memory=row["peak_bytes"] <= limit,
        within_cpu=None if kind != "falcon" else row["cpu"] <= 240,
    )
    return row


def flop_rate() -> float:
    """Float64 multiply-adds ×2 per CPU second of ``(512 × 2048)·(2048 × 2048)`` products, 2 BLAS threads."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((512, 2048)), rng.standard_normal((2048, 2048))
    with threadpool_limits(2):
        a @ b
        t = time.process_time()
        for _ in range(8):
            a @ b
        cpu = time.process_time() - t
    return 8 * 2 * 512 * 2048 * 2048 / cpu


def growth(seed, rate):
    """The decision (gelu, float32) against ``n`` at ``d = 1024`` and against ``d`` at ``n = 16384``: the
    rows, the fitted exponents of CPU time, and each time over one ``n d²`` product at ``rate``."""
    cases = [("n", 1024, n) for n in (4096, 8192, 16384, 32768)] + [("d", d, 16384) for d in (512, 1024, 2048, 4096)]
    rows = []
    for k, (axis, d, n) in enumerate(cases):
        row = spawn({"task": "decide", "act": "gelu", "d": d, "n": n, "seed": seed + 200 + k}, timeout=900)
        row.update(axis=axis, matmul_seconds=2 * n * d * d / rate)
        row["ratio_to_matmul"] = row.get("cpu", math.nan) / row["matmul_seconds"]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("reason", "timings")}), flush=True)
    fit = {}
    for axis in ("n", "d"):
        pts = [(math.log(r[axis]), math.log(r["cpu"])) for r in rows if r["axis"] == axis and r.get("cpu", 0) > 0]
        fit[axis] = float(np.polyfit(*np.array(pts).T, 1)[0]) if len(pts) > 1 else None
    return {"rows": rows, "exponents": fit, "flop_rate": rate}


def compare(base, seed, repeats=3):
    """4096 × 16384 float32 gelu decided by this tree and by ``base``, alternately: CPU seconds each and
    the ratio of the medians (this tree / base)."""
    here = Path(__file__).resolve().parents[1]
    case = {"task": "decide", "act": "gelu", "d": 4096, "n": 16384, "seed": seed + 300}
    runs = {"this": [], "base": []}
    for _ in range(repeats):
        for name, tree in (("this", here), ("base", Path(base).resolve())):
            row = spawn(case, timeout=900, tree=tree)
            runs[name].append({k: row.get(k) for k in ("status", "method", "cpu", "wall", "peak_bytes", "error")})
            print(name, json.dumps(runs[name][-1]), flush=True)
    med = {k: float(np.median([r["cpu"] for r in v if r.get("cpu")])) for k, v in runs.items()}
    return {"case": case, "runs": runs, "median_cpu": med, "ratio": med["this"] / med["base"]}


def spawn(case, timeout, tree=None, flag="--case"):
    """Run one case (``flag``: ``--case`` a decision, ``--cli-case`` an ``absorbjax check``) in a child
    process, with ``tree`` first on its path; its JSON row, or the case with the error's last line."""
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(
        [sys.executable, __file__, flag, json.dumps(case)],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=tree,
    )
    if proc.returncode != 0:
        return {**case, "error": (proc.stderr.strip().splitlines() or ["?"])[-1], "rc": proc.returncode}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def slope(rows, key):
    """Least-squares exponent of ``key`` against ``d`` (``n = 4d``) over the rows."""
    pts = [(math.log(r["d"]), math.log(r[key])) for r in rows if r.get(key, 0) > 0]
    if len(pts) < 2:
        return None
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


def fits(rows) -> dict:
    """Per task: the exponents in ``d`` of CPU time and of the memory above the imports, ``d ≤ 4096``."""
    out = {}
    for task in dict.fromkeys(r["task"] for r in rows):
        mine = [
            {**r, "extra": r["peak_bytes"] - r["base_bytes"]}
            for r in rows
            if r["task"] == task and r["d"] <= 4096 and "error" not in r
        ]
        out[task] = {"cpu": slope(mine, "cpu"), "memory": slope(mine, "extra"), "d": sorted({r["d"] for r in mine})}
    return out


def table(record) -> str:
    """The markdown tables of ``docs/benchmarks/scale.md`` from a record of this script."""
    rows = record["results"]["cases"]
    lines = [
        "| task | activation | d × n | result | CPU s | wall s | peak memory GB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            result = f"error: {r['error']}"
        elif r["task"] == "distance":
            result = f"{r['lower']:.4f} ≤ distance ≤ {r['upper']:.4f}"
        elif r["task"] == "planted":
            result = f"{r['status']} ({r['method']}); the planted S found: {r['planted_found']}"
        else:
            result = f"{r['status']} ({r['method']}; every S misses by ≥ {r['lower']:.4f}·√d)"
        lines.append(
            f"| {r['task']} | {r.get('act') or ''} | {r['d']} × {r['n']} | {result} | "
            f"{r.get('cpu', math.nan):.2f} | {r.get('wall', math.nan):.2f} | "
            f"{r.get('peak_bytes', math.nan) / 1e9:.2f} |"
        )
    lines += [
        "",
        "| task | d fitted | exponent of CPU time in d (n = 4d) | exponent of memory above imports |",
        "|---|---|---|---|",
    ]
    for task, fit in fits(rows).items():
        cpu, mem = (f"{v:.2f}" if v is not None else "n/a" for v in (fit["cpu"], fit["memory"]))
        lines.append(f"| {task} | {', '.join(map(str, fit['d']))} | {cpu} | {mem} |")
    return "\n".join(lines)


def stream_table(record) -> str:
    """The markdown tables of the streamed cases (checkpoints, growth, the comparison with a base tree)."""
    res, lines = record["results"], []
    if res.get("checkpoints"):
        lines += [
            "| checkpoint | blocks (d × n, stored) | answers | CPU s | wall s | peak RSS GB | limit GB |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in res["checkpoints"]:
            if "error" in r:
                lines.append(f"| {r['task']} | | error: {r['error']} | | | | |")
                continue
            blocks = ", ".join(f"{b['d']} × {b['n']} {b['dtype']}" for b in r["blocks"])
            answers = ", ".join(f"{b['status']} ({b['method']})" for b in r["blocks"])
            lines.append(
                f"| {r['task']} | {blocks} ({r['block_bytes'] / GB:.2f} GB each) | {answers} | {r['cpu']:.1f} | "
                f"{r['wall']:.1f} | {r['peak_bytes'] / GB:.2f} | {r['peak_limit_bytes'] / GB:.2f} |"
            )
        lines.append("")
    if res.get("growth"):
        g = res["growth"]
        lines += [
            f"Decision (gelu, float32 Gaussian) against n and d; one `n×d · d×d` float64 product at "
            f"{g['flop_rate'] / 1e9:.1f} GFLOP per CPU second; fitted exponents of CPU time: "
            f"n^{g['exponents']['n']:.2f} (d = 1024), d^{g['exponents']['d']:.2f} (n = 16384).",
            "",
            "| d × n | result | CPU s | peak GB | one O(n d²) product, CPU s | ratio |",
            "|---|---|---|---|---|---|",
        ]
        for r in g["rows"]:
            lines.append(
                f"| {r['d']} × {r['n']} | {r.get('status', r.get('error'))} ({r.get('method', '')}) | "
                f"{r.get('cpu', math.nan):.2f} | {r.get('peak_bytes', math.nan) / GB:.2f} | "
                f"{r['matmul_seconds']:.2f} | {r['ratio_to_matmul']:.3f} |"
            )
        lines.append("")
    if res.get("compare"):
        c = res["compare"]
        this, base = c["median_cpu"]["this"], c["median_cpu"]["base"]
        lines.append(
            f"4096 × 16384 float32 (gelu), alternately with the base tree, {len(c['runs']['this'])} runs each: "
            f"median CPU {this:.2f} s against {base:.2f} s, ratio {c['ratio']:.2f}."
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to d = 1024")
    parser.add_argument("--big", action="store_true", help="add 8192×32768 (decision only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write a JSON record here")
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cli-case", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--table", default=None, help="print the markdown table of a record and exit")
    parser.add_argument(
        "--falcon", nargs="?", const="", default=None, metavar="DIR", help="the Falcon-sized bf16 block"
    )
    parser.add_argument("--shards", nargs="?", const="", default=None, metavar="DIR", help="two 8192×32768 shards")
    parser.add_argument("--growth", action="store_true", help="CPU time against n and d, fitted exponents")
    parser.add_argument("--compare", default=None, metavar="BASE", help="4096×16384 against the tree at BASE")
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))))
        return
    if args.cli_case:
        print(json.dumps(run_cli(json.loads(args.cli_case))))
        return
    if args.table:
        record = json.loads(Path(args.table).read_text())
        print(table(record) if "cases" in record["results"] else stream_table(record))
        return
    from _bench import machine

    from absorbjax import io

    if any(x is not None for x in (args.falcon, args.shards, args.compare)) or args.growth:
        print(machine())
        results = {}
        for kind in ("falcon", "shards"):
            if getattr(args, kind) is not None:
                results.setdefault("checkpoints", []).append(checkpoint_case(kind, getattr(args, kind), args.seed))
                print(json.dumps(results["checkpoints"][-1]), flush=True)
        if args.growth:
            results["growth"] = growth(args.seed, flop_rate())
        if args.compare:
            results["compare"] = compare(args.compare, args.seed)
        print(stream_table({"results": results}))
        if args.out:
            io.save_record(args.out, name="bench_scale_stream", seed=args.seed, config={"rtol": RTOL}, results=results)
        return

    ds = [512, 1024] + ([] if args.quick else [2048, 4096])  # n = 4d >= 2048: the screen's range
    cases = [
        {"task": t, "act": a, "d": d, "n": 4 * d, "seed": args.seed + 7 * i + j}
        for i, d in enumerate(ds)
        for j, (t, a) in enumerate(
            [("decide", "relu"), ("decide", "gelu"), ("distance", "relu"), ("planted", ""), ("large", "relu")]
            + ([("gram", "relu")] if d <= GRAM_MAX_D else [])
        )
        if not (t == "large" and d > 2048)
    ]
    if args.big:
        cases.append({"task": "decide", "act": "relu", "d": 8192, "n": 32768, "seed": args.seed + 99})
    print(machine())
    print("CPU = process_time of the call (2 BLAS threads); memory = peak RSS of the case's process")
    rows = []
    for case in cases:
        row = spawn(case, timeout=900)
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("reason", "timings")}), flush=True)
    record = {"results": {"cases": rows, "fits": fits(rows)}}
    print(table(record))
    if args.out:
        io.save_record(
            args.out,
            name="bench_scale",
            seed=args.seed,
            config={"quick": args.quick, "big": args.big, "rtol": RTOL},
            results=record["results"],
        )


if __name__ == "__main__":
    main()
