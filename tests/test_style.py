"""ruff: the lint rules and the formatter configured in pyproject.toml."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # ruff

ROOT = Path(__file__).resolve().parents[1]


def ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check():
    proc = ruff("check", "--no-cache", ".")
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_ruff_format():
    proc = ruff("format", "--no-cache", "--check", ".")
    assert proc.returncode == 0, proc.stdout[-4000:]
