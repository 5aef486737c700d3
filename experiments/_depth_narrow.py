"""The narrow studies of the depth experiment (``experiments/depth.py``): width below the input,
``n < d`` (the Jacobian argument of ``docs/theory/depth.md`` §8), and the line, ``d = 1``, ReLU
without biases (§10, decided exactly for each ``W``), with their claims.

Not an experiment (``reproduce.discover`` skips modules whose names start with ``_``);
``depth.py`` imports it, a module beside it.
"""

import jax
import numpy as np

from absorbjax import dimension, io, models
from absorbjax.lab import reproduce

__all__ = ["narrow", "line_stack", "line", "claims"]

_EXACT = dimension.Probe(float_check=False)  # the exact checks only: no float64 rank beside them


def narrow(config, key, activations):
    """Width below the input, ``n < d`` (``docs/theory/depth.md`` §8): per activation and size, Gaussian
    draws certified by the Jacobian argument. GELU: ``det Π_ℓ (I + ½ D_ℓ U_ℓ) ≠ 0`` checked exactly, the
    conclusion covering every such ``W``; ReLU: every ``det(I + D_ℓ[:,S] U_ℓ[S,:]) ≠ 0``, exactly."""
    rows = []
    for i, act in enumerate(activations):
        for d, n, L in config["narrow"]["sizes"]:
            m = config["narrow"]["draws"]
            certs = [
                dimension.certify(act, d, n, L, key=io.subkey(key, i, 1000 * d + 10 * n + L, j), probe=_EXACT)
                for j in range(m)
            ]
            rows.append(
                {
                    "activation": act,
                    "d": d,
                    "n": n,
                    "depth": L,
                    "draws": m,
                    "nonzero_det": sum(c.narrow is True for c in certs),
                    "certified": sum(c.status == "certified_disjoint" and c.method == "narrow_jacobian" for c in certs),
                    "seconds": round(sum(c.seconds for c in certs), 3),
                }
            )
    return rows


def line_stack(up, down, x, residual):
    """A bias-free ReLU stack on the line, NumPy float64: ``up`` ``(L, n, 1)``, ``down`` ``(L, 1, n)``."""
    for u, v in zip(np.asarray(up, float), np.asarray(down, float)):
        h = v @ np.maximum(u @ x[None, :], 0.0)
        x = x + h[0] if residual else h[0]
    return x


def line(config, key):
    """The line, ``d = 1``, ReLU without biases (§10), decided exactly for every drawn ``W``: Gaussian draws
    and, for ``n = 1``, planted stacks with ``D_1 U_1 = −1`` (``f(1) f(−1) = 0``). Each
    verdict is compared with ``f(1) f(−1)`` evaluated in float64 (exact here: dyadic weights, and a
    planted block maps its dead half-line to exactly 0), and each free stack of a ``"reproduced"``
    verdict with the residual stack on a grid of 241 points in [−3, 3] (error relative to
    ``max(1, max |f|)``)."""
    cfg = config["line"]
    grid = np.linspace(-3.0, 3.0, 241)
    rows = []
    for n in cfg["widths"]:
        for L in cfg["depths"]:
            draws = [(io.subkey(key, 10 * n + L, j), False) for j in range(cfg["draws"])]
            if n == 1:
                draws += [(io.subkey(key, 10 * n + L, 1000 + j), True) for j in range(cfg["planted"])]
            for k, planted in draws:
                params = None
                if planted:  # block 1 with D U = −1: it is 0 on the half-line sign·x > 0, and so is f
                    rng = np.random.default_rng(np.asarray(jax.random.key_data(k)).ravel().tolist())
                    up = np.round(rng.standard_normal((L, 1, 1)) * 64) / 64
                    down = np.round(rng.standard_normal((L, 1, 1)) * 64) / 64
                    sign = float(rng.choice([-1.0, 1.0]))
                    up[0, 0, 0], down[0, 0, 0] = sign / 2, -2.0 * sign
                    params = models.MLPParams(up, down)
                cert = dimension.certify("relu", 1, n, L, key=k, params=params, probe=_EXACT)
                q = float(cert.point.denominator)
                w = models.MLPParams(cert.point.up / q, cert.point.down / q)  # exact in float64
                ends = line_stack(w.up, w.down, np.array([1.0, -1.0]), True)
                error = None
                if cert.free_stack is not None:
                    want = line_stack(w.up, w.down, grid, True)
                    got = line_stack(cert.free_stack.up, cert.free_stack.down, grid, False)
                    error = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1.0))
                rows.append(
                    {
                        "n": n,
                        "depth": L,
                        "planted": planted,
                        "status": cert.status,
                        "method": cert.method,
                        "product_zero": bool(ends[0] * ends[1] == 0),
                        "free_error": error,
                    }
                )
    return rows


def claims(narrow_rows, line_rows):
    """The claims of §8 (``n < d``) and §10 (the line), from :func:`narrow` and :func:`line`."""
    claims = []
    for act, what in (
        ("gelu", "det prod_l (I + D_l U_l / 2) != 0, checked exactly: the conclusion covers every such W"),
        ("relu", "every det(I + D_l[:,S] U_l[S,:]) != 0, checked exactly: the conclusion covers almost every W"),
    ):
        sel = [r for r in narrow_rows if r["activation"] == act]
        if not sel:
            continue
        claims.append(
            reproduce.Claim(
                f"{act}, width below the input (n < d, docs/theory/depth.md §8): every sampled Gaussian draw has "
                f"{what}; each is certified reproduced by no free stack of width < d and any depth",
                "; ".join(
                    f"({r['d']},{r['n']},{r['depth']}) {r['certified']}/{r['draws']} certified, "
                    f"{r['nonzero_det']}/{r['draws']} with nonzero determinants"
                    for r in sel
                ),
                holds=all(r["certified"] == r["nonzero_det"] == r["draws"] for r in sel),
                criterion="every draw: determinants nonzero and certified by narrow_jacobian",
                figure=None,
            )
        )
    one = [r for r in line_rows if r["n"] == 1]
    if one:
        right = [
            (r["status"] == "reproduced") == r["product_zero"]
            and r["status"] in ("reproduced", "certified_disjoint")
            and (r["status"] != "reproduced" or (r["free_error"] is not None and r["free_error"] <= 1e-12))
            for r in one
        ]
        zero = [r for r in one if r["product_zero"]]
        planted = [r for r in one if r["planted"]]
        errors = [r["free_error"] for r in zero if r["free_error"] is not None]
        claims.append(
            reproduce.Claim(
                "the line, d = 1, ReLU without biases, width 1 (docs/theory/depth.md §10): a residual stack is "
                "reproduced by a free stack of width 1 iff f(1) f(-1) = 0; certify decides it exactly for every drawn "
                "W (certified_disjoint when f(1) f(-1) != 0, reproduced with the explicit free stack when = 0)",
                f"{sum(right)}/{len(one)} stacks decided as f(1) f(-1) says ({len(one) - len(zero)} with f(1) f(-1) "
                f"!= 0 certified_disjoint; {len(zero)} with f(1) f(-1) = 0, {len(planted)} of them planted "
                f"(D_1 U_1 = -1), reproduced); free stacks' max error "
                f"{max(errors, default=float('nan')):.1e} on [-3, 3]",
                holds=all(right) and len(planted) == len(zero) > 0,
                criterion="every verdict matches f(1) f(-1) (float64, exact here); every planted stack reproduced "
                "with free-stack error <= 1e-12",
                figure=None,
            )
        )
    wide = [r for r in line_rows if r["n"] >= 2]
    if wide:
        errors = [r["free_error"] for r in wide if r["free_error"] is not None]
        claims.append(
            reproduce.Claim(
                "the line, d = 1, ReLU without biases, n >= 2 (§10): every residual stack is a free stack of the same "
                "width and depth; certify returns it",
                f"{sum(r['status'] == 'reproduced' for r in wide)}/{len(wide)} reproduced (widths "
                f"{sorted({r['n'] for r in wide})}, depths {sorted({r['depth'] for r in wide})}); max error of the "
                f"free stack {max(errors, default=float('nan')):.1e} on [-3, 3]",
                holds=len(errors) == len(wide)
                and all(r["status"] == "reproduced" for r in wide)
                and max(errors) <= 1e-12,
                criterion="every stack reproduced, free-stack error <= 1e-12 (float64)",
                figure=None,
            )
        )
    return claims
