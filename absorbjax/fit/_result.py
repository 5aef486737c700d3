"""What a search returns: :class:`SearchResult` (one row per draw) and its :class:`SearchConfig`."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import io
from absorbjax.fit._config import DrawSettings, Linear, LineStep, Wide
from absorbjax.models import Params
from absorbjax.results import Result


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExpandRecord:
    """What :func:`~absorbjax.fit._expand.expand_search` ran with and did (:attr:`SearchConfig.expand`),
    frozen.

    :meth:`to_dict` is its JSON record (the keys it has always had: ``factor``, ``wide_restarts``,
    ``wide_steps``, ``wide_polish``, ``rounds``, ``proposals_per_draw``, ``dense``, ``merge_tol``,
    ``unsolved``, ``proposed``, ``improved`` and, when the line step ran, ``lines``).

    Attributes:
      wide: the wide rounds' :class:`~absorbjax.fit.Wide`, ``restarts`` and ``steps`` resolved.
      line_step: the line step's :class:`~absorbjax.fit.LineStep`, or ``None`` where it did not run
        (GELU, a ``skip``, or ``line_step=None``).
      unsolved: draws the first search left unsolved.
      proposed, improved: draws given a final block, and those whose loss it lowered (all rounds).
      lines_proposed, lines_improved: the same for the line step's rounds alone.
    """

    wide: Wide
    line_step: LineStep | None
    unsolved: int
    proposed: int
    improved: int
    lines_proposed: int = 0
    lines_improved: int = 0

    def to_dict(self) -> dict:
        """The JSON record (``wide_polish`` and ``lines`` as dicts)."""
        w = self.wide
        out = {
            "factor": w.factor,
            "wide_restarts": w.restarts,
            "wide_steps": w.steps,
            "wide_polish": w.polish._asdict(),
            "rounds": w.rounds,
            "proposals_per_draw": w.proposals,
            "dense": w.dense,
            "merge_tol": w.merge_tol,
            "unsolved": self.unsolved,
            "proposed": self.proposed,
            "improved": self.improved,
        }
        if self.line_step is not None:
            step = self.line_step
            out["lines"] = {
                "restarts": step.restarts,
                "rounds": step.rounds,
                "segments": list(step.segments),
                "proposed": self.lines_proposed,
                "improved": self.lines_improved,
            }
        return out

    _asdict = to_dict  # the NamedTuple protocol absorbjax.io.to_jsonable reads


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchConfig(DrawSettings):
    """The settings a search ran with (:attr:`SearchResult.config`), frozen: the
    :class:`~absorbjax.fit._config.DrawSettings` every draw was computed with (``depth``, ``d``,
    ``n``, ``width``, ``restarts``, ``steps``, ``init``, ``linear``, ``num``, ``low``, ``high``,
    ``holdout``, ``polish``, documented there) and the fields below.

    :meth:`to_dict` is its JSON record (the same keys, in the same order, as the record has always
    had; :func:`absorbjax.io.to_jsonable` writes it).

    Attributes:
      activation: the activation's registered name.
      optimizer: ``"default"`` or ``"custom"``.
      skip: whether a linear skip ``A`` was given.
      draws: the number of draws searched.
      tol: the loss below which a draw counts as solved.
      batch_size, chunk_size, devices: the layout the draws ran in.
      dtype, key, jax: the weights' dtype, the base key's data and ``jax.__version__``.
      single: the target was one block without a draws axis (the result's fields have none).
      expand: :func:`~absorbjax.fit._expand.expand_search`'s :class:`ExpandRecord` (settings and
        counts), else ``None``.
    """

    activation: str
    optimizer: str
    skip: bool
    draws: int
    tol: float
    batch_size: int
    chunk_size: int
    devices: int
    dtype: str
    key: tuple[int, ...]
    jax: str
    single: bool = False
    expand: ExpandRecord | None = None

    def to_dict(self) -> dict:
        """The JSON record: every field, ``polish`` as a dict, ``key`` as a list; ``single`` and
        ``expand`` only when set."""
        names = ["activation"] + [
            f.name for f in dataclasses.fields(self) if f.name not in ("activation", "single", "expand")
        ]
        out = {k: getattr(self, k) for k in names}
        out["polish"] = None if self.polish is None else self.polish._asdict()
        out["key"] = list(self.key)
        if self.single:
            out["single"] = True
        if self.expand is not None:
            out["expand"] = self.expand.to_dict()
        return out

    _asdict = to_dict  # the NamedTuple protocol absorbjax.io.to_jsonable reads


class _SearchFields(NamedTuple):
    """The fields of :class:`SearchResult` (documented there)."""

    best_loss: np.ndarray
    best_params: Params | Linear
    losses: np.ndarray
    failed: np.ndarray
    profile: np.ndarray
    edges: np.ndarray
    weight_norms: np.ndarray
    target_norms: np.ndarray
    holdout_loss: np.ndarray
    config: SearchConfig
    final_loss: np.ndarray | None = None


class SearchResult(_SearchFields, Result):
    """What :func:`search` found, one row per draw (a single block, without a draws axis, gives
    fields without one: ``best_loss`` a scalar, ``losses`` ``(restarts,)``, …; :meth:`batched`
    adds it back).

    A :class:`~absorbjax.results.Result`: ``bool(result)`` raises ``TypeError``; read
    ``result.solved()`` (or ``best_loss``).

    Attributes:
      best_loss: ``(draws,)`` lowest relative loss ``ℓ`` over the restarts that did not fail
        (``inf`` when all failed).
      best_params: the best candidate ``V`` per draw, leading draws axis (same type as the target);
        for ``search(..., problem=Problem(linear=True))`` a :class:`~absorbjax.fit.Linear` of that ``V`` and its free
        linear term ``A`` (``(draws, d, d)``, ``(draws, depth, d, d)`` for stacks), the candidate
        as one object, as ``init`` takes it.
      losses: ``(draws, restarts)`` final ``ℓ`` of every restart (after polishing, for the
        polished ones); ``nan``/``inf`` where the restart failed.
      failed: ``(draws, restarts)`` bool, the restart ended non-finite (kept out of ``best_*``).
      profile: ``(draws, bins)`` mean relative squared error of the best candidate on held-out
        inputs in each radius decade.
      edges: ``(bins + 1,)`` radius edges of the profile bins.
      weight_norms: ``(draws,)`` Frobenius norm of the best candidate ``‖V‖``.
      target_norms: ``(draws,)`` Frobenius norm of the target ``‖W‖`` (for comparison: an error
        that only falls as ``‖V‖`` grows is approximate, not exact, absorption).
      holdout_loss: ``(draws,)`` relative loss of the best candidate on all held-out inputs.
      config: a :class:`SearchConfig`: the settings, the seed's key data and ``jax.__version__``.
      final_loss: :func:`~absorbjax.fit._expand.expand_search` only: ``(draws,)`` the loss of the
        final block it proposed and polished (``inf`` where it proposed none), else ``None``;
        ``losses`` and ``failed`` stay the first search's restarts.
    """

    __slots__ = ()
    truth_field = "solved()"

    def solved(self, tol: float | None = None) -> np.ndarray:
        """``(draws,)`` bool: both ``best_loss`` and ``holdout_loss`` ``≤ tol`` (default
        ``config.tol``). The held-out check catches a ``V`` that is exact on the training
        inputs only (a ReLU kink placed in a wedge no training direction falls in)."""
        tol = self.config.tol if tol is None else tol
        return (self.best_loss <= tol) & (self.holdout_loss <= tol)

    def _summary(self) -> str:
        """The short repr (:class:`absorbjax.results.Result`): the problem, solved draws, median loss."""
        r = self.batched()
        c, (draws, restarts) = r.config, r.losses.shape
        loss = r.best_loss[np.isfinite(r.best_loss)]
        median = f"{np.median(loss):.3g}" if loss.size else "n/a"
        return (
            f"{c.activation} d={c.d} n={c.n} depth={c.depth}: solved {int(r.solved().sum())}/{draws} "
            f"draws ({restarts} restarts), median best loss {median}"
        )

    def summary(self) -> str:
        """A few lines: quantiles of ``best_loss``, solved fraction, failures, the profile."""
        r = self.batched()
        c, loss = r.config, r.best_loss
        draws, restarts = r.losses.shape
        q = np.quantile(loss[np.isfinite(loss)], [0, 0.1, 0.5, 0.9, 1]) if np.isfinite(loss).any() else [np.nan] * 5
        prof = np.median(r.profile, 0)
        bins = " ".join(f"[{a:.0e},{b:.0e}):{p:.2g}" for a, b, p in zip(r.edges[:-1], r.edges[1:], prof))
        lines = [
            f"search {c.activation} d={c.d} n={c.n} width={c.width} depth={c.depth}: "
            f"{draws} draws x {restarts} restarts",
            "best loss min/10%/50%/90%/max: " + " ".join(f"{v:.3g}" for v in q),
            f"solved (train and held-out loss <= {c.tol:.0e}): {int(r.solved().sum())}/{draws}; "
            f"failed restarts: {int(r.failed.sum())}/{r.failed.size}",
            f"median profile per radius decade: {bins}",
            f"median |V| {np.median(r.weight_norms):.3g} vs |W| {np.median(r.target_norms):.3g}",
        ]
        if r.final_loss is not None:
            final = int(np.isfinite(r.final_loss).sum())
            lines.append(f"expand: {final}/{draws} draws got a final block (their loss is in final_loss)")
        return "\n".join(lines)

    def batched(self) -> "SearchResult":
        """This result with a leading draws axis on every per-draw field (of length 1 for a
        single-block search; other results are returned as they are)."""
        if not self.config.single:
            return self
        return self._replace(**{k: _map(lambda a: np.asarray(a)[None], v) for k, v in self._per_draw().items()})

    def _per_draw(self) -> dict:
        return {k: getattr(self, k) for k in self._fields if k not in ("edges", "config")}

    def to_dict(self, params: bool = True) -> dict:
        """Plain JSON-ready dict (via :func:`absorbjax.io.to_jsonable`); the record keeps its keys: a
        :class:`~absorbjax.fit.Linear` candidate's ``A`` is ``best_linear`` (``null`` without one)."""
        block, linear = self.best_params if isinstance(self.best_params, Linear) else (self.best_params, None)
        out = {}
        for k in self._fields:
            if k == "best_params" and params:
                out[k] = {"type": type(block).__name__, **block._asdict()}
            elif k != "best_params" and (k != "final_loss" or self.final_loss is not None):
                out[k] = getattr(self, k)  # a plain search's record has no final_loss
            if k == "config" and params:
                out["best_linear"] = linear
        out["solved"] = self.solved()
        return io.to_jsonable(out)


def _map(fn, value):
    """``fn`` on every array of a per-draw field (``None`` stays ``None``)."""
    if value is None:
        return None
    if isinstance(value, tuple):  # the params NamedTuple, or a Linear of it and A
        return jax.tree.map(lambda a: jnp.asarray(fn(a)), value)
    return fn(value)


def unbatch(result: SearchResult) -> SearchResult:
    """A single-block result: the length-1 draws axis taken off every per-draw field."""
    return result._replace(**{k: _map(lambda a: np.asarray(a)[0], v) for k, v in result._per_draw().items()})


def assemble(out: dict, kind: type, edges: np.ndarray, config: SearchConfig) -> SearchResult:
    """A :class:`SearchResult` from the stacked per-draw outputs of ``fit._draw.one_draw``."""
    best = kind(*(jnp.asarray(out["best_params." + f]) for f in kind._fields))
    if "best_linear" in out:  # search(..., linear=True): the candidate with its free linear term
        best = Linear(best, jnp.asarray(out["best_linear"]))
    draws, restarts = out["losses"].shape
    chex.assert_shape([out["best_loss"], out["holdout_loss"], out["weight_norms"], out["target_norms"]], (draws,))
    chex.assert_shape(out["failed"], (draws, restarts))
    chex.assert_shape(out["profile"], (draws, len(edges) - 1))
    return SearchResult(
        best_loss=out["best_loss"],
        best_params=best,
        losses=out["losses"],
        failed=out["failed"].astype(bool),
        profile=out["profile"],
        edges=edges,
        weight_norms=out["weight_norms"],
        target_norms=out["target_norms"],
        holdout_loss=out["holdout_loss"],
        config=config,
    )
