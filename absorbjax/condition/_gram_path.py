"""The Gram path of the decision (``n < 8192``): float64 copies of ``W_up``, ``W_down``, balanced;
the hypotheses with ``W_up W_upᵀ``; the real relaxations (:mod:`absorbjax.condition._relax`) and the
set search (:func:`search`: the relaxation's test and rounding, the box relaxation, the enumeration
or the MILP); its answer in the one form (:class:`_assemble.Answer`) with :class:`GramPath`, its
:class:`_assemble.Strategy`. ``O(n² d + n³)``."""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from absorbjax.condition import _hypotheses as hyp
from absorbjax.condition._arith import balance
from absorbjax.condition._assemble import Answer, best_witness
from absorbjax.condition._block import StoredBlock
from absorbjax.condition._certificate import RelaxationEvidence, StorageRounding, WithinRounding
from absorbjax.condition._integer import EXHAUSTIVE_MAX_N, exhaustive, milp
from absorbjax.condition._relax import Relaxation, box_relaxation, relax
from absorbjax.condition._rule import Rule
from absorbjax.condition._text import fmt
from absorbjax.condition._verdict import hyperplanes

SMALL_N = 16  # below this the 2^n enumeration (one chunk) is the cheapest proof
_LATE = "the time limit of the decision was reached"


class _Outcome(NamedTuple):
    found: np.ndarray | None  # a mask accepted by rule (★)
    method: str
    why: str  # the proof of absence, or why there is none; "" when found
    lower: float  # certified lower bound on ‖Σ m_i M_i + A‖_F over m ∈ {0,1}^n
    residual: float | None  # ‖miss‖_max of the one candidate checked, if any
    undecided: bool = False  # no set found and no proof of absence
    point: np.ndarray | None = None  # the box relaxation's point c ∈ [0,1]^n, when it ran


def search(U, D, rule: Rule, rel, *, method: str, deadline: float, target: str) -> _Outcome:
    """Find a set that ``rule`` (★) accepts, or prove that none exists (on ``A = rule.Ac``). The
    box relaxation and the MILP (which gets the seconds left) are skipped when no time is left
    before ``deadline`` (``time.perf_counter()``), and so is the enumeration after the MILP: the
    answer is then ``undecided``. The real relaxation's test, rounding and the enumeration of
    ``n ≤ 16`` (one chunk of ``2^16``) always run; the box relaxation and an enumeration, once
    begun, run to their end (bounded work)."""
    n, d = U.shape
    A = rule.Ac
    thr = rule.threshold(U, D)
    lower = rel.lower
    radius = rel.radius(thr)
    if method in ("auto", "relaxation"):
        if lower > thr:
            return _Outcome(
                None,
                "relaxation",
                f"no real c brings Σ c_i M_i within {fmt(lower)} "
                f"(Frobenius) of {target}; an accepted S would be within {fmt(thr)}",
                lower,
                None,
            )
        if radius is not None and radius < 0.5:
            m = rel.c > 0.5
            ok, residual = rule.accepts(U, D, m)
            if ok:
                return _Outcome(m, "rounding", "", lower, residual)
            return _Outcome(
                None,
                "rounding",
                f"the real solution c is unique (rank n = {n}) and every "
                f"accepted m lies within δ = {fmt(radius)} < 1/2 of it, so round(c) is the only "
                f"candidate; it misses by {fmt(residual)}, outside the tolerance",
                lower,
                residual,
            )
        if time.perf_counter() > deadline:  # the box relaxation is bounded work, but O(n²) per step
            why = f"{_LATE} before the box relaxation (rank G = {rel.rank}, n = {n})"
            return _Outcome(None, "relaxation", why, lower, None, undecided=True)
        box, point = box_relaxation(U, D, A, rel, target=2 * thr)
        lower = max(lower, box)
        if lower > thr:
            return _Outcome(
                None,
                "relaxation",
                f"no c in [0,1]^{n} brings Σ c_i M_i within "
                f"{fmt(lower)} (Frobenius) of {target}; an accepted S would be within {fmt(thr)}",
                lower,
                None,
                point=point,
            )
        if method == "relaxation":
            return _Outcome(
                None,
                "relaxation",
                f"the relaxations leave freedom (rank G = {rel.rank}, n = {n}); use method='auto'",
                lower,
                None,
                undecided=True,
            )
    verdict, form = None, None
    if method == "milp" or (method == "auto" and n > SMALL_N):
        left = deadline - time.perf_counter()
        if left <= 0:
            return _Outcome(None, "milp", _LATE + " before the MILP", lower, None, undecided=True)
        verdict, found, form = milp(U, D, rule, rel, thr, left)
        if found is not None:
            return _Outcome(found, "milp", "", lower, rule.accepts(U, D, found)[1])
        if verdict.startswith("time limit") or "Time limit" in verdict:
            verdict = f"{_LATE} ({verdict})"
        if n > EXHAUSTIVE_MAX_N:
            return _Outcome(
                None,
                "milp",
                f"{verdict} ({form} constraints; n = {n} is too large to "
                f"confirm by enumerating 2^n subsets, n <= {EXHAUSTIVE_MAX_N})",
                lower,
                None,
                undecided=True,
            )
        if time.perf_counter() > deadline:  # the 2^n enumeration (n <= 24) is not interrupted once begun
            return _Outcome(
                None,
                "milp",
                f"{verdict} ({form} constraints); no time left to enumerate 2^{n} subsets",
                lower,
                None,
                undecided=True,
            )
    found, best = exhaustive(U, D, rule, rel, thr)
    if found is not None:
        return _Outcome(found, "exhaustive", "", lower, rule.accepts(U, D, found)[1])
    after = "" if verdict is None else f" (after HiGHS, {form} constraints: {verdict})"
    return _Outcome(None, "exhaustive", _none_passes(n, best) + after, max(lower, best), None)


def _none_passes(n: int, best: float) -> str:
    """The enumeration's reason: no set passes, and by how much the closest misses."""
    by = f"{fmt(best)} (Frobenius)" if best > 0 else "an amount that rounds to 0 in float64 (rule (★)'s exact test)"
    return f"none of the 2^{n} subsets passes; the closest misses by {by}"


class GramPath(NamedTuple):
    """The Gram path as a :class:`_assemble.Strategy`: ``U, D`` balanced float64 copies of
    ``block``'s, the relaxation ``rel`` and the search's box ``point``; what the storage search
    needs (``method``, ``deadline``) and the ``timings`` it adds to."""

    U: np.ndarray
    D: np.ndarray
    block: StoredBlock
    rule: Rule
    rel: Relaxation
    point: np.ndarray | None
    method: str
    deadline: float
    timings: dict

    def units(self, S):
        return self.U[S], self.D[:, S], self.block.float64[1][:, S]

    def loose(self, rtol: float) -> StorageRounding:
        """The search again, with storage rounding's ``rtol``."""
        t = time.perf_counter()
        again = search(
            self.U,
            self.D,
            self.rule.loose(rtol),
            self.rel,
            method=self.method,
            deadline=self.deadline,
            target=self.block.context.target,
        )
        self.timings["storage"] = time.perf_counter() - t
        if again.found is not None:
            found = f"S passes with rtol {fmt(rtol)} (found by {again.method})"
            return StorageRounding(WithinRounding.YES, rtol, np.flatnonzero(again.found), found)
        if again.undecided:
            return StorageRounding(WithinRounding.UNDECIDED, rtol, None, again.why)
        if self.block.absolute:
            why = (
                "no S passes the relative storage rule, but some stored entries are zero or subnormal, "
                "where rounding is absolute (not covered by the relative rule)"
            )
            return StorageRounding(WithinRounding.UNDECIDED, rtol, None, why)
        return StorageRounding(WithinRounding.NO, rtol, None, f"{again.why} [{again.method}]")

    def witness(self):
        c = self.rel.c
        points = [p for p in (0 * c, np.clip(c, 0, 1), self.point) if p is not None]
        return best_witness(self.U, self.D, self.rule.Ac, points)


def gram(block: StoredBlock, rule: Rule, *, method, deadline, timings, rank=None) -> tuple[Answer, Relaxation]:
    """The Gram strategy: ``block``'s float64 copies (``block.float64``), balanced; the hypotheses with ``W_up W_upᵀ``;
    the relaxations (:func:`relax`) and the search (:func:`_search`). ``O(n² d + n³)``. ``rank``:
    :func:`_arith.rank_lower` of ``A`` (``(r, how)``) or ``None``; ``r > n`` proves that no ``S``
    exists (``rank c·W_down[:,S] W_up[S,:] ≤ |S| ≤ n``; the kink theorem's corollary), method
    ``"rank"``."""
    t = time.perf_counter()
    context = block.context
    U0, D0 = block.float64
    U, D = balance(U0, D0)
    UUt = U @ U.T
    dtype = (
        np.result_type(*context.dtypes)
        if all(not str(x).startswith("bfloat") for x in context.dtypes)
        else context.dtypes[0]
    )
    failed, min_sin = hyp.from_gram(U, D, UUt, dtype)
    timings["hypotheses"] = time.perf_counter() - t
    rel = relax(U, D, rule.Ac, UUt, timings)
    threshold = rule.threshold(U, D)
    t = time.perf_counter()
    if rank is not None and rank[0] > U.shape[0]:
        why = (
            f"rank A >= {rank[0]} > n = {U.shape[0]} ({rank[1]}), while rank c·W_down[:,S] W_up[S,:] <= |S| <= n "
            "for every S (the kink theorem's corollary for narrow blocks)"
        )
        out = _Outcome(None, "rank", why, rel.lower, None)
    else:
        out = search(U, D, rule, rel, method=method, deadline=deadline, target=context.target)
    timings["search"] = time.perf_counter() - t

    plane_sin = None
    if context.bias is not None and failed and all(hyp.kind_of(f) is hyp.Hypothesis.PARALLEL for f in failed):
        V = balance(np.concatenate([U0, context.bias[:, None]], axis=1), np.ones((1, U0.shape[0])))[0]
        plane_sin = hyp.from_gram(V, np.ones((1, V.shape[0])), V @ V.T, np.float64)[1]  # rows (w_i, b_i)
    evidence = RelaxationEvidence(
        rank=rel.rank,
        residual=rel.rho,
        dist01=float(np.max(np.abs(rel.c - np.clip(np.round(rel.c), 0, 1)), initial=0.0)),
        radius=rel.radius(threshold),
        min_row_sin=min_sin,
        min_plane_sin=plane_sin,
    )
    path = GramPath(U, D, block, rule, rel, out.point, method, deadline, timings)
    res = Answer(
        S=None if out.found is None else np.flatnonzero(out.found),
        method=out.method,
        why=out.why,
        lower=out.lower,
        residual=out.residual,
        undecided=out.undecided,
        threshold=threshold,
        failed=failed,
        hyper=hyperplanes(U0, context.bias, failed) if out.found is None else ("", False),
        found_by="",
        relaxation=evidence,
        timings=timings,
        path=path,
    )
    return res, rel
