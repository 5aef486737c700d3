"""The sign-flip absorber (design §1) on every registered ungated activation.

On weights with ``c·W_down[:,S] W_up[S,:] = −I``, the residual-free block with the rows of ``W_up``
in ``S`` negated reproduces ``x + W_down σ(W_up x)`` to rounding error exactly when
``σ(z) − σ(−z) = c z`` (the activation's declared odd slope ``c``: 1 for relu, gelu and the ray-limit
family, ``1 + α`` for leaky_relu); ReLU² (odd part ``z|z|/2``, no odd slope) fails. Float64 throughout. (Gated blocks at the
origin, Prop 6, are measured by ``prop6.py``.)
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import activations, condition, figstyle, fit, models, reproduce
from absorbjax.io import subkey

NAME = "absorber"
TITLE = "The sign-flip absorber (Thm 8/10)"
PRESETS = {
    "smoke": {"d": 3, "n": 8, "draws": 4, "inputs": 200},
    "quick": {"d": 4, "n": 16, "draws": 32, "inputs": 2000},
    "full": {"d": 8, "n": 64, "draws": 256, "inputs": 10000},
}


def absorber_errors(activation, d, n, draws, xs, key):
    """Max-abs and max-relative error of the sign-flip absorber over ``draws`` absorbable blocks."""
    target, sets = models.planted_sample(activation, d, n, key=key, draws=draws)
    c = activations.get(activation).odd_slope
    absorbed = jax.tree.map(
        lambda *a: jnp.stack(a),
        *[condition.absorber(jax.tree.map(lambda a: a[i], target), S, odd_slope=c) for i, S in enumerate(sets)],
    )
    diff = jax.jit(
        jax.vmap(
            jax.vmap(lambda p, v, x: models.skip_mlp(p, x, activation) - models.mlp(v, x, activation), (None, None, 0)),
            (0, 0, None),
        )
    )(target, absorbed, xs)
    err = jnp.linalg.norm(diff, axis=-1)
    return float(jnp.max(jnp.abs(diff))), float(jnp.max(err / jnp.linalg.norm(xs, axis=-1)))


def figure(results):
    """Bars of the largest relative error of the absorber per activation (log scale), from a
    record's ``results``: blue where ``σ(z) − σ(−z) = c z`` is declared (exact up to rounding),
    vermilion where not; one column wide."""
    ungated = results["ungated"]
    names = list(ungated)
    odd = np.array([ungated[k]["odd_slope"] is not None for k in names])
    errs = np.array([max(ungated[k]["max_rel_error"], 1e-17) for k in names])
    x = np.arange(len(names))
    with figstyle.context():
        fig, ax = figstyle.subplots(width=figstyle.SINGLE, height=2.4)
        ax.bar(x[odd], errs[odd], color=figstyle.PALETTE[0], label="σ(z) − σ(−z) = c z")
        ax.bar(x[~odd], errs[~odd], color=figstyle.PALETTE[1], label="no odd slope")
        ax.axhline(1e-12, color="k", lw=0.8, ls="--", label="1e-12")
        ax.set_xticks(x, names, rotation=30, ha="right", rotation_mode="anchor")
        ax.set_yscale("log")
        ax.set_ylabel("max ‖residual − absorber‖ / ‖x‖")
        ax.set_title("Sign-flip absorber on absorbable weights (float64)")
        ax.legend(loc="upper left")
    return fig


def run(config, out, seed):
    d, n, draws = config["d"], config["n"], config["draws"]
    key = jax.random.key(seed)
    # directions uniform on the sphere, radii log-uniform on [1e-2, 1e2]
    xs, _ = fit.sample_inputs(
        fit.Inputs(num=config["inputs"], low=1e-2, high=1e2), d, key=subkey(key, 0), dtype=jnp.result_type(float)
    )
    ungated = {}
    for i, name in enumerate(activations.names(gated=False)):
        max_abs, max_rel = absorber_errors(name, d, n, draws, xs, subkey(key, 1, i))
        ungated[name] = {
            "max_abs_error": max_abs,
            "max_rel_error": max_rel,
            "odd_slope": None if (c := activations.get(name).odd_slope) is None else float(c),
        }

    print(f"\nsign-flip absorber, d={d}, n={n}, {draws} absorbable draws x {len(xs)} inputs (float64)")
    print(f"{'activation':<12} {'odd slope c':>11} {'max |error|':>12} {'max rel error':>14}")
    for name, r in ungated.items():
        print(f"{name:<12} {str(r['odd_slope']):>11} {r['max_abs_error']:12.2e} {r['max_rel_error']:14.2e}")

    names = list(ungated)
    odd = [k for k in names if ungated[k]["odd_slope"] is not None]
    worst_odd = max(ungated[k]["max_rel_error"] for k in odd)
    claims = [
        reproduce.Claim(
            "sign-flip absorber exact when σ(z) − σ(−z) = c z (" + ", ".join(odd) + ")",
            f"max relative error {worst_odd:.1e} over {draws} draws × {len(xs)} inputs",
            holds=worst_odd <= 1e-10,
            criterion="max relative error ≤ 1e-10 (float64)",
            figure=NAME,
        ),
        reproduce.Claim(
            "absorber fails for relu2 (odd part z|z|/2)",
            f"max relative error {ungated['relu2']['max_rel_error']:.2g}",
            holds=ungated["relu2"]["max_rel_error"] > 1e-2,
            criterion="max relative error > 1e-2",
            figure=NAME,
        ),
    ]
    return {"ungated": ungated, "claims": claims}


if __name__ == "__main__":
    sys.exit(reproduce.script_main(sys.modules[__name__]))
