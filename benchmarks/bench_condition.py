"""Benchmark: deciding Thm 8/10's condition on transformer-sized blocks.

Times :func:`absorbjax.condition.find_absorbing_set` on Gaussian blocks (Cor 11: "no") and on
absorbable ones (a hidden ``S``: "yes") up to ``d = 384, n = 1536`` in float64, with the time per
phase; next to it, the dense least squares on the ``d²×n`` matrix ``K`` that the Gram form avoids
(where ``K`` fits in memory), and the throughput on many small draws.

    python benchmarks/bench_condition.py            # full: up to d = 384, n = 1536
    python benchmarks/bench_condition.py --quick    # up to d = 128, n = 512
    add --out results/bench_condition.json for a JSON record (seed, versions, every timing)
    python benchmarks/bench_condition.py --against OTHER_TREE   # the decision cost of this tree
        against another checkout (e.g. `git worktree add /tmp/base main`), side by side: both run
        the same cases in alternating subprocesses (4 rounds, best of each), ratios printed
"""

import argparse
import json
import os
import subprocess
import sys
import time

import jax
import numpy as np
from _bench import machine, timed

from absorbjax import condition, io, models

DENSE_MAX = 3e7  # entries of K = [vec M_1 … vec M_n] that the dense comparison may allocate


def dense_relaxation(params):
    """The least squares ``min_c ‖K c + vec I‖`` with ``K`` formed: ``d²×n`` memory."""
    U, D = np.asarray(params.up), np.asarray(params.down)
    d, n = D.shape
    K = np.einsum("ki,ij->kji", D, U).reshape(d * d, n)
    c = np.linalg.lstsq(K, -np.eye(d).ravel(), rcond=None)[0]
    return np.linalg.norm(K @ c + np.eye(d).ravel())


def bench_block(kind, d, n, key, repeats):
    if kind == "gaussian":
        params = models.init("gelu", d, n, key=key)
    else:
        params, _ = models.planted("gelu", d, n, key=key, size=d)
    seconds, cert = timed(lambda: condition.find_absorbing_set(params), repeats)
    row = {
        "kind": kind,
        "d": d,
        "n": n,
        "seconds": seconds,
        "status": cert.status,
        "method": cert.method,
        "timings": dict(cert.timings),
    }
    phases = ", ".join(f"{k} {v:.3f}" for k, v in cert.timings.items())
    line = f"{kind:<10} d={d:<4} n={n:<5} {seconds:7.3f} s  {cert.status:<14} by {cert.method:<10} [{phases}]"
    if kind == "gaussian" and d * d * n <= DENSE_MAX:
        dense, rho = timed(lambda: dense_relaxation(params), 1)
        assert np.isclose(rho, cert.relaxation.residual, rtol=1e-6)
        row["dense_lstsq_seconds"] = dense
        line += f"  dense K lstsq {dense:.3f} s ({dense / seconds:.1f}x the whole decision)"
    print(line, flush=True)
    return row


_CASES = r"""
import json, sys, time
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
from absorbjax import condition, models
out = {}
def best(fn, k=3):
    fn(); b = 1e9
    for _ in range(k):
        t = time.perf_counter(); r = fn(); b = min(b, time.perf_counter() - t)
    return b, r.status
for kind, d, n in [(k, d, 4 * d) for d in (32, 64, 128) for k in ("gaussian", "absorbable")]:
    key = jax.random.fold_in(jax.random.key(0), d)
    p = models.init("gelu", d, n, key=key) if kind == "gaussian" else models.planted("gelu", d, n, key=key, size=d)[0]
    out[f"{kind} d={d} n={n}"] = best(lambda: condition.find_absorbing_set(p))
ps = models.sample("relu", 3, 12, key=jax.random.key(1), draws=300)
t = time.perf_counter(); condition.find_absorbing_sets(ps, progress=False); out["300 draws d=3 n=12"] = (time.perf_counter() - t, "")
rng = np.random.default_rng(0)
for d in (256, 512):  # the O(n d²) screen of the wide path (bench_scale's decide case)
    p = models.MLPParams(rng.standard_normal((2048, d)) / np.sqrt(d), rng.standard_normal((d, 2048)) / np.sqrt(2048))
    out[f"wide gaussian d={d} n=2048"] = best(lambda: condition.find_absorbing_set(p, "relu"))
print(json.dumps(out))
"""


def against(other: str, rounds: int = 4) -> None:
    """Time :data:`_CASES` with this tree and with ``other`` in alternating subprocesses (one BLAS
    thread each); print the best time of each case per tree and their ratio (this / other)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    times: dict[str, dict[str, list]] = {}
    for tree in [other, here] * rounds:
        run = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", _CASES],
            env={**env, "PYTHONPATH": tree},
            capture_output=True,
            text=True,
            check=True,
        )
        for case, (seconds, status) in json.loads(run.stdout.strip().splitlines()[-1]).items():
            times.setdefault(case, {}).setdefault(tree, []).append((seconds, status))
    total = {other: 0.0, here: 0.0}
    print(f"this tree {here} against {other}: best of {rounds} alternating rounds, 1 BLAS thread")
    for case, by in times.items():
        (a, sa), (b, sb) = min(by[other]), min(by[here])
        total[other] += a
        total[here] += b
        print(f"{case:<28} other {a * 1e3:8.1f} ms {sa:<15} this {b * 1e3:8.1f} ms {sb:<15} ratio {b / a:5.2f}")
    print(f"total: other {total[other]:.3f} s, this {total[here]:.3f} s, ratio {total[here] / total[other]:.2f}")


def main(argv=None):
    with jax.enable_x64(True):  # exactness claims need float64; scoped to this run
        return _main(argv)


def _main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to d = 128, n = 512")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write a JSON record here")
    parser.add_argument("--against", default=None, help="another checkout: side-by-side decision cost")
    args = parser.parse_args(argv)
    if args.against:
        return against(args.against)
    key = jax.random.key(args.seed)
    sizes = [(32, 128), (64, 256), (128, 512)] + ([] if args.quick else [(256, 1024), (384, 1536)])
    print(machine())
    print(f"seed {args.seed}; find_absorbing_set, float64, best of 2 (1 for the largest); phases in s")
    blocks = [
        bench_block(kind, d, n, jax.random.fold_in(key, i), 1 if d >= 384 else 2)
        for i, (d, n) in enumerate(sizes)
        for kind in ("gaussian", "absorbable")
    ]
    many = []

    draws, d, n = (200, 3, 12) if args.quick else (2000, 3, 12)
    for dist in ("gaussian", "ternary"):
        params = models.sample("relu", d, n, key=jax.random.fold_in(key, 99), draws=draws, dist=dist)
        start = time.perf_counter()
        certs = condition.find_absorbing_sets(params, progress=False)
        seconds = time.perf_counter() - start
        counts = {s.value: sum(c.status == s for c in certs) for s in condition.Status}
        methods = {m: sum(c.method == m for c in certs) for m in sorted({c.method for c in certs})}
        print(
            f"many draws: {draws} {dist} blocks d={d} n={n} (n > d²) in {seconds:.2f} s "
            f"({draws / seconds:.0f} per s); {counts}; methods {methods}"
        )
        many.append(
            {"dist": dist, "draws": draws, "d": d, "n": n, "seconds": seconds, "statuses": counts, "methods": methods}
        )
    if args.out:
        io.save_record(
            args.out,
            name="bench_condition",
            seed=args.seed,
            config={"quick": args.quick},
            results={"blocks": blocks, "many_draws": many},
        )


if __name__ == "__main__":
    main()
