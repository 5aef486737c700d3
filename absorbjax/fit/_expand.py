"""Expand, merge, decide, polish: a search for absorbers of one-layer ReLU/GELU blocks at any ``n/d``.

A residual-free student of exactly the teacher's width rarely recovers it from random init; a wider
one does, and its units cluster around the teacher's (Expand-and-Cluster, arXiv 2304.12794). A
residual-free student must also orient every unit as the absorber does (``V_up[i] = −W_up[i]`` for
``i ∈ S``), a discrete choice that gradient steps cannot make; with a free linear term ``A`` every
orientation fits, since ``σ(z) − σ(−z) = z`` moves a negated unit's ``V_down[:,i] V_up[i,:]``
into ``A``. :func:`expand_search` runs the default :func:`absorbjax.fit.search`; on the ReLU draws
it leaves unsolved it first fits ``A x + V_down σ(V_up x)`` (per layer) at width ``n`` with the first
layer's units held on the target's kink lines, read from its values
(:mod:`absorbjax.fit._lines`), and decides the condition on that fit as in step 4 (for a depth-2
stack where that fails, again after refitting from the second layer's lines read through the fit's
first layer or through the first layer read from the second layer's kinks, and then on a fit whose
first layer is residual-free, ``A₁ = 0``); on the draws still unsolved,

1. searches ``A x + V_down σ(V_up x)`` at width ``m = wide.factor · n`` from random init
   (``search(..., problem=Problem(linear=True))``; the wide block knows nothing of the target but its values);
2. merges the wide units by line (ReLU: ``u`` and ``c u``, ``c ≠ 0``; GELU: ``±u``) into ``n`` units
   several ways (:func:`proposals`: the ``n`` largest clusters of the line tree cut at several
   heights), the negated members' terms going into ``A``;
3. polishes every proposal as a width-``n`` block with a free ``A`` (Levenberg–Marquardt, 400
   iterations; this step and step 1 on ``dense`` times more training inputs);
4. decides ``V_down[:,S] V_up[S,:] = −A`` on the best polished fit with
   :func:`absorbjax.condition.find_absorbing_set` (Thm 8/10 with Lemma 4's skip ``A``); an ``S``
   gives a residual-free block of width ``n`` (:func:`absorber_from_units`); in a ReLU stack a
   later layer where no ``S`` exists is decided on the image of the layers before it, the only
   inputs it ever sees (:func:`absorber_on_inputs`);
5. polishes that block against the target on the first search's training inputs.

The line step (ReLU without a skip; ``line_step``, a :class:`~absorbjax.fit.LineStep`) fits each unsolved draw at width ``n`` with
free ``A_l`` and ``U₁``'s rows held on the target's first-layer kink lines
(:func:`absorbjax.fit._lines.first_layer_lines`, :func:`absorbjax.fit._lines.fit_with_lines`, on
``dense`` times the first search's inputs, one restart for a single layer with every line found),
decides the condition on the best restarts (step 4) and polishes (step 5). At depth 2, a draw where
no restart converts is refitted from each best restart's layer 1 with the second layer's lines read
through it (:func:`absorbjax.fit._lines.second_layer_lines`; one of them through the layer 1 that
:func:`absorbjax.fit._lines.first_layer_from_kinks` reads from the second layer's kinks), and failing
that fitted with layer 1 residual-free (``A₁ = 0``). It runs ``line_step.rounds`` times on the draws
still unsolved, with fresh restarts and inputs.

In a stack (``depth=L``) every layer gets its own ``A_l``, its units are merged layer by layer and
the condition is decided per layer (it is invariant under the junctions' ``GL(d)`` gauge, so the fit
may land in any gauge). Layer 1 sees every direction, so it must absorb on all of ``ℝ^d``; a later
ReLU layer only on the image of the layers before it
(:func:`absorbjax.fit._convert.absorber_on_inputs`). So the search finds blockwise absorbers, and
ReLU stacks whose later layers absorb on that image only; no others.

A draw counts as solved only by the final block's own training and held-out loss (the first
search's inputs); steps 2–4 only propose a start, with loose tolerances. A failed expansion proves
nothing, as a failed search does.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import _progress
from absorbjax.fit import _lines
from absorbjax.fit._config import (
    DEFAULT_STEPS,
    Inputs,
    Linear,
    LineStep,
    Method,
    Polish,
    Problem,
    Run,
    Solver,
    Wide,
    check_options,
)
from absorbjax.fit._convert import decided, fold_stack, layer_image, unstack
from absorbjax.fit._driver import search
from absorbjax.fit._merge import check_activation, stack_proposals
from absorbjax.fit._result import ExpandRecord, SearchResult, unbatch
from absorbjax.models import MLPParams, dims, skip_mlp, stack

LINES_SEED = 2**31 - 1  # expand_search's line step: fold_in(key, LINES_SEED)


def expand_search(
    params: MLPParams,
    activation: str,
    *,
    key: jax.Array,
    wide: Wide = Wide(),
    line_step: LineStep | None = LineStep(),
    problem: Problem = Problem(),
    solver: Solver = Solver(),
    run: Run = Run(),
) -> SearchResult:
    """:func:`absorbjax.fit.search`, then expand–merge–decide–polish on the draws it leaves unsolved.

    The steps, the line step and what happens in a stack are described in the module docstring.
    Its own settings (``wide``, ``line_step``) come first, then the options it shares with
    :func:`search` (``problem``, ``solver``, ``run``).

    Args:
      params: residual blocks ``W`` (``MLPParams``, optional leading draws axis; with a layer
        axis for ``depth > 1``).
      activation: ``"relu"`` or ``"gelu"``.
      key: base PRNG key; the first search and the final polish use it as :func:`search` does
        (the same training and held-out inputs per draw), the wide search ``fold_in(key, 1)``,
        the width-``n`` polish ``fold_in(key, 2)`` (in the first round; round ``r``: keys
        ``fold_in(key, 1 + 2r)``, ``fold_in(key, 2 + 2r)``).
      wide: the wide rounds' settings (:class:`~absorbjax.fit.Wide`: width factor, restarts,
        steps, polish, proposals per draw, input density, rounds, the condition's ``rtol``).
      line_step: ReLU without ``skip`` only: the line step's settings
        (:class:`~absorbjax.fit.LineStep`; ``None``: no line step), run before the rounds (key
        ``fold_in(key, LINES_SEED)``, round ``i ≥ 1``: ``fold_in(fold_in(key, LINES_SEED), i)``).
      problem: the :class:`~absorbjax.fit.Problem`, as :func:`search` takes it, of residual-free
        candidates of the target's width (``width`` ``None`` or ``n``, ``linear`` ``False``; the
        free linear term and the wider width are this search's own steps); else a ``ValueError``.
      solver: the first search's :class:`~absorbjax.fit.Solver`, run as ``method="adam"`` (every
        search here is; ``steps`` ``None``: 200); its ``restarts`` and ``steps`` are the wide
        search's defaults (``wide``), its ``optimizer`` and ``tol`` every search's.
      run: every search's :class:`~absorbjax.fit.Run`; ``progress`` shows one bar for the whole
        search (the first search, then each round, with the draws still unsolved and a time
        estimate), the searches inside it show none; ``progress=False`` prints nothing.

    Returns:
      A :class:`SearchResult` over all draws: where the final block beats the first search, its
      candidate, losses and profile replace the first search's; ``losses`` and ``failed`` stay the
      first search's restarts, ``final_loss`` holds the final block's loss (``inf`` where none was
      proposed), and ``config.expand`` records the settings and how many draws were unsolved,
      proposed and improved (``"lines"``: by the line step).

    Examples:
      Absorbable ReLU blocks at ``n = 4d``, where the default search alone mostly fails:

      >>> import jax
      >>> from absorbjax import fit, models
      >>> with jax.enable_x64(True):
      ...     W, _ = models.planted_sample("relu", 2, 8, key=jax.random.key(0), draws=2)
      ...     r = fit.expand_search(
      ...         W, "relu", key=jax.random.key(1), solver=fit.Solver(restarts=8), wide=fit.Wide(rounds=1)
      ...     )
      >>> e = r.config.expand
      >>> e.unsolved, e.improved, r.solved().tolist()
      (2, 2, [True, True])
    """
    check_activation(activation)
    if not isinstance(wide, Wide) or not (line_step is None or isinstance(line_step, LineStep)):
        raise ValueError(f"wide must be a fit.Wide and line_step a fit.LineStep or None, got {wide!r}, {line_step!r}")
    check_options(problem, solver, run)
    if problem.linear or (problem.width is not None and problem.width != dims(params)[1]):
        raise ValueError(
            "expand_search searches residual-free blocks of the target's width n (problem.width None or n, "
            f"problem.linear False), got width={problem.width!r}, linear={problem.linear!r}"
        )
    # Its steps are built on the first-order search and its polish: every search here is "adam".
    steps = DEFAULT_STEPS[Method.ADAM] if solver.steps is None else solver.steps
    solver = dataclasses.replace(solver, method=Method.ADAM, steps=steps)
    if activation != "relu" or problem.skip is not None:
        line_step = None
    line_rounds = line_step.rounds if line_step is not None else 0
    bar = _progress.tqdm(
        total=1 + line_rounds + wide.rounds, desc=f"expand_search {activation}", unit="step", disable=not run.progress
    )
    run = dataclasses.replace(run, progress=False)
    first = search(params, activation, key=key, problem=problem, solver=solver, run=run)
    bar.update(1)
    bar.set_postfix(unsolved=int((~first.solved()).sum()))
    single = first.config.single
    first = first.batched()
    target = jax.tree.map(lambda a: jnp.asarray(a)[None] if single else jnp.asarray(a), params)
    wide_steps = solver.steps if first.config.depth == 1 else 5 * solver.steps
    wide = wide._replace(
        restarts=wide.restarts or solver.restarts, steps=wide_steps if wide.steps is None else wide.steps
    )
    result, counts = _rounds(first, target, activation, key, wide, line_step, solver, problem, run, bar)
    bar.close()
    record = ExpandRecord(wide=wide, line_step=line_step, unsolved=int((~first.solved()).sum()), **counts)
    result = result._replace(config=dataclasses.replace(first.config, expand=record))
    return unbatch(result) if single else result


def _rounds(
    first: SearchResult,
    target: MLPParams,
    activation: str,
    key,
    wide: Wide,
    line_step: LineStep | None,
    solver: Solver,
    problem: Problem,
    run: Run,
    bar,
) -> tuple[SearchResult, dict]:
    """The line step's and steps 1–5's rounds of :func:`expand_search` after its first search:
    the result (with ``final_loss``) and the counts of :class:`~absorbjax.fit.ExpandRecord`;
    ``bar`` (a tqdm bar) advances a step a round."""
    draws = first.best_loss.shape[0]
    if solver.polish is False:
        wide = wide._replace(polish=False)
    final_loss = np.full(draws, np.inf)
    counts = dict(proposed=0, improved=0, lines_proposed=0, lines_improved=0)
    result = first
    first_round = -line_step.rounds if line_step is not None else 0
    for r in range(first_round, wide.rounds):  # r < 0: the first layer's kink lines
        todo = np.flatnonzero(~result.solved())
        bar.set_postfix(unsolved=todo.size)
        if not todo.size:
            break
        sub = jax.tree.map(lambda a: a[todo], target)
        absorbers = _round_proposals(r, sub, activation, key, first, wide, line_step, solver, problem, run)
        bar.update(1)
        if not absorbers:
            continue
        idx = todo[sorted(absorbers)]
        final = _polish_absorbers(
            absorbers, jax.tree.map(lambda a: a[idx], target), activation, key, first, solver, problem, run
        )
        final_loss[idx] = np.where(final.failed[:, 0], np.inf, final.losses[:, 0])
        better = final.best_loss < result.best_loss[idx]
        result = _adopt(result, final, idx, better)
        for prefix in [""] + (["lines_"] if r < 0 else []):
            counts[prefix + "proposed"] += len(absorbers)
            counts[prefix + "improved"] += int(better.sum())
    return result._replace(final_loss=final_loss), counts


def _round_proposals(
    r: int,
    sub: MLPParams,
    activation: str,
    key,
    first: SearchResult,
    wide: Wide,
    line_step: LineStep | None,
    solver: Solver,
    problem: Problem,
    run: Run,
) -> dict:
    """``{j: residual-free width-n block}`` for the unsolved draws ``sub`` in round ``r`` of
    :func:`expand_search`: the line step (``r < 0``) or steps 1–4 (``r ≥ 0``)."""
    n, depth, num = first.config.n, first.config.depth, wide.dense * first.config.num
    if r < 0:
        base = jax.random.fold_in(key, LINES_SEED)
        lines_key = base if r + line_step.rounds == 0 else jax.random.fold_in(base, r + line_step.rounds)
        return _line_proposals(
            sub,
            lines_key,
            n,
            depth,
            num=num,
            merge_tol=wide.merge_tol,
            inputs=problem.inputs,
            restarts=line_step.restarts,
            segments=line_step.segments[depth > 1],
        )
    keys = jax.random.fold_in(key, 1 + 2 * r), jax.random.fold_in(key, 2 + 2 * r)
    return _propose(sub, activation, keys, n, depth, first.best_params.down.dtype, wide, num, solver, problem, run)


def _polish_absorbers(
    absorbers: dict,
    targets: MLPParams,
    activation: str,
    key,
    first: SearchResult,
    solver: Solver,
    problem: Problem,
    run: Run,
) -> SearchResult:
    """Step 5: each proposed residual-free block polished against its target (``targets``, one per
    proposal, in the order of ``sorted(absorbers)``) on the first search's inputs."""
    dtype = first.best_params.down.dtype
    init = MLPParams(
        *(jnp.asarray(np.stack([absorbers[j][f] for j in sorted(absorbers)])[:, None], dtype) for f in range(2))
    )
    pol = Polish(steps=100, screen=100, top=1) if solver.polish is not False else False
    final = dataclasses.replace(solver, restarts=1, steps=0, init=init, polish=pol)
    return search(targets, activation, key=key, problem=problem, solver=final, run=run)


def _adopt(result: SearchResult, final: SearchResult, idx: np.ndarray, better: np.ndarray) -> SearchResult:
    """``result`` with draws ``idx[better]`` taken from ``final`` (one row per ``idx``)."""
    pick = lambda a, b: _splice(a, b, idx, better)
    return result._replace(
        best_loss=pick(result.best_loss, final.best_loss),
        best_params=jax.tree.map(
            lambda a, b: jnp.asarray(pick(np.asarray(a), np.asarray(b))), result.best_params, final.best_params
        ),
        profile=pick(result.profile, final.profile),
        weight_norms=pick(result.weight_norms, final.weight_norms),
        holdout_loss=pick(result.holdout_loss, final.holdout_loss),
    )


def _propose(
    sub: MLPParams,
    activation: str,
    keys,
    n: int,
    depth: int,
    dtype,
    settings: Wide,
    num: int,
    solver: Solver,
    problem: Problem,
    run: Run,
) -> dict:
    """Steps 1–4 on the draws ``sub``: ``{j: residual-free width-n block}`` for the draws ``j`` of
    ``sub`` whose polished width-``n`` fit satisfies the condition (every layer). ``keys``: the
    wide and the narrow search's; ``settings``: the round's, resolved (no ``None``)."""
    wide_key, narrow_key = keys
    count, merge_tol = settings.proposals, settings.merge_tol
    narrow_problem = dataclasses.replace(problem, linear=True, inputs=problem.inputs._replace(num=num))
    wide = search(
        sub,
        activation,
        key=wide_key,
        problem=dataclasses.replace(narrow_problem, width=settings.factor * n),
        solver=dataclasses.replace(
            solver, restarts=settings.restarts, steps=settings.steps, init="random", polish=settings.polish
        ),
        run=run,
    )
    draws = wide.best_loss.shape[0]
    inputs_seen = _inputs_seen(narrow_key, num, sub.up.shape[-1], depth, activation)
    starts = []
    for j in range(draws):
        layers = list(zip(*unstack(*wide.best_params, j, depth)))
        if inputs_seen is not None:  # a later layer's units that are linear on its inputs go into A_l
            layers = fold_stack(layers, inputs_seen, merge_tol)
        starts.append(stack_proposals(layers, activation, n, count))
    init = Linear(
        MLPParams(*(jnp.asarray(np.stack([[b[f] for b, _ in s] for s in starts]), dtype) for f in range(2))),
        jnp.asarray(np.stack([[A for _, A in s] for s in starts]), dtype),
    )
    narrow = search(
        sub,
        activation,
        key=narrow_key,
        problem=narrow_problem,
        solver=dataclasses.replace(
            solver, restarts=count, steps=0, init=init, polish=Polish(steps=400, screen=400, top=count)
        ),
        run=run,
    )
    return decided(*narrow.best_params, depth, activation, merge_tol, inputs_seen)


def _inputs_seen(key, num: int, d: int, depth: int, activation: str) -> np.ndarray | None:
    """The inputs ``(num, d)`` whose image a later ReLU layer is decided on (``None`` for one layer
    or GELU): Gaussian directions, since ReLU stacks are positively homogeneous (radii do not matter)."""
    if depth == 1 or activation != "relu":
        return None
    return np.asarray(jax.random.normal(jax.random.fold_in(key, 1), (num, d)))


def _line_proposals(
    sub: MLPParams, key, n: int, depth: int, *, num: int, merge_tol: float, inputs: Inputs, restarts: int, segments: int
) -> dict:
    """``{j: residual-free width-n block}`` for the ReLU draws ``j`` of ``sub`` with a free-``A`` fit
    with ``U₁`` on the target's first-layer kink lines (:mod:`absorbjax.fit._lines`) that satisfies
    the condition (every layer): of the fit's best restarts, the best one that does; at depth 2,
    failing that, the refit from :func:`second_layer_start` (on each best restart's layer 1, the
    first start on :func:`absorbjax.fit._lines.first_layer_from_kinks` where every line is found
    and it pins one), and failing that a fit with layer 1 residual-free (``A₁ = 0``, each
    restart its own orientation of the lines). Key
    ``fold_in(key, 0)``: the lines' segments (``fold_in(·, j)`` per draw), ``fold_in(key, 1)``: the
    fit, ``fold_in(key, 4)`` and ``fold_in(key, 5)``: the second layer's least squares and refit,
    ``fold_in(key, 6)``: the residual-free-first fit, ``key``: the inputs a later layer is decided on."""
    d = sub.up.shape[-1]
    draws = sub.up.shape[0]
    found = np.zeros((draws, n, d))
    mask = np.zeros((draws, n), bool)
    kinks = []
    for j in range(draws):
        W = jax.tree.map(lambda a: a[j], sub)
        f = (lambda x: skip_mlp(W, x, "relu")) if depth == 1 else (lambda x: stack(W, x, "relu"))
        kinks.append(_lines.kinks(f, d, key=jax.random.fold_in(jax.random.fold_in(key, 0), j), segments=segments))
        got = _lines.lines_of(kinks[-1])[:n]
        found[j, : len(got)], mask[j, : len(got)] = got, True
    if depth == 1 and mask.all():  # U held whole: least squares in (D, A), which one start solves
        restarts = 1
    fit = lambda idx, k, **kw: _lines.fit_with_lines(
        jax.tree.map(lambda a: a[idx], sub),
        found[idx],
        mask[idx],
        key=k,
        depth=depth,
        inputs=inputs._replace(num=num),
        **kw,
    )
    fitted, _ = fit(np.arange(draws), jax.random.fold_in(key, 1), restarts=restarts)
    inputs_seen = _inputs_seen(key, num, d, depth, "relu")
    out = _best_converted(fitted, np.arange(draws), {}, depth, merge_tol, inputs_seen)
    left = np.array([j for j in range(draws) if j not in out], int)
    if depth == 2 and left.size:  # layer 2 from its own kinks, seen through the fitted layer 1
        xs = np.asarray(jax.random.normal(jax.random.fold_in(key, 4), (num, d)))
        starts = []
        for j in left:  # least squares on random inputs and on both sides of every kink
            side = 1e-3 * np.linalg.norm(kinks[j].points, axis=1, keepdims=True) * kinks[j].normals
            xj = np.concatenate([xs, kinks[j].points + side, kinks[j].points - side])
            W = jax.tree.map(lambda a: a[j], sub)
            yj = np.asarray(jax.vmap(lambda x: stack(W, x, "relu"))(jnp.asarray(xj)))
            firsts = [jax.tree.map(lambda a: np.array(a[j, t]), fitted) for t in range(fitted.linear.shape[1])]
            exact = _lines.first_layer_from_kinks(kinks[j], found[j]) if mask[j].all() else None
            if exact is not None:  # layer 1 from layer 2's kinks, in place of the last restart's
                first = jax.tree.map(np.copy, firsts[0])
                first.block.up[0], (first.block.down[0], first.linear[0]) = found[j], exact
                firsts = [first] + firsts[:-1]
            starts.append([second_layer_start(p, kinks[j], found[j, mask[j]], xj, yj) for p in firsts])
        starts = jax.tree.map(lambda *a: np.stack(a), *[jax.tree.map(lambda *b: np.stack(b), *s) for s in starts])
        refit, _ = fit(left, jax.random.fold_in(key, 5), steps=0, starts=starts)
        out = _best_converted(refit, left, out, depth, merge_tol, inputs_seen)
        left = np.array([j for j in left if j not in out], int)
    if depth == 2 and left.size:  # layer 1 residual-free (A₁ = 0), each restart its own orientation
        oriented, _ = fit(left, jax.random.fold_in(key, 6), restarts=restarts, residual_free_first=True)
        out = _best_converted(oriented, left, out, depth, merge_tol, inputs_seen)
    return out


def _best_converted(fitted: Linear, draws: np.ndarray, out: dict, depth: int, tol: float, inputs) -> dict:
    """``out`` with ``{draws[i]: residual-free block}`` added for each row ``i`` of ``fitted``
    (leading ``(rows, restarts)`` axes, best restart first) whose draw is not in it yet: its best
    restart that :func:`decided` converts."""
    out = dict(out)
    for t in range(fitted.linear.shape[1]):
        rest = np.array([i for i, j in enumerate(draws) if int(j) not in out], int)
        if not rest.size:
            break
        got = decided(
            jax.tree.map(lambda a: a[rest, t], fitted.block), fitted.linear[rest, t], depth, "relu", tol, inputs
        )
        out.update({int(draws[rest[i]]): V for i, V in got.items()})
    return out


def second_layer_start(fitted: Linear, kinks, lines: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> Linear:
    """A depth-2 fit's layer 1 with layer 2's ``U₂`` on the target's second-layer lines as that
    layer 1 sees them (:func:`absorbjax.fit._lines.second_layer_lines`; the fit's own rows where
    fewer are found) and ``(D₂, A₂)`` by least squares on the target's values ``ys (K, d)`` at
    ``xs (K, d)`` (with inputs beside every kink: a unit that bends only in a thin cone is
    linear on random inputs)."""
    up, down, A = (np.asarray(a, np.float64) for a in (*fitted.block, fitted.linear))
    n = up.shape[1]
    first = MLPParams(up[0], down[0])
    u2, _ = _lines.second_layer_lines(kinks, first, A[0], lines)
    U2 = np.concatenate([u2[:n], up[1][len(u2[:n]) :]])
    h = layer_image(first, A[0], xs, "relu")
    c = np.linalg.lstsq(np.c_[np.maximum(h @ U2.T, 0.0), h], ys, rcond=None)[0]  # y ≈ D₂ σ(U₂ h) + A₂ h
    return Linear(MLPParams(np.stack([up[0], U2]), np.stack([down[0], c[:n].T])), np.stack([A[0], c[n:].T]))


def _splice(a: np.ndarray, b: np.ndarray, idx: np.ndarray, use: np.ndarray) -> np.ndarray:
    """``a`` with rows ``idx[use]`` replaced by ``b[use]`` (``b`` has one row per ``idx``)."""
    out = np.array(a, copy=True)
    out[idx[use]] = b[use]
    return out
