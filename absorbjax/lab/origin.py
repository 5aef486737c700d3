"""Props 5 and 6 seen through a search: residual-free fits of residual blocks near the origin.

No residual-free homogeneous (degree ≠ 1) or gated (``g(0) = 0``) block reproduces the residual
block near the origin (Prop 5, Prop 6), so the best relative error a search reaches there stays of
order 1: :func:`origin_searches` runs the searches, :func:`near_origin_error` reads the gap, and
:func:`absorbjax.lab.plotting.plot_profiles` draws it.
"""

from __future__ import annotations

import jax
import numpy as np

from absorbjax import fit, models
from absorbjax.io import subkey

__all__ = ["origin_searches", "near_origin_error"]


def origin_searches(
    names, d: int, n: int, *, key: jax.Array, draws: int, restarts: int, steps: int, polish: bool
) -> dict:
    """:func:`absorbjax.fit.search` for residual-free blocks that reproduce Gaussian residual blocks.

    For activation ``names[i]``: ``draws`` targets ``models.sample(name, d, n, key=subkey(key, i,
    0), draws=draws)``, searched with key ``subkey(key, i, 1)``. Returns ``{name: SearchResult}``;
    read the near-origin gap with :func:`near_origin_error` and draw it with
    :func:`absorbjax.lab.plotting.plot_profiles`.

    References:
      Prop 5 and Prop 6: no residual-free homogeneous (degree ≠ 1) or gated (``g(0) = 0``)
      block reproduces the residual block near the origin, so the best relative error there
      stays of order 1.
    """
    return {
        name: fit.search(
            models.sample(name, d, n, key=subkey(key, i, 0), draws=draws),
            name,
            key=subkey(key, i, 1),
            solver=fit.Solver(restarts=restarts, steps=steps, polish=polish, method="adam"),
            run=fit.Run(progress=False),
        )
        for i, name in enumerate(names)
    }


def near_origin_error(result) -> float:
    """Smallest relative error over draws in the innermost radius decade of a search:
    ``min_draws √profile[:, 0]`` of an :class:`absorbjax.fit.SearchResult`."""
    return float(np.sqrt(np.asarray(result.profile)[:, 0]).min())
