"""Float64 where a test makes an exactness claim, JAX's default (float32) elsewhere.

Tests marked ``x64`` (a module marks all its tests with ``pytestmark = pytest.mark.x64``) run
inside ``jax.enable_x64(True)``; the rest run as a user's session would, so the library is
exercised in float32 too. absorbjax itself never switches float64 on.
"""

import jax
import pytest


@pytest.fixture(autouse=True)
def _float64_where_marked(request):
    if request.node.get_closest_marker("x64"):
        with jax.enable_x64(True):
            yield
    else:
        yield
