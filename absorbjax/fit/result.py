"""What a search returns: :class:`SearchResult`, one row per draw."""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax.numpy as jnp
import numpy as np

from absorbjax import io
from absorbjax.models import Params
from absorbjax.results import Result

__all__ = ["SearchResult", "assemble"]


class _SearchFields(NamedTuple):
    """The fields of :class:`SearchResult` (documented there)."""

    best_loss: np.ndarray
    best_params: Params
    losses: np.ndarray
    failed: np.ndarray
    profile: np.ndarray
    edges: np.ndarray
    weight_norms: np.ndarray
    target_norms: np.ndarray
    holdout_loss: np.ndarray
    config: dict
    best_linear: np.ndarray | None = None


class SearchResult(_SearchFields, Result):
    """What :func:`search` found, one row per draw.

    A :class:`~absorbjax.results.Result`: ``bool(result)`` raises ``TypeError``; read
    ``result.solved()`` (or ``best_loss``).

    Attributes:
      best_loss: ``(draws,)`` lowest relative loss ``ℓ`` over the restarts that did not fail
        (``inf`` when all failed).
      best_params: the best candidate ``V`` per draw, leading draws axis (same type as the target).
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
      config: the settings, the seed's key data and ``jax.__version__``.
      best_linear: ``search(..., linear=True)`` only: the best candidate's free linear term
        ``L`` per draw (``(draws, d, d)``, ``(draws, depth, d, d)`` for stacks), else ``None``.
    """

    __slots__ = ()
    truth_field = "solved()"

    def solved(self, tol: float | None = None) -> np.ndarray:
        """``(draws,)`` bool: both ``best_loss`` and ``holdout_loss`` ``≤ tol`` (default
        ``config["tol"]``). The held-out check catches a ``V`` that is exact on the training
        inputs only (a ReLU kink placed in a wedge no training direction falls in)."""
        tol = self.config["tol"] if tol is None else tol
        return (self.best_loss <= tol) & (self.holdout_loss <= tol)

    def _summary(self) -> str:
        """The short repr (:class:`absorbjax.results.Result`): the problem, solved draws, median loss."""
        c, (draws, restarts) = self.config, self.losses.shape
        loss = self.best_loss[np.isfinite(self.best_loss)]
        median = f"{np.median(loss):.3g}" if loss.size else "n/a"
        return (
            f"{c['activation']} d={c['d']} n={c['n']} depth={c['depth']}: solved {int(self.solved().sum())}/{draws} "
            f"draws ({restarts} restarts), median best loss {median}"
        )

    def summary(self) -> str:
        """A few lines: quantiles of ``best_loss``, solved fraction, failures, the profile."""
        loss = self.best_loss
        draws, restarts = self.losses.shape
        q = np.quantile(loss[np.isfinite(loss)], [0, 0.1, 0.5, 0.9, 1]) if np.isfinite(loss).any() else [np.nan] * 5
        tol = self.config["tol"]
        prof = np.median(self.profile, 0)
        bins = " ".join(f"[{a:.0e},{b:.0e}):{p:.2g}" for a, b, p in zip(self.edges[:-1], self.edges[1:], prof))
        lines = [
            f"search {self.config['activation']} d={self.config['d']} n={self.config['n']} "
            f"width={self.config['width']} depth={self.config['depth']}: {draws} draws x {restarts} restarts",
            "best loss min/10%/50%/90%/max: " + " ".join(f"{v:.3g}" for v in q),
            f"solved (train and held-out loss <= {tol:.0e}): {int(self.solved().sum())}/{draws}; "
            f"failed restarts: {int(self.failed.sum())}/{self.failed.size}",
            f"median profile per radius decade: {bins}",
            f"median |V| {np.median(self.weight_norms):.3g} vs |W| {np.median(self.target_norms):.3g}",
        ]
        return "\n".join(lines)

    def to_dict(self, params: bool = True) -> dict:
        """Plain JSON-ready dict (via :func:`absorbjax.io.to_jsonable`)."""
        out = {k: getattr(self, k) for k in self._fields if k not in ("best_params", "best_linear") or params}
        if params:
            out["best_params"] = {"type": type(self.best_params).__name__, **self.best_params._asdict()}
        out["solved"] = self.solved()
        return io.to_jsonable(out)


def assemble(out: dict, kind: type, edges: np.ndarray, config: dict) -> SearchResult:
    """A :class:`SearchResult` from the stacked per-draw outputs of ``fit.draw.one_draw``."""
    best = kind(*(jnp.asarray(out["best_params." + f]) for f in kind._fields))
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
        best_linear=out.get("best_linear"),
    )
