"""An independent judge of :mod:`absorbjax.condition`'s certificates: exact rational arithmetic on the
stored values and brute force over all ``2^n`` sets.

Nothing here uses the decision's machinery (relaxations, Gram matrices, MILP). A stored float is a
dyadic rational, so ``M_S = W_down[:,S] W_up[S,:] + A`` is computed exactly with Python fractions;
the brute force screens masks in float64 with a rigorous margin and decides the rest exactly.
Used by ``experiments/soundness.py`` and the tests, with the adversarial block families
(:data:`FAMILIES`: each ``make(rng, i)`` returns ``(params, activation, planted S or None, note)``
and, for biased blocks, the hidden bias).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from absorbjax import activations, models

__all__ = [
    "BRUTE_MAX_N",
    "FAMILIES",
    "absorber_gap",
    "exact_miss",
    "judge",
    "nondegenerate",
    "distinct_hyperplanes",
    "passes",
    "spectral_at_most",
    "passing_sets",
    "planted_arrays",
    "storage_passes",
    "frobenius",
    "gaussian",
]

BRUTE_MAX_N = 18
_U = 2.0**-53
_ETA = 2.0**-1074


def _arrays(params, skip=None):
    U = np.asarray(params.up, np.float64)
    D = np.asarray(params.down, np.float64)
    A = np.eye(U.shape[1]) if skip is None else np.asarray(skip, np.float64)
    return U, D, A


def exact_miss(params, S, skip=None, c=1) -> list[list[Fraction]]:
    """``c·W_down[:,S] W_up[S,:] + A`` (``d×d``) in exact rational arithmetic on the stored values
    (``c`` the activation's odd slope, an exact rational; 1 for relu, gelu and the ray-limit family)."""
    U, D, A = _arrays(params, skip)
    S = [int(i) for i in np.atleast_1d(np.asarray(S, int))]
    c = Fraction(c)
    d = U.shape[1]
    return [
        [
            Fraction(float(A[k, j]))
            + c * sum((Fraction(float(D[k, i])) * Fraction(float(U[i, j])) for i in S), Fraction(0))
            for j in range(d)
        ]
        for k in range(d)
    ]


def _abs_sum(U, D, A, S, k, j, c=1) -> Fraction:
    return abs(Fraction(float(A[k, j]))) + abs(Fraction(c)) * sum(
        (abs(Fraction(float(D[k, i])) * Fraction(float(U[i, j]))) for i in S), Fraction(0)
    )


def passes(params, S, r: float, skip=None, extra=None, c=1) -> bool:
    """Rule (★) on the exact miss: ``|M_S| ≤ r (|c| Σ_{i∈S}|W_down||W_up| + |A|) (+ extra)`` entrywise."""
    U, D, A = _arrays(params, skip)
    S = [int(i) for i in np.atleast_1d(np.asarray(S, int))]
    M = exact_miss(params, S, skip, c)
    rq = Fraction(r)
    d = U.shape[1]
    return all(
        abs(M[k][j]) <= rq * _abs_sum(U, D, A, S, k, j, c) + (0 if extra is None else Fraction(extra[k][j]))
        for k in range(d)
        for j in range(d)
    )


def frobenius(M) -> float:
    """``‖M‖_F`` of an exact matrix, rounded to nearest (relative error below 1e-15)."""
    total = sum(x * x for row in M for x in row)
    return math.sqrt(float(total)) if total else 0.0


def spectral_at_most(M, t) -> bool:
    """Whether ``‖M‖_2 ≤ t`` for an exact matrix ``M`` (rows of Fractions) and a float ``t ≥ 0``,
    decided exactly: ``t² I − MᵀM`` positive semidefinite (symmetric Gaussian elimination in
    rational arithmetic; a zero pivot needs a zero row)."""
    t = Fraction(t)
    if t < 0:
        return False
    d = len(M[0])
    G = [
        [(t * t if j == k else 0) - sum((row[j] * row[k] for row in M), Fraction(0)) for k in range(d)]
        for j in range(d)
    ]
    for p in range(d):
        piv = G[p][p]
        if piv < 0 or (piv == 0 and any(G[p][k] != 0 for k in range(p + 1, d))):
            return False
        if piv == 0:
            continue
        for j in range(p + 1, d):
            f = G[j][p] / piv
            for k in range(p + 1, d):
                G[j][k] -= f * G[p][k]
    return True


def passing_sets(params, rtol: float, *, limit: int = BRUTE_MAX_N, skip=None, c=1) -> list | None:
    """Every set ``S`` whose exact miss ``c·W_down[:,S] W_up[S,:] + A`` passes rule (★) with
    ``r_S = rtol + 2γ_{|S|+1}``, by brute force over all ``2^n`` masks (float64 screen with a
    rigorous margin, exact check of the rest); ``None`` when ``n > limit``."""
    U, D, A = _arrays(params, skip)
    n, d = U.shape
    if n > limit:
        return None
    with np.errstate(under="ignore", over="ignore"):
        M = float(c) * np.einsum("ki,ij->ikj", D, U).reshape(n, d * d)  # float(c): one more rounding
        aM = np.abs(M)
        a = A.reshape(-1)
        found = []
        g = (n + 4) * _U / (1 - (n + 4) * _U)
        for lo in range(0, 2**n, 1 << 14):
            idx = np.arange(lo, min(lo + (1 << 14), 2**n))
            masks = ((idx[:, None] >> np.arange(n)) & 1).astype(np.float64)
            k = masks.sum(1, keepdims=True) + 1
            r = rtol + 2 * k * _U / (1 - k * _U)
            F = masks @ M + a
            Sig = masks @ aM + np.abs(a)
            err = g * Sig * 1.01 + (n + 3) * _ETA
            maybe = np.all(np.abs(F) - err <= r * (Sig * (1 + 2 * g) + err), axis=1)
            for j in np.flatnonzero(maybe):
                S = np.flatnonzero(masks[j])
                if passes(params, S, float(r[j, 0]), skip, c=c):
                    found.append(S)
    return found


def storage_passes(params, S, rounding_rtol: float) -> bool:
    """Whether ``S`` passes the storage rule *with* the absolute rounding of zero/subnormal entries:
    ``|M̃_S| ≤ r Σ + Σ_{i∈S}(e_down |W̃_up| + |W̃_down| e_up + e_down e_up)``, ``e`` half the smallest
    subnormal of each array's dtype (its absolute rounding)."""
    import jax.numpy as jnp

    U, D, A = _arrays(params)
    half = []
    for arr in (params.up, params.down):
        dt = np.asarray(arr).dtype
        half.append(float(jnp.finfo(dt).smallest_subnormal) / 2 if jnp.issubdtype(dt, jnp.floating) else 0.0)
    eu, ed = half
    S = [int(i) for i in np.atleast_1d(np.asarray(S, int))]
    d = U.shape[1]
    extra = [
        [
            sum(
                (
                    Fraction(ed) * abs(Fraction(float(U[i, j])))
                    + abs(Fraction(float(D[k, i]))) * Fraction(eu)
                    + Fraction(ed) * Fraction(eu)
                    for i in S
                ),
                Fraction(0),
            )
            for j in range(d)
        ]
        for k in range(d)
    ]
    r = rounding_rtol + 2 * (len(S) + 1) * _U / (1 - (len(S) + 1) * _U)
    return passes(params, S, r, extra=extra)


def nondegenerate(params) -> bool:
    """Thm 8's hypotheses, exactly on the stored values (Python fractions)."""
    U, D, _ = _arrays(params)
    if U.shape[1] < 2 or not U.any(axis=1).all() or not D.any(axis=0).all():
        return False
    rows = [[Fraction(float(x)) for x in row] for row in U]
    for u, v in itertools.combinations(rows, 2):
        if all(u[a] * v[b] == u[b] * v[a] for a in range(len(u)) for b in range(a + 1, len(u))):
            return False
    return True


def distinct_hyperplanes(params, bias) -> bool:
    """The kink theorem's hypotheses (docs/theory/kink.md), exactly on the stored values: rows of
    ``W_up`` and columns of ``W_down`` nonzero, and the pairs ``(w_i, b_i)`` pairwise
    non-proportional (distinct kink hyperplanes; ``bias=None`` reads ``b = 0``)."""
    U, D, _ = _arrays(params)
    b = np.zeros(U.shape[0]) if bias is None else np.asarray(bias, np.float64)
    if not U.any(axis=1).all() or not D.any(axis=0).all():
        return False
    rows = [[Fraction(float(x)) for x in row] + [Fraction(float(t))] for row, t in zip(U, b)]
    return not any(
        all(u[a] * v[q] == u[q] * v[a] for a in range(len(u)) for q in range(a + 1, len(u)))
        for u, v in itertools.combinations(rows, 2)
    )


def absorber_gap(params, S, activation: str, bias=None) -> float:
    """``max |block(x) − absorber(x)| / (|x| + |W_down| |W_up| |x| + |W_down||b|)`` entrywise in float64
    on 64 random inputs, the absorber with ``b[S]`` negated and output bias ``c·W_down[:,S] b[S]`` (``c``
    the activation's declared odd slope)."""
    import jax

    U, D, _ = _arrays(params)
    n, d = U.shape
    b = np.zeros(n) if bias is None else np.asarray(bias, np.float64)
    xs = np.random.default_rng(0).normal(size=(64, d))
    V, beta = U.copy(), b.copy()
    V[S] *= -1
    beta[S] *= -1
    act = activations.get(activation)
    c = float(act.odd_slope)
    with jax.enable_x64(True), np.errstate(over="ignore", under="ignore", invalid="ignore"):
        block = xs + np.asarray(act.fn(xs @ U.T + b)) @ D.T
        free = np.asarray(act.fn(xs @ V.T + beta)) @ D.T + c * (D[:, S] @ b[S])
        scale = np.abs(xs) + (np.abs(xs) @ np.abs(U).T + np.abs(b)) @ np.abs(D).T
    return float(np.max(np.abs(block - free) / scale))


def _judge_line(cert, params, act, bias) -> str:
    """:func:`judge` for a certificate of the line theorem (``d = 1``): a bias-free kink block with
    ``n ≥ 2``, and the absorber's exact values at ``x = ±1`` within ``miss_bound`` of the block's
    (both sides positively homogeneous, so that bounds ``sup |g − f|/|x|``), on the identity skip."""
    U, D = (np.asarray(a, np.float64) for a in (params.up, params.down))
    if U.shape[1] != 1 or U.shape[0] < 2 or not act.kink or (bias is not None and np.any(np.asarray(bias) != 0)):
        return "absorbable by the line theorem, but the block is not a bias-free d = 1 kink block with n >= 2"
    p, q = Fraction(cert.line.p), Fraction(cert.line.q)
    if p == q or p + q != act.odd_slope:
        return f"absorbable by the line theorem, but p = {p}, q = {q} do not fit {act.name}"

    def rho(z):
        return p * z if z >= 0 else q * z

    up, down = cert.line.weights(U.shape[0])
    for x in (1, -1):
        f = x + sum(Fraction(float(v)) * rho(x * Fraction(float(u))) for u, v in zip(U[:, 0], D[0]))
        g = sum(Fraction(float(v)) * rho(x * Fraction(float(u))) for u, v in zip(up[:, 0], down[0]))
        if not abs(g - f) <= Fraction(cert.promise.miss_bound):
            return f"absorbable by the line theorem, but the absorber misses f({x}) by {float(abs(g - f)):.3g}"
    return ""


def judge(cert, params, activation: str, planted=None, bias=None) -> str:
    """``""`` when the certificate is right about the stored values, else what is wrong with it.

    ``c`` is the activation's declared odd slope (rule (★): ``c·W_down[:,S] W_up[S,:] = −A``).
    ``absorbable``: ``c`` declared, ``S`` passes rule (★) exactly, ``promise.miss_bound`` bounds the
    exact ``‖M_S‖_F`` and is within ``promise.skip_rtol`` of the skip, and the absorber reproduces the block in
    float64; ``not_absorbable`` / ``degenerate``: no set passes (brute force for ``n ≤ 18``, else the
    planted set), the cited theorem is one the activation has, and its hypotheses match an exact
    check (Thm 8's, or the kink theorem's distinct hyperplanes); ``rounding.within``: "yes" with a
    set that passes the storage rule, "no" only when none (nor the planted set with absolute
    rounding) does. ``undecided`` is always allowed."""
    rtol, act = cert.rtol, activations.get(activation)
    c = act.odd_slope
    if cert.status == "absorbable" and cert.line is not None:
        return _judge_line(cert, params, act, bias)
    if cert.status == "absorbable":
        if c is None:
            return f"absorbable for {activation}, which declares no odd slope"
        r = rtol + 2 * (cert.S.size + 1) * _U / (1 - (cert.S.size + 1) * _U)
        if not passes(params, cert.S, r, c=c):
            return "absorbable, but S fails rule (★) exactly"
        norm = frobenius(exact_miss(params, cert.S, c=c))
        if not norm <= cert.promise.miss_bound * (1 + 1e-12):
            return f"absorbable, but the exact miss {norm:.3g} exceeds miss_bound {cert.promise.miss_bound:.3g}"
        if not norm <= cert.promise.skip_rtol * (1 + 1e-12):
            return f"absorbable, but the exact miss {norm:.3g} is not small against the skip"
        gap = absorber_gap(params, cert.S, activation, bias)
        if not gap <= 1e-9:
            return f"absorbable, but the absorber misses the block by {gap:.2g}"
    if cert.status in ("not_absorbable", "degenerate"):
        cc = 1 if c is None else c
        if planted is not None and frobenius(exact_miss(params, planted, c=cc)) == 0:
            return f"{cert.status}, but the planted S is exact"
        r_pl = None if planted is None else rtol + 2 * (len(planted) + 1) * _U / (1 - (len(planted) + 1) * _U)
        if planted is not None and passes(params, planted, r_pl, c=cc):
            return f"{cert.status}, but the planted S passes"
        sets = passing_sets(params, rtol, c=cc)
        if sets:
            return f"{cert.status}, but brute force finds {sets[0].tolist()}"
        theorem = cert.theorem or ""
        kink = theorem.startswith((activations.KINK_THEOREM, activations.RAY_LIMIT_KINK_THEOREM))
        # the kink theorem's (H2) reads the hyperplanes w_i·x + b_i = 0; via the ray limit, the rows alone
        hyper_bias = bias if theorem.startswith(activations.KINK_THEOREM) else None
        hold = distinct_hyperplanes(params, hyper_bias) if kink else nondegenerate(params)
        if (cert.status == "degenerate") == hold:
            return f"{cert.status}, but the hypotheses {'hold' if cert.status == 'degenerate' else 'fail'}"
        if cert.status == "not_absorbable":
            b = cert.biased
            known = {act.converse(b), act.converse(b, narrow=True), act.converse(b, parallel_rows=True)} - {None}
            if not any(theorem.startswith(t) for t in known):
                return f"not_absorbable for {activation} citing {theorem!r}, not a converse it has"
    rounding = cert.rounding
    if rounding.within == "yes":
        r = rounding.rtol + 2 * (rounding.S.size + 1) * _U / (1 - (rounding.S.size + 1) * _U)
        if not passes(params, rounding.S, r):
            return "rounding.within yes, but its S fails the storage rule"
    if rounding.within == "no":
        if planted is not None and storage_passes(params, planted, rounding.rtol):
            return "rounding.within no, but the planted S passes the storage rule (absolute rounding included)"
        sets = passing_sets(params, rounding.rtol)
        if sets:
            return f"rounding.within no, but brute force finds {sets[0].tolist()}"
    return ""


# ---------------------------------------------------------------------------------------------
# Families: each returns (params, activation, planted S or None, note[, bias])


def _gaussian(rng, d, n):
    return rng.normal(size=(n, d)) / math.sqrt(d), rng.normal(size=(d, n)) / math.sqrt(n)


def gaussian(d: int, n: int, seed: int = 0, dtype=None) -> models.MLPParams:
    """A block with :func:`absorbjax.models.init`'s law, drawn with NumPy (``default_rng(seed)``):
    ``W_up ~ N(0, 1/d)`` ``(n, d)`` then ``W_down ~ N(0, 1/n)`` ``(d, n)``, float64 or stored in
    ``dtype`` (e.g. ``ml_dtypes.bfloat16``)."""
    up, down = _gaussian(np.random.default_rng(seed), d, n)
    return models.MLPParams(up, down) if dtype is None else models.MLPParams(up.astype(dtype), down.astype(dtype))


def _solve_down(up_s, z):
    """``W_down[:,S]`` with ``W_down[:,S] W_up[S,:] = −I``: ``−W_up[S,:]⁺`` plus ``z`` projected on the
    left null space, with two steps of refinement so the miss is at rounding level."""
    pinv = np.linalg.pinv(up_s)
    down_s = -pinv + z @ (np.eye(up_s.shape[0]) - up_s @ pinv)
    for _ in range(2):
        down_s -= (down_s @ up_s + np.eye(up_s.shape[1])) @ pinv
    return down_s


def planted_arrays(rng, d, n, size=None):
    """Gaussian weights with ``W_down[:,S] W_up[S,:] = −I`` (float64 rounding) for a random ``S``."""
    up, down = _gaussian(rng, d, n)
    size = d if size is None else size
    S = np.sort(rng.choice(n, size, replace=False))
    down[:, S] = _solve_down(up[S], rng.normal(size=(d, size)) / math.sqrt(size))
    return up, down, S


def low_precision(rng, i):
    dtype = ("float16", "bfloat16")[i % 2]
    import ml_dtypes  # noqa: F401  (bfloat16 for NumPy; a dependency of jax)

    dt = np.dtype(getattr(ml_dtypes, dtype)) if dtype == "bfloat16" else np.dtype(dtype)
    d, n = 4, int(rng.integers(8, 15))
    if i % 4 < 2:
        up, down = _gaussian(rng, d, n)
        S = None
    else:
        up, down, S = planted_arrays(rng, d, n)
    return models.MLPParams(up.astype(dt), down.astype(dt)), "relu", S, f"{dtype} d={d} n={n}"


def scaled_float32(rng, i):
    d, n = int(rng.integers(2, 5)), int(rng.integers(6, 15))
    up, down = _gaussian(rng, d, n)
    return (
        models.MLPParams((100 * up).astype(np.float32), (100 * down).astype(np.float32)),
        "relu",
        None,
        f"float32 ×100 d={d} n={n}",
    )


def huge_unit(rng, i):
    d, n = int(rng.integers(2, 5)), int(rng.integers(8, 15))
    up, down, S = planted_arrays(rng, d, n) if i % 2 else (*_gaussian(rng, d, n), None)
    outside = np.setdiff1d(np.arange(n), [] if S is None else S)
    k = rng.choice(outside)
    t = 10.0 ** rng.uniform(11, 14)
    up[k] *= t
    down[:, k] *= t
    return models.MLPParams(up, down), "gelu", S, f"unit {k} ×{t:.1e} d={d} n={n}"


def magnitude_spread(rng, i):
    d = int(rng.integers(2, 4))
    n = int(rng.integers(d * d + 1, d * d + 12))
    up, down = _gaussian(rng, d, n)
    up *= 10.0 ** rng.uniform(-3, 3, (n, 1))
    down *= 10.0 ** rng.uniform(-3, 3, (1, n))
    size = int(rng.integers(d, min(n, 2 * d + 2) + 1))
    S = np.sort(rng.choice(n, size, replace=False))
    down[:, S] = _solve_down(up[S], rng.normal(size=(d, size)) * 10.0 ** rng.uniform(-3, 3, (1, size)))
    return models.MLPParams(up, down), "relu", S, f"10^U(-3,3) d={d} n={n} |S|={size}"


def wide_planted(rng, i):
    """``d = 2``, ``n`` from 25 to 80 (beyond enumeration), magnitudes over five decades, a large
    planted ``S``: the MILP's territory, where only the planted set can judge."""
    d, n = 2, int(rng.integers(25, 81))
    up, down = _gaussian(rng, d, n)
    up *= 10.0 ** rng.uniform(-2.5, 2.5, (n, 1))
    down *= 10.0 ** rng.uniform(-2.5, 2.5, (1, n))
    size = int(rng.integers(d, n - 1))
    S = np.sort(rng.choice(n, size, replace=False))
    down[:, S] = _solve_down(up[S], rng.normal(size=(d, size)))
    return models.MLPParams(up, down), "relu", S, f"d={d} n={n} |S|={size}"


def coordinate_change(rng, i):
    """A change of coordinates ``W_up → W_up P⁻¹``, ``W_down → P W_down`` with ``cond(P)`` up to ~1e12.

    Gaussian blocks (even ``i``) use ``P = Q₁ diag(1…c) Q₂``. Planted blocks (odd ``i``) must stay
    absorbable in the stored numbers, and a float64 ``P`` breaks ``W_down[:,S] W_up[S,:] = −I`` by
    ``~ε cond(P)``; so their ``S`` is an integer unimodular pair and ``P = 2^a W 2^b`` (diagonal powers
    of two around an integer unimodular ``W``) has an exact inverse: the moved block is exactly
    absorbable, with ``cond(P)`` from the powers of two."""
    d, n = int(rng.integers(2, 5)), int(rng.integers(6, 15))
    if i % 2 == 0:
        up, down = _gaussian(rng, d, n)
        q1, _ = np.linalg.qr(rng.normal(size=(d, d)))
        q2, _ = np.linalg.qr(rng.normal(size=(d, d)))
        cond = 10.0 ** rng.uniform(0, 12)
        P = q1 @ np.diag(np.geomspace(1, cond, d)) @ q2
        return models.MLPParams(np.linalg.solve(P.T, up.T).T, P @ down), "relu", None, f"cond(P)={cond:.1e} d={d} n={n}"
    up, down = _gaussian(rng, d, n)
    S = np.sort(rng.choice(n, d, replace=False))
    W0, inv0 = _unimodular(rng, d)
    up[S], down[:, S] = W0, -inv0
    W, inv = _unimodular(rng, d)
    while True:
        a, b = rng.integers(0, 21, d), rng.integers(0, 21, d)
        P = np.ldexp(W, a[:, None] + b[None, :])  # diag(2^a) W diag(2^b)
        if np.linalg.cond(P) <= 1e12:
            break
    P_inv = np.ldexp(inv, -b[:, None] - a[None, :])  # diag(2^-b) W⁻¹ diag(2^-a)
    params = models.MLPParams(up @ P_inv, P @ down)
    assert frobenius(exact_miss(params, S)) == 0, "the moved planted set must stay exact"
    return params, "relu", S, f"cond(P)={np.linalg.cond(P):.1e} (2^a W 2^b) d={d} n={n}"


def near_miss(rng, i):
    d, n = int(rng.integers(2, 5)), int(rng.integers(6, 15))
    up, down, S = planted_arrays(rng, d, n)
    eps = 10.0 ** -rng.uniform(6, 14)
    down[:, S] *= 1 + eps * rng.choice([-1.0, 1.0], size=(d, S.size))
    return models.MLPParams(up, down), "gelu", S, f"ε={eps:.1e} d={d} n={n}"


def no_converse(rng, i):
    d, n = int(rng.integers(2, 5)), int(rng.integers(6, 15))
    activation = ("silu", "softplus", "gelu_tanh")[i % 3]
    up, down = _gaussian(rng, d, n)
    return models.MLPParams(up, down), activation, None, f"{activation} d={d} n={n}"


def _unimodular(rng, d):
    """An integer ``d×d`` matrix with determinant ±1 and its integer inverse (exact planted sets)."""
    while True:
        L = np.tril(rng.integers(-2, 3, (d, d)), -1) + np.eye(d, dtype=int)
        R = np.triu(rng.integers(-2, 3, (d, d)), 1) + np.eye(d, dtype=int)
        P = rng.permutation(np.eye(d, dtype=int))
        W = P @ L @ R
        inv = np.round(np.linalg.inv(W)).astype(int)
        if np.array_equal(W @ inv, np.eye(d, dtype=int)):
            return W.astype(np.float64), inv.astype(np.float64)


def cancellation(rng, i):
    """Two large nearly parallel units in a set whose W_down columns cancel: Σ|W_down||W_up| ~1e12 lets
    rule (★) tolerate an exact miss of O(0.1–1)."""
    d, n0 = int(rng.integers(2, 4)), int(rng.integers(5, 9))
    up, down, S = planted_arrays(rng, d, n0)
    L = 10.0 ** rng.uniform(11, 13)
    w = rng.normal(size=d)
    y = rng.normal(size=d)
    e = rng.normal(size=d) * L * 2.0 ** -int(rng.integers(38, 44))
    up = np.vstack([up, L * w, L * w + e])
    down = np.hstack([down, y[:, None], -y[:, None]])
    return models.MLPParams(up, down), "relu", S, f"L={L:.1e} d={d} n={n0 + 2}"


def underflow(rng, i):
    """An exactly absorbable integer block (unimodular W_up[S,:]) plus units whose products lie in
    the subnormal range (factors 2^-a, 2^-b, a + b in 1040…1100)."""
    d = int(rng.integers(2, 4))
    W, inv = _unimodular(rng, d)
    k = int(rng.integers(2, 5))
    a = rng.integers(500, 560, k)
    b = rng.integers(540, 545, k)
    tiny_up = np.ldexp(rng.integers(-7, 8, (k, d)).astype(float), -a[:, None])
    tiny_down = np.ldexp(rng.integers(-7, 8, (d, k)).astype(float), -b[None, :])
    up = np.vstack([W, tiny_up])
    down = np.hstack([-inv, tiny_down])
    up[d:][~up[d:].any(axis=1), 0] = 2.0**-500
    down[:, d:][:, ~down[:, d:].any(axis=0)] = 2.0**-540
    return models.MLPParams(up, down), "gelu", np.arange(d), f"d={d} {k} subnormal-product units"


def overflow(rng, i):
    """A planted block whose units are rescaled by 2^±(500…560) (rows up, columns down): nothing
    changes mathematically, but unbalanced Gram matrices overflow."""
    d, n = int(rng.integers(2, 4)), int(rng.integers(6, 12))
    up, down, S = planted_arrays(rng, d, n) if i % 2 else (*_gaussian(rng, d, n), None)
    k = rng.integers(500, 560, n) * rng.choice([-1, 1], n)
    return (
        models.MLPParams(np.ldexp(up, k[:, None]), np.ldexp(down, -k[None, :])),
        "relu",
        S,
        f"units ×2^±(500–560) d={d} n={n}",
    )


def tiny_parallel(rng, i):
    """Exactly parallel rows with entries ~1e-165 (their Gram entries underflow), next to a planted S."""
    d, n = int(rng.integers(2, 4)), int(rng.integers(6, 10))
    up, down, S = planted_arrays(rng, d, n)
    j, k = np.setdiff1d(np.arange(n), S)[:2]
    up[k] = -2.0 * up[j]
    up = np.ldexp(up, -548)
    down = np.ldexp(down, 548)
    return models.MLPParams(up, down), "gelu", S, f"rows ~1e-165, ({j}, {k}) parallel d={d} n={n}"


def mixed_storage(rng, i):
    """Roundings of planted blocks, W_up and W_down in different dtypes."""
    import ml_dtypes

    kinds = [("float16", "float32"), ("bfloat16", "float32"), ("float16", "bfloat16"), ("float32", "float16")]
    names = kinds[i % 4]
    dts = [np.dtype(ml_dtypes.bfloat16) if x == "bfloat16" else np.dtype(x) for x in names]
    d, n = int(rng.integers(2, 5)), int(rng.integers(6, 13))
    up, down, S = planted_arrays(rng, d, n)
    return models.MLPParams(up.astype(dts[0]), down.astype(dts[1])), "relu", S, f"{names[0]}/{names[1]} d={d} n={n}"


def float16_subnormal(rng, i):
    """Roundings of planted blocks stored in float16 with W_up entries below 2^-14 (absolute rounding)."""
    d, n = int(rng.integers(2, 4)), int(rng.integers(6, 12))
    up, down, S = planted_arrays(rng, d, n)
    t = 2.0 ** -int(rng.integers(9, 13))  # some |W_up| entries fall below 2^-14
    low = np.float16 if np.max(np.abs(down)) / t < 6e4 else np.float32  # W_down / t must stay finite
    return (
        models.MLPParams((up * t).astype(np.float16), (down / t).astype(low)),
        "relu",
        S,
        f"float16 W_up × {t:.1e}, W_down {np.dtype(low).name} d={d} n={n}",
    )


def biased(rng, i):
    """Biased blocks of the five activations (ray limit): planted and Gaussian."""
    act = ("relu", "gelu", "gelu_tanh", "silu", "softplus")[i % 5]
    d, n = int(rng.integers(2, 5)), int(rng.integers(6, 15))
    up, down, S = planted_arrays(rng, d, n) if i % 2 else (*_gaussian(rng, d, n), None)
    return models.MLPParams(up, down), act, S, f"{act} biased d={d} n={n}", rng.normal(size=n)


def parallel_biased(rng, i):
    """Exactly parallel rows with distinct biases (distinct kink hyperplanes)."""
    act = ("relu", "gelu", "silu")[i % 3]
    d, n = int(rng.integers(2, 4)), int(rng.integers(6, 12))
    up, down, S = planted_arrays(rng, d, n) if i % 2 else (*_gaussian(rng, d, n), None)
    free = np.setdiff1d(np.arange(n), [] if S is None else S)
    up[free[1]] = 0.5 * up[free[0]]
    return models.MLPParams(up, down), act, S, f"{act} parallel rows, distinct biases d={d} n={n}", rng.normal(size=n)


FAMILIES = {
    "float16 / bfloat16 storage": low_precision,
    "float32 weights ×100": scaled_float32,
    "one huge unit (1e11–1e14) outside S": huge_unit,
    "unit magnitudes 10^U(−3,3), planted S, n > d²": magnitude_spread,
    "d = 2, n = 25…80, large planted S, magnitudes 10^U(−2.5,2.5)": wide_planted,
    "coordinate change, cond(P) ≤ 1e12": coordinate_change,
    "near misses ε = 1e-6 … 1e-14": near_miss,
    "silu / softplus / gelu_tanh (Thm 8 via the ray limit)": no_converse,
    "cancellation inside S (Σ|W_down||W_up| ~1e12)": cancellation,
    "products in the subnormal range, exact S": underflow,
    "units rescaled by 2^±(500–560)": overflow,
    "exactly parallel rows ~1e-165": tiny_parallel,
    "mixed storage dtypes (W_up, W_down)": mixed_storage,
    "float16 subnormal W_up": float16_subnormal,
    "biased blocks, five activations": biased,
    "parallel rows with distinct biases": parallel_biased,
}
