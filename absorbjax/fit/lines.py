"""A ReLU block's or stack's first-layer kink hyperplanes, read from its values, and a fit with them fixed.

A ReLU stack ``f`` (residual or not, any depth) is piecewise linear and positively homogeneous. Its
Jacobian ``J = ∂f/∂x`` (on a linear region, the difference quotient of its values) jumps by a rank-one
matrix ``a νᵀ`` across every kink:

- across a first-layer unit's hyperplane ``u_i · x = 0`` the normal ``ν`` is ``u_i`` everywhere on it,
  also at the antipode ``−x₀`` of a kink point ``x₀``;
- across a later layer's kink surface ``u · h(x) = 0`` (``h`` the layers before it) the normal is
  ``J_h(x₀)ᵀ u``, and ``u · h(−x₀) = 0`` fails for generic weights: no kink at ``−x₀``.

:func:`first_layer_lines` finds kink points on random segments (bisection on ``J``), takes each jump's
normal and keeps the normals that jump again, with the same normal, at the antipode. A first-layer
line can hide: where the layers after it pass nothing on (an absorbable ReLU block vanishes on the
cone where exactly its ``S`` is active) its jump is 0, and a line hidden on one ray is missed.

With the lines fixed, ``U₁`` is known up to the units' scales (absorbed by ``D₁``) and orientations
(absorbed by a free ``L₁``, ``σ(−z) = σ(z) − z``): :func:`fit_with_lines` fits the free-``L`` stack
``L_l h + D_l σ(U_l h)`` with the first layer's rows on the lines held fixed (the missed ones free),
where a search with free lines stalls in the teacher–student minima of the first layer.
:func:`absorbjax.fit.expand.expand_search` then decides the condition on the fit, as on its merged
proposals. Nothing here decides anything: the lines only propose.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from absorbjax.fit import solvers
from absorbjax.fit.config import Inputs, Linear, Polish, default_optimizer
from absorbjax.fit.loss import candidate_fn, residual_weights, sample_inputs, target_fn
from absorbjax.models import MLPParams


def first_layer_lines(f: Callable[[jax.Array], jax.Array], d: int, key: jax.Array, *, segments: int = 128,
                      grid: int = 65, bisect: int = 60, tol: float = 1e-8) -> np.ndarray:
    """Unit normals ``(k, d)`` of the first-layer kink hyperplanes of a ReLU stack ``f: ℝ^d → ℝ^d``.

    Kinks are located on ``segments`` random segments between standard normal points: ``J`` on
    ``grid`` points each, then ``bisect`` halvings of every grid step across which ``J`` changes
    (one kink per step; a step with several yields one of them); ``J`` changes where an entry moves
    by more than ``1e4 ε`` of its largest (``ε`` of JAX's default float). A kink counts as a
    first-layer line when ``J`` also jumps at ``−x₀``, with the same normal (``1 − |cos| < 1e-6``);
    normals within ``1 − |cos| ≤ tol`` of one already kept are the same line.

    Args:
      f: the function on one input ``x (d,)``, traceable by JAX; only its values and Jacobian
        on its linear regions are used.
      d: input dimension.
      key: PRNG key of the segments.

    Returns:
      ``(k, d)`` float64 NumPy unit normals, ``k ≥ 0``, in the order found.

    Examples:
      >>> import jax, numpy as np
      >>> from absorbjax import fit, models
      >>> with jax.enable_x64(True):
      ...     W = models.init(jax.random.key(0), 2, 4, "relu", depth=2)
      ...     lines = fit.lines.first_layer_lines(lambda x: models.stack(W, x, "relu"), 2, jax.random.key(1))
      >>> u = np.asarray(W.up[0]) / np.linalg.norm(W.up[0], axis=1, keepdims=True)
      >>> len(lines), bool(np.allclose(np.abs(lines @ u.T).max(1), 1.0))
      (4, True)
    """
    jac = jax.jit(jax.vmap(jax.jacfwd(f)))
    ka, kb = jax.random.split(key)
    a, b = jax.random.normal(ka, (segments, d)), jax.random.normal(kb, (segments, d))
    dtype = a.dtype  # float64 under x64, else float32: the thresholds follow its rounding
    J = lambda x: np.asarray(jac(jnp.asarray(x, dtype)), np.float64)
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    eps = float(np.finfo(dtype).eps)
    t = np.linspace(0.0, 1.0, grid)
    Jg = J((a[:, None] + t[None, :, None] * (b - a)[:, None]).reshape(-1, d)).reshape(segments, grid, d, d)
    scale = np.abs(Jg).max(initial=0.0)
    differ = lambda P, Q: np.abs(P - Q).max((-2, -1)) > 1e4 * eps * scale
    seg, step = np.nonzero(differ(Jg[:, 1:], Jg[:, :-1]))
    if not seg.size:
        return np.zeros((0, d))
    lo, hi, A, B, J_lo = t[step], t[step + 1], a[seg], b[seg], Jg[seg, step]
    point = lambda s: A + s[:, None] * (B - A)
    for _ in range(bisect):  # keep J(lo) = J_lo ≠ J(hi)
        mid = (lo + hi) / 2
        right = differ(J(point(mid)), J_lo)
        lo, hi = np.where(right, lo, mid), np.where(right, mid, hi)
    normal = lambda jump: np.linalg.svd(jump)[2][:, 0]  # jump = a νᵀ
    nu = normal(J(point(hi)) - J_lo)
    x0 = (point(lo) + point(hi)) / 2
    step_out = 1e-6 * np.linalg.norm(x0, axis=1, keepdims=True) * nu
    jump_back = J(-x0 + step_out) - J(-x0 - step_out)
    keep = differ(jump_back, 0.0) & (1.0 - np.abs(np.sum(nu * normal(jump_back), 1)) < max(1e-6, 1e3 * eps))
    lines: list[np.ndarray] = []
    for v in nu[keep]:
        if all(1.0 - abs(v @ w) > tol for w in lines):
            lines.append(v)
    return np.array(lines).reshape(-1, d)


def fit_with_lines(target: MLPParams, lines: np.ndarray, mask: np.ndarray, *, key: jax.Array, depth: int,
                   inputs: Inputs, restarts: int = 256, steps: int = 500,
                   polish: Polish = Polish(steps=300, screen=40, top=8)):
    """Free-``L`` ReLU stacks ``L_l h + D_l σ(U_l h)`` of width ``n`` fitted to residual ReLU
    stacks ``target`` with ``U₁``'s rows fixed on ``lines`` where ``mask``.

    Per draw ``j`` (key ``fold_in(key, j)``): training inputs as :func:`absorbjax.fit.sample_inputs`
    draws them, ``restarts`` random starts (Gaussian weights of variance ``1/fan_in``, ``L_l = 0``),
    ``steps`` Adam steps (:func:`absorbjax.fit.default_optimizer`), then Levenberg–Marquardt
    (``polish.screen`` iterations on every restart, the rest on the ``polish.top`` best).
    Vmapped over draws and restarts.

    Args:
      target: residual blocks ``W`` with a leading draws axis (and a layer axis for ``depth > 1``).
      lines: ``(draws, n, d)`` unit normals (rows where ``mask`` is False are ignored).
      mask: ``(draws, n)`` bool: row ``i`` of ``U₁`` is held at ``lines[j, i]``.
      depth: stack depth ``L`` (1: one block).
      inputs: the training inputs' :class:`absorbjax.fit.Inputs` (``num`` must be set).

    Returns:
      ``(Linear(MLPParams(U, D), L), loss)``: each draw's best restart (``U (draws, [L,] n, d)``
      with the fixed rows in place) and its loss ``ℓ`` ``(draws,)`` on its training inputs.
    """
    draws, n, d = lines.shape
    lead = () if depth == 1 else (depth,)
    opt = default_optimizer(steps)
    lines, mask = jnp.asarray(lines, target.down.dtype), jnp.asarray(mask)

    def place(p: Linear, fixed, on) -> Linear:
        first = p.block.up if depth == 1 else p.block.up[0]
        first = jnp.where(on[:, None], fixed, first)
        up = first if depth == 1 else p.block.up.at[0].set(first)
        return p._replace(block=p.block._replace(up=up))

    def init(k) -> Linear:
        ku, kd = jax.random.split(k)
        up = jax.random.normal(ku, lead + (n, d), lines.dtype) / np.sqrt(d)
        down = jax.random.normal(kd, lead + (d, n), lines.dtype) / np.sqrt(n)
        return Linear(MLPParams(up, down), jnp.zeros(lead + (d, d), lines.dtype))

    def one_draw(j, W, fixed, on):
        kx, kr = jax.random.split(jax.random.fold_in(key, j))
        xs, _ = sample_inputs(kx, d, inputs, lines.dtype)
        ys = jax.vmap(lambda x: target_fn(W, x, "relu", depth, None))(xs)
        w = residual_weights(xs)
        model = lambda p, x: candidate_fn(place(p, fixed, on), x, "relu", depth)
        loss = lambda p: jnp.sum(jnp.square((ys - jax.vmap(lambda x: model(p, x))(xs)) * w))
        p = jax.vmap(lambda k: solvers.first_phase(opt, steps, loss, init(k)))(jax.random.split(kr, restarts))
        v = jax.vmap(loss)(p)
        lm = lambda q, v0, it: solvers.gauss_newton(polish._replace(steps=it), model, xs, ys, q, v0)
        p, v = jax.vmap(lambda q, v0: lm(q, v0, polish.screen))(p, jnp.where(jnp.isfinite(v), v, jnp.inf))
        _, top = lax.top_k(-v, min(polish.top, restarts))
        sel, sv = jax.vmap(lambda q, v0: lm(q, v0, polish.steps - polish.screen))(
            jax.tree.map(lambda a: a[top], p), v[top])
        p = jax.tree.map(lambda a, b: a.at[top].set(b), p, sel)
        v = v.at[top].set(sv)
        best = jnp.argmin(jnp.where(jnp.isfinite(v), v, jnp.inf))
        return place(jax.tree.map(lambda a: a[best], p), fixed, on), v[best]

    return jax.jit(jax.vmap(one_draw))(jnp.arange(draws), target, lines, mask)
