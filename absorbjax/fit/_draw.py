"""One draw of the search: inputs, restarts, the two phases, selection and the error profile.

:func:`one_draw` is the per-draw function that :func:`absorbjax.fit._drawmap.map_draws` vmaps,
batches, shards and checkpoints; it returns a flat dict of arrays.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from optax.tree_utils import tree_norm

from absorbjax.fit import _projected as projected, _solvers as solvers
from absorbjax.fit._config import Init, Inputs, Linear, Method, PolishMethod, Static
from absorbjax.fit._loss import candidate_fn, loss, pointwise, sample_inputs, target_fn
from absorbjax.models import Params

HOP_STREAM = 1  # fold_in(draw key, HOP_STREAM): the hops' key, apart from the inputs' and inits' split


def _shapes(kind: type, d: int, m: int, depth: int) -> list[tuple[int, ...]]:
    lead = () if depth == 1 else (depth,)
    return [lead + ((d, m) if f == "down" else (m, d)) for f in kind._fields]


def _random_params(z: jax.Array, kind: type, d: int, m: int, depth: int) -> Params:
    """Unpack standard normals ``z`` into Gaussian weights of variance ``1/fan_in``
    (``models.init(dist="gaussian")``'s law: ``1/d`` for ``W_up``/``W_gate``/``W_value``,
    ``1/m`` for ``W_down``)."""
    out, at = [], 0
    for f, shape in zip(kind._fields, _shapes(kind, d, m, depth)):
        size = int(np.prod(shape))
        out.append(z[at : at + size].reshape(shape) / math.sqrt(m if f == "down" else d))
        at += size
    return kind(*out)


def init_restart(cfg: Static, kind: type, target: Params, key: jax.Array, r: jax.Array, dtype) -> Params:
    """Restart ``r``'s starting point, from one normal draw (one random op keeps compiles short).

    ``"random"``: Gaussian weights of width ``m`` with variance ``1/fan_in``; on odd ``r`` each
    field (per layer) is rescaled to the target's Frobenius norm ``‖W_field‖ √(m/n)``, so half
    the restarts start at the target's scale (the only thing about the target this init uses).
    ``"warm"``: the target with the rows of ``W_up`` (``W_gate``) multiplied by random signs,
    widened to ``m`` with random units.
    """
    shapes = _shapes(kind, cfg.d, cfg.width, cfg.depth)
    size = sum(int(np.prod(s)) for s in shapes)
    lead = () if cfg.depth == 1 else (cfg.depth,)
    z = jax.random.normal(key, (size + cfg.depth * cfg.n,), dtype)
    fresh = _random_params(z[:size], kind, cfg.d, cfg.width, cfg.depth)
    m, n = cfg.width, cfg.n
    if cfg.init == Init.RANDOM:
        fro = lambda a: jnp.sqrt(jnp.sum(jnp.square(a), (-2, -1), keepdims=True))
        scaled = kind(*(f * fro(t) * math.sqrt(m / n) / fro(f) for f, t in zip(fresh, target)))
        return jax.tree.map(lambda a, b: jnp.where(r % 2 == 1, a, b), scaled, fresh)
    signs = jnp.sign(z[size:]).reshape(lead + (n, 1))
    warm = target._replace(**{kind._fields[0]: signs * target[0]})
    if m == n:
        return warm
    return kind(
        *(
            jnp.concatenate([w, f[..., :, n:]], -1) if name == "down" else jnp.concatenate([w, f[..., n:, :]], -2)
            for name, w, f in zip(kind._fields, warm, fresh)
        )
    )


def _polish_some(cfg: Static, xs, ys, loss_fn, p, losses, ok, idx, iters):
    """Polish the restarts ``idx`` for ``iters`` iterations; keep a result only where it is
    finite and no worse."""
    sel = jax.tree.map(lambda a: a[idx], p)
    v0 = jnp.where(ok[idx], losses[idx], jnp.inf)
    pol = cfg.polish._replace(steps=iters)
    if pol.method == PolishMethod.GAUSS_NEWTON:
        model = lambda q, x: candidate_fn(q, x, cfg.activation, cfg.depth)
        sel_p, sel_v = jax.vmap(lambda q, v: solvers.gauss_newton(pol, model, xs, ys, q, v))(sel, v0)
    else:
        sel_p, sel_v = jax.vmap(lambda q, v: solvers.lbfgs(pol, loss_fn, q, v))(sel, v0)
    use = ok[idx] & jnp.isfinite(sel_v) & (sel_v <= losses[idx])
    return solvers.adopt(p, losses, idx, sel_p, sel_v, use)


def _adam_restarts(cfg: Static, opt: optax.GradientTransformation, xs, ys, p0, loss_fn):
    """``method="adam"``: the first-order phase on every restart, then the polish (screen, top)."""
    p = jax.vmap(lambda q: solvers.first_phase(opt, cfg.steps, loss_fn, q))(p0)
    losses = jax.vmap(loss_fn)(p)
    ok = jnp.isfinite(losses) & jax.vmap(solvers.finite)(p)
    if cfg.polish is not None and cfg.polish.steps > 0:
        screen = min(cfg.polish.screen, cfg.polish.steps)
        if screen > 0:
            p, losses = _polish_some(cfg, xs, ys, loss_fn, p, losses, ok, jnp.arange(cfg.restarts), screen)
        if cfg.polish.steps > screen:
            top = min(cfg.polish.top, cfg.restarts)
            _, idx = lax.top_k(-jnp.where(ok, losses, jnp.inf), top)
            p, losses = _polish_some(cfg, xs, ys, loss_fn, p, losses, ok, idx, cfg.polish.steps - screen)
    return p, losses


def one_draw(
    cfg: Static, opt: optax.GradientTransformation, base_key, index, target: Params, skip, given: Params | None
) -> dict:
    """Everything for draw ``index``: inputs, restarts, both phases, selection, profile.

    Args:
      cfg: the static configuration; ``opt`` the first-phase optimizer.
      base_key: the search's key; the draw uses ``fold_in(base_key, index)``.
      target: ``W`` of this draw; ``skip``: ``A`` ``(d, d)`` (ignored unless ``cfg.skip``);
      given: ``(restarts, ...)`` starting points when ``cfg.init == "given"``, else ``None``.

    Returns:
      Flat dict: ``best_loss``, ``losses (restarts,)``, ``failed (restarts,)``, ``profile (bins,)``,
      ``holdout_loss``, ``weight_norms``, ``target_norms``, ``best_params.<field>`` and, with
      ``cfg.linear``, ``best_linear`` (the free linear term, ``A`` of the result's
      :class:`~absorbjax.fit.Linear` ``best_params``; ``weight_norms`` counts ``V`` only).
    """
    dtype = target.down.dtype
    key = jax.random.fold_in(base_key, index)
    k_in, k_init = jax.random.split(key)
    xs, xh = sample_inputs(Inputs(cfg.num, cfg.low, cfg.high, cfg.holdout), cfg.d, key=k_in, dtype=dtype)
    A = skip if cfg.skip else None
    tgt = jax.vmap(target_fn, (None, 0, None, None, None))
    ys = tgt(target, xs, cfg.activation, cfg.depth, A)

    def loss_fn(p):
        return loss(p, xs, ys, cfg.activation, cfg.depth)

    if given is None:
        rs = jnp.arange(cfg.restarts)
        keys = jax.vmap(lambda r: jax.random.fold_in(k_init, r))(rs)
        p0 = jax.vmap(lambda k, r: init_restart(cfg, type(target), target, k, r, dtype))(keys, rs)
        if cfg.linear:  # the free linear term starts at 0
            lead = (cfg.restarts,) if cfg.depth == 1 else (cfg.restarts, cfg.depth)
            p0 = Linear(p0, jnp.zeros(lead + (cfg.d, cfg.d), dtype))
    else:
        p0 = given
    if cfg.method == Method.VARPRO:
        # each block of a stack alone on xs (step 0), read through its values as the stack is
        layer_ys = jax.vmap(lambda w: tgt(w, xs, cfg.activation, 1, None))(target) if cfg.blockwise else None
        p, losses = projected.restarts(cfg, xs, ys, p0, loss_fn, jax.random.fold_in(key, HOP_STREAM), layer_ys)
    else:
        p, losses = _adam_restarts(cfg, opt, xs, ys, p0, loss_fn)

    failed = ~(jnp.isfinite(losses) & jax.vmap(solvers.finite)(p))
    best = jnp.argmin(jnp.where(failed, jnp.inf, losses))
    best_p = jax.tree.map(lambda a: a[best], p)
    yh = jax.vmap(lambda x: tgt(target, x, cfg.activation, cfg.depth, A))(xh)
    err = jax.vmap(lambda x, y: pointwise(best_p, x, y, cfg.activation, cfg.depth))(xh, yh)
    extra = {}
    if cfg.linear:
        best_p, extra = best_p.block, {"best_linear": best_p.linear}
    return {
        "best_loss": jnp.where(failed[best], jnp.inf, losses[best]),
        "losses": losses,
        "failed": failed,
        "profile": jnp.mean(err, -1),
        "holdout_loss": jnp.mean(err),
        "weight_norms": tree_norm(best_p),
        "target_norms": tree_norm(target),
        **{"best_params." + f: a for f, a in zip(best_p._fields, best_p)},
        **extra,
    }


def bytes_per_draw(cfg: Static, fields: int, itemsize: int) -> int:
    """Rough size of one draw's largest live arrays (for the default batch size)."""
    P = fields * cfg.width * cfg.d * cfg.depth
    hidden = 8 * cfg.num * cfg.width * fields * cfg.depth  # activations kept for the backward pass
    work = hidden
    if cfg.method == Method.VARPRO:  # the projected step: Φ and Q, ∂Φ (dense: K·d × P for a stack), JᵀJ
        theta = (fields - 1) * cfg.width * cfg.d * cfg.depth + (cfg.depth - 1) * (cfg.width + cfg.d) * cfg.d
        jac = cfg.num * cfg.d * theta if cfg.depth > 1 else cfg.num * theta
        work = max(work, 3 * jac + 2 * theta * theta + 3 * cfg.num * (cfg.width + cfg.d))
    elif cfg.polish is not None and cfg.polish.method == PolishMethod.GAUSS_NEWTON:
        work = max(work, 3 * cfg.num * cfg.d * P + 2 * P * P)  # J, its per-input pieces, JᵀJ
    elif cfg.polish is not None:
        work = max(work, hidden + 2 * cfg.polish.memory * P)
    return itemsize * (cfg.restarts * work + 4 * cfg.num * cfg.d)
