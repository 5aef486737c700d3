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
planted blocks and stacks (record ``fit_search`` on the benchmarks page); a failed search
proves nothing; :func:`absorbjax.condition.find_absorbing_set` decides.

What is searched for is a :class:`Problem` (``skip``, ``depth``, ``width``, ``linear``,
:class:`Inputs`), how each draw is searched a :class:`Solver` and how the search executes a
:class:`Run`, all three frozen and built by keyword (``problem=Problem(depth=2),
solver=Solver(restarts=8)``).

One draw runs ``restarts`` independent initialisations. The default (``Solver(method="varpro")``,
:mod:`absorbjax.fit._projected`): variable-projection Levenberg–Marquardt fits the candidate with
a free linear term, solving its last layer by least squares at every step
(:mod:`absorbjax.fit._varpro`), with up to ``3 × hops`` rounds of basin hopping over units in that
class where the fit is not exact; the units whose negation best removes that term are negated
(:mod:`absorbjax.fit._signs`, the activation's declared odd part); a residual-free polish
follows, then up to ``hops`` rounds of basin hopping over units (one unit of the best candidate
re-initialised per restart, the variants refitted; they stop once the draw is solved). A stack's
blocks are first searched one at a time and composed (``Solver(blockwise=None)``); the whole
stack is searched where that does not solve it. It reads the target only through its values
(a stack's, and each block's), never the condition. With
``method="adam"``: a first-order optax phase (``steps`` steps in ``lax.scan``) and then a polish
phase of fixed length (:class:`Polish`): Levenberg–Marquardt (Gauss–Newton) for small
candidates, ``optax.lbfgs`` for large ones, first on every restart and then only on the most
promising ones. Restarts and
draws are added with ``jax.vmap``; draws go through one jitted function in batches of
``batch_size`` per device (so memory stays bounded at any number of draws), the batches'
draws axis sharded over a ``"draws"`` mesh axis when there are several devices; the progress
bar and the checkpoint advance per chunk of batches, from Python, never from inside ``jit``.
Draw ``i`` uses ``jax.random.fold_in(key, i)`` and its restart ``r`` a further
``fold_in(·, r)``, and every batch has the same shapes, so results do not depend on the chunk
size or the number of devices.

Beyond :func:`search`, opt-in and theory-assisted: :func:`expand_search` (``method="adam"``
throughout) searches wider with a free linear term, merges the units, decides the condition on
them (:mod:`absorbjax.condition`, so its successes are not independent evidence) and converts the
fit into a residual-free block, then polishes. A ReLU stack's
kinks are read from its values (:func:`kinks`, :class:`Kinks`, :func:`lines_of`): its first-layer
lines (:func:`first_layer_lines`), its second layer's through a fitted first layer
(:func:`second_layer_lines`), a depth-2 stack's first layer from its second layer's kinks
(:func:`first_layer_from_kinks`); :func:`fit_with_lines` fits with the first layer held on the
lines, which :func:`expand_search` tries first on ReLU targets.
"""

from absorbjax.fit._config import (
    Inputs,
    Linear,
    LineStep,
    Method,
    Polish,
    Problem,
    Run,
    Solver,
    Wide,
    default_optimizer,
    min_tol,
)
from absorbjax.fit._driver import search
from absorbjax.fit._expand import expand_search
from absorbjax.fit._lines import (
    Kinks,
    first_layer_from_kinks,
    first_layer_lines,
    fit_with_lines,
    kinks,
    lines_of,
    second_layer_lines,
)
from absorbjax.fit._loss import decade_edges, relative_loss, sample_inputs
from absorbjax.fit._measure import Recall, recall
from absorbjax.fit._result import ExpandRecord, SearchConfig, SearchResult

__all__ = [
    "search",
    "expand_search",
    "SearchResult",
    "SearchConfig",
    "ExpandRecord",
    "Problem",
    "Solver",
    "Run",
    "Method",
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
    "Kinks",
    "kinks",
    "lines_of",
    "first_layer_lines",
    "second_layer_lines",
    "first_layer_from_kinks",
    "fit_with_lines",
]


def __dir__() -> list[str]:
    return sorted(__all__)
