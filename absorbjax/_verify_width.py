"""An independent check of a width certificate (:func:`absorbjax.condition.min_extra_width`), for
:func:`absorbjax.verify`.

Written anew beside the decision and importing nothing from ``condition``, ``dimension`` or ``fit`` (a
test reads its imports). Everything is recomputed from the stored floats of ``W_up (n, d)``,
``W_down (d, n)``, ``A (d, d)`` in exact rationals; the certificate supplies the claim (``lower``,
``upper``, ``k``), the absorber ``V`` of width ``n + upper``, ``tol``, ``rtol`` and ``basis``. With
``σ(z) = z/2 + E(z)``, ``E`` even (``docs/theory/width.md``):

- *atoms*: units grouped exactly (ReLU: rows on one line, ``w_i = t_i r`` with ``r`` the primitive
  integer direction; otherwise rows equal up to sign), merged (``ũ = Σ |t_i| u_i``, ``A' = A + Σ_{t_i<0}
  t_i u_i rᵀ``), atoms with ``ũ = 0`` dropped: ``L`` live atoms, compared with the certificate's;
- *upper*: ``f − g = R x + Σ_r e_r E(r·x)`` with ``R = A + (W_down W_up − V_down V_up)/2`` and ``e_r``
  the even coefficients' difference per atom, exactly; ``|E(z)| ≤ E0 + |z|/2`` (``E0 = 0`` but for
  softplus, :data:`_E0`) gives ``‖f(x) − g(x)‖ ≤ (‖R‖_F + ½ Σ_r ‖e_r‖‖r‖)‖x‖ + E0 Σ_r ‖e_r‖``, both
  terms at most ``tol``, itself at most rule (★)'s bound ``(rtol + 4γ_{n+1})(1 + γ_{n+1})‖|W_down||W_up| + |A|‖_F + (n+2)d·2^-1074``;
- *basis*: ``L`` and ``rank_bound`` recomputed, ``lower ≤ max(0, L + k_red − n)``;
- *lower* (ReLU, GELU): first the certificate's own ``S, G`` and ``S = ∅`` with ``G`` a basis, exact
  witnesses (one narrower than the claim refutes it; ``lower = 1`` may rest on the cited, verified
  ``not_absorbable`` block certificate); then for every ``S ⊆`` atoms (screened in float64 with error
  bounds by :mod:`absorbjax._verify_sets`, which proves ``ρ_S = d`` for most; the rest, at most
  :data:`LOWER_MAX`, counted exactly), ``ρ_S`` = the number of singular values of
  ``M_S = A' + Ũ_S Ŵ_S`` above the threshold (0: the exact rank; ``tol``: counted exactly as the sign
  changes of the characteristic polynomial of ``M_Sᵀ M_S − tol² I``, real-rooted, by Descartes' rule),
  ``|G| + 2p ≥ ρ_S`` (``≥ 2ρ_S − rank Ŵ`` above ``rank Ŵ``); an ``S`` below the claim is refined over
  ``G`` (exact weights by flats ``P ⊇`` rowspace ``M_S``, float weights with exact projectors); then
  ``k* ≥ L + min_S … − n``. gelu_tanh, silu, softplus: the ReLU bound on the same weights, by their
  declared ray limit.

Not checked: ``error`` (sampled); a lower bound that leaves more than :data:`LOWER_MAX` sets after the
screen (``unchecked``).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from absorbjax import _verify_sets, activations
from absorbjax._fingerprint import fingerprint
from absorbjax._verify_float import ETA, gamma
from absorbjax._verify_step import Step, fingerprint_step

LOWER_MAX = 2**12  # sets S whose ranks are counted exactly (beyond: unchecked)
SCREEN_MAX = 2**20  # sets S screened in float64 (beyond: a head of the atoms, the tail bounded)


def _frac_rows(X) -> list[list[Fraction]]:
    return [[Fraction(float(v)) for v in row] for row in np.asarray(X, np.float64)]


def _direction(w: list[Fraction], act: str) -> tuple[tuple, list[Fraction], Fraction]:
    """``(key, r, t)`` with ``w = t r``: ReLU ``r`` the primitive integer vector on ``w``'s line (first
    nonzero entry positive); otherwise ``r = ±w`` (first nonzero entry positive), ``t = ±1``."""
    first = next(v for v in w if v)
    if act == "relu":
        scale = math.lcm(*(v.denominator for v in w))
        ints = [int(v * scale) for v in w]
        g = math.gcd(*ints) * (1 if first > 0 else -1)
        r = [Fraction(v // g) for v in ints]
        return tuple(r), r, first / next(v for v in r if v)
    sign = 1 if first > 0 else -1
    r = [sign * v for v in w]
    return tuple(r), r, Fraction(sign)


def _groups(U, D, act: str) -> dict:
    """Units grouped by atom, in order of first unit: ``key -> (r, units, t's)``; zero rows left out
    where ``σ(0) = 0`` (all but softplus, whose zero rows are the constant ``E(0)``: key ``()``)."""
    out: dict = {}
    for i, w in enumerate(_frac_rows(U)):
        if any(w) or act == "softplus":
            key, r, t = _direction(w, act) if any(w) else ((), w, Fraction(1))
            out.setdefault(key, (r, [], []))
            out[key][1].append(i)
            out[key][2].append(t)
    return out


def _even(U, D, act: str) -> dict:
    """``key -> (r, c)``: the even part ``Σ_r c_r E(r·x)`` of ``x ↦ W_down σ(W_up x)`` (``c_r = Σ |t_i| u_i``)."""
    cols = [[Fraction(float(v)) for v in col] for col in np.asarray(D, np.float64).T]
    out = {}
    for key, (r, units, ts) in _groups(U, D, act).items():
        out[key] = (r, [sum(abs(t) * cols[i][a] for i, t in zip(units, ts)) for a in range(len(r))])
    return out


def _atoms(U, D, A, act: str):
    """``(groups, Ŵ rows, Ũ columns, A')`` of the live atoms, exactly."""
    d = U.shape[1]
    cols = [[Fraction(float(v)) for v in col] for col in np.asarray(D, np.float64).T]
    Ap = _frac_rows(A)
    groups, W, Uc = [], [], []
    for r, units, ts in _groups(U, D, act).values():
        for i, t in zip(units, ts):
            if t < 0:
                for a in range(d):
                    for b in range(d):
                        Ap[a][b] += t * cols[i][a] * r[b]
        u = [sum(abs(t) * cols[i][a] for i, t in zip(units, ts)) for a in range(d)]
        if any(u):
            groups.append(units)
            W.append(r)
            Uc.append(u)
    return groups, W, Uc, Ap


def _mat(rows: list[list[Fraction]]):
    import flint

    r, c = len(rows), len(rows[0]) if rows else 0
    return flint.fmpq_mat(r, c, [flint.fmpq(v.numerator, v.denominator) for row in rows for v in row])


def _rank_above(M, thr: Fraction) -> int:
    """The number of singular values of ``M`` above ``thr``: the exact rank for ``thr = 0``, else the
    positive eigenvalues of ``MᵀM − thr² I``, counted exactly by Descartes' rule (its characteristic
    polynomial is real-rooted)."""
    import flint

    if thr == 0:
        return M.rank()
    G = M.transpose() * M
    t2 = flint.fmpq(thr.numerator, thr.denominator) ** 2
    for i in range(G.nrows()):
        G[i, i] -= t2
    signs = [c > 0 for c in G.charpoly().coeffs() if c != 0]
    return sum(a != b for a, b in zip(signs, signs[1:]))


def _sqrt_up(x: Fraction) -> Fraction:
    return Fraction(math.sqrt(float(x)) * (1 + 2.0**-50) + 2.0**-1000)


def _tol_bound(U, D, A, rtol: float) -> float:
    """Rule (★)'s Frobenius bound at ``rtol`` (``docs/theory/certificates.md``), evaluated with slack."""
    n, d = U.shape
    g = gamma(n + 1)
    r = rtol + 4 * g
    return (r * (1 + g) * float(np.linalg.norm(np.abs(D) @ np.abs(U) + np.abs(A))) + (n + 2) * d * ETA) * (1 + 1e-9)


# ``|E(z)| ≤ E0 + |z|/2`` for ``E(z) = σ(z) − z/2``: relu ``|z|/2``; gelu ``z (Φ(z) − ½)``; silu
# ``(z/2) tanh(z/2)``; gelu_tanh ``(z/2) tanh(√(2/π)(z + 0.044715 z³))``; softplus ``log(2 cosh(z/2))``,
# between ``log 2`` and ``log 2 + |z|/2`` (``E0 = 0.7 > log 2``).
_E0 = {"relu": 0, "gelu": 0, "silu": 0, "gelu_tanh": 0, "softplus": Fraction(7, 10)}


def _upper(U, D, A, V, act: str, width: int, tol: float) -> Step:
    """The absorber ``V`` has width ``n + upper`` and ``‖f(x) − g(x)‖ ≤ a‖x‖ + b`` for every ``x`` with
    ``a = ‖R‖_F + ½ Σ_r ‖e_r‖‖r‖ ≤ tol`` and ``b = E0 Σ_r ‖e_r‖ ≤ tol`` (``b = 0`` but for softplus)."""
    Vu, Vd = np.asarray(V["up"], np.float64), np.asarray(V["down"], np.float64)
    d = U.shape[1]
    if Vu.shape != (width, d) or Vd.shape != (d, width) or not (np.all(np.isfinite(Vu)) and np.all(np.isfinite(Vd))):
        return Step("upper (absorber)", False, f"the absorber is {Vu.shape}, {Vd.shape}, not width n + upper = {width}")
    if act not in _E0:
        return Step("upper (absorber)", None, f"no bound on the even part of {act}")
    R = (
        _mat(_frac_rows(A))
        + (_mat(_frac_rows(D)) * _mat(_frac_rows(U)) - _mat(_frac_rows(Vd)) * _mat(_frac_rows(Vu))) / 2
    )
    a = _sqrt_up(sum((Fraction(int(v.p), int(v.q)) ** 2 for v in R.entries()), Fraction(0)))
    f, g = _even(U, D, act), _even(Vu, Vd, act)
    b, misses = Fraction(0), 0
    for key in set(f) | set(g):
        r = (f.get(key) or g[key])[0]
        cf, cg = (h[key][1] if key in h else [0] * d for h in (f, g))
        e = _sqrt_up(sum((x - y) ** 2 for x, y in zip(cf, cg)))
        if e:
            misses += 1
            a += e * _sqrt_up(sum(v * v for v in r)) / 2
            b += e * _E0[act]
    ok = a <= Fraction(tol) and b <= Fraction(tol)
    what = f"‖f(x) − g(x)‖ <= {float(a):.3g}‖x‖" + (f" + {float(b):.3g}" if b else "")
    return Step("upper (absorber)", ok, f"width {width}: {what} (exact, {misses} even misses), tol {tol:.3g}")


def _lower(n: int, atoms, lower: int, thr: Fraction, budget: int, cited: bool, named) -> Step:
    """``k* ≥ lower`` for ReLU/GELU: ``L + min_S lb(S) − n ≥ lower`` over every ``S`` (module docstring),
    ``atoms`` from :func:`_atoms`; ``cited``: the certificate cites a verified ``not_absorbable`` block
    certificate of this block; ``named``: the certificate's construction ``(S, G)`` as unit indices,
    tried first as a witness."""
    groups, W, Uc, Ap = atoms
    d = len(Ap)
    L = len(groups)
    need = lower + n - L  # the reduced cost every S, G must reach
    if lower <= 0 or need <= 0:
        return Step("lower", True, f"k* >= {lower}: trivially ({L} live atoms of {n} units)")
    atom = {int(i): a for a, units in enumerate(groups) for i in units}
    for S, G in [[sorted({atom[int(i)] for i in x if int(i) in atom}) for x in named], ([], _independent(W, d))]:
        cost = _exact_cost(Ap, W, Uc, S, G) if not set(S) & set(G) else need
        if cost < need:  # an exact construction narrower than the claim
            return Step(
                "lower", False, f"S = {S}, G = {G}: |G| + 2p = {cost} < {need} (exact), width n + {L + cost - n}"
            )
    if lower == 1 and cited and L == n:
        return Step("lower", True, "k* >= 1: the cited block certificate (not_absorbable, verified) rules out width n")
    rank_W = _mat(W).rank() if thr == 0 else min(L, d)

    def lb(rho: int) -> int:  # |G| + 2p over every G when rank M_S = rho
        return rho if rho <= rank_W else 2 * rho - rank_W

    sets, screened = _unscreened(Ap, W, Uc, thr, need, lb(d), lb(1))
    if sets is None:
        return Step("lower", None, screened)
    base, outer = _mat(Ap), [_mat([[u * w for w in W[a]] for u in Uc[a]]) for a in range(L)]
    tried = 0
    for S in sets:
        M = base
        for a in S:
            M = M + outer[a]
        rho = _rank_above(M, thr)
        if lb(rho) >= need:
            continue
        rest = [a for a in range(L) if a not in S]
        short, tried = (
            ((None, []), tried)
            if 2 * rho < need
            else (_flats if thr == 0 else _refine)(M, rho, rest, W, thr, need, tried)
        )  # G = ∅ (p = ρ) falls short at once
        if tried > budget // d**2:
            return Step("lower", None, f"S = {S}: the refinement over G exceeds the checker's budget")
        if short is not None:  # short of the claim; a refutation only where the exact ranks agree
            cost = _exact_cost(Ap, W, Uc, S, short[1])
            why = f"S = {S}, G = {short[1]}: |G| + 2p = {cost} (exact ranks) against {need}"
            return Step(
                "lower", False if cost < need else None, why + (", a width below n + lower" if cost < need else "")
            )
    how = "exact ranks" if thr == 0 else f"singular values above {float(thr):.3g}, counted exactly"
    return Step(
        "lower", True, f"every S of {L} atoms ({screened}; {len(sets)} sets with {how}) needs |G| + 2p >= {need}"
    )


def _exact_cost(Ap, W, Uc, S: list[int], G: list[int]) -> int:
    """``|G| + 2 rank M_S (I − Π_G)`` exactly, ``= |G| + 2 (rank [M_S; Ŵ_G] − rank Ŵ_G)``: an absorber of
    width ``L + this − n`` exists (flip ``S``, duplicate ``G``, free pairs for the rest)."""
    import flint

    d = len(Ap)
    M = _mat(Ap)
    for a in S:
        M = M + _mat([[u * w for w in W[a]] for u in Uc[a]])
    WG = _mat([W[a] for a in G]) if G else flint.fmpq_mat(0, d)
    return len(G) + 2 * (flint.fmpq_mat(d + len(G), d, M.entries() + WG.entries()).rank() - WG.rank())


def _refine(M, rho: int, rest: list[int], W, thr: Fraction, need: int, tried: int) -> tuple[tuple | None, int]:
    """``((G, |G| + 2p), tried)`` for a ``G ⊆ rest`` with ``|G| + 2p < need``, ``p`` the singular values of
    ``M (I − Π_G)`` above ``thr`` (``Π_G`` exact), else ``(None, tried)``; ``tried`` counts the ``G``. Since
    ``p ≥ ρ − |G|`` (a rank-``|G|`` change), only ``2ρ − need < |G| < need`` can fall short."""
    for g in range(max(1, 2 * rho - need + 1), need):
        for G in itertools.combinations(rest, g):
            tried += 1
            p = _rank_above(M * _complement([W[a] for a in G]), thr)
            if g + 2 * p < need:
                return (None, list(G)), tried
    return None, tried


def _flats(M, rho: int, rest: list[int], W, thr: Fraction, need: int, tried: int) -> tuple[tuple | None, int]:
    """:func:`_refine` for exact ranks, by flats: ``min_G |G| + 2 rank M (I − Π_G) = min_{P ⊇ R} 2 dim P −
    rank{ŵ_a ∈ P : a ∈ rest}`` (``R`` the row space of ``M``; ``G`` a basis of the atoms in ``P``), and
    ``2 dim P − rank ≥ dim P``: only ``P = R + span T`` with ``dim P = ρ + |T| < need`` are searched."""
    import flint

    d = M.ncols()

    def rank(rows: list) -> int:
        return flint.fmpq_mat(len(rows) // d, d, rows).rank()

    R = M.entries()
    flat = {a: [flint.fmpq(v.numerator, v.denominator) for v in W[a]] for a in rest}
    outside = [a for a in rest if rank(R + flat[a]) > rho]
    for t in range(need - rho):
        for T in itertools.combinations(outside, t):
            tried += 1
            P = R + [v for a in T for v in flat[a]]
            if rank(P) != rho + t:
                continue
            inside = [a for a in rest if a in T or a not in outside or (t and rank(P + flat[a]) == rho + t)]
            G = _independent([flat[a] for a in inside], d)
            if 2 * (rho + t) - len(G) < need:
                return (None, [inside[i] for i in G]), tried
    return None, tried


def _independent(rows: list, d: int) -> list[int]:
    """Indices of a maximal independent subset of ``rows`` (greedy, in order), exactly."""
    import flint

    rows = [[flint.fmpq(v.numerator, v.denominator) for v in r] for r in rows]
    out: list[int] = []
    for i, r in enumerate(rows):
        if flint.fmpq_mat(len(out) + 1, d, [v for j in out for v in rows[j]] + r).rank() == len(out) + 1:
            out.append(i)
    return out


def _unscreened(Ap, W, Uc, thr: Fraction, need: int, lb_full: int, lb_one: int) -> tuple[list | None, str]:
    """``(the sets S left for the exact count, what the float screen proved)``; ``(None, why)`` when more
    than :data:`LOWER_MAX` are left. The screen (:mod:`absorbjax._verify_sets`) proves ``ρ_S = d`` (or
    ``ρ_S ≥ 1`` where that suffices) for the ``2^H`` sets of a head of the ``H`` atoms of largest
    ``‖ũ_a ŵ_aᵀ‖``, each with every set of the tail (bounded at once): ``H = L`` up to 16 atoms, else
    16, then up to ``log2`` :data:`SCREEN_MAX` where the tail's bound is too weak."""
    L = len(W)
    prep = _verify_sets.prepare(Ap, W, Uc) if lb_full >= need else None
    if prep is None:  # no rank alone suffices, or float64 cannot hold the weights: every set exactly
        if 2**L > LOWER_MAX:
            return None, f"2^{L} sets S, none screened: more than the checker counts exactly ({LOWER_MAX})"
        return [[a for a in range(L) if s >> a & 1] for s in range(2**L)], "no float screen"
    Of = prep[1]
    order = sorted(range(L), key=lambda a: -float(np.linalg.norm(Of[a])))
    top = SCREEN_MAX.bit_length() - 1
    why = ""
    for H in [L] if L <= 16 else [16, min(L, top)]:
        head, tail = order[:H], order[H:]
        margin = _verify_sets.tail_margin(Of, Uc, W, tail)
        failed = _failed_heads(prep, head, margin, thr, lb_one >= need, LOWER_MAX >> len(tail))
        if failed is None:
            why = f"of 2^{H} head sets{f' (a tail of {len(tail)} atoms bounded by {margin:.3g})' if tail else ''}"
            why = f"more than {LOWER_MAX >> len(tail)} {why} not proved in float64: beyond the exact count"
            continue
        what = "rank d" if lb_one < need else "rank d or 1"
        screened = f"{2**H - len(failed)} of 2^{H} sets proved of {what} in float64 with error bounds"
        if tail:
            screened += f", each with every set of a tail of {len(tail)} atoms (Weyl, {margin:.3g})"
        heads = [[head[i] for i in range(H) if f >> i & 1] for f in failed]
        tails = [[tail[i] for i in range(len(tail)) if t >> i & 1] for t in range(2 ** len(tail))]
        return [sorted(h + t) for h in heads for t in tails], screened
    return None, why


def _failed_heads(prep, head: list[int], margin: float, thr: Fraction, one: bool, most: int) -> list[int] | None:
    """The numbers of the head sets the screen did not prove; ``None`` past ``most`` of them."""
    failed: list[int] = []
    for start in range(0, 2 ** len(head), _verify_sets.CHUNK):
        stop = min(2 ** len(head), start + _verify_sets.CHUNK)
        failed += (start + np.flatnonzero(~_verify_sets.screen(prep, head, margin, thr, start, stop, one))).tolist()
        if len(failed) > most:
            return None
    return failed


def _complement(WG: list[list[Fraction]]):
    """``I − Π_G``, ``Π_G`` the orthogonal projector onto the span of the rows ``WG``, exactly."""
    import flint

    d = len(WG[0])
    R, r = _mat(WG).rref()
    B = flint.fmpq_mat(r, d, [R[i, j] for i in range(r) for j in range(d)])
    eye = flint.fmpq_mat(d, d, [int(i == j) for i in range(d) for j in range(d)])
    return eye - B.transpose() * (B * B.transpose()).inv() * B


def _claim_steps(get, U, D, A, fp: str | None) -> list[Step]:
    """The certificate's frame: its size, fingerprint (``fp``: the block's), the claim and ``tol``."""
    n, d = U.shape
    status, lower, upper, k, tol = str(get("status")), get("lower"), get("upper"), get("k"), float(get("tol"))
    claim = (k == lower == upper) if status == "certified" else (status == "undecided" and k is None)
    sizes = f"certificate for d = {get('d')}, n = {get('n')}; block d = {d}, n = {n}"
    return [
        Step("shape", (get("n"), get("d")) == (n, d), sizes),
        fingerprint_step(fp, get("fingerprint")),
        Step("claim", claim and 0 <= lower <= upper, f"{status}: k = {k}, {lower} <= k* <= {upper}"),
        Step("tol", 0 <= tol <= _tol_bound(U, D, A, float(get("rtol"))), f"tol {tol:.3g}: rule (★)'s bound at rtol"),
    ]


def _basis_step(basis: dict, n: int, atoms, lower: int) -> Step:
    """What ``lower`` rests on, as the certificate states it: ``L`` the live atoms (``atoms`` from
    :func:`_atoms`), ``rank_bound`` the exact ``rank Ŵ`` (exact weights) or ``min(L, d)``, and
    ``lower ≤ max(0, L + k_red − n)``."""
    _, W, _, Ap = atoms
    d = len(Ap)
    L, k_red = len(W), basis.get("k_red")
    rank = (_mat(W).rank() if W else 0) if basis.get("threshold") == 0 else min(L, d)
    ok = basis.get("L") == L and basis.get("rank_bound") == rank and isinstance(k_red, int)
    ok = ok and lower <= max(0, L + k_red - n)
    got = f"L = {basis.get('L')}, rank_bound = {basis.get('rank_bound')}, k_red = {k_red!r}"
    return Step("basis", ok, f"{got}; recomputed L = {L}, rank bound {rank}; lower {lower} <= max(0, L + k_red − n)")


def check_width(get, U, D, skip, budget: int, verify_block) -> list[Step]:
    """The steps of a width certificate (``get(field)`` reads it) for ``W_up = U (n, d)``, ``W_down = D
    (d, n)``, ``A = skip`` (``None``: ``I``): its frame, the absorber (upper), the atoms and the lower
    bound; ``verify_block`` checks the block certificate it cites."""
    n, d = U.shape
    A = np.eye(d) if skip is None else np.asarray(skip, np.float64)
    act, lower, tol = get("activation"), get("lower"), float(get("tol"))
    fp = get("fingerprint") and fingerprint(U, D, None if skip is None else A)
    U, D = np.asarray(U, np.float64), np.asarray(D, np.float64)
    steps = _claim_steps(get, U, D, A, fp)
    V = get("absorber")
    upper = _upper(U, D, A, V._asdict() if hasattr(V, "_asdict") else V, act, n + get("upper"), tol)
    if upper.ok is False and get("status") != "certified" and not float(get("error")) <= 1e-6:
        # the certificate itself says its float absorber misses: upper rests on the exact construction
        upper = Step(
            upper.name, None, f"{upper.detail}; not claimed (the certificate's error {get('error'):.3g} > 1e-6)"
        )
    steps.append(upper)
    if act in ("relu", "gelu"):
        atoms = _atoms(U, D, A, act)
        groups = atoms[0]
        same = sorted(map(sorted, groups)) == sorted(sorted(int(i) for i in g) for g in get("atoms"))
        steps.append(
            Step("atoms", same, f"{len(groups)} live atoms (exact); the certificate lists {len(get('atoms'))}")
        )
        basis = get("basis") or {}
        thr = basis.get("threshold")
        if thr is None or thr not in (0.0, tol) or (thr == 0) != bool(get("exact")):
            return steps + [Step("lower", None if thr is None else False, f"threshold {thr!r}: 0 (exact) or tol")]
        steps.append(_basis_step(basis, n, atoms, lower))
    else:  # by the declared ray limit: the ReLU bound on the same weights
        limit, thr = activations.get(act).ray_limit, tol
        if limit != "relu" and lower > 0:
            return steps + [Step("lower", False, f"{act} declares ray limit {limit!r}, not relu: no lower bound")]
        atoms = _atoms(U, D, A, "relu")  # the lower bound on the same weights is ReLU's
        ray = (get("basis") or {}).get("ray_limit_lower")
        steps.append(Step("basis", isinstance(ray, int) and lower <= ray, f"the relu bound {ray!r} >= lower {lower}"))
        if all(np.all(X == np.round(X)) and np.max(np.abs(X), initial=0) <= 2**20 for X in (U, D, A)):
            thr = 0.0  # integer weights: exact ranks
    cond, cited = get("condition"), []
    if cond is not None and cond.get("status") in ("absorbable", "not_absorbable"):
        v = verify_block(cond)
        ok = {"verified": True, "refuted": False}.get(v.verdict)
        cited.append(Step("condition", ok, f"the block certificate it cites: {v.verdict}"))
    # k* >= 1 by the cited certificate: the same block, relu or gelu, not absorbable at width n (Thm 8/10)
    no_width_n = (
        bool(cited) and cited[0].ok is True and (cond["status"], cond.get("activation")) == ("not_absorbable", act)
    )
    named = ([int(i) for i in np.ravel(get("S"))], [int(i) for i in np.ravel(get("G"))])
    steps.append(_lower(n, atoms, lower, Fraction(thr), budget, no_width_n, named))
    return steps + cited
