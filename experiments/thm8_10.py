"""Thm 8 (ReLU) and Thm 10 (GELU): absorption iff ``W_down[:,S] W_up[S,:] = −I`` for some ``S``.

Two populations per activation and size: weights built to satisfy the condition
(``models.planted``) and generic Gaussian draws. For every draw, the exact decision of
:func:`absorbjax.condition.find_absorbing_set` (a certificate either way) and the best loss of a
random-init numerical search (:func:`absorbjax.fit.search`) that knows nothing of ``S``. Where the
condition holds the search reaches rounding error; where it is certified to fail the search stays
many orders of magnitude away. SiLU is an extension: there an ``S`` still gives the absorber, but
the converse is not proven.
"""

import sys

import jax
import numpy as np
from matplotlib.ticker import MaxNLocator

from absorbjax import condition, figstyle, fit, models, reproduce

NAME = "thm8_10"
TITLE = "Thm 8 / Thm 10: ReLU and GELU"
PRESETS = {
    "smoke": {"sizes": [[2, 4]], "activations": ["relu", "gelu"], "draws": 2, "restarts": 4, "steps": 200},
    "quick": {"sizes": [[2, 4], [3, 6]], "activations": ["relu", "gelu"], "draws": 16, "restarts": None, "steps": None},
    "full": {
        "sizes": [[2, 4], [3, 6], [4, 8]],
        "activations": ["relu", "gelu", "silu"],
        "draws": 256,
        "restarts": None,
        "steps": None,
    },
}
SOLVED = 1e-20


def population(kind, activation, d, n, draws, key):
    """``draws`` weights of one population: ``"absorbable"`` or ``"generic"`` (Gaussian)."""
    if kind == "absorbable":
        return models.planted_sample(activation, d, n, key=key, draws=draws)[0]
    return models.sample(activation, d, n, key=key, draws=draws)


def figure(results):
    """Histograms of ``log10`` of the best search loss (floored at 1e-32), one panel per
    activation (rows) and size (columns), split by population (constructed absorbable, generic
    Gaussian) and by the exact decision (certified yes solid, certified no hatched), the solved
    threshold dashed; from a record's ``results``, two columns wide, one legend below."""
    rows = results["rows"]
    acts = list(dict.fromkeys(r["activation"] for r in rows))
    sizes = list(dict.fromkeys((r["d"], r["n"]) for r in rows))
    floor = 1e-32
    bins = np.linspace(np.log10(floor), 1, 34)
    colors = {"absorbable": figstyle.PALETTE[0], "generic": figstyle.PALETTE[1]}
    words = {"absorbable": "constructed with S", "generic": "Gaussian"}
    with figstyle.context():
        fig, axes = figstyle.subplots(
            len(acts), len(sizes), width=figstyle.DOUBLE, height=0.4 + 1.9 * len(acts), squeeze=False, sharex=True
        )
        for r in rows:
            ax = axes[acts.index(r["activation"]), sizes.index((r["d"], r["n"]))]
            loss = np.log10(np.maximum(np.asarray(r["best_loss"], dtype=float), floor))
            yes = np.array([s == "absorbable" for s in r["status"]])
            color, word = colors[r["kind"]], words[r["kind"]]
            if yes.any():
                ax.hist(loss[yes], bins=bins, color=color, alpha=0.75, label=f"{word}: certified absorbable")
            if (~yes).any():
                ax.hist(
                    loss[~yes],
                    bins=bins,
                    color=color,
                    alpha=0.4,
                    hatch="////",
                    edgecolor=color,
                    lw=0.5,
                    label=f"{word}: certified not absorbable",
                )
        for (i, activation), (j, (d, n)) in ((x, y) for x in enumerate(acts) for y in enumerate(sizes)):
            ax = axes[i, j]
            ax.axvline(np.log10(results["solved_threshold"]), color="k", lw=0.8, ls="--", label="solved (loss ≤ 1e-20)")
            draws = [len(r["status"]) for r in rows if (r["activation"], r["d"], r["n"]) == (activation, d, n)]
            ax.set_title(f"{activation}, d = {d}, n = {n} ({' + '.join(map(str, draws))} draws)")
            if i == len(acts) - 1:
                ax.set_xlabel("log10 best relative loss (floor 1e-32)")
            if j == 0:
                ax.set_ylabel("draws")
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        handles, labels = axes[0, 0].get_legend_handles_labels()
        seen = dict(zip(labels, handles))
        for ax in axes.flat:
            seen.update({lab: h for h, lab in zip(*ax.get_legend_handles_labels()) if lab not in seen})
        fig.legend(seen.values(), seen.keys(), loc="outside lower center", ncol=3)
    return fig


def run(config, out, seed):
    key = jax.random.key(seed)
    solver = fit.Solver(tol=SOLVED, **{k: config[k] for k in ("restarts", "steps") if config[k] is not None})
    rows = {}
    for i, activation in enumerate(config["activations"]):
        for j, (d, n) in enumerate(config["sizes"]):
            for k, kind in enumerate(("absorbable", "generic")):
                sub = jax.random.fold_in(key, 100 * i + 10 * j + k)
                params = population(kind, activation, d, n, config["draws"], sub)
                certs = condition.find_absorbing_sets(params, activation, progress=False)
                found = fit.recall(params, activation, key=jax.random.fold_in(sub, 1), solver=solver)
                rows[(activation, d, n, kind)] = {
                    "status": [c.status for c in certs],
                    "best_loss": found.best_loss,
                    "holdout_loss": found.holdout_loss,
                    "solved": found.solved,
                    "restarts": found.result.losses.shape[1],
                    "steps": found.result.config.steps,
                }

    acts, sizes = config["activations"], config["sizes"]
    results = {
        "rows": [{"activation": a, "d": d, "n": n, "kind": kind, **r} for (a, d, n, kind), r in rows.items()],
        "solved_threshold": SOLVED,
    }

    def agg(kind, pred):
        vals = [(pred(r), len(r["status"])) for key_, r in rows.items() if key_[3] == kind]
        return sum(v for v, _ in vals), sum(t for _, t in vals)

    cert_yes, total_abs = agg("absorbable", lambda r: sum(s == "absorbable" for s in r["status"]))
    solved = {(a, d, n): int(np.sum(rows[(a, d, n, "absorbable")]["solved"])) for a in acts for d, n in sizes}
    recall = sum(solved.values())
    cert_no, total_gen = agg("generic", lambda r: sum(s == "not_absorbable" for s in r["status"]))
    gen_min = min(float(np.min(r["best_loss"])) for key_, r in rows.items() if key_[3] == "generic")
    per_cell = "; ".join(f"{a} ({d},{n}): {c}/{config['draws']}" for (a, d, n), c in solved.items())
    claims = [
        reproduce.Claim(
            "weights with W_down[:,S] W_up[S,:] = −I are certified absorbable",
            f"{cert_yes}/{total_abs} certified absorbable",
            holds=cert_yes == total_abs,
            criterion="every constructed draw certified absorbable",
            figure=NAME,
        ),
        reproduce.Claim(
            "a random-init search finds the absorber where the condition holds (loss ≤ 1e-20 on training "
            "and held-out inputs)",
            f"{recall}/{total_abs} draws ({per_cell})",
            holds=recall >= 0.9 * total_abs if total_abs >= 16 else None,
            criterion="recall ≥ 90%" if total_abs >= 16 else f"not judged: {total_abs} draws are too few for a rate",
            figure=NAME,
        ),
        reproduce.Claim(
            "Gaussian draws are certified not absorbable and the search stays away",
            f"{cert_no}/{total_gen} certified not_absorbable; smallest search loss {gen_min:.2g}",
            holds=cert_no == total_gen and gen_min > 1e-12,
            criterion="every draw not_absorbable and every search loss > 1e-12",
            figure=NAME,
        ),
    ]
    return {**results, "claims": claims}


if __name__ == "__main__":
    sys.exit(reproduce.script_main(sys.modules[__name__]))
