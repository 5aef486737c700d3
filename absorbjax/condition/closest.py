"""How far a block is from absorbing: certified lower and attained upper bounds."""

from __future__ import annotations

import dataclasses

import numpy as np

from absorbjax.condition import large
from absorbjax.condition._arith import EPS, ONE, balance, miss_bound
from absorbjax.condition.certificate import Distance
from absorbjax.condition.decide import decide, decision_options, read_block
from absorbjax.condition.inputs import Rule, mask_of
from absorbjax.condition.integer import closest_mask, local_search
from absorbjax.condition.relax import box_relaxation
from absorbjax.models import MLPParams, check_layout

__all__ = ["distance"]


def distance(params: MLPParams, activation: str | None = None, *, time_limit: float = 10.0, **options) -> Distance:
    """Place a block between "exactly absorbable" (0) and "as far as the zero map" (1).

    All numbers are ``‖Σ m_i M_i + A‖_F / ‖A‖_F`` (``‖A‖_F = √d`` for ``A = I``):

    * ``lower``: certified, no ``S`` gets closer; the larger of the real relaxation's bound
      (``relaxation``, see :func:`find_absorbing_set`; 0 once ``n ≥ d²`` generically) and the
      box relaxation over ``c ∈ [0,1]^n`` (``box``, projected Newton and its Frank–Wolfe gap,
      see :func:`relax.box_relaxation`; 0 when an absorbing set exists).
    * ``upper``, attained by ``S``: an absorbing set when the decision finds one, the exact
      minimum for ``n ≤ 16``, else the best local search (single-unit flips) started from ``∅``
      and from thresholds of the real and the box relaxations' solutions.

    ``upper`` is a rigorous upper bound on the exact ``‖M_S‖_F / ‖A‖_F`` of its set (float64 with
    Higham's error bound, or rational arithmetic when cancellation makes that bound loose), so the
    set ``S`` attains at most ``upper`` on the stored values.

    ``time_limit`` (seconds for the MILP, here 10 by default) and ``options`` (``skip``, ``rtol``,
    ``method``, ``bias``, ``skip_rtol``, ``out_bias``, ``narrow``) are the decision's, as for :func:`find_absorbing_set` and
    validated by it; its certificate is ``certificate``. A biased block's distance is the distance
    of its *ray limit* (the bias-free block on the same ``W_up, W_down``): ``bias`` (the hidden bias
    ``(n,)``) changes only the certificate's theorem (Thm 8 via the ray limit), not the numbers; so
    does ``activation``.
    """
    options = decision_options("distance", time_limit=time_limit, **options)
    narrow = options.pop("narrow")
    U, D, A, inputs = read_block(
        params, activation, skip=options.pop("skip"), bias=options.pop("bias"), out_bias=options.pop("out_bias")
    )
    check_layout(params, narrow=narrow)  # after read_block's checks of the shapes
    n = U.shape[0]
    cert, rel = decide(U, D, A, inputs, **options)
    if rel is None:  # decided by the O(n d²) screen of condition.large
        if inputs.slope in (None, 1):
            return large.distance_bounds(U, D, A, cert)
        rule = Rule.of(A, 0.0, inputs.slope)  # ‖c·P + A‖/‖A‖ = ‖P + A/c‖/‖A/c‖, A/c rounded: widen both ways
        dist = large.distance_bounds(U, D, rule.Ac, cert)
        slack = 2 * rule.approx / (float(np.linalg.norm(rule.Ac)) * (1 - 4 * EPS))
        lower = max(dist.lower * (1 - 8 * EPS) - slack, 0.0)
        return dataclasses.replace(dist, lower=lower, box=lower, upper=dist.upper * (1 + 8 * EPS) + slack)
    U, D = balance(U, D)  # exact; the same M_i as the decision's
    rule = Rule.of(A, 0.0, ONE if inputs.slope is None else inputs.slope)
    A, widen = rule.Ac, (1 + 8 * EPS) if rule.c != 1 else 1.0  # relative numbers: ‖c·P + A‖/‖A‖ = ‖P + A/c‖/‖A/c‖
    norm_a = float(np.linalg.norm(A))
    if cert.S is None:
        box, c_box = box_relaxation(U, D, A, rel)
        box /= norm_a
    else:  # the absorbing set attains 0 (to tol); no bound above 0 to certify
        box = 0.0
    if cert.S is not None:
        m, how = mask_of(cert.S, n), "exact"
    elif n <= 16:
        m, how = closest_mask(rel), "exhaustive"
    else:
        starts = [np.zeros(n, bool)] + [c > t for c in (rel.c, c_box) for t in (0.25, 0.5, 0.75)]
        cands = [local_search(rel.G, rel.b, s, 10 * n) for s in starts]
        # choose on the Gram form (f(m) = mᵀGm − 2bᵀm + ‖A‖_F²); the chosen one is evaluated exactly
        m, how = min(cands, key=lambda k: float(k @ rel.G @ k) - 2 * float(rel.b @ k)), "local"
    if rule.c == 1:
        upper = miss_bound(U, D, A, m, enough=1e-12 * norm_a)[0] / norm_a * (1 + 4 * EPS)
    else:  # the exact c·W_down[:,S] W_up[S,:] + A against ‖A‖_F
        norm_c = float(np.linalg.norm(rule.A)) * (1 - 4 * EPS)
        upper = miss_bound(U, D, rule.A, m, enough=1e-12 * norm_c, c=rule.c)[0] / norm_c * (1 + 4 * EPS)
    shrink = 1.0 if widen == 1.0 else 1 - 8 * EPS - 2 * rule.approx / norm_a
    lower, box = rel.lower / norm_a * shrink, box * shrink
    return Distance(max(lower, box), upper, np.flatnonzero(m), how, lower, box, cert)
