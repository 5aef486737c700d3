"""Minimal extra width: the smallest ``k`` such that a residual-free block of width ``n + k`` equals
``x ↦ A x + W_down σ(W_up x)`` (ReLU, GELU), decided with a certificate, and the wider absorber.

The argument (a proof for ReLU and exact GELU; every step is checked by the tests):

1. *Parity.* ``σ(z) = z/2 + E(z)`` with ``E`` even, so ``f = g`` splits into an even equation
   ``Σ_i u_i E(w_i·x) = Σ_j v'_j E(v_j·x)`` and an odd (linear) one
   ``Σ_j v'_j v_jᵀ = 2A + W_down W_up`` (``u_i`` = ``W_down[:,i]``, ``w_i`` = ``W_up[i,:]``).
2. *Atoms.* ReLU: ``E(t v·x) = |t| E(v·x)``, and ``|v·x|`` over pairwise non-parallel ``v`` are
   linearly independent (each has its own kink hyperplane): an *atom* is a line. GELU: for
   ``v ≠ ±v'`` the functions ``E(v·x)``, ``E(v'·x)`` are linearly independent (on a generic ray
   ``x = s y`` the magnitudes ``|v·y|`` differ, and ``E(tz) = tz/2 − tz Q(tz)`` with the Gaussian
   tail ``Q`` decaying at rate ``t²``): an atom is a vector up to sign, so magnitudes ``|c| ≠ 1``
   on a target direction are separate atoms and give no extra freedom. Units of the target on
   one atom merge into one unit (with a change of the linear skip, ``A'``); atoms whose merged
   output is 0 disappear into ``A'``. This leaves ``L`` live atoms ``ŵ_a, ũ_a`` (``L = n`` for
   the paper's nondegenerate weights) and the equivalent block ``A' x + Ũ σ(Ŵ x)``.
3. *Covering.* Every live atom needs a candidate unit on it. One unit contributes ``± ũ_a ŵ_aᵀ``
   to the linear part (the paper's flip; ``S`` = the flipped atoms); two or more contribute any
   ``a ŵ_aᵀ`` (``G`` = the duplicated atoms, one extra unit each); units on other atoms must
   cancel their even parts, so they come in groups of two or more contributing ``b vᵀ``
   (a free pair, two units). With ``M_S = A' + Ũ[:,S] Ŵ[S,:]`` and ``Π_G`` the projector onto
   ``span{ŵ_a : a ∈ G}`` the minimal width is ``L + k_red`` with

       k_red = min over disjoint S, G of |G| + 2 rank(M_S (I − Π_G))

   and ``k* = max(0, L + k_red − n)``. Equivalently ``k_red = min_S min_{P ⊇ rowspace M_S}
   2 dim P − rank{ŵ_a ∈ P}``, which is what the search evaluates.
4. *Bounds.* ``|G| + 2p ≥ ρ`` when ``rank M_S = ρ ≤ rank Ŵ`` (and ``≥ 2ρ − rank Ŵ`` above it),
   so ``det M_S ≠ 0`` for every ``S`` (a nonzero polynomial in the weights for each ``S``) gives
   ``k_red ≥ 2d − rank Ŵ``, attained by ``G`` = ``d`` independent atoms: generic blocks need
   exactly ``k* = d`` (for ``n ≥ d``). ``k* = 0`` is Thm 8/10's condition.

The decision enumerates all ``2^L`` sets ``S`` (``L ≤ max_bits``; beyond, the first ``max_bits``
atoms are enumerated and the rest bounded by Weyl's inequality). For each ``S`` a rank lower bound
is certified in float64 (Hadamard's inequality on the LU determinant, else the SVD, with
rounding-error bounds); integer weights are decided exactly (ranks in ``python-flint``, the flats
``P`` searched exhaustively), other weights within ``tol``, the Frobenius bound of rule (★) of
:mod:`absorbjax.condition` at ``rtol``: every ``S`` whose ``M_S`` is within ``tol`` (2-norm) of a
lower rank counts as that rank, and for such ``S`` the bound is refined
over every ``G`` (``|G| + 2·rank(M_S (I − Π_G))``, ranks certified the same way). The construction
is built in float64 and verified (linear part within ``tol`` in Frobenius norm, block outputs
numerically);
``k* = 0`` for nondegenerate weights is :func:`find_absorbing_set`'s answer.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, NamedTuple

import numpy as np

from absorbjax import activations
from absorbjax._fingerprint import fingerprint
from absorbjax._self_check import settle, strict
from absorbjax.condition._arith import EPS
from absorbjax.condition._certificate import Status
from absorbjax.condition._decide import find_absorbing_set
from absorbjax.condition._hypotheses import from_gram
from absorbjax.condition._options import Decision
from absorbjax.condition._rule import miss_matrix, threshold_of
from absorbjax.condition._text import fmt
from absorbjax.condition._validate import check_rtol, float_weights, skip_matrix
from absorbjax.condition.width._parts import (
    CHUNK,
    NUMPY,
    PROVED,
    Search,
    atoms,
    block_error,
    certified_ranks,
    construct,
    integer_matrix_rank,
    masks,
    numeric_rank,
)
from absorbjax.io import to_jsonable
from absorbjax.models import MLPParams, check_layout
from absorbjax.results import UNDECIDED, Verdict, Word


class WidthStatus(Word):
    """The answers of :func:`min_extra_width`. A member is its string (``cert.status == "certified"``)."""

    CERTIFIED = "certified"  # k* is exact: a verified absorber of width n + k* and a proof that n + k* − 1 fails
    UNDECIDED = UNDECIDED  # lower <= k* <= upper; the reason says why


EXACT_MAX = 2.0**20  # integer weights up to this size are decided in exact integer arithmetic


# ---------------------------------------------------------------------------------------------
# The certificate


@dataclasses.dataclass(frozen=True, eq=False)
class WidthCertificate(Verdict):
    """The answer of :func:`min_extra_width` and what justifies it.

    Attributes:
      status: a :class:`WidthStatus`, ``"certified"`` (``k`` is exact: a verified absorber of width ``n + k`` and a proof
        that ``n + k − 1`` is impossible) or ``"undecided"`` (``lower ≤ k* ≤ upper``, ``reason``).
      k: the minimal extra width ``k*`` (``None`` when undecided).
      lower, upper: proved bounds on ``k*``; ``upper`` is attained by the exact construction, and by
        its float64 rounding ``absorber`` when ``error ≤ 1e-6`` (beyond that the certificate is
        undecided and its absorber is not claimed: softplus at weights scaled by ``2^±30``, whose
        even part turns the rounding of a duplicated atom into a constant offset).
      d, n: input dimension and width of the block.
      atoms: live atoms (lists of hidden-unit indices merged into one unit; ``[[i], …]`` for
        nondegenerate weights); ``L = len(atoms)``.
      S, G: flipped and duplicated atoms of the construction, named by each atom's first unit.
      pairs: number ``p`` of free pairs.
      coefficients: ``a`` ``(d, |G|)``: the free rank-one terms ``a_i ŵ_iᵀ``.
      pair_vectors: ``(b (d, p), v (p, d))``: the free pairs ``b_q v_qᵀ``.
      skip_reduced: ``A'`` ``(d, d)``: the skip after merging atoms (``A`` when nothing merged).
      absorber: the residual-free block of width ``n + upper`` (``MLPParams`` of float64 arrays;
        dead zero units pad it when the atoms need fewer).
      residual: ``‖M_S − Σ_G a_i ŵ_iᵀ − Σ_q b_q v_qᵀ‖_F`` of the construction (``≤ tol``).
      error: ``max_x ‖f(x) − g(x)‖ / ‖A x‖`` over 256 inputs, ``‖x‖`` from 1e-3 to 1e3 (float64):
        relative to the skip's output (not to ``‖W_down‖‖W_up‖``, which cancellation can inflate);
        above 1e-6 the width is not certified.
      exact: the weights are integers and every rank was computed exactly; otherwise the
        decision is within ``tol`` (an ``M_S`` within ``tol`` of a lower rank counts as it).
      method: ``"find_absorbing_set"``, ``"enumeration"`` (all ``2^L`` sets ``S``) or
        ``"prefix"`` (``2^max_bits`` prefixes, the rest bounded).
      subsets: how many sets ``S`` (or prefixes) were examined.
      proof: one sentence per step of the lower bound.
      reason: why the status is what it is.
      nondegenerate: hypotheses of Thm 8/10 hold (no merges were needed).
      tol: the Frobenius bound of rule (★) at ``rtol`` (:mod:`absorbjax.condition`): the slack of
        the linear part.
      activation, skip, rtol, input_dtype, seconds: as in :class:`Certificate`.
      condition: :func:`find_absorbing_set`'s certificate (nondegenerate weights), as a dict.
      fingerprint: the hash of the stored ``W_up``, ``W_down`` (and ``A`` when given) that
        :func:`absorbjax.verify` compares (``absorbjax._fingerprint``).
      basis: what ``lower`` rests on, for :func:`absorbjax.verify`: ``L`` (live atoms), ``k_red``
        (the proved lower bound on ``min_{S,G} |G| + 2 rank(M_S (I − Π_G))``; ``lower = max(0, L +
        k_red − n)``), ``rank_bound`` (the bound on ``rank Ŵ`` in ``ρ ↦ 2ρ − rank Ŵ``), ``threshold``
        (a rank counts singular values above it: 0 for exact weights, ``tol`` otherwise) and
        ``ray_limit_lower`` (gelu_tanh, silu, softplus: the ReLU bound on the same weights).
    """

    status: WidthStatus
    k: int | None
    lower: int
    upper: int
    d: int
    n: int
    atoms: list
    S: np.ndarray
    G: np.ndarray
    pairs: int
    coefficients: np.ndarray
    pair_vectors: tuple
    skip_reduced: np.ndarray
    absorber: MLPParams
    residual: float
    error: float
    exact: bool
    subsets: int
    proof: tuple
    nondegenerate: bool
    activation: str
    skip: str
    tol: float
    rtol: float
    input_dtype: str
    seconds: float = 0.0
    condition: dict | None = None
    fingerprint: str = ""
    basis: dict | None = None

    def __post_init__(self):  # a status outside the vocabulary is refused (ValueError)
        object.__setattr__(self, "status", WidthStatus(self.status))

    @property
    def width(self) -> int | None:
        """``n + k*`` (``None`` when undecided)."""
        return None if self.k is None else self.n + self.k

    def summary(self) -> str:
        head = (
            f"k* = {self.k} (width {self.width})"
            if self.status == WidthStatus.CERTIFIED
            else f"{self.lower} <= k* <= {self.upper}"
        )
        lines = [f"{self.status}: {head}  [method: {self.method}, {self.subsets} sets]  {self.reason}"]
        lines.append(
            f"  construction: {len(self.atoms)} atoms, S = {self.S.tolist()}, G = {self.G.tolist()}, "
            f"{self.pairs} free pairs -> width {self.absorber.up.shape[0]}; residual "
            f"{fmt(self.residual)} <= tol {fmt(self.tol)}; relative block error {fmt(self.error)}"
        )
        lines += [f"  proof: {p}" for p in self.proof]
        lines.append(
            f"  d = {self.d}, n = {self.n}, activation {self.activation}, skip {self.skip}, "
            f"{'exact integer arithmetic' if self.exact else 'float64 within tol'}, "
            f"input {self.input_dtype}, {self.seconds:.3g} s"
        )
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values."""
        out = {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["width"] = self.width
        return out


# ---------------------------------------------------------------------------------------------
# The decision


def _check_width_activation(activation) -> str:
    act = activations.get(activation)
    if act.gated or act.family == "homogeneous":
        raise ValueError(f"activation {act.name!r} never absorbs at any width: {act.result}")
    if act.name not in NUMPY:
        raise ValueError(
            f"activation must be one of {tuple(NUMPY)} (odd part z/2, the construction's identity), got {act.name!r}"
        )
    return act.name


def _enumerate(W, Uc, Ap, search, best, lower_red, *, max_bits, err, thr, margin_rank, exact):
    """The lower bound over every ``S`` (or the ``2^max_bits`` prefixes and a Weyl tail), refining the
    upper bound on the way. Returns ``(best, lower_red, subsets, method, proof lines)``."""
    L = W.shape[0]
    rank_hi, rank_W = margin_rank
    subsets, proof = 0, []
    unresolved = []  # (lb, S) of sets whose rank bound stays below the current upper bound
    frontier_low = math.inf
    order = np.argsort(-np.linalg.norm(Uc, axis=0) * np.linalg.norm(W, axis=1), kind="stable")
    bits = min(L, max_bits)
    head, tail_idx = order[:bits], order[bits:]
    margin, method = 0.0, "enumeration"
    if tail_idx.size:
        method = "prefix"
        margin = float(np.linalg.norm(Uc[:, tail_idx], 2) * np.linalg.norm(W[tail_idx], 2)) * (1 + 1e-12)
    Wh, Uh = W[head], Uc[:, head]
    for start in range(0, 2**bits, CHUNK):
        m = masks(bits, start, min(2**bits, start + CHUNK))
        Ms = Ap + np.einsum("ki,bi,ij->bkj", Uh, m, Wh, optimize=True)
        ranks = certified_ranks(Ms, err, thr, margin)
        subsets += m.shape[0]
        lbs = np.where(ranks <= rank_hi, ranks, 2 * ranks - rank_hi)
        for b in np.flatnonzero(lbs < best[0]):
            S = np.sort(head[m[b]])
            if tail_idx.size:
                frontier_low = min(frontier_low, int(lbs[b]))
            else:
                unresolved.append((int(lbs[b]), S))
    unresolved.sort(key=lambda r: r[0])
    low = frontier_low
    for lb, S in unresolved:
        if lb >= best[0]:
            break
        M = Ap + Uc[:, S] @ W[S]
        cost, S2, G2, p, complete = search.flats(M, S, best[0])
        if S2 is not None and cost < best[0]:
            best = (cost, S2, G2, p)
        if not exact:
            low = min(low, max(lb, search.leaf_bound(M, S, best[0])))
        elif not complete:
            low = min(low, lb)
    lower_red = max(lower_red, int(min(low, best[0])))
    if exact:
        proof.append(
            f"every S ⊆ atoms ({subsets} sets): rank M_S certified (Hadamard/SVD bound, else exact), "
            "and for singular M_S the flats P ⊇ rowspace M_S searched exactly"
        )
    else:
        proof.append(
            f"every S ({subsets} {'prefixes, Weyl tail ' + fmt(margin) if tail_idx.size else 'sets'}): "
            f"robust rank of M_S certified (singular values above tol = {fmt(thr)} plus rounding)"
        )
    proof.append(f"rank ρ of M_S forces |G| + 2p >= ρ (>= 2ρ − rank Ŵ above rank Ŵ = {rank_W})")
    return best, lower_red, subsets, method, proof


def _check_budget(**budgets) -> None:
    for name, v in budgets.items():
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _ray_lower(params, act, proof, *, skip, decision: Decision, max_bits: int, max_flats: int) -> int:
    """The ReLU lower bound on ``k*`` of the same weights: a lower bound for ``act`` by the ray limit
    (the limit of a width ``n + k`` absorber is a ReLU one); 0 without a declared ray limit relu (a
    ``leaky_relu(α)`` limit maps absorbers to leaky ones, whose ``k*`` bound is not proved)."""
    limit = activations.get(act).ray_limit
    if limit != "relu":
        proof.append(
            f"no lower bound: {act} has no declared ray limit"
            if limit is None
            else f"no lower bound: {act}'s declared ray limit is {limit}, not relu (no {limit} width bound is proved)"
        )
        return 0
    relu = min_extra_width(params, "relu", skip=skip, decision=decision, max_bits=max_bits, max_flats=max_flats)
    proof.append(
        f"k* >= {relu.lower}: the ReLU bound on the same (W_up, W_down) ({relu.status}); by the ray "
        f"limit a width n + k absorber for {act} gives a ReLU one (proved, beyond the paper)"
    )
    return relu.lower


def min_extra_width(
    params: MLPParams,
    activation: str,
    *,
    skip=None,
    decision: Decision = Decision(),
    max_bits: int = 20,
    max_flats: int = 20000,
) -> WidthCertificate:
    """The smallest ``k`` such that some ``V_down σ(V_up x)`` of width ``n + k`` equals
    ``A x + W_down σ(W_up x)``, with a verified absorber and a proof that ``n + k − 1`` fails.

    Args:
      params: one ungated block, ``W_up (n, d)``, ``W_down (d, n)`` (any real dtype; decided in
        float64, exactly for integer weights).
      activation: ``"relu"`` or ``"gelu"``: the even-part argument decides; ``"gelu_tanh"``,
        ``"silu"``, ``"softplus"`` (declared ray limit relu): the ReLU lower bound on the same
        weights is a proved lower bound (the ray limit of a width ``n + k`` absorber is a ReLU one),
        the construction the upper bound; ``k*`` where they meet, else an interval. Gated and
        homogeneous activations raise: Props 5, 6 rule out every width.
      skip: ``A (d, d)``; ``None`` is ``I``.
      decision: how to decide, a :class:`Decision`: its ``rtol`` is the slack of rule (★) (the
        linear part must match within ``tol``, the Frobenius bound of every miss that rule
        accepts), its ``time_limit`` the seconds for :func:`find_absorbing_set` (nondegenerate
        weights, ``k = 0``; the width search runs on ``max_bits`` and ``max_flats``, not the
        clock), its ``narrow`` says a block narrower than its input (``n < d``) is meant
        (otherwise it warns: :class:`models.NarrowBlockWarning`, flax's ``(in, out)`` kernels).
      max_bits: enumerate all ``2^L`` sets ``S`` of the ``L`` atoms when ``L ≤ max_bits``; beyond,
        the ``2^max_bits`` prefixes over the atoms of largest ``‖ũ_a‖‖ŵ_a‖``, the rest bounded by
        Weyl's inequality (often too weak: then undecided).
      max_flats: flats ``P`` examined per row space of a singular ``M_S``; beyond, undecided.

    Returns:
      a :class:`WidthCertificate` (``str(cert)`` readable, ``cert.to_dict()`` JSON).

    Examples:
      >>> import numpy as np
      >>> from absorbjax import condition, models
      >>> rng = np.random.default_rng(0)
      >>> p = models.MLPParams(rng.normal(size=(6, 3)), rng.normal(size=(3, 6)) / 2)
      >>> cert = condition.min_extra_width(p, "relu")
      >>> cert.status, cert.k, cert.width, cert.error < 1e-12
      ('certified', 3, 9, True)
      >>> up = np.array([[1., 0.], [0., 1.], [1., 1.]])
      >>> down = np.array([[-1., 0., 0.], [0., -1., 1.]])   # W_down[:,S] W_up[S,:] = −I, S = {0, 1}
      >>> condition.min_extra_width(models.MLPParams(up, down), "gelu").k
      0
    """
    t0 = time.perf_counter()
    check_layout(params, narrow=decision.narrow)
    act = _check_width_activation(activation)
    _check_budget(max_bits=max_bits, max_flats=max_flats)
    w = _prepare(params, act, skip, decision.rtol, max_flats)
    best, lower, proof, info = _bounds(
        params, w, act, skip=skip, max_bits=max_bits, max_flats=max_flats, decision=decision
    )
    cert = _conclude(w, act, best, lower=lower, proof=proof, info=info, t0=t0)
    if strict() or 2 ** min(len(cert.atoms), 60) * cert.d**3 <= SELF_CHECK_MAX:
        from absorbjax import verify

        check = verify(cert, params, skip=skip)
        cert = settle(cert, check, who="min_extra_width", undecided=lambda why: _unclaimed(w, act, cert, why))
    return cert


SELF_CHECK_MAX = 2**14
"""``2^L d³`` (``L`` live atoms) up to which :func:`min_extra_width` checks its own certificate with
:func:`absorbjax.verify` (the check enumerates the ``2^L`` sets: 0.07 s at ``(d, n) = (4, 8)``,
0.8 s at ``(4, 12)``, where the decision takes 0.03–0.04 s); beyond it, only in strict mode."""


def _unclaimed(w: _Prepared, act: str, cert: WidthCertificate, why: str) -> WidthCertificate:
    """``cert`` refuted by its own check, made ``undecided`` with what needs no search:
    ``0 ≤ k* ≤ 2d``, since ``A x = A σ(x) − A σ(−x)`` (odd part ``z/2``) makes the block's ``n``
    units and ``2d`` more an exact absorber."""
    d = w.U.shape[1]
    V = MLPParams(np.concatenate([w.U, np.eye(d), -np.eye(d)]), np.concatenate([w.D, w.A, -w.A], axis=1))
    return dataclasses.replace(
        cert,
        status=WidthStatus.UNDECIDED,
        k=None,
        lower=0,
        upper=2 * d,
        S=np.zeros(0, int),
        G=np.zeros(0, int),
        pairs=d,
        coefficients=np.zeros((d, 0)),
        pair_vectors=(w.A.copy(), np.eye(d)),
        absorber=V,
        residual=0.0,
        error=block_error(w.U, w.D, w.A, V, act),
        proof=("k* <= 2d: the block's units and the 2d units of A x = A σ(x) − A σ(−x)",),
        reason=why,
        condition=None,
    )


class _Prepared(NamedTuple):
    """The float64 weights of :func:`min_extra_width`, their live atoms (``parts.atoms``) and the search."""

    U: np.ndarray  # W_up (n, d)
    D: np.ndarray  # W_down (d, n)
    A: np.ndarray  # the skip (d, d)
    dtype: Any  # the input dtype
    rtol: float  # rule (★)'s slack
    tol: float  # the Frobenius bound of every miss rule (★) accepts
    exact: bool  # decided in exact integer arithmetic
    W: np.ndarray  # Ŵ (L, d)
    Uc: np.ndarray  # Ũ (d, L)
    Ap: np.ndarray  # A' (d, d)
    groups: list  # the units of each atom
    nondegenerate: bool  # the hypotheses of Thm 8/10 hold and no units merged
    err: float  # rounding of M_S and the merge, 2-norm
    thr: float  # the rank threshold
    rank_W: int
    rank_hi: int
    search: Search


def _prepare(params: MLPParams, act: str, skip, rtol: float | None, max_flats: int) -> _Prepared:
    """Read the block in float64, check ``skip`` and ``rtol``, merge the units into atoms, set up the search."""
    U, D, dtype = float_weights(params, batched=False)
    n, d = U.shape
    A = skip_matrix(skip, d)
    rtol = check_rtol(rtol)
    tol = threshold_of(U, D, A, rtol)
    exact = act in PROVED and all(
        np.all(X == np.round(X)) and np.max(np.abs(X), initial=0) <= EXACT_MAX for X in (U, D, A)
    )
    W, Uc, Ap, groups = atoms(U, D, A, act, exact)
    L = W.shape[0]
    failed, _ = from_gram(U, D, U @ U.T, dtype)
    nondegenerate = not failed and L == n
    rounding = np.linalg.norm(np.abs(A) + np.abs(D) @ np.abs(U)) + np.linalg.norm(np.abs(Ap))
    err = 0.0 if exact else 4 * (n + d + 2) * EPS * float(rounding)  # rounding of M_S and the merge, 2-norm
    thr = 0.0 if exact else tol
    rank_W = integer_matrix_rank(W) if exact else numeric_rank(W, thr)
    rank_hi = rank_W if exact else min(L, d)
    search = Search(W, Uc, Ap, exact, thr, err, rank_hi, max_flats)
    return _Prepared(
        U, D, A, dtype, rtol, tol, exact, W, Uc, Ap, groups, nondegenerate, err, thr, rank_W, rank_hi, search
    )


def _bounds(
    params: MLPParams, w: _Prepared, act: str, *, skip, max_bits: int, max_flats: int, decision: Decision
) -> tuple[tuple, int, list[str], dict]:
    """The bounds on ``k*``: ``(best (cost, S, G, p) found (the upper bound), the proved lower bound, the proof
    lines, the certificate's bookkeeping fields)``."""
    n, d = w.U.shape
    L = w.W.shape[0]
    proved = act in PROVED
    proof: list[str] = []
    # Upper bound from S = ∅ and the flats over M_∅ = A' (P = R^d gives 2d − rank Ŵ); then S = ∅'s lower.
    best = w.search.flats(w.Ap, np.zeros(0, int), 2 * d + 1)[:4]
    cond_cert = None
    lower_red = 0
    if w.nondegenerate:
        cond_cert = find_absorbing_set(
            params, act if proved else None, skip=skip, decision=dataclasses.replace(decision, narrow=True)
        )  # the layout was checked on entry
        if cond_cert.absorbable and cond_cert.S is not None:
            best = (0, cond_cert.S, np.zeros(0, int), 0)
            proof.append(f"k = 0: find_absorbing_set verified S = {cond_cert.S.tolist()} ({cond_cert.method})")
        elif cond_cert.status == Status.NOT_ABSORBABLE and proved:
            lower_red = 1
            proof.append(f"k >= 1: find_absorbing_set proved no S exists ({cond_cert.method})")

    method = "find_absorbing_set" if best[0] == 0 and cond_cert is not None else "construction"
    subsets = 0
    if best[0] > 0 and proved:
        best, lower_red, subsets, method, lines = _enumerate(
            w.W,
            w.Uc,
            w.Ap,
            w.search,
            best,
            lower_red,
            max_bits=max_bits,
            err=w.err,
            thr=w.thr,
            margin_rank=(w.rank_hi, w.rank_W),
            exact=w.exact,
        )
        proof += lines
    ray_lower = (
        0
        if proved
        else _ray_lower(params, act, proof, skip=skip, decision=decision, max_bits=max_bits, max_flats=max_flats)
    )
    info = dict(
        d=d,
        n=n,
        exact=w.exact,
        method=method,
        subsets=subsets,
        nondegenerate=w.nondegenerate,
        activation=act,
        skip="identity" if skip is None else "matrix",
        tol=w.tol,
        rtol=w.rtol,
        input_dtype=str(w.dtype),
        condition=None if cond_cert is None else cond_cert.to_dict(),
        fingerprint=fingerprint(np.asarray(params.up), np.asarray(params.down), None if skip is None else w.A),
        basis=dict(
            L=L,
            k_red=lower_red if proved else None,
            rank_bound=w.rank_hi,
            threshold=w.thr,
            ray_limit_lower=None if proved else ray_lower,
        ),
    )
    return best, max(0, L + lower_red - n) if proved else ray_lower, proof, info


def _conclude(w: _Prepared, act: str, best, *, lower: int, proof: list[str], info: dict, t0: float) -> WidthCertificate:
    """Build and verify the construction for the best ``(cost, S, G, p)`` on the prepared block ``w``,
    and the certificate."""
    U, D, A, W, Uc, Ap, groups, tol = w.U, w.D, w.A, w.W, w.Uc, w.Ap, w.groups, w.tol
    n, d = U.shape
    L = W.shape[0]
    cost, S_best, G_best, p_best = best
    upper = max(0, L + cost - n)
    if L < n:
        proof.append(f"{n - L} of {n} units merge into others or vanish (parallel/zero rows, cancelling outputs)")
    V, residual, coef, pv = construct(W, Uc, Ap, S_best, G_best, p_best, n + upper)
    if not residual <= tol:  # rounding beat tol (ill-conditioned Ŵ_G): fall back to d free pairs
        proof.append(f"the construction with k = {upper} missed tol ({fmt(residual)}); it is not claimed")
        S_best, G_best, p_best = np.zeros(0, int), np.zeros(0, int), d
        upper = max(0, L + 2 * d - n)
        V, residual, coef, pv = construct(W, Uc, Ap, S_best, G_best, p_best, n + upper)
    error = block_error(U, D, A, V, act)
    rep = np.array([g[0] for g in groups], int)
    if lower == upper and error <= 1e-6:
        status, k = WidthStatus.CERTIFIED, upper
        reason = f"width n + {k} absorbs (verified) and no S, G gives less" if k else "absorbs at the same width"
    else:
        status, k = WidthStatus.UNDECIDED, None
        reason = f"{lower} <= k* <= {upper}: " + (
            f"the construction's error {fmt(error)} (against the skip) is not small"
            if error > 1e-6
            else "some S could not be ruled out (rank near-singular within tol, flat budget, or prefixes)"
        )
    return WidthCertificate(
        status=status,
        k=k,
        lower=lower,
        upper=upper,
        atoms=[list(g) for g in groups],
        S=rep[np.asarray(S_best, int)],
        G=rep[np.asarray(G_best, int)],
        pairs=int(p_best),
        coefficients=coef,
        pair_vectors=pv,
        skip_reduced=Ap,
        absorber=V,
        residual=residual,
        error=error,
        proof=tuple(proof),
        reason=reason,
        seconds=time.perf_counter() - t0,
        **info,
    )


def wide_absorber(
    params: MLPParams,
    S=(),
    G=(),
    *,
    skip=None,
    pairs: int | None = None,
    rtol: float | None = None,
    check: bool = True,
) -> MLPParams:
    """A residual-free block of width ``n + |G| + 2p`` equal to ``A x + W_down σ(W_up x)``.

    Units: ``(w_i, u_i)`` for ``i ∉ S ∪ G``; ``(−w_i, u_i)`` for ``i ∈ S`` (the flip);
    ``(w_i, u_i + a_i), (−w_i, −a_i)`` for ``i ∈ G``; ``(v_q, b_q), (−v_q, −b_q)`` for the ``p``
    free pairs, where ``Σ_G a_i w_iᵀ = M_S Π_G`` and ``Σ_q b_q v_qᵀ`` is the rank-``p`` truncated
    SVD of ``M_S (I − Π_G)``, ``M_S = A + W_down[:,S] W_up[S,:]``. Exact for every activation with
    ``σ(z) − σ(−z) = z`` (relu, gelu, gelu_tanh, silu, softplus); no genericity needed.

    Args:
      params: ungated block ``(W_up (n, d), W_down (d, n))``.
      S, G: disjoint hidden-unit indices.
      skip: ``A (d, d)``, ``None`` = ``I``.
      pairs: ``p``; default the number of singular values of ``M_S (I − Π_G)`` above ``tol``, the
        Frobenius bound of rule (★) at ``rtol`` (default ``DEFAULT_RTOL``).
      rtol, check: with ``check=True`` a construction whose linear part misses by more than
        ``tol`` (Frobenius) raises ``ValueError``.

    Returns:
      ``MLPParams`` of JAX arrays of width ``n + |G| + 2p`` (float64 under ``jax_enable_x64``).

    Examples:
      >>> import numpy as np
      >>> from absorbjax import condition, models
      >>> rng = np.random.default_rng(1)
      >>> p = models.MLPParams(rng.normal(size=(4, 2)), rng.normal(size=(2, 4)))
      >>> V = condition.width.wide_absorber(p, G=[0, 1])     # two independent rows: p = 0 pairs
      >>> V.up.shape
      (6, 2)
    """
    U, D, dtype = float_weights(params, batched=False)
    n, d = U.shape
    A = skip_matrix(skip, d)
    tol = threshold_of(U, D, A, check_rtol(rtol))
    S_idx, G_idx = (np.unique(np.asarray(x, int)) for x in (S, G))
    for name, idx in (("S", S_idx), ("G", G_idx)):
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"{name} must index hidden units 0..{n - 1}, got {idx.tolist()}")
    if np.intersect1d(S_idx, G_idx).size:
        raise ValueError(f"S and G must be disjoint, both hold {np.intersect1d(S_idx, G_idx).tolist()}")
    m = np.zeros(n, bool)
    m[S_idx] = True
    M = miss_matrix(U, D, A, m)
    Pg = U[G_idx].T @ np.linalg.pinv(U[G_idx].T) if G_idx.size else np.zeros((d, d))
    if pairs is None:
        pairs = numeric_rank(M @ (np.eye(d) - Pg), tol)
    if not isinstance(pairs, (int, np.integer)) or not 0 <= pairs <= d:
        raise ValueError(f"pairs must be an integer in 0..{d}, got {pairs!r}")
    V, residual, *_ = construct(U, D, A, S_idx, G_idx, int(pairs), 0)
    if check and not residual <= tol:
        raise ValueError(
            f"S, G and {pairs} pairs do not reproduce the linear part: entrywise miss {residual:.3g} > tol {tol:.3g}"
        )
    import jax.numpy as jnp  # the wider absorber is a JAX block; deciding never imports JAX

    dt = jnp.result_type(params.up, params.down)
    return MLPParams(jnp.asarray(V.up, dt), jnp.asarray(V.down, dt))
