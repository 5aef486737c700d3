"""Benchmark: how the default search's cost grows with ``d`` and ``n``, and what a draw costs against
one forward–backward pass of its loss.

:func:`absorbjax.fit.search` with every option at its default, float64, one block, planted draws
(:func:`absorbjax.models.planted_sample`: an absorber of the same width exists), relu and gelu, at
``n = 8, 12, 16`` with ``d = 4`` and at ``n = 4d`` with ``d = 2, 4, 8``. Each size's draws are
searched twice through :func:`absorbjax.fit.recall`: the first call compiles, the second is timed
(wall and CPU seconds of this process, all threads; a draw's share is the call's over its draws).
The exponents are least-squares slopes of ``log seconds`` against ``log n`` and ``log d``.

One forward–backward pass: ``jax.jit(jax.value_and_grad)`` of :func:`absorbjax.fit.relative_loss`
for one candidate of one draw on as many inputs as the search's default (:func:`fit._config.default_num`),
the best of 20 timed calls after one that compiles. The ratio says how many such passes a draw costs:
the search runs ``restarts × steps`` of them and more (Levenberg–Marquardt's Jacobians), vectorised.

    python benchmarks/bench_fit_growth.py [--draws 4] [--activation relu] [--out docs/benchmarks/records/fit_growth.json]
"""

from __future__ import annotations

import argparse
import sys
import time

import _bench
import jax
import numpy as np

from absorbjax import fit, io, models
from absorbjax.fit._config import default_num

ALONG_N = [(4, 8), (4, 12), (4, 16)]  # d = 4, n from 2d to 4d
ALONG_D = [(2, 8), (4, 16), (8, 32)]  # n = 4d
SEED = 11


def forward_backward_seconds(W, act: str, d: int, n: int) -> float:
    """Best wall seconds of one jitted value-and-gradient of the loss: one candidate, one draw."""
    one = jax.tree.map(lambda a: a[0], W)
    cand = models.init(act, d, n, key=jax.random.key(1), dtype=one.up.dtype)
    xs, _ = fit.sample_inputs(fit.Inputs(num=default_num(d, n, 1, 2)), d, key=jax.random.key(2), dtype=one.up.dtype)
    step = jax.jit(jax.value_and_grad(lambda V: fit.relative_loss(V, one, act, xs=xs)))
    jax.block_until_ready(step(cand))
    return _bench.timed(lambda: jax.block_until_ready(step(cand)), repeat=20)[0]


def measure(act: str, d: int, n: int, draws: int) -> dict:
    """One size: the search twice on the same planted draws (compile, then timed), and one pass."""
    W, _ = models.planted_sample(act, d, n, key=jax.random.fold_in(jax.random.key(SEED), 100 * d + n), draws=draws)
    search = lambda: fit.recall(W, act, key=jax.random.key(7))  # noqa: E731
    cold = search()
    wall, cpu = time.perf_counter(), time.process_time()
    warm = search()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    fb = forward_backward_seconds(W, act, d, n)
    return {
        "activation": act,
        "d": d,
        "n": n,
        "draws": draws,
        "solved": warm.count,
        "solved_first_call": cold.count,
        "seconds_per_draw": wall / draws,
        "cpu_seconds_per_draw": cpu / draws,
        "first_call_seconds_per_draw": cold.seconds / draws,
        "forward_backward_seconds": fb,
        "draw_over_forward_backward": wall / draws / fb,
    }


def slope(rows: list[dict], along: str, key: str = "seconds_per_draw") -> float:
    """Least-squares slope of ``log rows[key]`` against ``log rows[along]``."""
    x = np.log([r[along] for r in rows])
    return float(np.polyfit(x, np.log([r[key] for r in rows]), 1)[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=4, help="planted draws per size (default 4)")
    ap.add_argument("--activation", choices=("relu", "gelu"), action="append", help="repeatable; default both")
    ap.add_argument("--out", default=None, help="write a JSON record here")
    args = ap.parse_args(argv)
    jax.config.update("jax_enable_x64", True)
    print(_bench.machine(), flush=True)
    results = {"rows": [], "exponents": []}
    for act in args.activation or ("relu", "gelu"):
        done = {}
        for d, n in dict.fromkeys(ALONG_N + ALONG_D):
            row = done[d, n] = measure(act, d, n, args.draws)
            results["rows"].append(row)
            print(
                f"{act} ({d},{n}): solved {row['solved']}/{row['draws']}, {row['seconds_per_draw']:.2f} s a draw "
                f"({row['cpu_seconds_per_draw']:.2f} s CPU; first call {row['first_call_seconds_per_draw']:.2f} s), "
                f"one forward-backward pass {1e3 * row['forward_backward_seconds']:.3f} ms: "
                f"{row['draw_over_forward_backward']:.3g} passes a draw",
                flush=True,
            )
        along_n, along_d = [done[s] for s in ALONG_N], [done[s] for s in ALONG_D]
        exps = {"activation": act, "n_exponent_at_d_4": slope(along_n, "n"), "d_exponent_at_n_4d": slope(along_d, "d")}
        results["exponents"].append(exps)
        print(
            f"{act}: seconds a draw grow as n^{exps['n_exponent_at_d_4']:.2f} (d = 4), "
            f"d^{exps['d_exponent_at_n_4d']:.2f} (n = 4d)",
            flush=True,
        )
    if args.out:
        config = {
            "command": " ".join(["python benchmarks/bench_fit_growth.py", *(sys.argv[1:] if argv is None else argv)]),
            "draws": args.draws,
            "activation": args.activation,
        }
        io.save_record(args.out, name="fit_growth", seed=SEED, config=config, results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
