"""Every snippet runs as written: the README's Python blocks in order in one interpreter, and so
do the blocks of each guide and of the docs' home page (each file on its own, in a fresh
interpreter in an empty folder: a snippet creates what it reads).

Each file runs in a subprocess (the snippets turn float64 on, which this process must not) with
the checkout first on ``sys.path``.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # every README and guide snippet

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", ROOT / "docs" / "index.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]


def python_blocks(path: Path) -> list[str]:
    """The ```` ```python ```` blocks of a markdown file, in order."""
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_every_guide_and_the_readme_have_snippets():
    assert len(python_blocks(ROOT / "README.md")) >= 6
    assert sum(bool(python_blocks(p)) for p in FILES) >= 8


@pytest.mark.parametrize("path", [p for p in FILES if python_blocks(p)], ids=lambda p: str(p.relative_to(ROOT)))
def test_snippets_run_in_order(path, tmp_path):
    code = "\n".join(python_blocks(path))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{path.name}: {proc.stderr[-3000:]}"
    assert time.perf_counter() - start < 300, "keep the snippets quick"
