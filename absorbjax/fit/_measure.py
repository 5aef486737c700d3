"""Recall and separation: how often a search solves a population of targets, measured one way.

:func:`recall` runs :func:`absorbjax.fit.search` on a population (draws axis) and counts the
draws it solves with :meth:`SearchResult.solved` (loss ``≤ tol`` on training AND held-out
inputs). On absorbable targets that count is the recall; on generic targets (Cor 11) the
same measurement reports the separation: how many draws get below a threshold such as 1e-12.
"""

from __future__ import annotations

import time
from typing import Callable, NamedTuple

import numpy as np

from absorbjax import io
from absorbjax.fit._config import Problem, Run, Solver, check_options
from absorbjax.fit._driver import search
from absorbjax.fit._result import SearchResult
from absorbjax.results import Result


class _RecallFields(NamedTuple):
    solved: np.ndarray
    best_loss: np.ndarray
    holdout_loss: np.ndarray
    tol: float
    seconds: float
    result: SearchResult


class Recall(_RecallFields, Result):
    """One population's outcome (a :class:`~absorbjax.results.Result`: read ``count`` or
    ``rate``, not ``bool(recall)``).

    Attributes:
      solved: ``(draws,)`` bool, loss ``≤ tol`` on training and held-out inputs.
      best_loss, holdout_loss: ``(draws,)`` the best candidate's training and held-out loss.
      tol: the threshold ``solved`` used.
      seconds: wall time of the search (compilation included).
      result: the :class:`SearchResult`.
    """

    __slots__ = ()
    truth_field = "count"

    @property
    def count(self) -> int:
        """Number of solved draws."""
        return int(self.solved.sum())

    @property
    def rate(self) -> float:
        """Fraction of solved draws."""
        return float(self.solved.mean())

    def below(self, threshold: float) -> int:
        """Number of draws whose training loss is ``< threshold`` (the separation count)."""
        return int((self.best_loss < threshold).sum())

    def summary(self) -> str:
        """The same as :meth:`line`."""
        return self.line()

    def to_dict(self) -> dict:
        """Plain JSON-ready dict; the search result without its candidate params."""
        out = {k: getattr(self, k) for k in ("solved", "best_loss", "holdout_loss", "tol", "seconds")}
        return {**io.to_jsonable(out), "count": self.count, "result": self.result.to_dict(params=False)}

    def line(self) -> str:
        """``solved/draws (rate%); best loss min/median/max``."""
        q = np.quantile(self.best_loss, [0, 0.5, 1])
        return f"{self.count}/{self.solved.size} ({100 * self.rate:.0f}%) solved; best loss min/median/max " + " ".join(
            f"{v:.2g}" for v in q
        )


def recall(
    params,
    activation: str,
    *,
    key,
    search: Callable[..., SearchResult] = search,
    problem: Problem = Problem(),
    solver: Solver = Solver(),
    run: Run = Run(progress=False),
) -> Recall:
    """Search every draw of ``params`` and count the solved ones.

    Args:
      params: a population of blocks with a leading draws axis (as :func:`search` takes it).
      activation, key: passed to ``search``.
      search: the search measured: :func:`absorbjax.fit.search` or one with its signature and
        result, such as :func:`absorbjax.fit._expand.expand_search` (its own options, ``wide=``,
        ``line_step=``, bound with ``functools.partial``).
      problem: the :class:`~absorbjax.fit.Problem`, as :func:`absorbjax.fit.search` takes it.
      solver: the :class:`~absorbjax.fit.Solver` (``solver.tol`` is the threshold counted).
      run: the :class:`~absorbjax.fit.Run` (no progress bar by default).

    Examples:
      >>> import jax
      >>> from absorbjax import fit, models
      >>> with jax.enable_x64(True):
      ...     W, _ = models.planted_sample("relu", 2, 4, key=jax.random.key(0), draws=2)
      ...     r = fit.recall(W, "relu", key=jax.random.key(1), solver=fit.Solver(restarts=8))
      >>> r.count, r.solved.size
      (2, 2)
    """
    check_options(problem, solver, run)
    t = time.perf_counter()
    result = search(params, activation, key=key, problem=problem, solver=solver, run=run)
    seconds = time.perf_counter() - t
    return Recall(result.solved(), result.best_loss, result.holdout_loss, float(result.config.tol), seconds, result)
