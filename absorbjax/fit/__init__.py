"""Numerical search for residual-free blocks that reproduce residual blocks.

For a residual block ``f_W(x) = A x + W_down σ(W_up x)`` (``A = I`` unless ``skip`` is given; a
depth-``L`` residual stack with ``depth=L``) :func:`search` looks for weights ``V`` of a
residual-free block ``g_V(x) = V_down σ(V_up x)`` of the same kind and width ``n`` (or a wider
``m ≥ n``) minimising the mean relative squared error

    ``ℓ(V) = mean_k ‖f_W(x_k) − g_V(x_k)‖² / ‖x_k‖²``

over inputs ``x_k`` with directions uniform on the sphere and radii log-uniform over several
decades around 1. Where Thm 8/10 says a block absorbs, a float64 search that finds the absorber
reaches ``ℓ ≲ 1e-29``; where Props 5/6 or Cor 11 say it cannot, ``ℓ`` stays bounded away from 0,
and the error profile per radius decade (on held-out inputs) shows where: near the origin for
gated and homogeneous blocks. The weight norm of the best ``V`` shows errors that only fall as
``‖V‖`` grows. A search is evidence one way only: with the defaults it finds the absorber of
almost every absorbable block at ``n = 2d`` but of few at ``n = 4d`` (``experiments/bench_fit.py
--sizes``), so a failed search proves nothing; :func:`absorbjax.condition.find_absorbing_set`
decides.

The problem (``skip``, ``depth``, ``width``, ``linear``, :class:`Inputs`) is passed as arguments;
how each draw is searched as a :class:`Solver` and how the search executes as a :class:`Run`, both
frozen and built by keyword (their fields also work as keyword shorthand: ``restarts=8``).

One draw runs ``restarts`` independent initialisations through a first-order optax phase
(Adam by default, ``steps`` steps in ``lax.scan``) and then a polish phase of fixed length
(:class:`Polish`): Levenberg–Marquardt (Gauss–Newton) for small candidates, ``optax.lbfgs``
for large ones, first on every restart and then only on the most promising ones. Restarts and
draws are added with ``jax.vmap``; draws go through one jitted function in batches of
``batch_size`` per device (so memory stays bounded at any number of draws), the batches'
draws axis sharded over a ``"draws"`` mesh axis when there are several devices; the progress
bar and the checkpoint advance per chunk of batches, from Python, never from inside ``jit``.
Draw ``i`` uses ``jax.random.fold_in(key, i)`` and its restart ``r`` a further
``fold_in(·, r)``, and every batch has the same shapes, so results do not depend on the chunk
size or the number of devices.

The package, one responsibility per module: :mod:`~absorbjax.fit.config` (option types,
validation, the static configuration), :mod:`~absorbjax.fit.loss` (inputs and ``ℓ``),
:mod:`~absorbjax.fit.solvers` (first-order phase, L-BFGS, Levenberg–Marquardt),
:mod:`~absorbjax.fit.draw` (one draw: restarts, phases, selection, profile),
:mod:`~absorbjax.fit.drawmap` (a batched, sharded, checkpointed map over draws),
:mod:`~absorbjax.fit.result`, :mod:`~absorbjax.fit.driver` (:func:`search`),
:mod:`~absorbjax.fit.measure` (recall and separation of a population) and
:mod:`~absorbjax.fit.expand` (:func:`expand_search`, opt-in: search wider with a free linear term,
merge units (:mod:`~absorbjax.fit.merge`), decide the condition on them and convert the fit into a
residual-free block (:mod:`~absorbjax.fit.convert`), polish; it finds the absorbers that the default
search misses at ``n = 4d``) and :mod:`~absorbjax.fit.lines` (a ReLU stack's kinks read from its values: its first-layer lines,
its second layer's through a fitted first layer, a depth-2 stack's first layer from its second
layer's kinks; a fit with the first layer held on the lines, which ``expand`` tries first on ReLU
targets).
"""

from absorbjax.fit import config, convert, draw, drawmap, driver, expand, lines, loss, measure, merge, result, solvers
from absorbjax.fit.config import Inputs, Linear, LineStep, Polish, Run, Solver, Wide, default_optimizer, min_tol
from absorbjax.fit.driver import search
from absorbjax.fit.expand import expand_search
from absorbjax.fit.loss import decade_edges, relative_loss, sample_inputs
from absorbjax.fit.measure import Recall, recall
from absorbjax.fit.result import ExpandRecord, SearchConfig, SearchResult

# The curated surface; the other submodules (config, draw, drawmap, driver, loss, measure, result,
# solvers) are the implementation and stay reachable as attributes, but out of `dir(fit)`.
__all__ = [
    "search",
    "expand_search",
    "SearchResult",
    "SearchConfig",
    "ExpandRecord",
    "Solver",
    "Run",
    "Inputs",
    "Linear",
    "Polish",
    "Wide",
    "LineStep",
    "default_optimizer",
    "min_tol",
    "relative_loss",
    "sample_inputs",
    "decade_edges",
    "Recall",
    "recall",
    "expand",
    "merge",
    "convert",
    "lines",
]
_INTERNAL = (config, draw, drawmap, driver, loss, measure, result, solvers)


def __dir__() -> list[str]:
    return sorted(__all__)
