"""The open question of ``docs/theory/depth.md`` §11, searched: are the residual ReLU stacks of the open
set ``O`` (outside ``Ω``, ``n ≥ 2d``) reproduced by free stacks of the same width and depth?

A stack of ``O``: block 1 folds ``R^d`` onto the negative orthant (units ``i < d``: row ``e_i``,
column ``−2e_i``) plus ``n − d`` arbitrary units with small columns (``ε = Σ_{i≥d} ‖D_1[:,i]‖₁
‖U_1[i]‖₁``); every later row ``v`` has ``min_j v_j > ε max_j |v_j|`` (checked for each draw), so the
later blocks are the identity on block 1's image and the stack is its first block. The controls are
the section's reproduced example (``n = 2d`` fold units with rows ``±e_j`` and columns ``−2e_j``,
``−e_j``, other units with zero columns): a free stack of the same size reproduces them.

:func:`absorbjax.fit.search` (its defaults, ``depth=L``) runs on both. What it finds is **searched**:
a control it solves shows it can find such free stacks; an ``O`` stack it leaves unsolved proves
nothing (evidence one way only), a solved one would answer the question for that stack.

Not an experiment (``reproduce.discover`` skips modules whose names start with ``_``);
``depth.py`` imports it, a module beside it.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from absorbjax import fit, models
from absorbjax.lab import reproduce

__all__ = ["draw", "study", "claims"]


def draw(d: int, n: int, depth: int, rng: np.random.Generator, control: bool):
    """``(up (L, n, d), down (L, d, n), ε)``: one stack of ``O`` (or a control) as described above."""
    up, down = np.zeros((depth, n, d)), np.zeros((depth, d, n))
    up[0, :d], down[0, :, :d] = np.eye(d), -2 * np.eye(d)
    if control:
        up[0, d : 2 * d], down[0, :, d : 2 * d] = -np.eye(d), -np.eye(d)
        up[0, 2 * d :] = rng.normal(size=(n - 2 * d, d))
    else:
        up[0, d:] = rng.normal(size=(n - d, d))
        down[0, :, d:] = 0.1 * rng.normal(size=(d, n - d)) / np.sqrt(n)
    small = range(2 * d if control else d, n)  # a control's image is the negative orthant exactly
    eps = float(sum(np.abs(down[0, :, i]).sum() * np.abs(up[0, i]).sum() for i in small))
    up[1:] = rng.uniform(0.5, 1.5, size=(depth - 1, n, d))
    down[1:] = rng.normal(size=(depth - 1, d, n)) / np.sqrt(n)
    if not np.all(up[1:].min(-1) > eps * np.abs(up[1:]).max(-1)):
        raise ValueError(f"drawn later rows leave O (eps = {eps:.3f}); use smaller first-block columns")
    return up, down, eps


def study(config, key):
    """One row per size in ``config["openset"]["sizes"]`` (``[d, n, L]``, ``n ≥ 2d``): ``draws``
    stacks of ``O`` and ``controls`` controls, searched with the default search at depth ``L`` (its
    ``restarts`` from the config when given, the default otherwise)."""
    cfg = config["openset"]
    rows = []
    for d, n, depth in cfg["sizes"]:
        rng = np.random.default_rng(np.asarray(jax.random.key_data(jax.random.fold_in(key, 100 * d + n))))
        kinds = [True] * cfg["controls"] + [False] * cfg["draws"]
        ups, downs, eps = zip(*(draw(d, n, depth, rng, control) for control in kinds))
        W = models.MLPParams(up=jnp.asarray(np.stack(ups)), down=jnp.asarray(np.stack(downs)))
        start = time.perf_counter()
        solver = fit.Solver(restarts=cfg.get("restarts", fit.Solver().restarts))
        r = fit.search(
            W,
            "relu",
            key=jax.random.fold_in(key, d * 1000 + n),
            problem=fit.Problem(depth=depth),
            run=fit.Run(progress=False),
            solver=solver,
        )
        seconds = time.perf_counter() - start
        solved, c = r.solved(), cfg["controls"]
        rows.append(
            {
                "d": d,
                "n": n,
                "depth": depth,
                "controls": c,
                "controls_solved": int(solved[:c].sum()),
                "control_max_loss": float(np.max(r.best_loss[:c])),
                "draws": cfg["draws"],
                "solved": int(solved[c:].sum()),
                "min_loss": float(np.min(r.best_loss[c:])),
                "min_holdout": float(np.min(r.holdout_loss[c:])),
                "max_eps": float(max(eps[c:])),
                "seconds_per_stack": seconds / len(kinds),
                "tol": r.config.tol,
            }
        )
    return rows


def claims(rows):
    """One claim: the search solves a control at every size (so it can find such free stacks; a fit
    exact on its training inputs can still miss held-out ones in a thin wedge between two of them)
    and reports what it found on ``O`` (searched)."""
    if not rows:
        return []
    found = sum(r["solved"] for r in rows)
    return [
        reproduce.Claim(
            "searched, beyond the paper (docs/theory/depth.md §11, open for n >= 2d): at every size the default "
            "search (fit.search at the stack's depth) finds a free stack of the same width and depth for a control "
            "(the section's reproduced folded stack: it can find one) and for none of the stacks drawn from the open "
            "set O (evidence one way only: an unsolved stack proves nothing)",
            "; ".join(
                f"({r['d']},{r['n']},L={r['depth']}) controls {r['controls_solved']}/{r['controls']} solved "
                f"(max loss {r['control_max_loss']:.1e}), O {r['solved']}/{r['draws']} solved (min loss "
                f"{r['min_loss']:.1e}, held-out {r['min_holdout']:.1e}; eps <= {r['max_eps']:.2f}), "
                f"{r['seconds_per_stack']:.1f}s a stack"
                for r in rows
            ),
            holds=all(r["controls_solved"] >= 1 for r in rows) and found == 0,
            criterion="at least one control solved at every size (loss and held-out loss <= tol, float64) and no "
            f"stack of O solved; a solved stack of O would answer the question for it ({found} found)",
            figure=None,
        )
    ]
