"""One workaround for XLA's CPU runtime, used wherever a program has two batched LAPACK calls."""

from __future__ import annotations

import jax


def after(tree, x):
    """``tree`` with the same values, computed after the array ``x``: each leaf gets ``+ 0`` from
    ``x != x`` on ``x``'s first entry (XLA keeps that comparison for floats, so the dependence
    survives compilation). Two batched LAPACK calls of one program with no data dependence between
    them can both split their batch into tasks of XLA's CPU pool and wait for them, with no thread
    left to run one: a deadlock (research log, 2026-12-03 night). Making the second call's input
    depend on the first call's output orders them."""
    first = x.ravel()[0]
    zero = first != first
    return jax.tree.map(lambda a: a + zero.astype(a.dtype), tree)
