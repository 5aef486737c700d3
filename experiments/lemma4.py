"""Lemma 4: an invertible linear skip reduces to the identity skip.

``A x + D σ(U x) = A (x + A⁻¹D σ(U x))``, so absorption with skip ``A`` is absorption of the reduced
block. Three kinds of ``A``: random with a prescribed condition number; static Hyper-Connection
skips ``H_res ⊗ I_d`` on an ``n_s``-stream residual; manifold-constrained ones (Sinkhorn-projected,
doubly stochastic ``H_res``), which can be singular and are then flagged, not reduced.
The reduction error ``max ‖A x + Dσ(Ux) − A·reduced(x)‖ / ‖x‖`` is measured in float64.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import condition, models
from absorbjax.lab import figstyle, reproduce

NAME = "lemma4"
TITLE = "Lemma 4: invertible skips"
PRESETS = {
    "smoke": {"d": 4, "n": 16, "conds": 6, "per_cond": 2, "streams": 4, "hc_draws": 4, "inputs": 64, "singular": 4},
    "quick": {"d": 8, "n": 32, "conds": 13, "per_cond": 8, "streams": 4, "hc_draws": 64, "inputs": 512, "singular": 16},
    "full": {
        "d": 16,
        "n": 64,
        "conds": 25,
        "per_cond": 32,
        "streams": 4,
        "hc_draws": 512,
        "inputs": 2048,
        "singular": 32,
    },
}
ACTIVATION = "gelu"


def conditioned(key, d, cond):
    """Random ``A = Q₁ diag(s) Q₂ᵀ`` with singular values log-spaced from 1 to ``1/cond``."""
    k1, k2 = jax.random.split(key)
    q1, _ = jnp.linalg.qr(jax.random.normal(k1, (d, d)))
    q2, _ = jnp.linalg.qr(jax.random.normal(k2, (d, d)))
    return (q1 * jnp.logspace(0, -np.log10(cond), d)) @ q2.T


def sinkhorn(logits, iters=20):
    """Doubly-stochastic projection of ``exp(logits)`` (the manifold-constrained ``H_res``)."""
    m = jnp.exp(logits)
    for _ in range(iters):
        m = m / m.sum(axis=1, keepdims=True)
        m = m / m.sum(axis=0, keepdims=True)
    return m


def hyper_block(key, d, n, streams):
    """A static Hyper-Connection layer as one block on ``R^{n_s d}``.

    Streams ``x = (x_1..x_{n_s})``; the layer reads ``h = Σ_j β_j x_j`` and writes
    ``x' = (H_res ⊗ I_d) x + (α ⊗ I_d) W_down σ(W_up h)``: a residual block with
    ``W_up' = W_up (βᵀ ⊗ I_d)``, ``W_down' = (α ⊗ I_d) W_down``.
    """
    kp, ka, kb = jax.random.split(key, 3)
    p = models.init(ACTIVATION, d, n, key=kp)
    alpha = 1.0 + 0.1 * jax.random.normal(ka, (streams, 1))
    beta = 1.0 / streams + 0.1 * jax.random.normal(kb, (1, streams))
    return models.MLPParams(p.up @ jnp.kron(beta, jnp.eye(d)), jnp.kron(alpha, jnp.eye(d)) @ p.down)


def reduction_error(A, params, xs):
    """``max ‖A x + W_down σ(W_up x) − A·(x + A⁻¹W_down σ(W_up x))‖ / ‖x‖`` over ``xs``; None if refused."""
    try:
        reduced = models.reduce_skip(params, A)
    except ValueError:
        return None
    lhs = jax.vmap(lambda x: models.skip_mlp(params, x, ACTIVATION, A))(xs)
    rhs = jax.vmap(lambda x: A @ models.skip_mlp(reduced, x, ACTIVATION))(xs)
    return float(jnp.max(jnp.linalg.norm(lhs - rhs, axis=1) / jnp.linalg.norm(xs, axis=1)))


def singular_skips(seed, d, n, draws):
    """Singular skips, decided (no Lemma 4 needed: the kink theorem and its ray limit allow any ``A``).
    Planted: dyadic weights (multiples of 1/64, so every product is exact), a set ``S`` of size
    ``1…d−1`` and ``A = −W_down[:,S] W_up[S,:]`` (rank ``|S| < d``, singular). Narrow: width
    ``n' = d − 2`` and a dyadic ``A`` of rank ``d − 1 > n'``. Returns ``(planted absorbable with the
    flip and miss 0, planted, narrow not_absorbable by rank, narrow)``."""
    rng = np.random.default_rng(seed)
    flipped = refused = 0
    for _ in range(draws):
        U, D = np.round(rng.normal(size=(n, d)) * 64) / 64, np.round(rng.normal(size=(d, n)) * 64) / 64
        S = np.sort(rng.choice(n, int(rng.integers(1, d)), replace=False))
        A = -(D[:, S] @ U[S])
        cert = condition.find_absorbing_set(models.MLPParams(U, D), ACTIVATION, skip=A)
        flipped += cert.status == "absorbable" and cert.promise.miss_bound == 0 and cert.S is not None
        m = d - 2
        B = np.round(rng.normal(size=(d, d - 1)) * 8) / 8 @ (np.round(rng.normal(size=(d - 1, d)) * 8) / 8)
        p = models.MLPParams(rng.normal(size=(m, d)), rng.normal(size=(d, m)))
        cert = condition.find_absorbing_set(p, ACTIVATION, skip=B, decision=condition.Decision(narrow=True))
        refused += cert.status == "not_absorbable" and cert.method == "rank"
    return flipped, draws, refused, draws


def figure(results):
    """Reduction error ``max ‖A x + W_down σ(W_up x) − A·reduced(x)‖ / ‖x‖`` against ``cond(A)``
    (log–log) for the three kinds of skip, the refused ones at error 1e-3 (an infinite condition
    number drawn at 1e13) and the ``cond(A) · eps`` line, from a record's ``results``; one column
    wide, the legend below the axes."""
    max_cond = results["max_cond"]
    kinds = (
        ("random", "random A", 0, "o"),
        ("hyper_connection", "Hyper-Connection H_res ⊗ I", 2, "s"),
        ("sinkhorn", "Sinkhorn (doubly stochastic) H_res ⊗ I", 3, "^"),
    )
    refused = [c for key, *_ in kinds for c, e in results[key] if e is None]
    with figstyle.context():
        fig, ax = figstyle.subplots(width=figstyle.SINGLE, height=3.6)
        for key, label, color, marker in kinds:
            ok = [(c, e) for c, e in results[key] if e is not None]
            if ok:
                c, e = np.array(ok).T
                ax.plot(
                    c,
                    np.maximum(e, 1e-18),
                    marker,
                    ms=3,
                    alpha=0.7,
                    mew=0,
                    ls="none",
                    color=figstyle.PALETTE[color],
                    label=label,
                )
        if refused:
            ax.plot(
                np.minimum(refused, 1e13),
                np.full(len(refused), 1e-3),
                "x",
                ms=4,
                ls="none",
                color=figstyle.PALETTE[1],
                label=f"refused: cond(A) > {max_cond:.1e} ({len(refused)} skips)",
            )
        grid = np.logspace(0, 12, 50)
        ax.plot(grid, grid * np.finfo(np.float64).eps, color="k", lw=0.8, ls="--", label="cond(A) · eps")
        ax.axvline(max_cond, color=figstyle.PALETTE[1], lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_yscale("log")
        infinite = " (∞ drawn at 1e13)" if any(c > 1e13 for c in refused) else ""
        ax.set_xlabel("condition number of A" + infinite)
        ax.set_ylabel("max reduction error / ‖x‖ (refused: at 1e-3)")
        ax.set_title("Lemma 4: reduction to the identity skip (float64)")
        fig.legend(loc="outside lower center", ncol=1)
    return fig


def run(config, out, seed):
    d, n, ns = config["d"], config["n"], config["streams"]
    key = jax.random.key(seed)
    xs = jax.random.normal(jax.random.fold_in(key, 1), (config["inputs"], d))
    xs_hc = jax.random.normal(jax.random.fold_in(key, 2), (config["inputs"], ns * d))
    max_cond = 1 / np.sqrt(np.finfo(np.float64).eps)

    conds = np.logspace(0, 12, config["conds"])
    random_rows = []
    for i, c in enumerate(conds):
        for j in range(config["per_cond"]):
            k = jax.random.fold_in(jax.random.fold_in(key, 3), i * 10_000 + j)
            A = conditioned(k, d, c)
            params = models.init(ACTIVATION, d, n, key=jax.random.fold_in(k, 1))
            random_rows.append((float(jnp.linalg.cond(A)), reduction_error(A, params, xs)))

    hc_rows, mhc_rows = [], []
    for i in range(config["hc_draws"]):
        k = jax.random.fold_in(jax.random.fold_in(key, 4), i)
        params = hyper_block(k, d, n, ns)
        h_static = jnp.eye(ns) + 0.3 * jax.random.normal(jax.random.fold_in(k, 1), (ns, ns))
        temperature = 10.0 ** -(i % 10)  # near-uniform logits give near-singular H_res
        h_mc = sinkhorn(jax.random.normal(jax.random.fold_in(k, 2), (ns, ns)) * temperature)
        for h, rows in ((h_static, hc_rows), (h_mc, mhc_rows)):
            A = jnp.kron(h, jnp.eye(d))
            rows.append((float(jnp.linalg.cond(A)), reduction_error(A, params, xs_hc)))
    # A doubly-stochastic H_res can be exactly singular: the uniform mixing matrix J/n_s.
    uniform = jnp.full((ns, ns), 1.0 / ns)
    uniform_refused = reduction_error(jnp.kron(uniform, jnp.eye(d)), hyper_block(key, d, n, ns), xs_hc) is None

    flipped, planted, by_rank, narrow = singular_skips(seed, d, n, config["singular"])
    results = {
        "singular": {"planted": planted, "absorbable": flipped, "narrow": narrow, "not_absorbable": by_rank},
        "random": random_rows,
        "hyper_connection": hc_rows,
        "sinkhorn": mhc_rows,
        "uniform_refused": uniform_refused,
        "max_cond": max_cond,
    }

    ok = [(c, e) for c, e in random_rows if e is not None]
    worst_ratio = max(e / (c * np.finfo(np.float64).eps) for c, e in ok)
    hc_ok = [e for _, e in hc_rows if e is not None]
    mhc_refused = sum(e is None for _, e in mhc_rows)
    claims = [
        reproduce.Claim(
            "Lemma 4 reduction exact up to cond(A)·eps for invertible A",
            f"{len(ok)} random A, cond 1..{max(c for c, _ in ok):.0e}: error ≤ {worst_ratio:.2g} · cond(A) · eps; "
            f"{sum(e is None for _, e in random_rows)} with cond > {max_cond:.1e} refused",
            holds=worst_ratio <= 100,
            criterion="error ≤ 100 · cond(A) · eps for every accepted A",
            figure=NAME,
        ),
        reproduce.Claim(
            "static Hyper-Connection skips H_res ⊗ I_d reduce",
            f"{len(hc_ok)}/{len(hc_rows)} reduced, max error {max(hc_ok):.1e}" if hc_ok else "none reduced",
            holds=len(hc_ok) == len(hc_rows) and max(hc_ok, default=1.0) <= 1e-12,
            criterion="every static skip reduced with error ≤ 1e-12",
            figure=NAME,
        ),
        reproduce.Claim(
            "singular skips are decided without Lemma 4 (the kink theorem allows any A): planted "
            "A = −W_down[:,S] W_up[S,:] of rank |S| < d absorbable by the sign flip; rank A > n not absorbable",
            f"{flipped}/{planted} planted singular skips absorbable (exact miss 0); {by_rank}/{narrow} skips of rank "
            f"d − 1 = {d - 1} > n = {d - 2} not_absorbable by rank",
            holds=flipped == planted and by_rank == narrow,
            criterion="every planted singular skip absorbable and every rank A > n skip not_absorbable (exact rank)",
            figure=NAME,
        ),
        reproduce.Claim(
            "doubly-stochastic (Sinkhorn) H_res can be singular: flagged, not reduced",
            f"uniform J/n_s refused: {uniform_refused}; {mhc_refused}/{len(mhc_rows)} Sinkhorn draws refused",
            holds=bool(uniform_refused),
            criterion="the singular uniform J/n_s is refused",
            figure=NAME,
        ),
    ]
    return {**results, "claims": claims}


if __name__ == "__main__":
    sys.exit(reproduce.script_main(sys.modules[__name__]))
