"""What trained blocks are compared with, and what is measured on them: norm-matched Gaussian
blocks and the structure of ``W_down W_up``.

A trained block ``W = (W_up (n, d), W_down (d, n))`` sits at some distance from the absorbing
condition ``W_down[:,S] W_up[S,:] = −I`` (:func:`absorbjax.condition.distance`). Whether that
distance is small *for its scale* is read against Gaussian blocks of the same shapes and the same
Frobenius norms (:func:`norm_matched_gaussian`); what makes it small is read from the self-alignments
``a_i = ⟨W_down[:,i], W_up[i,:]⟩`` and the spectrum of ``W_down W_up`` (:func:`block_structure`):
``Σ_{i∈S} a_i = tr(W_down[:,S] W_up[S,:])`` must be ``−d`` for an absorbing ``S``.

Examples:
  >>> import jax, numpy as np
  >>> from absorbjax import models
  >>> from absorbjax.lab import stats
  >>> W = models.MLPParams(np.ones((6, 2)), -np.ones((2, 6)))
  >>> G = stats.norm_matched_gaussian(W, key=jax.random.key(0))
  >>> bool(np.isclose(np.linalg.norm(G.up), np.linalg.norm(W.up))), G.down.shape
  (True, (2, 6))
  >>> s = stats.block_structure(W, S=[0])
  >>> s["frac_units_a_negative"], s["trace_over_d"], s["frac_S_a_negative"]
  (1.0, -6.0, 1.0)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import models

__all__ = ["norm_matched_gaussian", "block_structure"]


def norm_matched_gaussian(params: models.MLPParams, *, key: jax.Array) -> models.MLPParams:
    """Gaussian ``(W_up, W_down)`` of ``params``' shapes, each scaled to its Frobenius norm.

    Drawn with ``jax.random.normal`` from ``jax.random.split(key)`` (float64 when x64 is on, else
    float32, returned as float64 NumPy arrays), so the draw depends only on ``key`` and the shapes.
    """
    up, down = (np.asarray(a, np.float64) for a in params)
    if up.ndim != 2 or down.shape != up.shape[::-1]:
        raise ValueError(f"params must be one block, up (n, d) and down (d, n); got {up.shape} and {down.shape}")
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    ku, kd = jax.random.split(key)
    g_up = np.asarray(jax.random.normal(ku, up.shape, dtype=dtype), np.float64)
    g_down = np.asarray(jax.random.normal(kd, down.shape, dtype=dtype), np.float64)
    return models.MLPParams(
        g_up * (np.linalg.norm(up) / np.linalg.norm(g_up)), g_down * (np.linalg.norm(down) / np.linalg.norm(g_down))
    )


def block_structure(params: models.MLPParams, S=None) -> dict:
    """Self-alignments ``a_i`` and the spectrum of ``W_down W_up`` of one block.

    Returns a dict of floats: ``trace_over_d`` (``Σ a_i / d``), ``frac_units_a_negative``,
    ``frac_eig_re_negative``, ``mean_eig_re``, ``eig_re_quantiles`` (5, 25, 50, 75, 95 %),
    ``min_eig_gap`` (the distance of the closest eigenvalue to −1), ``all_units``
    (``‖W_down W_up + I‖_F / √d``: ``S`` = every unit), ``norm_up``, ``norm_down``, and the
    eigenvalues ``eig_real``, ``eig_imag`` (arrays). With ``S`` (hidden-unit indices, nonempty):
    ``frac_S_a_negative`` and ``S_share_of_negative_a``.
    """
    up, down = (np.asarray(a, np.float64) for a in params)
    d = up.shape[1]
    a = np.einsum("ki,ik->i", down, up)
    lam = np.linalg.eigvals(down @ up)
    out = {
        "trace_over_d": float(a.sum() / d),
        "frac_units_a_negative": float(np.mean(a < 0)),
        "frac_eig_re_negative": float(np.mean(lam.real < 0)),
        "mean_eig_re": float(lam.real.mean()),
        "eig_re_quantiles": np.quantile(lam.real, [0.05, 0.25, 0.5, 0.75, 0.95]).tolist(),
        "min_eig_gap": float(np.min(np.abs(lam + 1))),
        "all_units": float(np.linalg.norm(down @ up + np.eye(d)) / np.sqrt(d)),
        "norm_up": float(np.linalg.norm(up)),
        "norm_down": float(np.linalg.norm(down)),
        "eig_real": lam.real,
        "eig_imag": lam.imag,
    }
    if S is not None and len(S):
        S = np.asarray(S, int)
        out["frac_S_a_negative"] = float(np.mean(a[S] < 0))
        out["S_share_of_negative_a"] = float(np.sum(a[S] < 0) / max(np.sum(a < 0), 1))
    return out
