"""The search's settings: public option types, argument validation, the static configuration.

:func:`validate` checks every argument of :func:`absorbjax.fit.search` once, eagerly, with a
one-line ``ValueError`` naming the argument, and returns a :class:`Setup`: the hashable
:class:`Static` configuration that the jitted draw function specialises on, the target and
the per-draw arrays with a leading draws axis.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from absorbjax import activations, models
from absorbjax.models import GatedParams, MLPParams, Params
from absorbjax.results import Word


class Init(Word):
    """How a search's restarts start: :attr:`Solver.init` names ``"random"`` or ``"warm"``;
    ``"given"`` is recorded when candidate params were passed. A ``str``: records hold the value.
    """

    RANDOM = "random"
    WARM = "warm"
    GIVEN = "given"


class PolishMethod(Word):
    """:attr:`Polish.method`: ``"auto"`` until :meth:`Polish.resolve` picks ``"lbfgs"`` or
    ``"gauss_newton"``. A ``str``: records hold the value."""

    AUTO = "auto"
    LBFGS = "lbfgs"
    GAUSS_NEWTON = "gauss_newton"


class Method(Word):
    """:attr:`Solver.method`, how each restart is searched. A ``str``: records hold the value.

    ``"varpro"`` (the default): variable-projection Levenberg–Marquardt with a free linear term,
    the units negated that best remove it, a residual-free polish (:mod:`absorbjax.fit._projected`).
    ``"adam"``: optax's first-order phase on all weights, then a :class:`Polish`.
    """

    VARPRO = "varpro"
    ADAM = "adam"


INITS = (Init.RANDOM.value, Init.WARM.value)
METHODS = tuple(m.value for m in Method)
DEFAULT_STEPS = {Method.VARPRO: 100, Method.ADAM: 200}
DEFAULT_HOPS = {Method.VARPRO: 3, Method.ADAM: 0}
POLISH_METHODS = tuple(m.value for m in PolishMethod)


class Inputs(NamedTuple):
    """Where the loss is measured, per draw.

    Attributes:
      num: training inputs ``x_k`` per draw (``None``: ``max(256 L, 2 P / d)``
        for a depth-``L`` candidate with ``P`` parameters, so there are at least twice as many
        residuals as unknowns, and a stack's narrow regions between kinks are sampled: planted relu
        (2,4) stacks, 8 draws, with 256 inputs two fits exact on them missed held-out inputs by
        1e-8 and 1e-13; for one block at ``d = 2`` at least ``16 n²``).
      low, high: radii ``‖x‖`` are log-uniform on ``[low, high]``.
      holdout: held-out inputs per radius decade for the error profile.
    """

    num: int | None = None
    low: float = 1e-2
    high: float = 1e2
    holdout: int = 64


def default_num(d: int, width: int, depth: int, fields: int) -> int:
    """:attr:`Inputs.num`'s default: ``max(256 L, 2 P / d)`` for a depth-``L`` candidate with ``P``
    parameters, and for one block at ``d = 2`` at least ``16 n²``.

    At ``d = 2`` the inputs' directions lie on a circle that a relu block's ``n`` kink lines cut
    into ``2n`` arcs; the smallest of ``2n`` random arcs is about ``2π / (2n)²``, so ``16 n²``
    directions put about 4 in it (none with probability about ``e⁻⁴``). With 256, a fit can be
    exact on every training input and wrong on an unsampled arc: planted relu (2,8), 48 draws,
    43 solved with 256 inputs, 46 with 512, 47 with 1024. Not for stacks: planted relu (2,8)
    stacks, the benchmark's 12, were 2 solved with 512 inputs and the same 2 with 1024, at twice
    the cost (research log, 2026-12-06 (afternoon))."""
    return max(256 * depth, 2 * fields * width * depth, 16 * width * width if d == 2 and depth == 1 else 0)


class Linear(NamedTuple):
    """A candidate with a free linear term: ``g(x) = A x + V_down σ(V_up x)`` (per layer in a stack).

    ``search(..., problem=Problem(linear=True))`` fits this wider class. Since ``σ(z) − σ(−z) = z`` for ReLU and
    GELU, negating unit ``i`` only moves ``V_down[:,i] V_up[i,:]`` into ``A``: every unit's
    orientation fits equally well, and a block found here absorbs exactly when
    :func:`absorbjax.condition.find_absorbing_set` finds ``S`` with
    ``V_down[:,S] V_up[S,:] = −A`` (Lemma 4 with skip ``A``).

    Attributes:
      block: ``V`` (``MLPParams`` or ``GatedParams``), leading axes as the search's candidates
        (``Solver.init`` takes one; a ``linear=True`` search's ``best_params`` is one).
      linear: ``A`` ``(..., d, d)``, or ``(..., depth, d, d)`` for stacks.
    """

    block: Params
    linear: jax.Array


class Polish(NamedTuple):
    """The second phase, run on each draw's best restarts after the first-order phase.

    Both methods run a fixed number of iterations in ``lax.scan`` (no convergence while-loop,
    so a vmapped batch never waits on its slowest member) and keep each restart's best finite
    iterate, so polishing never makes a restart worse.

    Attributes:
      method: ``"lbfgs"`` (``optax.lbfgs`` with a bounded zoom line search), ``"gauss_newton"``
        (Levenberg–Marquardt on the residuals ``r_k = (f(x_k) − g_V(x_k)) / (‖x_k‖ √K)``, with
        a dense ``P × P`` solve; quadratic convergence on exactly absorbable targets) or
        ``"auto"``: Gauss–Newton when the candidate has at most ``max_dense`` parameters ``P``,
        else L-BFGS.
      steps: iterations in all (``None``: 300).
      screen: the first ``screen`` iterations run on every restart; the remaining
        ``steps − screen`` only on the ``top`` restarts with the lowest loss after them.
      top: how many of each draw's restarts continue after the screen; the others keep
        their result.
      memory: L-BFGS memory.
      linesearch_steps: bound on the zoom line search's iterations per L-BFGS step.
      max_dense: largest ``P`` for which ``"auto"`` picks Gauss–Newton.

    Examples:
      >>> from absorbjax import fit
      >>> fit.Polish().resolve(params=64)[:2]
      ('gauss_newton', 300)
      >>> fit.Polish(steps=50).resolve(params=4096).method == "lbfgs"
      True
    """

    method: PolishMethod | str = "auto"
    steps: int | None = None
    screen: int = 40
    top: int = 8
    memory: int = 10
    linesearch_steps: int = 12
    max_dense: int = 1024

    def resolve(self, params: int) -> "Polish":
        """A copy with ``method`` and ``steps`` fixed for a candidate with ``params`` parameters."""
        if self.method not in POLISH_METHODS:
            raise ValueError(f"polish.method must be one of {POLISH_METHODS}, got {self.method!r}")
        method = PolishMethod(self.method)
        if method == PolishMethod.AUTO:
            method = PolishMethod.GAUSS_NEWTON if params <= self.max_dense else PolishMethod.LBFGS
        steps = self.steps if self.steps is not None else 300
        return self._replace(method=method, steps=int(steps))


class Wide(NamedTuple):
    """The wide rounds of :func:`absorbjax.fit._expand.expand_search` (steps 1–5 of its module).

    Attributes:
      factor: the wide search's width ``m = factor · n``.
      restarts, steps: the wide search's (``None``: the first search's ``restarts``; its
        ``steps`` for one layer, ``5 · steps`` for a stack).
      polish: the wide search's :class:`Polish` (short: the wide fit only proposes).
      proposals: width-``n`` starts merged from the wide fit per draw (:func:`fit._merge.proposals`).
      dense: the wide search and the width-``n`` polish use ``dense`` times the first search's
        training inputs (a ReLU kink is placed only as finely as the inputs' directions resolve it).
      rounds: steps 1–5 run up to ``rounds`` times on the draws still unsolved.
      merge_tol: ``rtol`` of the condition on the polished width-``n`` fit.
    """

    factor: int = 4
    restarts: int | None = None
    steps: int | None = None
    polish: Polish = Polish(steps=100, screen=20, top=4)
    proposals: int = 8
    dense: int = 4
    rounds: int = 3
    merge_tol: float = 1e-6


class LineStep(NamedTuple):
    """The line step of :func:`absorbjax.fit._expand.expand_search` (ReLU without a skip).

    Attributes:
      restarts: restarts of each fit with the first layer held on the kink lines.
      rounds: how many times the step runs on the draws still unsolved.
      segments: the random segments the kinks are read on (:func:`absorbjax.fit._lines.kinks`),
        for one layer and for a stack: a second-layer unit that bends only in a thin cone shows
        on few of them.
    """

    restarts: int = 256
    rounds: int = 2
    segments: tuple[int, int] = (128, 2048)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Problem:
    """What :func:`absorbjax.fit.search` looks for (built by keyword): the residual block the target
    is and the candidate that should reproduce it, on which inputs.

    Attributes:
      skip: the target's linear skip ``A`` ``(d, d)`` or ``(draws, d, d)`` (``None``: ``A = I``);
        depth 1 only.
      depth: number of layers ``L`` of both the residual stack and the candidate stack.
      width: candidate width ``m ≥ n`` (``None``: the target's width ``n``).
      linear: fit ``A x + V_down σ(V_up x)`` with a free linear term ``A`` per layer (the
        candidate's own skip; a :class:`Linear` candidate, ``A`` starting at 0) instead of a
        residual-free block: the class where every unit's orientation fits
        (:func:`absorbjax.fit._expand.expand_search` then decides the orientation exactly).
        The result's ``best_params`` is then a :class:`Linear` of ``V`` and ``A``.
      inputs: an :class:`Inputs` (training and held-out inputs per draw).

    Examples:
      >>> from absorbjax import fit
      >>> fit.Problem(depth=2, width=8)
      Problem(skip=None, depth=2, width=8, linear=False, inputs=Inputs(num=None, low=0.01, high=100.0, holdout=64))
    """

    skip: jax.Array | None = None
    depth: int = 1
    width: int | None = None
    linear: bool = False
    inputs: Inputs = Inputs()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Solver:
    """How :func:`absorbjax.fit.search` searches each draw (built by keyword).

    Attributes:
      method: ``"varpro"`` (the default; :mod:`absorbjax.fit._projected`): variable-projection
        Levenberg–Marquardt on a candidate with a free linear term (the last layer solved by
        least squares at every step), then the units negated that best remove that term (the
        activation's declared odd part), then a residual-free polish on the best restarts. It reads
        the target only through its values. ``"adam"``: the optax first phase on all weights, then
        the :class:`Polish` (``optimizer`` and ``polish`` configure it; ``"varpro"`` refuses them).
      restarts: independent initialisations per draw.
      steps: iterations of the first phase (``None``: 100 Levenberg–Marquardt iterations for
        ``"varpro"``, whose polish then runs ``steps // 2``; 200 Adam steps for ``"adam"``).
      init: ``"random"`` (the honest search: Gaussian weights with variance ``1/fan_in``, every
        other restart rescaled to the target's per-field Frobenius norm; nothing else about the
        target is used), ``"warm"`` (the target's ``W_up``/``W_gate`` with random row sign flips,
        widened with random units), or candidate params with leading ``(restarts, ...)`` or
        ``(draws, restarts, ...)`` axes (``linear=True``: a :class:`Linear` of such params and
        ``A``); non-finite entries make that restart fail, nothing else. ``"varpro"`` starts from
        their weights before the last layer's ``V_down`` (which it solves).
      optimizer: ``"adam"``'s first-phase ``optax.GradientTransformation`` (``None``:
        :func:`default_optimizer` ``(steps)``: Adam, cosine decay 1e-2 → 1e-4).
      polish: ``"adam"``'s second phase: ``True`` (the default :class:`Polish`: Gauss–Newton for
        candidates with at most 1024 parameters, else L-BFGS; 300 iterations, the first 40 on
        every restart, the rest on the best 8), a :class:`Polish`, or ``False``.
      tol: loss below which a draw counts as solved (``None``: 1e-20 in float64, 1e-10 in
        float32); below :func:`min_tol` of the dtype it is an error, not a claim.
      hops: ``"varpro"``'s rounds of basin hopping over units after the restarts
        (:func:`absorbjax.fit._projected.hop`): each round re-initialises one unit of the draw's
        best candidate per restart and refits the ``restarts`` variants for ``steps // 2``
        iterations, keeping the best (``None``: 3; ``0`` switches it off; ``"adam"`` takes none).
        Where the units are negated, ``3 × hops`` rounds run first in the free-linear class,
        before the negation, and ``hops`` rounds after it; rounds stop once a draw is solved.
      blockwise: a stack's blocks first searched alone, on their own values, the best of each
        composed (:func:`absorbjax.fit._projected.blockwise`); the whole stack is searched where
        that is not solved (``None``: on for ``"varpro"`` stacks without ``linear=True``).

    Examples:
      >>> from absorbjax import fit
      >>> fit.Solver(restarts=8)
      Solver(method='varpro', restarts=8, steps=None, init='random', optimizer=None, polish=True, tol=None, hops=None, blockwise=None)
    """

    method: Method | str = "varpro"
    restarts: int = 32
    steps: int | None = None
    init: str | Params | Linear = "random"
    optimizer: optax.GradientTransformation | None = None
    polish: bool | Polish = True
    tol: float | None = None
    hops: int | None = None
    blockwise: bool | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Run:
    """How :func:`absorbjax.fit.search` executes: batching, devices, progress, checkpoints (built by
    keyword). None of it changes a result beyond floating-point rounding.

    Attributes:
      batch_size: draws vmapped together per device in one jitted call (``None``: as many as fit
        a fixed memory budget, at most ``draws``); memory stays bounded at any number of draws.
        Results depend on it only through floating-point rounding.
      chunk_size: draws per progress update and checkpoint file, a multiple of ``batch_size`` ×
        devices (``None``: about 20 chunks). Results do not depend on it, nor on the number of
        devices.
      mesh: a ``jax.sharding.Mesh`` with a ``"draws"`` axis (``None``: all devices when there are
        several). Multi-host: call ``jax.distributed.initialize()`` first; every process runs the
        same call.
      progress: show a tqdm bar advanced between chunks.
      checkpoint: directory; finished chunks are written there atomically and a rerun with the
        same arguments resumes from them (a directory from a different target, key, setting or
        activation function (:func:`absorbjax.fit._drawmap.code_identity`) is refused; a custom
        ``optimizer`` is recorded only as "custom", so keep it the same).

    Examples:
      >>> from absorbjax import fit
      >>> fit.Run(progress=False).batch_size is None
      True
    """

    batch_size: int | None = None
    chunk_size: int | None = None
    mesh: Mesh | None = None
    progress: bool = True
    checkpoint: str | os.PathLike | None = None


def check_options(problem: Problem, solver: Solver, run: Run) -> None:
    """``ValueError`` unless ``problem``, ``solver`` and ``run`` are a :class:`Problem`, a
    :class:`Solver` and a :class:`Run` (a search's options are these three objects, nothing else)."""
    for name, value, kind in (("problem", problem, Problem), ("solver", solver, Solver), ("run", run, Run)):
        if not isinstance(value, kind):
            raise ValueError(f"{name} must be an absorbjax.fit.{kind.__name__}, got {type(value).__name__}")


@functools.lru_cache(maxsize=32)
def default_optimizer(steps: int, learning_rate: float = 1e-2) -> optax.GradientTransformation:
    """Adam with a cosine decay from ``learning_rate`` to ``learning_rate / 100`` over ``steps``.

    Cached, so that equal settings give the same (hashable) object and the jitted search
    step is compiled once.

    Examples:
      >>> from absorbjax import fit
      >>> fit.default_optimizer(200) is fit.default_optimizer(200)
      True
    """
    schedule = optax.cosine_decay_schedule(learning_rate, max(int(steps), 1), alpha=1e-2)
    return optax.adam(schedule)


def min_tol(dtype) -> float:
    """Smallest relative loss a dtype can certify: ``100 ε²`` (float32 1.4e-12, float64 4.9e-30).

    Examples:
      >>> import numpy as np
      >>> from absorbjax import fit
      >>> f"{fit.min_tol(np.float32):.1e} {fit.min_tol(np.float64):.1e}"
      '1.4e-12 4.9e-30'
    """
    return float(100 * np.finfo(dtype).eps ** 2)


def log_bounds(low: float, high: float) -> tuple[float, float]:
    """``(log10 low, log10 high)`` after checking ``0 < low < high``."""
    if not (np.isfinite(low) and np.isfinite(high) and 0 < low < high):
        raise ValueError(f"inputs need 0 < low < high, got low={low!r}, high={high!r}")
    return float(np.log10(low)), float(np.log10(high))


@dataclasses.dataclass(frozen=True, kw_only=True)
class DrawSettings:
    """What every draw of a search is computed with, resolved: the fields that :class:`Static`
    (the compile key) and :class:`~absorbjax.fit.SearchConfig` (the record) share. Frozen and
    hashable.

    Attributes:
      depth, d, n, width: the depth ``L``, the input dimension, the target's and the candidate's
        width.
      method, restarts, steps, init, linear, hops, blockwise: the solver's settings, resolved
        (``method`` a :class:`Method`, ``init`` an :class:`Init`; ``linear``: a free linear term).
      num, low, high, holdout: the inputs (training inputs per draw, radius range, held-out inputs
        per decade).
      polish: the resolved :class:`Polish`, or ``None`` (no polish).
    """

    depth: int
    d: int
    n: int
    width: int
    method: Method
    restarts: int
    steps: int
    init: Init
    linear: bool
    hops: int
    blockwise: bool
    num: int
    low: float
    high: float
    holdout: int
    polish: Polish | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Static(DrawSettings):
    """Everything the jitted draw function specialises on (hashable: it keys the compile cache):
    the :class:`DrawSettings`, the activation, whether a skip ``A`` is given and the loss ``tol``
    at which a draw counts as solved (the hops stop there).

    ``activation`` is the registry's :class:`~absorbjax.activations.Activation` itself, not its
    name: the entry (its function included) keys the cache, so a name re-registered with
    ``activations.register(..., overwrite=True)`` compiles anew, never reusing the old function.
    """

    activation: activations.Activation
    skip: bool
    tol: float


class Setup(NamedTuple):
    """A validated search: the static configuration and the per-draw arrays (leading draws axis)."""

    cfg: Static
    target: Params
    skip: jax.Array | None
    given: Params | Linear | None
    optimizer: optax.GradientTransformation
    optimizer_name: str  # "default" or "custom"
    single: bool  # the target had no draws axis

    @property
    def draws(self) -> int:
        return int(self.target.down.shape[0])

    def record(self) -> dict:
        """The settings as plain values, for :attr:`SearchResult.config` and checkpoints."""
        cfg = self.cfg
        return {
            "activation": cfg.activation.name,
            **{f.name: getattr(cfg, f.name) for f in dataclasses.fields(DrawSettings)},
            "polish": None if cfg.polish is None else cfg.polish._asdict(),
            "optimizer": self.optimizer_name,
            "skip": self.skip is not None,
            "draws": self.draws,
            "tol": cfg.tol,
        }


def validate(target, activation: str, *, problem: Problem, solver: Solver) -> Setup:
    """Check the arguments of :func:`absorbjax.fit.search` and build its :class:`Setup`."""
    skip, depth, width, linear, inputs = problem.skip, problem.depth, problem.width, problem.linear, problem.inputs
    names = ("method", "restarts", "steps", "init", "optimizer", "polish", "tol", "hops")
    method, restarts, steps, init, optimizer, polish, tol, hops = (getattr(solver, f) for f in names)
    act, target, d, n, single = check_target(target, activation, depth)
    draws = target.down.shape[0]
    dtype = target.down.dtype
    width = n if width is None else width
    if not isinstance(width, (int, np.integer)) or width < n:
        raise ValueError(f"width must be an integer >= n = {n} (the target's width), got {width!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    method = Method(method)
    if method == Method.VARPRO and (optimizer is not None or polish is not True):
        raise ValueError("optimizer and polish configure method='adam'; method='varpro' takes neither")
    steps = DEFAULT_STEPS[method] if steps is None else steps
    if method == Method.ADAM and hops:
        raise ValueError(f"hops are rounds of method='varpro'; method='adam' takes none, got hops={hops!r}")
    hops = DEFAULT_HOPS[method] if hops is None else hops
    if not isinstance(hops, (int, np.integer)) or hops < 0:
        raise ValueError(f"hops must be a non-negative integer, got {hops!r}")
    blockwise = check_blockwise(solver.blockwise, method, linear)
    for name, v in (("restarts", restarts), ("steps", steps)):
        if not isinstance(v, (int, np.integer)) or v < (1 if name == "restarts" else 0):
            raise ValueError(
                f"{name} must be a {'positive' if name == 'restarts' else 'non-negative'} integer, got {v!r}"
            )
    if not isinstance(inputs, Inputs):
        raise ValueError(f"inputs must be an absorbjax.fit.Inputs, got {type(inputs).__name__}")
    log_bounds(inputs.low, inputs.high)
    if not isinstance(linear, bool):
        raise ValueError(f"linear must be True or False, got {linear!r}")
    fields = len(target._fields)
    polish = (
        None
        if method == Method.VARPRO
        else check_polish(polish, (fields * int(width) * d + linear * d * d) * int(depth))
    )
    floor = min_tol(dtype)
    tol = (1e-20 if dtype == jnp.float64 else 1e-10) if tol is None else float(tol)
    if tol < floor:
        raise ValueError(
            f"tol={tol:.1e} is below what {jnp.dtype(dtype).name} can resolve (min_tol = {floor:.1e}); "
            "pass float64 weights with jax.config.update('jax_enable_x64', True)"
        )
    skip = check_skip(skip, draws, d, depth, dtype)
    init_mode, given = check_init(init, target, draws, restarts, width, depth, d, linear)
    num = inputs.num or default_num(d, int(width), int(depth), fields)
    if num < 1 or inputs.holdout < 1:
        raise ValueError(f"inputs.num and inputs.holdout must be positive, got {inputs}")
    cfg = Static(
        activation=act,
        depth=int(depth),
        d=d,
        n=n,
        width=int(width),
        method=method,
        restarts=int(restarts),
        steps=int(steps),
        init=init_mode,
        skip=skip is not None,
        linear=linear,
        hops=int(hops),
        blockwise=blockwise and int(depth) > 1,
        num=int(num),
        low=float(inputs.low),
        high=float(inputs.high),
        holdout=int(inputs.holdout),
        polish=polish,
        tol=tol,
    )
    name = "default" if optimizer is None else "custom"
    opt = default_optimizer(steps) if optimizer is None else optimizer
    if not isinstance(opt, optax.GradientTransformation):
        raise ValueError(f"optimizer must be an optax.GradientTransformation, got {type(opt).__name__}")
    return Setup(cfg, target, skip, given, opt, name, single)


def check_blockwise(blockwise, method: Method, linear) -> bool:
    """:attr:`Solver.blockwise` resolved: ``None`` → on for ``"varpro"`` without ``linear=True``."""
    if blockwise is None or blockwise is False:
        return blockwise is None and method == Method.VARPRO and not linear
    if blockwise is True and method == Method.VARPRO and not linear:
        return True
    raise ValueError(
        f"blockwise must be True, False or None (True: method='varpro' without linear=True, where "
        f"every block fits exactly), got {blockwise!r} with method={method.value!r}, linear={linear!r}"
    )


def check_polish(polish, params: int) -> Polish | None:
    """``True`` → the default :class:`Polish`, ``False``/``None`` → ``None``; resolved for ``params``."""
    if polish is True:
        polish = Polish()
    elif polish is False or polish is None:
        return None
    elif not isinstance(polish, Polish):
        raise ValueError(f"polish must be a bool or an absorbjax.fit.Polish, got {type(polish).__name__}")
    polish = polish.resolve(params)
    if polish.top < 1 or polish.steps < 0 or polish.screen < 0 or polish.memory < 1 or polish.linesearch_steps < 1:
        raise ValueError(f"polish needs top, memory, linesearch_steps >= 1 and steps, screen >= 0, got {polish}")
    return polish


def as_params(target, name: str) -> Params:
    """``MLPParams``/``GatedParams`` of float JAX arrays of one dtype, or a ``ValueError`` naming ``name``."""
    if not isinstance(target, (MLPParams, GatedParams)):
        raise ValueError(f"{name} must be MLPParams or GatedParams, got {type(target).__name__}")
    arrays = [jnp.asarray(a) for a in target]
    for f, a in zip(target._fields, arrays):
        if not jnp.issubdtype(a.dtype, jnp.floating):
            raise ValueError(f"{name}.{f} must be a float array, got dtype {a.dtype}")
        if a.dtype != arrays[-1].dtype:
            raise ValueError(f"{name} fields must share one dtype, got {a.dtype} and {arrays[-1].dtype}")
    return type(target)(*arrays)


def check_target(target, activation: str, depth: int):
    """The activation, the target with a leading draws axis, ``d``, ``n`` and whether it had none."""
    act = activations.get(activation)
    if not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"depth must be a positive integer, got {depth!r}")
    target = as_params(target, "params")
    want = GatedParams if act.gated else MLPParams
    if not isinstance(target, want):
        raise ValueError(f"activation {act.name!r} needs params {want.__name__}, got {type(target).__name__}")
    d, n = models.dims(target)
    core = 2 if depth == 1 else 3
    nd = target.down.ndim
    if nd not in (core, core + 1):
        raise ValueError(
            f"params.down must have shape {'(d, n)' if depth == 1 else '(L, d, n)'} or with a leading "
            f"draws axis for depth={depth}; got {target.down.shape}"
        )
    if depth > 1 and target.down.shape[-3] != depth:
        raise ValueError(f"params have {target.down.shape[-3]} layers on its depth axis, expected depth={depth}")
    if any(a.shape[:-2] != target.down.shape[:-2] for a in target):
        raise ValueError(f"params fields disagree on leading axes: {[a.shape for a in target]}")
    single = nd == core
    if single:
        target = jax.tree.map(lambda a: a[None], target)
    bad = [f for f, a in zip(target._fields, target) if not np.all(np.isfinite(np.asarray(a)))]
    if bad:
        raise ValueError(f"params.{bad[0]} contains NaN or Inf")
    return act, target, d, n, single


def check_skip(skip, draws: int, d: int, depth: int, dtype):
    """The skip ``A`` as ``(draws, d, d)``, or ``None`` for ``A = I``."""
    if skip is None:
        return None
    if depth != 1:
        raise ValueError("skip (a linear skip A) is supported for depth=1 only")
    A = jnp.asarray(skip, dtype)
    if A.shape == (d, d):
        A = jnp.broadcast_to(A, (draws, d, d))
    if A.shape != (draws, d, d):
        raise ValueError(f"skip must have shape ({d}, {d}) or ({draws}, {d}, {d}), got {jnp.shape(skip)}")
    if not np.all(np.isfinite(np.asarray(A))):
        raise ValueError("skip contains NaN or Inf")
    return A


def check_init(init, target: Params, draws: int, restarts: int, width: int, depth: int, d: int, linear: bool = False):
    """``(mode, given)``: a named init and ``None``, or ``"given"`` and ``(draws, restarts, ...)``
    params (a :class:`Linear` when ``linear``; plain params then start at ``A = 0``)."""
    if isinstance(init, str):
        if init not in INITS:
            raise ValueError(f"init must be one of {INITS} or candidate params, got {init!r}")
        return Init(init), None
    A = None
    if isinstance(init, Linear):
        if not linear:
            raise ValueError("init is a fit.Linear (with a linear term A); pass linear=True")
        init, A = init
    given = as_params(init, "init")
    if type(given) is not type(target):
        raise ValueError(f"init must be {type(target).__name__} like the target, got {type(given).__name__}")
    if given.down.dtype != target.down.dtype:
        raise ValueError(f"init dtype {given.down.dtype} differs from the target's {target.down.dtype}")
    core = (d, width) if depth == 1 else (depth, d, width)
    shape = given.down.shape
    if shape == (restarts,) + core:
        given = jax.tree.map(lambda a: jnp.broadcast_to(a, (draws,) + a.shape), given)
    elif shape != (draws, restarts) + core:
        raise ValueError(
            f"init.down must have shape (restarts, ...{core}) = {(restarts,) + core} or "
            f"(draws, restarts, ...) = {(draws, restarts) + core}, got {shape}"
        )
    models.dims(given)
    if not linear:
        return Init.GIVEN, given
    lcore = (d, d) if depth == 1 else (depth, d, d)
    lead = given.down.shape[:2]
    A = jnp.zeros(lead + lcore, given.down.dtype) if A is None else jnp.asarray(A, given.down.dtype)
    if A.shape == (restarts,) + lcore:
        A = jnp.broadcast_to(A, (draws,) + A.shape)
    if A.shape != lead + lcore:
        raise ValueError(
            f"init.linear must have shape (restarts, ...{lcore}) or (draws, restarts, ...{lcore}), got {A.shape}"
        )
    return Init.GIVEN, Linear(given, A)
