"""Functional dimension of deep ReLU/GELU stacks, and certificates of generic disjointness at depth.

A residual stack of depth ``L`` is ``f_W = b_L ∘ … ∘ b_1`` with ``b_ℓ(x) = x + W_down^ℓ σ(W_up^ℓ x)``
(``W_up^ℓ ∈ R^{n×d}``, ``W_down^ℓ ∈ R^{d×n}``, no biases); a residual-free (free) stack composes
``x ↦ V_down^ℓ σ(V_up^ℓ x)``. Both have ``P = 2Lnd`` weights. The paper settles ``L = 1``; this
package answers ``L ≥ 2`` by counting dimensions. Everything here is beyond the paper; the proofs,
each step labelled *proved* or *computed exactly*, are in ``docs/theory/depth.md``:

1. *Free bound (proved).* The free family's functional dimension is at most
   ``b = 2Lnd − (L−1)d²`` (``− nL`` for ReLU) — :func:`free_bound`.
2. *Exact ranks are lower bounds (proved).* The rank mod a prime ``p`` (larger than the jet order)
   of the probe Jacobian at a rational point is a lower bound on its real rank — :func:`exact_rank`.
3. *Disjointness from a rank (proved).* A residual rank above ``b`` at one point makes the residual
   weights that some free stack reproduces a null set (GELU: of all weights; ReLU: of an open region
   around the point) — :func:`certify`.
4. *Theorem (proved).* Residual GELU stacks have full functional dimension ``2Lnd`` at almost all
   weights, for every ``d, n, L ≥ 1``; so for ``L ≥ 2`` and ``n ≥ d`` the rank exceeds ``b`` by
   ``(L−1)d²`` and almost all residual GELU stacks are reproduced by no free stack of their size.
5. *ReLU (proved).* Residual ReLU stacks (``d ≥ 2``) reach their maximum ``2Lnd − nL`` on an open set
   of weights containing every near-identity stack with pairwise non-parallel rows and nonzero
   columns; almost all weights of that set are disjoint from the free family. (How much of Gaussian
   weight space the certified set covers is *estimated* by the ``depth`` experiment, not proved.)
6. *Narrow ReLU width (proved)*, ``d ≤ n < 2d``; 7. *GELU → ReLU limit (proved)*.
8. *Biases (proved)*, ``bias=True`` everywhere above: ``b_ℓ(x) = x + D_ℓ σ(U_ℓ x + β_ℓ) + γ_ℓ`` against
   ``c_ℓ(x) = V_down σ(V_up x + β) + e``. Free bound ``P_b − (L−1)(d² + d)`` (affine junction gauge;
   ``− nL`` for ReLU), residual maximum ``P_b − (L−1)d`` (translations), attained by almost all biased
   GELU weights; the gap is again ``(L−1)d²``. GELU points have zero biases (jets from ``t⁰``), ReLU
   points rational ones.
9. *ReLU exceptions (proved):* ``Ω`` is not of full measure (an open set of folded stacks has rank
   ``≤ b``); on the line (``d = 1``, no biases) every residual stack of width ``n ≥ 2`` is a free one,
   and one of width 1 is a free one of width 1 iff ``f(1) f(−1) = 0`` — :func:`certify` decides each
   ``W`` exactly (``"reproduced"``, with the free stack, or ``"certified_disjoint"``).
10. *Width below the input, n < d (proved):* a free stack of width ``< d`` has a singular Jacobian
   everywhere, so an invertible residual Jacobian excludes every one of any depth: GELU for every ``W``
   with ``det Π_ℓ (I + ½ D_ℓ U_ℓ) ≠ 0``, ReLU where every ``det(I + D_ℓ[:,S] U_ℓ[S,:]) ≠ 0``; both
   checked exactly by :func:`certify`. The free bound there is ``2Lnd − (L−1)(2nd − n²)``.

Floating-point ranks (:func:`float_rank`) are the quick check beside the exact ones, never a
certificate.

Modules: :mod:`~absorbjax.dimension._counts` (sizes and bounds), :mod:`~absorbjax.dimension._points`
(rational points), :mod:`~absorbjax.dimension._ranks` (float and exact ranks, narrow width),
:mod:`~absorbjax.dimension._narrow` (the exact arguments beyond the rank count: §8's determinants, the
line), :mod:`~absorbjax.dimension._options` (:class:`Probe`, how :func:`certify` probes the point),
:mod:`~absorbjax.dimension._certificate` (:class:`DepthCertificate`, :func:`certify`).
"""

from absorbjax.dimension._certificate import DepthCertificate, DepthStatus, certify
from absorbjax.dimension._counts import (
    ACTIVATIONS,
    PRIME,
    check_sizes,
    free_bound,
    param_count,
    residual_max,
)
from absorbjax.dimension._options import Probe
from absorbjax.dimension._points import RationalPoint, rational_point
from absorbjax.dimension._ranks import (
    ExactRank,
    FloatRank,
    exact_rank,
    float_rank,
    forward_jacobian,
    gelu_taylor,
    narrow_invertible,
    relu_masks,
)

__all__ = [
    "ACTIVATIONS",
    "PRIME",
    "DepthCertificate",
    "DepthStatus",
    "ExactRank",
    "FloatRank",
    "Probe",
    "RationalPoint",
    "certify",
    "check_sizes",
    "exact_rank",
    "float_rank",
    "forward_jacobian",
    "free_bound",
    "gelu_taylor",
    "narrow_invertible",
    "param_count",
    "rational_point",
    "relu_masks",
    "residual_max",
]
