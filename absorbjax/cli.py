"""The ``absorbjax`` command: ``reproduce``, ``check``, ``info``."""

from __future__ import annotations

import argparse
import json
import sys
import time


def _reproduce(args) -> int:
    from absorbjax import reproduce  # runs each experiment with float64 enabled for that run

    try:
        everything = reproduce.discover(args.experiments)
    except reproduce.NoExperiments as err:
        print(f"absorbjax reproduce: {err}", file=sys.stderr)
        return 2
    modules = everything
    if args.only:
        unknown = sorted(set(args.only) - set(everything))
        if unknown:
            print(f"absorbjax reproduce: unknown experiment(s) {', '.join(unknown)}; "
                  f"known: {', '.join(everything)}", file=sys.stderr)
            return 2
        modules = {k: v for k, v in everything.items() if k in args.only}
    total, failed = time.perf_counter(), []
    for i, (name, module) in enumerate(modules.items(), 1):
        print(f"[{i}/{len(modules)}] {name}: {module.TITLE}", flush=True)
        if not args.force and reproduce.finished(module, args.out, preset=args.preset, seed=args.seed):
            print("    up to date, skipped (--force recomputes)", flush=True)
        start = time.perf_counter()
        record = reproduce.run_experiment(module, args.out, preset=args.preset, seed=args.seed, force=args.force)
        print(f"    done ({time.perf_counter() - start:.1f} s)", flush=True)
        for row in record["results"].get("claims", []):
            print(f"    - [{reproduce.verdict(row)}] {row['claim']}: {row['measured']}", flush=True)
            if row.get("holds") is False:
                failed.append(f"{name}: {row['claim']}")
    path = reproduce.write_summary(args.out, everything)
    print(f"summary: {path} ({time.perf_counter() - total:.1f} s in all)")
    if failed:
        print(f"absorbjax reproduce: {len(failed)} claim(s) NOT HELD: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


def _decide(block, skip, time_limit: float) -> dict:
    """One row of ``check``: the decision and the distance bounds for one read block."""
    import numpy as np

    from absorbjax import activations, condition

    act = activations.get(block.activation)
    hidden = [b for role, b in block.biases.items() if role != "down"]
    biased = any(np.any(b != 0) for b in hidden)
    row = {"status": None, "method": None, "reason": None, "lower": None, "upper": None,
           "S_size": None, "S": None, "within_rounding": None, "hidden_bias": biased, "output_bias": "down" in block.biases}
    start = time.perf_counter()
    if act.never_absorbs and not biased:  # Prop 5 / Prop 6: no weights needed
        row.update(status="not_absorbable", method="theorem", reason=act.result)
    elif act.family != "ungated":
        row.update(status="undecided", method="theorem",
                   reason=("Prop 5/6 are proved for bias-free blocks; this block has hidden biases"
                           if act.never_absorbs else act.result))
    else:
        bias = hidden[0] if hidden else None
        dist = condition.distance(block.params, skip=skip, bias=bias, activation=act.name,
                                  time_limit=time_limit)
        cert = dist.certificate
        row.update(status=cert.status, method=cert.method, reason=cert.reason, lower=dist.lower,
                   upper=dist.upper, S_size=int(dist.S.size), S=dist.S.tolist(),
                   within_rounding=cert.within_rounding, certificate=cert.to_dict())
    row["seconds"] = time.perf_counter() - start
    return row


def _row(model, block, skip, time_limit: float) -> dict:
    """:func:`_decide`, with any complaint (a skip of the wrong size, a bad time limit) naming the file."""
    try:
        return _decide(block, skip, time_limit)
    except ValueError as err:
        raise ValueError(f"{model}: layer {block.layer}: {err}") from None


def _check(args) -> int:
    from tqdm.auto import tqdm

    from absorbjax import weights

    rows = []
    try:
        found = weights.blocks(args.model, args.activation, transpose=args.transpose,
                               allow_narrow=args.allow_narrow)
        if args.layer:
            bad = sorted(set(args.layer) - set(range(len(found))))
            if bad:
                raise ValueError(f"{args.model}: no layer {bad[0]}; the file holds layers 0–{len(found) - 1} "
                                 "(choose with --layer)")
            found = [b for b in found if b.layer in set(args.layer)]
        skip = weights.load_skip(args.skip) if args.skip else None
        for block in tqdm(found, desc="check", unit="layer", file=sys.stderr, disable=None):
            hidden_bias = any(k.endswith("_bias") and k != "down_bias" for k in block.tensors)
            if not block.gated or hidden_bias:  # bias-free gated blocks are decided without weights
                block = block.load()
            rows.append({"layer": block.layer, "name": block.name, "convention": block.convention,
                         "d": block.d, "n": block.n, "activation": block.activation,
                         "activation_source": block.activation_source, "dtype": block.dtype,
                         **_row(args.model, block, skip, args.time_limit)})
    except ValueError as err:
        print(f"absorbjax check: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"file": args.model, "blocks": rows}, indent=2))
        return 0
    print(f"{args.model}: {len(rows)} MLP block(s)")
    head = ("layer", "d", "n", "activation (source)", "dtype", "status", "method", "lower", "upper", "|S|", "s")
    table = [[str(r["layer"]), str(r["d"]), str(r["n"]), f"{r['activation']} ({r['activation_source']})",
              r["dtype"], r["status"], r["method"], _num(r["lower"]), _num(r["upper"]),
              "-" if r["S_size"] is None else str(r["S_size"]), f"{r['seconds']:.2f}"] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *table)]
    for line in (head, *table):
        print("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip())
    by_status: dict[str, list[dict]] = {}
    for r in rows:
        by_status.setdefault(r["status"], []).append(r)
    for status, group in by_status.items():  # one reason per status; every reason is in --json
        layers = _ranges([r["layer"] for r in group])
        print(f"  {status} (layer {layers}): {group[0]['reason']}" + (" (layer " + str(group[0]["layer"])
              + "; the others alike, see --json)" if len(group) > 1 else ""))
    for r in rows:
        if r.get("within_rounding") == "yes" and r["status"] != "absorbable":
            print(f"  layer {r['layer']}: absorbable within {r['dtype']} storage rounding "
                  f"({r['certificate']['rounding_reason']})")
    if any(r["output_bias"] for r in rows):
        print("  output biases (d,) pass unchanged through both blocks and do not enter the decision")
    if any(r["hidden_bias"] for r in rows):
        print("  hidden biases: an S still gives an absorber; without one the converse is not proved (undecided)")
    if any(r["lower"] is not None for r in rows):
        print("  lower/upper: certified lower bound and attained upper bound on "
              "min_S ‖W_down[:,S] W_up[S,:] + A‖_F / ‖A‖_F (A = I without --skip); |S|: size of the best S found")
    return 0


def _ranges(layers: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0–2, 5"``."""
    parts, start = [], None
    for i, k in enumerate(layers):
        if start is None:
            start = k
        if i + 1 == len(layers) or layers[i + 1] != k + 1:
            parts.append(str(k) if k == start else f"{start}–{k}")
            start = None
    return ", ".join(parts)


def _num(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def _info(args) -> int:
    import jax

    import absorbjax
    from absorbjax import activations

    print(f"absorbjax {absorbjax.__version__}, jax {jax.__version__}, backend {jax.default_backend()}, "
          f"devices {jax.devices()}")
    print(f"{'activation':<10} {'family':<12} {'odd part z/2':<13} result")
    for name in activations.names():
        a = activations.get(name)
        print(f"{name:<10} {a.family:<12} {str(a.odd_part_half):<13} {a.result}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="absorbjax", description="Can an MLP absorb its own skip connection?")
    sub = parser.add_subparsers(dest="command", required=True)

    rep = sub.add_parser("reproduce", help="run every experiment and regenerate the figures")
    rep.add_argument("--preset", choices=("smoke", "quick", "full"), default="quick")
    rep.add_argument("--only", nargs="+", metavar="NAME", help="run only these experiments")
    rep.add_argument("--out", default="figures", help="output folder (default: figures)")
    rep.add_argument("--seed", type=int, default=0)
    rep.add_argument("--force", action="store_true", help="recompute finished experiments")
    rep.add_argument("--experiments", default=None, help="folder of experiment scripts")
    rep.set_defaults(func=_reproduce)

    chk = sub.add_parser("check", help="decide the absorption condition for every MLP block of a checkpoint")
    chk.add_argument("model", help=".safetensors, .npz or .gguf: BERT/ViT, GPT-2, LLaMA, OPT/Whisper, GGUF or "
                                   "plain up/down (gate/value/down) names")
    chk.add_argument("--activation", default=None,
                     help="activation name (default: from config.json beside the file, GGUF metadata or the file)")
    chk.add_argument("--layer", type=int, action="append", metavar="N", help="check only layer N (repeatable)")
    chk.add_argument("--skip", default=None, help="file holding the skip matrix A (d, d)")
    chk.add_argument("--transpose", action="store_true", help="matrices are stored (in, out) (Flax/JAX layout)")
    chk.add_argument("--allow-narrow", action="store_true", help="accept width n < d")
    chk.add_argument("--time-limit", type=float, default=60.0, help="seconds for a MILP, per layer (default 60)")
    chk.add_argument("--json", action="store_true", help="print every field as JSON")
    chk.set_defaults(func=_check)

    info = sub.add_parser("info", help="versions, devices and the activation registry")
    info.set_defaults(func=_info)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
