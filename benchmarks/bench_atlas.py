"""Benchmark: the depth atlas. Certify every size ``d ≤ D``, ``n ∈ {d, 2d, 4d}`` and the narrow widths
``n ∈ {1, ⌊d/2⌋}`` below the input, ``L ≤ 6`` (GELU and ReLU) that fits in a CPU budget, smallest
parameter count first, and fit time against size.

Each size runs :func:`absorbjax.dimension.certify` once (exact rank mod p at one rational point,
no float check). A size is skipped, and recorded as skipped, when the power law fitted to the
sizes done so far (per activation) predicts that it would overrun the budget; the first few
sizes always run. The record (``figures/depth.atlas.json``) holds every row, the largest size
reached, the fit ``seconds ≈ a · P^k`` and the machine; ``absorbjax reproduce --only depth``
draws the atlas table and figure from it (``docs/results/depth.md``).

    python benchmarks/bench_atlas.py [--budget 900] [--max-d 16] [--out figures/depth.atlas.json]
    python benchmarks/bench_atlas.py --bias [--budget 240]      # figures/depth.atlas.bias.json
    python benchmarks/bench_atlas.py --check-record figures/depth.atlas.bias.json --check 8

``--bias`` certifies the same grid for stacks with biases (``docs/theory/depth.md`` §9: hidden and
output biases in both families; ``P_b = L(2nd + n + d)``, free bound ``P_b − (L−1)(d² + d)``). Its
record goes to its own file, so the bias-free atlas (drawn by ``experiments/depth.py``) is unchanged;
to compare the two in the same time budget, run both with the same ``--budget`` on the same machine.

Narrow widths (``n < d``) are decided by the Jacobian argument of ``docs/theory/depth.md`` §8 (method
``narrow_jacobian``), against free stacks of any depth. On the line (``d = 1``) only bias-free ReLU
with ``n ∈ {1, 2}`` is run: it is decided exactly (§10, method ``line``: ``n = 2`` always
``reproduced``, ``n = 1`` by ``f(1) f(−1)``); with ``--bias`` the line is left out (§10 is bias-free).
GELU on ``R`` is left out: its jets need orders near ``2P`` (the theorem covers ``d = 1`` anyway).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import _bench
import jax
import numpy as np

from absorbjax import dimension, io

ACTIVATIONS = ("gelu", "relu")
WIDTHS = (1, 2, 4)
NARROW = ("1", "d/2")  # widths below the input: n = 1 and n = ⌊d/2⌋ (when below d)
LINE_WIDTHS = (1, 2)  # d = 1, ReLU without biases
DEPTHS = (1, 2, 3, 4, 5, 6)
WARMUP = 6  # sizes per activation that always run (the fit needs them)


def widths(d: int) -> list[int]:
    """The widths of ``d``: ``d, 2d, 4d`` and the narrow ``1, ⌊d/2⌋`` below ``d``, without repeats."""
    return sorted({w * d for w in WIDTHS} | {n for n in (1, d // 2) if 1 <= n < d})


def grid(max_d: int, bias: bool = False) -> list[tuple[str, int, int, int]]:
    """Every ``(activation, d, n, L)`` of the atlas, by parameter count ``P = 2Lnd``; the line (``d = 1``,
    ReLU, ``n ∈ {1, 2}``) only without biases."""
    sizes = [(act, d, n, L) for act in ACTIVATIONS for d in range(2, max_d + 1) for n in widths(d) for L in DEPTHS]
    if not bias:
        sizes += [("relu", 1, n, L) for n in LINE_WIDTHS for L in DEPTHS]
    return sorted(sizes, key=lambda s: (dimension.param_count(*s[1:]), s))


def power_fit(params, seconds) -> tuple[float, float]:
    """Least-squares ``log s = log a + k log P`` over the rows given: ``(a, k)``."""
    P, s = np.log(np.asarray(params, float)), np.log(np.maximum(np.asarray(seconds, float), 1e-3))
    if P.size < 2 or np.ptp(P) == 0:
        return float(np.exp(s.mean())) if s.size else 0.0, 0.0
    k, loga = np.polyfit(P, s, 1)
    return float(np.exp(loga)), float(k)


def certify_row(act: str, d: int, n: int, L: int, key: jax.Array, bias: bool = False) -> dict:
    """One size at one point. ReLU's default ``2P/d`` inputs can miss the narrow linear regions of
    wide layers (``d = 2``, ``n = 8``: rank 42 < b = 44 with 64 inputs, 48 = the maximum with 256), so
    an undecided ReLU size is retried at the same point with 4× and then 16× the inputs."""
    cert = dimension.certify(act, d, n, L, key=key, bias=bias, probe=dimension.Probe(float_check=False))
    seconds = cert.seconds
    for more in (4, 16):
        if act != "relu" or cert.status != "undecided" or cert.rank >= cert.maximum or n < d or d == 1:
            break
        cert = dimension.certify(
            act, d, n, L, key=key, bias=bias, probe=dimension.Probe(float_check=False, inputs=more * cert.inputs)
        )
        seconds += cert.seconds
    return {
        "activation": act,
        "d": d,
        "n": n,
        "depth": L,
        "bias": bias,
        "params": cert.params,
        "status": cert.status,
        "method": cert.method,
        "rank": cert.rank,
        "free_bound": cert.free_bound,
        "maximum": cert.maximum,
        "order": cert.order,
        "inputs": cert.inputs,
        "seconds": round(seconds, 3),
    }


def run(budget: float, max_d: int, seed: int = 0, bias: bool = False) -> dict:
    """The atlas within ``budget`` seconds of wall time (this process; prefer ``nice``)."""
    key = jax.random.key(seed)
    start = time.perf_counter()
    rows, skipped = [], []
    for act, d, n, L in grid(max_d, bias):
        P = dimension.param_count(d, n, L, bias=bias)
        done = [r for r in rows if r["activation"] == act]
        a, k = power_fit([r["params"] for r in done], [r["seconds"] for r in done])
        predicted = a * P**k if len(done) >= WARMUP else 0.0
        left = budget - (time.perf_counter() - start)
        if predicted > left:
            skipped.append(
                {"activation": act, "d": d, "n": n, "depth": L, "params": P, "predicted_seconds": round(predicted, 1)}
            )
            continue
        k_size = jax.random.fold_in(jax.random.fold_in(key, ACTIVATIONS.index(act)), 10000 * d + 100 * n + L)
        rows.append(certify_row(act, d, n, L, k_size, bias))
        r = rows[-1]
        print(
            f"{act} ({d},{n},{L}) P={P}: {r['status']} rank {r['rank']} vs b {r['free_bound']} "
            f"(max {r['maximum']}) {r['seconds']} s",
            flush=True,
        )
    fits = {}
    for act in ACTIVATIONS:
        done = [r for r in rows if r["activation"] == act]
        a, k = power_fit(
            [r["params"] for r in done if r["params"] >= 64], [r["seconds"] for r in done if r["params"] >= 64]
        )
        largest = max(done, key=lambda r: (r["params"], r["seconds"]), default=None)
        fits[act] = {
            "a": a,
            "k": k,
            "sizes": len(done),
            "largest": largest,
            "skipped": sum(s["activation"] == act for s in skipped),
        }
    return {
        "budget_seconds": budget,
        "max_d": max_d,
        "seed": seed,
        "bias": bias,
        "widths": list(WIDTHS),
        "narrow_widths": list(NARROW),
        "line_widths": [] if bias else list(LINE_WIDTHS),
        "depths": list(DEPTHS),
        "seconds": round(time.perf_counter() - start, 1),
        "rows": rows,
        "skipped": skipped,
        "fits": fits,
        "machine": _bench.machine(),
        "environment": io.environment(),
    }


def spot_check(record: dict, count: int, seed: int = 0) -> list[dict]:
    """An independent check of ``count`` certified sizes drawn at random from the record: each is
    re-certified at the same point with the float64 SVD rank (the float blocks of ``models`` and
    ``jax.jacfwd``, not the modular code) beside the exact one; ``agree`` when the two ranks match."""
    certified = [r for r in record["rows"] if r["status"] == "certified_disjoint" and r["method"] == "rank"]
    rng = np.random.default_rng([seed, 49])
    picks = rng.choice(len(certified), size=min(count, len(certified)), replace=False) if certified else []
    key = jax.random.key(record["seed"])
    out = []
    for i in sorted(int(i) for i in picks):
        r = certified[i]
        act, d, n, L = r["activation"], r["d"], r["n"], r["depth"]
        k_size = jax.random.fold_in(jax.random.fold_in(key, ACTIVATIONS.index(act)), 10000 * d + 100 * n + L)
        with jax.enable_x64(True):
            cert = dimension.certify(
                act, d, n, L, key=k_size, bias=record.get("bias", False), probe=dimension.Probe(inputs=r["inputs"])
            )
        out.append(
            {
                **{k: r[k] for k in ("activation", "d", "n", "depth", "params")},
                "exact_rank": cert.rank,
                "float_rank": cert.float_rank,
                "float_gap": cert.float_gap,
                "agree": cert.float_rank == cert.rank == r["rank"],
            }
        )
        print(f"check {act} ({d},{n},{L}): exact {cert.rank}, float {cert.float_rank} (gap {cert.float_gap:.3g})")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=900.0, help="wall-clock seconds (default 900)")
    ap.add_argument("--max-d", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check", type=int, default=0, help="re-certify this many random sizes with the float rank")
    ap.add_argument("--bias", action="store_true", help="stacks with biases (docs/theory/depth.md §9)")
    ap.add_argument("--out", default=None, help="default figures/depth.atlas.json (.bias.json with --bias)")
    ap.add_argument("--check-record", default=None, help="only spot-check this record (with --check) and rewrite it")
    args = ap.parse_args(argv)
    if args.check_record:
        record = json.loads(Path(args.check_record).read_text())
        record["spot_checks"] = spot_check(record, args.check, args.seed)
        Path(args.check_record).write_text(json.dumps(io.to_jsonable(record), indent=1) + "\n")
        agree = sum(c["agree"] for c in record["spot_checks"])
        print(f"{agree} of {len(record['spot_checks'])} spot checks agree")
        return 0
    args.out = args.out or ("figures/depth.atlas.bias.json" if args.bias else "figures/depth.atlas.json")
    record = run(args.budget, args.max_d, args.seed, args.bias)
    record["spot_checks"] = spot_check(record, args.check, args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(io.to_jsonable(record), indent=1) + "\n")
    for act, f in record["fits"].items():
        big = f["largest"]
        print(
            f"{act}: {f['sizes']} sizes, {f['skipped']} skipped; seconds ≈ {f['a']:.3g} · P^{f['k']:.2f}; largest "
            f"(d,n,L) = ({big['d']},{big['n']},{big['depth']}), P = {big['params']}, {big['seconds']} s"
        )
    print(record["machine"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
