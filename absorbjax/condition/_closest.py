"""How far a block is from absorbing: certified lower and attained upper bounds."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from absorbjax._shorthand import with_shorthand
from absorbjax.condition import _large as large, _stored as stored
from absorbjax.condition._arith import EPS, ONE, balance, miss_bound
from absorbjax.condition._certificate import Distance
from absorbjax.condition._decide import decide, read_block
from absorbjax.condition._inputs import Rule, mask_of
from absorbjax.condition._integer import closest_mask, local_search
from absorbjax.condition._options import Decision
from absorbjax.condition._relax import box_relaxation
from absorbjax.condition._search import Budget, descend
from absorbjax.models import MLPParams, check_layout

SEARCH_MAX_D = 4096  # the search's set is evaluated with five d × d float64 matrices (640 MiB here)
SEARCH_WORK = 5 * 10**9  # multiply-adds of the search (search.Budget), split between its two starts


def distance(
    params: MLPParams,
    activation: str | None = None,
    *,
    search: bool = True,
    work: float = SEARCH_WORK,
    decision: Decision = Decision(time_limit=10.0),
    **shorthand,
) -> Distance:
    """Place a block between "exactly absorbable" (0) and "as far as the zero map" (1).

    All numbers are ``‖Σ m_i M_i + A‖_F / ‖A‖_F`` (``‖A‖_F = √d`` for ``A = I``; for ``A = 0`` all are
    0, attained by ``S = ∅``: the block is residual-free). Singular and ill-conditioned skips need no
    inverse here: every bound is on ``‖Σ m_i M_i + A‖_F`` itself.
    The numbers measure the sign-flip condition: a ``d = 1`` kink block absorbed by the line
    theorem (``certificate.line``) may be far from every ``S``.

    * ``lower``: certified, no ``S`` gets closer; the larger of the real relaxation's bound
      (``relaxation``, see :func:`find_absorbing_set`; 0 once ``n ≥ d²`` generically) and the
      box relaxation over ``c ∈ [0,1]^n`` (``box``, projected Newton and its Frank–Wolfe gap,
      see :func:`relax.box_relaxation`; 0 when an absorbing set exists).
    * ``upper``, attained by ``S``: an absorbing set when the decision finds one, the exact
      minimum for ``n ≤ 16``, else the best local search (single-unit flips) started from ``∅``
      and from thresholds of the real and the box relaxations' solutions (blocks with
      ``n ≥ 2048``: the best set of the ``O(n d²)`` screen, ``"frank-wolfe"``); then, unless
      ``S`` is exact or exhaustive, the matrix-free search of :mod:`absorbjax.condition._search`
      (best-improvement flips and swaps, never an ``n × n`` matrix) from that set and from ``∅``,
      whose set replaces it (``"greedy"``) only when its rigorous bound is smaller (for
      ``d ≤ SEARCH_MAX_D``: the bound forms ``d × d`` matrices). The search stops at a local
      minimum or when it has spent ``work`` multiply-adds (:class:`search.Budget`, charged from the
      shapes of each step; default :data:`SEARCH_WORK`, ``5·10⁹``, a few seconds to about 20 on two
      busy cores: trained-like blocks up to ``d = 384, n = 1536`` converge below it (``≈ 10⁹``),
      ``d = 768, n = 3072`` stops on it (``≈ 7·10⁹`` to converge)), so the same weights
      give the same ``lower``, ``upper`` and ``S`` on every run, whatever the machine's load.
      ``time_limit`` seconds, counted from the search's start, are only a safety stop behind the
      budget; a search it stops says so (``stopped == "time_limit"``) and may then differ between
      runs. ``search=False`` leaves it out (the bounds as the paths alone give them).

    ``upper`` is a rigorous upper bound on the exact ``‖M_S‖_F / ‖A‖_F`` of its set (float64 with
    Higham's error bound, or rational arithmetic when cancellation makes that bound loose), so the
    set ``S`` attains at most ``upper`` on the stored values.

    ``decision`` (a :class:`Decision`, or its fields by keyword: ``skip``, ``rtol``, ``method``,
    ``bias``, ``skip_rtol``, ``out_bias``, ``narrow`` and ``time_limit``, seconds for the whole decision,
    here 10 by default, and again for the search's safety stop) is the decision's, as for
    :func:`find_absorbing_set`; its certificate is ``certificate``. The decision's MILP stops on
    ``time_limit``: where it finds an absorbing set only near the limit, whether ``S`` is that set
    (``"exact"``) can differ between runs; everything else is reproducible. The call takes at most
    about ``2·time_limit`` plus the relaxations. A biased block's distance is the distance
    of its *ray limit* (the bias-free block on the same ``W_up, W_down``): ``bias`` (the hidden bias
    ``(n,)``) changes only the certificate's theorem (Thm 8 via the ray limit), not the numbers; so
    does ``activation``.
    """
    decision = with_shorthand((decision,), shorthand, "distance")[0]
    if isinstance(work, bool) or not isinstance(work, (int, float, np.integer, np.floating)) or not work > 0:
        raise ValueError(f"work must be a positive number of multiply-adds, got {work!r}")
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # out-of-range values are bounded, never trusted
        U, D, A, context = read_block(params, activation, decision)
        check_layout(params, narrow=decision.narrow)  # after read_block's checks of the shapes
        n, time_limit = U.shape[0], decision.time_limit
        cert, rel = decide(U, D, A, context, decision)
        if not np.any(A):  # A = 0: S = ∅ misses by exactly 0 (the block is residual-free); 0/0 read as 0
            return Distance(0.0, 0.0, np.zeros(0, np.int64), "exact", 0.0, 0.0, cert)
        rule = Rule.of(A, 0.0, ONE if context.slope is None else context.slope)
        if rel is None:  # decided by the O(n d²) screen of condition._large
            if rule.c == 1:
                dist = large.distance_bounds(U, D, A, cert)
            else:  # ‖c·P + A‖/‖A‖ = ‖P + A/c‖/‖A/c‖, A/c rounded: widen both ways
                dist = large.distance_bounds(U, D, rule.Ac, cert)
                slack = 2 * rule.approx / (float(np.linalg.norm(rule.Ac)) * (1 - 4 * EPS))
                lower = max(dist.lower * (1 - 8 * EPS) - slack, 0.0)
                dist = dataclasses.replace(dist, lower=lower, box=lower, upper=dist.upper * (1 + 8 * EPS) + slack)
            return _searched(U, D, rule, dist, work, time_limit) if search else dist
        U, D = balance(U, D)  # exact; the same M_i as the decision's
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
        shrink = 1.0 if widen == 1.0 else 1 - 8 * EPS - 2 * rule.approx / norm_a
        lower, box = rel.lower / norm_a * shrink, box * shrink
        dist = Distance(max(lower, box), attained(U, D, rule, m), np.flatnonzero(m), how, lower, box, cert)
        return _searched(U, D, rule, dist, work, time_limit) if search else dist


def attained(U, D, rule: Rule, m: np.ndarray) -> float:
    """A rigorous upper bound on ``‖c·W_down[:,S] W_up[S,:] + A‖_F / ‖A‖_F`` for the mask ``m``
    ``(n,)`` (``c``, ``A``: the exact slope and skip of ``rule``): :func:`miss_bound` over a
    lower bound on ``‖A‖_F``, the division's rounding covered."""
    if rule.c == 1:
        norm_a = float(np.linalg.norm(rule.A))
        return miss_bound(U, D, rule.A, m, enough=1e-12 * norm_a)[0] / norm_a * (1 + 4 * EPS)
    norm_c = float(np.linalg.norm(rule.A)) * (1 - 4 * EPS)
    return miss_bound(U, D, rule.A, m, enough=1e-12 * norm_c, c=rule.c)[0] / norm_c * (1 + 4 * EPS)


def _searched(U, D, rule: Rule, dist: Distance, work: float, time_limit: float) -> Distance:
    """``dist`` with the set of :func:`search.descend` (on ``A/c``, from ``dist.S`` and from ``∅``,
    each with an equal share of the ``work`` left; ``time_limit`` seconds from here a safety stop
    for both; ``stopped`` records what ended them) when its rigorous bound
    (:func:`attained`) is below ``dist.upper``; an exact or exhaustive ``S`` is kept as it is, and
    so is every ``S`` of a block with ``d > SEARCH_MAX_D`` (the rigorous bound forms several
    ``d × d`` float64 matrices). ``U, D``: balanced float64 (the Gram path) or as stored (the wide
    path: float16/32/64 or bfloat16, often memory-mapped); the search reads them in chunks
    (:mod:`~absorbjax.condition._search`), the found set's bound is taken on its units in float64."""
    if dist.method in ("exact", "exhaustive") or U.shape[1] > SEARCH_MAX_D:
        return dist
    n = U.shape[0]
    starts = [mask_of(dist.S, n)] + ([np.zeros(n, bool)] if dist.S.size else [])
    found, stopped = [], ""
    budget = Budget(work, time.perf_counter() + time_limit)  # the time only a safety stop
    for k, m in enumerate(starts):  # each start gets an equal share of the work left
        share = Budget(budget.left / (len(starts) - k), budget.deadline)
        found.append(descend(U, D, rule.Ac, m, budget=share))
        budget.left -= share.used
        stopped = "time_limit" if "time_limit" in (stopped, share.stopped) else stopped or share.stopped
    dist = dataclasses.replace(dist, stopped=stopped)
    found = [r for r in found if r is not None]
    if not found:
        return dist
    m = min(found, key=lambda r: r[1])[0]
    if np.array_equal(m, starts[0]):  # no move from the path's own set
        return dist
    S = np.flatnonzero(m)  # its units in float64, rescaled by exact powers of two (the same M_i)
    Us, Ds = U[S], D[:, S]
    u, dd = stored.units(Us, Ds, stored.unit_scales(Us, Ds), np.arange(S.size))
    upper = attained(u, dd, rule, np.ones(S.size, bool))
    if not upper < dist.upper:
        return dist
    return dataclasses.replace(dist, upper=upper, S=S, method="greedy")
