"""How far a block is from absorbing: certified lower and attained upper bounds."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from absorbjax.condition import _reader as reader, _wide as wide
from absorbjax.condition._arith import EPS, ONE, balance, miss_bound
from absorbjax.condition._certificate import Distance, FoundBy, Stopped
from absorbjax.condition._decide import decide, read_block
from absorbjax.condition._integer import closest_mask
from absorbjax.condition._options import Decision
from absorbjax.condition._relax import box_relaxation
from absorbjax.condition._rule import Rule, mask_of
from absorbjax.condition._search import Budget, descend
from absorbjax.models import MLPParams, check_layout

SEARCH_MAX_D = 4096  # the search's set is evaluated with five d × d float64 matrices (640 MiB here)
SEARCH_WORK = 5 * 10**9  # multiply-adds of the search (search.Budget), split between its two starts
DECIDE_SHARE = 0.8  # of time_limit for the decision; the box relaxation and the searches get the rest
BOX_ITERS = 3000  # the box relaxation's projected-gradient steps (relax.box_relaxation's default)
BOX_FIXED = 40  # products with G the box relaxation's fallback takes besides those steps (30 + its first 10)


def distance(
    params: MLPParams,
    activation: str | None = None,
    *,
    skip=None,
    bias=None,
    out_bias=None,
    decision: Decision = Decision(),
    search: bool = True,
    work: float = SEARCH_WORK,
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
      give the same ``lower``, ``upper`` and ``S`` on every run, whatever the machine's load; the
      time limit (below) is only a safety stop behind the budget. ``search=False`` leaves it out
      (the bounds as the paths alone give them).

    ``upper`` is a rigorous upper bound on the exact ``‖M_S‖_F / ‖A‖_F`` of its set (float64 with
    Higham's error bound, or rational arithmetic when cancellation makes that bound loose), so the
    set ``S`` attains at most ``upper`` on the stored values.

    ``skip``, ``bias``, ``out_bias`` (the block) and ``decision`` (how to decide, a
    :class:`Decision`) are as for :func:`find_absorbing_set`, whose certificate is ``certificate``.

    ``time_limit`` is one deadline for the whole call, taken once the weights have been read: the
    decision (its MILPs get the seconds left of its share, :data:`DECIDE_SHARE` of the limit, so
    that a block it cannot decide still gets a distance), then the box relaxation,
    the local searches and the search above each run only on the time left. Past the deadline the
    box relaxation is skipped (``box = 0``), and it takes fewer projected-gradient steps when one
    product with ``G`` per step (the least a step costs) does not fit :data:`BOX_ITERS` of them in
    the time left (any point of the box gives a certified bound: fewer steps only weaken it); a local
    search not begun by then leaves its start as it is (``∅`` and the roundings of the relaxations'
    solutions, the best on the Gram form kept), the wide path takes no Frank–Wolfe step
    (the trace test's bound) and the search stops at its next step. Skipping a stage only weakens
    the bounds: ``lower`` stays certified and ``upper`` is still attained by ``S``. Whenever the
    deadline cut anything, ``stopped == "time_limit"`` and the numbers may differ between runs;
    without it they are reproducible, except that whether ``S`` is an absorbing set the decision's
    MILP found only near the limit (``"exact"``) can differ between runs. Not interrupted, and so
    outside the limit: reading the weights (before the deadline is taken), the ``O(n d²)`` screen of
    wide blocks, the Gram relaxation (``O(n² d + n³)``: the eigendecomposition or two Cholesky
    factorisations of ``G``; 1 to 17 s at ``n = 2048`` on two busy cores), the box relaxation's
    projected-Newton steps once begun (at most 20 factorisations of submatrices of ``G``), the
    decision's enumeration of ``2^n`` sets (``n ≤ 24``) once begun, the exact minimum (``n ≤ 16``),
    each single step of a search, and the rigorous evaluation of the chosen set. A block whose
    decision runs its MILP to the end of its share (undecided) leaves the rest of the limit to the
    other stages. A biased block's distance is the distance
    of its *ray limit* (the bias-free block on the same ``W_up, W_down``): ``bias`` (the hidden bias
    ``(n,)``) changes only the certificate's theorem (Thm 8 via the ray limit), not the numbers; so
    does ``activation``.
    """
    if isinstance(work, bool) or not isinstance(work, (int, float, np.integer, np.floating)) or not work > 0:
        raise ValueError(f"work must be a positive number of multiply-adds, got {work!r}")
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # out-of-range values are bounded, never trusted
        block = read_block(params, activation, skip, bias, out_bias)
        check_layout(params, narrow=decision.narrow)  # after read_block's checks of the shapes
        start = time.perf_counter()  # one deadline for all that follows; the decision gets a share
        deadline = start + decision.time_limit
        cert, rel = decide(block, decision, deadline=start + DECIDE_SHARE * decision.time_limit)
        U, D, A, context = block.up, block.down, block.skip, block.context
        if not np.any(A):  # A = 0: S = ∅ misses by exactly 0 (the block is residual-free); 0/0 read as 0
            return Distance(0.0, 0.0, np.zeros(0, np.int64), FoundBy.EXACT, 0.0, 0.0, cert)
        rule = Rule.of(A, 0.0, ONE if context.slope is None else context.slope)
        if rel is None:  # decided by the O(n d²) screen of condition._wide
            dist = _wide_distance(U, D, A, rule, cert, deadline)
        else:
            U, D = balance(U, D)  # exact; the same M_i as the decision's
            dist = _gram_distance(U, D, rule, cert, rel, deadline)
        return _searched(U, D, rule, dist, work, deadline) if search else dist


def _wide_distance(U, D, A, rule: Rule, cert, deadline: float) -> Distance:
    """The distance of a block the ``O(n d²)`` screen decided (:func:`wide.distance_bounds`): past
    ``deadline`` no Frank–Wolfe step (where one would be taken), the trace test's bound."""
    n, d = U.shape
    late = cert.S is None and n * d * d <= wide.FW_BUDGET and time.perf_counter() > deadline
    steps = 0 if late else None
    if rule.c == 1:
        dist = wide.distance_bounds(U, D, A, cert, steps=steps)
    else:  # ‖c·P + A‖/‖A‖ = ‖P + A/c‖/‖A/c‖, A/c rounded: widen both ways
        dist = wide.distance_bounds(U, D, rule.Ac, cert, steps=steps)
        slack = 2 * rule.approx / (float(np.linalg.norm(rule.Ac)) * (1 - 4 * EPS))
        lower = max(dist.lower * (1 - 8 * EPS) - slack, 0.0)
        dist = dataclasses.replace(dist, lower=lower, box=lower, upper=dist.upper * (1 + 8 * EPS) + slack)
    return dataclasses.replace(dist, stopped=Stopped.TIME_LIMIT) if late else dist


def _gram_distance(U, D, rule: Rule, cert, rel, deadline: float) -> Distance:
    """The distance on the Gram path (``U, D`` balanced float64): the box relaxation, then the set
    (the decision's, the exact minimum for ``n ≤ 16``, or the best local search), each stage only on
    the time left before ``deadline``."""
    n = U.shape[0]
    A, widen = rule.Ac, (1 + 8 * EPS) if rule.c != 1 else 1.0  # relative numbers: ‖c·P + A‖/‖A‖ = ‖P + A/c‖/‖A/c‖
    norm_a = float(np.linalg.norm(A))
    cut = False  # whether the deadline cut a stage short
    box, c_box = 0.0, None  # the absorbing set attains 0 (to tol); no bound above 0 to certify
    if cert.S is None:
        iters = _box_iters(rel, deadline)
        cut = iters < BOX_ITERS
        if iters > 0:
            box, c_box = box_relaxation(U, D, A, rel, iters=iters)
            box /= norm_a
    if cert.S is not None:
        m, how = mask_of(cert.S, n), FoundBy.EXACT
    elif n <= 16:
        m, how = closest_mask(rel), FoundBy.EXHAUSTIVE
    else:
        roundings = (rel.c,) if c_box is None else (rel.c, c_box)
        starts = [np.zeros(n, bool)] + [c > t for c in roundings for t in (0.25, 0.5, 0.75)]
        cands = []
        for s in starts:  # single flips of the one local search; the deadline stops it (a start not begun stays)
            clock = Budget(deadline=deadline)
            found = descend(U, D, A, s, swaps=False, budget=clock, gram=(rel.G, rel.b))
            cut |= clock.stopped == Stopped.TIME_LIMIT
            cands.append(s if found is None else found[0])
        # choose on the Gram form (f(m) = mᵀGm − 2bᵀm + ‖A‖_F²); the chosen one is evaluated exactly
        m, how = min(cands, key=lambda k: float(k @ rel.G @ k) - 2 * float(rel.b @ k)), FoundBy.LOCAL
    shrink = 1.0 if widen == 1.0 else 1 - 8 * EPS - 2 * rule.approx / norm_a
    lower, box = rel.lower / norm_a * shrink, box * shrink
    dist = Distance(max(lower, box), attained(U, D, rule, m), np.flatnonzero(m), how, lower, box, cert)
    return dataclasses.replace(dist, stopped=Stopped.TIME_LIMIT) if cut else dist


def _box_iters(rel, deadline: float) -> int:
    """The projected-gradient steps that the box relaxation (:func:`relax.box_relaxation`) is given
    before ``deadline`` (``time.perf_counter()``): :data:`BOX_ITERS` (its default: the same bound on
    every run) when they fit in the time left at one product with ``G`` each (the least a step
    costs, timed here, best of three), fewer when they do not (less :data:`BOX_FIXED` products, the
    fallback's own), and 0 (skip it: ``box = 0``) when no time is left or not even
    :data:`BOX_FIXED` products fit. Steers only: any point of the box gives a certified bound."""
    left = deadline - time.perf_counter()
    if not left > 0:
        return 0
    c, step = np.clip(np.nan_to_num(rel.c), 0.0, 1.0), math.inf
    for _ in range(3):
        t = time.perf_counter()
        rel.G @ c
        step = min(step, time.perf_counter() - t)
    left = deadline - time.perf_counter()
    if step * (BOX_ITERS + BOX_FIXED) <= left:
        return BOX_ITERS
    return max(int(left / step) - BOX_FIXED, 0) if left > 0 and step > 0 else 0


def attained(U, D, rule: Rule, m: np.ndarray) -> float:
    """A rigorous upper bound on ``‖c·W_down[:,S] W_up[S,:] + A‖_F / ‖A‖_F`` for the mask ``m``
    ``(n,)`` (``c``, ``A``: the exact slope and skip of ``rule``): :func:`miss_bound` over a
    lower bound on ``‖A‖_F``, the division's rounding covered."""
    if rule.c == 1:
        norm_a = float(np.linalg.norm(rule.A))
        return miss_bound(U, D, rule.A, m, enough=1e-12 * norm_a)[0] / norm_a * (1 + 4 * EPS)
    norm_c = float(np.linalg.norm(rule.A)) * (1 - 4 * EPS)
    return miss_bound(U, D, rule.A, m, enough=1e-12 * norm_c, c=rule.c)[0] / norm_c * (1 + 4 * EPS)


def _searched(U, D, rule: Rule, dist: Distance, work: float, deadline: float) -> Distance:
    """``dist`` with the set of :func:`search.descend` (on ``A/c``, from ``dist.S`` and from ``∅``,
    each with an equal share of the ``work`` left; ``deadline``, the call's (``time.perf_counter()``),
    a safety stop for both; ``stopped`` records what ended them, ``"time_limit"`` kept when
    ``dist.stopped`` already says so) when its rigorous bound
    (:func:`attained`) is below ``dist.upper``; an exact or exhaustive ``S`` is kept as it is, and
    so is every ``S`` of a block with ``d > SEARCH_MAX_D`` (the rigorous bound forms several
    ``d × d`` float64 matrices). ``U, D``: balanced float64 (the Gram path) or as stored (the wide
    path: float16/32/64 or bfloat16, often memory-mapped); the search reads them in chunks
    (:mod:`~absorbjax.condition._search`), the found set's bound is taken on its units in float64."""
    if dist.method in (FoundBy.EXACT, FoundBy.EXHAUSTIVE) or U.shape[1] > SEARCH_MAX_D:
        return dist
    n = U.shape[0]
    starts = [mask_of(dist.S, n)] + ([np.zeros(n, bool)] if dist.S.size else [])
    found, stopped = [], dist.stopped
    budget = Budget(work, deadline)  # the time only a safety stop
    for k, m in enumerate(starts):  # each start gets an equal share of the work left
        share = Budget(budget.left / (len(starts) - k), budget.deadline)
        found.append(descend(U, D, rule.Ac, m, budget=share))
        budget.left -= share.used
        stopped = Stopped.TIME_LIMIT if Stopped.TIME_LIMIT in (stopped, share.stopped) else stopped or share.stopped
    dist = dataclasses.replace(dist, stopped=stopped)
    found = [r for r in found if r is not None]
    if not found:
        return dist
    m = min(found, key=lambda r: r[1])[0]
    if np.array_equal(m, starts[0]):  # no move from the path's own set
        return dist
    S = np.flatnonzero(m)  # its units in float64, rescaled by exact powers of two (the same M_i)
    Us, Ds = U[S], D[:, S]
    u, dd = reader.units(Us, Ds, reader.unit_scales(Us, Ds), np.arange(S.size))
    upper = attained(u, dd, rule, np.ones(S.size, bool))
    if not upper < dist.upper:
        return dist
    return dataclasses.replace(dist, upper=upper, S=S, method=FoundBy.GREEDY)
