"""Float64 where a test makes an exactness claim, JAX's default (float32) elsewhere.

Tests marked ``x64`` (a module marks all its tests with ``pytestmark = pytest.mark.x64``) run
inside ``jax.enable_x64(True)``; the rest run as a user's session would, so the library is
exercised in float32 too. absorbjax itself never switches float64 on.
"""

import os
import shutil
import tempfile

# Several pytest-xdist workers share one accelerator: none may preallocate most of its memory.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# Many tests compile the same XLA programs (searches of one size, the smoke experiments, the
# subprocesses of the benchmark and notebook tests): one persistent compilation cache per test
# session, made by the first process (the xdist controller) and inherited by workers and
# subprocesses, compiles each once. A cache dir set by the caller is used as is and kept.
_OWN_CACHE = None
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _OWN_CACHE = os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="absorbjax-xla-cache-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _float64_where_marked(request):
    if request.node.get_closest_marker("x64"):
        with jax.enable_x64(True):
            yield
    else:
        yield


def pytest_unconfigure(config):
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)
