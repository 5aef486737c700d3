"""Turn a free-``A`` fit into a residual-free block: step 4 of :func:`absorbjax.fit.expand_search`.

A fit ``A x + D σ(U x)`` of width ``n`` points to a residual-free block when
``D[:,S] U[S,:] = −A`` for some ``S`` (Thm 8/10 with Lemma 4's skip ``A``, decided by
:func:`absorbjax.condition.find_absorbing_set`): :func:`absorber_from_units`. A later layer of a
ReLU stack sees only the image of the layers before it, where less is needed:
:func:`absorber_on_inputs`. :func:`residual_free` applies them layer by layer to a fitted stack.
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.optimize import linprog

from absorbjax import condition
from absorbjax.fit._merge import check_activation, line_distances, merge_clusters
from absorbjax.models import MLPParams, skip_mlp


def absorber_from_units(
    block: MLPParams, activation: str, *, linear=None, tol: float = 1e-6, time_limit: float = 10.0
) -> MLPParams | None:
    """The residual-free block that a fit ``A x + D σ(U x)`` (width ``n``) points to, or ``None``.

    Decides ``D[:,S] U[S,:] = −A`` with :func:`absorbjax.condition.find_absorbing_set` (rule (★)
    with ``rtol = tol``, a proposing tolerance for a fit's error) and returns
    :func:`absorbjax.condition.absorber` (rows in ``S`` negated). ``A`` singular (``A = 0``: the fit
    is residual-free already) is decided on the same function with every unit negated, skip
    ``A + D U``. ``None`` when neither gives an ``S``.
    """
    check_activation(activation)
    U, D = (np.asarray(a, np.float64) for a in block)
    A = np.zeros((U.shape[1],) * 2) if linear is None else np.asarray(linear, np.float64)
    for units, skip in ((MLPParams(U, D), A), (MLPParams(-U, D), A + D @ U)):
        try:
            cert = condition.find_absorbing_set(
                units, activation, skip=skip, decision=condition.Decision(rtol=tol, time_limit=time_limit, narrow=True)
            )
        except ValueError:  # singular skip or degenerate units
            continue
        if cert.status == "absorbable":
            return condition.absorber(units, cert, skip=skip, check=False)  # a set S, or the line d = 1
    return None


def fold_linear_units(block: MLPParams, inputs, *, linear=None, tol: float = 1e-6):
    """A ReLU block ``A h + D σ(U h)`` without the units that are linear on the cone of ``inputs``.

    A unit whose kink ``U_i h = 0`` does not cut ``K = cone(inputs)`` is always on there (its
    ``D_i U_iᵀ`` moves into ``A``, ``σ(z) = z``) or always off (dropped); a unit whose
    ``‖U_i‖ ‖D_i‖`` is below ``tol`` times the largest is dropped too. Rows of ``inputs`` shorter
    than ``tol`` times the longest are the apex (rounding noise where an image is 0) and are ignored.

    Args:
      block: ``(U (n, d), D (d, n))``.
      inputs: ``h (K, d)``.
      linear: ``A (d, d)`` (``None``: 0).
      tol: relative tolerance of "cuts ``K``" (``U_i h / (‖U_i‖ ‖h‖)`` beyond ``±tol``).

    Returns:
      ``(MLPParams(U (k, d), D (d, k)), M (d, d))``: the ``k`` kinked units, in order, and
      ``M = A + Σ_{on} D_i U_iᵀ``; ``M h + D_k σ(U_k h) = A h + D σ(U h)`` on ``K`` (to ``tol``).

    Examples:
      >>> import numpy as np
      >>> from absorbjax import fit, models
      >>> W = models.MLPParams(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]), np.eye(2, 3))
      >>> h = np.random.default_rng(0).uniform(-1.0, 1.0, (64, 2)) * [1.0, 0.0] + [0.0, 1.0]  # h₂ = 1
      >>> kinked, M = fit._convert.fold_linear_units(W, h)
      >>> kinked.up.tolist(), M.tolist()  # unit 1 is always on, unit 2 always off
      ([[1.0, 0.0]], [[0.0, 0.0], [0.0, 1.0]])
    """
    U, D = (np.array(a, np.float64) for a in block)
    d = U.shape[1]
    A = np.zeros((d, d)) if linear is None else np.asarray(linear, np.float64)
    h = unit_directions(inputs, d, tol)
    z = h @ (U / np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-300)).T
    size = np.linalg.norm(U, axis=1) * np.linalg.norm(D, axis=0)
    alive = size > tol * size.max(initial=0.0)  # a unit with ‖U_i‖ ‖D_i‖ ≈ 0 does nothing anywhere
    kinked = alive & (z.max(0, initial=0.0) > tol) & (z.min(0, initial=0.0) < -tol)
    on = alive & ~kinked & (z.max(0, initial=0.0) > tol)
    return MLPParams(U[kinked], D[:, kinked]), A + D[:, on] @ U[on]


def unit_directions(inputs, d: int, tol: float) -> np.ndarray:
    """The unit directions of the rows of ``inputs (K, d)`` longer than ``tol`` times the longest."""
    h = np.asarray(inputs, np.float64).reshape(-1, d)
    norms = np.linalg.norm(h, axis=1)
    h = h[norms > tol * norms.max(initial=0.0)]  # rounding noise where the image is 0 has no direction
    return h / np.linalg.norm(h, axis=1, keepdims=True)


def absorber_on_inputs(
    block: MLPParams, inputs, *, linear=None, tol: float = 1e-6, max_flips: int = 4096
) -> MLPParams | None:
    """The residual-free ReLU block that equals ``A h + D σ(U h)`` on the cone of ``inputs``, or ``None``.

    A layer after the first sees only the image ``K`` of the layers before it, where the condition
    on all of ``ℝ^d`` asks too much. On ``K`` a unit whose kink ``U_i h = 0`` does not cut ``K`` is
    linear (always on, or always off); only the ``k`` kinked lines must be kept (kinked units on
    one line merged into one, :func:`merge_clusters`), each in either orientation (negating unit
    ``i`` adds ``D_i U_iᵀ`` to the linear part: ``σ(−z) = σ(z) − z``). With
    ``M = A + Σ_{on} D_i U_iᵀ`` and a flip set ``F``, the ``f = n − k`` other units reproduce
    ``M_F = M + D[:,F] U[F,:]`` on ``K`` as always-on units ``a_j σ(b_j · h)`` exactly when
    ``rank M_F ≤ f`` and the row space of ``M_F`` meets the interior of the dual cone
    ``{b : b · h > 0 on K}`` (found by a linear program, ``scipy.optimize.linprog``). When the
    inputs reach every direction, every unit is kinked and this is the condition
    ``D[:,S] U[S,:] = −A`` (:func:`absorber_from_units` decides that case for any ``n``).

    Args:
      block: ``(U (n, d), D (d, n))``.
      inputs: ``h (K, d)``, the inputs that reach the layer; ``K = cone(h)``. Rows shorter than
        ``tol`` times the longest are the apex (rounding noise where the image is 0) and are dropped.
      linear: ``A (d, d)`` (``None``: 0).
      tol: relative tolerance of the ranks and of "cuts ``K``" (a proposing tolerance for a fit).
      max_flips: the most flip sets to try (smallest first); with ``k`` kinked lines and
        ``2^k > max_flips`` the answer is ``None``.

    Returns:
      ``MLPParams`` ``(V_up (n, d), V_down (d, n))`` with ``V_down σ(V_up h) = A h + D σ(U h)`` on
      ``cone(inputs)``, or ``None``. Exact on the cone of the given inputs only: a fit judges it
      on fresh inputs.

    Examples:
      Inputs confined to the first quadrant, where the unit ``σ(h₁ + h₂)`` is always on: with
      ``A = [[0, 0], [1, 1]]`` the block is ``h ↦ (h₁ + h₂) (1, 1)`` there, which one residual-free
      unit reproduces, though no residual-free block of width 1 matches it on the whole plane:

      >>> import numpy as np
      >>> from absorbjax import fit, models
      >>> W = models.MLPParams(np.array([[1.0, 1.0]]), np.array([[1.0], [0.0]]))
      >>> A = np.array([[0.0, 0.0], [1.0, 1.0]])
      >>> fit._convert.absorber_from_units(W, "relu", linear=A) is None
      True
      >>> h = np.random.default_rng(0).uniform(0.1, 1.0, (64, 2))
      >>> V = fit._convert.absorber_on_inputs(W, h, linear=A)
      >>> x = np.array([0.3, 0.8])
      >>> bool(np.allclose(models.mlp(V, x, "relu"), A @ x + models.mlp(W, x, "relu")))
      True
      >>> fit._convert.absorber_on_inputs(W, h, linear=np.eye(2)) is None  # M = I + e₁(1, 1): rank 2 > 1 unit
      True
    """
    U, D = (np.array(a, np.float64) for a in block)
    d, n = U.shape[1], U.shape[0]
    h = unit_directions(inputs, d, tol)
    if not len(h):
        return None
    kinked, M = fold_linear_units(block, h, linear=linear, tol=tol)
    # kinked units on one line act as one unit (σ(c z) = c σ(z), σ(−z) = σ(z) − z): merge them
    labels = np.arange(len(kinked.up))
    if len(labels) > 1:
        labels = fcluster(linkage(line_distances(kinked.up, "relu"), "single"), tol, "distance")
    (Uk, Dk), M = merge_clusters(kinked, labels, "relu", M)
    k = len(Uk)
    if 2**k > max_flips:
        return None
    A = np.zeros((d, d)) if linear is None else np.asarray(linear, np.float64)
    scale = np.linalg.norm(A) + np.sum(np.linalg.norm(U, axis=1) * np.linalg.norm(D, axis=0))
    for F in (list(F) for size in range(k + 1) for F in itertools.combinations(range(k), size)):
        MF = M + Dk[:, F] @ Uk[F]
        _, s, vt = np.linalg.svd(MF)
        r = int((s > tol * scale).sum())
        if r > n - k:
            continue
        rows = _interior_rows(vt[:r], h) if r else np.zeros((0, d))
        if rows is None:
            continue
        up, down = np.zeros((n, d)), np.zeros((d, n))
        up[:k], down[:, :k] = Uk, Dk
        up[F] *= -1
        up[k : k + r], down[:, k : k + r] = rows, MF @ np.linalg.pinv(rows)
        return MLPParams(up, down)
    return None


def _interior_rows(R: np.ndarray, h: np.ndarray, margin: float = 1e-6) -> np.ndarray | None:
    """``r`` rows spanning the row space of ``R (r, d)`` (orthonormal) with ``b · h ≥ t/2 > 0`` for every
    unit input ``h``; ``None`` when the best margin ``t`` (a linear program) is below ``margin``."""
    r = R.shape[0]
    a = h @ R.T  # (K, r); maximise t subject to a c ≥ t, |c|∞ ≤ 1
    lp = linprog(
        np.r_[np.zeros(r), -1.0],
        A_ub=np.c_[-a, np.ones(len(h))],
        b_ub=np.zeros(len(h)),
        bounds=[(-1, 1)] * r + [(None, None)],
        method="highs",
    )
    if not lp.success or -lp.fun < margin:
        return None
    c, t = lp.x[:r], -lp.fun
    b = c @ R
    others = [k for k in range(r) if k != int(np.argmax(np.abs(c)))]  # b ± (t/2) R_k stays interior
    return np.array([b] + [b + t / 2 * R[k] for k in others])


def decided(params: MLPParams, linear, depth: int, activation: str, tol: float, inputs=None) -> dict:
    """``{j: residual-free width-n block}`` for the draws ``j`` of fitted free-``A`` stacks
    (``params``, ``linear`` with a leading draws axis) whose layers :func:`residual_free` converts."""
    out = {}
    for j in range(np.shape(linear)[0]):
        V = residual_free(*unstack(params, linear, j, depth), activation, tol, inputs)
        if V is not None:
            out[j] = V[0] if depth == 1 else MLPParams(*(np.stack(a) for a in zip(*V)))
    return out


def residual_free(layers: list[MLPParams], As, activation: str, tol: float, inputs=None):
    """One fitted stack's layers made residual-free, or ``None``: each by the condition
    (:func:`absorber_from_units`); with ``inputs`` (ReLU), a layer after the first where that
    fails, on the image of ``inputs (K, d)`` under the fitted layers before it
    (:func:`absorber_on_inputs`)."""
    out, h = [], inputs
    for layer, (block, A) in enumerate(zip(layers, As)):
        v = absorber_from_units(block, activation, linear=A, tol=tol)
        if v is None and layer and inputs is not None:
            v = absorber_on_inputs(block, h, linear=A, tol=tol)
        if v is None:
            return None
        out.append(v)
        if inputs is not None:
            h = layer_image(block, A, h, activation)
    return out


def fold_stack(layers: list, inputs, tol: float) -> list:
    """``[(MLPParams, A_l)]`` of a ReLU stack, each layer without the units that are linear on the
    image of ``inputs (K, d)`` under the layers before it (:func:`fold_linear_units`)."""
    out, h = [], inputs
    for block, A in layers:
        out.append(fold_linear_units(block, h, linear=A, tol=tol))
        h = layer_image(block, A, h, "relu")
    return out


def layer_image(block: MLPParams, A, h: np.ndarray, activation: str) -> np.ndarray:
    """``A h + D σ(U h)`` for every row of ``h (K, d)``."""
    return np.asarray(jax.vmap(lambda x: skip_mlp(block, x, activation, A))(h))


def unstack(params: MLPParams, linear, j: int, depth: int) -> tuple[list[MLPParams], np.ndarray]:
    """Draw ``j``'s layers and their ``A_l (depth, d, d)`` from a ``linear=True`` search's ``best_params``
    (a :class:`~absorbjax.fit.Linear`: ``params``, ``linear``)."""
    As = np.asarray(linear[j]).reshape((depth,) + np.shape(linear)[-2:])
    return layers_of(jax.tree.map(lambda a: np.asarray(a[j]), params), depth), As


def layers_of(block: MLPParams, depth: int) -> list[MLPParams]:
    """The ``depth`` layers of one stack (``[block]`` for one layer)."""
    if depth == 1:
        return [block]
    return [MLPParams(block.up[layer], block.down[layer]) for layer in range(depth)]
