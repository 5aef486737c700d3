"""The sign-flip absorber (design §1) on every registered activation.

Ungated: on weights with ``W_down[:,S] W_up[S,:] = −I``, the residual-free block with the rows of
``W_up`` in ``S`` negated reproduces ``x + W_down σ(W_up x)`` to rounding error exactly when
``σ(z) − σ(−z) = z``; ReLU² (odd part ``z|z|/2``) fails. Gated: the residual-free block's
Jacobian at 0 vanishes when ``g(0) = 0`` (Prop 6), while the residual block's is ``I``.
Float64 throughout.
"""

import sys

import jax

import jax.numpy as jnp
import numpy as np

from absorbjax import activations, condition, models, probes, reproduce

NAME = "absorber"
TITLE = "Absorber identity and Prop 6 at the origin"
PRESETS = {
    "smoke": {"d": 3, "n": 8, "draws": 4, "inputs": 200},
    "quick": {"d": 4, "n": 16, "draws": 32, "inputs": 2000},
    "full": {"d": 8, "n": 64, "draws": 256, "inputs": 10000},
}


def _inputs(key, count, d):
    """Directions uniform on the sphere, radii log-uniform on [1e-2, 1e2]."""
    kd, kr = jax.random.split(key)
    u = jax.random.normal(kd, (count, d))
    u = u / jnp.linalg.norm(u, axis=1, keepdims=True)
    return u * 10.0 ** jax.random.uniform(kr, (count, 1), minval=-2, maxval=2)


def absorber_errors(activation, d, n, draws, xs, key):
    """Max-abs and max-relative error of the sign-flip absorber over ``draws`` absorbable blocks."""
    target, sets = models.absorbable_sample(key, draws, d, n, activation)
    absorbed = jax.tree.map(lambda *a: jnp.stack(a), *[
        condition.absorber(jax.tree.map(lambda a: a[i], target), S) for i, S in enumerate(sets)])
    diff = jax.jit(jax.vmap(jax.vmap(
        lambda p, v, x: models.skip_mlp(p, x, activation) - models.mlp(v, x, activation),
        (None, None, 0)), (0, 0, None)))(target, absorbed, xs)
    err = jnp.linalg.norm(diff, axis=-1)
    return float(jnp.max(jnp.abs(diff))), float(jnp.max(err / jnp.linalg.norm(xs, axis=-1)))


def jacobian_norms(activation, d, n, draws, key):
    """‖J(0)‖_F of residual-free and residual blocks over ``draws`` Gaussian draws."""
    params = models.sample(key, draws, d, n, activation)
    free = jax.vmap(lambda p: probes.jacobian_at_origin(lambda x: models.mlp(p, x, activation), d))(params)
    skip = jax.vmap(lambda p: probes.jacobian_at_origin(lambda x: models.skip_mlp(p, x, activation), d))(params)
    nf, ns = jnp.linalg.norm(free, axis=(1, 2)), jnp.linalg.norm(skip, axis=(1, 2))
    return {"free_max": float(nf.max()), "free_min": float(nf.min()),
            "skip_min": float(ns.min()), "skip_max": float(ns.max()),
            "skip_minus_identity_max": float(jnp.max(jnp.abs(skip - jnp.eye(d))))}


def run(config, out, seed):
    d, n, draws = config["d"], config["n"], config["draws"]
    key = jax.random.key(seed)
    xs = _inputs(jax.random.fold_in(key, 10**6), config["inputs"], d)
    ungated = {}
    for i, name in enumerate(activations.names(gated=False)):
        max_abs, max_rel = absorber_errors(name, d, n, draws, xs, jax.random.fold_in(key, i))
        ungated[name] = {"max_abs_error": max_abs, "max_rel_error": max_rel,
                         "odd_part_half": activations.get(name).odd_part_half}
    gated = {name: jacobian_norms(name, d, n, draws, jax.random.fold_in(key, 100 + i))
             for i, name in enumerate(activations.names(gated=True))}

    print(f"\nsign-flip absorber, d={d}, n={n}, {draws} absorbable draws x {len(xs)} inputs (float64)")
    print(f"{'activation':<10} {'s(z)-s(-z)=z':>13} {'max |error|':>12} {'max rel error':>14}")
    for name, r in ungated.items():
        print(f"{name:<10} {str(r['odd_part_half']):>13} {r['max_abs_error']:12.2e} {r['max_rel_error']:14.2e}")
    print(f"\nJacobian at 0, {draws} Gaussian draws: ||J||_F residual-free vs residual (= ||I||_F = {np.sqrt(d):.3f})")
    print(f"{'activation':<10} {'g(0)':>5} {'free max':>10} {'free min':>10} {'residual':>19}")
    for name, r in gated.items():
        g0 = activations.get(name).gate_at_zero
        print(f"{name:<10} {g0:5.2f} {r['free_max']:10.2e} {r['free_min']:10.2e} "
              f"{r['skip_min']:9.4f}..{r['skip_max']:.4f}")

    fig, (ax1, ax2) = reproduce.subplots(1, 2, figsize=(11, 4))
    names = list(ungated)
    errs = [max(ungated[k]["max_rel_error"], 1e-17) for k in names]
    colors = [reproduce.PALETTE[0] if ungated[k]["odd_part_half"] else reproduce.PALETTE[1] for k in names]
    ax1.bar(names, errs, color=colors)
    ax1.set_yscale("log")
    ax1.axhline(1e-12, color="k", lw=0.8, ls="--", label="1e-12")
    ax1.set_ylabel("max ‖residual − absorber‖ / ‖x‖")
    ax1.set_title(f"Sign-flip absorber, d={d}, n={n}\n{draws} draws × {len(xs)} inputs, float64")
    ax1.legend()
    gnames = list(gated)
    x = np.arange(len(gnames))
    ax2.bar(x - 0.2, [max(gated[k]["free_max"], 1e-17) for k in gnames], 0.4,
            color=reproduce.PALETTE[1], label="residual-free (max over draws)")
    ax2.bar(x + 0.2, [gated[k]["skip_min"] for k in gnames], 0.4,
            color=reproduce.PALETTE[0], label="residual (min over draws)")
    ax2.set_xticks(x, gnames)
    ax2.set_yscale("log")
    ax2.set_ylabel("‖J(0)‖_F")
    ax2.set_title(f"Jacobian at the origin, gated blocks\n{draws} Gaussian draws, d={d}, n={n}")
    ax2.legend(fontsize=8)
    figure = reproduce.save_figure(fig, out, NAME)

    odd = [k for k in names if ungated[k]["odd_part_half"]]
    worst_odd = max(ungated[k]["max_rel_error"] for k in odd)
    free_max = max(gated["swiglu"]["free_max"], gated["geglu"]["free_max"])
    claims = [
        reproduce.Claim(
            "sign-flip absorber exact when σ(z) − σ(−z) = z (" + ", ".join(odd) + ")",
            f"max relative error {worst_odd:.1e} over {draws} draws × {len(xs)} inputs",
            holds=worst_odd <= 1e-10, criterion="max relative error ≤ 1e-10 (float64)", figure=figure),
        reproduce.Claim(
            "absorber fails for relu2 (odd part z|z|/2)",
            f"max relative error {ungated['relu2']['max_rel_error']:.2g}",
            holds=ungated["relu2"]["max_rel_error"] > 1e-2, criterion="max relative error > 1e-2", figure=figure),
        reproduce.Claim(
            "Prop 6: residual-free swiglu/geglu blocks have J(0) = 0, residual blocks I",
            f"max ‖J(0)‖_F {free_max:.1e} vs {gated['swiglu']['skip_min']:.3f}; "
            f"sigmoid glu (g(0) = 1/2): ‖J(0)‖_F ≥ {gated['glu']['free_min']:.2g}",
            holds=free_max <= 1e-12 and gated["glu"]["free_min"] > 1e-3,
            criterion="residual-free ‖J(0)‖_F ≤ 1e-12; control glu ‖J(0)‖_F > 1e-3", figure=figure),
    ]
    return {"ungated": ungated, "gated": gated, "claims": claims}


if __name__ == "__main__":
    sys.exit(reproduce.script_main(sys.modules[__name__]))
