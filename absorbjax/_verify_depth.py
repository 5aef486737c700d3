"""An independent check of a depth certificate (:func:`absorbjax.dimension.certify`), for
:func:`absorbjax.verify`.

Written anew beside the decision and importing nothing from ``condition``, ``dimension`` or ``fit`` (a
test reads its imports). The certificate carries its rational point (numerators of ``W_up^ℓ (L, n, d)``,
``W_down^ℓ (L, d, n)``, the probe inputs ``x_k (K, d)``, biases ``β_ℓ (L, n)``, ``γ_ℓ (L, d)``, all over
one power of two ``q``), the prime ``p``, the residue ``c₀`` standing in for ``c = 1/√(2π)`` (GELU),
the jet order and the ``minor``: rows ``(k, a, j)`` and columns (parameter indices) of an
``r × r`` submatrix of the probe Jacobian ``J`` (for a subfamily ``W_0 + B θ``, of ``J B``, with the
integer ``B (P, m)`` in the certificate and columns indices of ``θ``). The checker

- recounts ``P``, the free bound ``b = P − (L−1)(d² − (d−n)₊² [+ d with biases]) [− nL for ReLU]`` and
  the residual maximum from the size (``docs/theory/depth.md``, steps 1 and 9, §8);
- checks that ``p`` is an odd prime above the jet order (every Taylor denominator ``2^k k! (2k+1)``
  and ``q`` a unit mod ``p``);
- recomputes those Jacobian rows mod ``p`` by its own forward mode over truncated power series in
  ``t`` (GELU: ``GELU(z) = z/2 + c Σ_k (−1)^k z^{2k+2} / (2^k k! (2k+1))``, ``c ↦ c₀``; ReLU: the
  activation pattern at ``x_k`` from exact rational pre-activations, none of them 0), times ``B``
  for a subfamily, and the determinant of the minor mod ``p``: nonzero mod ``p`` is nonzero over ``ℚ[c]`` (``c`` is
  transcendental), so the real rank is at least ``r``; then ``r > b``;
- for the arguments beyond the rank count, recomputes their exact determinants (``det(I + D_S U_S)``
  for every layer and ``S``; GELU ``n < d``: ``det(I + ½ D U)``), the line's ``f(±1)`` and the free
  stack's ``g(±1)`` in rationals, or the depth-1 hypotheses (rows nonzero and pairwise
  non-proportional, columns nonzero).

The theorems themselves (the free bound, that a rank above it gives disjointness, §8, §10) are the
proved mathematics of ``docs/theory/depth.md``, not rechecked.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np

from absorbjax._verify_step import Step

NARROW_MAX = 16  # n for which the 2^n determinants per layer are enumerated


def _counts(act: str, d: int, n: int, L: int, bias: bool) -> tuple[int, int, int]:
    """``(P, b, maximum)``: parameters, the free family's bound and the residual family's maximum rank."""
    P = 2 * L * n * d + (L * (n + d) if bias else 0)
    junction = d * d - max(d - n, 0) ** 2 + (d if bias else 0)
    relu = n * L if act == "relu" else 0
    return P, P - (L - 1) * junction - relu, P - ((L - 1) * d if bias else 0) - relu


def _point(get) -> dict:
    """The point as integer arrays ``up (L, n, d)``, ``down (L, d, n)``, ``inputs (K, d)``, ``beta``,
    ``gamma`` (``None`` without biases) and ``q``."""
    pt = get("point")
    pt = pt._asdict() if hasattr(pt, "_asdict") else dict(pt)
    arr = {k: None if pt.get(k) is None else np.asarray(pt[k], dtype=object) for k in ("up", "down", "inputs")}
    arr["beta"] = None if pt.get("hidden_bias") is None else np.asarray(pt["hidden_bias"], dtype=object)
    arr["gamma"] = None if pt.get("out_bias") is None else np.asarray(pt["out_bias"], dtype=object)
    arr["q"] = int(pt["denominator"])
    return arr


def _prime_step(p, order: int, act: str) -> Step:
    import flint

    ok = isinstance(p, (int, np.integer)) and not isinstance(p, bool) and 3 <= p < 2**26
    ok = ok and bool(flint.fmpz(int(p)).is_prime()) and (act != "gelu" or p > order)
    why = f"p = {p!r}: an odd prime below 2^26" + (f" above the jet order {order}" if act == "gelu" else "")
    return Step("prime", ok, why if ok else f"{why} is required")


# ---------------------------------------------------------------------------------------------
# The probe Jacobian's rows mod p


def _gelu_coefficients(T: int, p: int, c0: int) -> tuple[list[int], list[int]]:
    """``(s, s')`` mod ``p``: ``GELU(z) = Σ_m s_m z^m`` and ``GELU'(z) = Σ_m s'_m z^m`` for ``m < T``."""
    s = [0] * (T + 1)
    s[1] = pow(2, -1, p)
    for k in range((T + 1) // 2):
        if 2 * k + 2 <= T:
            s[2 * k + 2] = (-1) ** k * c0 * pow(2**k * math.factorial(k) * (2 * k + 1), -1, p) % p
    return s[:T], [(m + 1) * s[m + 1] % p for m in range(T)]


def _series(coef: list[int], h: np.ndarray, p: int) -> np.ndarray:
    """``Σ_m coef_m h^m`` for a series ``h (T, …)`` with ``h_0 = 0``, truncated at ``t^{T−1}``, mod ``p``."""
    out, power = np.zeros_like(h), np.zeros_like(h)
    power[0] = 1
    for m, c in enumerate(coef):
        if m:
            power = _times(power, h, p)
        out = (out + c * power) % p
    return out


def _times(a: np.ndarray, b: np.ndarray, p: int) -> np.ndarray:
    """The truncated product of series along axis ``-2`` of ``b`` and axis 0 of ``a`` (``a (T, n)``,
    ``b (…, T, n)``), mod ``p``."""
    T = a.shape[0]
    out = np.zeros(np.broadcast_shapes(a.shape, b.shape), dtype=np.int64)
    for i in range(T):
        for j in range(T - i):
            out[..., i + j, :] = (out[..., i + j, :] + a[i] * b[..., j, :]) % p
    return out


def _relu_pattern(pt: dict, k: int) -> list[np.ndarray] | None:
    """The activation pattern ``(n,)`` per layer of the residual ReLU stack at ``x_k``, from exact
    rational pre-activations; ``None`` when one is 0 (``x_k`` on a kink)."""
    q, L = pt["q"], pt["up"].shape[0]
    z = [Fraction(int(v), q) for v in pt["inputs"][k]]
    out = []
    for l in range(L):
        h = [sum(Fraction(int(u), q) * zj for u, zj in zip(row, z)) for row in pt["up"][l]]
        if pt["beta"] is not None:
            h = [hi + Fraction(int(b), q) for hi, b in zip(h, pt["beta"][l])]
        if any(hi == 0 for hi in h):
            return None
        out.append(np.array([hi > 0 for hi in h]))
        a = [max(hi, 0) for hi in h]
        g = [0] * len(z) if pt["gamma"] is None else [Fraction(int(v), q) for v in pt["gamma"][l]]
        z = [
            zj + sum(Fraction(int(v), q) * ai for v, ai in zip(row, a)) + gj for zj, row, gj in zip(z, pt["down"][l], g)
        ]
    return out


def _rows(pt: dict, act: str, k: int, T: int, p: int, c0: int | None) -> np.ndarray | None:
    """``J (P, T, d)`` mod ``p``: the derivative in every parameter of the ``t^j`` coefficient (GELU) of
    output ``a`` of ``f(t x_k)``, or of ``f(x_k)`` (ReLU, ``T = 1``), for the residual stack at the point
    (forward mode). ``None``: ReLU with ``x_k`` on a kink, or GELU with a nonzero bias."""
    L, n, d = pt["up"].shape
    bias = pt["beta"] is not None
    P = _counts(act, d, n, L, bias)[0]
    inv = pow(pt["q"], -1, p)

    def mod(x):
        return np.asarray(np.vectorize(lambda v: int(v) % p * inv % p, otypes=[object])(x), dtype=np.int64)

    up, down, x = mod(pt["up"]), mod(pt["down"]), mod(pt["inputs"][k])
    beta, gamma = (mod(pt["beta"]), mod(pt["gamma"])) if bias else (None, None)
    pattern = _relu_pattern(pt, k) if act == "relu" else None
    if act == "relu" and pattern is None:
        return None
    if act == "gelu" and bias and (np.any(beta) or np.any(gamma)):
        return None
    if act == "gelu":
        s, ds = _gelu_coefficients(T, p, c0)
    z = np.zeros((T, d), np.int64)
    z[0 if act == "relu" else 1] = x  # ReLU: the value; GELU: t x is the t^1 coefficient
    dz = np.zeros((P, T, d), np.int64)
    i_n, i_d = np.arange(n), np.arange(d)
    for l in range(L):
        h = z @ up[l].T % p
        dh = np.einsum("ptd,nd->ptn", dz, up[l]) % p
        for i in range(n):  # ∂h_i/∂W_up[l, i, j] = z_j
            dh[l * n * d + i * d + i_d, :, i] += z.T
        if bias:
            h[0] = (h[0] + beta[l]) % p
            dh[2 * L * n * d + l * n + i_n, 0, i_n] += 1
        if act == "relu":
            m = pattern[l].astype(np.int64)
            a, da = h * m, dh * m
        else:
            a, da = _series(s, h, p), _times(_series(ds, h, p), dh % p, p)
        out = a @ down[l].T % p
        dout = np.einsum("ptn,dn->ptd", da % p, down[l]) % p
        for j in range(d):  # ∂out_j/∂W_down[l, j, i] = a_i
            dout[L * n * d + l * d * n + j * n + i_n, :, j] += a.T
        if bias:
            out[0] = (out[0] + gamma[l]) % p
            dout[2 * L * n * d + L * n + l * d + i_d, 0, i_d] += 1
        z, dz = (z + out) % p, (dz + dout) % p
    return dz


def _integer(v) -> int | None:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return int(v)
    return int(v) if isinstance(v, (float, np.floating)) and float(v).is_integer() else None


def _subfamily(get, P: int) -> tuple[list[list[int]] | None, Step | None]:
    """``B (P, m)`` of a subfamily ``W_0 + B θ`` as Python integers, with ``m`` the certificate's
    ``params``; or the step that says why not (absent: unchecked; malformed: refuted)."""
    B, m = get("subfamily"), get("params")
    if B is None:
        return None, Step("minor", None, f"a subfamily of {m} parameters: its B is not in the certificate")
    B = [[_integer(v) for v in row] for row in np.asarray(B, dtype=object).tolist()]
    if len(B) != P or not all(len(row) == m and None not in row for row in B):
        return None, Step("minor", False, f"the subfamily is not an integer ({P}, {m}) matrix")
    return B, None


def _minor_step(get, pt: dict, act: str, P: int, B: list[list[int]] | None = None) -> Step:
    """The minor's rows recomputed mod ``p`` (times ``B`` for a subfamily ``W_0 + B θ``) and its
    determinant: nonzero gives ``rank ≥ r``."""
    import flint

    minor, p, order = get("minor"), int(get("prime")), int(get("order"))
    if minor is None:
        return Step("minor", None, "no minor in the certificate (an older certificate)")
    rows, cols = [tuple(int(v) for v in r) for r in minor[0]], [int(c) for c in minor[1]]
    r, K, m = len(rows), pt["inputs"].shape[0], P if B is None else len(B[0])
    T = 1 if act == "relu" else order + 1
    if (
        len(cols) != r
        or len(set(cols)) != r
        or len(set(rows)) != r
        or not all(0 <= c < m for c in cols)
        or not all(0 <= k < K and 0 <= a < pt["up"].shape[2] and 0 <= j < T for k, a, j in rows)
    ):
        return Step("minor", False, f"the minor's rows or columns are not distinct indices of the {m} parameters")
    c0 = None if act == "relu" else int(get("residue")) % p
    J = {}
    for k in sorted({k for k, _, _ in rows}):
        J[k] = _rows(pt, act, k, T, p, c0)
        if J[k] is None:
            why = f"input {k} lies on a kink" if act == "relu" else "GELU jets need zero biases at the point"
            return Step("minor", False, why)
    if B is None:
        entries = [int(J[k][c, j, a]) for k, a, j in rows for c in cols]
    else:  # the rows of J B: J's rows mod p times B's chosen columns mod p
        Jr = flint.nmod_mat(r, P, [int(J[k][i, j, a]) for k, a, j in rows for i in range(P)], p)
        Bc = flint.nmod_mat(P, r, [B[i][c] % p for i in range(P) for c in cols], p)
        entries = [int(v) for v in (Jr * Bc).entries()]
    det = int(flint.nmod_mat(r, r, entries, p).det()) if r else 1
    ok = det != 0 and r == get("rank")
    what = "probe Jacobian" if B is None else f"probe Jacobian times the subfamily's B ({P} × {m})"
    return Step(
        "minor",
        ok,
        f"the {r} × {r} minor of the {what}, recomputed, has determinant {det} mod {p}; rank claimed {get('rank')}",
    )


# ---------------------------------------------------------------------------------------------
# The arguments beyond the rank count


def _dets_nonzero(pt: dict, half: bool) -> tuple[bool | None, str]:
    """Every layer's ``det(I + D[:,S] U[S,:]) ≠ 0`` for all ``S`` (``n ≤`` :data:`NARROW_MAX`), or
    (``half``) ``det(I + ½ D U) ≠ 0``, exactly over the integers (scaled by ``q²``)."""
    import flint

    L, n, d = pt["up"].shape
    q2 = pt["q"] ** 2 * (2 if half else 1)
    if not half and n > NARROW_MAX:
        return None, f"n = {n} > {NARROW_MAX}: the 2^n determinants are not enumerated"
    for l in range(L):
        outer = [
            flint.fmpz_mat(d, d, [int(a) * int(b) for a in pt["down"][l][:, i] for b in pt["up"][l][i]])
            for i in range(n)
        ]
        eye = flint.fmpz_mat(d, d, [q2 if i == j else 0 for i in range(d) for j in range(d)])
        sets = [range(n)] if half else (S for size in range(1, n + 1) for S in itertools.combinations(range(n), size))
        for S in sets:
            m = eye
            for i in S:
                m = m + outer[i]
            if m.det() == 0:
                return False, f"layer {l}: det(I + {'½ D U' if half else 'D[:,S] U[S,:]'}) = 0 for S = {list(S)}"
    return (
        True,
        "det(I + ½ D_l U_l) != 0 for every layer"
        if half
        else f"det(I + D_l[:,S] U_l[S,:]) != 0 for every layer and all 2^{n} S",
    )


def _line_values(ups, downs, q: int | None, residual: bool) -> tuple[Fraction, Fraction]:
    """``(f(1), f(−1))`` of a bias-free ReLU stack on the line (``d = 1``): numerators over ``q``, or
    floats (``q = None``), exactly."""

    def val(v):
        return Fraction(int(v), q) if q else Fraction(float(v))

    ends = []
    for x in (Fraction(1), Fraction(-1)):
        for up, down in zip(ups, downs):
            out = sum(val(down[0][i]) * max(val(up[i][0]) * x, Fraction(0)) for i in range(len(up)))
            x = x + out if residual else out
        ends.append(x)
    return ends[0], ends[1]


def _kink_hypotheses(pt: dict, act: str) -> tuple[bool, str]:
    """Depth 1 with biases: rows of ``W_up`` (ReLU: ``(W_up[i], β[i])``) nonzero and pairwise
    non-proportional, columns of ``W_down`` nonzero, exactly."""
    up = pt["up"][0]
    if act == "relu":
        up = np.concatenate([up, pt["beta"][0][:, None]], axis=1)
    rows = [[int(v) for v in r] for r in up]
    if not all(any(r) for r in rows) or not all(any(int(v) for v in c) for c in pt["down"][0].T):
        return False, "a row of W_up or a column of W_down is zero"
    for i, j in itertools.combinations(range(len(rows)), 2):
        if all(a * d == b * c for (a, b), (c, d) in itertools.combinations(zip(rows[i], rows[j]), 2)):
            return False, f"rows {i} and {j} are proportional"
    return True, "rows nonzero and pairwise non-proportional, columns nonzero (exact)"


def check_depth(get) -> list[Step]:
    """The steps of a depth certificate (``get(field)`` reads it): sizes and counts, then the status's
    argument (rank: prime, minor, bound; narrow, narrow_jacobian, line, kink: their exact checks)."""
    act, status, method = get("activation"), str(get("status")), get("method")
    d, n, L, bias = int(get("d")), int(get("n")), int(get("depth")), bool(get("bias"))
    pt = _point(get)
    shapes = (pt["up"].shape, pt["down"].shape, pt["inputs"].shape[1:])
    sizes_ok = shapes == ((L, n, d), (L, d, n), (d,)) and pt["q"] > 0 and pt["q"] & (pt["q"] - 1) == 0
    sizes_ok &= (pt["beta"] is not None) == bias and act in ("relu", "gelu")
    steps = [Step("shape", sizes_ok, f"point {shapes} over q = {pt['q']}; certificate d = {d}, n = {n}, L = {L}")]
    if not sizes_ok:
        return steps
    P, b, top = _counts(act, d, n, L, bias)
    top = min(top, get("params")) if get("residual") else b  # a subfamily's m caps it; a control's is b
    counted = (get("free_bound"), get("maximum")) == (b, top)
    steps.append(Step("counts", counted, f"P = {P}, free bound b = {b}, family maximum {top} (recounted)"))
    if status == "undecided":
        return steps + [Step("status", True, "undecided claims nothing")]
    if not get("residual"):
        return steps + [Step("status", False, "a free family (control) is never certified")]
    if status == "reproduced":
        return steps + _reproduced(get, pt, act, d, bias, method)
    if status != "certified_disjoint":
        return steps + [Step("status", False, f"unknown status {status!r}")]
    if method == "rank":
        steps.append(_prime_step(get("prime"), int(get("order")), act))
        if not steps[-1].ok:
            return steps
        B, why = _subfamily(get, P) if get("params") != P or get("subfamily") is not None else (None, None)
        if why is not None:
            return steps + [why]
        steps.append(_minor_step(get, pt, act, P, B))
        return steps + [Step("bound", get("rank") > b, f"rank {get('rank')} against the free bound {b}")]
    if method == "narrow":
        ok, why = _dets_nonzero(pt, False) if d <= n < 2 * d and not bias else (False, "needs d <= n < 2d, no biases")
        return steps + [Step("narrow (step 6)", ok, why)]
    if method == "narrow_jacobian":
        ok, why = _dets_nonzero(pt, act == "gelu") if n < d else (False, f"needs n < d, got n = {n}, d = {d}")
        return steps + [Step("narrow Jacobian (§8)", ok, why)]
    if method == "line":
        if act != "relu" or d != 1 or n != 1 or bias:
            return steps + [Step("line (§10)", False, "disjointness on the line needs relu, d = n = 1, no biases")]
        f1, fm = _line_values(pt["up"], pt["down"], pt["q"], True)
        return steps + [Step("line (§10)", f1 * fm != 0, f"f(1) = {f1}, f(-1) = {fm} (exact): f(1) f(-1) != 0")]
    if method == "kink":
        ok, why = (
            _kink_hypotheses(pt, act) if L == 1 and bias else (False, "the kink argument needs depth 1 with biases")
        )
        return steps + [Step("kink hypotheses", ok, why)]
    return steps + [Step("status", False, f"unknown method {method!r}")]


def _reproduced(get, pt: dict, act: str, d: int, bias: bool, method) -> list[Step]:
    """``reproduced`` on the line (§10): ``n ≥ 2``, or ``f(1) f(−1) = 0``, exactly; and the free stack
    ``g`` (width ``n``, depth ``L``, no skip) has ``g(±1) = f(±1)`` rounded to float64 (its weights are
    floats; both are positively homogeneous, so ``g`` is ``f`` up to that rounding)."""
    fs = get("free_stack")
    if method != "line" or act != "relu" or d != 1 or bias or fs is None:
        return [
            Step("free stack", False, "reproduced is claimed on the line only (relu, d = 1, no biases, a free stack)")
        ]
    n = pt["up"].shape[1]
    f = _line_values(pt["up"], pt["down"], pt["q"], True)
    steps = [Step("line (§10)", n >= 2 or f[0] * f[1] == 0, f"n = {n}, f(1) = {f[0]}, f(-1) = {f[1]} (exact)")]
    fs = fs._asdict() if hasattr(fs, "_asdict") else fs
    V_up, V_down = np.asarray(fs["up"], np.float64), np.asarray(fs["down"], np.float64)
    if V_up.shape != pt["up"].shape or V_down.shape != pt["down"].shape or not np.all(np.isfinite(V_up)):
        return steps + [Step("free stack", False, f"the free stack has shape {V_up.shape}, not {pt['up'].shape}")]
    g = _line_values(V_up, V_down, None, False)
    rounded = tuple(Fraction(float(v)) for v in f)
    how = "exactly" if g == f else "up to the rounding of f(±1) to float64"
    return steps + [
        Step("free stack", g == rounded, f"free stack g(±1) = ({float(g[0])!r}, {float(g[1])!r}): f(±1) {how}")
    ]
