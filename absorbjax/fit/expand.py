"""Expand, merge, decide, polish: an opt-in search for absorbers of one-layer ReLU/GELU blocks.

Students trained at exactly the teacher's width rarely recover it, wider ones do, and their units
cluster around the teacher's (Expand-and-Cluster, arXiv 2304.12794). :func:`expand_search` runs
the default search at width ``n``; on the draws it leaves unsolved it

1. searches at width ``m = factor · n`` from random init (the wide block ``g_V`` knows nothing of
   the target's weights, only its values on the training inputs);
2. merges the wide block's units by direction (:func:`merge_units`): for ``σ`` with
   ``σ(−z) = σ(z) − z`` a unit on ``−u`` is a unit on ``u`` plus a linear term, and for ReLU
   ``σ(c z) = c σ(z)`` (``c > 0``), so ``g_V(x) ≈ L x + D σ(U x)`` with ``n`` merged units ``U``;
3. decides ``D[:,S] U[S,:] = −L`` with :func:`absorbjax.condition.find_absorbing_set` (the exact
   condition, Thm 8/10 with Lemma 4's skip ``L``) at a tolerance for the wide fit's error; an
   ``S`` gives a width-``n`` residual-free block, :func:`absorbjax.condition.absorber`;
4. polishes that block against the target (Levenberg–Marquardt, :func:`absorbjax.fit.search` with
   ``init=``), on the same training inputs as the first search.

A draw counts as solved only by the polished block's own training and held-out loss; steps 2–3
only propose a starting point. A failed expansion proves nothing, as a failed search does.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import condition
from absorbjax.fit.config import Polish
from absorbjax.fit.driver import search
from absorbjax.fit.result import SearchResult
from absorbjax.models import MLPParams

ACTIVATIONS = ("relu", "gelu")


def merge_units(params: MLPParams, activation: str, n: int, *, angle_tol: float = 1e-3):
    """Merge the units of one wide block ``V_down σ(V_up x)`` (``m`` units) into ``n`` units and a
    linear term: ``V_down σ(V_up x) ≈ L x + D σ(U x)``.

    Units whose rows agree up to sign (ReLU: up to a nonzero scale; GELU: up to sign only) within
    ``angle_tol`` (relative) form one cluster, represented by its largest unit's row ``u``; a
    member ``s c u`` (``s = ±1``, ``c > 0``, ``c = 1`` for GELU) adds ``c D_j`` to the cluster's
    output column and, when ``s = −1``, ``−c D_j uᵀ`` to ``L``. The ``n`` clusters with the
    largest ``‖D‖ ‖u‖`` are kept; the others are dropped.

    Args:
      params: ``MLPParams`` ``(V_up (m, d), V_down (d, m))``, one block.
      activation: ``"relu"`` or ``"gelu"``.
      n: the number of units to keep.

    Returns:
      ``(MLPParams(U (n, d), D (d, n)), L (d, d))`` as float64 NumPy arrays.

    Examples:
      A unit and its negation merge into one unit plus a linear term (``σ(−z) = σ(z) − z``):

      >>> import numpy as np
      >>> from absorbjax import fit
      >>> from absorbjax.models import MLPParams
      >>> from absorbjax import models
      >>> V = MLPParams(np.array([[1.0, 0.0], [-2.0, 0.0], [0.0, 1.0]]), np.array([[1.0, 0, 0], [0, 1, 3]]))
      >>> merged, L = fit.expand.merge_units(V, "relu", 2)
      >>> merged.up.tolist(), L.tolist()
      ([[0.0, 1.0], [-2.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]])
      >>> x = np.array([0.7, -0.3])
      >>> bool(np.allclose(L @ x + models.mlp(merged, x, "relu"), models.mlp(V, x, "relu")))
      True
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    up, down = (np.asarray(a, np.float64) for a in params)
    d = up.shape[1]
    norms = np.linalg.norm(up, axis=1)
    size = norms * np.linalg.norm(down, axis=0)
    order = np.argsort(-size, kind="stable")
    free = np.ones(len(order), bool)
    L = np.zeros((d, d))
    units, cols = [], []
    for j in order:
        if not free[j] or norms[j] == 0:
            continue
        u = up[j]
        if activation == "relu":
            cos = up @ u / (np.maximum(norms, 1e-300) * norms[j])
            plus, minus = free & (cos >= 1 - angle_tol), free & (cos <= -(1 - angle_tol))
            scale = norms / norms[j]
        else:
            plus = free & (np.linalg.norm(up - u, axis=1) <= angle_tol * norms[j])
            minus = free & (np.linalg.norm(up + u, axis=1) <= angle_tol * norms[j])
            scale = np.ones_like(norms)
        col = down[:, plus] @ scale[plus] + down[:, minus] @ scale[minus]
        L -= np.outer(down[:, minus] @ scale[minus], u)
        free &= ~(plus | minus)
        units.append(u)
        cols.append(col)
    units, cols = np.array(units).reshape(-1, d), np.array(cols).reshape(-1, d).T
    keep = np.argsort(-(np.linalg.norm(units, axis=1) * np.linalg.norm(cols, axis=0)), kind="stable")[:n]
    return MLPParams(units[keep], cols[:, keep]), L


def absorber_from_units(params: MLPParams, activation: str, n: int, *, tol: float = 1e-2,
                        angle_tols=(1e-6, 1e-5, 1e-4, 1e-3, 1e-2), time_limit: float = 10.0) -> MLPParams | None:
    """The width-``n`` residual-free block that a wide fit points to, or ``None``.

    For each merge tolerance in ``angle_tols`` (finest first), :func:`merge_units` gives
    ``L x + D σ(U x)`` and :func:`absorbjax.condition.find_absorbing_set` looks for ``S`` with
    ``D[:,S] U[S,:] = −L`` within its rule (★) with ``rtol = tol`` (a loose, proposing tolerance); the first ``S`` found gives the block
    :func:`absorbjax.condition.absorber` (rows in ``S`` flipped). ``None`` when no tolerance
    gives ``n`` units with an ``S`` (fewer units survive, or no ``S`` for either orientation). The
    tolerances only decide which start to propose: the polish that follows is what is judged.
    """
    for angle_tol in angle_tols:
        merged, L = merge_units(params, activation, n, angle_tol=angle_tol)
        if merged.up.shape[0] < n:
            continue
        # σ(z) = σ(−z) + z: the same function with every unit flipped has skip L + D U; one of
        # the two is invertible where the other is not (L = 0 when the fit already absorbed).
        flipped = MLPParams(-merged.up, merged.down)
        for units, skip in ((merged, L), (flipped, L + merged.down @ merged.up)):
            try:
                cert = condition.find_absorbing_set(units, skip=skip, rtol=tol, activation=activation,
                                                    time_limit=time_limit)
            except ValueError:  # singular skip, or degenerate merged weights
                continue
            if cert.status == "absorbable":
                return condition.absorber(units, cert.S, skip=skip, check=False)
    return None


def expand_search(
    target: MLPParams,
    activation: str,
    *,
    key: jax.Array,
    factor: int = 2,
    restarts: int = 32,
    steps: int = 200,
    wide_restarts: int | None = None,
    wide_steps: int | None = None,
    tol: float | None = None,
    merge_tol: float = 1e-2,
    polish: bool | Polish = True,
    progress: bool = False,
    **search_kwargs,
) -> SearchResult:
    """:func:`absorbjax.fit.search`, then expand–merge–decide–polish on the draws it leaves unsolved.

    Args:
      target: one-layer residual blocks ``W`` (``MLPParams``, optional leading draws axis).
      activation: ``"relu"`` or ``"gelu"``.
      key: base PRNG key; the first search uses it as :func:`search` does, the wide search
        ``fold_in(key, 1)``, and the polish again ``key`` (the same training inputs per draw).
      factor: the wide search's width ``m = factor · n``.
      restarts, steps, polish, tol, search_kwargs: the first search's settings (as :func:`search`).
      wide_restarts, wide_steps: the wide search's (default: ``restarts``, ``steps``).
      merge_tol: tolerance of the condition on the merged units (:func:`absorber_from_units`).

    Returns:
      A :class:`SearchResult` over all draws: where the polished expansion beats the first
      search, its best candidate, losses and profile replace the first search's; ``losses`` and
      ``failed`` gain one column (the polished start; ``inf`` where none was proposed), and
      ``config["expand"]`` records the settings and how many draws were proposed and improved.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    common = dict(tol=tol, progress=progress, **search_kwargs)
    first = search(target, activation, key=key, restarts=restarts, steps=steps, polish=polish, **common)
    single = first.config.get("single", False)
    target = jax.tree.map(lambda a: jnp.asarray(a)[None] if single else jnp.asarray(a), target)
    draws, n = first.best_loss.shape[0], first.config["n"]
    todo = np.flatnonzero(~first.solved())
    record = {"factor": factor, "wide_restarts": wide_restarts or restarts, "wide_steps": wide_steps or steps,
              "merge_tol": merge_tol, "unsolved": int(todo.size), "proposed": 0, "improved": 0}
    proposal = jax.tree.map(np.array, first.best_params)  # a writable copy
    proposed = np.zeros(draws, bool)
    if todo.size:
        sub = jax.tree.map(lambda a: a[todo], target)
        wide = search(sub, activation, key=jax.random.fold_in(key, 1), width=factor * n,
                      restarts=wide_restarts or restarts, steps=wide_steps if wide_steps is not None else steps,
                      polish=polish, **common)
        for j, i in enumerate(todo):
            V = absorber_from_units(jax.tree.map(lambda a: a[j], wide.best_params), activation, n, tol=merge_tol)
            if V is not None:
                proposed[i] = True
                for f, a in zip(V._fields, V):
                    getattr(proposal, f)[i] = np.asarray(a, getattr(proposal, f).dtype)
    record["proposed"] = int(proposed.sum())
    columns = np.full((draws, 1), np.inf)
    result = first
    if proposed.any():
        idx = np.flatnonzero(proposed)
        init = jax.tree.map(lambda a: jnp.asarray(a[idx])[:, None], proposal)
        pol = Polish(steps=300, screen=300, top=1) if polish is not False else False
        third = search(jax.tree.map(lambda a: a[idx], target), activation, key=key, restarts=1, steps=0,
                       init=init, polish=pol, **common)
        columns[idx, 0] = np.where(third.failed[:, 0], np.inf, third.losses[:, 0])
        better = np.zeros(draws, bool)
        better[idx] = third.best_loss < first.best_loss[idx]
        record["improved"] = int(better.sum())
        pick = lambda a, b: _splice(a, b, idx, better[idx])
        result = first._replace(
            best_loss=pick(first.best_loss, third.best_loss),
            best_params=jax.tree.map(lambda a, b: jnp.asarray(pick(np.asarray(a), np.asarray(b))),
                                     first.best_params, third.best_params),
            profile=pick(first.profile, third.profile),
            weight_norms=pick(first.weight_norms, third.weight_norms),
            holdout_loss=pick(first.holdout_loss, third.holdout_loss),
        )
    return result._replace(
        losses=np.concatenate([first.losses, columns], 1),
        failed=np.concatenate([first.failed, np.zeros((draws, 1), bool)], 1),
        config={**first.config, "expand": record},
    )


def _splice(a: np.ndarray, b: np.ndarray, idx: np.ndarray, use: np.ndarray) -> np.ndarray:
    """``a`` with rows ``idx[use]`` replaced by ``b[use]`` (``b`` has one row per ``idx``)."""
    out = np.array(a, copy=True)
    out[idx[use]] = b[use]
    return out
