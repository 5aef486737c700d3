"""Float64 where a test makes an exactness claim, JAX's default (float32) elsewhere.

Tests marked ``x64`` (a module marks all its tests with ``pytestmark = pytest.mark.x64``) run
inside ``jax.enable_x64(True)``; the rest run as a user's session would, so the library is
exercised in float32 too. absorbjax itself never switches float64 on.
"""

import os

# Several pytest-xdist workers share one accelerator: none may preallocate most of its memory.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _float64_where_marked(request):
    if request.node.get_closest_marker("x64"):
        with jax.enable_x64(True):
            yield
    else:
        yield
