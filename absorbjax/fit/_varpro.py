"""Variable projection: Levenberg–Marquardt on the weights that enter nonlinearly, the last layer solved.

A candidate ``g_θ(x) = B(θ)ᵀ φ_θ(x)`` is linear in its last layer ``B`` (``V_down``, and the free
linear term ``A`` when there is one): given the weights ``θ`` before it (``V_up``; a stack's
earlier layers), the best ``B`` is a least-squares solution. Variable projection (Golub & Pereyra
1973) minimises the reduced loss

    ``ℓ(θ) = ‖P⊥(θ) Y‖²``,  ``P⊥ = I − Φ Φ⁺``,  ``Φ = (w_k φ_θ(x_k))_k (K × p)``,  ``Y = (w_k y_k)_k (K × d)``

over ``θ`` alone, with ``w_k = 1/(‖x_k‖ √K)`` so that ``ℓ`` is the search's relative loss at the
best ``B``. Eliminating ``B`` removes the valleys along which ``θ`` and ``B`` trade off, so a
width-``n`` fit from random ``θ`` reaches rounding error far more often than a joint fit.

Each step is Levenberg–Marquardt with Kaufman's Jacobian ``J ≈ −P⊥ (∂Φ/∂θ) B`` (Kaufman 1975),
``P⊥`` applied with the left singular vectors of ``Φ``, which also give ``B`` and the residual without
forming ``ΦᵀΦ``. Its normal equations come from forward-mode derivatives: of ``θ ↦ Φ(θ) B`` for
any candidate (:func:`dense_normal`), or unit by unit for one block (:func:`unitwise_normal`). A
fixed number of iterations in ``lax.while_loop`` (vmappable; a traced flag skips them all); the best
finite iterate is kept.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from optax.tree_utils import tree_where


class Projection(NamedTuple):
    """The last layer solved at ``θ``: ``B (p, d)``, the residual ``P⊥ Y (K, d)`` and ``Q (K, p)``."""

    B: jax.Array
    residual: jax.Array
    Q: jax.Array


def project(features: Callable, Y: jax.Array, theta: jax.Array) -> Projection:
    """Least squares ``min_B ‖Y − Φ(θ) B‖`` by a thin SVD of ``Φ(θ) (K, p)``; ``Y (K, d)``.

    Rank-revealing: singular values below ``K ε σ_max`` are dropped (the minimum-norm ``B``), so a
    column that is zero or a combination of others (a ReLU unit that is dead, or active, on every
    input: common in a stack's later layers) leaves ``B`` finite instead of making the restart fail.
    ``Q`` spans the kept singular vectors (its other columns are 0).
    """
    Phi = features(theta)
    U, s, Vt = jnp.linalg.svd(Phi, full_matrices=False)
    keep = s > s[0] * Phi.shape[0] * jnp.finfo(Phi.dtype).eps
    Q = U * keep
    QY = Q.T @ Y
    inv = jnp.where(keep, 1.0 / jnp.where(keep, s, 1.0), 0.0)
    return Projection(Vt.T @ (inv[:, None] * QY), Y - Q @ QY, Q)


def loss(features: Callable, Y: jax.Array, theta: jax.Array) -> jax.Array:
    """The reduced loss ``‖P⊥(θ) Y‖²`` (``inf`` where it is not finite)."""
    return _value(project(features, Y, theta))


def _value(proj: Projection) -> jax.Array:
    v = jnp.sum(jnp.square(proj.residual))
    return jnp.where(jnp.isfinite(v), v, jnp.inf)


def dense_normal(features: Callable) -> Callable:
    """``(θ, projection) ↦ (JᵀJ, Jᵀr)`` for any ``Φ(θ)``: ``(∂Φ/∂θ) B`` by one forward-mode Jacobian
    (``P`` JVPs of ``θ ↦ Φ(θ) B``), projected with ``Q``. Stacks use it."""

    def normal(theta, proj: Projection):
        dPhiB = jax.jacfwd(lambda t: features(t) @ proj.B)(theta)  # (K, d, P)
        J = dPhiB - jnp.einsum("kc,cdp->kdp", proj.Q, jnp.einsum("kc,kdp->cdp", proj.Q, dPhiB))
        J = J.reshape(-1, theta.shape[0])
        return J.T @ J, J.T @ proj.residual.ravel()

    return normal


def unitwise_normal(unit_features: Callable, m: int) -> Callable:
    """``(θ, projection) ↦ (JᵀJ, Jᵀr)`` when column ``i < m`` of ``Φ`` depends only on unit ``i``'s
    parameters ``θ_i`` (``θ`` is ``(m, q)`` raveled; one block, whose other columns are constant).

    With ``C = P⊥ ∂Φ[:, i]/∂θ_i`` ``(K, m, q)``, Kaufman's ``J`` has column ``(i, a)`` equal to
    ``C[:, i, a] ⊗ B_i`` (``B_i`` row ``i`` of ``B``), so ``JᵀJ = (CᵀC) ⊙ (B Bᵀ ⊗ 1_{q×q})`` and
    ``(Jᵀr)_{ia} = Σ_k C[k,i,a] (r B_iᵀ)_k``: ``d`` times fewer operations than :func:`dense_normal`.
    ``unit_features(θ (m, q))`` is ``Φ[:, :m] (K, m)``.
    """

    def normal(theta, proj: Projection):
        units = theta.reshape(m, -1)
        q = units.shape[1]
        # ∂Φ[:, i]/∂θ_i for every unit at once: unit i's column depends on row i only, so the
        # JVP along the a-th coordinate of every row at once gives all m columns' derivatives.
        tangents = jnp.eye(q, dtype=theta.dtype)
        G = jax.vmap(lambda t: jax.jvp(unit_features, (units,), (jnp.broadcast_to(t, units.shape),))[1])(tangents)
        G = jnp.moveaxis(G, 0, -1)  # (K, m, q)
        C = G - jnp.einsum("kc,cmq->kmq", proj.Q, jnp.einsum("kc,kmq->cmq", proj.Q, G))
        C2 = C.reshape(C.shape[0], m * q)
        Bm = proj.B[:m]
        H = (C2.T @ C2) * jnp.kron(Bm @ Bm.T, jnp.ones((q, q), theta.dtype))
        g = jnp.einsum("kmq,km->mq", C, proj.residual @ Bm.T).ravel()
        return H, g

    return normal


def levenberg_marquardt(
    features: Callable, Y: jax.Array, theta0: jax.Array, steps: int, normal: Callable, skip: jax.Array | bool = False
):
    """``steps`` Levenberg–Marquardt iterations on ``ℓ(θ) = ‖P⊥(θ) Y‖²`` from ``θ₀ (P,)``.

    ``features(θ)`` is ``Φ (K, p)``; ``normal(θ, projection)`` gives Kaufman's ``JᵀJ`` and ``Jᵀr``
    (:func:`dense_normal`, :func:`unitwise_normal`). Step ``δ = (JᵀJ + λ (diag JᵀJ + μ))⁻¹ Jᵀr``
    (``J = P⊥ (∂Φ/∂θ) B``, the negated Jacobian of the residual); ``λ`` shrinks 3× after a step
    that lowers ``ℓ`` and grows 4× after one that does not (rejected). ``skip`` (a traced bool):
    no iteration at all (a ``while_loop``, so a vmapped batch whose members all skip does no work).
    Returns ``(θ, ℓ(θ))``, the best finite iterate.
    """
    P = theta0.shape[0]
    eye = jnp.eye(P, dtype=theta0.dtype)
    tiny = jnp.finfo(theta0.dtype).eps

    def step(carry):
        theta, proj, v, lam, t = carry
        H, g = normal(theta, proj)
        diag = jnp.diagonal(H)
        damp = lam * (diag + tiny * (1.0 + jnp.max(diag)))
        new = theta + jnp.linalg.solve(H + damp * eye, g)
        proj_new = project(features, Y, new)  # carried: the next step starts from it when accepted
        v_new = _value(proj_new)
        ok = (v_new < v) & jnp.all(jnp.isfinite(new))
        theta, proj, v = tree_where(ok, (new, proj_new, v_new), (theta, proj, v))
        lam = jnp.clip(jnp.where(ok, lam / 3.0, lam * 4.0), tiny, 1.0 / tiny)
        return theta, proj, v, lam, t + 1

    lam0 = jnp.asarray(1e-3, theta0.dtype)
    proj0 = project(features, Y, theta0)
    going = lambda carry: (carry[4] < steps) & ~jnp.asarray(skip)
    theta, _, v, _, _ = lax.while_loop(going, step, (theta0, proj0, _value(proj0), lam0, jnp.asarray(0)))
    return theta, v
