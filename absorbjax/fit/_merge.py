"""Merge a wide fit's units by line into width-``n`` blocks: step 2 of :func:`absorbjax.fit.expand_search`.

A wide residual-free (or free-``A``) fit ``A₀ x + V_down σ(V_up x)`` of ``m`` units clusters around
the target's units. Units on one line act as one (ReLU: ``σ(c z) = c σ(z)``, ``c > 0``; GELU: equal
up to sign), and a negated unit moves into the linear term (``σ(−z) = σ(z) − z``): the functions
here merge such units, exactly when a cluster's members are parallel, and cut the tree of lines at
several heights into width-``n`` starts for a polish.
"""

from __future__ import annotations

import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.spatial.distance import squareform

from absorbjax.models import MLPParams

ACTIVATIONS = ("relu", "gelu")


def check_activation(activation: str) -> None:
    """``ValueError`` unless ``activation`` is one the merge and the conversion handle (:data:`ACTIVATIONS`)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")


def line_distances(up: np.ndarray, activation: str) -> np.ndarray:
    """Condensed pairwise distances (``scipy.spatial.distance.pdist`` order) between the units
    ``up (m, d)`` as lines: ReLU ``1 − |cos|`` (``σ(c z) = c σ(z)``, ``c > 0``; sign via ``A``),
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
    """One unit per cluster: ``V_down σ(V_up x) + A₀ x ≈ A x + D σ(U x)``, every cluster kept.

    Cluster ``c`` is represented by ``r``, the top eigenvector of ``Σ_j s_j û_j û_jᵀ`` over its
    members (``û_j`` unit directions, ``s_j = ‖u_j‖ ‖V_down[:,j]‖``); member ``u_j ≈ ε_j c_j r``
    (``ε_j = ±1``, ``c_j = |u_j·r|``; ``r`` oriented along the largest member) adds ``c_j V_down[:,j]`` to the cluster's column (ReLU, with
    ``U_c = r``) or ``V_down[:,j]`` (GELU, ``U_c = c̄ r`` with ``c̄`` the members' mean scale), and
    when ``ε_j = −1`` the linear term ``−V_down[:,j] u_jᵀ``-like part (``σ(−z) = σ(z) − z``).
    Exact when every cluster's members are parallel (ReLU) or equal up to sign (GELU).

    Returns:
      ``(MLPParams(U (k, d), D (d, k)), A (d, d))`` as float64 NumPy arrays, ``k`` clusters
      (in order of first appearance of the labels).
    """
    check_activation(activation)
    up, down = (np.asarray(a, np.float64) for a in block)
    d = up.shape[1]
    A = np.zeros((d, d)) if linear is None else np.array(linear, np.float64)
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
            A -= np.outer(down[:, neg] @ np.abs(up[neg] @ r), r)
        else:
            u = r * np.average(np.abs(proj), weights=np.maximum(size[mem], 1e-300))
            col = down[:, mem].sum(1)
            A -= np.outer(down[:, neg].sum(1), u)
        units.append(u)
        cols.append(col)
    return MLPParams(np.array(units).reshape(-1, d), np.array(cols).reshape(-1, d).T), A


def largest_units(block: MLPParams, A: np.ndarray, n: int):
    """The ``n`` units with the largest ``‖U_i‖ ‖D_i‖`` (the rest dropped), with ``A``."""
    keep = np.argsort(-(np.linalg.norm(block.up, axis=1) * np.linalg.norm(block.down, axis=0)), kind="stable")[:n]
    return MLPParams(block.up[keep], block.down[:, keep]), A


def merge_units(block: MLPParams, activation: str, n: int, *, angle_tol: float = 1e-3, linear=None):
    """Merge the units of one wide block ``A₀ x + V_down σ(V_up x)`` (``m`` units) whose lines lie
    within ``angle_tol`` (:func:`line_distances`, single linkage) and keep the ``n`` largest:
    ``≈ A x + D σ(U x)`` (:func:`merge_clusters`).

    Examples:
      A unit and its negation merge into one unit plus a linear term (``σ(−z) = σ(z) − z``):

      >>> import numpy as np
      >>> from absorbjax import fit, models
      >>> V = models.MLPParams(np.array([[1.0, 0.0], [-2.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 0, 0], [0, 1, 3]]))
      >>> merged, A = fit._merge.merge_units(V, "relu", 2)
      >>> (merged.up + 0.0).tolist(), (A + 0.0).tolist()
      ([[0.0, 1.0], [-1.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]])
      >>> x = np.array([0.7, -0.3])
      >>> bool(np.allclose(A @ x + models.mlp(merged, x, "relu"), models.mlp(V, x, "relu")))
      True
    """
    check_activation(activation)
    up = np.asarray(block.up, np.float64)
    labels = (
        np.arange(len(up))
        if len(up) < 2
        else fcluster(linkage(line_distances(up, activation), "single"), angle_tol, "distance")
    )
    return largest_units(*merge_clusters(block, labels, activation, linear), n)


def proposals(block: MLPParams, linear, activation: str, n: int, *, count: int = 8) -> list:
    """Up to ``count`` width-``n`` starts ``(MLPParams, A)`` from one wide fit: the tree of its
    units' lines (:func:`line_distances`, average linkage) cut into ``k`` clusters for ``count``
    values of ``k`` from ``n`` to ``min(m, 2n)``, each merged (:func:`merge_clusters`) and cut
    to its ``n`` largest units (``m ≤ n``: the block itself, padded with zero units)."""
    check_activation(activation)
    up, down = (np.asarray(a, np.float64) for a in block)
    m = len(up)
    if m <= n:  # zero units pad it to width n
        return [
            (
                MLPParams(np.r_[up, np.zeros((n - m, up.shape[1]))], np.c_[down, np.zeros((len(down), n - m))]),
                np.asarray(linear, np.float64),
            )
        ]
    tree = linkage(line_distances(up, activation), "average")
    ks = np.unique(np.linspace(n, min(m, 2 * n), count).round().astype(int))
    out = []
    for k in ks:
        merged, A = merge_clusters(block, fcluster(tree, k, "maxclust"), activation, linear)
        if merged.up.shape[0] >= n:
            out.append(largest_units(merged, A, n))
    return out


def stack_proposals(layers: list, activation: str, n: int, count: int) -> list:
    """``count`` width-``n`` starts ``(MLPParams, A)`` for one wide fit given as ``[(MLPParams, A_l)]``;
    for a stack, proposal ``i`` takes each layer's ``i``-th (:func:`proposals` per layer, each padded
    by repeating its last)."""
    per_layer = []
    for b, A in layers:
        got = proposals(b, A, activation, n, count=count)
        per_layer.append((got + got[-1:] * count)[:count])
    if len(layers) == 1:
        return per_layer[0]
    return [
        (
            MLPParams(*(np.stack([layer[i][0][f] for layer in per_layer]) for f in range(2))),
            np.stack([layer[i][1] for layer in per_layer]),
        )
        for i in range(count)
    ]
