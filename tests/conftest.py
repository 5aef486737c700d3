"""Float64 where a test makes an exactness claim, JAX's default (float32) elsewhere.

Tests marked ``x64`` (a module marks all its tests with ``pytestmark = pytest.mark.x64``) run
inside ``jax.enable_x64(True)``; the rest run as a user's session would, so the library is
exercised in float32 too. absorbjax itself never switches float64 on.
"""

import os

# Several pytest-xdist workers share the machine: none may preallocate most of an accelerator's
# memory, and on the CPU each worker computes on one thread (the workers are the parallelism).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    flags = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip()

import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _float64_where_marked(request):
    if request.node.get_closest_marker("x64"):
        with jax.enable_x64(True):
            yield
    else:
        yield
