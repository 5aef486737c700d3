"""Soundness of the certificates on the weights that break naive tolerances.

The families (:data:`absorbjax.testing.FAMILIES`) draw blocks at the edges where a global
tolerance, a floating-point product or a floating-point MILP verdict gives wrong answers: weights
stored in float16 / bfloat16 (also mixed per array, and float16 subnormals), float32 weights ×100,
one huge unit outside every set, unit magnitudes over six decades with a planted set and
``n > d²``, changes of coordinates with ``cond(P)`` up to 1e12, near misses, cancellation inside
``S`` (two units of size 1e11–1e13 whose ``W_down`` columns cancel), products in the subnormal
range, units rescaled by ``2^±(500…560)``, exactly parallel rows of size 1e-165, biased blocks of
the five ray-limit activations, and parallel rows with distinct biases. Every certificate of
:func:`absorbjax.condition.find_absorbing_set` is judged by :func:`absorbjax.testing.judge`,
independently of the decision's machinery, in exact rational arithmetic on the stored values:

* ``absorbable``: the set passes rule (★) exactly, ``miss_bound`` bounds the exact ``‖M_S‖_F`` and
  is within ``skip_rtol`` of the skip (rule (E)), the absorber reproduces the block in float64;
* ``not_absorbable`` / ``degenerate``: brute force over all ``2^n`` sets (``n ≤ 18``; float64
  screen with a rigorous margin, exact check of the rest) or the planted set finds no set that
  passes; the hypotheses match an exact check; the activation has a proved converse
  (:meth:`absorbjax.activations.Activation.converse`);
* ``within_rounding``: ``"yes"`` with a set that passes the storage rule, ``"no"`` only when brute
  force and the planted set (with the absolute rounding of zero/subnormal entries) find none.

``undecided`` and one-line ``ValueError`` refusals are allowed and counted; a crash (any other
exception) counts as wrong. ``python experiments/soundness.py [--preset smoke|quick|full]``.
"""

from __future__ import annotations

import sys

import numpy as np

from absorbjax import condition, figstyle, reproduce, testing

NAME = "soundness"
TITLE = "Certificates on adversarial weights (soundness)"
PRESETS = {
    "smoke": {"per_family": 6},
    "quick": {"per_family": 40},
    "full": {"per_family": 1000},
}
OUTCOMES = ("absorbable", "not_absorbable", "degenerate", "undecided", "refused", "wrong")


def audit(family: str, count: int, seed: int, time_limit: float = 60.0) -> dict:
    """Decide ``count`` blocks of one family and judge each certificate.

    ``time_limit`` (seconds per MILP) is far above what any instance needs on an idle 2-core
    machine (≤ 2 s), so that the record does not depend on the machine's load."""
    make = testing.FAMILIES[family]
    fam_index = list(testing.FAMILIES).index(family)
    rows = []
    for i in range(count):
        rng = np.random.default_rng([seed, fam_index, i])
        params, activation, planted, note, *bias = make(rng, i)
        bias = bias[0] if bias else None
        try:
            cert = condition.find_absorbing_set(params, activation, time_limit=time_limit, bias=bias)
        except ValueError as err:  # a refusal in one clear line is allowed and counted
            rows.append(
                {
                    "note": note,
                    "status": "refused",
                    "method": "",
                    "within_rounding": "n/a",
                    "planted": planted is not None,
                    "seconds": 0.0,
                    "wrong": "",
                    "error": str(err),
                }
            )
            continue
        except Exception as err:  # noqa: BLE001  a crash is counted as one
            rows.append(
                {
                    "note": note,
                    "status": "crash",
                    "method": "",
                    "within_rounding": "n/a",
                    "planted": planted is not None,
                    "seconds": 0.0,
                    "wrong": f"crash: {err!r}",
                }
            )
            continue
        wrong = testing.judge(cert, params, activation, planted, bias)
        rows.append(
            {
                "note": note,
                "status": cert.status,
                "method": cert.method,
                "within_rounding": cert.within_rounding,
                "planted": planted is not None,
                "seconds": cert.seconds,
                "wrong": wrong,
            }
        )
    counts = {o: sum(r["status"] == o and not r["wrong"] for r in rows) for o in OUTCOMES[:-1]}
    counts["wrong"] = sum(bool(r["wrong"]) for r in rows)
    counts["crashes"] = sum(r["status"] == "crash" for r in rows)
    counts["rounding_yes"] = sum(r["within_rounding"] == "yes" for r in rows)
    return {
        "counts": counts,
        "rows": rows,
        "max_seconds": max(r["seconds"] for r in rows),
        "seconds": sum(r["seconds"] for r in rows),
    }


COLORS = dict(
    zip(
        OUTCOMES,
        (
            figstyle.PALETTE[2],
            figstyle.PALETTE[0],
            figstyle.PALETTE[4],
            figstyle.PALETTE[5],
            figstyle.PALETTE[3],
            figstyle.PALETTE[1],
        ),
    )
)


def figure(results):
    """The soundness figure from a record's ``results`` (:func:`run`'s return, as saved): the
    outcome of every instance per family, stacked; wrong answers in red. 7 in wide."""
    families = results["families"]
    names = list(families)
    left = np.zeros(len(names))
    per = sorted({len(r["rows"]) for r in families.values()})
    with figstyle.context():
        fig, ax = figstyle.subplots(width=figstyle.DOUBLE, height=0.9 + 0.17 * len(names))
        for outcome in OUTCOMES:
            widths = np.array([families[f]["counts"][outcome] for f in names], float)
            ax.barh(names, widths, left=left, height=0.75, color=COLORS[outcome], label=outcome)
            left += widths
        ax.invert_yaxis()
        ax.set_xlim(0, max(left))
        ax.set_xlabel(f"instances ({', '.join(map(str, per))} per family)")
        fig.suptitle("Certificates on adversarial weights, judged in exact arithmetic (red: wrong answers)")
        fig.legend(loc="outside lower center", ncol=len(OUTCOMES))
    return fig


def run(config, out, seed):
    results = {family: audit(family, config["per_family"], seed) for family in testing.FAMILIES}

    record = {
        "families": {
            f: {"counts": r["counts"], "max_seconds": r["max_seconds"], "rows": r["rows"]} for f, r in results.items()
        }
    }

    total = sum(sum(r["counts"][o] for o in OUTCOMES) for r in results.values())
    wrong = sum(r["counts"]["wrong"] for r in results.values())
    undecided = sum(r["counts"]["undecided"] for r in results.values())
    crashes = sum(r["counts"]["crashes"] for r in results.values())
    table = "; ".join(
        f"{f}: " + ", ".join(f"{r['counts'][o]} {o}" for o in OUTCOMES if r["counts"][o]) for f, r in results.items()
    )
    first_wrong = next(
        (f"{f}: {row['note']}: {row['wrong']}" for f, r in results.items() for row in r["rows"] if row["wrong"]), "none"
    )
    claims = [
        reproduce.Claim(
            "no certificate is wrong and no call crashes on adversarial weights (low-precision and mixed "
            "storage, scaled and huge units, magnitude spread, coordinate changes, near misses, cancellation "
            "inside S, subnormal and 2^±k-scaled units, biased blocks and the ray-limit activations), judged "
            "in exact rational arithmetic",
            f"{wrong} wrong ({crashes} crashes) of {total} ({undecided} undecided); {table}; first wrong: {first_wrong}",
            holds=wrong == 0,
            criterion="zero wrong answers and crashes; undecided and one-line refusals allowed, counted",
            figure=NAME,
        ),
    ]
    return {**record, "claims": claims}


if __name__ == "__main__":
    sys.exit(reproduce.script_main(sys.modules[__name__]))
