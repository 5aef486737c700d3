"""Expand, merge, decide, polish: a search for absorbers of one-layer ReLU/GELU blocks at any ``n/d``.

A residual-free student of exactly the teacher's width rarely recovers it from random init; a wider
one does, and its units cluster around the teacher's (Expand-and-Cluster, arXiv 2304.12794). A
residual-free student must also orient every unit as the absorber does (``V_up[i] = −W_up[i]`` for
``i ∈ S``), a discrete choice that gradient steps cannot make; with a free linear term ``L`` every
orientation fits, since ``σ(z) − σ(−z) = z`` moves a negated unit's ``V_down[:,i] V_up[i,:]``
into ``L``. :func:`expand_search` runs the default :func:`absorbjax.fit.search`; on the ReLU draws
it leaves unsolved it first fits ``L x + V_down σ(V_up x)`` (per layer) at width ``n`` with the first
layer's units held on the target's kink lines, read from its values
(:mod:`absorbjax.fit.lines`), and decides the condition on that fit as in step 4 (for a depth-2
stack where that fails, again after refitting from the second layer's lines read through the fit's
first layer or through the first layer read from the second layer's kinks, and then on a fit whose
first layer is residual-free, ``L₁ = 0``); on the draws still unsolved,

1. searches ``L x + V_down σ(V_up x)`` at width ``m = factor · n`` from random init
   (``search(..., linear=True)``; the wide block knows nothing of the target but its values);
2. merges the wide units by line (ReLU: ``u`` and ``c u``, ``c ≠ 0``; GELU: ``±u``) into ``n`` units
   several ways (:func:`proposals`: the ``n`` largest clusters of the line tree cut at several
   heights), the negated members' terms going into ``L``;
3. polishes every proposal as a width-``n`` block with a free ``L`` (Levenberg–Marquardt, 400
   iterations; this step and step 1 on ``dense`` times more training inputs);
4. decides ``V_down[:,S] V_up[S,:] = −L`` on the best polished fit with
   :func:`absorbjax.condition.find_absorbing_set` (Thm 8/10 with Lemma 4's skip ``L``); an ``S``
   gives a residual-free block of width ``n`` (:func:`absorber_from_units`); in a ReLU stack a
   later layer where no ``S`` exists is decided on the image of the layers before it, the only
   inputs it ever sees (:func:`absorber_on_inputs`);
5. polishes that block against the target on the first search's training inputs.

A draw counts as solved only by the final block's own training and held-out loss (the first
search's inputs); steps 2–4 only propose a start, with loose tolerances. A failed expansion proves
nothing, as a failed search does.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.optimize import linprog
from scipy.spatial.distance import squareform

from absorbjax import condition
from absorbjax.fit import lines as _lines
from absorbjax.fit.config import Inputs, Linear, Polish
from absorbjax.fit.driver import search
from absorbjax.fit.result import SearchResult
from absorbjax.models import MLPParams, skip_mlp, stack

ACTIVATIONS = ("relu", "gelu")
LINES_SEED = 2**31 - 1  # expand_search's line step: fold_in(key, LINES_SEED)


def _check(activation: str) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def line_distances(up: np.ndarray, activation: str) -> np.ndarray:
    """Condensed pairwise distances (``scipy.spatial.distance.pdist`` order) between the units
    ``up (m, d)`` as lines: ReLU ``1 − |cos|`` (``σ(c z) = c σ(z)``, ``c > 0``; sign via ``L``),
    GELU ``min(‖u − v‖, ‖u + v‖) / max(‖u‖, ‖v‖)`` (equal up to sign only)."""
    up = np.asarray(up, np.float64)
    norms = np.maximum(np.linalg.norm(up, axis=1), 1e-300)
    gram = up @ up.T
    if activation == "relu":
        dist = 1.0 - np.abs(gram) / np.outer(norms, norms)
    else:  # ‖u ∓ v‖² = ‖u‖² + ‖v‖² ∓ 2 u·v
        sq = norms[:, None] ** 2 + norms[None, :] ** 2 - 2 * np.abs(gram)
        dist = np.sqrt(np.maximum(sq, 0.0)) / np.maximum.outer(norms, norms)
    np.fill_diagonal(dist, 0.0)
    return squareform(np.maximum(dist, 0.0), checks=False)


def merge_clusters(block: MLPParams, labels: np.ndarray, activation: str, linear=None):
    """One unit per cluster: ``V_down σ(V_up x) + L₀ x ≈ L x + D σ(U x)``, every cluster kept.

    Cluster ``c`` is represented by ``r``, the top eigenvector of ``Σ_j s_j û_j û_jᵀ`` over its
    members (``û_j`` unit directions, ``s_j = ‖u_j‖ ‖V_down[:,j]‖``); member ``u_j ≈ ε_j c_j r``
    (``ε_j = ±1``, ``c_j = |u_j·r|``; ``r`` oriented along the largest member) adds ``c_j V_down[:,j]`` to the cluster's column (ReLU, with
    ``U_c = r``) or ``V_down[:,j]`` (GELU, ``U_c = c̄ r`` with ``c̄`` the members' mean scale), and
    when ``ε_j = −1`` the linear term ``−V_down[:,j] u_jᵀ``-like part (``σ(−z) = σ(z) − z``).
    Exact when every cluster's members are parallel (ReLU) or equal up to sign (GELU).

    Returns:
      ``(MLPParams(U (k, d), D (d, k)), L (d, d))`` as float64 NumPy arrays, ``k`` clusters
      (in order of first appearance of the labels).
    """
    _check(activation)
    up, down = (np.asarray(a, np.float64) for a in block)
    d = up.shape[1]
    L = np.zeros((d, d)) if linear is None else np.array(linear, np.float64)
    norms = np.linalg.norm(up, axis=1)
    size = norms * np.linalg.norm(down, axis=0)
    dirs = up / np.maximum(norms, 1e-300)[:, None]
    units, cols = [], []
    for c in dict.fromkeys(np.asarray(labels).tolist()):
        mem = np.flatnonzero(labels == c)
        M = (dirs[mem].T * np.maximum(size[mem], 1e-300)) @ dirs[mem]
        r = np.linalg.eigh(M)[1][:, -1]
        r = r if up[mem[np.argmax(size[mem])]] @ r >= 0 else -r  # the largest member keeps its sign
        proj = up[mem] @ r
        neg = mem[proj < 0]
        if activation == "relu":
            scale = np.abs(proj)
            u, col = r, down[:, mem] @ scale
            L -= np.outer(down[:, neg] @ np.abs(up[neg] @ r), r)
        else:
            u = r * np.average(np.abs(proj), weights=np.maximum(size[mem], 1e-300))
            col = down[:, mem].sum(1)
            L -= np.outer(down[:, neg].sum(1), u)
        units.append(u)
        cols.append(col)
    return MLPParams(np.array(units).reshape(-1, d), np.array(cols).reshape(-1, d).T), L


def _largest(block: MLPParams, L: np.ndarray, n: int):
    """The ``n`` units with the largest ``‖U_i‖ ‖D_i‖`` (the rest dropped), with ``L``."""
    keep = np.argsort(-(np.linalg.norm(block.up, axis=1) * np.linalg.norm(block.down, axis=0)), kind="stable")[:n]
    return MLPParams(block.up[keep], block.down[:, keep]), L


def merge_units(block: MLPParams, activation: str, n: int, *, angle_tol: float = 1e-3, linear=None):
    """Merge the units of one wide block ``L₀ x + V_down σ(V_up x)`` (``m`` units) whose lines lie
    within ``angle_tol`` (:func:`line_distances`, single linkage) and keep the ``n`` largest:
    ``≈ L x + D σ(U x)`` (:func:`merge_clusters`).

    Examples:
      A unit and its negation merge into one unit plus a linear term (``σ(−z) = σ(z) − z``):

      >>> import numpy as np
      >>> from absorbjax import fit, models
      >>> V = models.MLPParams(np.array([[1.0, 0.0], [-2.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 0, 0], [0, 1, 3]]))
      >>> merged, L = fit.expand.merge_units(V, "relu", 2)
      >>> (merged.up + 0.0).tolist(), (L + 0.0).tolist()
      ([[0.0, 1.0], [-1.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]])
      >>> x = np.array([0.7, -0.3])
      >>> bool(np.allclose(L @ x + models.mlp(merged, x, "relu"), models.mlp(V, x, "relu")))
      True
    """
    _check(activation)
    up = np.asarray(block.up, np.float64)
    labels = np.arange(len(up)) if len(up) < 2 else fcluster(
        linkage(line_distances(up, activation), "single"), angle_tol, "distance")
    return _largest(*merge_clusters(block, labels, activation, linear), n)


def proposals(block: MLPParams, linear, activation: str, n: int, *, count: int = 8) -> list:
    """Up to ``count`` width-``n`` starts ``(MLPParams, L)`` from one wide fit: the tree of its
    units' lines (:func:`line_distances`, average linkage) cut into ``k`` clusters for ``count``
    values of ``k`` from ``n`` to ``min(m, 2n)``, each merged (:func:`merge_clusters`) and cut
    to its ``n`` largest units (``m ≤ n``: the block itself, padded with zero units)."""
    _check(activation)
    up, down = (np.asarray(a, np.float64) for a in block)
    m = len(up)
    if m <= n:  # zero units pad it to width n
        return [(MLPParams(np.r_[up, np.zeros((n - m, up.shape[1]))], np.c_[down, np.zeros((len(down), n - m))]),
                 np.asarray(linear, np.float64))]
    tree = linkage(line_distances(up, activation), "average")
    ks = np.unique(np.linspace(n, min(m, 2 * n), count).round().astype(int))
    out = []
    for k in ks:
        merged, L = merge_clusters(block, fcluster(tree, k, "maxclust"), activation, linear)
        if merged.up.shape[0] >= n:
            out.append(_largest(merged, L, n))
    return out


def absorber_from_units(block: MLPParams, activation: str, *, linear=None, tol: float = 1e-6,
                        time_limit: float = 10.0) -> MLPParams | None:
    """The residual-free block that a fit ``L x + D σ(U x)`` (width ``n``) points to, or ``None``.

    Decides ``D[:,S] U[S,:] = −L`` with :func:`absorbjax.condition.find_absorbing_set` (rule (★)
    with ``rtol = tol``, a proposing tolerance for a fit's error) and returns
    :func:`absorbjax.condition.absorber` (rows in ``S`` negated). ``L`` singular (``L = 0``: the fit
    is residual-free already) is decided on the same function with every unit negated, skip
    ``L + D U``. ``None`` when neither gives an ``S``.
    """
    _check(activation)
    U, D = (np.asarray(a, np.float64) for a in block)
    L = np.zeros((U.shape[1],) * 2) if linear is None else np.asarray(linear, np.float64)
    for units, skip in ((MLPParams(U, D), L), (MLPParams(-U, D), L + D @ U)):
        try:
            cert = condition.find_absorbing_set(units, skip=skip, rtol=tol, activation=activation,
                                                time_limit=time_limit)
        except ValueError:  # singular skip or degenerate units
            continue
        if cert.status == "absorbable":
            return condition.absorber(units, cert.S, skip=skip, check=False)
    return None


def fold_linear_units(block: MLPParams, inputs, *, linear=None, tol: float = 1e-6):
    """A ReLU block ``L h + D σ(U h)`` without the units that are linear on the cone of ``inputs``.

    A unit whose kink ``U_i h = 0`` does not cut ``K = cone(inputs)`` is always on there (its
    ``D_i U_iᵀ`` moves into ``L``, ``σ(z) = z``) or always off (dropped); a unit whose
    ``‖U_i‖ ‖D_i‖`` is below ``tol`` times the largest is dropped too. Rows of ``inputs`` shorter
    than ``tol`` times the longest are the apex (rounding noise where an image is 0) and are ignored.

    Args:
      block: ``(U (n, d), D (d, n))``.
      inputs: ``h (K, d)``.
      linear: ``L (d, d)`` (``None``: 0).
      tol: relative tolerance of "cuts ``K``" (``U_i h / (‖U_i‖ ‖h‖)`` beyond ``±tol``).

    Returns:
      ``(MLPParams(U (k, d), D (d, k)), M (d, d))``: the ``k`` kinked units, in order, and
      ``M = L + Σ_{on} D_i U_iᵀ``; ``M h + D_k σ(U_k h) = L h + D σ(U h)`` on ``K`` (to ``tol``).

    Examples:
      >>> import numpy as np
      >>> from absorbjax import fit, models
      >>> W = models.MLPParams(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]), np.eye(2, 3))
      >>> h = np.random.default_rng(0).uniform(-1.0, 1.0, (64, 2)) * [1.0, 0.0] + [0.0, 1.0]  # h₂ = 1
      >>> kinked, M = fit.expand.fold_linear_units(W, h)
      >>> kinked.up.tolist(), M.tolist()  # unit 1 is always on, unit 2 always off
      ([[1.0, 0.0]], [[0.0, 0.0], [0.0, 1.0]])
    """
    U, D = (np.array(a, np.float64) for a in block)
    d = U.shape[1]
    L = np.zeros((d, d)) if linear is None else np.asarray(linear, np.float64)
    h = _directions(inputs, d, tol)
    z = h @ (U / np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-300)).T
    size = np.linalg.norm(U, axis=1) * np.linalg.norm(D, axis=0)
    alive = size > tol * size.max(initial=0.0)  # a unit with ‖U_i‖ ‖D_i‖ ≈ 0 does nothing anywhere
    kinked = alive & (z.max(0, initial=0.0) > tol) & (z.min(0, initial=0.0) < -tol)
    on = alive & ~kinked & (z.max(0, initial=0.0) > tol)
    return MLPParams(U[kinked], D[:, kinked]), L + D[:, on] @ U[on]


def _directions(inputs, d: int, tol: float) -> np.ndarray:
    """The unit directions of the rows of ``inputs (K, d)`` longer than ``tol`` times the longest."""
    h = np.asarray(inputs, np.float64).reshape(-1, d)
    norms = np.linalg.norm(h, axis=1)
    h = h[norms > tol * norms.max(initial=0.0)]  # rounding noise where the image is 0 has no direction
    return h / np.linalg.norm(h, axis=1, keepdims=True)


def absorber_on_inputs(block: MLPParams, inputs, *, linear=None, tol: float = 1e-6,
                       max_flips: int = 4096) -> MLPParams | None:
    """The residual-free ReLU block that equals ``L h + D σ(U h)`` on the cone of ``inputs``, or ``None``.

    A layer after the first sees only the image ``K`` of the layers before it, where the condition
    on all of ``ℝ^d`` asks too much. On ``K`` a unit whose kink ``U_i h = 0`` does not cut ``K`` is
    linear (always on, or always off); only the ``k`` kinked lines must be kept (kinked units on
    one line merged into one, :func:`merge_clusters`), each in either orientation (negating unit
    ``i`` adds ``D_i U_iᵀ`` to the linear part: ``σ(−z) = σ(z) − z``). With
    ``M = L + Σ_{on} D_i U_iᵀ`` and a flip set ``F``, the ``f = n − k`` other units reproduce
    ``M_F = M + D[:,F] U[F,:]`` on ``K`` as always-on units ``a_j σ(b_j · h)`` exactly when
    ``rank M_F ≤ f`` and the row space of ``M_F`` meets the interior of the dual cone
    ``{b : b · h > 0 on K}`` (found by a linear program, ``scipy.optimize.linprog``). When the
    inputs reach every direction, every unit is kinked and this is the condition
    ``D[:,S] U[S,:] = −L`` (:func:`absorber_from_units` decides that case for any ``n``).

    Args:
      block: ``(U (n, d), D (d, n))``.
      inputs: ``h (K, d)``, the inputs that reach the layer; ``K = cone(h)``. Rows shorter than
        ``tol`` times the longest are the apex (rounding noise where the image is 0) and are dropped.
      linear: ``L (d, d)`` (``None``: 0).
      tol: relative tolerance of the ranks and of "cuts ``K``" (a proposing tolerance for a fit).
      max_flips: the most flip sets to try (smallest first); with ``k`` kinked lines and
        ``2^k > max_flips`` the answer is ``None``.

    Returns:
      ``MLPParams`` ``(V_up (n, d), V_down (d, n))`` with ``V_down σ(V_up h) = L h + D σ(U h)`` on
      ``cone(inputs)``, or ``None``. Exact on the cone of the given inputs only: a fit judges it
      on fresh inputs.

    Examples:
      Inputs confined to the first quadrant, where the unit ``σ(h₁ + h₂)`` is always on: with
      ``L = [[0, 0], [1, 1]]`` the block is ``h ↦ (h₁ + h₂) (1, 1)`` there, which one residual-free
      unit reproduces, though no residual-free block of width 1 matches it on the whole plane:

      >>> import numpy as np
      >>> from absorbjax import fit, models
      >>> W = models.MLPParams(np.array([[1.0, 1.0]]), np.array([[1.0], [0.0]]))
      >>> L = np.array([[0.0, 0.0], [1.0, 1.0]])
      >>> fit.expand.absorber_from_units(W, "relu", linear=L) is None
      True
      >>> h = np.random.default_rng(0).uniform(0.1, 1.0, (64, 2))
      >>> V = fit.expand.absorber_on_inputs(W, h, linear=L)
      >>> x = np.array([0.3, 0.8])
      >>> bool(np.allclose(models.mlp(V, x, "relu"), L @ x + models.mlp(W, x, "relu")))
      True
      >>> fit.expand.absorber_on_inputs(W, h, linear=np.eye(2)) is None  # M = I + e₁(1, 1): rank 2 > 1 unit
      True
    """
    U, D = (np.array(a, np.float64) for a in block)
    d, n = U.shape[1], U.shape[0]
    h = _directions(inputs, d, tol)
    if not len(h):
        return None
    kinked, M = fold_linear_units(block, h, linear=linear, tol=tol)
    # kinked units on one line act as one unit (σ(c z) = c σ(z), σ(−z) = σ(z) − z): merge them
    labels = np.arange(len(kinked.up))
    if len(labels) > 1:
        labels = fcluster(linkage(line_distances(kinked.up, "relu"), "single"), tol, "distance")
    (Uk, Dk), M = merge_clusters(kinked, labels, "relu", M)
    k = len(Uk)
    if 2 ** k > max_flips:
        return None
    L = np.zeros((d, d)) if linear is None else np.asarray(linear, np.float64)
    scale = np.linalg.norm(L) + np.sum(np.linalg.norm(U, axis=1) * np.linalg.norm(D, axis=0))
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
        up[k:k + r], down[:, k:k + r] = rows, MF @ np.linalg.pinv(rows)
        return MLPParams(up, down)
    return None


def _interior_rows(R: np.ndarray, h: np.ndarray, margin: float = 1e-6) -> np.ndarray | None:
    """``r`` rows spanning the row space of ``R (r, d)`` (orthonormal) with ``b · h ≥ t/2 > 0`` for every
    unit input ``h``; ``None`` when the best margin ``t`` (a linear program) is below ``margin``."""
    r = R.shape[0]
    a = h @ R.T  # (K, r); maximise t subject to a c ≥ t, |c|∞ ≤ 1
    lp = linprog(np.r_[np.zeros(r), -1.0], A_ub=np.c_[-a, np.ones(len(h))], b_ub=np.zeros(len(h)),
                 bounds=[(-1, 1)] * r + [(None, None)], method="highs")
    if not lp.success or -lp.fun < margin:
        return None
    c, t = lp.x[:r], -lp.fun
    b = c @ R
    others = [k for k in range(r) if k != int(np.argmax(np.abs(c)))]  # b ± (t/2) R_k stays interior
    return np.array([b] + [b + t / 2 * R[k] for k in others])


def expand_search(
    target: MLPParams,
    activation: str,
    *,
    key: jax.Array,
    factor: int = 4,
    restarts: int = 32,
    steps: int = 200,
    wide_restarts: int | None = None,
    wide_steps: int | None = None,
    wide_polish: Polish = Polish(steps=100, screen=20, top=4),
    proposals_per_draw: int = 8,
    dense: int = 4,
    rounds: int = 3,
    lines: bool = True,
    lines_restarts: int = 256,
    lines_rounds: int = 2,
    lines_segments: tuple[int, int] = (128, 2048),
    merge_tol: float = 1e-6,
    tol: float | None = None,
    inputs: Inputs = Inputs(),
    polish: bool | Polish = True,
    progress: bool = False,
    **search_kwargs,
) -> SearchResult:
    """:func:`absorbjax.fit.search`, then expand–merge–decide–polish on the draws it leaves unsolved.

    For a stack (``depth=L`` in ``search_kwargs``) every layer gets its own ``L_l``, its units are
    merged layer by layer and the condition is decided per layer (it is invariant under the
    junctions' ``GL(d)`` gauge, so the fit may land in any gauge). Layer 1 sees every direction,
    so it must absorb on all of ``ℝ^d``; a later ReLU layer only on the image of the layers
    before it (:func:`absorber_on_inputs`). So the search finds blockwise absorbers, and ReLU
    stacks whose later layers absorb on that image only; no others.

    Args:
      target: residual blocks ``W`` (``MLPParams``, optional leading draws axis; with a layer
        axis for ``depth > 1``).
      activation: ``"relu"`` or ``"gelu"``.
      key: base PRNG key; the first search and the final polish use it as :func:`search` does
        (the same training and held-out inputs per draw), the wide search ``fold_in(key, 1)``,
        the width-``n`` polish ``fold_in(key, 2)`` (in the first round; see ``rounds``).
      factor: the wide search's width ``m = factor · n``.
      restarts, steps, polish, tol, inputs, search_kwargs: the first search's settings (as
        :func:`search`).
      wide_restarts, wide_steps, wide_polish: the wide search's (default: ``restarts``; ``steps``
        for one layer, ``5 · steps`` for a stack; a short polish: the wide fit only proposes).
      proposals_per_draw: width-``n`` starts merged from the wide fit (:func:`proposals`).
      dense: the wide search and the width-``n`` polish use ``dense`` times the first search's
        training inputs (a ReLU kink is placed only as finely as the inputs' directions resolve it).
      merge_tol: ``rtol`` of the condition on the polished width-``n`` fit.
      rounds: steps 1–5 are repeated on the draws still unsolved, up to ``rounds`` times (round
        ``r`` seeds the wide search ``fold_in(key, 1 + 2r)``, the width-``n`` polish
        ``fold_in(key, 2 + 2r)``).
      lines: ReLU without ``skip`` only: before the rounds, fit each unsolved draw at width ``n``
        with free ``L_l`` and ``U₁``'s rows held on the target's first-layer kink lines
        (:func:`absorbjax.fit.lines.first_layer_lines`, :func:`absorbjax.fit.lines.fit_with_lines`
        with ``lines_restarts`` restarts on ``dense`` times the first search's inputs, one for a
        single layer with every line found; key ``fold_in(key, LINES_SEED)``), decide the
        condition on the best restarts (step 4) and polish (step 5). At depth 2, a draw where
        no restart converts is refitted from each best restart's layer 1 with the second
        layer's lines read through it (:func:`absorbjax.fit.lines.second_layer_lines`; one of
        them through the layer 1 that :func:`absorbjax.fit.lines.first_layer_from_kinks` reads
        from the second layer's kinks), and failing that fitted with layer 1 residual-free
        (``L₁ = 0``). This step runs ``lines_rounds`` times on the draws still unsolved, with
        fresh restarts and inputs (round ``i ≥ 1``: key ``fold_in(fold_in(key, LINES_SEED), i)``).
      lines_segments: the random segments the kinks are read on (:func:`absorbjax.fit.lines.kinks`),
        for one layer and for a stack: a second-layer unit that bends only in a thin cone shows
        on few of them.

    Returns:
      A :class:`SearchResult` over all draws: where the final block beats the first search, its
      candidate, losses and profile replace the first search's; ``losses`` and ``failed`` gain one
      column (the final block; ``inf`` where none was proposed), and ``config["expand"]`` records
      the settings and how many draws were unsolved, proposed and improved (``"lines"``: by
      the line step).

    Examples:
      Absorbable ReLU blocks at ``n = 4d``, where the default search alone mostly fails:

      >>> import jax
      >>> from absorbjax import fit, models
      >>> with jax.enable_x64(True):
      ...     W, _ = models.absorbable_sample(jax.random.key(0), 2, 2, 8, "relu")
      ...     r = fit.expand.expand_search(W, "relu", key=jax.random.key(1), restarts=8, rounds=1)
      >>> e = r.config["expand"]
      >>> e["unsolved"], e["improved"], r.solved().tolist()
      (2, 2, [True, True])
    """
    _check(activation)
    common = dict(tol=tol, progress=progress, **search_kwargs)
    first = search(target, activation, key=key, restarts=restarts, steps=steps, polish=polish, inputs=inputs,
                   **common)
    single = first.config.get("single", False)
    target = jax.tree.map(lambda a: jnp.asarray(a)[None] if single else jnp.asarray(a), target)
    draws, n, depth = first.best_loss.shape[0], first.config["n"], first.config["depth"]
    if wide_steps is None:
        wide_steps = steps if depth == 1 else 5 * steps
    record = {"factor": factor, "wide_restarts": wide_restarts or restarts, "wide_steps": wide_steps,
              "wide_polish": wide_polish._asdict(), "rounds": rounds,
              "proposals_per_draw": proposals_per_draw, "dense": dense, "merge_tol": merge_tol,
              "unsolved": int((~first.solved()).sum()), "proposed": 0, "improved": 0}
    columns = np.full((draws, 1), np.inf)
    result = first
    use_lines = lines and activation == "relu" and search_kwargs.get("skip") is None
    if use_lines:
        record["lines"] = {"restarts": lines_restarts, "rounds": lines_rounds, "segments": list(lines_segments),
                           "proposed": 0, "improved": 0}
    lines_key = lambda i: jax.random.fold_in(key, LINES_SEED) if i == 0 else jax.random.fold_in(
        jax.random.fold_in(key, LINES_SEED), i)
    for r in range(-lines_rounds if use_lines else 0, rounds):  # r < 0: the first layer's kink lines
        todo = np.flatnonzero(~result.solved())
        if not todo.size:
            break
        sub = jax.tree.map(lambda a: a[todo], target)
        if r < 0:
            absorbers = _line_proposals(sub, lines_key(r + lines_rounds), n, depth,
                                        num=dense * first.config["num"], merge_tol=merge_tol, inputs=inputs,
                                        restarts=lines_restarts, segments=lines_segments[depth > 1])
        else:
            absorbers = _propose(sub, activation, jax.random.fold_in(key, 1 + 2 * r),
                                 jax.random.fold_in(key, 2 + 2 * r), n, depth, first.best_params.down.dtype,
                                 width=factor * n, restarts=record["wide_restarts"], steps=record["wide_steps"],
                                 count=proposals_per_draw, num=dense * first.config["num"], merge_tol=merge_tol,
                                 polish=wide_polish if polish is not False else False, inputs=inputs, common=common)
        if not absorbers:
            continue
        record["proposed"] += len(absorbers)
        idx = todo[sorted(absorbers)]
        init = MLPParams(*(jnp.asarray(np.stack([absorbers[j][f] for j in sorted(absorbers)])[:, None],
                                       first.best_params.down.dtype) for f in range(2)))
        pol = Polish(steps=100, screen=100, top=1) if polish is not False else False
        final = search(jax.tree.map(lambda a: a[idx], target), activation, key=key, restarts=1, steps=0,
                       init=init, polish=pol, inputs=inputs, **common)
        columns[idx, 0] = np.where(final.failed[:, 0], np.inf, final.losses[:, 0])
        better = final.best_loss < result.best_loss[idx]
        record["improved"] += int(better.sum())
        if r < 0:
            record["lines"]["proposed"] += len(absorbers)
            record["lines"]["improved"] += int(better.sum())
        pick = lambda a, b: _splice(a, b, idx, better)
        result = result._replace(
            best_loss=pick(result.best_loss, final.best_loss),
            best_params=jax.tree.map(lambda a, b: jnp.asarray(pick(np.asarray(a), np.asarray(b))),
                                     result.best_params, final.best_params),
            profile=pick(result.profile, final.profile),
            weight_norms=pick(result.weight_norms, final.weight_norms),
            holdout_loss=pick(result.holdout_loss, final.holdout_loss),
        )
    return result._replace(
        losses=np.concatenate([first.losses, columns], 1),
        failed=np.concatenate([first.failed, np.zeros((draws, 1), bool)], 1),
        config={**first.config, "expand": record},
    )


def _propose(sub: MLPParams, activation: str, wide_key, narrow_key, n: int, depth: int, dtype, *, width: int,
             restarts: int, steps: int, count: int, num: int, merge_tol: float, polish, inputs: Inputs,
             common: dict) -> dict:
    """Steps 1–4 on the draws ``sub``: ``{j: residual-free width-n block}`` for the draws ``j`` of
    ``sub`` whose polished width-``n`` fit satisfies the condition (every layer)."""
    wide = search(sub, activation, key=wide_key, width=width, linear=True, restarts=restarts, steps=steps,
                  polish=polish, inputs=inputs._replace(num=num), **common)
    draws = wide.best_loss.shape[0]
    inputs_seen = _inputs_seen(narrow_key, num, sub.up.shape[-1], depth, activation)
    starts = []
    for j in range(draws):
        layers = list(zip(*_unstack(wide.best_params, wide.best_linear, j, depth)))
        if inputs_seen is not None:  # a later layer's units that are linear on its inputs go into L_l
            layers = _fold_stack(layers, inputs_seen, merge_tol)
        starts.append(_stack_proposals(layers, activation, n, count))
    init = Linear(
        MLPParams(*(jnp.asarray(np.stack([[b[f] for b, _ in s] for s in starts]), dtype) for f in range(2))),
        jnp.asarray(np.stack([[L for _, L in s] for s in starts]), dtype),
    )
    narrow = search(sub, activation, key=narrow_key, linear=True, init=init, restarts=count, steps=0,
                    inputs=inputs._replace(num=num), polish=Polish(steps=400, screen=400, top=count), **common)
    return _decided(narrow.best_params, narrow.best_linear, depth, activation, merge_tol, inputs_seen)


def _inputs_seen(key, num: int, d: int, depth: int, activation: str) -> np.ndarray | None:
    """The inputs ``(num, d)`` whose image a later ReLU layer is decided on (``None`` for one layer
    or GELU): Gaussian directions, since ReLU stacks are positively homogeneous (radii do not matter)."""
    if depth == 1 or activation != "relu":
        return None
    return np.asarray(jax.random.normal(jax.random.fold_in(key, 1), (num, d)))


def _line_proposals(sub: MLPParams, key, n: int, depth: int, *, num: int, merge_tol: float, inputs: Inputs,
                    restarts: int, segments: int) -> dict:
    """``{j: residual-free width-n block}`` for the ReLU draws ``j`` of ``sub`` with a free-``L`` fit
    with ``U₁`` on the target's first-layer kink lines (:mod:`absorbjax.fit.lines`) that satisfies
    the condition (every layer): of the fit's best restarts, the best one that does; at depth 2,
    failing that, the refit from :func:`_second_layer_start` (on each best restart's layer 1, the
    first start on :func:`absorbjax.fit.lines.first_layer_from_kinks` where every line is found
    and it pins one), and failing that a fit with layer 1 residual-free (``L₁ = 0``, each
    restart its own orientation of the lines). Key
    ``fold_in(key, 0)``: the lines' segments (``fold_in(·, j)`` per draw), ``fold_in(key, 1)``: the
    fit, ``fold_in(key, 4)`` and ``fold_in(key, 5)``: the second layer's least squares and refit,
    ``fold_in(key, 6)``: the residual-free-first fit, ``key``: the inputs a later layer is decided on."""
    d = sub.up.shape[-1]
    draws = sub.up.shape[0]
    found = np.zeros((draws, n, d))
    mask = np.zeros((draws, n), bool)
    kinks = []
    for j in range(draws):
        W = jax.tree.map(lambda a: a[j], sub)
        f = (lambda x: skip_mlp(W, x, "relu")) if depth == 1 else (lambda x: stack(W, x, "relu"))
        kinks.append(_lines.kinks(f, d, jax.random.fold_in(jax.random.fold_in(key, 0), j), segments=segments))
        got = _lines.lines_of(kinks[-1])[:n]
        found[j, :len(got)], mask[j, :len(got)] = got, True
    if depth == 1 and mask.all():  # U held whole: least squares in (D, L), which one start solves
        restarts = 1
    fit = lambda idx, k, **kw: _lines.fit_with_lines(jax.tree.map(lambda a: a[idx], sub), found[idx], mask[idx],
                                                     key=k, depth=depth, inputs=inputs._replace(num=num), **kw)
    fitted, _ = fit(np.arange(draws), jax.random.fold_in(key, 1), restarts=restarts)
    inputs_seen = _inputs_seen(key, num, d, depth, "relu")
    out = _best_converted(fitted, np.arange(draws), {}, depth, merge_tol, inputs_seen)
    left = np.array([j for j in range(draws) if j not in out], int)
    if depth == 2 and left.size:  # layer 2 from its own kinks, seen through the fitted layer 1
        xs = np.asarray(jax.random.normal(jax.random.fold_in(key, 4), (num, d)))
        starts = []
        for j in left:  # least squares on random inputs and on both sides of every kink
            side = 1e-3 * np.linalg.norm(kinks[j].points, axis=1, keepdims=True) * kinks[j].normals
            xj = np.concatenate([xs, kinks[j].points + side, kinks[j].points - side])
            W = jax.tree.map(lambda a: a[j], sub)
            yj = np.asarray(jax.vmap(lambda x: stack(W, x, "relu"))(jnp.asarray(xj)))
            firsts = [jax.tree.map(lambda a: np.array(a[j, t]), fitted) for t in range(fitted.linear.shape[1])]
            exact = _lines.first_layer_from_kinks(kinks[j], found[j]) if mask[j].all() else None
            if exact is not None:  # layer 1 from layer 2's kinks, in place of the last restart's
                first = jax.tree.map(np.copy, firsts[0])
                first.block.up[0], (first.block.down[0], first.linear[0]) = found[j], exact
                firsts = [first] + firsts[:-1]
            starts.append([_second_layer_start(p, kinks[j], found[j, mask[j]], xj, yj) for p in firsts])
        starts = jax.tree.map(lambda *a: np.stack(a), *[jax.tree.map(lambda *b: np.stack(b), *s) for s in starts])
        refit, _ = fit(left, jax.random.fold_in(key, 5), steps=0, starts=starts)
        out = _best_converted(refit, left, out, depth, merge_tol, inputs_seen)
        left = np.array([j for j in left if j not in out], int)
    if depth == 2 and left.size:  # layer 1 residual-free (L₁ = 0), each restart its own orientation
        oriented, _ = fit(left, jax.random.fold_in(key, 6), restarts=restarts, residual_free_first=True)
        out = _best_converted(oriented, left, out, depth, merge_tol, inputs_seen)
    return out


def _best_converted(fitted: Linear, draws: np.ndarray, out: dict, depth: int, tol: float, inputs) -> dict:
    """``out`` with ``{draws[i]: residual-free block}`` added for each row ``i`` of ``fitted``
    (leading ``(rows, restarts)`` axes, best restart first) whose draw is not in it yet: its best
    restart that :func:`_decided` converts."""
    out = dict(out)
    for t in range(fitted.linear.shape[1]):
        rest = np.array([i for i, j in enumerate(draws) if int(j) not in out], int)
        if not rest.size:
            break
        got = _decided(jax.tree.map(lambda a: a[rest, t], fitted.block), fitted.linear[rest, t], depth, "relu", tol,
                       inputs)
        out.update({int(draws[rest[i]]): V for i, V in got.items()})
    return out


def _second_layer_start(fitted: Linear, kinks, lines: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> Linear:
    """A depth-2 fit's layer 1 with layer 2's ``U₂`` on the target's second-layer lines as that
    layer 1 sees them (:func:`absorbjax.fit.lines.second_layer_lines`; the fit's own rows where
    fewer are found) and ``(D₂, L₂)`` by least squares on the target's values ``ys (K, d)`` at
    ``xs (K, d)`` (with inputs beside every kink: a unit that bends only in a thin cone is
    linear on random inputs)."""
    up, down, L = (np.asarray(a, np.float64) for a in (*fitted.block, fitted.linear))
    n = up.shape[1]
    first = MLPParams(up[0], down[0])
    u2, _ = _lines.second_layer_lines(kinks, first, L[0], lines)
    U2 = np.concatenate([u2[:n], up[1][len(u2[:n]):]])
    h = _image(first, L[0], xs, "relu")
    c = np.linalg.lstsq(np.c_[np.maximum(h @ U2.T, 0.0), h], ys, rcond=None)[0]  # y ≈ D₂ σ(U₂ h) + L₂ h
    return Linear(MLPParams(np.stack([up[0], U2]), np.stack([down[0], c[:n].T])), np.stack([L[0], c[n:].T]))


def _decided(params: MLPParams, linear, depth: int, activation: str, tol: float, inputs=None) -> dict:
    """``{j: residual-free width-n block}`` for the draws ``j`` of fitted free-``L`` stacks
    (``params``, ``linear`` with a leading draws axis) whose layers :func:`_residual_free` converts."""
    out = {}
    for j in range(np.shape(linear)[0]):
        V = _residual_free(*_unstack(params, linear, j, depth), activation, tol, inputs)
        if V is not None:
            out[j] = V[0] if depth == 1 else MLPParams(*(np.stack(a) for a in zip(*V)))
    return out


def _residual_free(layers: list[MLPParams], Ls, activation: str, tol: float, inputs=None):
    """One fitted stack's layers made residual-free, or ``None``: each by the condition
    (:func:`absorber_from_units`); with ``inputs`` (ReLU), a layer after the first where that
    fails, on the image of ``inputs (K, d)`` under the fitted layers before it
    (:func:`absorber_on_inputs`)."""
    out, h = [], inputs
    for layer, (block, L) in enumerate(zip(layers, Ls)):
        v = absorber_from_units(block, activation, linear=L, tol=tol)
        if v is None and layer and inputs is not None:
            v = absorber_on_inputs(block, h, linear=L, tol=tol)
        if v is None:
            return None
        out.append(v)
        if inputs is not None:
            h = _image(block, L, h, activation)
    return out


def _fold_stack(layers: list, inputs, tol: float) -> list:
    """``[(MLPParams, L_l)]`` of a ReLU stack, each layer without the units that are linear on the
    image of ``inputs (K, d)`` under the layers before it (:func:`fold_linear_units`)."""
    out, h = [], inputs
    for block, L in layers:
        out.append(fold_linear_units(block, h, linear=L, tol=tol))
        h = _image(block, L, h, "relu")
    return out


def _image(block: MLPParams, L, h: np.ndarray, activation: str) -> np.ndarray:
    """``L h + D σ(U h)`` for every row of ``h (K, d)``."""
    return np.asarray(jax.vmap(lambda x: skip_mlp(block, x, activation, L))(h))


def _unstack(params: MLPParams, linear, j: int, depth: int) -> tuple[list[MLPParams], np.ndarray]:
    """Draw ``j``'s layers and their ``L_l (depth, d, d)`` from a search's ``best_params``, ``best_linear``."""
    Ls = np.asarray(linear[j]).reshape((depth,) + np.shape(linear)[-2:])
    return _layers(jax.tree.map(lambda a: np.asarray(a[j]), params), depth), Ls


def _layers(block: MLPParams, depth: int) -> list[MLPParams]:
    """The ``depth`` layers of one stack (``[block]`` for one layer)."""
    if depth == 1:
        return [block]
    return [MLPParams(block.up[layer], block.down[layer]) for layer in range(depth)]


def _stack_proposals(layers: list, activation: str, n: int, count: int) -> list:
    """``count`` width-``n`` starts ``(MLPParams, L)`` for one wide fit given as ``[(MLPParams, L_l)]``;
    for a stack, proposal ``i`` takes each layer's ``i``-th (:func:`proposals` per layer, each padded
    by repeating its last)."""
    per_layer = []
    for b, L in layers:
        got = proposals(b, L, activation, n, count=count)
        per_layer.append((got + got[-1:] * count)[:count])
    if len(layers) == 1:
        return per_layer[0]
    return [(MLPParams(*(np.stack([layer[i][0][f] for layer in per_layer]) for f in range(2))),
             np.stack([layer[i][1] for layer in per_layer])) for i in range(count)]


def _splice(a: np.ndarray, b: np.ndarray, idx: np.ndarray, use: np.ndarray) -> np.ndarray:
    """``a`` with rows ``idx[use]`` replaced by ``b[use]`` (``b`` has one row per ``idx``)."""
    out = np.array(a, copy=True)
    out[idx[use]] = b[use]
    return out
