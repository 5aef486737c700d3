"""Solvers for one restart, each a fixed-length ``lax.scan`` (vmappable, no while-loops).

:func:`first_phase` runs an optax first-order method; :func:`lbfgs` and :func:`gauss_newton`
(Levenberg–Marquardt) polish and return the best finite iterate with its loss, so a polish never
makes a restart worse.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.flatten_util import ravel_pytree
from optax.tree_utils import tree_where

from absorbjax.fit._config import Polish
from absorbjax.fit._loss import residual_weights
from absorbjax.models import Params


def finite(tree) -> jax.Array:
    """Scalar bool: every leaf of ``tree`` is finite."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def adopt(p, losses: jax.Array, idx: jax.Array, sel, sel_losses: jax.Array, use: jax.Array):
    """``(p, losses)`` with restarts ``idx`` replaced by ``sel`` and ``sel_losses`` where ``use``
    (a polish's results on a subset of the restarts, kept where they are no worse)."""
    put = lambda a, b: a.at[idx].set(jnp.where(use.reshape((-1,) + (1,) * (b.ndim - 1)), b, a[idx]))
    return jax.tree.map(put, p, sel), losses.at[idx].set(jnp.where(use, sel_losses, losses[idx]))


def first_phase(opt: optax.GradientTransformation, steps: int, loss_fn, p0: Params) -> Params:
    """``steps`` updates of ``opt`` on ``loss_fn`` from ``p0``; the last iterate."""
    state = opt.init(p0)
    extra = isinstance(opt, optax.GradientTransformationExtraArgs)

    def step(carry, _):
        p, s = carry
        value, grad = jax.value_and_grad(loss_fn)(p)
        kw = {"value": value, "grad": grad, "value_fn": loss_fn} if extra else {}
        updates, s = opt.update(grad, s, p, **kw)
        return (optax.apply_updates(p, updates), s), None

    (p, _), _ = lax.scan(step, (p0, state), None, length=steps)
    return p


def lbfgs(pol: Polish, loss_fn, p0: Params, v0: jax.Array):
    """Fixed-length ``optax.lbfgs`` from ``p0`` (loss ``v0``); returns the best finite iterate and its loss."""
    opt = optax.lbfgs(
        memory_size=pol.memory,
        linesearch=optax.scale_by_zoom_linesearch(
            max_linesearch_steps=pol.linesearch_steps, initial_guess_strategy="one"
        ),
    )
    value_and_grad = optax.value_and_grad_from_state(loss_fn)

    def step(carry, _):
        p, s, best_p, best_v = carry
        value, grad = value_and_grad(p, state=s)
        better = jnp.isfinite(value) & (value < best_v) & finite(p)
        best_p, best_v = tree_where(better, (p, value), (best_p, best_v))
        updates, s_new = opt.update(grad, s, p, value=value, grad=grad, value_fn=loss_fn)
        p_new = optax.apply_updates(p, updates)
        ok = finite(p_new)  # a non-finite step freezes this restart at its best iterate
        p, s = tree_where(ok, (p_new, s_new), (p, s))
        return (p, s, best_p, best_v), None

    (p, _, best_p, best_v), _ = lax.scan(step, (p0, opt.init(p0), p0, v0), None, length=pol.steps)
    v = loss_fn(p)
    return tree_where(jnp.isfinite(v) & (v < best_v), (p, v), (best_p, best_v))


def gauss_newton(pol: Polish, model, xs, ys, p0: Params, v0: jax.Array):
    """Fixed-length Levenberg–Marquardt on ``ℓ(V) = ‖r(V)‖²``; best finite iterate and loss.

    ``model(V, x)`` is ``g_V(x)``; ``r_k = (y_k − g_V(x_k)) / (‖x_k‖ √K)`` and ``J = ∂r/∂V``
    (``Kd × P``, built per input by reverse mode: ``d`` backward passes per ``x_k``). Step
    ``δ = −(JᵀJ + λ (diag JᵀJ + μ))⁻¹ Jᵀr``; ``λ`` shrinks 3× after a step that lowers ``ℓ`` and
    grows 4× after one that does not (the step is then rejected).
    """
    q0, unravel = ravel_pytree(p0)
    w = residual_weights(xs)
    point = lambda q, x: model(unravel(q), x)
    resid = lambda q: ((ys - jax.vmap(point, (None, 0))(q, xs)) * w).ravel()
    jac = jax.vmap(jax.jacrev(point), (None, 0))
    eye = jnp.eye(q0.shape[0], dtype=q0.dtype)
    tiny = jnp.finfo(q0.dtype).eps

    def step(carry, _):
        q, v, lam = carry
        r = resid(q)
        J = (-jac(q, xs) * w[:, :, None]).reshape(r.shape[0], -1)
        H = J.T @ J
        diag = jnp.diagonal(H)
        damp = lam * (diag + tiny * (1.0 + jnp.max(diag)))
        q_new = q - jnp.linalg.solve(H + damp * eye, J.T @ r)
        v_new = jnp.sum(jnp.square(resid(q_new)))
        ok = jnp.isfinite(v_new) & (v_new < v) & jnp.all(jnp.isfinite(q_new))
        q, v = tree_where(ok, (q_new, v_new), (q, v))
        lam = jnp.clip(jnp.where(ok, lam / 3.0, lam * 4.0), tiny, 1.0 / tiny)
        return (q, v, lam), None

    lam0 = jnp.asarray(1e-3, q0.dtype)
    (q, v, _), _ = lax.scan(step, (q0, v0, lam0), None, length=pol.steps)
    return unravel(q), v
