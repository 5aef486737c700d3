"""How far a block is from absorbing: certified lower and attained upper bounds."""

from __future__ import annotations

import numpy as np

from absorbjax.condition import large
from absorbjax.condition.certificate import Distance
from absorbjax.condition.decide import _bias, _decide
from absorbjax.condition.inputs import _check_activation, _mask, _miss, _skip, _weights
from absorbjax.condition.integer import _closest, _local_search
from absorbjax.condition.relax import _box
from absorbjax.models import MLPParams


def distance(
    params: MLPParams,
    *,
    skip=None,
    rtol: float | None = None,
    time_limit: float = 10.0,
    bias=None,
    activation: str | None = None,
) -> Distance:
    """Place a block between "exactly absorbable" (0) and "as far as the zero map" (1).

    All numbers are ``‖Σ m_i M_i + A‖_F / ‖A‖_F`` (``‖A‖_F = √d`` for ``A = I``):

    * ``lower``: certified, no ``S`` gets closer; the larger of the real relaxation's bound
      (``relaxation``, see :func:`find_absorbing_set`; 0 once ``n ≥ d²`` generically) and the
      box relaxation over ``c ∈ [0,1]^n`` (``box``, projected Newton and its Frank–Wolfe gap,
      see :func:`relax._box`; 0 when an absorbing set exists).
    * ``upper``, attained by ``S``: an absorbing set when the decision finds one, the exact
      minimum for ``n ≤ 16``, else the best local search (single-unit flips) started from ``∅``
      and from thresholds of the real and the box relaxations' solutions.

    ``time_limit`` bounds the MILP of the decision; ``bias`` (the hidden bias ``(n,)``) only changes
    the certificate's status (see :func:`find_absorbing_set`), not the distance; so does
    ``activation`` (a name: "no S" proves non-absorbability for relu and gelu only).
    """
    act = _check_activation(activation)
    U, D, dtype = _weights(params, batched=False)
    n, d = U.shape
    A = _skip(skip, d)
    cert, rel = _decide(U, D, A, dtype, rtol=rtol, method="auto", time_limit=time_limit,
                        activation=act, skip_kind="identity" if skip is None else "matrix",
                        bias=_bias(bias, n))
    if rel is None:  # decided by the O(n d²) screen of condition.large
        return large.distance_bounds(U, D, A, cert)
    norm_a = float(np.linalg.norm(A))
    if cert.S is None:
        box, c_box = _box(U, D, A, rel)
        box /= norm_a
    else:  # the absorbing set attains 0 (to tol); no bound above 0 to certify
        box = 0.0
    if cert.S is not None:
        m, how = _mask(cert.S, n), "exact"
    elif n <= 16:
        m, how = _closest(rel), "exhaustive"
    else:
        starts = [np.zeros(n, bool)] + [c > t for c in (rel.c, c_box) for t in (0.25, 0.5, 0.75)]
        cands = [_local_search(rel.G, rel.b, s, 10 * n) for s in starts]
        # choose on the Gram form (f(m) = mᵀGm − 2bᵀm + ‖A‖_F²); the chosen one is evaluated exactly
        m, how = min(cands, key=lambda k: float(k @ rel.G @ k) - 2 * float(rel.b @ k)), "local"
    upper = float(np.linalg.norm(_miss(U, D, A, m))) / norm_a
    return Distance(max(rel.lower / norm_a, box), upper, np.flatnonzero(m), how,
                    rel.lower / norm_a, box, cert)
