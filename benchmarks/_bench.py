"""What the benchmark scripts share: the wall-clock timer and the line that names the machine.

Not a benchmark itself: the scripts import it as ``_bench``, a module beside them (``python
benchmarks/bench_X.py`` puts ``benchmarks/`` first on ``sys.path``).
"""

import time

import numpy as np

from absorbjax import io


def timed(fn, repeat: int = 1):
    """Best wall time of ``repeat`` calls of ``fn`` (which must block until its result is
    ready) and the output of that call: ``(seconds, output)``."""
    if repeat < 1:
        raise ValueError(f"repeat must be a positive integer, got {repeat!r}")
    best, out = np.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        took = time.perf_counter() - start
        if took < best:
            best, out = took, result
    return best, out


def machine() -> str:
    """``device: …`` with the processor, the cores this process may use and the versions, from
    :func:`absorbjax.io.environment` (what every record stores)."""
    env = io.environment()
    return (
        f"device: {env['devices'][0]} ({env['cpu']}, {env['cores']} cores available), "
        f"numpy {env['numpy']}, scipy {env['scipy']}, jax {env['jax']}"
    )
