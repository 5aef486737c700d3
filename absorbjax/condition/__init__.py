"""Theorems 8 and 10: decide ``W_down[:,S] W_up[S,:] = −A`` with a certificate, build the absorber.

For ReLU or GELU (and, by *Thm 8 via the ray limit*, proved beyond the paper in
``docs/theory/ray_limit.md``: gelu_tanh, silu, softplus, and biased blocks of all five), ``d ≥ 2``
and nondegenerate weights (rows of ``W_up`` nonzero and pairwise
non-parallel, columns of ``W_down`` nonzero), the residual block ``x ↦ A x + W_down σ(W_up x)``
equals some residual-free block ``V_down σ(V_up x)`` of the same width iff an index set ``S`` has

    W_down[:,S] W_up[S,:] = −A                                   (Thm 8, Thm 10, Lemma 4)

(``A = I`` by default). With ``M_i = W_down[:,i] W_up[i,:]`` (``d×d``) this asks whether a 0/1
vector ``m`` solves ``Σ m_i M_i = −A``: ``d²`` equations, ``n`` unknowns.

**The generalised flip** (``docs/theory/kink.md``, ``docs/theory/ray_limit.md``). For an activation
with a *declared* odd slope ``c`` (``σ(z) − σ(−z) = c z``; ``Activation.odd_slope``, an exact
fraction: 1 for the five above and hardswish, ``1 + α`` for ``leaky_relu(α)``) the condition is
``c·W_down[:,S] W_up[S,:] = −A``; the searches run on ``−A/c`` (rounded, with the rounding added to
every threshold) and a set is accepted only on the exact ``c`` and ``A``. Without a declared ``c``,
``absorbable`` is never issued (``undecided``). The converse is the theorem
``Activation.converse(biased, narrow, parallel_rows)`` names: for width ``n < d`` the kink theorem
(relu, leaky_relu) or the kink theorem via the ray limit (every width), and the same for ``d = 1``
and for a skip ``A`` not proved invertible (Thm 8/10 reach ``A`` only through Lemma 4); biased kink
blocks whose parallel rows have distinct biases (pairwise non-proportional ``(w_i, b_i)``) the kink
theorem. ``rank A > n`` proves "no S" exactly (method ``"rank"``).

**The line, d = 1** (``docs/theory/kink.md``, proved): a bias-free block of a kink activation with
``d = 1`` and ``n ≥ 2`` always absorbs; when no ``S`` does, the certificate carries the absorber
``V_up = (1, −1, 0, …)ᵀ``, ``V_down = (α₁, α₂, 0, …)`` (``cert.line``, ``method = "line"``, α solved in
rationals and rounded once, ``miss_bound`` exact); ``absorber(params, cert)`` builds it.
A certificate for an activation outside the built-ins lists the declared facts it rests on in
``cert.assumes`` and its ``theorem`` says "given the declared facts (...)".

**What "=" means: rules (★) and (E)** (``docs/theory/certificates.md``). The decision runs on
the *stored* values (a float16, bfloat16, float32 or integer weight is an exact float64 number;
the stored dtypes are recorded). A set ``S`` passes rule (★) when its *exact* miss
``M_S = W_down[:,S] W_up[S,:] + A`` (a rigorous float64 bound, else exact ``fmpz`` arithmetic)
satisfies, entry by entry,

    |(W_down[:,S] W_up[S,:] + A)_kj| ≤ r_S (Σ_{i∈S} |W_down[k,i]| |W_up[i,j]| + |A_kj|),      (★)
    r_S = rtol + 2γ_{|S|+1},   γ_k = k u / (1 − k u),   u = 2⁻⁵³,   rtol = 1e3·eps64 by default.

Derivation: a float64 sum of ``k`` products errs by at most ``γ_k`` times the sum of their
absolute values (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1), so every set
whose exact miss is within ``rtol`` of that sum passes, and every set that passes has an exact
miss within ``rtol + 4γ_{|S|+1}`` of it. ``rtol`` is slack for weights that were themselves
computed in float64 (a pseudo-inverse loses ``cond(W_up[S,:])·eps``). The bound depends only on
the units in ``S`` (a huge unit elsewhere does not loosen it), follows changes of coordinates and
unit rescalings (both sides transform alike), and the empty set can never meet it (``r_S < 1``
while its miss is ``A``).

**Storage rounding, a separate answer.** Weights stored in fewer bits than float64 are rarely
*exactly* absorbable even when they are the rounding of absorbable weights. If ``w̃ = w(1 + δ)``,
``|δ| ≤ u_s`` (the storage's unit roundoff) and ``w`` satisfies the condition exactly, the stored
miss is at most ``(2u_s + u_s²)/(1 − u_s)²`` times the sum in (★). ``cert.rounding`` (a
:class:`StorageRounding`) answers rule (★) with ``rtol`` increased by that factor (:func:`storage_rtol`):
``within`` is ``"yes"`` (with the set ``S``), ``"no"`` (proved as below), ``"undecided"``, or ``"n/a"`` for
float64/integer storage. It is a necessary condition for "the rounding of an absorbable block",
and never changes ``status``, which is about the stored values themselves.

**How absence is proved.** Each proof shows that no ``m`` passes (★), using the Frobenius bound
``threshold`` that every accepted set's exact miss obeys:

1. *Relaxation.* ``G = KᵀK = (W_downᵀ W_down) ⊙ (W_up W_upᵀ)`` (``n×n``; the ``d²×n`` matrix
   ``K = [vec M_1 … vec M_n]`` is never formed) and ``b_i = −W_down[:,i]ᵀ A W_up[i,:]ᵀ``. The
   least-squares ``c = G⁺b`` is refined with exact residuals, and a certified lower bound on
   ``‖Σ m_i M_i + A‖_F`` over all real ``m`` above ``threshold`` rules every ``S`` out.
2. *Rounding.* When ``G`` has full rank ``n`` every accepted ``m`` lies within
   ``δ = (threshold + ρ)/σ_min(K)`` of ``c``; with ``δ < 1/2`` the only candidate is ``round(c)``.
3. *Box relaxation.* A certified lower bound over ``c ∈ [0,1]^n`` (projected gradient and the
   Frank–Wolfe gap).
4. *Enumeration.* All ``2^n`` subsets, screened by ``mᵀGm − 2bᵀm + ‖A‖_F²`` with a rigorous
   rounding bound, survivors checked by (★): a proof either way, for ``n ≤ 24``
   (``method="auto"`` enumerates directly for ``n ≤ 16``).
5. *MILP.* Beyond that, HiGHS (``scipy.optimize.milp``) searches for a set; a set it reports is
   checked by (★), but its "infeasible" is a floating-point verdict, so it is confirmed by
   enumeration (``n ≤ 24``) or the answer is ``undecided``.

**Rule (E).** ``absorbable`` needs more: ``miss_bound ≥ ‖M_S‖_F`` (rigorous) with
``miss_bound ≤ skip_rtol · σ_min(A)`` (``1e-6`` by default). Then the absorber errs by exactly
``M_S x``: ``‖absorber(x) − block(x)‖ ≤ miss_bound ‖x‖ ≤ skip_rtol ‖A x‖``. ``σ_min(A)`` is a
certified lower bound, 0 for a singular (or not provably invertible) skip: there only an exact miss 0
is ``absorbable`` (``A = 0``: ``S = ∅``), any other passing set ``undecided``. A set that passes (★)
only because of cancellation inside ``S`` gives ``undecided``. Units are rescaled by powers of two
before any Gram matrix, norm or cosine (exact; every ``M_i`` unchanged).

So ``absorbable`` always comes with a set ``S`` that passes (★) and (E); ``not_absorbable`` with a proof that
none does and the hypotheses of the theorem named in ``cert.theorem``
(:meth:`absorbjax.activations.Activation.converse`); ``degenerate`` when no set passes but a hypothesis fails; ``undecided`` otherwise, with the
reason (a time limit, an unconfirmed MILP verdict, cancellation, an activation without a declared
ray limit).
"""

from absorbjax.condition._absorber import absorber, absorber_biases
from absorbjax.condition._certificate import (
    METHODS,
    Certificate,
    DecidedBy,
    Distance,
    Evidence,
    FoundBy,
    Promise,
    RelaxationEvidence,
    Status,
    Stopped,
    StorageRounding,
    WithinRounding,
)
from absorbjax.condition._closest import distance
from absorbjax.condition._decide import find_absorbing_set, find_absorbing_sets
from absorbjax.condition._options import Decision
from absorbjax.condition._rule import tolerance
from absorbjax.condition._validate import DEFAULT_RTOL, storage_rtol
from absorbjax.condition.width import WidthCertificate, WidthStatus, min_extra_width

__all__ = [
    "Certificate",
    "Status",
    "DecidedBy",
    "WithinRounding",
    "StorageRounding",
    "Promise",
    "RelaxationEvidence",
    "Evidence",
    "Distance",
    "FoundBy",
    "Stopped",
    "Decision",
    "find_absorbing_set",
    "find_absorbing_sets",
    "absorber",
    "absorber_biases",
    "WidthCertificate",
    "WidthStatus",
    "distance",
    "tolerance",
    "storage_rtol",
    "DEFAULT_RTOL",
    "METHODS",
    "min_extra_width",
]
