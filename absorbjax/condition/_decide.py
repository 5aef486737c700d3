"""The decision of Thm 8/10 (Lemma 4 for a skip ``A``), with a certificate; the absorber it
promises is built in :func:`~absorbjax.condition.absorber` (``condition/_absorber.py``)."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from absorbjax._fingerprint import fingerprint
from absorbjax._self_check import settle, strict
from absorbjax._verify import verify
from absorbjax.condition import _hypotheses as hyp, _line as line, _screen as screen, _wide as wide
from absorbjax.condition._arith import ONE, rank_lower, sigma_min_lower
from absorbjax.condition._assemble import Answer, certificate
from absorbjax.condition._block import BlockContext, StoredBlock, per_draw, read_block
from absorbjax.condition._certificate import (
    Certificate,
    Evidence,
    Promise,
    Status,
)
from absorbjax.condition._gram_path import SMALL_N, gram
from absorbjax.condition._options import Decision
from absorbjax.condition._rule import Rule
from absorbjax.condition._screen_path import screened
from absorbjax.condition._text import fmt
from absorbjax.condition._validate import float_weights
from absorbjax.condition._verdict import Established, given, status_of
from absorbjax.models import MLPParams, check_layout

# ---------------------------------------------------------------------------------------------
# The decision

SELF_CHECK_MAX = 2**16  # n d² up to which the decision verifies its own certificate (absorbjax.verify)


def decide(block: StoredBlock, decision: Decision, *, deadline: float | None = None):
    """The decision on ``block`` (:class:`StoredBlock`: ``W_up (n, d)``, ``W_down (d, n)``, ``A (d, d)``) with the checked
    ``decision``'s ``rtol``, ``skip_rtol``, ``method`` and ``time_limit``; returns
    ``(Certificate, Relaxation)`` (``Relaxation`` ``None`` when the screen decided). The weights are
    balanced first (exact, :func:`_arith.balance`).

    ``block.up, block.down`` are float64, or (``n ≥ wide.SCREEN_MIN_N``) the stored arrays in their
    own dtype, often memory-mapped: the wide screen reads them in blocks of units, balanced block by
    block (``block.scales``); float64 copies are made only for the Gram path (``block.float64``).

    One deadline, ``deadline`` (``time.perf_counter()``; ``None``: ``decision.time_limit`` seconds
    from now), bounds the whole decision: the search for the status and the storage-rounding search
    of ``cert.rounding`` each get the seconds left (:func:`_gram_path.search`), and a stage with none left
    answers ``undecided`` (the status) or ``rounding.within = "undecided"``. Not interrupted, and so
    outside the limit: reading the weights (before this), the ``O(n d²)`` screen, the Gram relaxation
    (``O(n² d + n³)``, ``n < 8192``), the box relaxation (a bounded number of steps), an enumeration
    of ``2^n`` subsets once begun (``n ≤ 24``) and the certificate (rule (E) on a found set)."""
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):  # out-of-range values are bounded, never trusted
        return _decide(block, decision, deadline=deadline)


def _decide(block: StoredBlock, decision: Decision, *, deadline: float | None = None):
    """:func:`decide`, under its floating-point error state."""
    t0 = time.perf_counter()
    U, D, A, context = block.up, block.down, block.skip, block.context
    n, d = U.shape
    rtol, skip_rtol, method = decision.rtol, decision.skip_rtol, decision.method
    deadline = t0 + decision.time_limit if deadline is None else deadline
    rule = Rule.of(A, rtol, ONE if context.slope is None else context.slope)  # c·W_down[:,S] W_up[S,:] = −A
    on_line = line.applies(d, n, context.bias is not None, context.activation)
    if on_line and n > SMALL_N:  # the line theorem needs no S; a search for one is subset sum
        return _evidenced(_line_certificate(block, rule, None, skip_rtol=skip_rtol, t0=t0), None, block), None
    every = every_width(A, context, n)
    timings: dict[str, float] = {}
    if method == "auto" and n >= wide.SCREEN_MIN_N:  # O(n d²) first; the Gram path only if undecided
        t = time.perf_counter()
        nu = screen.norm_sum(U, D, scales=block.scales.total)  # τ at any rtol from here on, without a pass
        scr = wide.wide_screen(U, D, rule, scales=block.scales, nu=nu)
        if scr is not None:
            res = screened(block, rule, scr, nu=nu)
            cert = certificate(res, rule, context, shape=U.shape, skip_rtol=skip_rtol, t0=t0, every=every)
            return _evidenced(cert, res, block), None
        timings["screen"] = time.perf_counter() - t
    rank = rank_lower(A) if n < d and context.skip_kind == "matrix" else None
    res, rel = gram(block, rule, method=method, deadline=deadline, timings=timings, rank=rank)
    cert = certificate(res, rule, context, shape=U.shape, skip_rtol=skip_rtol, t0=t0, every=every)
    if on_line and cert.status != Status.ABSORBABLE:
        cert = _line_certificate(block, rule, cert, skip_rtol=skip_rtol, t0=t0)
    return _evidenced(cert, res, block), rel


def _evidenced(cert: Certificate, res: Answer | None, block: StoredBlock) -> Certificate:
    """``cert`` with its :class:`Evidence` (the block's fingerprint; for "no S" the strategy's witness
    when its bound (D) clears the threshold of rule (★), which also raises ``lower_bound`` where it is
    larger), checked by :func:`absorbjax.verify` when
    ``n d² ≤`` :data:`SELF_CHECK_MAX`: a refuted certificate becomes ``undecided`` saying which step
    failed. With ``ABSORBJAX_STRICT_VERIFY`` set, as the test suite does, every certificate is checked,
    whatever its size (exactly up to ``SELF_CHECK_MAX`` multiply-adds, float64 with error bounds
    beyond), and a refuted one raises.
    ``block``: as given to :func:`decide` (float64 or the stored arrays)."""
    U, D, A, context = block.up, block.down, block.skip, block.context
    skip = None if context.skip_kind == "identity" else A
    Z, point, bound = None, None, None
    if res is not None and cert.status in (Status.NOT_ABSORBABLE, Status.DEGENERATE) and cert.method != "rank":
        found = res.path.witness()
        if found is not None and found[2] > cert.threshold:
            Z, point, bound = found
    lower = cert.lower_bound if bound is None else max(cert.lower_bound, bound)  # the witness is certified too
    fp = fingerprint(U, D, skip, context.bias, context.out_bias, dtypes=context.dtypes)
    cert = dataclasses.replace(cert, evidence=Evidence(fp, Z, bound, point), lower_bound=lower)
    n, d = U.shape
    if n * d * d > SELF_CHECK_MAX and not strict():
        return cert
    # the weights are the ones just hashed: checked without the fingerprint, so they are not hashed twice
    bare = dataclasses.replace(cert, evidence=Evidence("", Z, bound, point))
    check = verify(bare, (U, D), skip=skip, bias=context.bias, out_bias=context.out_bias, budget=SELF_CHECK_MAX)
    return settle(
        cert,
        check,
        who="the block decision",
        undecided=lambda why: dataclasses.replace(  # nothing it claimed is kept: the bound may be what failed
            cert, status=status_of(Established.REFUTED), S=None, line=None, theorem=None, reason=why, lower_bound=0.0
        ),
    )


def every_width(A, context: BlockContext, n: int) -> bool:
    """Whether only the every-width theorems may be cited for "no ``S``" (the kink theorem, or it
    via the ray limit; :meth:`Activation.converse` with ``narrow=True``): the paper's Thm 8/10 (and
    Thm 8 via the ray limit, which reduces to it) are stated for ``d ≥ 2``, ``n ≥ d`` and, through
    Lemma 4, an invertible skip. So: ``n < d``, ``d = 1``, or a skip ``A`` not proved invertible
    (:func:`_arith.sigma_min_lower` is 0: singular, or too ill-conditioned to tell)."""
    d = A.shape[0]
    if n < d or d < 2:
        return True
    return context.skip_kind == "matrix" and not sigma_min_lower(A) > 0


def _line_certificate(block: StoredBlock, rule: Rule, cert, *, skip_rtol, t0) -> Certificate:
    """The line theorem's certificate (``docs/theory/kink.md``, "The line, d = 1") for a bias-free
    kink block with ``d = 1``, ``n ≥ 2``: ``absorbable`` with the exact absorber
    :class:`_line.LineAbsorber` (``S = None``). ``cert``: the decision's certificate when the search
    ran (no ``S`` was found), whose evidence is kept; ``None`` when it did not (``n > 16``)."""
    U, D, context = block.up, block.down, block.context
    n = U.shape[0]
    p, q = line.kink_slopes(context.activation)
    U1, D1 = block.float64
    ln = line.line_absorber(U1, D1, float(rule.A[0, 0]), p, q)
    assumes = context.assumes
    theorem = given(line.LINE_THEOREM, context)
    searched = (
        f"no S has c·W_down[:,S] W_up[S,:] = −A ({cert.method}), but none is needed"
        if cert is not None
        else f"no S searched (n = {n} > {SMALL_N}; the line theorem needs none)"
    )
    why = (
        f"d = 1 and {context.activation} has a kink (p = {float(p)!r}, q = {float(q)!r}, p² ≠ q²): the block is "
        "positively homogeneous, f(x) = f(1)·x for x >= 0 and f(−1)·|x| for x <= 0, and the free block "
        "V_up = (1, −1, 0, …)ᵀ, V_down = (α₁, α₂, 0, …) with [[p, −q], [−q, p]] α = (f(1), f(−1)) equals it "
        f"(α exact, rounded once: sup |absorber(x) − block(x)|/|x| <= {fmt(ln.miss_bound)}); {searched}"
    )
    common = dict(
        status=status_of(Established.LINE),
        S=None,
        method="line",
        reason=why,
        theorem=theorem,
        assumes=assumes,
        promise=Promise(ln.miss_bound, True, 0.0, skip_rtol),
        line=ln,
        seconds=time.perf_counter() - t0,
    )
    if cert is not None:
        return dataclasses.replace(cert, **common)
    failed, _ = hyp.blockwise(U, D)
    return Certificate(
        d=1,
        n=n,
        rtol=rule.rtol,
        threshold=rule.threshold(U1, D1),
        residual=None,
        lower_bound=0.0,
        nondegenerate=not failed,
        failed=failed,
        relaxation=None,
        skip=context.skip_kind,
        stored_dtype="/".join(dict.fromkeys(map(str, context.dtypes))),
        activation=context.activation,
        **common,
    )


def find_absorbing_set(
    params: MLPParams,
    activation: str | None = None,
    *,
    skip=None,
    bias=None,
    out_bias=None,
    decision: Decision = Decision(),
) -> Certificate:
    """Decide whether some ``S`` has ``W_down[:,S] W_up[S,:] = −A`` (Thm 8/10, Lemma 4, and
    Thm 8 via the ray limit for biased blocks and gelu_tanh, silu, softplus).

    The block is ``params`` with its ``skip`` and biases; how to decide is one :class:`Decision`,
    ``decision`` (``find_absorbing_set(params, "relu", decision=Decision(method="milp"))``), the
    same object every entry point that decides takes.

    Args:
      params: one ungated block, ``up`` = ``W_up`` ``(n, d)``, ``down`` = ``W_down`` ``(d, n)``
        (NumPy or JAX, any real dtype; decided in float64 on the stored values, the stored dtype is
        recorded). A leading draws axis belongs to :func:`find_absorbing_sets`; gated params raise.
      activation: optional name; gated and homogeneous activations raise, since other results
        decide them. The theorem that reads "no S" is :meth:`activations.Activation.converse`:
        Thm 8 (relu), Thm 10 (gelu), Thm 8 via the ray limit (gelu_tanh, silu, softplus, and every
        biased block of these five), the kink theorem (leaky_relu; every activation with a kink or
        ray limit when ``n < d``); an activation with no declared odd slope, or neither a ray limit
        nor a kink, gets ``undecided``; a user's declared facts are listed in ``cert.assumes``.
        Without a name, "no S" is read with these theorems (the five activations).
      skip: ``A`` ``(d, d)``; ``None`` is ``I``. Any finite ``A`` (singular, ill-conditioned, zero):
        the kink theorem allows every skip. ``rank A > n`` (exact for ``d ≤ 512``) proves "no S"
        (method ``"rank"``); a skip not proved invertible is read with the every-width theorems
        (the kink theorem, or it via the ray limit), never the paper's Thm 8/10; rule (E) needs
        ``σ_min(A) > 0`` certified, else an exact miss 0 (``A = 0``: ``S = ∅``, the block is
        residual-free), else ``undecided``.
      bias: the hidden bias ``b`` ``(n,)`` of ``σ(W_up x + b)``, if the block has one (an all-zero
        ``b`` is bias-free). An ``S`` gives the absorber (flip ``(w_i, b_i)`` for ``i ∈ S``; the
        output bias ``c`` becomes ``c + W_down[:,S] b[S]``: :func:`absorber_biases`); "no S" is
        ``not_absorbable`` by Thm 8 via the ray limit (any output bias ``c``, any free biases of the
        absorber). Parallel rows are ``degenerate``, except for kink activations (relu,
        leaky_relu) whose biases keep the kink hyperplanes distinct: the kink theorem
        (``docs/theory/kink.md``). The output bias ``c`` never changes the answer.
      out_bias: the output bias ``c`` ``(d,)`` (``None``: 0). It never changes the status; an
        ``absorbable`` certificate's ``offset_bound`` bounds ``‖absorber(0) − block(0)‖``, the
        rounding of the output bias ``e = c + W_down[:,S] b[S]`` that :func:`absorber_biases` returns
        (0 where ``e`` is exact), so ``‖absorber(x) − block(x)‖ ≤ miss_bound·‖x‖ + offset_bound``.
      decision: how to decide, a :class:`Decision`; its fields:

        - ``rtol``: the slack of rule (★) (module docstring), in ``[0, 0.5)``; default ``1e3·eps64``.
        - ``time_limit``: seconds for the whole decision, the storage-rounding search of ``cert.rounding``
          included: one deadline, taken when the weights have been read, that each search stage (the
          MILP, the enumeration after it, then the search with storage rounding's ``rtol``) gets what is
          left of; reaching it gives ``"undecided"`` (or ``rounding.within = "undecided"``), never a
          guess. Outside it: reading the weights, the relaxations (``O(n² d + n³)``, bounded work), an
          enumeration once begun (``n ≤ 24``) and the certificate's assembly, so the call returns
          within ``time_limit`` plus these (about 2.5 s at ``d = 8, n = 2048`` on two cores).
        - ``method``: ``"auto"`` (relaxations, rounding, then enumeration or MILP), ``"relaxation"``
          (relaxations and rounding only), ``"milp"`` (straight to the MILP; an infeasible verdict is
          confirmed by enumeration for ``n ≤ 24``) or ``"exhaustive"`` (all ``2^n`` subsets, ``n ≤ 24``).
        - ``skip_rtol``: rule (E): ``absorbable`` promises ``‖absorber(x) − block(x)‖ ≤ ‖M_S‖_2 ‖x‖`` with
          ``‖M_S‖_2 ≤ skip_rtol · σ_min(A)`` (default ``1e-6``), ``M_S`` the exact miss; a set that
          passes rule (★) but not this is ``undecided`` (cancellation float64 cannot resolve).
        - ``narrow``: a block narrower than its input (``n < d``) is decided either way (the kink theorem
          holds at every width), but warns (:class:`models.NarrowBlockWarning`: flax kernels are
          ``(in, out)``, use ``MLPParams.from_flax``) unless ``narrow=True`` says it is meant.

    Returns:
      a :class:`Certificate`; ``str(cert)`` is a readable summary, ``cert.to_dict()`` is JSON.

    Examples:
      >>> import jax
      >>> from absorbjax import condition, models
      >>> with jax.enable_x64(True):
      ...     params, S = models.planted("relu", 2, 4, key=jax.random.key(0))
      ...     generic = models.init("relu", 2, 4, key=jax.random.key(1))
      >>> cert = condition.find_absorbing_set(params, "relu")
      >>> cert.status, cert.S.tolist() == S.tolist()
      ('absorbable', True)
      >>> condition.find_absorbing_set(generic, "relu").status
      'not_absorbable'

      ``d = 1``: every bias-free relu or leaky_relu block of width ``n ≥ 2`` absorbs (the line theorem):

      >>> import numpy as np
      >>> line = models.MLPParams(np.array([[0.5], [-2.0]]), np.array([[1.5, 0.25]]))
      >>> cert = condition.find_absorbing_set(line, "relu")
      >>> cert.status, cert.method, cert.theorem, cert.line.alpha
      ('absorbable', 'line', 'the line (d = 1, kink activation, n >= 2)', (1.75, -0.5))

    References:
      Mijoski & Karbevski (2026), Thm 8 (ReLU), Thm 10 (GELU), Lemma 4 (invertible skips).
    """
    block = read_block(params, activation, skip, bias, out_bias)
    check_layout(params, narrow=decision.narrow)  # after read_block's checks of the shapes
    return decide(block, decision)[0]


def find_absorbing_sets(
    params: MLPParams,
    activation: str | None = None,
    *,
    skip=None,
    bias=None,
    out_bias=None,
    decision: Decision = Decision(),
    progress: bool = True,
) -> list[Certificate]:
    """:func:`find_absorbing_set` for each block along a leading draws axis (``models.sample``).

    ``params.up`` ``(draws, n, d)``, ``params.down`` ``(draws, d, n)``. The arguments are
    :func:`find_absorbing_set`'s, except that ``skip`` is ``None``, one ``(d, d)`` matrix for all draws or ``(draws, d, d)``, ``bias`` one
    ``(n,)`` or ``(draws, n)``, and ``out_bias`` one ``(d,)`` or ``(draws, d)``; ``narrow`` warns
    once for all draws.
    A plain loop: small blocks take about two milliseconds each, the certificate's self-check
    included (``d = 3, n = 12``: 300 draws in 0.63 s on one core, ``benchmarks/bench_condition.py``),
    so a batched eigensolver would not change the picture; the MILP, when needed, is per draw anyway.
    ``progress`` shows a tqdm bar over the draws (the MILP can take up to ``time_limit`` each).
    """
    U, _, _ = float_weights(params, batched=True)
    draws, n, d = U.shape
    up, down = np.asarray(params.up), np.asarray(params.down)  # sliced below as stored, without a dispatch a draw
    check_layout(params, narrow=decision.narrow)  # warned once, here, for all draws
    skips = per_draw(skip, (d, d), draws, "skip")
    biases = per_draw(bias, (n,), draws, "bias")
    outs = per_draw(out_bias, (d,), draws, "out_bias")
    from absorbjax._progress import tqdm

    return [
        find_absorbing_set(
            MLPParams(up[k], down[k]),
            activation,
            skip=skips[k],
            bias=biases[k],
            out_bias=outs[k],
            decision=dataclasses.replace(decision, narrow=True),
        )
        for k in tqdm(range(draws), desc="find_absorbing_sets", unit="draw", disable=not progress)
    ]
