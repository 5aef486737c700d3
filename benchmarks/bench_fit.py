"""Benchmark of :func:`absorbjax.fit.search`: throughput, compute efficiency, scaling.

Runs unchanged on CPU and GPU and prints the device. Every number is measured in this process
(the scaling runs in fresh child processes, so their peak memory is their own), side by side:

1. vmapped search vs the same optimisation as a per-draw Python loop around a jitted step
   (what one writes without the toolkit): optimiser steps per second at (d, n) = (4, 16),
   256 draws x 8 restarts, float32. One "step" is one Adam update of one restart. For
   reference, the same steps hand-written as einsums over all draws and restarts at once
   (no vmap, no batching): what plain vectorisation gives on this device.
2. compute efficiency at (d, n) = (64, 256), float32: matmul FLOP/s achieved by the search's
   first phase as a fraction of a dense matmul's FLOP/s measured here.
3. scaling: 1,000 vs 10,000 draws x 8 restarts at (4, 16): time ratio and peak memory.

The first-phase (Adam) loop is what is timed: per-step time is the difference between two
runs with different step counts, so sampling, compilation and the final evaluation cancel.
``--quick`` shrinks every size for a CI smoke run and times only the default batch size.
``--claims [DRAWS]`` instead measures, in float64 with default settings, the recall on absorbable
draws, the separation on Gaussian draws and the near-origin error of gated and homogeneous fits. ``--sizes [DRAWS]`` measures the
recall on absorbable draws as n/d grows and on depth-2 stacks (``--strategy`` repeatable, side by side; ``expand``: the
expand–merge–decide–polish search of :mod:`absorbjax.fit._expand`, ``--rounds R`` its rounds;
``--size D N`` and ``--stack D N`` pick sizes). CPU seconds are the process's, every thread's: under
``taskset -c 0`` (one core, the record's ``environment.cores``) they equal the wall seconds.

    python benchmarks/bench_fit.py [--quick] [--out results/bench_fit.json]
    python benchmarks/bench_fit.py --claims 100 [--out results/fit_claims.json]
    python benchmarks/bench_fit.py --sizes 16 [--out results/fit_sizes.json]
    python benchmarks/bench_fit.py --sizes 12 --generic 2 --strategy default \
        --out docs/benchmarks/records/fit_search.json
    taskset -c 0 python benchmarks/bench_fit.py --sizes 12 --generic 2 --strategy default \
        --out docs/benchmarks/records/fit_search_one_core.json
    python benchmarks/bench_fit.py --sizes 8 --strategy expand --size 2 8 --size 3 12 --stack 2 4
    python benchmarks/bench_fit.py --sizes 8 --strategy expand --stack 2 4 --activation relu --rounds 9
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import subprocess
import sys
import time

import _bench
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from absorbjax import activations, fit, io, models

ACT = "gelu"
SEED = 0


def device_line() -> str:
    d = jax.devices()[0]
    return f"{jax.default_backend()} x{jax.device_count()}: {getattr(d, 'device_kind', str(d))}"


def f32(params):
    return jax.tree.map(lambda a: a.astype(jnp.float32), params)


def timed(fn, repeat: int = 1) -> float:
    """Best wall time of ``repeat`` calls of ``fn`` (which must block until done), in seconds."""
    return _bench.timed(fn, repeat)[0]


def search_step_time(
    target, restarts: int, steps: tuple[int, int], batch_size: int | None
) -> tuple[float, fit.SearchConfig]:
    """Seconds per first-phase step of one ``search`` call over all draws (difference of two
    step counts; each configuration compiled by a warm-up call first), and the search's config
    (``batch_size=None``: the search's default, recorded there)."""
    times = []
    for s in steps:
        run = lambda: fit.search(
            target,
            ACT,
            key=jax.random.key(SEED),
            solver=fit.Solver(restarts=restarts, steps=s, polish=False, method="adam"),
            run=fit.Run(batch_size=batch_size, progress=False),
        )
        config = run().config  # compile
        times.append(timed(run))
    return (times[1] - times[0]) / (steps[1] - steps[0]), config


# ---------------------------------------------------------------------------------------------
# 1. vmapped vs per-draw loop


def loop_baseline(target, restarts: int, steps: int, draws: int, num: int) -> float:
    """Seconds per step per draw for the per-draw Python loop around one jitted Adam step over
    that draw's restarts (same loss, inputs, init law and optimiser as the search)."""
    d, n = models.dims(target)
    opt = fit.default_optimizer(steps)
    spec = fit.Inputs(num=num)

    def loss(p, xs, ys):
        pred = jax.vmap(lambda x: models.mlp(p, x, ACT))(xs)
        return jnp.mean(jnp.sum((ys - pred) ** 2, -1) / jnp.sum(xs**2, -1))

    @jax.jit
    def prepare(w, key):
        xs, _ = fit.sample_inputs(spec, d, key=key, dtype=jnp.float32)
        ys = jax.vmap(lambda x: models.skip_mlp(w, x, ACT))(xs)
        p = jax.vmap(lambda k: models.init(ACT, d, n, key=k, dtype=jnp.float32))(jax.random.split(key, restarts))
        return xs, ys, p, opt.init(p)

    @jax.jit
    def step(p, s, xs, ys):
        g = jax.vmap(jax.grad(loss), (0, None, None))(p, xs, ys)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    def one_draw(i, count):
        w = jax.tree.map(lambda a: a[i], target)
        xs, ys, p, s = prepare(w, jax.random.fold_in(jax.random.key(SEED), i))
        for _ in range(count):
            p, s = step(p, s, xs, ys)
        jax.block_until_ready(p)

    one_draw(0, 2)  # compile
    short, long_ = steps // 4, steps
    t_short = timed(lambda: [one_draw(i, short) for i in range(draws)])
    t_long = timed(lambda: [one_draw(i, long_) for i in range(draws)])
    return (t_long - t_short) / (long_ - short) / draws


def hand_batched(target, restarts: int, steps: tuple[int, int], num: int) -> float:
    """Seconds per step over all draws for the same Adam steps written by hand as einsums over
    (draws, restarts, inputs) at once, without vmap or batching: what plain vectorisation gives
    on this device. Inputs and init law as the search's."""
    d, n = models.dims(target)
    draws = target.down.shape[0]
    act = activations.get(ACT).fn
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(SEED), i))(jnp.arange(draws))
    xs = jax.vmap(lambda k: fit.sample_inputs(fit.Inputs(num=num), d, key=k, dtype=jnp.float32)[0])(keys)
    ys = jax.vmap(jax.vmap(lambda w, x: models.skip_mlp(w, x, ACT), (None, 0)))(target, xs)
    p0 = jax.vmap(
        lambda k: jax.vmap(lambda r: models.init(ACT, d, n, key=r, dtype=jnp.float32))(jax.random.split(k, restarts))
    )(keys)
    inv_sq = 1.0 / (num * jnp.sum(xs**2, -1))  # (draws, inputs)

    def loss(p):  # summed over draws and restarts: each restart's gradient is its own
        h = act(jnp.einsum("brnk,bik->brin", p.up, xs))
        pred = jnp.einsum("brkn,brin->brik", p.down, h)
        return jnp.sum(jnp.sum((ys[:, None] - pred) ** 2, -1) * inv_sq[:, None])

    def run(count):
        opt = fit.default_optimizer(count)

        def step(carry, _):
            p, s = carry
            u, s = opt.update(jax.grad(loss)(p), s, p)
            return (optax.apply_updates(p, u), s), None

        return jax.jit(lambda p: lax.scan(step, (p, opt.init(p)), None, length=count)[0][0])

    times = []
    for count in steps:
        f = run(count)
        jax.block_until_ready(f(p0))  # compile
        times.append(timed(lambda: jax.block_until_ready(f(p0))))
    return (times[1] - times[0]) / (steps[1] - steps[0])


def bench_vmap_vs_loop(quick: bool) -> dict:
    d, n, restarts = 4, 16, 8
    draws = 64 if quick else 256
    steps = (10, 30) if quick else (50, 250)
    loop_draws = 2 if quick else 16
    target = f32(models.sample(ACT, d, n, key=jax.random.key(SEED), draws=draws))
    per_step, config = search_step_time(target, restarts, steps, batch_size=None)
    default_batch, num = config.batch_size, config.num  # the search's own defaults
    vmapped = {default_batch: draws * restarts / per_step}
    if draws != default_batch and not quick:  # all draws in one batch
        vmapped[draws] = draws * restarts / search_step_time(target, restarts, steps, batch_size=draws)[0]
    loop = restarts / loop_baseline(target, restarts, steps[1], loop_draws, num)
    by_hand = draws * restarts / hand_batched(target, restarts, steps, num)
    return {
        "d": d,
        "n": n,
        "draws": draws,
        "restarts": restarts,
        "inputs": num,
        "dtype": "float32",
        "activation": ACT,
        "vmapped_steps_per_s": {str(b): v for b, v in vmapped.items()},
        "default_batch_size": default_batch,
        "loop_steps_per_s": loop,
        "loop_draws_timed": loop_draws,
        "ratio": {str(b): v / loop for b, v in vmapped.items()},
        "target_ratio": 50,
        "hand_batched_steps_per_s": by_hand,
        "hand_batched_ratio": by_hand / loop,
    }


# ---------------------------------------------------------------------------------------------
# 2. compute efficiency


def matmul_flops(size: int) -> float:
    a = jax.random.normal(jax.random.key(1), (size, size), jnp.float32)
    b = jax.random.normal(jax.random.key(2), (size, size), jnp.float32)
    mm = jax.jit(lambda a, b: a @ b)
    mm(a, b).block_until_ready()
    t = timed(lambda: mm(a, b).block_until_ready(), repeat=5)
    return 2 * size**3 / t


def bench_efficiency(quick: bool) -> dict:
    d, n, restarts = 64, 256, 8
    draws = 2 if quick else 8
    steps = (2, 6) if quick else (10, 40)
    target = f32(models.sample(ACT, d, n, key=jax.random.key(SEED), draws=draws))
    per_step, config = search_step_time(target, restarts, steps, batch_size=draws)
    num = config.num
    # Matmul FLOPs of one Adam step of one restart: forward W_up x and W_down h (4nd per input),
    # backward dW_down, dh and dW_up (6nd per input). Elementwise work is not counted.
    flops = draws * restarts * num * 10 * n * d
    achieved = flops / per_step
    peak = matmul_flops(1024 if quick else 4096)
    return {
        "d": d,
        "n": n,
        "draws": draws,
        "restarts": restarts,
        "inputs": num,
        "dtype": "float32",
        "activation": ACT,
        "achieved_flops": achieved,
        "matmul_flops": peak,
        "fraction": achieved / peak,
        "target_fraction": 0.30,
    }


# ---------------------------------------------------------------------------------------------
# 3. scaling (child processes)


def peak_bytes() -> int:
    stats = jax.devices()[0].memory_stats() if jax.default_backend() != "cpu" else None
    if stats and "peak_bytes_in_use" in stats:
        return int(stats["peak_bytes_in_use"])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def scaling_child(draws: int, steps: int, batch_size: int) -> dict:
    d, n, restarts = 4, 16, 8
    target = f32(models.sample(ACT, d, n, key=jax.random.key(SEED), draws=draws))
    kw = dict(
        key=jax.random.key(SEED),
        solver=fit.Solver(restarts=restarts, steps=steps, polish=False, method="adam"),
        run=fit.Run(batch_size=batch_size, progress=False),
    )
    fit.search(jax.tree.map(lambda a: a[:batch_size], target), ACT, **kw)  # compile
    t = time.perf_counter()
    r = fit.search(target, ACT, **kw)
    seconds = time.perf_counter() - t
    return {
        "draws": draws,
        "seconds": seconds,
        "peak_bytes": peak_bytes(),
        "best_loss_median": float(np.median(r.best_loss)),
    }


def bench_scaling(quick: bool) -> dict:
    sizes = (50, 200) if quick else (1000, 10000)
    steps, batch = (10, 16) if quick else (100, 16)
    rows = []
    for draws in sizes:
        cmd = [sys.executable, __file__, "--scaling-child", str(draws), str(steps), str(batch)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
        if proc.returncode:
            raise RuntimeError(proc.stderr[-3000:])
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    small, large = rows
    return {
        "d": 4,
        "n": 16,
        "restarts": 8,
        "steps": steps,
        "batch_size": batch,
        "dtype": "float32",
        "activation": ACT,
        "runs": rows,
        "time_ratio": large["seconds"] / small["seconds"],
        "draw_ratio": large["draws"] / small["draws"],
        "peak_gib": max(r["peak_bytes"] for r in rows) / 2**30,
        "peak_is": "device peak_bytes_in_use" if jax.default_backend() != "cpu" else "process max RSS",
    }


# ---------------------------------------------------------------------------------------------
# The claims (float64, default settings)


def claims(draws: int) -> dict:
    """Recall on absorbable draws, separation on Gaussian draws (relu, gelu at (2,4), (3,6)),
    and the smallest-decade error of gated/homogeneous fits, with ``fit.search`` defaults."""
    jax.config.update("jax_enable_x64", True)  # exactness claims need float64
    base = jax.random.key(2024)
    out = {"draws": draws, "recall": {}, "separation": {}, "near_origin": {}}
    for i, act in enumerate(["relu", "gelu"]):
        for d, n in [(2, 4), (3, 6)]:
            k = jax.random.fold_in(jax.random.fold_in(base, d), i)
            target, _ = models.planted_sample(act, d, n, key=k, draws=draws)
            r = fit.recall(target, act, key=jax.random.key(7))
            rec = out["recall"][f"{act} ({d},{n})"] = {
                "recall": r.rate,
                "train_only": float((r.best_loss <= r.tol).mean()),
                "seconds": r.seconds,
            }
            print(
                f"recall     {act:6s} ({d},{n}) {draws} absorbable draws: {100 * rec['recall']:.0f}% reach "
                f"loss <= 1e-20 on training and held-out inputs ({100 * rec['train_only']:.0f}% on training "
                f"only), {rec['seconds']:.0f}s",
                flush=True,
            )
            g = fit.recall(
                models.sample(act, d, n, key=jax.random.fold_in(k, 10**6), draws=draws), act, key=jax.random.key(7)
            )
            q = np.quantile(g.best_loss, [0, 0.1, 0.5, 0.9, 1])
            sep = out["separation"][f"{act} ({d},{n})"] = {"quantiles": q, "below_1e-12": g.below(1e-12)}
            print(
                f"separation {act:6s} ({d},{n}) {draws} Gaussian draws: best loss min/10/50/90%/max "
                + " ".join(f"{v:.2g}" for v in q)
                + f"; below 1e-12: {sep['below_1e-12']}",
                flush=True,
            )
    few = max(8, draws // 4)  # gated fits cost more; the claim is about every draw's profile
    out["near_origin_draws"] = few
    for i, act in enumerate(["swiglu", "geglu", "relu2", "reglu"]):
        for d, n in [(2, 4), (3, 6)]:
            g = fit.search(
                models.sample(act, d, n, key=jax.random.fold_in(base, 100 + 10 * i + d), draws=few),
                act,
                key=jax.random.key(7),
                run=fit.Run(progress=False),
            )
            row = out["near_origin"][f"{act} ({d},{n})"] = {
                "smallest_decade_min": float(g.profile[:, 0].min()),
                "edges": g.edges[:2],
                "best_loss_quantiles": np.quantile(g.best_loss, [0, 0.5, 1]),
                "weight_norm_ratio_median": float(np.median(g.weight_norms / g.target_norms)),
            }
            print(
                f"near 0     {act:6s} ({d},{n}) {few} Gaussian draws: smallest-decade "
                f"[{g.edges[0]:.0e},{g.edges[1]:.0e}) error min {row['smallest_decade_min']:.3f}; best loss "
                "min/median/max "
                + " ".join(f"{v:.2g}" for v in row["best_loss_quantiles"])
                + f"; median |V|/|W| {row['weight_norm_ratio_median']:.2g}",
                flush=True,
            )
    return out


SIZES = [(2, 4), (2, 8), (3, 6), (3, 12), (4, 8), (4, 16), (8, 16), (8, 32)]
STACKS = [(2, 4), (2, 8), (3, 6), (3, 12), (4, 8), (4, 16)]  # depth 2, blockwise absorbable
STRATEGIES = ("default", "joint", "adam", "expand")
SOLVERS = {"adam": fit.Solver(method="adam"), "joint": fit.Solver(blockwise=False)}


def recall_by_size(
    draws: int,
    strategies=("default",),
    sizes=None,
    stacks=None,
    activations=("relu", "gelu"),
    generic: int = 0,
    rounds: int | None = None,
) -> dict:
    """Recall on absorbable draws (``n`` from ``d`` to ``4d``, one layer) and on depth-2
    blockwise-absorbable stacks, relu and gelu, float64, for each of ``strategies`` side by side:
    ``"default"`` is :func:`absorbjax.fit.search` with its defaults (``method="varpro"``),
    ``"adam"`` the same with ``method="adam"`` (the default before), ``"joint"`` the default
    without its block-by-block step (``blockwise=False``: a stack searched only as a whole, the
    default before it; not run on one block, where it is ``"default"``), ``"expand"``
    :func:`absorbjax.fit._expand.expand_search` (theory-assisted). ``sizes``/``stacks`` pick the
    one-layer and depth-2 sizes (either given: only those). ``generic``: that many Gaussian draws
    per case as well (Cor 11: none absorbs), searched the same way: how many it solves, and the
    smallest loss. ``rounds``: expand_search's (``None``: its default). Seconds include
    compilation; a draw's seconds are the search's wall time over its draws."""
    jax.config.update("jax_enable_x64", True)
    base = jax.random.key(5)
    out = {"draws": draws, "generic_draws": generic, "strategies": list(strategies), "rows": []}
    if sizes is None and stacks is None:
        sizes, stacks = SIZES, STACKS
    cases = [(d, n, 1) for d, n in sizes or ()] + [(d, n, 2) for d, n in stacks or ()]
    for act in activations:
        for d, n, depth in cases:
            k = jax.random.fold_in(jax.random.fold_in(base, d), n)
            if depth == 1:
                planted, _ = models.planted_sample(act, d, n, key=k, draws=draws)
            else:
                planted = models.planted_sample(act, d, n, key=jax.random.fold_in(k, 1000), draws=draws, depth=depth)[0]
            gaussian = generic and models.sample(
                act, d, n, key=jax.random.fold_in(k, 2000), draws=generic, **({"depth": depth} if depth > 1 else {})
            )
            for strategy in strategies:
                if strategy == "joint" and depth == 1:
                    continue  # the default itself on one block
                search, solver = fit.search, SOLVERS.get(strategy, fit.Solver())
                if strategy == "expand":
                    search = fit.expand_search
                    if rounds is not None:
                        search = functools.partial(search, wide=fit.Wide(rounds=rounds))

                def measure(target):  # the recall and the process's CPU seconds (every thread) it took
                    cpu = time.process_time()
                    r = fit.recall(
                        target,
                        act,
                        key=jax.random.key(7),
                        problem=fit.Problem(depth=depth),
                        search=search,
                        solver=solver,
                    )
                    return r, time.process_time() - cpu

                r, cpu = measure(planted)
                name = f"{strategy} {act} ({d},{n})" + (f" depth {depth}" if depth > 1 else "")
                row = {
                    "strategy": strategy,
                    "activation": act,
                    "d": d,
                    "n": n,
                    "depth": depth,
                    "solved": r.count,
                    "draws": draws,
                    "recall": r.rate,
                    "seconds_per_draw": r.seconds / draws,
                    "cpu_seconds_per_draw": cpu / draws,
                    "best_loss_quantiles": np.quantile(r.best_loss, [0, 0.5, 1]),
                    "max_solved_loss": float(r.best_loss[r.solved].max()) if r.count else None,
                }
                line = f"{name}: planted {r.line()}; {row['seconds_per_draw']:.1f}s ({cpu / draws:.1f} CPU s) per draw"
                if generic:
                    g, gcpu = measure(gaussian)
                    row.update(
                        generic_solved=g.count,
                        generic_draws=generic,
                        generic_min_loss=float(g.best_loss.min()),
                        generic_seconds_per_draw=g.seconds / generic,
                        generic_cpu_seconds_per_draw=gcpu / generic,
                    )
                    line += f"; Gaussian {g.count}/{generic} solved, min loss {g.best_loss.min():.2g}"
                out["rows"].append(row)
                print(line, flush=True)
    return out


# ---------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    """The command line: the speed benchmarks 1–3 by default, ``--claims`` or ``--sizes`` instead."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run (CI)")
    ap.add_argument("--out", default=None, help="write a JSON record here")
    ap.add_argument(
        "--claims",
        type=int,
        nargs="?",
        const=100,
        default=None,
        metavar="DRAWS",
        help="instead of the speed benchmarks, measure recall/separation/near-origin error "
        "in float64 with default settings on DRAWS draws per case (default 100)",
    )
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="?",
        const=16,
        default=None,
        metavar="DRAWS",
        help="instead, measure the default search's recall on absorbable draws at (d, n) = "
        + ", ".join(map(str, SIZES))
        + " and on depth-2 blockwise-absorbable stacks at "
        + ", ".join(map(str, STACKS))
        + " (float64, DRAWS draws each, default 16)",
    )
    ap.add_argument(
        "--strategy",
        choices=STRATEGIES,
        action="append",
        help="with --sizes: a search measured, repeatable, side by side (default: fit.search's defaults, "
        "method='varpro'; joint: blockwise=False, a stack searched only as a whole; adam: method='adam', "
        "the default before; expand: fit.expand_search); default: default",
    )
    ap.add_argument(
        "--size",
        type=int,
        nargs=2,
        action="append",
        metavar=("D", "N"),
        help="with --sizes: only these one-layer sizes (repeatable)",
    )
    ap.add_argument(
        "--stack",
        type=int,
        nargs=2,
        action="append",
        metavar=("D", "N"),
        help="with --sizes: only these depth-2 sizes (repeatable)",
    )
    ap.add_argument(
        "--activation",
        choices=("relu", "gelu"),
        action="append",
        help="with --sizes: only this activation (repeatable; default relu and gelu)",
    )
    ap.add_argument(
        "--generic",
        type=int,
        default=0,
        metavar="G",
        help="with --sizes: also G Gaussian draws per case (none absorbs), searched the same way",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=None,
        metavar="R",
        help="with --strategy expand: expand_search's rounds (default: expand_search's)",
    )
    ap.add_argument("--scaling-child", nargs=3, type=int, metavar=("DRAWS", "STEPS", "BATCH"), help=argparse.SUPPRESS)
    return ap


def _float64_run(args, argv) -> bool:
    """Run the ``--claims`` or ``--sizes`` measurement if one was asked for (and write its record to
    ``--out``); whether one ran."""
    float64_runs = {"claims": (claims, "fit_claims", 2024), "sizes": (recall_by_size, "fit_recall_by_size", 5)}
    for flag, (measure, name, seed) in float64_runs.items():
        draws = getattr(args, flag)
        if draws:
            print(f"device: {device_line()}  (jax {jax.__version__}), float64", flush=True)
            results = (
                measure(
                    draws,
                    tuple(args.strategy or ("default",)),
                    args.size,
                    args.stack,
                    tuple(args.activation or ("relu", "gelu")),
                    args.generic,
                    args.rounds,
                )
                if flag == "sizes"
                else measure(draws)
            )
            if args.out:
                config = {
                    "command": " ".join(["python benchmarks/bench_fit.py", *(sys.argv[1:] if argv is None else argv)]),
                    "draws": draws,
                    **(
                        {
                            "strategy": args.strategy,
                            "size": args.size,
                            "stack": args.stack,
                            "activation": args.activation,
                            "generic": args.generic,
                            "rounds": args.rounds,
                        }
                        if flag == "sizes"
                        else {}
                    ),
                }
                io.save_record(args.out, name=name, seed=seed, config=config, results=results)
            return True
    return False


def _speed_benchmarks(quick: bool) -> dict:
    """Benchmarks 1–3 (vmap vs loop, compute efficiency, scaling), each printed as it finishes."""
    results = {}

    r = results["vmap_vs_loop"] = bench_vmap_vs_loop(quick)
    print(
        f"[1] vmapped search vs per-draw loop, (d,n)=({r['d']},{r['n']}), {r['draws']} draws x {r['restarts']} "
        f"restarts, {r['inputs']} inputs, {r['dtype']}; loop: {r['loop_steps_per_s']:.3g} restart-steps/s",
        flush=True,
    )
    for b, v in r["vmapped_steps_per_s"].items():
        tag = " (default)" if int(b) == r["default_batch_size"] else ""
        print(
            f"    batch_size {b}{tag}: {v:.3g} restart-steps/s -> ratio {r['ratio'][b]:.1f}x "
            f"(target >= {r['target_ratio']}x)",
            flush=True,
        )
    print(
        f"    reference, the same Adam steps hand-written as einsums over all {r['draws']} draws x restarts x "
        f"inputs at once (no vmap): {r['hand_batched_steps_per_s']:.3g} restart-steps/s -> ratio "
        f"{r['hand_batched_ratio']:.1f}x",
        flush=True,
    )

    r = results["efficiency"] = bench_efficiency(quick)
    print(
        f"[2] compute efficiency, (d,n)=({r['d']},{r['n']}), {r['draws']} draws x {r['restarts']} restarts, "
        f"{r['inputs']} inputs, {r['dtype']}: {r['achieved_flops'] / 1e9:.3g} GFLOP/s vs dense matmul "
        f"{r['matmul_flops'] / 1e9:.3g} GFLOP/s -> {100 * r['fraction']:.0f}% (target >= 30%)",
        flush=True,
    )

    r = results["scaling"] = bench_scaling(quick)
    a, b = r["runs"]
    print(
        f"[3] scaling, (d,n)=(4,16) x {r['restarts']} restarts, {r['steps']} Adam steps, batch {r['batch_size']}: "
        f"{a['draws']} draws {a['seconds']:.1f}s, {b['draws']} draws {b['seconds']:.1f}s -> time ratio "
        f"{r['time_ratio']:.2f} for {r['draw_ratio']:.0f}x draws; peak memory {r['peak_gib']:.2f} GiB "
        f"({r['peak_is']}; target < 2 GiB)",
        flush=True,
    )
    return results


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.scaling_child:
        print(json.dumps(scaling_child(*args.scaling_child)))
        return 0
    if _float64_run(args, argv):
        return 0
    print(f"device: {device_line()}  (jax {jax.__version__})", flush=True)
    results = _speed_benchmarks(args.quick)

    print("[4] condition.find_absorbing_set at d=384, n=1536: see benchmarks/bench_condition.py")

    if args.out:
        io.save_record(args.out, name="bench_fit", seed=SEED, config={"quick": args.quick}, results=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
