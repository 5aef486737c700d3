"""The depth certificate: exact residual rank against the free bound, the narrow-width arguments
(``d ≤ n < 2d``: step 6; ``n < d``: the Jacobian argument of §8), or, on the line (``d = 1``, ReLU
without biases), the exact decision of §10.

Steps refer to ``docs/theory/depth.md``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import jax
import numpy as np

from absorbjax import models
from absorbjax._self_check import settle
from absorbjax.dimension._counts import check_sizes, free_bound, param_count, residual_max
from absorbjax.dimension._narrow import jacobian_argument, jacobian_undecided, line_decision, narrow_check
from absorbjax.dimension._options import Probe, jet_orders
from absorbjax.dimension._points import RationalPoint, rational_point
from absorbjax.dimension._ranks import ExactRank, exact_rank, float_rank
from absorbjax.io import to_jsonable
from absorbjax.results import UNDECIDED, Verdict, Word


class DepthStatus(Word):
    """The answers of :func:`certify`. A member is its string (``cert.status == "certified_disjoint"``)."""

    CERTIFIED_DISJOINT = "certified_disjoint"  # proved, for the weights ``scope`` names
    REPRODUCED = "reproduced"  # proved: a free stack of the same width and depth equals it (``free_stack``)
    UNDECIDED = UNDECIDED  # nothing is claimed; the reason says why


def _fmt(x) -> str:
    return "n/a" if x is None else (f"{x:.3g}" if isinstance(x, float) else str(x))


@dataclasses.dataclass(frozen=True, eq=False)
class DepthCertificate(Verdict):
    """Whether residual stacks of one size are generically disjoint from free stacks of the same size.

    Attributes:
      status: a :class:`DepthStatus`, ``"certified_disjoint"`` (proved, with ``scope``), ``"reproduced"``
        (proved: the free stack ``free_stack`` of the same width and depth equals this residual stack)
        or ``"undecided"`` (nothing is claimed; ``reason`` says why).
      method: which argument decided: ``"rank"`` (``docs/theory/depth.md``, steps 1–3),
        ``"narrow"`` (``d ≤ n < 2d``: step 6, ReLU; step 7 for GELU), ``"narrow_jacobian"`` (``n < d``:
        §8, every free stack of width ``< d`` and any depth has a singular Jacobian), ``"line"``
        (``d = 1``, ReLU without biases: §10, decided exactly by ``f(1) f(−1)``), ``"kink"`` (depth 1
        with biases: the one-block theorem, ``docs/theory/kink.md``, step 9) or ``"none"``.
      reason: one sentence.
      scope: the weights the conclusion covers.
      activation, d, n, depth: the size; ``residual``: which family was counted (``False`` only
        as a control: a free family can never exceed its own bound).
      params: ``P = 2Lnd`` (or the subfamily's dimension ``m``).
      rank: exact rank mod ``prime`` at the point: a lower bound on the family's functional
        dimension, not the dimension itself (``probes``: what was differentiated).
      free_bound: ``b``, the proved upper bound on the free family's functional dimension.
      maximum: the family's largest possible rank (``P``, ``− nL`` for ReLU).
      narrow: for ReLU with ``n < 2d`` (GELU with ``d ≤ n < 2d``), whether
        ``det(I + W_down[:,S] W_up[S,:]) ≠ 0`` held exactly for every layer and ``S``; for GELU with
        ``n < d``, whether ``det Π_ℓ (I + ½ W_down^ℓ W_up^ℓ) ≠ 0`` (the Jacobian at 0), exactly;
        ``None`` when not checked (``n > 16`` for the subsets, biases with ``n ≥ d``, controls).
      prime, residue, order, inputs, dropped: how the exact rank was computed (see :class:`ExactRank`).
      point: the rational point: ``up``/``down``/``inputs`` numerators over ``denominator``.
      float_rank, float_gap: the float64 SVD rank at the same point and inputs and its gap
        (``None`` when not run).
      seconds: wall time.
      bias: whether both families carry biases (``params`` then counts them, step 9).
      free_stack: with ``status == "reproduced"``, the free stack (``MLPParams``, float64 arrays ``up``
        ``(L, n, 1)``, ``down`` ``(L, 1, n)``) that equals the residual stack; ``None`` otherwise. Its
        weights are ``±1``, ``0`` and the exact values ``f(1)``, ``f(−1)`` (given exactly in ``reason``).
      minor: the evidence of ``rank``: ``(rows, cols)`` of a ``rank × rank`` submatrix of the probe
        Jacobian that is nonsingular mod ``prime`` (:class:`ExactRank`'s ``minor``: rows ``(k, a, j)``,
        columns parameter indices; with a ``subfamily``, columns of ``B``: a minor of ``J B``).
        :func:`absorbjax.verify` recomputes those rows from ``point`` (times ``B``) and the
        determinant mod ``prime``.
      subfamily: the integer matrix ``B`` ``(P, m)`` of the affine family ``W_0 + B θ`` (``W_0`` the
        point) whose rank was counted; ``None`` for the whole family.
    """

    status: DepthStatus
    scope: str
    activation: str
    d: int
    n: int
    depth: int
    residual: bool
    params: int
    rank: int
    free_bound: int
    maximum: int
    narrow: bool | None
    probes: str
    prime: int
    residue: int | None
    order: int
    inputs: int
    dropped: int
    point: RationalPoint
    float_rank: int | None = None
    float_gap: float | None = None
    seconds: float = 0.0
    bias: bool = False
    free_stack: models.MLPParams | None = None
    minor: tuple | None = None
    subfamily: np.ndarray | None = None

    def __post_init__(self):  # a status outside the vocabulary is refused (ValueError)
        object.__setattr__(self, "status", DepthStatus(self.status))

    @property
    def certified(self) -> bool:
        """``status == "certified_disjoint"``."""
        return self.status == DepthStatus.CERTIFIED_DISJOINT

    def summary(self) -> str:
        fam = "residual" if self.residual else "free (control)"
        lines = [
            f"{self.status}  [method: {self.method}]  {self.reason}",
            (
                f"  {self.activation} d={self.d} n={self.n} L={self.depth}{' with biases' if self.bias else ''}: {fam} family rank >= {self.rank} "
                f"(an exact rank mod p={self.prime}, a lower bound; of {self.params} parameters, max "
                f"{self.maximum}) vs free bound b = {self.free_bound}"
            ),
            f"  probes: {self.probes}; {self.inputs} inputs ({self.dropped} on a kink dropped)"
            + (f"; c -> residue {self.residue}" if self.residue is not None else ""),
            f"  point: rational weights over {self.point.denominator} (numerators stored in the certificate)",
            f"  float64 SVD at the same point: rank {_fmt(self.float_rank)}, gap {_fmt(self.float_gap)}",
        ]
        if self.narrow is not None and self.activation == "gelu" and self.n < self.d:
            lines.append(f"  n < d: det prod_l (I + W_down W_up / 2) != 0 (the Jacobian at 0), exactly: {self.narrow}")
        elif self.narrow is not None:
            lines.append(f"  n < 2d: det(I + W_down[:,S] W_up[S,:]) != 0 for every layer and S: {self.narrow}")
        if self.free_stack is not None:
            lines.append("  free_stack: the free stack of the same width and depth equal to this residual stack")
        lines.append(f"  scope: {self.scope}")
        lines.append(f"  {self.seconds:.3g} s")
        return "\n".join(lines)

    __str__ = summary

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values."""
        out = {f.name: to_jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}
        out["point"] = to_jsonable(self.point._asdict())
        if self.free_stack is not None:
            out["free_stack"] = to_jsonable(self.free_stack._asdict())
        return out


def _default_inputs(name: str, d: int, n: int, depth: int, order: int, bias: bool = False) -> int:
    target = param_count(d, n, depth, bias=bias)
    if name == "relu":
        return max(8, math.ceil(2 * target / d))
    # at least d directions: fewer leave a direction of W_up unseen (n = 1, L = 1 lost one rank at d >= 5)
    return max(2, d, math.ceil(1.5 * target / (d * order)) + 2)


def _default_order(d: int, P: int) -> int:
    """Smallest jet order whose jet space (``d · (C(d+k, k) − 1)`` coefficients) holds ``1.5 P``."""
    k = 1
    while d * (math.comb(d + k, k) - 1) < 1.5 * P:
        k += 1
    return k + 1


def _best_rank(
    point: RationalPoint,
    name: str,
    residual: bool,
    order: int,
    max_order: int,
    maximum: int,
    prime: int,
    subfamily: np.ndarray | None,
) -> ExactRank:
    """The exact rank at ``order``; for GELU the order grows by 2 while the rank grows, up to ``max_order``."""
    best = exact_rank(point, name, residual=residual, order=order, prime=prime, subfamily=subfamily)
    while name == "gelu" and best.rank < maximum and best.order < max_order:
        nxt = exact_rank(
            point, name, residual=residual, order=min(best.order + 2, max_order), prime=prime, subfamily=subfamily
        )
        if nxt.rank <= best.rank:
            return nxt if nxt.rank == best.rank else best
        best = nxt
    return best


def _scope(name: str, params: int, subfamily: bool, bias: bool = False) -> str:
    """What a rank certificate covers (steps 3, 5 and 9)."""
    if name == "gelu":
        where = "almost all weights (a proper algebraic subset excepted: the jets are polynomials in the weights)"
        if bias:
            where = "almost all weights and biases (a null set excepted: the stack is analytic in weights and biases)"
        return f"almost all theta of the affine family W_0 + B theta ({params} parameters)" if subfamily else where
    region = (
        "the open region around the point where every probe input keeps its activation pattern (ReLU's "
        "functional dimension varies across weight space)"
    )
    if subfamily:
        return f"almost all theta of the affine family W_0 + B theta ({params} parameters) in {region}"
    return f"almost all weights in {region}"


def _verdict(
    name: str, d: int, n: int, depth: int, residual: bool, rank: int, bound: int, narrow: bool | None, scope: str
) -> tuple[str, str, str, str]:
    """``(status, method, reason, scope)``."""
    if not residual:
        reason = (
            f"a free family has rank {rank} <= its bound {bound}; nothing to certify (control)"
            if rank <= bound
            else f"free family rank {rank} EXCEEDS the proved bound {bound}: the count is wrong"
        )
        return DepthStatus.UNDECIDED, "none", reason, "nothing is claimed"
    if rank > bound:
        return (
            DepthStatus.CERTIFIED_DISJOINT,
            "rank",
            (
                f"the residual family's functional dimension is at least {rank} (an exact rank, a lower bound), above "
                f"the free bound {bound}: residual stacks that a free stack reproduces have measure zero"
            ),
            scope,
        )
    if narrow and n >= d:
        scope = (
            "almost all weights: every residual stack whose layers have det(I + W_down[:,S] W_up[S,:]) != 0 "
            "for all S (verified exactly at this point)"
            + ("; GELU via the GELU -> ReLU limit" if name == "gelu" else "")
        )
        return (
            DepthStatus.CERTIFIED_DISJOINT,
            "narrow",
            (
                f"n = {n} < 2d = {2 * d}: a free stack's Jacobian is singular on an open set, the residual stack's is "
                f"invertible on every linear region (rank count {rank} vs bound {bound} alone would not decide)"
            ),
            scope,
        )
    why = (
        "depth 1: the gauge count has no gap"
        if depth == 1
        else f"exact rank {rank} does not exceed the free bound {bound}"
    )
    reason = f"{why}; a larger rank may exist at other points, orders or inputs, or the families may meet"
    return DepthStatus.UNDECIDED, "none", reason, "nothing is claimed"


def _kink_hypotheses(point: RationalPoint, name: str) -> bool:
    """The depth-1 theorem's hypotheses at the point, exactly: every row of ``W_up`` and column of
    ``W_down`` nonzero, and the rows (ReLU: the pairs ``(W_up[i], β[i])``) pairwise non-proportional."""
    up, down = point.up[0].astype(object), point.down[0].astype(object)
    if name == "relu":
        up = np.concatenate([up, point.hidden_bias[0].astype(object)[:, None]], axis=1)
    if not (np.all(np.any(up != 0, axis=1)) and np.all(np.any(down != 0, axis=0))):
        return False
    for i in range(len(up)):
        for j in range(i):
            if not np.any(np.outer(up[i], up[j]) != np.outer(up[j], up[i])):  # all 2×2 minors vanish
                return False
    return True


def _kink_verdict(name: str) -> tuple[str, str, str, str]:
    """``(status, method, reason, scope)`` of depth 1 with biases (``docs/theory/depth.md``, 9.5)."""
    theorem = "the kink theorem" if name == "relu" else "the ray limit and the kink theorem"
    reason = (
        f"depth 1 with biases: by {theorem} (docs/theory/kink.md, ray_limit.md) a block meeting the hypotheses "
        "(checked exactly at this point) is reproduced by a free block of its width only if some S has "
        "W_down[:,S] W_up[S,:] = -I (the rank count alone would not decide)"
    )
    return (
        DepthStatus.CERTIFIED_DISJOINT,
        "kink",
        reason,
        "almost all weights and biases: blocks with such an S form a null set",
    )


def _beyond_rank(
    verdict: tuple[str, str, str, str],
    point: RationalPoint,
    name: str,
    d: int,
    n: int,
    depth: int,
    bias: bool,
    plain: bool,
    narrow: bool | None,
    det,
) -> tuple[tuple[str, str, str, str], models.MLPParams | None]:
    """``(verdict, free_stack)``: the rank count's ``verdict`` unless an argument at the residual point
    (``plain``) decides more (``dimension/_narrow.py``): the line (§10, ReLU, ``d = 1``, no biases) or
    an invertible Jacobian with ``n < d`` (§8, any depth, with or without biases); an undecided
    ``n < d`` verdict says why §8 did not decide."""
    if plain and name == "relu" and d == 1 and not bias:  # §10: the line is decided exactly
        disjoint, reason, scope, free_stack = line_decision(point, n, depth)
        return (
            DepthStatus.CERTIFIED_DISJOINT if disjoint else DepthStatus.REPRODUCED,
            "line",
            reason,
            scope,
        ), free_stack
    if n < d and narrow:  # §8: stronger than the rank count
        return (DepthStatus.CERTIFIED_DISJOINT, "narrow_jacobian", *jacobian_argument(name, d, n, det, bias)), None
    if n < d and verdict[0] == DepthStatus.UNDECIDED and (why := jacobian_undecided(narrow, plain)):
        return (*verdict[:2], f"{verdict[2]}; {why}", verdict[3]), None
    return verdict, None


def _counts(
    name: str,
    d: int,
    n: int,
    depth: int,
    residual: bool,
    bias: bool,
    params: models.MLPParams | None,
    subfamily: np.ndarray | None,
) -> tuple[int, int, int]:
    """``(P, bound, maximum)``: the parameters counted (a ``subfamily``'s ``m``), the free bound and the
    family's largest possible rank; refuses ``params`` with ``bias`` and a ``subfamily`` that is no matrix."""
    P = param_count(d, n, depth, bias=bias)
    bound = free_bound(name, d, n, depth, bias=bias)
    maximum = residual_max(name, d, n, depth, bias=bias) if residual else bound
    if bias and params is not None:
        raise ValueError("params (bias-free MLPParams) cannot be combined with bias=True")
    if subfamily is not None:
        if np.ndim(subfamily) != 2:
            raise ValueError(f"subfamily must be an integer matrix of shape ({P}, m), got {np.shape(subfamily)}")
        P = np.shape(subfamily)[1]
        maximum = min(maximum, P)
    return P, bound, maximum


def _probes(name: str, bias: bool, order: int) -> str:
    """What the exact rank differentiated."""
    if name == "gelu":
        return f"Taylor coefficients of t -> f(t x_k) at t = 0, orders {0 if bias else 1}..{order}"
    return "values f(x_k) at rational inputs off every kink (checked exactly)"


def _self_checked(cert: DepthCertificate) -> DepthCertificate:
    """``cert`` checked by :func:`absorbjax.verify` (cheap: a minor mod ``p`` recomputed, 0.6 ms the
    median certificate): a refuted one becomes ``undecided`` naming the step, as the block
    decision does; with ``ABSORBJAX_STRICT_VERIFY`` set (the test suite) a refutation raises."""
    from absorbjax import verify

    return settle(
        cert,
        verify(cert),
        who="dimension.certify",
        undecided=lambda why: dataclasses.replace(cert, status=DepthStatus.UNDECIDED, reason=why),
    )


def certify(
    activation: str,
    d: int,
    n: int,
    depth: int,
    *,
    key: jax.Array,
    residual: bool = True,
    bias: bool = False,
    subfamily: np.ndarray | None = None,
    params: models.MLPParams | None = None,
    probe: Probe = Probe(),
) -> DepthCertificate:
    """Certify (or not) that almost all residual stacks of this size are reproduced by no free
    stack of the same width and depth; on the line, decide it for the point's weights.

    Computes the exact rank of the probe Jacobian at a rational point drawn from ``key`` (a lower
    bound on the residual family's functional dimension) and compares it with :func:`free_bound`. For
    GELU the jet order grows (up to ``probe.max_order``, default ``order + 4``) until the rank reaches the
    family's maximum or stops growing. What is decided (the family, the point) is the parameters
    below; how the probe computes (jet orders, inputs, denominator, prime, ``shrink``, the float
    check) is one :class:`Probe`. Three arguments at the residual point decide more than the rank
    count (``docs/theory/depth.md``; checked exactly, ``dimension/_narrow.py``):

    - ``n < d`` (§8, with or without biases): an invertible residual Jacobian (GELU: ``det Π_ℓ (I +
      ½ D_ℓ U_ℓ) ≠ 0`` at ``0``, then for every such ``W``; ReLU: every ``det(I + D_ℓ[:,S] U_ℓ[S,:]) ≠ 0``,
      ``n ≤ 16``) excludes every free stack of width ``< d`` and any depth (``method="narrow_jacobian"``).
    - ``d ≤ n < 2d``, no biases: step 6 (``method="narrow"``).
    - ``d = 1``, ReLU, no biases (§10, ``method="line"``), decided for the point's weights:
      ``"reproduced"`` (the free stack in ``free_stack``) for ``n ≥ 2`` or ``f(1) f(−1) = 0``, else
      ``"certified_disjoint"`` (``n = 1``: no free stack of width 1, any depth).

    Args:
      activation: ``"relu"`` or ``"gelu"``.
      d, n, depth: the size (every ``d, n, depth ≥ 1``).
      key: PRNG key of the point (:func:`rational_point`).
      residual: ``False`` counts the free family instead (a control: never certified).
      bias: stacks with biases ``b_ℓ(x) = x + D_ℓ σ(U_ℓ x + β_ℓ) + γ_ℓ`` against free stacks with
        biases (step 9): the free bound loses the affine junction gauge ``(L−1)(d² + d)``, the
        residual maximum the translations ``(L−1)d``. GELU points have zero biases (the jets stay
        polynomial; their columns are still differentiated), ReLU points rational ones. Step 6 and
        the line are bias-free only; the float check composes the biased blocks of ``models``.
      subfamily: integer ``(P, m)`` matrix ``B``: certify the affine family ``W_0 + B θ``.
      params: round these ``MLPParams`` (leading ``L`` axis) to multiples of ``1/probe.denominator``
        instead of drawing the point; every exact check is of the rounded weights.
      probe: how the point is probed (a :class:`Probe`: jet orders, inputs, denominator, prime,
        ``shrink``, ``float_check``).

    Examples:
      >>> cert = certify("gelu", 2, 2, 2, key=jax.random.key(0), probe=Probe(float_check=False))
      >>> cert.status, cert.rank, cert.free_bound
      ('certified_disjoint', 16, 12)
      >>> certify("gelu", 2, 4, 1, key=jax.random.key(0), probe=Probe(float_check=False)).status
      'undecided'
      >>> narrow = certify("gelu", 3, 1, 2, key=jax.random.key(0), probe=Probe(float_check=False))
      >>> narrow.status, narrow.method
      ('certified_disjoint', 'narrow_jacobian')
      >>> line = certify("relu", 1, 2, 3, key=jax.random.key(0), probe=Probe(float_check=False))
      >>> line.status, line.method, line.free_stack.up.shape
      ('reproduced', 'line', (3, 2, 1))
    """
    start = time.perf_counter()
    if not isinstance(probe, Probe):
        raise ValueError(f"probe must be an absorbjax.dimension.Probe, got {type(probe).__name__}")
    name = check_sizes(activation, d, n, depth)
    P, bound, maximum = _counts(name, d, n, depth, residual, bias, params, subfamily)
    order, max_order = jet_orders(probe, _default_order(d, P)) if name == "gelu" else (1, 1)
    k_inputs = probe.inputs if probe.inputs is not None else _default_inputs(name, d, n, depth, order, bias)
    float_check = probe.float_check
    # The float check needs K d >= P outputs; the jets use the first k_inputs directions.
    k_float = max(k_inputs, math.ceil(2 * param_count(d, n, depth, bias=bias) / d)) if float_check else k_inputs
    point_bias = None if not bias else ("zero" if name == "gelu" else "gaussian")
    q, s = probe.denominator, probe.shrink
    full = rational_point(d, n, depth, key=key, inputs=k_float, denominator=q, params=params, shrink=s, bias=point_bias)
    point = full._replace(inputs=full.inputs[:k_inputs])
    best = _best_rank(point, name, residual, order, max_order, maximum, probe.prime, subfamily)
    plain = residual and subfamily is None  # the narrow and line arguments are about one residual point
    narrow, det = narrow_check(point, name, d, n, bias) if plain else (None, None)
    fr = float_rank(full, name, residual=residual) if float_check and subfamily is None else None
    verdict = _verdict(
        name, d, n, depth, residual, best.rank, bound, narrow, _scope(name, P, subfamily is not None, bias)
    )
    verdict, free_stack = _beyond_rank(verdict, point, name, d, n, depth, bias, plain, narrow, det)
    if bias and depth == 1 and plain and verdict[0] == DepthStatus.UNDECIDED and _kink_hypotheses(point, name):
        verdict = _kink_verdict(name)  # depth 1 with biases: the one-block theorem decides
    # DepthCertificate's fields in order: (status, method, reason, scope), the size, the exact rank, the float rank.
    probes = _probes(name, bias, best.order)
    exact = (best.rank, bound, maximum, narrow, probes, best.prime, best.residue, best.order, best.inputs, best.dropped)
    floats = (None, None) if fr is None else (fr.rank, fr.gap)
    fields = (*verdict, name, d, n, depth, residual, P, *exact, point, *floats, time.perf_counter() - start, bias)
    B = None if subfamily is None else np.asarray(subfamily)
    return _self_checked(DepthCertificate(*fields, free_stack, minor=best.minor, subfamily=B))
