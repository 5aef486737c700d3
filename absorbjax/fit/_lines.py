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
(absorbed by a free ``A₁``, ``σ(−z) = σ(z) − z``): :func:`fit_with_lines` fits the free-``A`` stack
``A_l h + D_l σ(U_l h)`` with the first layer's rows on the lines held fixed (the missed ones free),
where a search with free lines stalls in the teacher–student minima of the first layer (or, with
``residual_free_first``, with ``A₁ = 0`` and each restart its own orientation of the lines). Once a
fit's first layer is exact, the second layer's hyperplanes show through it too
(:func:`second_layer_lines`: a kink off the first-layer lines, with normal ``ν``, lies on
``u · h = 0`` with ``ν ∝ J_h(x₀)ᵀ u``), a start where the fit's own second layer went elsewhere.
Where no fit's first layer is exact, a depth-2 stack's first layer follows from the second
layer's kinks and the lines alone, up to the junction gauge (:func:`first_layer_from_kinks`).
:func:`absorbjax.fit._expand.expand_search` then decides the condition on the fit, as on its merged
proposals. Nothing here decides anything: the lines only propose.
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from absorbjax import activations
from absorbjax.fit import _drawmap as drawmap, _solvers as solvers
from absorbjax.fit._config import Inputs, Linear, Polish, default_optimizer
from absorbjax.fit._loss import candidate_fn, residual_weights, sample_inputs, target_fn
from absorbjax.models import MLPParams


class Kinks(NamedTuple):
    """Kink points of a piecewise linear ``f`` found on random segments (:func:`kinks`).

    Attributes:
      points: ``x₀ (k, d)``, each within rounding of a kink.
      normals: ``ν (k, d)``, the unit normal of ``J``'s jump ``a νᵀ`` there.
      antipodal: ``(k,)`` bool: ``J`` jumps again, with the same normal, at ``−x₀`` (a first-layer
        hyperplane of a ReLU stack does; a later layer's kink surface generically does not).
    """

    points: np.ndarray
    normals: np.ndarray
    antipodal: np.ndarray


def kinks(
    f: Callable[[jax.Array], jax.Array],
    d: int,
    *,
    key: jax.Array,
    segments: int = 128,
    grid: int = 65,
    bisect: int = 60,
) -> Kinks:
    """The kinks of a ReLU stack ``f: ℝ^d → ℝ^d`` met by ``segments`` random segments.

    Segments join standard normal points: ``J = ∂f/∂x`` on ``grid`` points each, then ``bisect``
    halvings of every grid step across which ``J`` changes (one kink per step; a step with several
    yields one of them); ``J`` changes where an entry moves by more than ``1e4 ε`` of its largest
    (``ε`` of JAX's default float). The jump's normal is the top right singular vector of
    ``J⁺ − J⁻``; it counts as antipodal when ``J`` jumps at ``−x₀`` with ``1 − |cos| < 1e-6``.

    Args:
      f: the function on one input ``x (d,)``, traceable by JAX; only its Jacobian on its linear
        regions is used.
      d: input dimension.
      key: PRNG key of the segments.

    Returns:
      :class:`Kinks` as float64 NumPy arrays, in the order of the segments.
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
        return Kinks(np.zeros((0, d)), np.zeros((0, d)), np.zeros(0, bool))
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
    same = 1.0 - np.abs(np.sum(nu * normal(jump_back), 1)) < max(1e-6, 1e3 * eps)
    return Kinks(x0, nu, differ(jump_back, 0.0) & same)


def first_layer_lines(
    f: Callable[[jax.Array], jax.Array],
    d: int,
    *,
    key: jax.Array,
    tol: float = 1e-8,
    segments: int = 128,
    grid: int = 65,
    bisect: int = 60,
) -> np.ndarray:
    """Unit normals ``(k, d)`` of the first-layer kink hyperplanes of a ReLU stack ``f: ℝ^d → ℝ^d``:
    the antipodal :func:`kinks` (``segments``, ``grid``, ``bisect``: its settings), normals within ``1 − |cos| ≤ tol`` of
    one already kept being the same line (:func:`lines_of`).

    Returns:
      ``(k, d)`` float64 NumPy unit normals, ``k ≥ 0``, in the order found.

    Examples:
      >>> import jax, numpy as np
      >>> from absorbjax import fit, models
      >>> with jax.enable_x64(True):
      ...     W = models.init("relu", 2, 4, key=jax.random.key(0), depth=2)
      ...     lines = fit.first_layer_lines(lambda x: models.stack(W, x, "relu"), 2, key=jax.random.key(1))
      >>> u = np.asarray(W.up[0]) / np.linalg.norm(W.up[0], axis=1, keepdims=True)
      >>> len(lines), bool(np.allclose(np.abs(lines @ u.T).max(1), 1.0))
      (4, True)
    """
    return lines_of(kinks(f, d, key=key, segments=segments, grid=grid, bisect=bisect), tol=tol)


def lines_of(found: Kinks, *, tol: float = 1e-8) -> np.ndarray:
    """The distinct antipodal normals ``(k, d)`` of ``found`` (``1 − |cos| ≤ tol``: the same line)."""
    lines: list[np.ndarray] = []
    for v in found.normals[found.antipodal]:
        if all(1.0 - abs(v @ w) > tol for w in lines):
            lines.append(v)
    return np.array(lines).reshape(-1, found.normals.shape[1])


def second_layer_lines(
    found: Kinks, first: MLPParams, linear, lines: np.ndarray, *, tol: float = 1e-4, on_line: float = 1e-7
) -> tuple[np.ndarray, np.ndarray]:
    """Unit normals ``u`` of the second layer's kink hyperplanes ``u · h = 0``, in the coordinates
    ``h = A₁ x + D₁ σ(U₁ x)`` of a fitted first ReLU layer, read from the kinks of ``f = g ∘ h``.

    At a kink ``x₀`` of ``f`` that is not antipodal and lies off every first-layer line
    (``|ℓ · x₀| > on_line ‖x₀‖``), ``g`` bends at ``h(x₀)``: ``ν ∝ J_h(x₀)ᵀ u`` with
    ``J_h = A₁ + D₁ diag(U₁ x₀ > 0) U₁``, so ``u ∝ J_h(x₀)⁻ᵀ ν``. Normals within
    ``1 − |cos| ≤ tol`` are one line (its top eigenvector of ``Σ u uᵀ``); a line is as good as
    the fitted layer is (``tol`` allows a fit's error). In a deeper stack a third layer's kinks
    give normals too: the count tells them apart only roughly.

    Args:
      found: the kinks of ``f`` (:func:`kinks`).
      first: the fitted first layer ``(U₁ (n, d), D₁ (d, n))``; ``linear``: its ``A₁ (d, d)``.
      lines: ``(k, d)`` first-layer unit normals (kinks on them are skipped).

    Returns:
      ``(normals (m, d), counts (m,))``, the lines met most often first.
    """
    d = found.points.shape[1]
    x0, nu = _off_lines(found, lines, on_line)
    if not len(x0):
        return np.zeros((0, d)), np.zeros(0, int)
    U, D = (np.asarray(a, np.float64) for a in first)
    J = np.asarray(linear, np.float64) + np.einsum("ik,nk,kj->nij", D, (x0 @ U.T > 0).astype(float), U)
    ok = np.abs(np.linalg.det(J)) > 1e-12 * np.abs(J).max((1, 2)) ** d  # h is locally invertible
    u = np.linalg.solve(np.swapaxes(J[ok], 1, 2), nu[ok][..., None])[..., 0]
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    groups: list[list[np.ndarray]] = []
    for v in u:
        for g in groups:
            if 1.0 - abs(v @ g[0]) <= tol:
                g.append(v)
                break
        else:
            groups.append([v])
    groups.sort(key=len, reverse=True)
    normals = [np.linalg.eigh(np.array(g).T @ np.array(g))[1][:, -1] for g in groups]
    return np.array(normals).reshape(-1, d), np.array([len(g) for g in groups], int)


def _off_lines(found: Kinks, lines: np.ndarray, on_line: float = 1e-7) -> tuple[np.ndarray, np.ndarray]:
    """The kinks of ``found`` that a later layer makes: ``(x₀ (k, d), ν (k, d))`` of those not
    antipodal and off every line (``|ℓ · x₀| > on_line ‖x₀‖``)."""
    x0, nu = found.points[~found.antipodal], found.normals[~found.antipodal]
    if len(lines) and len(x0):
        off = (np.abs((x0 / np.linalg.norm(x0, axis=1, keepdims=True)) @ np.asarray(lines).T) > on_line).all(1)
        x0, nu = x0[off], nu[off]
    return x0, nu


def first_layer_from_kinks(
    found: Kinks, lines: np.ndarray, *, tuples: int = 4000, seed: int = 0, tol: float = 1e-9
) -> tuple[np.ndarray, np.ndarray] | None:
    """The first layer ``h = A₁ x + D₁ σ(ℓ x)`` of a depth-2 ReLU stack, up to the junction gauge
    ``GL(d)``, from its second layer's kinks, with ``U₁ = ℓ`` on its first-layer ``lines``.

    A second-layer unit bends where ``u · h(x) = v · φ(x) = 0``, ``φ(x) = [x; σ(ℓ x)] ∈ ℝ^{d+n}``,
    ``v = [A₁ᵀ; D₁ᵀ] u``. At its kink ``x₀`` with normal ``ν``, in the region with pattern
    ``a = (ℓ x₀ > 0)``, the gradient ``G v = (I, ℓᵀ diag(a)) v`` is parallel to ``ν``: ``d − 1``
    linear equations ``Qᵀ G v = 0`` (``Q`` a basis of ``ν⊥``), and ``q = ⌈(d + n)/(d − 1)⌉``
    kinks of one unit in distinct regions pin ``v``. Sequential RANSAC: of ``tuples`` random
    ``q``-tuples of the kinks left, the null vectors that are simple and bend at every kink of the
    tuple (``|ν · G v| > 1e-6``; the first 256); the one that explains most kinks (``‖Qᵀ G v‖ < 10 tol``) is
    kept, refined on them, and its kinks removed; until ``d`` are kept. The column space of
    ``[A₁ᵀ; D₁ᵀ]`` is theirs. The points must be kinks of a depth-2 stack with these lines;
    anything else only proposes nothing or a wrong layer (a fit judges it).

    Args:
      found: the stack's kinks (:func:`kinks`); those off the lines and not antipodal are used.
      lines: ``ℓ (n, d)`` unit normals, the first layer's rows (any orientation: ``A₁`` takes it).
      tuples: tuples drawn per kept functional (NumPy ``default_rng(seed)``).
      tol: the relative size of the smallest singular value of a tuple's equations that counts as 0.

    Returns:
      ``(D₁ (d, n), A₁ (d, d))`` with ``[A₁ᵀ; D₁ᵀ]`` orthonormal, or ``None`` (``d < 2``, or
      fewer than ``d`` independent functionals pinned).
    """
    ell = np.asarray(lines, np.float64)
    n, d = ell.shape
    if d < 2 or not n:
        return None
    x0, nu = _off_lines(found, ell)
    m = len(x0)
    pattern = x0 @ ell.T > 0
    region = np.unique(pattern, axis=0, return_inverse=True)[1].ravel()
    G = np.concatenate([np.broadcast_to(np.eye(d), (m, d, d)), ell.T[None] * pattern[:, None, :]], 2)
    Q = np.linalg.svd(np.eye(d) - nu[:, :, None] * nu[:, None, :])[0][:, :, : d - 1]  # ν⊥
    eqs = np.einsum("kai,kab->kib", Q, G)  # (m, d − 1, d + n)
    bends = lambda V: np.abs(np.einsum("ka,kab,tb->tk", nu, G, V)) > 1e-6  # (t, m)
    q = -(-(d + n) // (d - 1))
    rng = np.random.default_rng(seed)
    left, funcs = np.ones(m, bool), []
    while len(funcs) < d:
        idx = np.flatnonzero(left)
        if len(np.unique(region[idx])) < q:
            break
        tup = idx[np.array([rng.choice(len(idx), q, replace=False) for _ in range(tuples)])]
        tup = tup[[len(np.unique(region[t])) == q for t in tup]]
        if not len(tup):
            break
        s, vt = np.linalg.svd(eqs[tup].reshape(len(tup), -1, d + n))[1:]
        V = vt[:, -1]
        ok = (s[:, -1] < tol * s[:, 0]) & (s[:, -2] > 1e3 * tol * s[:, 0])
        ok &= (np.abs(np.einsum("tqa,tqab,tb->tq", nu[tup], G[tup], V)) > 1e-6).all(1)
        if not ok.any():
            break
        V = V[ok][:256]  # candidates scored on every kink
        explained = (np.linalg.norm(np.einsum("kib,tb->tki", eqs, V), axis=2) < 10 * tol) & bends(V) & left
        members = explained[explained.sum(1).argmax()]
        funcs.append(np.linalg.svd(eqs[members].reshape(-1, d + n))[2][-1])
        left &= ~members
    if len(funcs) < d:
        return None
    P, sv, _ = np.linalg.svd(np.array(funcs).T, full_matrices=False)
    if sv[-1] < 1e-6 * sv[0]:
        return None
    return P[d:].T, P[:d].T


def _finite(v):
    """``v`` with NaN and ±inf read as ``+inf`` (a failed restart ranks last)."""
    return jnp.where(jnp.isfinite(v), v, jnp.inf)


class _Setting(NamedTuple):
    """The static part of :func:`fit_with_lines` (one compiled program each)."""

    depth: int
    inputs: Inputs
    restarts: int
    steps: int
    polish: Polish
    residual_free_first: bool
    batch: int
    relu: activations.Activation  # the registry's entry now: a re-registered "relu" compiles anew


def fit_with_lines(
    params: MLPParams,
    lines: np.ndarray,
    mask: np.ndarray,
    *,
    key: jax.Array,
    depth: int,
    inputs: Inputs,
    restarts: int = 256,
    steps: int = 500,
    polish: Polish = Polish(steps=300, screen=40, top=8),
    starts: Linear | None = None,
    residual_free_first: bool = False,
):
    """Free-``A`` ReLU stacks ``A_l h + D_l σ(U_l h)`` of width ``n`` fitted to residual ReLU
    stacks ``params`` with ``U₁``'s rows fixed on ``lines`` where ``mask``.

    Per draw ``j`` (key ``fold_in(key, j)``): training inputs as :func:`absorbjax.fit.sample_inputs`
    draws them, ``restarts`` random starts (Gaussian weights of variance ``1/fan_in``, ``A_l = 0``),
    ``steps`` Adam steps (:func:`absorbjax.fit.default_optimizer`), then Levenberg–Marquardt
    (``polish.screen`` iterations on every restart, the rest on the ``polish.top`` best).
    Draws run in sequence through one jitted per-draw program, compiled once per setting and
    shared by every call (any number of draws, every round of :func:`absorbjax.fit._expand.expand_search`);
    restarts go in batches whose LM Jacobians fit :func:`absorbjax.fit._drawmap.memory_budget`.

    Args:
      params: residual blocks ``W`` with a leading draws axis (and a layer axis for ``depth > 1``).
      lines: ``(draws, n, d)`` unit normals (rows where ``mask`` is False are ignored).
      mask: ``(draws, n)`` bool: row ``i`` of ``U₁`` is held at ``lines[j, i]``.
      depth: stack depth ``L`` (1: one block).
      inputs: the training inputs' :class:`absorbjax.fit.Inputs` (``num`` must be set).
      starts: starts in place of the random ones (``Linear`` with leading ``(draws, restarts)``
        axes; ``restarts`` is then their number).
      residual_free_first: hold ``A₁ = 0``, so that the first layer is residual-free already,
        ``D₁ σ(U₁ x)``; a held row then points to the side of ``lines[j, i]`` its start row does
        (``sign(U₁[i] · ℓ_i)`` of the random start, which no step changes), so the restarts try
        the ``2^k`` orientations at random. Where the stack vanishes on a large cone its values do
        not pin a free ``A₁`` and exact free-``A`` fits may fail the condition; these cannot.

    Returns:
      ``(Linear(MLPParams(U, D), A), loss)``: each draw's ``polish.top`` best restarts, best first
      (``U (draws, top, [L,] n, d)`` with the fixed rows in place), and their losses ``ℓ``
      ``(draws, top)`` on the draw's training inputs. Exact fits of one target differ (a stack's
      junctions admit more than the ``GL(d)`` gauge): the condition may hold on some only.
    """
    draws, n, d = lines.shape
    if starts is not None:
        starts = jax.tree.map(lambda a: jnp.asarray(a, params.down.dtype), starts)
        restarts = starts.linear.shape[1]
    lines, mask = jnp.asarray(lines, params.down.dtype), jnp.asarray(mask)
    size = depth * (2 * n * d + d * d)  # parameters P of one restart
    per_restart = lines.dtype.itemsize * (3 * inputs.num * d * size + 2 * size * size)  # J, JᵀJ
    batch = int(max(1, min(restarts, drawmap.memory_budget() // per_restart)))
    setting = _Setting(depth, inputs, restarts, steps, polish, residual_free_first, batch, activations.get("relu"))
    row = lambda tree, j: None if tree is None else jax.tree.map(lambda a: a[j], tree)
    # One compiled program per setting, whatever the number of draws: calls and rounds share it.
    fits = [_fit_draw(key, j, row(params, j), lines[j], mask[j], row(starts, j), setting) for j in range(draws)]
    return jax.tree.map(lambda *a: jnp.stack(a), *fits)


@functools.partial(jax.jit, static_argnums=6)
def _fit_draw(key, j, W, fixed, on, start, setting: _Setting):
    """Draw ``j`` of :func:`fit_with_lines`: its inputs, restarts, both phases and its best ``polish.top``."""
    depth, inputs, restarts, steps, polish, residual_free_first, batch, relu = setting
    n, d = fixed.shape
    lead = () if depth == 1 else (depth,)
    opt = default_optimizer(steps)

    def place(p: Linear) -> Linear:
        first = p.block.up if depth == 1 else p.block.up[0]
        held = fixed
        if residual_free_first:  # each held row keeps the side its start row points to
            held = jnp.where(jnp.sum(first * fixed, -1, keepdims=True) < 0, -fixed, fixed)
        first = jnp.where(on[:, None], held, first)
        up = first if depth == 1 else p.block.up.at[0].set(first)
        linear = p.linear
        if residual_free_first:
            linear = jnp.zeros_like(linear) if depth == 1 else linear.at[0].set(0.0)
        return Linear(p.block._replace(up=up), linear)

    def init(k) -> Linear:
        ku, kd = jax.random.split(k)
        up = jax.random.normal(ku, lead + (n, d), fixed.dtype) / np.sqrt(d)
        down = jax.random.normal(kd, lead + (d, n), fixed.dtype) / np.sqrt(n)
        return Linear(MLPParams(up, down), jnp.zeros(lead + (d, d), fixed.dtype))

    kx, kr = jax.random.split(jax.random.fold_in(key, j))
    xs, _ = sample_inputs(inputs, d, key=kx, dtype=fixed.dtype)
    ys = jax.vmap(lambda x: target_fn(W, x, relu, depth, None))(xs)
    w = residual_weights(xs)
    model = lambda p, x: candidate_fn(place(p), x, relu, depth)
    loss = lambda p: jnp.sum(jnp.square((ys - jax.vmap(lambda x: model(p, x))(xs)) * w))
    lm = lambda q, v0, it: solvers.gauss_newton(polish._replace(steps=it), model, xs, ys, q, v0)

    def screened(a):
        k, p0 = a
        p = solvers.first_phase(opt, steps, loss, init(k) if p0 is None else p0)
        return lm(p, _finite(loss(p)), polish.screen)

    p, v = lax.map(screened, (jax.random.split(kr, restarts), start), batch_size=batch)
    _, top = lax.top_k(-_finite(v), min(polish.top, restarts))
    sel, sv = lax.map(
        lambda a: lm(*a, polish.steps - polish.screen),
        (jax.tree.map(lambda a: a[top], p), v[top]),
        batch_size=batch,
    )
    order = jnp.argsort(_finite(sv))
    return jax.vmap(place)(jax.tree.map(lambda a: a[order], sel)), sv[order]
