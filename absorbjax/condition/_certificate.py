"""The answers: :class:`Certificate` (the decision) and :class:`Distance` (how far from absorbing)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from absorbjax import activations
from absorbjax.condition._line import LineAbsorber
from absorbjax.condition._text import few, fmt
from absorbjax.io import to_jsonable
from absorbjax.results import UNDECIDED, Result, Verdict, Word


class Status(Word):
    """The four answers of :func:`~absorbjax.condition.find_absorbing_set` and what each promises
    (the decision chooses them by name, never by parsing a message). A member is its string:
    ``cert.status == "absorbable"`` holds, and records hold the plain string."""

    ABSORBABLE = "absorbable"  # a set S passes rules (★) and (E); the absorber errs by <= miss_bound·‖x‖ + offset_bound
    NOT_ABSORBABLE = "not_absorbable"  # no set passes, proved, and the cited theorem's hypotheses hold
    DEGENERATE = "degenerate"  # no set passes, but a hypothesis of the cited theorem fails
    UNDECIDED = UNDECIDED  # no proof either way; the reason says why


class WithinRounding(Word):
    """Whether rule (★) passes once the storage's rounding is added to ``rtol``
    (``Certificate.rounding.within``): a necessary condition for "the rounding of an absorbable block".
    A member is its string (``cert.rounding.within == "yes"``)."""

    YES = "yes"  # a set passes the storage rule (``StorageRounding.S``)
    NO = "no"  # proved: no set passes it
    UNDECIDED = UNDECIDED  # no proof either way (``StorageRounding.reason``)
    NOT_APPLICABLE = "n/a"  # float64 or integer storage: nothing rounded


METHODS = ("auto", "relaxation", "milp", "exhaustive")
"""What :class:`Decision` ``.method`` may ask for (the input vocabulary); what decided is a :class:`DecidedBy`."""


class DecidedBy(Word):
    """What decided a certificate (``cert.method``), the output vocabulary; a member is its string
    (``cert.method == "milp"``). The Gram path: the real relaxation's test, its rounding, the
    enumeration, the MILP, the rank of ``A``; the ``O(n d²)`` screen of wide blocks: bound (D) at
    ``Z = A`` or at a Frank–Wolfe iterate, a planted or sign set, none; and the line theorem."""

    RELAXATION = "relaxation"  # the real relaxation: no mask within its reach, or undecided there
    ROUNDING = "rounding"  # the relaxation's point rounded to a set that passes
    EXHAUSTIVE = "exhaustive"  # all 2^n sets
    MILP = "milp"  # HiGHS's mixed-integer program, its answer verified
    RANK = "rank"  # rank A > n: no S can exist (exact)
    TRACE = "trace"  # the screen's bound (D) at Z = A
    FRANK_WOLFE = "frank-wolfe"  # the screen's bound (D) at a Frank–Wolfe iterate
    PLANTED = "planted"  # the screen's planted candidate, verified
    SIGN_SET = "sign-set"  # the screen's sign set, verified
    NONE = "none"  # the screen decided nothing
    LINE = "line"  # the line theorem (d = 1)


class FoundBy(Word):
    """How :func:`~absorbjax.condition.distance` found its set ``S`` (``Distance.method``); a member is
    its string (``dist.method == "local"``)."""

    EXACT = "exact"  # an absorbing set, from the decision
    EXHAUSTIVE = "exhaustive"  # the true minimum over all 2^n sets (small n)
    LOCAL = "local"  # single-unit flips from roundings of the relaxation
    FRANK_WOLFE = "frank-wolfe"  # the best set the O(n d²) screen of wide blocks met, ∅ included
    GREEDY = "greedy"  # the matrix-free flips and swaps, kept where they beat the others


class Stopped(Word):
    """What ended :func:`~absorbjax.condition.distance`'s search (``Distance.stopped``)."""

    NOTHING = ""  # it ran to a local minimum, or did not run
    BUDGET = "budget"  # its work budget, a deterministic count: the same set on every run
    TIME_LIMIT = "time_limit"  # the call's deadline: the bounds stay certified but may differ between runs


# ---------------------------------------------------------------------------------------------
# Results


@dataclasses.dataclass(frozen=True)
class RelaxationEvidence:
    """What the Gram relaxation computed (``cert.relaxation``; ``None`` when the ``O(n d²)`` screen
    of wide blocks decided, which forms neither ``G`` nor ``W_up W_upᵀ``).

    Attributes:
      rank: numerical rank of ``G = (W_downᵀ W_down) ⊙ (W_up W_upᵀ)`` (``n`` when Cholesky with
        Rump's shift proves it positive definite, else the number of eigenvalues above
        ``τ = 4·max(n,d)·eps·‖G‖_∞``, which only steers).
      residual: ``ρ = ‖Σ c_i M_i + A‖_F`` at the least-squares real ``c``.
      dist01: ``‖c − round(c)‖_∞``, the real solution's distance from ``{0,1}^n``.
      radius: ``δ``: every accepted ``m`` has ``‖m − c‖_2 ≤ δ`` (``None`` without a proved
        ``λ_min(G) > 0``).
      min_row_sin: smallest ``|sin|`` of the angle between two nonzero rows of ``W_up`` (near-parallel
        pairs from the chord, accurate to about ``d·eps``): how far the hypothesis "pairwise
        non-parallel" holds.
      min_plane_sin: for a biased block with parallel rows (the kink theorem's case), the smallest
        ``|sin|`` between two of the rows ``(W_up[i,:], b_i)``: how far the kink hyperplanes are
        distinct; ``None`` otherwise. A ``not_absorbable`` whose margin is within the storage's rounding
        says so in its reason.
    """

    rank: int
    residual: float
    dist01: float
    radius: float | None
    min_row_sin: float | None
    min_plane_sin: float | None = None


WITNESS_JSON_MAX_D = 256  # to_dict() writes the witness Z (d × d numbers) up to this d


@dataclasses.dataclass(frozen=True, eq=False)
class Evidence:
    """What :func:`absorbjax.verify` reads besides the certificate's own numbers (``cert.evidence``).

    Attributes:
      fingerprint: :func:`absorbjax._verify.fingerprint` of the block decided (its values in float64,
        the skip and biases when given): a certificate is about these numbers only.
      witness: for ``not_absorbable`` and ``degenerate``, a test matrix ``Z`` ``(d, d)`` with bound (D)
        ``‖Σ m_i M_i + A/c‖_F ≥ (⟨Z, A/c⟩ + Σ_i min(0, W_down[:,i]ᵀ Z W_up[i,:]ᵀ)) / ‖Z‖_F`` for every
        ``m ∈ [0,1]^n`` (all sets ``S``) above the threshold of rule (★); ``None`` when no cheap test
        matrix reaches it (the enumeration, the MILP and the rounding argument decided; ``verify``
        then solves the system exactly where it is small), or for the rank argument.
      witness_bound: the bound (D) at ``witness`` as the decision certified it in float64 (``verify``
        recomputes it exactly, or with its own a priori error bound, and checks it is not larger).
      witness_point: the box point ``c`` ``(n,)`` with ``witness = A/c_σ + Σ c_i M_i``: what the JSON
        carries instead of ``witness`` beyond ``d =`` :data:`WITNESS_JSON_MAX_D` (``verify`` rebuilds a
        test matrix from it; any matrix is a valid test, so only its bound is compared, not the claim).
    """

    fingerprint: str
    witness: np.ndarray | None = None
    witness_bound: float | None = None
    witness_point: np.ndarray | None = None

    def to_dict(self) -> dict:
        """JSON-ready; the witness as nested lists up to ``d =`` :data:`WITNESS_JSON_MAX_D` (each float
        written exactly: JSON keeps ``repr``), beyond that its point (``n`` numbers)."""
        out = {"fingerprint": self.fingerprint, "witness": None, "witness_bound": self.witness_bound}
        if self.witness is not None and self.witness.shape[0] <= WITNESS_JSON_MAX_D:
            out["witness"] = np.asarray(self.witness, np.float64).tolist()
        elif self.witness_point is not None:
            out["witness_point"] = np.asarray(self.witness_point, np.float64).tolist()
        return out


@dataclasses.dataclass(frozen=True, eq=False)
class StorageRounding:
    """Rule (★) once the storage's rounding is added to ``rtol`` (``cert.rounding``): a necessary
    condition for "the rounding of an absorbable block".

    Attributes:
      within: a :class:`WithinRounding`: ``"yes"`` (the set ``S`` passes the looser rule), ``"no"``
        (proved: no set passes it), ``"undecided"`` or ``"n/a"`` (float64 or integer storage).
      rtol: the looser slack, ``rtol`` plus the storage's unit roundoff terms (``None`` for ``"n/a"``).
      S: the set that passes it (``"yes"``), else ``None``.
      reason: why, in words.
    """

    within: WithinRounding = WithinRounding.NOT_APPLICABLE
    rtol: float | None = None
    S: np.ndarray | None = None
    reason: str = ""

    def __post_init__(self):  # a value outside the vocabulary is refused (ValueError)
        object.__setattr__(self, "within", WithinRounding(self.within))

    def line(self, stored_dtype: str) -> str:
        """The summary's line about the storage."""
        if self.within == WithinRounding.NOT_APPLICABLE:  # nothing was rounded
            return f"stored as {stored_dtype}: decided on the stored values, nothing rounded"
        answer = f"yes, S = {few(self.S)}" if self.within == WithinRounding.YES and self.S is not None else self.within
        why = f" ({self.reason})" if self.reason else ""
        return (
            f"stored as {stored_dtype} (decided in float64); absorbable within {stored_dtype} storage rounding "
            f"(rtol {fmt(self.rtol)}): {answer}{why}"
        )


@dataclasses.dataclass(frozen=True, eq=False)
class Promise:
    """What an ``absorbable`` answer promises, rule (E) (``cert.promise``): the absorber errs by at
    most ``miss_bound·‖x‖ + offset_bound``.

    Attributes:
      miss_bound: a rigorous upper bound on ``‖M_S‖_F ≥ ‖M_S‖_2``, ``M_S = W_down[:,S] W_up[S,:] + A``
        exactly (the line theorem's absorber: on ``sup |absorber(x) − block(x)|/|x|``); ``None``
        when no set was found.
      miss_exact: whether ``M_S`` was computed in rational arithmetic (else float64 with a bound).
      offset_bound: a rigorous bound on ``‖absorber(0) − block(0)‖``: the rounding of the absorber's
        output bias ``e = c + W_down[:,S] b[S]`` as :func:`absorber_biases` returns it (0 where ``e``
        is exact, and without biases).
      skip_rtol: the decision's rule (E): ``absorbable`` needs ``miss_bound ≤ skip_rtol · σ_min(A)``
        (``σ_min(A)`` a rigorous lower bound, 0 for a singular or not provably invertible ``A``: then
        only an exact miss 0 passes).
    """

    miss_bound: float | None = None
    miss_exact: bool | None = None
    offset_bound: float | None = None
    skip_rtol: float | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class Certificate(Verdict):
    """The answer of :func:`find_absorbing_set` and the numbers that justify it.

    Attributes:
      status: a :class:`Status`: ``"absorbable"`` (a set ``S`` passes rule (★); no genericity needed;
        or, for ``d = 1``, the line theorem's absorber: ``line``),
        ``"not_absorbable"`` (a proof that no set passes, and Thm 8/10 apply),
        ``"degenerate"`` (no set passes, but a hypothesis of Thm 8/10 fails) or
        ``"undecided"`` (no proof either way, or no converse for this activation or bias).
      S: sorted hidden-unit indices of the accepted set (when absorbable).
      method: what decided, a :class:`DecidedBy`: ``"relaxation"``, ``"rounding"``, ``"exhaustive"``,
        ``"milp"``, ``"rank"`` (``rank A > n``, exact: no ``S`` can exist), the screen's ``"trace"``,
        ``"frank-wolfe"``, ``"planted"``, ``"sign-set"``, ``"none"``, or ``"line"`` (the line theorem, ``d = 1``).
      reason: one sentence saying why.
      d, n: input dimension ``d`` and width ``n``.
      rtol: the slack of rule (★); ``threshold``: the Frobenius bound on every accepted set's miss.
      residual: ``‖W_down[:,S] W_up[S,:] + A‖_max`` of ``S``, or of the only candidate that the
        rounding step checked; ``None`` when no single candidate was checked.
      lower_bound: certified ``‖Σ m_i M_i + A‖_F ≥ lower_bound`` for every ``m ∈ {0,1}^n``.
      nondegenerate: whether the hypotheses hold (rows of ``W_up`` nonzero and pairwise non-parallel,
        columns of ``W_down`` nonzero; decided exactly on stored values).
      failed: the hypotheses that fail, in words.
      relaxation: the Gram relaxation's evidence (:class:`RelaxationEvidence`: rank of ``G``,
        ``ρ``, ``‖c − round(c)‖_∞``, ``δ``, the smallest sine between rows), or ``None`` when the
        ``O(n d²)`` screen of wide blocks decided (``n ≥ 2048``; it computes none of them, and a
        certificate holds no placeholder values).
      skip: ``"identity"`` or ``"matrix"`` (Lemma 4 form, condition ``= −A``).
      stored_dtype: dtype of the given weights (the check itself runs in float64).
      rounding: rule (★) with the storage's rounding added (:class:`StorageRounding`: ``within``,
        ``rtol``, ``S``, ``reason``); ``within`` is ``"n/a"`` for float64 and integer storage.
      biased: whether a nonzero hidden bias was given.
      activation: the activation named by the caller, if any.
      theorem: the theorem behind ``not_absorbable`` / ``degenerate`` (or behind "iff" for an
        ``absorbable`` answer with a named activation): "Thm 8", "Thm 10" or "Thm 8 via the ray limit".
      assumes: the declared facts of the activation that the answer rests on (its
        ``Activation.assumes``); empty for the built-ins, whose facts are proved in docs/theory.
      promise: what an ``absorbable`` answer promises, rule (E) (:class:`Promise`: ``miss_bound``,
        ``miss_exact``, ``offset_bound``, and the decision's ``skip_rtol``).
      line: for ``d = 1`` bias-free kink blocks of width ``n ≥ 2`` that no ``S`` absorbs, the line
        theorem's absorber (:class:`LineAbsorber`: ``V_up = (1, −1, 0, …)ᵀ``, ``V_down = (α₁, α₂, 0,
        …)``, exact up to ``promise.miss_bound·|x|``); :func:`absorber` ``(params, cert)`` builds it. ``S`` is
        then ``None``.
      evidence: what an independent check reads (:class:`Evidence`: the block's fingerprint and, for
        "no S", the witness of bound (D)); :func:`absorbjax.verify` checks the certificate with it.
      seconds, timings: wall time, total and per phase.
    """

    status: Status
    S: np.ndarray | None
    d: int
    n: int
    rtol: float
    threshold: float
    residual: float | None
    lower_bound: float
    nondegenerate: bool
    failed: tuple[str, ...]
    relaxation: RelaxationEvidence | None
    skip: str
    stored_dtype: str
    rounding: StorageRounding = StorageRounding()
    biased: bool = False
    activation: str | None = None
    theorem: str | None = None
    assumes: tuple[str, ...] = ()
    promise: Promise = Promise()
    line: LineAbsorber | None = None
    evidence: Evidence | None = None
    seconds: float = 0.0
    timings: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):  # a status outside the vocabularies is refused (ValueError)
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "method", DecidedBy(self.method))

    @property
    def absorbable(self) -> bool:
        return self.status == Status.ABSORBABLE

    def _summary(self) -> str:
        """The short repr (:class:`absorbjax.results.Result`): status, method, theorem, the number behind it."""
        if self.S is not None:
            found = f"|S| = {self.S.size}, miss <= {fmt(self.promise.miss_bound)}·‖x‖"
        elif self.line is not None:
            found = f"line absorber V_down = ({self.line.alpha[0]!r}, {self.line.alpha[1]!r}, 0, …), miss <= {fmt(self.promise.miss_bound)}·|x|"
        elif self.residual is not None:
            found = f"the only candidate misses by {fmt(self.residual)}"
        elif self.lower_bound > 0:
            found = f"every S misses by >= {fmt(self.lower_bound)} (Frobenius)"
        else:
            found = "no positive lower bound on any S's miss"
        theorem = f", {self.theorem}" if self.theorem else ""
        return f"{self.status} by {self.method}{theorem}: {found}; d = {self.d}, n = {self.n}; {self.reason}"

    def summary(self) -> str:
        target = "I" if self.skip == "identity" else "A"
        lines = [f"{self.status}  [method: {self.method}]  {self.reason}"]
        if self.S is not None:
            lines.append(
                f"  S = {few(self.S)} (|S| = {self.S.size}): "
                f"‖W_down[:,S] W_up[S,:] + {target}‖_max = {fmt(self.residual)}, within rule (★), "
                f"rtol = {fmt(self.rtol)}; ‖M_S‖_2 <= {fmt(self.promise.miss_bound)} "
                f"({'exact' if self.promise.miss_exact else 'rigorous float64 bound'}), rule (E)"
            )
        elif self.line is not None:
            ln = self.line
            lines.append(
                f"  line absorber (d = 1): V_up = (1, −1, 0, …)ᵀ, V_down = ({ln.alpha[0]!r}, {ln.alpha[1]!r}, 0, …) "
                f"solves [[p, −q], [−q, p]] α = (f(1), f(−1)) = ({ln.value_plus!r}, {ln.value_minus!r}) with "
                f"p = {ln.p!r}, q = {ln.q!r} (exact, α rounded once); sup |absorber(x) − block(x)|/|x| <= "
                f"{fmt(ln.miss_bound)} (exact); condition.absorber(params, cert) returns it"
            )
        elif self.residual is not None:
            lines.append(f"  candidate round(c): miss {fmt(self.residual)}, outside rule (★)")
        bound = (
            f"every S misses by >= {fmt(self.lower_bound)} (Frobenius; an accepted S misses by <= "
            f"{fmt(self.threshold)})"
            if self.lower_bound > 0
            else f"no positive lower bound on any S's miss (an accepted S misses by <= {fmt(self.threshold)})"
        )
        rel = self.relaxation
        if rel is None:
            lines.append(f"  O(n d²) screen: {bound}")
        else:
            lines.append(
                f"  relaxation: rank G = {rel.rank} of n = {self.n}, ρ = {fmt(rel.residual)}, {bound}, "
                f"‖c − round(c)‖_∞ = {fmt(rel.dist01)}, δ = {fmt(rel.radius)}"
            )
        hyp = "hold" if self.nondegenerate else "fail: " + "; ".join(self.failed)
        sin = "" if rel is None else f"; min |sin| between rows {fmt(rel.min_row_sin)}"
        lines.append(
            "  hypotheses of Thm 8/10 and the kink theorem (rows of W_up nonzero and pairwise non-parallel, "
            f"columns of W_down nonzero) {hyp}{sin}"
        )
        if self.activation is not None:
            lines.append(f"  activation {self.activation}: {activations.get(self.activation).result}")
        if self.biased:
            lines.append("  hidden bias: an S absorbs (flip (w_i, b_i)); the converse is Thm 8 via the ray limit")
        if self.theorem is not None:
            lines.append(f"  theorem: {self.theorem}")
        lines.append("  " + self.rounding.line(self.stored_dtype))
        lines.append(f"  d = {self.d}, n = {self.n}, skip {self.skip}, {self.seconds:.3g} s")
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict:
        """Every field, JSON-ready and flat: ``relaxation`` and ``line`` as dicts of their fields (or
        ``None``), the parts' fields under the record's keys (``within_rounding``, ``rounding_rtol``,
        ``rounding_S``, ``rounding_reason``; ``miss_bound``, ``miss_exact``, ``offset_bound``,
        ``skip_rtol``), what :func:`absorbjax.verify` reads."""
        r, p = self.rounding, self.promise
        parts = {
            "rounding": dict(within_rounding=r.within, rounding_rtol=r.rtol, rounding_S=r.S, rounding_reason=r.reason),
            "promise": dataclasses.asdict(p),
        }
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in parts:
                out.update(parts[f.name])
            elif f.name in ("relaxation", "line") and value is not None:
                out[f.name] = dataclasses.asdict(value)
            elif f.name == "evidence" and value is not None:
                out[f.name] = value.to_dict()
            else:
                out[f.name] = value
        return to_jsonable(out)


@dataclasses.dataclass(frozen=True, eq=False)
class Distance(Result):
    """How far a block is from absorbing, relative to ``‖A‖_F`` (``√d`` for ``A = I``).

    ``lower ≤ min_S ‖W_down[:,S] W_up[S,:] + A‖_F / ‖A‖_F ≤ upper``; ``upper`` is attained by ``S``
    (``S = ∅`` gives 1: the zero map). ``lower = max(relaxation, box)``: the certified bounds
    from real coefficients and from coefficients in ``[0, 1]``. ``method`` (a :class:`FoundBy`) says how ``S`` was
    found: ``"exact"`` (an absorbing set), ``"exhaustive"`` (the true minimum, small ``n``),
    ``"local"`` (single-unit flips from roundings of the relaxation), ``"frank-wolfe"`` (the best
    set met by the ``O(n d²)`` screen of wide blocks, ``∅`` included) or ``"greedy"`` (the
    matrix-free flips and swaps of :mod:`absorbjax.condition._search`, kept only where they beat
    the others). ``certificate`` is the decision of :func:`find_absorbing_set`. ``stopped`` (a
    :class:`Stopped`): what
    ended that search, ``""`` (it ran to a local minimum, or did not run), ``"budget"`` (its work
    budget, a deterministic count: the same set on every run) or ``"time_limit"`` (the call's
    deadline cut the search, the box relaxation, a local search or a Frank–Wolfe step: ``lower``,
    ``upper`` and ``S`` stay certified but may differ between runs).
    """

    lower: float
    upper: float
    S: np.ndarray
    method: FoundBy
    relaxation: float
    box: float
    certificate: Certificate
    stopped: Stopped = Stopped.NOTHING
    truth_field = "upper"

    def __post_init__(self):  # a word outside the vocabularies is refused (ValueError)
        object.__setattr__(self, "method", FoundBy(self.method))
        object.__setattr__(self, "stopped", Stopped(self.stopped))

    def _summary(self) -> str:
        """The short repr (:class:`absorbjax.results.Result`): the bounds, the set and the decision."""
        return (
            f"{fmt(self.lower)} <= min_S ‖W_down[:,S] W_up[S,:] + A‖_F / ‖A‖_F <= {fmt(self.upper)} "
            f"(|S| = {self.S.size}, {self.method}"
            + ("; stopped by the time limit" if self.stopped == "time_limit" else "")
            + f"); certificate: {self.certificate.status}"
        )

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["certificate"] = self.certificate.to_dict()
        return out
