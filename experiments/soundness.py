"""Soundness of the certificates on the weights that break naive tolerances.

Each family draws blocks at the edges where a global tolerance or a floating-point MILP verdict
gives wrong answers: weights stored in float16 / bfloat16, float32 weights scaled ×100, one huge
unit outside every set, unit magnitudes spread over six decades with a planted absorbing set and
``n > d²``, changes of coordinates ``W_down → P W_down, W_up → W_up P⁻¹`` with ``cond(P)`` up to
1e12, near misses ``W_down[:,S](1 + ε)`` with ``ε`` from 1e-6 to 1e-14, and activations whose
converse is not proved. Every certificate of :func:`absorbjax.condition.find_absorbing_set` is
judged independently of the decision's machinery:

* ``absorbable``: the returned set passes rule (★) (``condition.tolerance``), and the absorber
  reproduces the block in float64 on random inputs (relative gap ≤ 1e-9 · the block's scale);
* ``not_absorbable`` / ``degenerate``: a brute-force enumeration of all ``2^n`` sets by plain NumPy
  (``n ≤ 18``), or the planted set, finds no set that passes; the hypotheses match an independent
  check (``degenerate`` iff some pair of rows is exactly parallel or a row/column is zero);
  ``not_absorbable`` only for relu/gelu and bias-free blocks;
* ``within_rounding``: ``"yes"`` with a set that passes the looser rule, ``"no"`` only when brute
  force (or the planted set) finds none.

``undecided`` is always allowed and counted. The table in the record lists families × instances ×
outcomes; a wrong answer makes the claim fail.
"""

from __future__ import annotations

import itertools
import math
import sys

import numpy as np

from absorbjax import activations, condition, models, reproduce

NAME = "soundness"
TITLE = "Certificates on adversarial weights (soundness)"
PRESETS = {
    "smoke": {"per_family": 6},
    "quick": {"per_family": 40},
    "full": {"per_family": 1000},
}
BRUTE_MAX_N = 18
OUTCOMES = ("absorbable", "not_absorbable", "degenerate", "undecided", "wrong")


# ---------------------------------------------------------------------------------------------
# Families: each returns (params, activation, planted S or None, note)


def _gaussian(rng, d, n):
    return rng.normal(size=(n, d)) / math.sqrt(d), rng.normal(size=(d, n)) / math.sqrt(n)


def _solve_down(up_s, z):
    """``W_down[:,S]`` with ``W_down[:,S] W_up[S,:] = −I``: ``−W_up[S,:]⁺`` plus ``z`` projected on the
    left null space, with two steps of refinement so the miss is at rounding level."""
    pinv = np.linalg.pinv(up_s)
    down_s = -pinv + z @ (np.eye(up_s.shape[0]) - up_s @ pinv)
    for _ in range(2):
        down_s -= (down_s @ up_s + np.eye(up_s.shape[1])) @ pinv
    return down_s


def _planted(rng, d, n, size=None):
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
        up, down, S = _planted(rng, d, n)
    return models.MLPParams(up.astype(dt), down.astype(dt)), "relu", S, f"{dtype} d={d} n={n}"


def scaled_float32(rng, i):
    d, n = int(rng.integers(2, 5)), int(rng.integers(6, 15))
    up, down = _gaussian(rng, d, n)
    return models.MLPParams((100 * up).astype(np.float32), (100 * down).astype(np.float32)), "relu", None, \
        f"float32 ×100 d={d} n={n}"


def huge_unit(rng, i):
    d, n = int(rng.integers(2, 5)), int(rng.integers(8, 15))
    up, down, S = _planted(rng, d, n) if i % 2 else (*_gaussian(rng, d, n), None)
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
    d, n = int(rng.integers(2, 5)), int(rng.integers(6, 15))
    up, down, S = _planted(rng, d, n) if i % 2 else (*_gaussian(rng, d, n), None)
    q1, _ = np.linalg.qr(rng.normal(size=(d, d)))
    q2, _ = np.linalg.qr(rng.normal(size=(d, d)))
    cond = 10.0 ** rng.uniform(0, 12)
    P = q1 @ np.diag(np.geomspace(1, cond, d)) @ q2
    return models.MLPParams(np.linalg.solve(P.T, up.T).T, P @ down), "relu", S, \
        f"cond(P)={cond:.1e} d={d} n={n}"


def near_miss(rng, i):
    d, n = int(rng.integers(2, 5)), int(rng.integers(6, 15))
    up, down, S = _planted(rng, d, n)
    eps = 10.0 ** -rng.uniform(6, 14)
    down[:, S] *= 1 + eps * rng.choice([-1.0, 1.0], size=(d, S.size))
    return models.MLPParams(up, down), "gelu", S, f"ε={eps:.1e} d={d} n={n}"


def no_converse(rng, i):
    d, n = int(rng.integers(2, 5)), int(rng.integers(6, 15))
    activation = ("silu", "softplus", "gelu_tanh")[i % 3]
    up, down = _gaussian(rng, d, n)
    return models.MLPParams(up, down), activation, None, f"{activation} d={d} n={n}"


FAMILIES = {
    "float16 / bfloat16 storage": low_precision,
    "float32 weights ×100": scaled_float32,
    "one huge unit (1e11–1e14) outside S": huge_unit,
    "unit magnitudes 10^U(−3,3), planted S, n > d²": magnitude_spread,
    "d = 2, n = 25…80, large planted S, magnitudes 10^U(−2.5,2.5)": wide_planted,
    "coordinate change, cond(P) ≤ 1e12": coordinate_change,
    "near misses ε = 1e-6 … 1e-14": near_miss,
    "silu / softplus / gelu_tanh (no converse)": no_converse,
}


# ---------------------------------------------------------------------------------------------
# The independent judge


def passing_sets(params, rtol, limit=BRUTE_MAX_N):
    """Every set that rule (★) accepts with this ``rtol``, by brute force over all ``2^n`` masks
    (plain NumPy, chunked); ``None`` when ``n > limit``."""
    U = np.asarray(params.up, np.float64)
    D = np.asarray(params.down, np.float64)
    n, d = U.shape
    if n > limit:
        return None
    M = np.einsum("ki,ij->ikj", D, U).reshape(n, d * d)
    aM = np.abs(M)
    eye = np.eye(d).reshape(-1)
    u = 2.0**-53
    found = []
    for lo in range(0, 2**n, 1 << 14):
        idx = np.arange(lo, min(lo + (1 << 14), 2**n))
        masks = ((idx[:, None] >> np.arange(n)) & 1).astype(np.float64)
        k = masks.sum(1, keepdims=True) + 1
        r = rtol + 2 * k * u / (1 - k * u)
        ok = np.all(np.abs(masks @ M + eye) <= r * (masks @ aM + eye), axis=1)
        found += [np.flatnonzero(masks[j]) for j in np.flatnonzero(ok)]
    return found


def _passes(params, S, rtol) -> bool:
    U = np.asarray(params.up, np.float64)
    D = np.asarray(params.down, np.float64)
    return bool(np.all(np.abs(D[:, S] @ U[S] + np.eye(U.shape[1]))
                       <= condition.tolerance(params, S, rtol=rtol)))


def _nondegenerate(params) -> bool:
    """Independent exact check on the stored values (Python fractions)."""
    from fractions import Fraction

    U = np.asarray(params.up, np.float64)
    D = np.asarray(params.down, np.float64)
    if U.shape[1] < 2 or not U.any(axis=1).all() or not D.any(axis=0).all():
        return False
    rows = [[Fraction(float(x)) for x in row] for row in U]
    for u, v in itertools.combinations(rows, 2):
        if all(u[a] * v[b] == u[b] * v[a] for a in range(len(u)) for b in range(a + 1, len(u))):
            return False
    return True


def _absorber_gap(params, S, activation) -> float:
    """``max |block(x) − absorber(x)| / (|x| + |W_down| |W_up| |x|)`` entrywise, float64, 64 random
    inputs: about ``eps64`` for a true absorber. (The scale covers the rounding of every unit, so a
    huge unit elsewhere hides a small miss; rule (★) is checked separately.)"""
    import jax

    U = np.asarray(params.up, np.float64)
    D = np.asarray(params.down, np.float64)
    xs = np.random.default_rng(0).normal(size=(64, U.shape[1]))
    V = U.copy()
    V[S] *= -1
    sigma = activations.get(activation).fn
    with jax.enable_x64(True):
        block = xs + np.asarray(sigma(xs @ U.T)) @ D.T
        free = np.asarray(sigma(xs @ V.T)) @ D.T
    scale = np.abs(xs) + (np.abs(xs) @ np.abs(U).T) @ np.abs(D).T
    return float(np.max(np.abs(block - free) / scale))


def judge(cert, params, activation, planted) -> str:
    """``""`` when the certificate is right, else what is wrong with it."""
    rtol = cert.rtol
    if cert.status == "absorbable":
        if not _passes(params, cert.S, rtol):
            return "absorbable, but S fails rule (★)"
        gap = _absorber_gap(params, cert.S, activation)
        if gap > 1e-9:
            return f"absorbable, but the absorber misses the block by {gap:.2g}"
    if cert.status in ("not_absorbable", "degenerate"):
        if planted is not None and _passes(params, planted, rtol):
            return f"{cert.status}, but the planted S passes"
        sets = passing_sets(params, rtol)
        if sets:
            return f"{cert.status}, but brute force finds {sets[0].tolist()}"
        if (cert.status == "degenerate") == _nondegenerate(params):
            return f"{cert.status}, but the hypotheses {'hold' if cert.status == 'degenerate' else 'fail'}"
        if cert.status == "not_absorbable" and activations.get(activation).converse(biased=cert.biased) is None:
            return f"not_absorbable for {activation}, whose converse is not proved"
    if cert.within_rounding == "yes" and not _passes(params, cert.rounding_S, cert.rounding_rtol):
        return "within_rounding yes, but its S fails the storage rule"
    if cert.within_rounding == "no":
        if planted is not None and _passes(params, planted, cert.rounding_rtol):
            return "within_rounding no, but the planted S passes the storage rule"
        sets = passing_sets(params, cert.rounding_rtol)
        if sets:
            return f"within_rounding no, but brute force finds {sets[0].tolist()}"
    return ""


# ---------------------------------------------------------------------------------------------


def audit(family: str, count: int, seed: int, time_limit: float = 5.0) -> dict:
    """Decide ``count`` blocks of one family and judge each certificate."""
    make = FAMILIES[family]
    fam_index = list(FAMILIES).index(family)
    rows = []
    for i in range(count):
        rng = np.random.default_rng([seed, fam_index, i])
        params, activation, planted, note = make(rng, i)
        cert = condition.find_absorbing_set(params, activation=activation, time_limit=time_limit)
        wrong = judge(cert, params, activation, planted)
        rows.append({"note": note, "status": cert.status, "method": cert.method,
                     "within_rounding": cert.within_rounding, "planted": planted is not None,
                     "seconds": cert.seconds, "wrong": wrong})
    counts = {o: sum(r["status"] == o and not r["wrong"] for r in rows) for o in OUTCOMES[:-1]}
    counts["wrong"] = sum(bool(r["wrong"]) for r in rows)
    counts["rounding_yes"] = sum(r["within_rounding"] == "yes" for r in rows)
    return {"counts": counts, "rows": rows, "max_seconds": max(r["seconds"] for r in rows)}


def run(config, out, seed):
    results = {family: audit(family, config["per_family"], seed) for family in FAMILIES}

    fig, ax = reproduce.subplots(figsize=(10, 4.2))
    names = list(results)
    left = np.zeros(len(names))
    colors = dict(zip(OUTCOMES, (reproduce.PALETTE[2], reproduce.PALETTE[0], reproduce.PALETTE[4],
                                 reproduce.PALETTE[5], reproduce.PALETTE[1])))
    for outcome in OUTCOMES:
        widths = np.array([results[f]["counts"][outcome] for f in names], float)
        ax.barh(names, widths, left=left, color=colors[outcome], label=outcome)
        left += widths
    ax.invert_yaxis()
    ax.set_xlabel(f"instances ({config['per_family']} per family)")
    ax.set_title("Certificates on adversarial weights, judged independently (red: wrong answers)")
    ax.legend(fontsize=8, ncol=5, loc="lower center", bbox_to_anchor=(0.5, -0.32))
    figure = reproduce.save_figure(fig, out, NAME)

    total = sum(sum(r["counts"][o] for o in OUTCOMES) for r in results.values())
    wrong = sum(r["counts"]["wrong"] for r in results.values())
    undecided = sum(r["counts"]["undecided"] for r in results.values())
    table = "; ".join(
        f"{f}: " + ", ".join(f"{r['counts'][o]} {o}" for o in OUTCOMES if r["counts"][o])
        for f, r in results.items())
    first_wrong = next((f"{f}: {row['note']}: {row['wrong']}" for f, r in results.items()
                        for row in r["rows"] if row["wrong"]), "none")
    claims = [
        reproduce.Claim(
            "no certificate is wrong on adversarial weights (low-precision storage, scaled units, "
            "huge units, magnitude spread, coordinate changes, near misses, no-converse activations)",
            f"{wrong} wrong of {total} ({undecided} undecided); {table}; first wrong: {first_wrong}",
            holds=wrong == 0, criterion="zero wrong answers; undecided allowed and counted",
            figure=figure),
    ]
    return {"families": {f: {"counts": r["counts"], "max_seconds": r["max_seconds"], "rows": r["rows"]}
                         for f, r in results.items()}, "claims": claims}


if __name__ == "__main__":
    sys.exit(reproduce.script_main(sys.modules[__name__]))
