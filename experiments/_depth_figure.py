"""The panels of the depth experiment's figure (``experiments/depth.py``), each drawn from the
record's ``results`` alone.

Not an experiment (``reproduce.discover`` skips modules whose names start with ``_``);
``depth.py`` imports it, a module beside it.
"""

import numpy as np

from absorbjax.lab import figstyle

__all__ = ["STYLE", "grid", "atlas", "ladder", "search", "coverage"]

STYLE = {"relu": {"color": figstyle.PALETTE[0], "marker": "o"}, "gelu": {"color": figstyle.PALETTE[1], "marker": "s"}}


def grid(ax, rows, activations):
    """Exact residual rank against the free bound b, one point per size of the grid."""
    for act in activations:
        sel = [r for r in rows if r["activation"] == act]
        ax.scatter(
            [r["free_bound"] for r in sel],
            [r["rank"] for r in sel],
            s=14,
            **STYLE[act],
            label=f"{act}: exact rank (mod p)",
        )
    top = max(r["maximum"] for r in rows)
    ax.plot([1, top], [1, top], "k:", lw=0.8, label="rank = b")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("free bound b = 2Lnd − (L−1)d² (− nL, ReLU)")
    ax.set_ylabel("residual rank (lower bound)")
    cert = sum(r["status"] == "certified_disjoint" for r in rows)
    grid = [
        sorted({r["d"] for r in rows}),
        sorted({r["n"] // r["d"] for r in rows}),
        sorted({r["depth"] for r in rows}),
    ]
    ax.set_title(
        f"(a) grid: {cert}/{len(rows)} sizes certified disjoint\nd ∈ {grid[0]}, n/d ∈ {grid[1]}, L ∈ {grid[2]}"
    )
    ax.legend(loc="upper left")


def atlas(ax_margin, ax_time, atlas):
    """The atlas benchmark's rows (``results["atlas"]["rows"]``): margin rank − b and wall time."""
    if atlas is None or not isinstance(atlas.get("rows"), list):
        for ax, tag in ((ax_margin, "(b)"), (ax_time, "(c)")):
            ax.text(
                0.5,
                0.5,
                "no atlas rows in this record:\npython benchmarks/bench_atlas.py,\nthen rerun depth",
                ha="center",
                va="center",
                transform=ax.transAxes,
            )
            ax.set_title(f"{tag} atlas")
            ax.set_axis_off()
        return
    every = atlas["rows"]
    # The margin at full rank is (L−1)d² for n ≥ d ≥ 2; narrow widths (n < d, §8) and the line (d = 1,
    # §10) are decided otherwise and appear in the time panel only.
    rows = [r for r in every if r["depth"] >= 2 and r["n"] >= r["d"] >= 2]
    for act in ("gelu", "relu"):  # ReLU drawn hollow over GELU: both stay visible where they coincide
        color, face = STYLE[act]["color"], STYLE[act]["color"] if act == "gelu" else "none"
        sel = [r for r in rows if r["activation"] == act]
        ax_margin.scatter(
            [(r["depth"] - 1) * r["d"] ** 2 for r in sel],
            [max(r["rank"] - r["free_bound"], 0.5) for r in sel],
            marker=STYLE[act]["marker"],
            s=12,
            edgecolors=color,
            facecolors=face,
            linewidths=0.7,
            label=f"{act} ({len(sel)} sizes)",
        )
        mine = [r for r in every if r["activation"] == act]
        ax_time.scatter(
            [r["params"] for r in mine],
            [max(r["seconds"], 1e-3) for r in mine],
            s=8,
            marker=STYLE[act]["marker"],
            edgecolors=color,
            facecolors=face,
            linewidths=0.7,
            label=act,
        )
        f = atlas["fits"][act]
        P = np.geomspace(64, max(r["params"] for r in mine), 50)
        ax_time.plot(P, f["a"] * P ** f["k"], color=color, lw=0.8, label=f"fit {f['a']:.2g}·P^{f['k']:.2f}")
    top = max((r["depth"] - 1) * r["d"] ** 2 for r in rows)
    ax_margin.plot([1, top], [1, top], "k:", lw=0.8, label="full rank")
    for ax in (ax_margin, ax_time):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(loc="upper left")
    ax_margin.set_xlabel("(L−1)d², the margin at full rank")
    ax_margin.set_ylabel("exact rank − free bound b")
    ax_margin.set_title(f"(b) atlas: 2 ≤ d ≤ {atlas['max_d']}, n ∈ {{d, 2d, 4d}}, 2 ≤ L ≤ 6")
    ax_time.set_xlabel("parameters P = 2Lnd")
    ax_time.set_ylabel("certify wall time (s)")
    ax_time.set_title(f"(c) atlas time, budget {atlas['budget_seconds']:.0f} s (2-core CPU)")


def ladder(ax, cal, eps, fit_cfg, slope, activation):
    """Best loss on W_abs + εΔ from the blockwise absorber and from random starts."""
    for name, color, label in (
        ("ladder_local", figstyle.PALETTE[2], "from the blockwise absorber"),
        ("ladder_random", figstyle.PALETTE[3], "random starts"),
    ):
        loss = np.maximum(np.asarray(cal[name], float), 1e-32)
        med = np.median(loss, 1)
        ax.errorbar(
            eps, med, yerr=[med - loss.min(1), loss.max(1) - med], marker="o", ms=3, capsize=2, color=color, label=label
        )
    ref = np.median(np.asarray(cal["ladder_local"], float), 1)[0]
    ax.plot(eps, ref * (eps / eps[0]) ** 2, "k:", lw=0.8, label="∝ ε²")
    floor = 1e3 * cal["tol"]
    ax.axhline(floor, color="0.5", lw=0.8, ls="--", label=f"resolution {floor:.0e}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("perturbation ε of W_abs + εΔ")
    ax.set_ylabel("best relative loss ℓ")
    size = f" ({fit_cfg['d']},{fit_cfg['n']},{fit_cfg['depth']})" if fit_cfg else ""
    ax.set_title(
        f"(d) ladder, {activation}{size}: slope {slope:.2f}\n"
        f"{np.shape(cal['ladder_local'])[1]} Δ per ε" + (f", {fit_cfg['restarts']} restarts" if fit_cfg else "")
    )
    ax.legend(loc="lower right")


def search(ax, cal):
    """Random-start search at depth: stacks absorbable by construction against generic ones."""
    groups = [
        (label, np.asarray(cal[key], float))
        for label, key in (("absorbable\n(loss 0 exists)", "absorbable"), ("generic", "generic"))
    ]
    groups = [(label, np.maximum(v[np.isfinite(v)], 1e-32)) for label, v in groups]  # a missing loss (NaN) is not drawn
    for j, (_, v) in enumerate(groups):
        ax.scatter(np.full(v.size, j) + np.linspace(-0.1, 0.1, v.size), v, s=14, color=figstyle.PALETTE[(2, 3)[j]])
    ax.axhline(cal["tol"], color="0.5", lw=0.8, ls="--", label=f"solved: ℓ ≤ {cal['tol']:.0e}")
    ax.set_xticks(range(len(groups)), [g[0] for g in groups])
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_yscale("log")
    losses = np.concatenate([v for _, v in groups] + [[cal["tol"]]])
    ax.set_ylim(losses.min() / 10, losses.max() * 10)
    ax.set_ylabel("best relative loss ℓ (random starts)")
    ax.set_title("(e) search at depth: absorbable vs generic")
    ax.legend(loc="center right")


def coverage(ax, cov):
    """ReLU: the share of Gaussian draws certified by rank, per size, with a 95% lower bound."""
    x = np.arange(len(cov))
    ax.bar(
        x - 0.2,
        [r["certified_by_rank"] / r["draws"] for r in cov],
        0.4,
        color=figstyle.PALETTE[0],
        label="certified by rank (rank > b)",
    )
    ax.bar(
        x + 0.2,
        [r["at_maximum"] / r["draws"] for r in cov],
        0.4,
        color=figstyle.PALETTE[1],
        label="rank = maximum 2Lnd − nL",
    )
    ax.scatter(
        x - 0.2,
        [r["lower95"] for r in cov],
        color="k",
        marker="_",
        s=60,
        zorder=3,
        label="95% lower bound (Clopper–Pearson)",
    )
    ax.set_xticks(x, [f"{r['d']},{r['n']},{r['depth']}" for r in cov])
    ax.set_ylim(0, 1.45)
    ax.set_yticks([0, 0.25, 0.5, 0.75, 1])
    ax.set_xlabel("ReLU size d, n, L")
    ax.set_ylabel("share of Gaussian draws")
    ax.set_title(f"(f) ReLU: Gaussian draws in the certified open set\n{cov[0]['draws']} draws per size")
    ax.legend(loc="upper center", ncol=1)
