"""ruff: the lint rules and the formatter configured in pyproject.toml."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Files that fail `ruff check` today; the owner of each cleans it, then it leaves this list.
NOT_YET_LINTED = [
    "absorbjax/condition/__init__.py",
    "absorbjax/condition/width.py",
    "absorbjax/weights/model.py",
    "tests/test_soundness.py",
    "tests/test_weights.py",
]

# `ruff format` is applied to these so far; the rest of the tree follows in one change.
FORMATTED = [
    "absorbjax/__init__.py",
    "absorbjax/results.py",
    "absorbjax/fit/merge.py",
    "absorbjax/fit/convert.py",
    "absorbjax/fit/expand.py",
    "docs/gen_pages.py",
    "tests/test_docs.py",
    "tests/test_style.py",
]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check():
    proc = ruff("check", "--no-cache", ".", "--extend-exclude", ",".join(NOT_YET_LINTED))
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_ruff_format():
    proc = ruff("format", "--no-cache", "--check", *FORMATTED)
    assert proc.returncode == 0, proc.stdout[-4000:]
