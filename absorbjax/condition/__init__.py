"""Theorems 8 and 10: decide ``W_down[:,S] W_up[S,:] = −A`` with a certificate, build the absorber.

For ReLU or GELU, ``d ≥ 2`` and nondegenerate weights (rows of ``W_up`` nonzero and pairwise
non-parallel, columns of ``W_down`` nonzero), the residual block ``x ↦ A x + W_down σ(W_up x)``
equals some residual-free block ``V_down σ(V_up x)`` of the same width iff an index set ``S`` has

    W_down[:,S] W_up[S,:] = −A                                   (Thm 8, Thm 10, Lemma 4)

(``A = I`` by default). With ``M_i = W_down[:,i] W_up[i,:]`` (``d×d``) this asks whether a 0/1
vector ``m`` solves ``Σ m_i M_i = −A``: ``d²`` equations, ``n`` unknowns. The decision runs eagerly
in NumPy float64 and never forms the ``d²×n`` matrix ``K = [vec M_1 … vec M_n]`` unless a MILP on
it is small:

1. *Relaxation.* ``G = KᵀK = (W_downᵀ W_down) ⊙ (W_up W_upᵀ)`` (``n×n``) and
   ``b = Kᵀ vec(−A)``, ``b_i = −W_down[:,i]ᵀ A W_up[i,:]ᵀ``. The least-squares ``c = G⁺b`` is
   refined with exact residuals ``R = −A − Σ c_i M_i`` (``d×d``), and
   ``ρ = ‖Σ c_i M_i + A‖_F`` is computed directly, not as ``cᵀGc − 2bᵀc + ‖A‖_F²``
   (which cancels). If every 0/1 vector stays further than ``d·tol`` (the Frobenius size of an
   entrywise ``tol`` miss) from ``−A``, no ``S`` exists: method ``"relaxation"``.
2. *Rounding.* When ``G`` has full rank ``n`` the real solution is unique and every valid ``m``
   lies within ``δ = (d·tol + ρ)/σ_min(K)`` of ``c``; with ``δ < 1/2`` the only candidate is
   ``round(c)``, which is verified: method ``"rounding"``.
3. *Box relaxation.* Otherwise a certified lower bound on ``‖Σ c_i M_i + A‖_F`` over
   ``c ∈ [0,1]^n`` (projected gradient and the Frank–Wolfe gap) above ``d·tol``: method
   ``"relaxation"``.
4. *MILP.* Otherwise (``n > rank G``, e.g. ``n > d²``) it is integer feasibility, solved with
   HiGHS (``scipy.optimize.milp``): method ``"milp"``; see :func:`find_absorbing_set`.

``method="exhaustive"`` enumerates all ``2^n`` subsets (``n ≤ 24``), the reference for tests.
Every ``S`` returned is verified: ``‖W_down[:,S] W_up[S,:] + A‖_max ≤ tol``.
"""

from absorbjax.condition import certificate, closest, decide, inputs, integer, relax
from absorbjax.condition.certificate import METHODS, STATUSES, Certificate, Distance
from absorbjax.condition.decide import absorber, find_absorbing_set, find_absorbing_sets
from absorbjax.condition.closest import distance
from absorbjax.condition.inputs import default_tol
from absorbjax.condition.width import WidthCertificate, min_extra_width

__all__ = [
    "Certificate",
    "Distance",
    "find_absorbing_set",
    "find_absorbing_sets",
    "absorber",
    "distance",
    "default_tol",
    "STATUSES",
    "METHODS",
    "min_extra_width",
]
