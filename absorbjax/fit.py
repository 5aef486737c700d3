"""Numerical search for residual-free blocks that reproduce residual blocks.

For a residual block ``f_W(x) = A x + W_down σ(W_up x)`` (``A = I`` unless ``skip`` is given; a
depth-``L`` residual stack with ``depth=L``) :func:`search` looks for weights ``V`` of a
residual-free block ``g_V(x) = V_down σ(V_up x)`` of the same kind and width ``n`` (or a wider
``m ≥ n``) minimising the mean relative squared error

    ``ℓ(V) = mean_k ‖f_W(x_k) − g_V(x_k)‖² / ‖x_k‖²``

over inputs ``x_k`` with directions uniform on the sphere and radii log-uniform over several
decades around 1. Where Thm 8/10 says a block absorbs, a float64 search that finds the absorber
reaches ``ℓ ≲ 1e-29``; where Props 5/6 or Cor 11 say it cannot, ``ℓ`` stays bounded away from 0,
and the error profile per radius decade (on held-out inputs) shows where: near the origin for
gated and homogeneous blocks. The weight norm of the best ``V`` shows errors that only fall as
``‖V‖`` grows. A search is evidence one way only: with the defaults it finds the absorber of
almost every absorbable block at ``n = 2d`` but of few at ``n = 4d`` (``experiments/bench_fit.py
--sizes``), so a failed search proves nothing; :func:`absorbjax.condition.find_absorbing_set`
decides.

One draw runs ``restarts`` independent initialisations through a first-order optax phase
(Adam by default, ``steps`` steps in ``lax.scan``) and then a polish phase of fixed length
(:class:`Polish`): Levenberg–Marquardt (Gauss–Newton) for small candidates, ``optax.lbfgs``
for large ones, first on every restart and then only on the most promising ones. Restarts and
draws are added with ``jax.vmap``; draws go through one jitted function in batches of
``batch_size`` per device (so memory stays bounded at any number of draws), the batches'
draws axis sharded over a ``"draws"`` mesh axis when there are several devices; the progress
bar and the checkpoint advance per chunk of batches, from Python, never from inside ``jit``.
Draw ``i`` uses ``jax.random.fold_in(key, i)`` and its restart ``r`` a further
``fold_in(·, r)``, and every batch has the same shapes, so results do not depend on the chunk
size or the number of devices.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.flatten_util import ravel_pytree
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from absorbjax import activations, io, models
from absorbjax.models import GatedParams, MLPParams, Params

__all__ = [
    "Inputs",
    "Polish",
    "SearchResult",
    "search",
    "default_optimizer",
    "relative_loss",
    "sample_inputs",
    "decade_edges",
    "min_tol",
]

INITS = ("random", "warm")


# ---------------------------------------------------------------------------------------------
# Configuration


class Inputs(NamedTuple):
    """Where the loss is measured, per draw.

    Attributes:
      num: training inputs ``x_k`` per draw (``None``: ``max(256, 2 P / d)`` for a candidate
        with ``P`` parameters, so there are at least twice as many residuals as unknowns).
      low, high: radii ``‖x‖`` are log-uniform on ``[low, high]``.
      holdout: held-out inputs per radius decade for the error profile.
    """

    num: int | None = None
    low: float = 1e-2
    high: float = 1e2
    holdout: int = 64


class Polish(NamedTuple):
    """The second phase, run on each draw's best restarts after the first-order phase.

    Both methods run a fixed number of iterations in ``lax.scan`` (no convergence while-loop,
    so a vmapped batch never waits on its slowest member) and keep each restart's best finite
    iterate, so polishing never makes a restart worse.

    Attributes:
      method: ``"lbfgs"`` (``optax.lbfgs`` with a bounded zoom line search), ``"gauss_newton"``
        (Levenberg–Marquardt on the residuals ``r_k = (f(x_k) − g_V(x_k)) / (‖x_k‖ √K)``, with
        a dense ``P × P`` solve; quadratic convergence on exactly absorbable targets) or
        ``"auto"``: Gauss–Newton when the candidate has at most ``max_dense`` parameters ``P``,
        else L-BFGS.
      steps: iterations in all (``None``: 300).
      screen: the first ``screen`` iterations run on every restart; the remaining
        ``steps − screen`` only on the ``top`` restarts with the lowest loss after them.
      top: how many of each draw's restarts continue after the screen; the others keep
        their result.
      memory: L-BFGS memory.
      linesearch_steps: bound on the zoom line search's iterations per L-BFGS step.
      max_dense: largest ``P`` for which ``"auto"`` picks Gauss–Newton.
    """

    method: str = "auto"
    steps: int | None = None
    screen: int = 40
    top: int = 8
    memory: int = 10
    linesearch_steps: int = 12
    max_dense: int = 1024

    def resolve(self, params: int) -> "Polish":
        """A copy with ``method`` and ``steps`` fixed for a candidate with ``params`` parameters."""
        if self.method not in POLISH_METHODS:
            raise ValueError(f"polish.method must be one of {POLISH_METHODS}, got {self.method!r}")
        method = self.method
        if method == "auto":
            method = "gauss_newton" if params <= self.max_dense else "lbfgs"
        steps = self.steps if self.steps is not None else 300
        return self._replace(method=method, steps=int(steps))


POLISH_METHODS = ("auto", "lbfgs", "gauss_newton")


@functools.lru_cache(maxsize=32)
def default_optimizer(steps: int, learning_rate: float = 1e-2) -> optax.GradientTransformation:
    """Adam with a cosine decay from ``learning_rate`` to ``learning_rate / 100`` over ``steps``."""
    schedule = optax.cosine_decay_schedule(learning_rate, max(int(steps), 1), alpha=1e-2)
    return optax.adam(schedule)


def min_tol(dtype) -> float:
    """Smallest relative loss a dtype can certify: ``100 ε²`` (float32 1.4e-12, float64 4.9e-30)."""
    return float(100 * np.finfo(dtype).eps ** 2)


# ---------------------------------------------------------------------------------------------
# Inputs and loss


def _log_bounds(low: float, high: float) -> tuple[float, float]:
    if not (np.isfinite(low) and np.isfinite(high) and 0 < low < high):
        raise ValueError(f"inputs need 0 < low < high, got low={low!r}, high={high!r}")
    return float(np.log10(low)), float(np.log10(high))


def decade_edges(low: float, high: float) -> np.ndarray:
    """Radius edges of the profile bins: the decades ``10^j`` between ``low`` and ``high``."""
    lo, hi = _log_bounds(low, high)
    inner = np.arange(np.floor(lo) + 1, np.ceil(hi))
    inner = inner[(inner > lo + 1e-9) & (inner < hi - 1e-9)]
    return 10.0 ** np.concatenate([[lo], inner, [hi]])


def sample_inputs(key: jax.Array, d: int, inputs: Inputs, dtype, num: int | None = None):
    """Training and held-out inputs for one draw.

    Directions are uniform on the sphere ``S^{d−1}``; training radii are log-uniform on
    ``[inputs.low, inputs.high]``, held-out radii log-uniform within each decade bin of
    :func:`decade_edges`. Returns ``xs (num, d)`` and ``xh (bins, inputs.holdout, d)``.
    One normal and one uniform draw cover both sets (a single random op of each kind keeps
    compilation short).
    """
    num = inputs.num if num is None else num
    if not isinstance(num, (int, np.integer)) or num < 1:
        raise ValueError(f"inputs.num must be a positive integer, got {num!r}")
    lo, hi = _log_bounds(inputs.low, inputs.high)
    e = np.log10(decade_edges(inputs.low, inputs.high))
    bins, per = len(e) - 1, inputs.holdout
    total = num + bins * per
    kd, kr = jax.random.split(key)
    u = jax.random.normal(kd, (total, d), dtype)
    u = u / jnp.linalg.norm(u, axis=-1, keepdims=True)
    t = jax.random.uniform(kr, (total, 1), dtype)
    lower = np.concatenate([np.full(num, lo), np.repeat(e[:-1], per)])[:, None]
    span = np.concatenate([np.full(num, hi - lo), np.repeat(np.diff(e), per)])[:, None]
    x = u * 10.0 ** (jnp.asarray(lower, dtype) + t * jnp.asarray(span, dtype))
    return x[:num], x[num:].reshape(bins, per, d)


def _target_fn(params: Params, x, activation: str, depth: int, skip):
    if depth == 1:
        return models.skip_mlp(params, x, activation, skip)
    return models.stack(params, x, activation, residual=True)


def _candidate_fn(params: Params, x, activation: str, depth: int):
    if depth == 1:
        return models.mlp(params, x, activation)
    return models.stack(params, x, activation, residual=False)


def _pointwise(cand: Params, xs, ys, activation: str, depth: int):
    pred = jax.vmap(_candidate_fn, (None, 0, None, None))(cand, xs, activation, depth)
    return jnp.sum(jnp.square(ys - pred), -1) / jnp.sum(jnp.square(xs), -1)


def _residual_weights(xs):
    """``1 / (‖x_k‖ √K)`` ``(K, 1)``: the residuals' scale, so that ``‖r‖² = ℓ(V)``."""
    return 1.0 / (jnp.linalg.norm(xs, axis=-1, keepdims=True) * math.sqrt(xs.shape[0]))


def _residuals(cand: Params, xs, ys, activation: str, depth: int):
    """``r_k = (f(x_k) − g_V(x_k)) / (‖x_k‖ √K)`` flattened, so ``‖r‖² = ℓ(V)``."""
    pred = jax.vmap(_candidate_fn, (None, 0, None, None))(cand, xs, activation, depth)
    return ((ys - pred) * _residual_weights(xs)).ravel()


def relative_loss(
    candidate: Params,
    target: Params,
    xs: jax.Array,
    activation: str,
    *,
    depth: int = 1,
    skip: jax.Array | None = None,
) -> jax.Array:
    """``mean_k ‖f(x_k) − g_V(x_k)‖² / ‖x_k‖²`` for one target ``f`` and one candidate ``g_V``.

    ``candidate`` = ``V`` (residual-free), ``target`` = ``W`` (residual, skip ``A`` = ``skip``
    or ``I``); ``xs`` is ``(K, d)``. Stacks (``depth > 1``) carry a leading ``L`` axis.
    """
    ys = jax.vmap(_target_fn, (None, 0, None, None, None))(target, xs, activation, depth, skip)
    return jnp.mean(_pointwise(candidate, xs, ys, activation, depth))


# ---------------------------------------------------------------------------------------------
# Result


class SearchResult(NamedTuple):
    """What :func:`search` found, one row per draw.

    Attributes:
      best_loss: ``(draws,)`` lowest relative loss ``ℓ`` over the restarts that did not fail
        (``inf`` when all failed).
      best_params: the best candidate ``V`` per draw, leading draws axis (same type as the target).
      losses: ``(draws, restarts)`` final ``ℓ`` of every restart (after polishing, for the
        polished ones); ``nan``/``inf`` where the restart failed.
      failed: ``(draws, restarts)`` bool, the restart ended non-finite (kept out of ``best_*``).
      profile: ``(draws, bins)`` mean relative squared error of the best candidate on held-out
        inputs in each radius decade.
      edges: ``(bins + 1,)`` radius edges of the profile bins.
      weight_norms: ``(draws,)`` Frobenius norm of the best candidate ``‖V‖``.
      target_norms: ``(draws,)`` Frobenius norm of the target ``‖W‖`` (for comparison: an error
        that only falls as ``‖V‖`` grows is approximate, not exact, absorption).
      holdout_loss: ``(draws,)`` relative loss of the best candidate on all held-out inputs.
      config: the settings, the seed's key data and ``jax.__version__``.
    """

    best_loss: np.ndarray
    best_params: Params
    losses: np.ndarray
    failed: np.ndarray
    profile: np.ndarray
    edges: np.ndarray
    weight_norms: np.ndarray
    target_norms: np.ndarray
    holdout_loss: np.ndarray
    config: dict

    def solved(self, tol: float | None = None) -> np.ndarray:
        """``(draws,)`` bool: both ``best_loss`` and ``holdout_loss`` ``≤ tol`` (default
        ``config["tol"]``). The held-out check catches a ``V`` that is exact on the training
        inputs only (a ReLU kink placed in a wedge no training direction falls in)."""
        tol = self.config["tol"] if tol is None else tol
        return (self.best_loss <= tol) & (self.holdout_loss <= tol)

    def summary(self) -> str:
        """A few lines: quantiles of ``best_loss``, solved fraction, failures, the profile."""
        loss = self.best_loss
        draws, restarts = self.losses.shape
        q = np.quantile(loss[np.isfinite(loss)], [0, 0.1, 0.5, 0.9, 1]) if np.isfinite(loss).any() else [np.nan] * 5
        tol = self.config["tol"]
        prof = np.median(self.profile, 0)
        bins = " ".join(f"[{a:.0e},{b:.0e}):{p:.2g}" for a, b, p in zip(self.edges[:-1], self.edges[1:], prof))
        lines = [
            f"search {self.config['activation']} d={self.config['d']} n={self.config['n']} "
            f"width={self.config['width']} depth={self.config['depth']}: {draws} draws x {restarts} restarts",
            "best loss min/10%/50%/90%/max: " + " ".join(f"{v:.3g}" for v in q),
            f"solved (train and held-out loss <= {tol:.0e}): {int(self.solved().sum())}/{draws}; "
            f"failed restarts: {int(self.failed.sum())}/{self.failed.size}",
            f"median profile per radius decade: {bins}",
            f"median |V| {np.median(self.weight_norms):.3g} vs |W| {np.median(self.target_norms):.3g}",
        ]
        return "\n".join(lines)

    def to_dict(self, params: bool = True) -> dict:
        """Plain JSON-ready dict (via :func:`absorbjax.io.to_jsonable`)."""
        out = {k: getattr(self, k) for k in self._fields if k != "best_params" or params}
        if params:
            out["best_params"] = {"type": type(self.best_params).__name__, **self.best_params._asdict()}
        out["solved"] = self.solved()
        return io.to_jsonable(out)


# ---------------------------------------------------------------------------------------------
# One draw


class _Static(NamedTuple):
    activation: str
    depth: int
    d: int
    n: int
    width: int
    restarts: int
    steps: int
    init: str  # "random", "warm" or "given"
    has_skip: bool
    num: int
    low: float
    high: float
    holdout: int
    polish: Polish | None


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


def _init_restart(cfg: _Static, kind: type, target: Params, key: jax.Array, r: jax.Array, dtype) -> Params:
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
    if cfg.init == "random":
        fro = lambda a: jnp.sqrt(jnp.sum(jnp.square(a), (-2, -1), keepdims=True))
        scaled = kind(*(f * fro(t) * math.sqrt(m / n) / fro(f) for f, t in zip(fresh, target)))
        return jax.tree.map(lambda a, b: jnp.where(r % 2 == 1, a, b), scaled, fresh)
    signs = jnp.sign(z[size:]).reshape(lead + (n, 1))
    warm = target._replace(**{kind._fields[0]: signs * target[0]})
    if m == n:
        return warm
    return kind(*(
        jnp.concatenate([w, f[..., :, n:]], -1) if name == "down" else jnp.concatenate([w, f[..., n:, :]], -2)
        for name, w, f in zip(kind._fields, warm, fresh)
    ))


def _first_phase(cfg: _Static, opt: optax.GradientTransformation, loss_fn, p0: Params):
    state = opt.init(p0)
    extra = isinstance(opt, optax.GradientTransformationExtraArgs)

    def step(carry, _):
        p, s = carry
        value, grad = jax.value_and_grad(loss_fn)(p)
        kw = {"value": value, "grad": grad, "value_fn": loss_fn} if extra else {}
        updates, s = opt.update(grad, s, p, **kw)
        return (optax.apply_updates(p, updates), s), None

    (p, _), _ = lax.scan(step, (p0, state), None, length=cfg.steps)
    return p


def _finite(tree) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def _keep_best(better, new, old):
    return jax.tree.map(lambda a, b: jnp.where(better, a, b), new, old)


def _lbfgs(pol: Polish, loss_fn, p0: Params, v0: jax.Array):
    """Fixed-length L-BFGS from ``p0``; returns the best finite iterate and its loss."""
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
        better = jnp.isfinite(value) & (value < best_v) & _finite(p)
        best_p, best_v = _keep_best(better, (p, value), (best_p, best_v))
        updates, s_new = opt.update(grad, s, p, value=value, grad=grad, value_fn=loss_fn)
        p_new = optax.apply_updates(p, updates)
        ok = _finite(p_new)  # a non-finite step freezes this restart at its best iterate
        p, s = _keep_best(ok, (p_new, s_new), (p, s))
        return (p, s, best_p, best_v), None

    (p, _, best_p, best_v), _ = lax.scan(step, (p0, opt.init(p0), p0, v0), None, length=pol.steps)
    v = loss_fn(p)
    return _keep_best(jnp.isfinite(v) & (v < best_v), (p, v), (best_p, best_v))


def _gauss_newton(pol: Polish, model, xs, ys, p0: Params, v0: jax.Array):
    """Fixed-length Levenberg–Marquardt on ``ℓ(V) = ‖r(V)‖²``; best finite iterate and loss.

    ``r_k = (f(x_k) − g_V(x_k)) / (‖x_k‖ √K)`` and ``J = ∂r/∂V`` (``Kd × P``, built per input by
    reverse mode: ``d`` backward passes per ``x_k``). Step ``δ = −(JᵀJ + λ (diag JᵀJ + μ))⁻¹ Jᵀr``;
    ``λ`` shrinks 3× after a step that lowers ``ℓ`` and grows 4× after one that does not (the
    step is then rejected).
    """
    q0, unravel = ravel_pytree(p0)
    w = _residual_weights(xs)
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
        q, v = _keep_best(ok, (q_new, v_new), (q, v))
        lam = jnp.clip(jnp.where(ok, lam / 3.0, lam * 4.0), tiny, 1.0 / tiny)
        return (q, v, lam), None

    lam0 = jnp.asarray(1e-3, q0.dtype)
    (q, v, _), _ = lax.scan(step, (q0, v0, lam0), None, length=pol.steps)
    return unravel(q), v


def _norm(tree) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))


def _one_draw(cfg: _Static, opt, base_key, index, target: Params, skip, given: Params | None):
    """Everything for draw ``index``: inputs, restarts, both phases, selection, profile."""
    dtype = target.down.dtype
    key = jax.random.fold_in(base_key, index)
    k_in, k_init = jax.random.split(key)
    xs, xh = sample_inputs(k_in, cfg.d, Inputs(cfg.num, cfg.low, cfg.high, cfg.holdout), dtype)
    A = skip if cfg.has_skip else None
    tgt = jax.vmap(_target_fn, (None, 0, None, None, None))
    ys = tgt(target, xs, cfg.activation, cfg.depth, A)

    def resid_fn(p):
        return _residuals(p, xs, ys, cfg.activation, cfg.depth)

    def loss_fn(p):
        return jnp.sum(jnp.square(resid_fn(p)))

    if given is None:
        rs = jnp.arange(cfg.restarts)
        keys = jax.vmap(lambda r: jax.random.fold_in(k_init, r))(rs)
        p0 = jax.vmap(lambda k, r: _init_restart(cfg, type(target), target, k, r, dtype))(keys, rs)
    else:
        p0 = given
    p = jax.vmap(lambda q: _first_phase(cfg, opt, loss_fn, q))(p0)
    losses = jax.vmap(loss_fn)(p)
    ok = jnp.isfinite(losses) & jax.vmap(_finite)(p)

    def polish(p, losses, ok, idx, iters):
        sel = jax.tree.map(lambda a: a[idx], p)
        v0 = jnp.where(ok[idx], losses[idx], jnp.inf)
        pol = cfg.polish._replace(steps=iters)
        if pol.method == "gauss_newton":
            model = lambda q, x: _candidate_fn(q, x, cfg.activation, cfg.depth)
            sel_p, sel_v = jax.vmap(lambda q, v: _gauss_newton(pol, model, xs, ys, q, v))(sel, v0)
        else:
            sel_p, sel_v = jax.vmap(lambda q, v: _lbfgs(pol, loss_fn, q, v))(sel, v0)
        use = ok[idx] & jnp.isfinite(sel_v) & (sel_v <= losses[idx])
        put = lambda a, b: a.at[idx].set(jnp.where(use.reshape((-1,) + (1,) * (b.ndim - 1)), b, a[idx]))
        return jax.tree.map(put, p, sel_p), losses.at[idx].set(jnp.where(use, sel_v, losses[idx]))

    if cfg.polish is not None and cfg.polish.steps > 0:
        screen = min(cfg.polish.screen, cfg.polish.steps)
        if screen > 0:
            p, losses = polish(p, losses, ok, jnp.arange(cfg.restarts), screen)
        if cfg.polish.steps > screen:
            top = min(cfg.polish.top, cfg.restarts)
            _, idx = lax.top_k(-jnp.where(ok, losses, jnp.inf), top)
            p, losses = polish(p, losses, ok, idx, cfg.polish.steps - screen)

    failed = ~(jnp.isfinite(losses) & jax.vmap(_finite)(p))
    best = jnp.argmin(jnp.where(failed, jnp.inf, losses))
    best_p = jax.tree.map(lambda a: a[best], p)
    best_loss = jnp.where(failed[best], jnp.inf, losses[best])

    yh = jax.vmap(lambda x: tgt(target, x, cfg.activation, cfg.depth, A))(xh)
    err = jax.vmap(lambda x, y: _pointwise(best_p, x, y, cfg.activation, cfg.depth))(xh, yh)
    return {
        "best_loss": best_loss,
        "best_params": best_p,
        "losses": losses,
        "failed": failed,
        "profile": jnp.mean(err, -1),
        "holdout_loss": jnp.mean(err),
        "weight_norms": _norm(best_p),
        "target_norms": _norm(target),
    }


# ---------------------------------------------------------------------------------------------
# Argument checks


def _as_params(target, name: str) -> Params:
    if not isinstance(target, (MLPParams, GatedParams)):
        raise ValueError(f"{name} must be MLPParams or GatedParams, got {type(target).__name__}")
    arrays = [jnp.asarray(a) for a in target]
    for f, a in zip(target._fields, arrays):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise ValueError(f"{name}.{f} must be a float array, got dtype {a.dtype}")
        if a.dtype != arrays[-1].dtype:
            raise ValueError(f"{name} fields must share one dtype, got {a.dtype} and {arrays[-1].dtype}")
    return type(target)(*arrays)


def _check_target(target, activation: str, depth: int):
    act = activations.get(activation)
    if not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"depth must be a positive integer, got {depth!r}")
    target = _as_params(target, "target")
    want = GatedParams if act.gated else MLPParams
    if not isinstance(target, want):
        raise ValueError(f"activation {act.name!r} needs target {want.__name__}, got {type(target).__name__}")
    d, n = models.dims(target)
    core = 2 if depth == 1 else 3
    nd = target.down.ndim
    if nd not in (core, core + 1):
        raise ValueError(
            f"target.down must have shape {'(d, n)' if depth == 1 else '(L, d, n)'} or with a leading "
            f"draws axis for depth={depth}; got {target.down.shape}"
        )
    if depth > 1 and target.down.shape[-3] != depth:
        raise ValueError(f"target has {target.down.shape[-3]} layers on its depth axis, expected depth={depth}")
    if any(a.shape[:-2] != target.down.shape[:-2] for a in target):
        raise ValueError(f"target fields disagree on leading axes: {[a.shape for a in target]}")
    single = nd == core
    if single:
        target = jax.tree.map(lambda a: a[None], target)
    bad = [f for f, a in zip(target._fields, target) if not np.all(np.isfinite(np.asarray(a)))]
    if bad:
        raise ValueError(f"target.{bad[0]} contains NaN or Inf")
    return act, target, d, n, single


def _check_skip(skip, draws: int, d: int, depth: int, dtype):
    if skip is None:
        return None
    if depth != 1:
        raise ValueError("skip (a linear skip A) is supported for depth=1 only")
    A = jnp.asarray(skip, dtype)
    if A.shape == (d, d):
        A = jnp.broadcast_to(A, (draws, d, d))
    if A.shape != (draws, d, d):
        raise ValueError(f"skip must have shape ({d}, {d}) or ({draws}, {d}, {d}), got {jnp.shape(skip)}")
    if not np.all(np.isfinite(np.asarray(A))):
        raise ValueError("skip contains NaN or Inf")
    return A


def _check_init(init, target: Params, draws: int, restarts: int, width: int, depth: int, d: int):
    if isinstance(init, str):
        if init not in INITS:
            raise ValueError(f"init must be one of {INITS} or candidate params, got {init!r}")
        return init, None
    given = _as_params(init, "init")
    if type(given) is not type(target):
        raise ValueError(f"init must be {type(target).__name__} like the target, got {type(given).__name__}")
    if given.down.dtype != target.down.dtype:
        raise ValueError(f"init dtype {given.down.dtype} differs from the target's {target.down.dtype}")
    core = (d, width) if depth == 1 else (depth, d, width)
    shape = given.down.shape
    if shape == (restarts,) + core:
        given = jax.tree.map(lambda a: jnp.broadcast_to(a, (draws,) + a.shape), given)
    elif shape != (draws, restarts) + core:
        raise ValueError(
            f"init.down must have shape (restarts, ...{core}) = {(restarts,) + core} or "
            f"(draws, restarts, ...) = {(draws, restarts) + core}, got {shape}"
        )
    models.dims(given)
    return "given", given


# ---------------------------------------------------------------------------------------------
# Chunks, devices, checkpoints


def _default_batch(cfg: _Static, draws: int, itemsize: int, fields: int) -> int:
    """Draws per batch so that one batch's largest arrays stay within a fixed budget: 32 MiB
    on CPU (small batches stay in cache and run fastest there), an eighth of the device
    memory on accelerators (large batches fill them)."""
    dev = jax.devices()[0]
    stats = dev.memory_stats() if dev.platform != "cpu" else None
    budget = stats["bytes_limit"] // 8 if stats and "bytes_limit" in stats else 32 * 2**20
    P = fields * cfg.width * cfg.d * cfg.depth
    hidden = 8 * cfg.num * cfg.width * fields * cfg.depth  # activations kept for the backward pass
    work = hidden
    if cfg.polish is not None and cfg.polish.method == "gauss_newton":
        work = max(work, 3 * cfg.num * cfg.d * P + 2 * P * P)  # J, its per-input pieces, JᵀJ
    elif cfg.polish is not None:
        work = max(work, hidden + 2 * cfg.polish.memory * P)
    per_draw = itemsize * (cfg.restarts * work + 4 * cfg.num * cfg.d)
    return int(max(1, min(draws, budget // max(per_draw, 1))))


def _fingerprint(cfg: _Static, target: Params, skip, given, key_data: np.ndarray, opt_name: str) -> str:
    h = hashlib.sha256()
    h.update(json.dumps({**cfg._asdict(), "polish": cfg.polish and cfg.polish._asdict(), "opt": opt_name},
                        sort_keys=True, default=str).encode())
    for tree in (target, skip, given):
        for a in jax.tree.leaves(tree):
            a = np.ascontiguousarray(np.asarray(a))
            h.update(str((a.shape, a.dtype)).encode())
            h.update(a.tobytes())
    h.update(np.ascontiguousarray(key_data).tobytes())
    return h.hexdigest()


def _atomic_save(path: Path, arrays: dict) -> None:
    with io.atomic_open(path, "wb") as f:
        np.savez(f, **arrays)


def _flatten(out: dict, kind: type) -> dict:
    flat = {k: np.asarray(v) for k, v in out.items() if k != "best_params"}
    for f, a in zip(kind._fields, out["best_params"]):
        flat["best_params." + f] = np.asarray(a)
    return flat


def _unflatten(flat: dict, kind: type) -> dict:
    out = {k: v for k, v in flat.items() if not k.startswith("best_params.")}
    out["best_params"] = kind(*(flat["best_params." + f] for f in kind._fields))
    return out


@functools.lru_cache(maxsize=32)
def _batch_fn(cfg: _Static, opt: optax.GradientTransformation, mesh: Mesh | None, impl: str | None):
    """The jitted step of the driver: ``_one_draw`` vmapped over one batch of draws per device
    (``shard_map`` over the ``"draws"`` mesh axis). Every call has the same shapes, so a draw's
    floating-point result does not depend on the chunk size or the device count. The base key
    travels as raw key data (``impl`` names a typed key's PRNG; ``None``: a legacy uint32 key)."""

    def batch(key_data, index, tgt, A, g):
        base = key_data if impl is None else jax.random.wrap_key_data(key_data, impl=impl)
        return jax.vmap(lambda i, t, a, gi: _one_draw(cfg, opt, base, i, t, a, gi))(index, tgt, A, g)

    if mesh is None:
        return jax.jit(batch)
    draws = P("draws")
    return jax.jit(jax.shard_map(batch, mesh=mesh, in_specs=(P(), draws, draws, draws, draws),
                                 out_specs=draws, check_vma=False))


def _make_mesh(mesh: Mesh | None) -> Mesh | None:
    if mesh is not None:
        if "draws" not in mesh.axis_names:
            raise ValueError(f"mesh needs an axis named 'draws', got {mesh.axis_names}")
        return mesh
    if jax.device_count() == 1:
        return None
    return Mesh(np.asarray(jax.devices()), ("draws",))


def _to_device(tree, sharding):
    """Host arrays → device arrays laid out by ``sharding`` (the same host values on every
    process when there are several)."""
    if sharding is None:
        return tree
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)
    return jax.tree.map(
        lambda a: jax.make_array_from_callback(a.shape, sharding, lambda idx, a=a: a[idx]), tree
    )


def _to_host(tree):
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        tree = multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree.map(np.asarray, tree)


# ---------------------------------------------------------------------------------------------
# Public entry point


def search(
    target: Params,
    activation: str,
    *,
    key: jax.Array,
    skip: jax.Array | None = None,
    depth: int = 1,
    width: int | None = None,
    restarts: int = 32,
    steps: int = 200,
    inputs: Inputs = Inputs(),
    init: str | Params = "random",
    optimizer: optax.GradientTransformation | None = None,
    polish: bool | Polish = True,
    tol: float | None = None,
    batch_size: int | None = None,
    chunk_size: int | None = None,
    mesh: Mesh | None = None,
    progress: bool = True,
    checkpoint: str | os.PathLike | None = None,
) -> SearchResult:
    """Search for residual-free blocks ``g_V`` that reproduce residual blocks ``f_W``.

    Args:
      target: residual block weights ``W`` (``MLPParams`` ``(W_up (n,d), W_down (d,n))`` or
        ``GatedParams``), optionally with a leading draws axis; for ``depth=L`` each field has
        an ``L`` axis after the draws axis (``models.stack`` layout).
      activation: registered name (``σ``, or the gate ``g`` for gated blocks); static.
      key: base PRNG key; draw ``i`` uses ``fold_in(key, i)``.
      skip: linear skip ``A`` ``(d, d)`` or ``(draws, d, d)`` (``None``: ``A = I``); depth 1 only.
      depth: number of layers ``L`` of both the residual stack and the candidate stack.
      width: candidate width ``m ≥ n`` (default ``n``).
      restarts: independent initialisations per draw.
      steps: first-phase optimiser steps (the default 200 is a short Adam warm-up; for small
        candidates the Gauss–Newton polish does most of the work).
      inputs: an :class:`Inputs` (training and held-out inputs per draw).
      init: ``"random"`` (the honest search: Gaussian weights with variance ``1/fan_in``, every
        other restart rescaled to the target's per-field Frobenius norm; nothing else about
        the target is used), ``"warm"`` (the target's ``W_up``/``W_gate`` with random row sign
        flips, widened with random units), or candidate params with leading
        ``(restarts, ...)`` or ``(draws, restarts, ...)`` axes (non-finite entries make that
        restart fail, nothing else).
      optimizer: first-phase ``optax.GradientTransformation`` (default
        :func:`default_optimizer` ``(steps)``: Adam, cosine decay 1e-2 → 1e-4).
      polish: ``True`` (the default :class:`Polish`: Gauss–Newton for candidates with at most
        1024 parameters, else L-BFGS; 300 iterations, the first 40 on every restart, the rest on
        the best 8), a :class:`Polish`, or ``False``.
      tol: loss below which a draw counts as solved (default 1e-20 in float64, 1e-10 in
        float32); below :func:`min_tol` of the dtype it is an error, not a claim.
      batch_size: draws vmapped together per device in one jitted call (default: as many as
        fit a fixed memory budget, at most ``draws``); memory stays bounded at any number of
        draws. Results depend on it only through floating-point rounding.
      chunk_size: draws per progress update and checkpoint file, a multiple of
        ``batch_size`` × devices (default: about 20 chunks). Results do not depend on it,
        nor on the number of devices.
      mesh: a ``jax.sharding.Mesh`` with a ``"draws"`` axis (default: all devices when there are
        several). Multi-host: call ``jax.distributed.initialize()`` first; every process runs
        the same call.
      progress: show a tqdm bar advanced between chunks.
      checkpoint: directory; finished chunks are written there atomically and a rerun with the
        same arguments resumes from them (a directory from a different target, key or setting
        is refused; a custom ``optimizer`` is recorded only as "custom", so keep it the same).

    Returns:
      A :class:`SearchResult`.
    """
    act, target, d, n, single = _check_target(target, activation, depth)
    draws = target.down.shape[0]
    dtype = target.down.dtype
    width = n if width is None else width
    if not isinstance(width, (int, np.integer)) or width < n:
        raise ValueError(f"width must be an integer >= n = {n} (the target's width), got {width!r}")
    for name, v in (("restarts", restarts), ("steps", steps)):
        if not isinstance(v, (int, np.integer)) or v < (1 if name == "restarts" else 0):
            raise ValueError(f"{name} must be a {'positive' if name == 'restarts' else 'non-negative'} integer, got {v!r}")
    if not isinstance(inputs, Inputs):
        raise ValueError(f"inputs must be an absorbjax.fit.Inputs, got {type(inputs).__name__}")
    _log_bounds(inputs.low, inputs.high)
    if polish is True:
        polish = Polish()
    elif polish is False or polish is None:
        polish = None
    elif not isinstance(polish, Polish):
        raise ValueError(f"polish must be a bool or an absorbjax.fit.Polish, got {type(polish).__name__}")
    fields = len(target._fields)
    if polish is not None:
        polish = polish.resolve(fields * int(width) * d * int(depth))
        if polish.top < 1 or polish.steps < 0 or polish.screen < 0 or polish.memory < 1 or polish.linesearch_steps < 1:
            raise ValueError(f"polish needs top, memory, linesearch_steps >= 1 and steps, screen >= 0, got {polish}")
    floor = min_tol(dtype)
    tol = (1e-20 if dtype == jnp.float64 else 1e-10) if tol is None else float(tol)
    if tol < floor:
        raise ValueError(
            f"tol={tol:.1e} is below what {jnp.dtype(dtype).name} can resolve (min_tol = {floor:.1e}); "
            "pass float64 weights with jax.config.update('jax_enable_x64', True)"
        )
    skip = _check_skip(skip, draws, d, depth, dtype)
    init_mode, given = _check_init(init, target, draws, restarts, width, depth, d)
    num = inputs.num or max(256, 2 * fields * width * depth)
    if num < 1 or inputs.holdout < 1:
        raise ValueError(f"inputs.num and inputs.holdout must be positive, got {inputs}")
    cfg = _Static(act.name, int(depth), d, n, int(width), int(restarts), int(steps), init_mode,
                  skip is not None, int(num), float(inputs.low), float(inputs.high), int(inputs.holdout), polish)
    opt_name = "default" if optimizer is None else "custom"
    opt = default_optimizer(steps) if optimizer is None else optimizer
    if not isinstance(opt, optax.GradientTransformation):
        raise ValueError(f"optimizer must be an optax.GradientTransformation, got {type(opt).__name__}")

    mesh = _make_mesh(mesh)
    ndev = 1 if mesh is None else mesh.shape["draws"]
    if batch_size is None:
        batch_size = _default_batch(cfg, draws, jnp.dtype(dtype).itemsize, fields)
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    batch_size = int(batch_size)
    unit = batch_size * ndev  # one batch per device
    if chunk_size is None:
        chunk_size = unit * max(1, -(-draws // (unit * 20)))  # at most ~20 chunks
    if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    chunk_size = int(-(-chunk_size // unit) * unit)
    sharding = None if mesh is None else NamedSharding(mesh, P("draws"))

    typed = jnp.issubdtype(jnp.asarray(key).dtype, jax.dtypes.prng_key)
    if typed and jnp.shape(key) != ():
        raise ValueError(f"key must be a single PRNG key, got shape {jnp.shape(key)}")
    key_data = np.asarray(jax.random.key_data(key) if typed else key)
    impl = str(jax.random.key_impl(key)) if typed else None
    config = {
        **{k: v for k, v in cfg._asdict().items() if k not in ("polish", "has_skip")},
        "init": init_mode,
        "polish": None if polish is None else polish._asdict(),
        "optimizer": opt_name,
        "skip": skip is not None,
        "draws": draws,
        "tol": tol,
        "batch_size": batch_size,
        "chunk_size": chunk_size,
        "devices": ndev,
        "dtype": jnp.dtype(dtype).name,
        "key": key_data.tolist(),
        "jax": jax.__version__,
    }

    step = _batch_fn(cfg, opt, mesh, impl)

    ckpt = None
    if checkpoint is not None:
        ckpt = Path(checkpoint)
        fp = _fingerprint(cfg, target, skip, given, key_data, opt_name)
        meta = ckpt / "config.json"
        if meta.exists():
            old = json.loads(meta.read_text())
            if old.get("fingerprint") != fp:
                raise ValueError(
                    f"checkpoint {ckpt} holds a different search (other target, key or settings); "
                    "use a fresh directory"
                )
        elif jax.process_index() == 0:
            with io.atomic_open(meta) as f:
                json.dump({"fingerprint": fp, "config": config}, f, indent=2, default=str)

    from tqdm.auto import tqdm

    kind = type(target)
    host = (
        jax.tree.map(np.asarray, target),
        None if skip is None else np.asarray(skip),
        None if given is None else jax.tree.map(np.asarray, given),
    )
    base = key_data if mesh is None else _to_device(key_data, NamedSharding(mesh, P()))
    parts = []
    bar = tqdm(total=draws, desc=f"search {act.name}", unit="draw", disable=not progress or jax.process_index() != 0)
    try:
        for start in range(0, draws, chunk_size):
            stop = min(start + chunk_size, draws)
            path = None if ckpt is None else ckpt / f"chunk_{start:09d}_{stop:09d}.npz"
            if path is not None and path.exists():
                with np.load(path) as z:
                    parts.append(_unflatten(dict(z), kind))
                bar.update(stop - start)
                continue
            outs = []
            for b in range(start, stop, unit):  # dispatched asynchronously, gathered per chunk
                idx = np.minimum(np.arange(b, b + unit), draws - 1)  # pad with the last draw
                args = (idx.astype(np.int32),) + jax.tree.map(lambda a: a[idx], host)
                outs.append(step(base, *_to_device(args, sharding)))
            out = jax.tree.map(lambda *a: np.concatenate(a)[: stop - start], *_to_host(outs))
            if path is not None and jax.process_index() == 0:
                _atomic_save(path, _flatten(out, kind))
            parts.append(out)
            bar.update(stop - start)
    finally:
        bar.close()

    res = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "best_params"}
    best = kind(*(np.concatenate([p["best_params"][i] for p in parts]) for i in range(len(kind._fields))))
    best = jax.tree.map(jnp.asarray, best)
    if single:
        config["single"] = True
    return SearchResult(
        best_loss=res["best_loss"],
        best_params=best,
        losses=res["losses"],
        failed=res["failed"].astype(bool),
        profile=res["profile"],
        edges=decade_edges(cfg.low, cfg.high),
        weight_norms=res["weight_norms"],
        target_norms=res["target_norms"],
        holdout_loss=res["holdout_loss"],
        config=config,
    )
