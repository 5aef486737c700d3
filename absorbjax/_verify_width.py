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
- *lower* (ReLU, GELU): for every ``S ⊆`` atoms, ``ρ_S`` = the number of singular values of
  ``M_S = A' + Ũ_S Ŵ_S`` above the threshold (0: the exact rank; ``tol``: counted exactly as the sign
  changes of the characteristic polynomial of ``M_Sᵀ M_S − tol² I``, real-rooted, by Descartes' rule),
  ``|G| + 2p ≥ ρ_S`` (``≥ 2ρ_S − rank Ŵ`` above ``rank Ŵ``); for exact weights an ``S`` below the claim
  is refined over every ``G`` (``|G| + 2(rank[M_S; Ŵ_G] − rank Ŵ_G)``, exact ranks); then
  ``k* ≥ L + min_S … − n``. gelu_tanh, silu, softplus: the ReLU bound on the same weights, by their
  declared ray limit.

Not checked: ``error`` (sampled); lower bounds beyond :data:`LOWER_MAX` sets (``unchecked``).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from absorbjax import activations
from absorbjax._fingerprint import fingerprint
from absorbjax._verify import Step, fingerprint_step

_U = 2.0**-53
LOWER_MAX = 2**12  # sets S the lower bound enumerates (beyond: unchecked)


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
    gamma = (n + 1) * _U / (1 - (n + 1) * _U)
    r = rtol + 4 * gamma
    return (r * (1 + gamma) * float(np.linalg.norm(np.abs(D) @ np.abs(U) + np.abs(A))) + (n + 2) * d * 2.0**-1074) * (
        1 + 1e-9
    )


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


def _lower(U, D, A, act: str, lower: int, thr: Fraction, budget: int) -> Step:
    """``k* ≥ lower`` for ReLU/GELU: ``L + min_S lb(S) − n ≥ lower`` over every ``S`` (module docstring)."""
    n, d = U.shape
    groups, W, Uc, Ap = _atoms(U, D, A, act)
    L = len(groups)
    need = lower + n - L  # the reduced cost every S, G must reach
    if lower <= 0 or need <= 0:
        return Step("lower", True, f"k* >= {lower}: trivially ({L} live atoms of {n} units)")
    if 2**L > LOWER_MAX:
        return Step("lower", None, f"2^{L} sets S: more than the checker enumerates ({LOWER_MAX})")
    base, outer = _mat(Ap), [_mat([[u * w for w in W[a]] for u in Uc[a]]) for a in range(L)]
    rank_W = _mat(W).rank() if thr == 0 else min(L, d)
    tried = 0
    M = base
    for step in range(2**L):  # Gray code: one atom enters or leaves S at each step
        if step:
            a = (step & -step).bit_length() - 1
            M = M - outer[a] if (step ^ step >> 1) >> a & 1 == 0 else M + outer[a]
        bits = step ^ step >> 1
        S = [a for a in range(L) if bits >> a & 1]
        rho = _rank_above(M, thr)
        if (rho if rho <= rank_W else 2 * rho - rank_W) >= need:
            continue
        rest = [a for a in range(L) if a not in S]
        for g in range(1, need):
            for G in itertools.combinations(rest, g):
                tried += 1
                if tried > budget // d**3:
                    return Step("lower", None, f"S = {S}: the refinement over G exceeds the checker's budget")
                p = _rank_above(M * _complement([W[a] for a in G]), thr)
                if g + 2 * p < need:
                    why = f"S = {S}, G = {list(G)}: |G| + 2p = {g + 2 * p} < {need}, a width below n + lower"
                    return Step("lower", False if thr == 0 else None, why)
        if 2 * rho < need:  # G = ∅: p = ρ
            return Step("lower", False if thr == 0 else None, f"S = {S}: 2 rank M_S = {2 * rho} < {need}")
    how = "exact ranks" if thr == 0 else f"singular values above {float(thr):.3g}, counted exactly"
    return Step("lower", True, f"every S of {L} atoms ({2**L} sets, {how}) needs |G| + 2p >= {need}: k* >= {lower}")


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
        groups = _atoms(U, D, A, act)[0]
        same = sorted(map(sorted, groups)) == sorted(sorted(int(i) for i in g) for g in get("atoms"))
        steps.append(
            Step("atoms", same, f"{len(groups)} live atoms (exact); the certificate lists {len(get('atoms'))}")
        )
        thr = (get("basis") or {}).get("threshold")
        if thr is None or thr not in (0.0, tol) or (thr == 0) != bool(get("exact")):
            return steps + [Step("lower", None if thr is None else False, f"threshold {thr!r}: 0 (exact) or tol")]
    else:  # by the declared ray limit: the ReLU bound on the same weights
        limit, thr = activations.get(act).ray_limit, tol
        if limit != "relu" and lower > 0:
            return steps + [Step("lower", False, f"{act} declares ray limit {limit!r}, not relu: no lower bound")]
        if all(np.all(X == np.round(X)) and np.max(np.abs(X), initial=0) <= 2**20 for X in (U, D, A)):
            thr = 0.0  # integer weights: exact ranks
    steps.append(_lower(U, D, A, act if act == "gelu" else "relu", lower, Fraction(thr), budget))
    cond = get("condition")
    if cond is not None and cond.get("status") in ("absorbable", "not_absorbable"):
        v = verify_block(cond)
        ok = {"verified": True, "refuted": False}.get(v.verdict)
        steps.append(Step("condition", ok, f"the block certificate it cites: {v.verdict}"))
    return steps
