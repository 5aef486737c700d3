"""Benchmark: this tree's test suite against another revision's, one after the other in one run.

Each suite runs as the README's test line runs it (``pytest`` with the project's options: one
worker per core, the doctests), with ``--durations=0`` added so that every test's seconds are
read. The other revision is checked out into a temporary git worktree and imported from there
(``PYTHONPATH``) in this same Python environment, so both suites see the same packages; the two
revisions must declare the same dependencies (refused otherwise). The record holds, per tree, the
wall seconds, pytest's seconds, the tests passed, failed and skipped and the tests' summed seconds;
per test file, the summed seconds in both trees, largest change first; and the ratios (wall
seconds, seconds a test); and the ``XLA_FLAGS`` it was started with, which reach both suites
(each tree's ``tests/conftest.py`` may add flags of its own). What the numbers showed, and why, is
in the research log.

    python benchmarks/bench_suite.py --against REV [--this-first] [--rounds R] [--out docs/benchmarks/records/suite.json] [-- PYTEST_ARGS]

It takes two full suites a round (about 20 minutes on the 2-core machine): run it with the machine
quiet. The machine's speed drifts by more than a suite's change (the same revision's suite took 470
and 556 s in two runs a day apart), so ``--rounds R`` runs the pair ``R`` times, in alternating order
(other–this, this–other, …, so that a drift within the run weighs on both alike), and the ratio is of
the summed wall seconds; each round's ratio is recorded beside it, the first round's details as before.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import _bench

from absorbjax import io

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
_DURATION = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+(\S+)", re.M)
_SUMMARY = re.compile(r"^=*\s*(.*?) in ([\d.]+)s", re.M)
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)  # -ra's short summary lines
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def parse(output: str) -> dict:
    """pytest's output with ``--durations=0`` as ``{pytest_seconds, counts, tests, failures}``: ``tests``
    maps each test's node id to its seconds (setup, call and teardown summed; pytest hides those
    under 5 ms); ``failures`` lists the tests that failed or errored (the ``-ra`` summary)."""
    tests: dict[str, float] = defaultdict(float)
    for seconds, nodeid in _DURATION.findall(output):
        tests[nodeid] += float(seconds)
    summaries = _SUMMARY.findall(output)
    if not summaries:
        raise ValueError("no pytest summary line (… passed in N s) in the output")
    counts_text, seconds = summaries[-1]
    counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in _COUNT.findall(counts_text)}
    failures = sorted(set(_FAILED.findall(output)))
    return {"pytest_seconds": float(seconds), "counts": counts, "tests": dict(tests), "failures": failures}


def by_file(tests: dict[str, float]) -> dict[str, float]:
    """Seconds summed per test file (the part of the node id before ``::``)."""
    out: dict[str, float] = defaultdict(float)
    for nodeid, seconds in tests.items():
        out[nodeid.split("::")[0]] += seconds
    return dict(out)


def compare(this: dict, other: dict, top: int = 25) -> list[dict]:
    """Per test file, both trees' seconds and the change, the ``top`` largest changes first."""
    a, b = by_file(this["tests"]), by_file(other["tests"])
    rows = [
        {
            "file": f,
            "against_seconds": b.get(f, 0.0),
            "this_seconds": a.get(f, 0.0),
            "change": a.get(f, 0.0) - b.get(f, 0.0),
        }
        for f in set(a) | set(b)
    ]
    return sorted(rows, key=lambda r: -abs(r["change"]))[:top]


def dependencies(tree: Path) -> dict:
    project = tomllib.loads((tree / "pyproject.toml").read_text())["project"]
    return {"dependencies": project.get("dependencies", []), "optional": project.get("optional-dependencies", {})}


def run_suite(tree: Path, pytest_args: list[str]) -> dict:
    """The suite of ``tree`` (its package first on the path), timed and parsed."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    where = subprocess.run(
        [sys.executable, "-c", "import absorbjax; print(absorbjax.__file__)"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if where.returncode or not Path(where.stdout.strip()).is_relative_to(tree):
        raise RuntimeError(
            f"{tree}: absorbjax is imported from {where.stdout.strip() or where.stderr[-300:]}, not the tree"
        )
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", *pytest_args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    out = parse(proc.stdout)
    git = lambda *a: subprocess.run(["git", *a], cwd=tree, capture_output=True, text=True).stdout.strip()  # noqa: E731
    commit, dirty = git("rev-parse", "HEAD"), bool(git("status", "--porcelain", "--untracked-files=no"))
    return {
        "tree": str(tree),
        "commit": commit,
        "dirty": dirty,
        "returncode": proc.returncode,
        "wall_seconds": wall,
        **out,
    }


def summary(run: dict) -> dict:
    tests = run["tests"]
    ran = sum(run["counts"].get(k, 0) for k in ("passed", "failed", "error"))
    return {
        "commit": run["commit"][:12],
        "dirty": run["dirty"],
        "returncode": run["returncode"],
        "wall_seconds": run["wall_seconds"],
        "pytest_seconds": run["pytest_seconds"],
        **{k: run["counts"].get(k, 0) for k in ("passed", "failed", "skipped", "error")},
        "test_seconds": sum(tests.values()),
        "seconds_a_test": sum(tests.values()) / max(ran, 1),
        "failures": run["failures"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="the other revision (a commit, tag or branch of this repository)")
    ap.add_argument("--this-first", action="store_true", help="run this tree's suite first (default: the other's)")
    ap.add_argument("--rounds", type=int, default=1, help="pairs of suites, in alternating order (default 1)")
    ap.add_argument("--top", type=int, default=25, help="test files listed, largest change first (default 25)")
    ap.add_argument("--out", default=None, help="write a JSON record here")
    ap.add_argument("pytest_args", nargs="*", help="after --: passed to both pytest runs")
    args = ap.parse_args(argv)
    print(_bench.machine(), flush=True)
    with tempfile.TemporaryDirectory(prefix="absorbjax-suite-") as tmp:
        other = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(other), args.against], cwd=ROOT, check=True)
        try:
            if dependencies(other) != dependencies(ROOT):
                raise SystemExit(
                    f"{args.against} declares other dependencies than this tree: one environment cannot run both"
                )
            order = [("this", ROOT), ("against", other)]
            order = order if args.this_first else order[::-1]
            rounds = []
            for r in range(max(1, args.rounds)):
                runs = {}
                for name, tree in order if r % 2 == 0 else order[::-1]:
                    print(f"{name}: pytest in {tree} …", flush=True)
                    runs[name] = run_suite(tree, args.pytest_args)
                    s = summary(runs[name])
                    print(
                        f"  {s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped in {s['wall_seconds']:.1f} s",
                        flush=True,
                    )
                    for nodeid in s["failures"]:
                        print(f"  failed: {nodeid}", flush=True)
                rounds.append(runs)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, check=False)
    runs = rounds[0]
    this, against = summary(runs["this"]), summary(runs["against"])
    walls = [{k: rnd[k]["wall_seconds"] for k in ("this", "against")} for rnd in rounds]
    per_round = [
        {"round": i, "first": next(iter(rnd)), **{f"{k}_seconds": w[k] for k in w}, "wall": w["this"] / w["against"]}
        | {f"{k}_failures": rnd[k]["failures"] for k in w}
        for i, (rnd, w) in enumerate(zip(rounds, walls))
    ]
    ratio = {
        "wall": sum(w["this"] for w in walls) / sum(w["against"] for w in walls),
        "tests": (this["passed"] + this["failed"]) / max(against["passed"] + against["failed"], 1),
        "seconds_a_test": this["seconds_a_test"] / against["seconds_a_test"],
    }
    files = compare(runs["this"], runs["against"], args.top)
    for r in per_round:
        print(
            f"round {r['round']} ({r['first']} first): {r['this_seconds']:.1f} s against {r['against_seconds']:.1f} s"
        )
    print(
        f"wall {sum(w['this'] for w in walls):.1f} s against {sum(w['against'] for w in walls):.1f} s"
        f"{f' over {len(walls)} rounds' if len(walls) > 1 else ''}: {ratio['wall']:.2f} times the time "
        f"for {ratio['tests']:.2f} times the tests ({ratio['seconds_a_test']:.2f} times the seconds a test, round 0)"
    )
    for r in files:
        print(f"  {r['against_seconds']:7.1f} → {r['this_seconds']:7.1f} s ({r['change']:+7.1f})  {r['file']}")
    if args.out:
        # XLA_FLAGS set by the caller reach both suites (each tree's conftest may add its own)
        flags = os.environ.get("XLA_FLAGS")
        config = {
            "command": " ".join(
                [*([f"XLA_FLAGS='{flags}'"] if flags else []), "python benchmarks/bench_suite.py"]
                + list(sys.argv[1:] if argv is None else argv)
            ),
            "xla_flags": flags,
            "against": args.against,
            "this_first": args.this_first,
            "rounds": len(rounds),
        }
        trees = [{"tree": "this", **this}, {"tree": "against", **against}]
        results = {"trees": trees, "ratio": ratio, "rounds": per_round, "files": files}
        io.save_record(args.out, name="bench_suite", seed=None, config=config, results=results)
    return 1 if any(run["returncode"] for rnd in rounds for run in rnd.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
