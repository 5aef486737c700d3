"""The hypotheses of Thm 8/10 (and of the kink theorem without biases), on the stored values, exactly:
(H1) rows of ``W_up`` and columns of ``W_down`` nonzero, (H2) rows pairwise non-parallel. Both paths
of the decision test them here, with the one exact parallel-row test (:func:`exactly_parallel`):
:func:`blockwise` on the stored block read in blocks of units (the wide path; no ``W_up W_upᵀ``),
:func:`from_gram` with the Gram matrix (the Gram path, which also measures the smallest sine).

:func:`blockwise`: zero rows and columns are found exactly. Parallel rows: each row, rescaled by a power of two, is
normalised with the sign of its largest entry (parallel rows then have the same normalised vector in
exact arithmetic) and projected on one fixed random direction; two parallel rows' computed
projections differ by at most ``w = 8γ_{2d+8}`` (plus a subnormal term), so after sorting every
parallel pair lies within ``w`` of each other, and every such pair is tested exactly
(:func:`exactly_parallel`, python ``Fraction``). The smallest sine between rows is *not* computed
there (that needs all ``n²/2`` pairs).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from absorbjax._dtypes import finfo, is_float
from absorbjax.condition._arith import EPS, ETA, gamma
from absorbjax.condition._reader import BLOCK, blocks, unit_max, up_rows
from absorbjax.condition._text import few
from absorbjax.results import Word

_U = EPS / 2  # unit roundoff of float64
_ETA = ETA  # smallest subnormal: the absolute error of one underflowing operation
_gamma = gamma


class Hypothesis(Word):
    """What a :class:`Failure` says failed: a zero row of ``W_up``, a zero column of ``W_down``, two
    exactly parallel rows of ``W_up``, or a check that could not finish (``UNCHECKED``)."""

    ZERO_ROWS = "zero_rows"
    ZERO_COLS = "zero_cols"
    PARALLEL = "parallel"
    UNCHECKED = "unchecked"


class Failure(str):
    """One failed hypothesis: its message (a plain ``str`` in records) and its ``kind``
    (:class:`Hypothesis`), by which the decision reads it, never by the message (:func:`kind_of`)."""

    kind: Hypothesis

    def __new__(cls, kind: Hypothesis, text: str) -> Failure:
        out = super().__new__(cls, text)
        out.kind = Hypothesis(kind)
        return out

    def __reduce__(self):
        return Failure, (self.kind, str(self))


def kind_of(failure: str) -> Hypothesis | None:
    """The :class:`Hypothesis` of one entry of a ``failed`` tuple (``None`` for a plain message)."""
    return failure.kind if isinstance(failure, Failure) else None


def exactly_parallel(u: np.ndarray, v: np.ndarray) -> bool:
    """``v_b u_a = v_a u_b`` for every ``b`` (``a`` the pivot of ``u``), in exact arithmetic.

    The float64 pre-filter only rules a pair out when every product is finite and two differ by more
    than their rounding; an overflowing product (``inf − inf = nan``) goes to the exact test."""
    a = int(np.argmax(np.abs(u)))
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        vu, uv = v * u[a], u * v[a]
        apart = np.abs(vu - uv) > 4 * _U * np.abs(vu) + 4 * _ETA
    if np.all(np.isfinite(vu)) and np.all(np.isfinite(uv)) and np.any(apart):
        return False  # finite float64 products that differ by more than their rounding
    ua, va = Fraction(float(u[a])), Fraction(float(v[a]))
    return all(Fraction(float(y)) * ua == Fraction(float(x)) * va for x, y in zip(u, v))


def _projections(U, block: int, e=None) -> tuple[np.ndarray, float]:
    """Sign-normalised unit rows of ``W_up`` projected on one fixed random direction, and the window
    ``w`` within which the computed projections of any two parallel rows lie."""
    n, d = U.shape
    r = np.random.default_rng(0).standard_normal(d)
    r /= np.linalg.norm(r) * (1 + 4 * _gamma(d + 2))  # ‖r‖ ≤ 1
    p = np.zeros(n)
    for s in blocks(n, block):
        u = up_rows(U, e, s)
        piv = np.argmax(np.abs(u), axis=1)
        e = np.frexp(np.abs(u[np.arange(u.shape[0]), piv]))[1]
        x = np.ldexp(u, -e[:, None]) * np.sign(u[np.arange(u.shape[0]), piv])[:, None]
        nrm = np.sqrt(np.sum(x * x, axis=1))
        nrm[nrm == 0] = 1.0
        p[s] = (x / nrm[:, None]) @ r
    return p, 8 * _gamma(2 * d + 8) + d * 2.0**-1070


def parallel_rows(U, live, *, block: int = BLOCK, balance=None, cap: int, enough: int):
    """``(pairs, tested, w)``: exactly parallel pairs ``(i, j)``, ``i < j``, among the rows of
    ``U (n, k)`` where ``live`` (nonzero rows), read in blocks; the search stops after ``enough``
    pairs or ``cap`` tested candidates (``tested > cap``: not finished). Every pair whose
    projections (module docstring) lie within the window ``w`` is tested exactly."""
    p, w = _projections(U, block, balance)
    order = np.flatnonzero(live)
    order = order[np.argsort(p[order], kind="stable")]
    ps = p[order]
    pairs, tested = [], 0
    for gap in range(1, order.size):
        close = np.flatnonzero(ps[gap:] - ps[:-gap] <= w)
        if close.size == 0:
            break
        for a in close:
            tested += 1
            i, j = int(order[a]), int(order[a + gap])
            u, v = up_rows(U, balance, np.array([i, j]))
            if exactly_parallel(u, v):
                pairs.append((min(i, j), max(i, j)))
        if len(pairs) >= enough or tested > cap:
            break
    return pairs, tested, w


def blockwise(
    U, D, *, block: int = BLOCK, max_pairs: int | None = None, balance=None, maxima=None
) -> tuple[tuple[str, ...], str]:
    """The hypotheses of Thm 8/10 that fail on the stored values, and what was checked.

    ``U = W_up (n, d)``, ``D = W_down (d, n)``. Zero rows/columns: exact. Parallel rows: every pair
    whose projections (module docstring) lie within the rounding window is tested exactly; this finds
    every exactly parallel pair, in ``O(n d + n log n)`` plus ``d`` per tested pair. Past
    ``max_pairs`` tested pairs (default ``10 n``) without an answer the check reports itself
    ``undecided`` in ``failed``. ``balance``: the exponents of :class:`Scales` (rows are read rescaled
    by them, as :func:`_arith.balance` would have stored them); ``maxima``: :func:`unit_max` of ``U, D``
    when already read (:attr:`Scales.maxima`).
    """
    n, d = U.shape
    failed: list[str] = []  # d >= 2 is no hypothesis: see from_gram
    mu, md = unit_max(U, D, block=block) if maxima is None else maxima
    zero_rows, zero_cols = np.flatnonzero(mu == 0), np.flatnonzero(md == 0)
    for idx, kind, what in (
        (zero_rows, Hypothesis.ZERO_ROWS, "rows of W_up are zero"),
        (zero_cols, Hypothesis.ZERO_COLS, "columns of W_down are zero"),
    ):
        if idx.size:
            more = f" and {idx.size - 10} more" if idx.size > 10 else ""
            failed.append(Failure(kind, f"{what}: {idx[:10].tolist()}{more}"))
    cap = 10 * n if max_pairs is None else max_pairs
    pairs, tested, w = parallel_rows(U, mu != 0, block=block, balance=balance, cap=cap, enough=6)
    if pairs:
        more = " and more" if len(pairs) > 5 else ""
        failed.append(Failure(Hypothesis.PARALLEL, f"rows of W_up are parallel: pairs {sorted(pairs)[:5]}{more}"))
    elif tested > cap:
        msg = f"undecided: {tested} near-equal projections of rows of W_up, over the cap {cap}"
        failed.append(Failure(Hypothesis.UNCHECKED, msg))
    checked = (
        f"zero rows/columns exactly; parallel rows exactly ({tested} candidate pairs within the "
        f"rounding window {w:.2g} of one projection tested); min |sin| between rows not computed"
    )
    return tuple(failed), checked


# ---------------------------------------------------------------------------------------------
# With the Gram matrix W_up W_upᵀ (the Gram path)


def from_gram(U, D, UUt, dtype) -> tuple[tuple[str, ...], float | None]:
    """Failed hypotheses on the stored values, and the smallest ``|sin|`` between rows: (H1) rows of
    ``W_up`` and columns of ``W_down`` nonzero, (H2) rows pairwise non-parallel (Thm 8/10's, and the
    kink theorem's without biases). ``d ≥ 2`` is not among them: the kink theorem and its ray limit
    hold for ``d = 1`` too (``docs/theory/kink.md``), and the paper's Thm 8/10, stated for ``d ≥ 2``,
    are cited only there (:func:`_decide.every_width`).

    Exact, so invariant under the changes of coordinates and unit rescalings that preserve the
    function class (``W_up → W_up P⁻¹``, ``W_up[i,:] → t W_up[i,:]``): a row or column is zero when
    every stored entry is, and two rows are parallel when ``rank [u; v] = 1`` for the stored values.
    Pairs whose Gram ``|cos|`` is below ``1 − 1e-6`` are certainly not parallel (the cosine's rounding
    error is ``O(d·eps)``: rows not balanced to ``max ∈ [1/2, 1)`` are rescaled by a power of two
    first, and ``|cos| = |⟨u, v⟩|/(‖u‖‖v‖)`` is never squared, so nothing under- or overflows); the rest are checked exactly by the package's one parallel-row test,
    :func:`exactly_parallel` (:func:`blockwise`'s too).
    """
    failed = []
    zero_rows = np.flatnonzero(~U.any(axis=1))
    zero_cols = np.flatnonzero(~D.any(axis=0))
    if zero_rows.size:
        failed.append(Failure(Hypothesis.ZERO_ROWS, f"rows of W_up are zero: {few(zero_rows)}"))
    if zero_cols.size:
        failed.append(Failure(Hypothesis.ZERO_COLS, f"columns of W_down are zero: {few(zero_cols)}"))
    pairs, min_sin = _pairs(U, UUt, dtype)
    if pairs:
        more = f" and {len(pairs) - 5} more" if len(pairs) > 5 else ""
        failed.append(Failure(Hypothesis.PARALLEL, f"rows of W_up are parallel: pairs {pairs[:5]}{more}"))
    return tuple(failed), min_sin


def _pairs(U, UUt, dtype) -> tuple[list, float | None]:
    """Exactly parallel pairs of nonzero rows and the smallest ``|sin|`` between two of them."""
    n = U.shape[0]
    live = np.flatnonzero(U.any(axis=1))
    if live.size < 2:
        return [], None
    G = UUt if live.size == n else UUt[np.ix_(live, live)]
    top = np.max(np.abs(U[live]), axis=1)
    off = (top < 0.5) | (top >= 1)  # rows not balanced to [1/2, 1): their Gram entries may under/overflow
    if np.any(off):  # rescale those rows by a power of two (O(k n d) for k such rows) before their cosines
        V = np.ldexp(U[live], -np.frexp(top)[1][:, None])  # max |V[i,:]| in [1/2, 1); rounding ≤ 2⁻¹⁰⁷⁵ each
        G = G.copy()
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            rows = V[off] @ V.T
        G[off, :], G[:, off] = rows, rows.T
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        r = np.sqrt(np.diag(G))  # row norms: never squared again, so no cosine under- or overflows
        cos = np.abs(G) / r[:, None] / r[None, :]
    np.fill_diagonal(cos, 0.0)
    top = float(np.nanmax(cos)) if np.any(np.isfinite(cos)) else 1.0
    min_sin = math.sqrt(max((1.0 - top) * (1.0 + top), 0.0))
    i, j = np.nonzero(np.triu(~(cos < 1.0 - 1e-6), 1))  # NaN (out of range) is checked exactly
    pairs = [(int(live[a]), int(live[b])) for a, b in zip(i, j) if exactly_parallel(U[live[a]], U[live[b]])]
    if i.size:  # near-parallel pairs: their sines from the chord, accurate where 1 − cos is not
        min_sin = min(
            [min_sin if top < 1.0 - 1e-6 else 1.0] + [chord_sin(U[live[a]], U[live[b]]) for a, b in zip(i, j)]
        )
    return pairs, min_sin


def chord_sin(u: np.ndarray, v: np.ndarray) -> float:
    """``|sin|`` of the angle between two nonzero rows, from the chord ``c = ‖û ∓ v̂‖ = 2 sin(θ/2)``
    (``sin θ = c √(1 − c²/4)``) of the rows rescaled into range: accurate to about ``d·eps`` in
    absolute terms, also for nearly parallel rows, where ``1 − cos²`` loses every digit."""
    a, b = (np.ldexp(x, -np.frexp(np.max(np.abs(x)))[1]) for x in (u, v))  # max |·| in [1/2, 1): exact
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    c = float(np.linalg.norm(a - np.sign(a @ b or 1.0) * b))
    return c * math.sqrt(max(1.0 - c * c / 4, 0.0))


def margin_note(margin: float | None, dtype, d: int, what: str) -> str:
    """The reason's addition for ``not_absorbable`` when the hypotheses hold for the stored numbers
    by no more than their rounding: ``margin`` (the smallest ``|sin|`` between two rows, or between
    two kink hyperplanes ``(w_i, b_i)``) at most ``2u + 8(d + 1)·eps`` (``u`` the storage's unit
    roundoff, at least float64's: the rows' rounding turns their angle by up to about ``2u``; the rest
    covers the sine's own rounding); ``""`` otherwise."""
    u = max(float(finfo(dtype).eps) / 2 if is_float(dtype) else 0.0, EPS / 2)
    if margin is None or margin > 2 * u + 8 * (d + 1) * EPS:
        return ""
    return (
        f"; but the hypotheses hold by no more than the storage's rounding: the smallest |sin| between two {what} is "
        f"{margin:.3g} <= 2u + 8(d + 1)·eps ({2 * u + 8 * (d + 1) * EPS:.3g}), so the weights these numbers round may be "
        "degenerate, where the theorem says nothing"
    )


def parallel_pairs(U, UUt, dtype) -> list:
    """The pairs ``(i, j)``, ``i < j``, of nonzero rows of ``U`` that are exactly parallel (stored values;
    ``U`` balanced so that its Gram matrix ``UUt`` is in range)."""
    return _pairs(U, UUt, dtype)[0]
