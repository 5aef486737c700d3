"""How far a block is from absorbing: certified lower and attained upper bounds."""

from __future__ import annotations

import numpy as np

from absorbjax.condition.certificate import Distance
from absorbjax.condition.decide import _bias, _decide
from absorbjax.condition.inputs import _mask, _miss, _skip, _weights
from absorbjax.condition.integer import _closest, _local_search
from absorbjax.condition.relax import _box_lower
from absorbjax.models import MLPParams


def distance(
    params: MLPParams,
    *,
    skip=None,
    rtol: float | None = None,
    time_limit: float = 10.0,
    bias=None,
) -> Distance:
    """Place a block between "exactly absorbable" (0) and "as far as the zero map" (1).

    All numbers are ``‖Σ m_i M_i + A‖_F / ‖A‖_F`` (``‖A‖_F = √d`` for ``A = I``):

    * ``lower``: certified, no ``S`` gets closer; the larger of the real relaxation's bound
      (``relaxation``, see :func:`find_absorbing_set`; 0 once ``n ≥ d²`` generically) and the
      box relaxation over ``c ∈ [0,1]^n`` (``box``, projected gradient and its Frank–Wolfe gap).
    * ``upper``, attained by ``S``: an absorbing set when the decision finds one, the exact
      minimum for ``n ≤ 16``, else the best local search (single-unit flips) started from ``∅``
      and from thresholds of the relaxed solution.

    ``time_limit`` bounds the MILP of the decision; ``bias`` (the hidden bias ``(n,)``) only changes
    the certificate's status (see :func:`find_absorbing_set`), not the distance.
    """
    U, D, dtype = _weights(params, batched=False)
    n, d = U.shape
    A = _skip(skip, d)
    cert, rel = _decide(U, D, A, dtype, rtol=rtol, method="auto", time_limit=time_limit,
                        activation=None, skip_kind="identity" if skip is None else "matrix",
                        bias=_bias(bias, n))
    norm_a = float(np.linalg.norm(A))
    if cert.S is not None:
        m, how = _mask(cert.S, n), "exact"
    elif n <= 16:
        m, how = _closest(rel), "exhaustive"
    else:
        starts = [np.zeros(n, bool)] + [rel.c > t for t in (0.25, 0.5, 0.75)]
        cands = [_local_search(rel.G, rel.b, s, 10 * n) for s in starts]
        m, how = min(cands, key=lambda k: np.linalg.norm(_miss(U, D, A, k))), "local"
    upper = float(np.linalg.norm(_miss(U, D, A, m))) / norm_a
    box = _box_lower(U, D, A, rel) / norm_a
    return Distance(max(rel.lower / norm_a, box), upper, np.flatnonzero(m), how,
                    rel.lower / norm_a, box, cert)
