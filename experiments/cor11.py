"""Corollary 11: how often ``W_down[:,S] W_up[S,:] = −I`` holds.

For continuous weight distributions the condition fails with probability one: every draw gets a
certified "no". Quantised networks are not generic: with integer weights (ternary, low-bit grids,
per-tensor scale folded out) absorbing sets appear with positive frequency at small ``d``.
Rademacher (±1) weights never absorb for ``d ≥ 2``: the diagonal of a sum of ``|S|`` ±1 products
has the parity of ``|S|`` and must be −1 (odd), the off-diagonal must be 0 (even).
Every count below is an exact decision by :func:`absorbjax.condition.find_absorbing_sets`.
"""

import re
import sys

import jax
import numpy as np

from absorbjax import condition, models
from absorbjax.lab import figstyle, reproduce

NAME = "cor11"
TITLE = "Cor 11: generic disjointness vs quantised weights"
PRESETS = {
    # one size per panel: ternary d = 2, n = 8 absorbs in about a quarter of the draws (quick preset)
    "smoke": {"draws": 20, "continuous": [[2, 4]], "widths": [8], "dims": [2], "bits": [2], "bits_dn": [2, 4]},
    "quick": {
        "draws": 400,
        "continuous": [[2, 4], [2, 12], [3, 9], [4, 32]],
        "widths": [2, 3, 4, 5, 6, 8],
        "dims": [2, 3, 4],
        "bits": [2, 3, 4, 5],
        "bits_dn": [2, 4],
    },
    "full": {
        "draws": 5000,
        "continuous": [[2, 4], [2, 12], [3, 9], [3, 20], [4, 32], [8, 64]],
        "widths": [2, 3, 4, 5, 6, 8, 10, 12],
        "dims": [2, 3, 4, 5],
        "bits": [2, 3, 4, 5, 6],
        "bits_dn": [2, 4],
    },
}
ACTIVATION = "relu"


def frequencies(key, draws, d, n, dist, bits=3):
    """Counts of each certificate status over ``draws`` blocks ``models.sample(ACTIVATION, d, n, key=key, draws=draws)``."""
    params = models.sample(ACTIVATION, d, n, key=key, draws=draws, dist=dist, bits=bits)
    certs = condition.find_absorbing_sets(params, ACTIVATION, progress=False)
    counts = {s.value: sum(c.status == s for c in certs) for s in condition.Status}
    counts["draws"] = draws
    counts["methods"] = sorted({c.method for c in certs})
    return counts


def _rate(c):
    p = c["absorbable"] / c["draws"]
    return p, np.sqrt(max(p * (1 - p), 1 / c["draws"]) / c["draws"])


def _series(rows):
    """Sorted keys (a record's JSON turns int keys into strings), the rates and their standard errors."""
    keys = sorted(rows, key=int)
    p, e = np.array([_rate(rows[k]) for k in keys]).T
    return [int(k) for k in keys], p, e


def figure(results):
    """Fraction of draws with an absorbing ``S`` by width (``d = 2``, per distribution), by
    dimension (``n = 2d``) and by the bits of the integer grid, from a record's ``results``
    (a zero drawn at ``1/(10·draws)`` on the log panels); two columns wide, one legend below."""
    by_bits_key = next(k for k in results if k.startswith("by_bits_d"))
    d_b, n_b = map(int, re.fullmatch(r"by_bits_d(\d+)_n(\d+)", by_bits_key).groups())
    draws = next(iter(results["continuous"].values()))["draws"]
    floor = 1 / (10 * draws)
    colors = dict(zip(results["by_width_d2"], figstyle.PALETTE))
    bar = {"marker": "o", "ms": 3, "capsize": 2, "lw": 1}
    with figstyle.context():
        fig, axes = figstyle.subplots(1, 3, width=figstyle.DOUBLE, height=2.6)
        ax = axes[0]
        for label, rows in results["by_width_d2"].items():
            ns, p, e = _series(rows)
            ax.errorbar(ns, p, yerr=e, color=colors[label], label=label, **bar)
        ax.set_xlabel("width n")
        ax.set_ylabel("fraction of draws absorbable")
        ax.set_title("d = 2, by weight distribution")
        ax = axes[1]
        for label, rows in results["by_dim"].items():
            ds, p, e = _series(rows)
            ax.errorbar(ds, np.maximum(p, floor), yerr=e, color=colors.get(label, "k"), **bar)
        ax.set_xticks(ds)
        ax.set_xlabel("dimension d (n = 2d)")
        ax.set_title("by dimension")
        ax = axes[2]
        bs, p, e = _series(results[by_bits_key])
        ax.errorbar(bs, np.maximum(p, floor), yerr=e, color=figstyle.PALETTE[7], **bar)
        ax.set_xticks(bs)
        ax.set_xlabel("bits of the grid (2: ternary)")
        ax.set_title(f"integer grids, d = {d_b}, n = {n_b}")
        for ax in axes[1:]:
            ax.set_yscale("log")
            ax.set_ylim(floor / 2, 1)
            ax.set_ylabel(f"fraction absorbable (0 at {floor:.2g})")
        fig.legend(
            loc="outside lower center",
            ncol=len(colors),
            title=f"{draws} draws a point, every one decided exactly; bars: one standard error",
        )
    return fig


def run(config, out, seed):
    key = jax.random.key(seed)
    draws = config["draws"]
    sub = iter(range(10**6))

    continuous = {}
    for dist in ("gaussian", "uniform", "orthogonal"):
        for d, n in config["continuous"]:
            continuous[f"{dist} d={d} n={n}"] = frequencies(jax.random.fold_in(key, next(sub)), draws, d, n, dist)

    discrete = {
        "gaussian": "gaussian",
        "rademacher (±1)": "rademacher",
        "ternary": "ternary",
        "3-bit grid": ("grid", 3),
        "4-bit grid": ("grid", 4),
    }
    by_width = {}
    for label, spec in discrete.items():
        dist, bits = spec if isinstance(spec, tuple) else (spec, 3)
        by_width[label] = {
            n: frequencies(jax.random.fold_in(key, next(sub)), draws, 2, n, dist, bits) for n in config["widths"]
        }
    by_dim = {}
    for label in ("ternary", "3-bit grid"):
        dist, bits = ("ternary", 3) if label == "ternary" else ("grid", 3)
        by_dim[label] = {
            d: frequencies(jax.random.fold_in(key, next(sub)), draws, d, 2 * d, dist, bits) for d in config["dims"]
        }
    d_b, n_b = config["bits_dn"]
    by_bits = {b: frequencies(jax.random.fold_in(key, next(sub)), draws, d_b, n_b, "grid", b) for b in config["bits"]}

    results = {"continuous": continuous, "by_width_d2": by_width, "by_dim": by_dim, f"by_bits_d{d_b}_n{n_b}": by_bits}

    cont_abs = sum(c["absorbable"] for c in continuous.values())
    cont_total = sum(c["draws"] for c in continuous.values())
    cont_no = sum(c["not_absorbable"] for c in continuous.values())
    tern = by_width["ternary"]
    best_n = max(tern, key=lambda n: tern[n]["absorbable"])
    rad = sum(c["absorbable"] for c in by_width["rademacher (±1)"].values())
    claims = [
        reproduce.Claim(
            "Cor 11: continuous weights (gaussian, uniform, orthogonal) never satisfy the condition",
            f"{cont_abs} absorbable of {cont_total} draws; {cont_no} certified not_absorbable, "
            f"{cont_total - cont_abs - cont_no} degenerate/undecided",
            holds=cont_abs == 0 and cont_no == cont_total,
            criterion="every draw certified not_absorbable",
            figure=NAME,
        ),
        reproduce.Claim(
            "quantised (ternary) weights absorb with positive frequency at small d",
            f"d=2, n={best_n}: {tern[best_n]['absorbable']}/{draws} absorbable; d=2..{config['dims'][-1]} (n=2d): "
            + ", ".join(f"{c['absorbable']}/{draws}" for c in by_dim["ternary"].values()),
            holds=tern[best_n]["absorbable"] > 0,
            criterion="at least one certified absorbable ternary draw at d = 2",
            figure=NAME,
        ),
        reproduce.Claim(
            "Rademacher ±1 weights never absorb for d ≥ 2 (parity)",
            f"{rad} absorbable of {draws * len(config['widths'])} draws",
            holds=rad == 0,
            criterion="no draw absorbable",
            figure=NAME,
        ),
    ]
    return {**results, "claims": claims}


if __name__ == "__main__":
    sys.exit(reproduce.script_main(sys.modules[__name__]))
