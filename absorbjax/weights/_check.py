"""Decide one block read from a checkpoint: the single rule behind ``absorbjax check`` and the
experiments.

The block ``x ↦ x + W_down σ(W_up x + b) + c`` (``b`` ``(n,)`` the hidden bias, ``c`` ``(d,)`` the
output bias; gated: ``W_down (g(W_gate x + b_g) ⊙ (W_value x + b_v)) + c``):

* the hidden bias ``b`` is passed to the decision (:func:`absorbjax.condition.distance` /
  :func:`~absorbjax.condition.find_absorbing_set`), which says what it proves with it;
* the output bias ``c`` is never used: a residual-free block of the same kind has its own output
  bias, so ``c`` can be matched by it whatever ``W`` is (``find_absorbing_set``'s docstring); the
  result names the tensor so that nothing is silent;
* gated blocks are decided by Prop 6 (and homogeneous ones by Prop 5) without reading a weight
  when they have no hidden bias; with one, those theorems do not apply and the answer is
  ``undecided``. For a user's activation they answer only on declared facts (``degree``;
  ``gate_at_zero`` and ``smooth_at_zero``), listed in :attr:`BlockCheck.assumes`; an undeclared
  one leaves the block ``undecided`` and the reason names it;
* a 1-D tensor of shape ``(n,)`` or ``(d,)`` beside the block that no name rule read as a bias
  (:attr:`Block.unread`) may be one; a ``not_absorbable`` decided without it stays so where the
  activation's converse covers every hidden bias (Thm 8 via the ray limit: relu, gelu, gelu_tanh,
  silu, softplus), else becomes ``undecided`` (an absorbing ``S`` stays valid with any hidden bias:
  flip ``(w_i, b_i)`` for ``i ∈ S``);
* a tensor of the block stored as integers (``int8``, ``I32``, ``bool``, …; whatever the container)
  is refused naming it, before anything is read: integers are never read as weights or biases.
  ONNX integer weights with their scale reach here dequantised (dtype ``int8 (dequantised)``) and
  GGUF block types dequantised, so neither is an integer tensor;
* the names in a :class:`BlockCheck` and in its errors are made printable
  (:func:`~absorbjax.weights._conventions.printable`: control characters and surrogates escaped),
  so that a name from a file cannot forge a row of a table or reach a terminal raw.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import numpy as np

from absorbjax.results import Verdict
from absorbjax.weights import _limits as limits
from absorbjax.weights._conventions import printable
from absorbjax.weights._model import INTEGERS, Block, integer_message

if TYPE_CHECKING:
    from absorbjax.condition import Certificate, Decision, FoundBy, Status, WithinRounding


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class BlockCheck(Verdict):
    """The answer for one block.

    ``status`` / ``method`` / ``reason``: as in :class:`absorbjax.condition.Certificate`
    (``method="theorem"`` for Prop 5/6; ``status`` a :class:`~absorbjax.condition.Status`, and
    ``within_rounding`` a :class:`~absorbjax.condition.WithinRounding` or ``None``). ``lower`` / ``upper`` / ``S``: the certified lower and
    attained upper bounds on ``min_S ‖W_down[:,S] W_up[S,:] + A‖_F / ‖A‖_F`` and the best set
    found (ungated blocks, ``None`` otherwise), and how it was found (``S_method``, a
    :class:`~absorbjax.condition.FoundBy`: ``exact``, ``exhaustive``, ``local``, ``frank-wolfe`` or
    ``greedy``, see :class:`absorbjax.condition.Distance`). ``hidden_bias`` / ``output_bias``: the tensor
    names read as ``b`` and ``c`` (``None``: the file has none under any name rule); ``unread``:
    1-D tensors beside the block that may be biases. ``certificate``: the decision's
    :class:`~absorbjax.condition.Certificate` (``None`` for a block decided by theorem).
    ``assumes``: the declarations of a user's activation that the answer rests on, as
    :attr:`absorbjax.condition.Certificate.assumes`: the certificate's for a decided ungated block,
    the declared degree (Prop 5) or ``g(0) = 0`` and differentiability at 0 (Prop 6) for a block
    decided by theorem; empty for the built-ins, whose facts are proved, and for an answer that
    rests on no declaration.
    """

    # the block, as the file names and stores it
    layer: int
    name: str
    convention: str
    residual: bool | None = None
    d: int
    n: int
    dtype: str
    unread: tuple[str, ...] = ()
    activation: str
    activation_source: str
    """The registered activation name and where it was read from."""
    # the answer: status (typed here), method, reason (from Verdict), and
    status: Status = dataclasses.field(kw_only=False)
    lower: float | None = None
    upper: float | None = None
    S: list[int] | None = None
    S_method: FoundBy | None = None
    within_rounding: WithinRounding | None = None
    assumes: tuple[str, ...] = ()
    certificate: Certificate | None = None
    seconds: float = 0.0
    # the biases read beside the weights
    hidden_bias: str | None = None
    hidden_bias_nonzero: bool = False
    output_bias: str | None = None

    def __post_init__(self):  # the decision's vocabularies; a word outside them is refused (ValueError)
        from absorbjax.condition import FoundBy, Status, WithinRounding

        object.__setattr__(self, "status", Status(self.status))
        if self.within_rounding is not None:
            object.__setattr__(self, "within_rounding", WithinRounding(self.within_rounding))
        if self.S_method is not None:
            object.__setattr__(self, "S_method", FoundBy(self.S_method))

    def _summary(self) -> str:
        """The short repr (:class:`absorbjax.results.Result`): the block, the answer, the bounds."""
        bounds = "" if self.lower is None else f", distance {self.lower:.3g} … {self.upper:.3g}"
        block = f"{self.name} (layer {self.layer}, {self.activation}, d = {self.d}, n = {self.n})"
        return f"{block}: {self.status} by {self.method}{bounds}; {self.reason}"

    def to_dict(self) -> dict:
        """Every field, JSON-ready; ``certificate`` by its own :meth:`~absorbjax.condition.Certificate.to_dict`."""
        out = super().to_dict()
        if self.certificate is not None:
            out["certificate"] = self.certificate.to_dict()
        return out


def _theorem(block: Block, act, hidden_nonzero: bool) -> dict:
    from absorbjax.condition import Status

    if act.never_absorbs and not hidden_nonzero and not block.unread:
        return {
            "status": Status.NOT_ABSORBABLE,
            "method": "theorem",
            "reason": act.result,
            "assumes": act._result_assumes(),
        }
    if act.never_absorbs:
        why = (
            "it has a nonzero hidden bias"
            if hidden_nonzero
            else f"the unread tensor(s) {_names(block.unread)} may be hidden biases"
        )
        return {
            "status": Status.UNDECIDED,
            "method": "theorem",
            "reason": f"Prop 5/6 are proved for bias-free blocks; {why}",
        }
    return {"status": Status.UNDECIDED, "method": "theorem", "reason": act.result}


def _working_bytes(block: Block) -> int:
    """The decision's own memory beyond the stored block, checked against the budget before it runs:
    below ``SCREEN_MIN_N`` units the Gram path always runs, with float64 copies of ``W_up`` and
    ``W_down`` (``2·8·n·d`` bytes) and a few ``n × n`` float64 matrices (``4·8·n²``). Wider blocks
    are read in blocks of units by the screen (memory maps are not allocations)."""
    from absorbjax.condition import _wide as wide

    n, d = block.n, block.d
    if n >= wide.SCREEN_MIN_N:
        return 0
    return limits.array_bytes((16 * n * d + 32 * n * n,), 1, f"deciding {printable(block.name, 80)} (n = {n}, d = {d})")


def _condition(block: Block, skip, decision: Decision | None, distance: bool) -> dict:
    from absorbjax import activations, condition
    from absorbjax.condition import Status

    _working_bytes(block)
    bias = block.hidden_bias
    decision = dataclasses.replace(decision or condition.Decision(), narrow=True)  # the reader fixed the layout
    if distance:
        dist = condition.distance(block.params, block.activation, skip=skip, bias=bias, decision=decision)
        cert = dist.certificate
        out = {"lower": dist.lower, "upper": dist.upper, "S": dist.S.tolist(), "S_method": dist.method}
    else:
        cert = condition.find_absorbing_set(block.params, block.activation, skip=skip, bias=bias, decision=decision)
        out = {"S": None if cert.S is None else cert.S.tolist()}
    out.update(
        status=cert.status,
        method=cert.method,
        reason=cert.reason,
        within_rounding=cert.rounding.within,
        assumes=tuple(cert.assumes),
        certificate=cert,
    )
    covered = block.activation is not None and activations.get(block.activation).converse(biased=True)
    if block.unread and cert.status == Status.NOT_ABSORBABLE and covered:
        out.update(
            reason=f"{cert.reason}; the unread tensor(s) {_names(block.unread)} cannot change this: "
            f"{covered} decides the block with any hidden bias"
        )
    elif block.unread and cert.status == Status.NOT_ABSORBABLE:
        out.update(
            status=Status.UNDECIDED,
            reason=f"{cert.reason}; but decided without the unread tensor(s) "
            f"{_names(block.unread)}, which may be hidden biases (name them <role>.bias to have them read)",
        )
    return out


def reads_weights(block: Block) -> bool:
    """Whether :func:`check` reads the block's tensors: always, except for a gated block without a
    hidden bias, which Prop 6 decides from its activation alone (its weights are never read, so
    neither their values nor NaN in them enter the answer)."""
    return not block.gated or any(r != "down" for r in block.bias_names)


def _integers(block: Block) -> None:
    """``ValueError`` naming the first tensor of ``block`` stored as integers, from the stored dtypes
    (before anything is read), and, for a read block, from the arrays themselves (a block built by
    hand, not by :func:`~absorbjax.weights.scan`, which refuses them already)."""
    stored = getattr(block, "_ckpt", None)
    for key, tname in block.tensors.items():
        t = stored.tensors.get(tname) if stored is not None else None
        if t is not None and INTEGERS.fullmatch(str(t.dtype)):
            raise ValueError(integer_message(key, tname, t.dtype))
    if block.params is None:
        return
    arrays = dict(block.params._asdict()) | {f"{r}_bias": b for r, b in block.biases.items()}
    for key, a in arrays.items():
        dtype = np.asarray(a).dtype
        if dtype.kind in "iub":  # a fused gate/value tensor was split on reading: name the stored one
            fused = "gate_value_bias" if key.endswith("_bias") else "gate_value"
            raise ValueError(integer_message(key, block.tensors.get(key) or block.tensors.get(fused, key), dtype))


def _names(names) -> str:
    return ", ".join(printable(n, 120) for n in names)


def check(block: Block, *, skip=None, decision: Decision | None = None, distance: bool = True) -> BlockCheck:
    """Decide one block of a checkpoint (:func:`absorbjax.weights.scan`), reading it if needed.

    Args:
      block: a :class:`~absorbjax.weights.Block`, read or not (gated blocks without a hidden bias
        are decided by Prop 6 without reading a weight: :func:`reads_weights`).
      skip: ``A`` ``(d, d)``; ``None`` is ``I``.
      decision: how to decide, a :class:`absorbjax.condition.Decision` (``None``: ``Decision()``,
        left out of the signature so that importing ``weights`` does not import ``condition``),
        passed to :func:`absorbjax.condition.distance` (or ``find_absorbing_set``); its
        ``time_limit`` is one deadline for the block's search stages (MILP, enumeration, storage
        rounding) and the distance's box relaxation and search; reading the weights and the Gram
        relaxation run outside it (docs/guides/checkpoints.md, "Time").
      distance: also bound ``min_S ‖W_down[:,S] W_up[S,:] + A‖_F / ‖A‖_F`` (ungated blocks).

    Returns a :class:`BlockCheck` (names made printable); see the module docstring for how biases
    enter. Problems with the block (a skip of the wrong size, NaN weights, a tensor stored as
    integers) raise ``ValueError`` naming the file and layer.
    """
    from absorbjax import activations

    start = time.perf_counter()
    act = activations.get(block.activation)
    names = block.bias_names
    hidden = {r: t for r, t in names.items() if r != "down"}
    try:
        _integers(block)
        if reads_weights(block):
            block = block.load()
            _integers(block)
        nonzero = any(np.any(np.asarray(b, np.float64) != 0) for r, b in block.biases.items() if r != "down")
        if block.gated or act.family != "ungated" or (act.never_absorbs and not nonzero):
            found = _theorem(block, act, nonzero)
        else:
            found = _condition(block, skip, decision, distance)
    except ValueError as err:
        where = f"{printable(block.path)}: layer {block.layer} ({printable(block.name, 120) or 'block'})"
        raise ValueError(f"{where}: {err}") from None
    hidden_bias = next(iter(hidden.values()), None)
    return BlockCheck(
        layer=block.layer,
        name=printable(block.name),
        convention=block.convention,
        d=block.d,
        n=block.n,
        activation=block.activation,
        activation_source=printable(block.activation_source),
        dtype=printable(block.dtype),
        hidden_bias=None if hidden_bias is None else printable(hidden_bias),
        hidden_bias_nonzero=bool(nonzero),
        output_bias=None if names.get("down") is None else printable(names["down"]),
        unread=tuple(printable(u) for u in block.unread),
        residual=block.residual,
        seconds=time.perf_counter() - start,
        **found,
    )


def gaussian_like(params, *, seed: int = 0):
    """Gaussian ``MLPParams`` of the shapes of ``params`` (``W_up (n, d)``, ``W_down (d, n)``) with
    their Frobenius norms, float64 (NumPy ``default_rng(seed)``): the norm-matched reference."""
    from absorbjax.models import MLPParams

    rng = np.random.default_rng(seed)
    U, D = (np.asarray(a, np.float64) for a in (params.up, params.down))
    Ug, Dg = rng.standard_normal(U.shape), rng.standard_normal(D.shape)
    return MLPParams(Ug * (np.linalg.norm(U) / np.linalg.norm(Ug)), Dg * (np.linalg.norm(D) / np.linalg.norm(Dg)))
