"""Benchmark: deciding Thm 8/10's condition at the size of real models (``condition.scale``).

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

    python experiments/bench_scale.py                  # up to 4096×16384
    python experiments/bench_scale.py --quick          # 512×2048 and 1024×4096
    python experiments/bench_scale.py --big --out docs/benchmarks/scale.json
    python experiments/bench_scale.py --table docs/benchmarks/scale.json   # the markdown table
"""

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RTOL = 1e3 * 2.0**-52  # condition.DEFAULT_RTOL, without importing JAX in the parent
GRAM_MAX_D = 1024


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
        cert = condition.find_absorbing_set(params, act, method="relaxation" if task == "gram" else "auto")
        out = {"lower": cert.lower_bound / math.sqrt(d)}
    out.update(
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


def spawn(case, timeout):
    proc = subprocess.run(
        [sys.executable, __file__, "--case", json.dumps(case)],
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to d = 1024")
    parser.add_argument("--big", action="store_true", help="add 8192×32768 (decision only)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write a JSON record here")
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--table", default=None, help="print the markdown table of a record and exit")
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))))
        return
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return
    from _bench import machine

    from absorbjax import io

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
