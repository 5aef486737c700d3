"""An independent check of a decision's certificate: :func:`verify` (``absorbjax.verify``).

A proof checker beside the solver, as DRAT checkers stand beside SAT solvers. It imports nothing from
``condition``, ``dimension`` or ``fit`` (a test reads its imports): every claim is recomputed from the
stored floats, each an integer times a power of two, in exact integer and rational arithmetic
(python-flint), or, where the exact sums would be too large (more than :data:`EXACT_MAX`
multiply-adds), in float64 with an a priori error bound derived here. The activation's facts are read
from :mod:`absorbjax.activations` (declarations; a certificate for a user's activation rests on them
and says so in ``assumes``).

What is checked, status by status, is tabled in ``docs/theory/certificates.md`` ("Checking a
certificate"): the fingerprint; a found set's exact miss and rule (E); the line absorber at ``x = ±1``;
"no S" by the witness of bound (D), ``rank A > n`` or an exact solve; the hypotheses; the theorem.
Width and depth certificates: :mod:`absorbjax._verify_width`, :mod:`absorbjax._verify_depth` (same rule).

A step the checker cannot afford or has no evidence for is ``unchecked`` and says why; the verdict is
``refuted`` when any step fails, else ``verified`` when every step that the status needs passed, else
``unchecked``.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from fractions import Fraction

import numpy as np

from absorbjax import activations
from absorbjax._fingerprint import dtypes_of, fingerprint
from absorbjax._resident import release
from absorbjax._verify_depth import check_depth
from absorbjax._verify_float import (
    ETA as _ETA,
    WINDOW as _WINDOW,
    U as _U,
    enclosed,
    float_bounds,
    gamma,
    miss_bounds,
    norm_down,
    norm_up,
)
from absorbjax._verify_step import Step, fingerprint_step
from absorbjax._verify_width import check_width
from absorbjax.activations import KINK_THEOREM, RAY_LIMIT_KINK_THEOREM, RAY_LIMIT_THEOREM

VERIFIED, REFUTED, UNCHECKED = "verified", "refuted", "unchecked"
EXACT_MAX = 2**22  # multiply-adds the checker does in exact arithmetic; beyond, float64 with bounds
FREE_MAX = 12  # free 0/1 variables the exact solve enumerates (2^12 assignments)
_UNNAMED_KINK = f"{KINK_THEOREM} for relu, {RAY_LIMIT_KINK_THEOREM} for gelu, gelu_tanh, silu, softplus"
_UNNAMED_RAY = RAY_LIMIT_THEOREM + " (relu, gelu, gelu_tanh, silu, softplus)"
_UNNAMED_PAPER = "Thm 8/10 (relu, gelu; Thm 8 via the ray limit for gelu_tanh, silu, softplus)"
_DECLARED = ", given the declared facts"


@dataclasses.dataclass(frozen=True)
class Verification:
    """The answer of :func:`verify`: ``verdict`` (``"verified"``, ``"refuted"`` or ``"unchecked"``), the
    certificate's ``status`` and the ``steps`` in the order checked."""

    verdict: str
    status: str
    steps: tuple[Step, ...]

    @property
    def failed(self) -> Step | None:
        """The first step that failed (``None`` unless refuted)."""
        return next((s for s in self.steps if s.ok is False), None)

    def __str__(self) -> str:
        mark = {True: "ok", False: "FAILED", None: "unchecked"}
        lines = [f"{self.verdict}: a {self.status} certificate"]
        lines += [f"  {s.name}: {mark[s.ok]}: {s.detail}" for s in self.steps]
        return "\n".join(lines)

    def to_dict(self) -> dict:
        steps = [dataclasses.asdict(s) for s in self.steps]
        return {"verdict": self.verdict, "status": self.status, "steps": steps}


# ---------------------------------------------------------------------------------------------
# Stored floats as integers


def _ints(x) -> tuple[list[int], int]:
    """``x`` (finite floats, any shape) as integers ``k`` (flattened) and one exponent ``E``:
    ``x = k·2^E`` exactly."""
    m, e = np.frexp(np.asarray(x, np.float64).ravel())
    k = (m * 2.0**53).astype(np.int64).tolist()  # exact: a float64 significand has 53 bits
    e = (e.astype(np.int64) - 53).tolist()
    E = min((ei for ki, ei in zip(k, e) if ki), default=0)
    return [ki << (ei - E) if ki else 0 for ki, ei in zip(k, e)], E


def _frac(k: int, E: int) -> Fraction:
    return Fraction(k << E) if E >= 0 else Fraction(k, 1 << -E)


def _fmpz(x) -> tuple[object, int]:
    """``x (r, s)`` as a ``flint.fmpz_mat`` ``K`` and ``E`` with ``x = K·2^E`` exactly."""
    import flint

    k, E = _ints(x)
    r, s = np.shape(x)
    return flint.fmpz_mat(r, s, k), E


# ---------------------------------------------------------------------------------------------
# The checks


def _slope(act: str | None) -> Fraction | None:
    """The odd slope ``c`` (``σ(z) − σ(−z) = c z``): 1 without a name, else the declared one."""
    return Fraction(1) if act is None else activations.get(act).odd_slope


def _sum_of_squares(P: list[int], ep: int, ka: list[int], ea: int, c: Fraction) -> Fraction:
    """``Σ_j (c·P_j·2^ep + a_j·2^ea)²`` exactly: on the common exponent ``E = min(ep, ea)`` each term is
    ``2^E (c_num·P_j' + c_den·a_j') / c_den``, so the sum is one integer sum, scaled once."""
    E = min(ep, ea)
    cn, cd, sp, sa = c.numerator, c.denominator, ep - E, ea - E
    return _frac(sum((cn * (p << sp) + cd * (a << sa)) ** 2 for p, a in zip(P, ka)), 2 * E) / (cd * cd)


def _miss_of_set(U, D, A, S, c: Fraction, miss_bound: float, budget: int) -> Step:
    """``‖c·W_down[:,S] W_up[S,:] + A‖_F ≤ miss_bound``: exact up to :data:`EXACT_MAX` multiply-adds, else
    enclosed in float64 (confirmed, refuted, or unchecked between the bounds): from exact products of the
    operands' pieces (:func:`~absorbjax._verify_float.miss_bounds`, as tight as the value), or where a
    subnormal or an overflow rules them out, a priori."""
    d = U.shape[1]
    u, dd = np.asarray(U[S], np.float64), np.asarray(D[:, S], np.float64)
    if d * d * max(len(S), 1) <= 32 * budget:
        import flint

        (Ku, eu), (Kd, ed), (ka, ea) = (
            _fmpz(u) if len(S) else (flint.fmpz_mat(0, d), 0),
            _fmpz(dd) if len(S) else (flint.fmpz_mat(d, 0), 0),
            _ints(A),
        )
        P = [int(v) for v in (Kd * Ku).entries()] if len(S) else [0] * (d * d)
        total = _sum_of_squares(P, ed + eu, ka, ea, c)
        ok = miss_bound >= 0 and total <= Fraction(miss_bound) ** 2
        return Step(
            "miss of S", ok, f"‖c·W_down[:,S] W_up[S,:] + A‖_F² = {float(total):.6g} (exact), bound {miss_bound!r}²"
        )
    enclosed_miss = miss_bounds(u, dd, A, c)
    if enclosed_miss is not None:
        low, up = enclosed_miss
        ok = enclosed(up <= miss_bound, low <= miss_bound)
        how = "float64, exact products of the operands' pieces"
        return Step("miss of S", ok, f"{low:.6g} <= ‖M_S‖_F <= {up:.6g} ({how}), bound {miss_bound!r}")
    with np.errstate(all="ignore"):
        cf = float(c)
        M = cf * (dd @ u) + A
        mag = np.abs(dd) @ np.abs(u)
        k = len(S)
        err = (gamma(k + 4) * (abs(cf) + 1) * mag * (1 + gamma(k)) + 2 * _U * np.abs(A)) * (1 + 4 * _U)
        err += (k + 4) * _ETA * (abs(cf) + 2)
        up = norm_up((np.abs(M) + err) * (1 + 2 * _U))
        low = norm_down(np.maximum(np.abs(M) - err * (1 + 2 * _U), 0.0) * (1 - 2 * _U))
    if not math.isfinite(up):
        return Step("miss of S", None, "float64 overflowed and the exact product is beyond EXACT_MAX")
    ok = enclosed(up <= miss_bound, low <= miss_bound)  # the a priori bounds enclose the exact ‖M_S‖_F
    return Step("miss of S", ok, f"{low:.6g} <= ‖M_S‖_F <= {up:.6g} (float64, a priori bounds), bound {miss_bound!r}")


def _sigma_min_at_least(A, s: Fraction) -> Step:
    """``σ_min(A) > s``: ``AᵀA − s² I`` positive definite (every leading minor positive, exactly), ``d ≤ 64``."""
    d = A.shape[0]
    if s == 0:
        return Step("rule (E)", True, "miss_bound = 0: nothing to bound")
    if np.array_equal(A, np.eye(d)):
        return Step("rule (E)", s <= 1, f"σ_min(I) = 1 >= miss_bound/skip_rtol = {float(s):.6g}")
    if d > 64:
        return Step("rule (E)", None, f"σ_min(A) >= {float(s):.6g} not checked (d = {d} > 64)")
    import flint

    K, E = _fmpz(A)
    scale, s2 = _frac(1, 2 * E), s * s
    G = flint.fmpq_mat(K.transpose() * K) * flint.fmpq(scale.numerator, scale.denominator)
    for i in range(d):  # AᵀA − s² I
        G[i, i] -= flint.fmpq(s2.numerator, s2.denominator)
    minors = (flint.fmpq_mat(k, k, [G[i, j] for i in range(k) for j in range(k)]).det() for k in range(1, d + 1))
    ok = all(m > 0 for m in minors)
    return Step(
        "rule (E)", ok, f"AᵀA − s² I positive definite for s = miss_bound/skip_rtol = {float(s):.6g} (exact minors)"
    )


def _offset(D, S, bias, out_bias, c: Fraction, offset_bound, budget: int) -> Step:
    """The absorber's output bias ``e = c_out + c·W_down[:,S] b[S]``, rounded to float64, is within
    ``offset_bound`` of the exact one."""
    d = D.shape[0]
    b = np.zeros(D.shape[1]) if bias is None else np.asarray(bias, np.float64)
    e0 = np.zeros(d) if out_bias is None else np.asarray(out_bias, np.float64)
    if d * len(S) > budget:
        return Step("offset", None, f"the exact output bias needs d·|S| = {d * len(S)} > EXACT_MAX products")
    kd, ed = _ints(np.asarray(D[:, S], np.float64))
    kb, eb = _ints(b[S])
    k0, e00 = _ints(e0)
    err2 = Fraction(0)
    for r in range(d):
        exact = _frac(k0[r], e00) + c * _frac(sum(kd[r * len(S) + j] * kb[j] for j in range(len(S))), ed + eb)
        err2 += (Fraction(float(exact)) - exact) ** 2  # float(Fraction) rounds correctly
    bound = Fraction(offset_bound if offset_bound is not None else 0.0)
    return Step(
        "offset", err2 <= bound * bound, f"‖round(e) − e‖² = {float(err2):.3g} (exact), offset_bound {offset_bound!r}"
    )


def _line(U, D, A, act, ln) -> list[Step]:
    """The line theorem's absorber (``d = 1``): ``max |g(±1) − f(±1)| ≤ miss_bound``, exactly."""
    c = _slope(act)
    entry = None if act is None else activations.get(act)
    if entry is None or not (entry.kink and entry.builtin) or c is None:
        return [Step("line theorem", False, f"{act!r} is not a built-in kink activation (relu, leaky_relu)")]
    p, q = Fraction(1), c - 1
    ku, eu = _ints(U)
    kd, ed = _ints(D)
    (ka,), ea = _ints(A)

    def f(sign: int) -> Fraction:
        tot = sign * _frac(ka, ea)
        for ui, vi in zip(ku, kd):
            z = sign * _frac(ui, eu)
            tot += _frac(vi, ed) * (p * z if z >= 0 else q * z)
        return tot

    a1, a2 = (Fraction(x) for x in ln["alpha"])
    miss = max(abs(a1 * p - a2 * q - f(1)), abs(-a1 * q + a2 * p - f(-1)))
    ok = miss <= Fraction(ln["miss_bound"]) and U.shape[0] >= 2
    return [Step("line theorem", ok, f"max |g(±1) − f(±1)| = {float(miss):.3g} (exact), bound {ln['miss_bound']!r}")]


def _witness(U, D, A, c: Fraction, Z, claimed: float | None, threshold: float, budget: int) -> Step:
    """Bound (D) at the witness ``Z (d, d)``: every ``m ∈ [0,1]^n`` has ``‖Σ m_i M_i + A/c‖_F ≥
    (⟨Z, A/c⟩ + Σ_i min(0, W_down[:,i]ᵀ Z W_up[i,:]ᵀ)) / ‖Z‖_F``; checked against the claimed value
    (for ``c = 1``) and above the threshold of rule (★) and 0."""
    n, d = U.shape
    Z = np.asarray(Z, np.float64)
    kz, ez = _ints(Z)
    ka, ea = _ints(A)
    # every term of each sum has the same exponent: the integers are summed exactly, then scaled once
    za = _frac(sum(x * y for x, y in zip(kz, ka)), ez + ea) / c
    zz = _frac(sum(x * x for x in kz), 2 * ez)
    if n * d * d <= budget:
        import flint

        Kz = flint.fmpz_mat(d, d, kz)
        Ku, eu = _fmpz(np.asarray(U, np.float64))
        kd, ed = _ints(np.asarray(D, np.float64))
        P = [int(v) for v in (Kz * Ku.transpose()).entries()]  # Z W_upᵀ (d, n), exponent ez + eu
        zi = [sum(kd[a * n + i] * P[a * n + i] for a in range(d)) for i in range(n)]
        low = high = _frac(sum(min(0, v) for v in zi), ed + ez + eu)
        how = "exact"
    else:
        bounds, how = float_bounds(U, D, Z), "float64, a priori bounds"
        if bounds is None:
            return Step("no S (witness)", None, "bound (D) overflowed float64 and n·d² exceeds EXACT_MAX")
        low, high = bounds
    # bound (D) at Z is (za + Σ) / √zz with Σ between low and high (equal where exact)
    lo, hi = za + low, za + high
    if zz == 0:
        return Step("no S (witness)", False, "the witness Z is zero: bound (D) says nothing")
    if hi <= 0:
        return Step("no S (witness)", False, f"bound (D) at the witness is not positive ({how})")
    if lo <= 0:
        why = f"bound (D) at the witness is at most {math.sqrt(hi * hi / zz):.6g}, its lower bound not positive ({how})"
        return Step("no S (witness)", None, why)
    claim = Fraction(claimed) if claimed is not None and c == 1 else Fraction(0)  # c ≠ 1: A/c was rounded
    thr2 = Fraction(threshold) ** 2

    def holds(num: Fraction) -> bool:  # above the threshold of rule (★) and at least the claim
        return num * num > thr2 * zz and num * num >= claim * claim * zz

    ok = enclosed(holds(lo), holds(hi))
    value = math.sqrt(lo * lo / zz)  # for the message only
    return Step(
        "no S (witness)",
        ok,
        f"bound (D) at Z: every S misses by >= {value:.6g} ({how}); claimed {claimed!r}, threshold {threshold!r}",
    )


def _rebuilt(U, D, A, point) -> np.ndarray:
    """The test matrix ``A + Σ_i c_i W_down[:,i] W_up[i,:]`` for the box point ``c = point`` ``(n,)``,
    in float64 (any matrix is a valid test for bound (D); its rounding only moves the bound)."""
    n, d = U.shape
    Z, c = np.array(A, np.float64), np.asarray(point, np.float64)
    with np.errstate(all="ignore"):
        for s in range(0, n, max(1, _WINDOW // d)):
            w = slice(s, s + max(1, _WINDOW // d))
            Z += (np.asarray(D[:, w], np.float64) * c[w]) @ np.asarray(U[w], np.float64)
            release(U[w])
            release(D[:, w])
    return Z


def _solve(U, D, A, c: Fraction, budget: int) -> Step | None:
    """Whether ``Σ m_i M_i = −A/c`` has a 0/1 solution, by exact row reduction of the ``d² × n`` system
    and enumeration of its free variables (``None`` when too large for :data:`EXACT_MAX`, :data:`FREE_MAX`)."""
    import flint

    n, d = U.shape
    if d * d * n * (n + 1) > budget:
        return None
    ku, eu = _ints(U)
    kd, ed = _ints(D)
    ka, ea = _ints(A)
    scale = _frac(1, ed + eu)
    rows = []
    for a in range(d):
        for b in range(d):
            coef = [flint.fmpq(kd[a * n + i] * ku[i * d + b]) for i in range(n)]
            rhs = -_frac(ka[a * d + b], ea) / c / scale
            rows += coef + [flint.fmpq(rhs.numerator, rhs.denominator)]
    R, rank = flint.fmpq_mat(d * d, n + 1, rows).rref()
    pivots = []
    for r in range(rank):
        j = next(j for j in range(n + 1) if R[r, j] != 0)
        if j == n:
            return Step("no S (exact solve)", True, "Σ m_i M_i = −A/c has no real solution (exact row reduction)")
        pivots.append(j)
    free = [j for j in range(n) if j not in pivots]
    if len(free) > FREE_MAX:
        return None
    for bits in itertools.product((0, 1), repeat=len(free)):
        if all(
            (v := R[r, n] - sum((R[r, f] for f, x in zip(free, bits) if x), flint.fmpq(0))) == 0 or v == 1
            for r in range(rank)
        ):
            S = sorted(
                pivots[r]
                for r in range(rank)
                if R[r, n] - sum((R[r, f] for f, x in zip(free, bits) if x), flint.fmpq(0)) == 1
            )
            S += [f for f, x in zip(free, bits) if x]
            return Step("no S (exact solve)", False, f"S = {sorted(S)} solves Σ_(i∈S) M_i = −A/c exactly")
    return Step(
        "no S (exact solve)", True, f"no 0/1 solution: rank {rank}, 2^{len(free)} free assignments enumerated (exact)"
    )


def _canonical(rows: list[list[int]]) -> list[tuple | None]:
    """Each integer row divided by the gcd of its entries, the first nonzero entry made positive
    (``None`` for a zero row): two rows are parallel exactly when their forms are equal."""
    out = []
    for r in rows:
        g = math.gcd(*r)
        if g == 0:
            out.append(None)
            continue
        first = next(v for v in r if v)
        g = g if first > 0 else -g
        out.append(tuple(v // g for v in r))
    return out


def _hypotheses(U, D, bias, budget: int) -> tuple[list[str], bool] | None:
    """The hypotheses of Thm 8/10, exactly: ``(failures, distinct)``, ``distinct`` whether every
    parallel pair has distinct kink hyperplanes (``(w_i, b_i)`` non-proportional) with a bias; ``None``
    when ``n·d`` exceeds :data:`EXACT_MAX`."""
    n, d = U.shape
    if n * d > budget:
        return None
    ku, _ = _ints(U)
    rows = [ku[i * d : (i + 1) * d] for i in range(n)]
    forms = _canonical(rows)
    fails = [f"row {i} of W_up is zero" for i, f in enumerate(forms) if f is None]
    Dz = np.asarray(D, np.float64)
    fails += [f"column {i} of W_down is zero" for i in np.flatnonzero(~np.any(Dz != 0, axis=0)).tolist()]
    seen: dict[tuple, int] = {}
    pairs = []
    for i, f in enumerate(forms):
        if f is not None:
            if f in seen:
                pairs.append((seen[f], i))
            seen.setdefault(f, i)
    fails += [f"rows {i} and {j} of W_up are parallel" for i, j in pairs]
    distinct = False
    if pairs and bias is not None:
        kb, _ = _ints(np.concatenate([np.asarray(U, np.float64), np.asarray(bias, np.float64)[:, None]], axis=1))
        wb = _canonical([kb[i * (d + 1) : (i + 1) * (d + 1)] for i in range(n)])
        distinct = len({f for f in wb if f is not None}) == sum(f is not None for f in wb)
    return fails, distinct


def _theorems(act: str | None, biased: bool, paper: bool, parallel: bool) -> set[str]:
    """The theorems that turn "no S" into "no absorber" for this block: ``paper`` whether the paper's
    theorems' frame holds (``n ≥ d ≥ 2``, ``A`` invertible); ``parallel`` whether rows are parallel
    (with distinct kink hyperplanes, only the kink theorem covers that)."""
    if act is None:
        out = {_UNNAMED_KINK} | ({_UNNAMED_RAY} if paper else set())
        return out | ({_UNNAMED_PAPER} if paper and not biased else set())
    e = activations.get(act)
    if e.gated or e.family == "homogeneous" or e.odd_slope is None:
        return set()
    if parallel:
        return {KINK_THEOREM} if e.kink and biased else set()
    out = {KINK_THEOREM} if e.kink else set()
    out |= {RAY_LIMIT_KINK_THEOREM} if e.ray_limit is not None else set()
    if paper and not biased and e.paper_theorem is not None:
        out.add(e.paper_theorem)
    if paper and e.ray_limit == "relu":
        out.add(RAY_LIMIT_THEOREM)
    return out


def _invertible(A) -> bool | None:
    """``det A ≠ 0`` exactly (``None`` for ``d > 512``)."""
    d = A.shape[0]
    if np.array_equal(A, np.eye(d)):
        return True
    if d > 512:
        return None
    K, _ = _fmpz(A)
    return K.det() != 0


def _absence(U, D, A, get, c: Fraction, hyp, budget: int) -> list[Step]:
    """ "No exact S", the hypotheses and the theorem, for ``not_absorbable`` and ``degenerate``."""
    n, d = U.shape
    status, ev = get("status"), get("evidence") or {}
    steps = []
    if get("method") == "rank":
        if d > 512:
            steps.append(Step("no S (rank)", None, f"the exact rank of A needs d <= 512 (d = {d})"))
        else:
            r = _fmpz(A)[0].rank()
            steps.append(
                Step(
                    "no S (rank)",
                    r > n,
                    f"rank A = {r} (exact) against n = {n}: rank c·W_down[:,S] W_up[S,:] <= |S| <= n",
                )
            )
    elif ev.get("witness") is not None:
        steps.append(_witness(U, D, A, c, ev["witness"], ev.get("witness_bound"), get("threshold"), budget))
    elif ev.get("witness_point") is not None and len(ev["witness_point"]) == n:  # any Z is a test: no claim
        steps.append(
            _witness(U, D, A, c, _rebuilt(U, D, A / float(c), ev["witness_point"]), None, get("threshold"), budget)
        )
    else:
        solved = _solve(U, D, A, c, budget)
        why = "no witness in the certificate and the exact system is too large"
        steps.append(solved if solved is not None else Step("no S", None, why))
    if hyp is None:
        steps.append(Step("hypotheses", None, f"n·d = {n * d} > EXACT_MAX for the exact parallel-row test"))
        return steps
    fails, distinct = hyp
    if status == "degenerate":
        steps.append(
            Step("hypotheses", bool(fails), "fail: " + "; ".join(fails[:3]) if fails else "all hold: not degenerate")
        )
        return steps
    only_parallel = bool(fails) and all("parallel" in f for f in fails)
    if fails and not (only_parallel and distinct):
        return steps + [Step("hypotheses", False, "fail: " + "; ".join(fails[:3]))]
    steps.append(Step("hypotheses", True, "hold (exact)" if not fails else "parallel rows, distinct kink hyperplanes"))
    inv = _invertible(A)
    if inv is None:
        return steps + [Step("theorem", None, f"invertibility of A not checked (d = {d} > 512)")]
    paper = n >= d >= 2 and inv
    cited = (get("theorem") or "").split(_DECLARED)[0]
    valid = _theorems(get("activation"), get("biased"), paper, bool(fails))
    steps.append(Step("theorem", cited in valid, f"{cited!r} cited; valid here: {sorted(valid)}"))
    return steps


def verify(certificate, params=None, *, skip=None, bias=None, out_bias=None, budget: int = EXACT_MAX) -> Verification:
    """Check a certificate of :func:`absorbjax.find_absorbing_set`, :func:`absorbjax.condition.min_extra_width`
    (``absorbjax/_verify_width.py``) or :func:`absorbjax.dimension.certify` (``absorbjax/_verify_depth.py``),
    independently.

    Args:
      certificate: a :class:`~absorbjax.condition.Certificate`, ``WidthCertificate`` or
        ``DepthCertificate``, or its ``to_dict()`` (the JSON).
      params: the block's ``MLPParams`` (``up`` = ``W_up (n, d)``, ``down`` = ``W_down (d, n)``), any
        real dtype, memory maps read in blocks; or a pair ``(up, down)``. Not read for a depth
        certificate (its rational point is in it).
      skip, bias, out_bias: the skip ``A (d, d)``, hidden bias ``(n,)`` and output bias ``(d,)`` given to
        the decision (``None``: ``I``, none, none).
      budget: multiply-adds done in exact arithmetic (default :data:`EXACT_MAX`); beyond it float64
        with error bounds, or the step is ``unchecked``.

    Returns:
      a :class:`Verification`: ``"verified"``, ``"refuted"`` (``.failed`` is the step) or
      ``"unchecked"`` (a needed step was beyond the checker's budget or had no evidence).

    Examples:
      >>> import numpy as np
      >>> from absorbjax import condition, models, verify
      >>> U = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
      >>> D = np.array([[-1.0, 0.0, 0.5], [0.0, -1.0, 0.25]])
      >>> cert = condition.find_absorbing_set(models.MLPParams(U, D), "relu")
      >>> cert.status, verify(cert, models.MLPParams(U, D)).verdict
      ('absorbable', 'verified')
    """
    if not isinstance(certificate, Mapping):  # read what the JSON says: the one form checked
        certificate = certificate.to_dict()
    get = certificate.get
    depth = get("free_bound") is not None  # a depth certificate: the point is in it
    if params is None and not depth:
        raise ValueError("verify needs the block's params for a block or width certificate")
    up, down = (None, None) if depth else (params.up, params.down) if hasattr(params, "up") else params
    U, D = (None, None) if depth else (np.asarray(up), np.asarray(down))
    try:
        return _checked(get, U, D, skip, bias, out_bias, budget)
    except (TypeError, ValueError, AttributeError, OverflowError, KeyError) as err:  # e.g. a JSON edited by hand
        return Verification(REFUTED, str(get("status")), (Step("format", False, f"a field does not parse: {err}"),))


def _checked(get, U, D, skip, bias, out_bias, budget: int) -> Verification:
    """:func:`verify`'s steps; a field of the wrong kind raises (``verify`` refutes it at "format")."""
    if U is None:
        return _conclude(str(get("status")), check_depth(get))
    if get("absorber") is not None:  # a width certificate
        steps = check_width(get, U, D, skip, budget, lambda c: verify(c, (U, D), skip=skip, budget=budget))
        return _conclude(str(get("status")), steps)
    ev = get("evidence")
    n, d = U.shape
    status = str(get("status"))
    A = np.eye(d) if skip is None else np.asarray(skip, np.float64)
    bias = None if bias is None or not np.any(np.asarray(bias) != 0) else np.asarray(bias, np.float64)
    steps = [_shape_step(get, n, d)]
    claimed = (ev or {}).get("fingerprint")
    steps.append(
        fingerprint_step(
            claimed and fingerprint(U, D, skip, bias, out_bias, dtypes=dtypes_of(get("stored_dtype"))), claimed
        )
    )
    c = _slope(get("activation"))
    if status == "undecided":
        steps.append(Step("status", True, "undecided claims nothing"))
    elif c is None:
        steps.append(Step("odd slope", False, f"{get('activation')} declares no odd slope: no status but undecided"))
    elif status == "absorbable" and get("line") is not None:
        ln = get("line")
        steps += (
            _line(U, D, A, get("activation"), ln)
            if d == 1 and bias is None
            else [Step("line theorem", False, "needs d = 1 and no hidden bias")]
        )
    elif status == "absorbable":
        S = np.asarray(get("S") if get("S") is not None else [], np.int64)
        if S.size != np.unique(S).size or (S.size and not (0 <= S.min() and S.max() < n)):
            steps.append(Step("S", False, f"S is not a set of units 0..{n - 1}"))
        else:
            mb, sr = get("miss_bound"), get("skip_rtol")
            steps.append(_miss_of_set(U, D, A, S, c, mb, budget))
            steps.append(
                _sigma_min_at_least(A, Fraction(mb) / Fraction(sr))
                if sr
                else Step("rule (E)", mb == 0, f"skip_rtol 0 needs miss_bound 0, got {mb!r}")
            )
            if bias is not None or out_bias is not None:
                steps.append(_offset(np.asarray(D, np.float64), S, bias, out_bias, c, get("offset_bound"), budget))
    elif status in ("not_absorbable", "degenerate"):
        steps += _absence(
            np.asarray(U),
            np.asarray(D),
            A,
            lambda k: ev if k == "evidence" else get(k),
            c,
            _hypotheses(U, D, bias, budget),
            budget,
        )
    else:
        steps.append(Step("status", False, f"unknown status {status!r}"))
    return _conclude(status, steps)


def _conclude(status: str, steps: list[Step]) -> Verification:
    """Refuted when a step failed, verified when every step (a missing fingerprint aside) passed."""
    oks = [s.ok for s in steps if s.name != "fingerprint" or s.ok is not None]
    verdict = REFUTED if False in oks else VERIFIED if all(oks) else UNCHECKED
    return Verification(verdict, status, tuple(steps))


def _shape_step(get, n: int, d: int) -> Step:
    ok = (get("n"), get("d")) == (n, d)
    return Step("shape", ok, f"certificate for d = {get('d')}, n = {get('n')}; block d = {d}, n = {n}")
