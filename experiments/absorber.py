"""The sign-flip absorber (design §1) on every registered ungated activation.

On weights with ``c·W_down[:,S] W_up[S,:] = −I``, the residual-free block with the rows of ``W_up``
in ``S`` negated reproduces ``x + W_down σ(W_up x)`` to rounding error exactly when
``σ(z) − σ(−z) = c z`` (the activation's declared odd slope ``c``: 1 for relu, gelu and the ray-limit
family, ``1 + α`` for leaky_relu); ReLU² (odd part ``z|z|/2``, no odd slope) fails. Float64 throughout. (Gated blocks at the
origin, Prop 6, are measured by ``prop6.py``.)

A user's activation with a declared ray limit ``leaky_relu(α)`` (``docs/theory/ray_limit.md``, the generalised
flip): ``σ(z) = α z + (1 − α) softplus(z)``, ``α = 1/4``, registered for the run only with odd slope
``1 + α`` and that limit; biased blocks are decided by :func:`absorbjax.condition.find_absorbing_set`
(planted: ``absorbable`` and the flip with ``c = 1 + α`` reproduces the block; Gaussian: ``not_absorbable``
by the kink theorem via the ray limit).
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import activations, condition, fit, models
from absorbjax.io import subkey
from absorbjax.lab import figstyle, reproduce

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
    c = activations.get(activation).odd_slope  # None (relu2): the flip is built unchecked, to show it fails
    absorbed = jax.tree.map(
        lambda *a: jnp.stack(a),
        *[
            condition.absorber(jax.tree.map(lambda a: a[i], target), S, odd_slope=c, check=c is not None)
            for i, S in enumerate(sets)
        ],
    )
    diff = jax.jit(
        jax.vmap(
            jax.vmap(lambda p, v, x: models.skip_mlp(p, x, activation) - models.mlp(v, x, activation), (None, None, 0)),
            (0, 0, None),
        )
    )(target, absorbed, xs)
    err = jnp.linalg.norm(diff, axis=-1)
    return float(jnp.max(jnp.abs(diff))), float(jnp.max(err / jnp.linalg.norm(xs, axis=-1)))


LEAKY_ALPHA = 0.25  # exact in binary: c = 1 + α = 5/4
LEAKY_NAME = "_absorber_leaky_limit"  # registered during run() only


def _leaky_limited(z):
    """``α z + (1 − α) softplus(z)``: ``σ(z) − σ(−z) = (1 + α) z``, ``σ − leaky_relu(α)`` bounded."""
    return LEAKY_ALPHA * z + (1 - LEAKY_ALPHA) * jax.nn.softplus(z)


def leaky_limit_decisions(d, n, draws, xs, key):
    """Biased blocks of :func:`_leaky_limited` (declared ray limit ``leaky_relu(α)``), decided: for
    ``draws`` planted blocks (``c·W_down[:,S] W_up[S,:] = −I``, ``c = 1 + α``) and ``draws`` Gaussian
    ones, each with Gaussian hidden and output biases. Returns the statuses, the theorems cited by
    the Gaussian ones, and the largest relative error of the flip absorber (``b[S]`` negated, output
    bias ``e = c₀ + c·W_down[:,S] b[S]``) on the planted ones at ``xs``."""
    if LEAKY_NAME in activations.names():
        raise ValueError(f"activation {LEAKY_NAME!r} is already registered")
    act = activations.register(
        LEAKY_NAME, _leaky_limited, odd_slope=1 + LEAKY_ALPHA, ray_limit=f"leaky_relu({LEAKY_ALPHA!r})"
    )
    sigma = jax.jit(act.fn)
    planted, generic, theorems, worst = [], [], set(), 0.0
    try:
        for i in range(draws):
            b = np.asarray(jax.random.normal(subkey(key, 0, i), (n,)))
            c0 = np.asarray(jax.random.normal(subkey(key, 1, i), (d,)))
            params, _ = models.planted(LEAKY_NAME, d, n, key=subkey(key, 2, i))
            cert = condition.find_absorbing_set(params, LEAKY_NAME, bias=b)
            planted.append(cert.status)
            if cert.status == "absorbable":
                U, D = np.asarray(params.up), np.asarray(params.down)
                V = np.asarray(condition.absorber(params, cert.S, odd_slope=LEAKY_NAME).up)
                beta, e = condition.absorber_biases(params, cert.S, b, c0, odd_slope=LEAKY_NAME)
                want = xs + np.asarray(sigma(xs @ U.T + b)) @ D.T + c0
                got = np.asarray(sigma(xs @ V.T + beta)) @ D.T + e
                worst = max(worst, float(np.max(np.linalg.norm(want - got, axis=1) / np.linalg.norm(want, axis=1))))
            gauss = models.init(LEAKY_NAME, d, n, key=subkey(key, 3, i))
            cert = condition.find_absorbing_set(gauss, LEAKY_NAME, bias=b)
            generic.append(cert.status)
            theorems.add(cert.theorem)
    finally:
        activations.unregister(LEAKY_NAME)
    return {
        "alpha": LEAKY_ALPHA,
        "assumes": list(act.assumes),
        "planted": planted,
        "gaussian": generic,
        "gaussian_theorems": sorted(t for t in theorems if t),
        "max_rel_error": worst,
    }


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

    leaky = leaky_limit_decisions(d, n, min(draws, 8), np.asarray(xs), subkey(key, 2))

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
        reproduce.Claim(
            "a declared leaky ray limit decides biased blocks: planted absorbable with the flip absorber "
            "exact to 1e-12, Gaussian not_absorbable",
            f"sigma = {leaky['alpha']} z + {1 - leaky['alpha']} softplus(z), limit leaky_relu({leaky['alpha']}), "
            f"d={d}, n={n}: planted {leaky['planted'].count('absorbable')}/{len(leaky['planted'])} absorbable, "
            f"flip max relative error {leaky['max_rel_error']:.1e}; Gaussian "
            f"{leaky['gaussian'].count('not_absorbable')}/{len(leaky['gaussian'])} not_absorbable "
            f"({'; '.join(t.split(',')[0] for t in leaky['gaussian_theorems'])})",
            holds=(
                leaky["planted"].count("absorbable") == len(leaky["planted"])
                and leaky["max_rel_error"] <= 1e-12
                and leaky["gaussian"].count("not_absorbable") == len(leaky["gaussian"])
                and all(t.startswith(activations.RAY_LIMIT_KINK_THEOREM) for t in leaky["gaussian_theorems"])
            ),
            criterion="every planted draw absorbable with flip error ≤ 1e-12 (float64, relative), every Gaussian "
            "draw not_absorbable by the kink theorem via the ray limit",
            figure=NAME,
        ),
    ]
    return {"ungated": ungated, "leaky_ray_limit": leaky, "claims": claims}


if __name__ == "__main__":
    sys.exit(reproduce.script_main(sys.modules[__name__]))
