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


def _check(args) -> int:
    from absorbjax import activations, condition, weightfile

    try:
        params, name = weightfile.load_block(args.file, args.activation)
        skip = weightfile.load_skip(args.skip) if args.skip else None
        act = activations.get(name)
        if act.family == "ungated":
            cert = condition.find_absorbing_set(params, skip=skip, activation=name)
            record, text = cert.to_dict(), str(cert)
        else:  # Prop 5 / Prop 6 decide these without looking at the weights
            status = "not_absorbable" if act.never_absorbs else "undecided"
            record = {"status": status, "activation": name, "reason": act.result}
            text = f"{status}  [{act.result}]"
    except ValueError as err:
        print(f"absorbjax check: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"file": args.file, **record}, indent=2))
    else:
        print(f"{args.file} ({name}): {text}")
    return 0


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

    chk = sub.add_parser("check", help="decide the absorption condition for weights in a file")
    chk.add_argument("file", help=".npz or .safetensors with up/down (or gate/value/down), PyTorch layout")
    chk.add_argument("--activation", default=None, help="activation name (default: relu / swiglu by keys)")
    chk.add_argument("--skip", default=None, help=".npz holding the skip matrix A (d, d)")
    chk.add_argument("--json", action="store_true", help="print the certificate as JSON")
    chk.set_defaults(func=_check)

    info = sub.add_parser("info", help="versions, devices and the activation registry")
    info.set_defaults(func=_info)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
