"""The sign step: which of a fitted layer's units to negate so that its free linear term disappears.

A fit of ``A x + V_down σ(V_up x)`` (a free linear term ``A``) is turned into a residual-free
block by negating units: with the activation's declared odd part ``σ(z) − σ(−z) = c z``,
negating row ``i`` of ``V_up`` changes the block by ``−c V_down[:,i] V_up[i,:] x`` and nothing
else. So the negations ``τ ∈ {0, 1}^m`` that best remove ``A`` minimise the mismatch

    ``‖A + c Σ_i τ_i M_i‖_F²``,  ``M_i = V_down[:,i] V_up[i,:]``  (``d × d``),

which is also how much of the loss the negated block adds (the linear part of the loss, since
``A x`` is odd and the rest of the block's error is unchanged). The search minimises it over its
own fitted units: every ``τ`` when ``m ≤`` :data:`ENUMERATE` (``2^m`` candidates, one matmul),
else the least-squares ``τ`` rounded at ½. Nothing here reads the target's weights or the
condition: the step sees only the fit.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np

ENUMERATE = 12


def negations(up: jax.Array, down: jax.Array, linear: jax.Array, c: float) -> jax.Array:
    """``τ (m,)`` in ``{0, 1}``: which units of ``V_up (m, d)``, ``V_down (d, m)`` to negate so that
    ``c Σ τ_i V_down[:,i] V_up[i,:]`` is closest to ``−A`` (``linear``, ``(d, d)``)."""
    m, d = up.shape
    M = jnp.einsum("im,mj->mij", down, up).reshape(m, d * d)
    target = -linear.ravel() / c
    if m <= ENUMERATE:
        patterns = jnp.asarray(np.array(list(itertools.product((0.0, 1.0), repeat=m))), up.dtype)
        return patterns[jnp.argmin(jnp.sum(jnp.square(patterns @ M - target), -1))]
    tau = jnp.linalg.lstsq(M.T, target)[0]
    return (tau > 0.5).astype(up.dtype)


def negate(up: jax.Array, tau: jax.Array) -> jax.Array:
    """``V_up`` with the rows where ``τ = 1`` negated."""
    return up * (1.0 - 2.0 * tau)[:, None]
