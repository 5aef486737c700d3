"""The suite's own instruments."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # the suite's own instruments, in child pytest runs

ROOT = Path(__file__).resolve().parents[1]


def test_compile_report_lists_the_costliest_tests():
    """``pytest --compile-report N`` ends with the seconds summed over the tests, split into
    tracing, lowering and compiling, the N costliest programs (seconds, times, name) and the N
    costliest tests, the test with a positive number of seconds. The run gets its own empty
    compilation cache: loading from this session's cache can take under the 0.05 s printed as 0.0."""
    test = "tests/test_activations.py::test_gelu_is_exact_and_gelu_tanh_differs"
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "--compile-report", "1", test],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    section = proc.stdout.split("XLA compilation", 1)[1]
    total = re.search(
        r"([0-9.]+) s of the tests' [0-9.]+ s \(\d+%\) went to obtaining XLA executables: "
        r"([0-9.]+) s tracing, ([0-9.]+) s lowering, ([0-9.]+) s compiling",
        section,
    )
    # four numbers printed to 0.1 s: the stages' sum is within 4 × 0.05 s of the total (and its float)
    assert total and abs(float(total[1]) - sum(float(total[i]) for i in (2, 3, 4))) <= 0.2 + 1e-9, section
    program = re.search(r"^\s*([0-9.]+) s\s+(\d+) x  (jit\(\S+\))$", section, re.M)
    assert program and int(program[2]) >= 1, section  # its seconds may print as 0.0 (a small program)
    assert re.search(r"programs under 0\.5 s a time .*: \d+ times, [0-9.]+ s$", section, re.M), section
    seconds = re.search(r"^\s*([0-9.]+) s of\s+[0-9.]+ s  (\S+)$", section, re.M)
    assert seconds and seconds.group(2) == test and float(seconds.group(1)) > 0


def test_the_suite_dispatches_inline_on_the_cpu():
    """tests/conftest.py turns asynchronous CPU dispatch off in the suite's processes (a stalled
    XLA runtime would hold CI until its limit) before any computation, so it is in effect."""
    import jax

    assert jax.config.values["jax_cpu_enable_async_dispatch"] is False
