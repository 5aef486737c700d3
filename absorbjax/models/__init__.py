"""Pure MLP blocks on one input ``x`` of shape ``(d,)``, their weights, and Lemma 4.

Shapes follow the paper (column vectors, PyTorch layout): ``W_up ∈ R^{n×d}`` (rows are hidden
units), ``W_down ∈ R^{d×n}``. Blocks act on ONE example; add batches, draws and restarts with
``jax.vmap`` at the call site. The activation is a static name from
:mod:`absorbjax.activations`, never a pytree leaf, so ``jit`` specialises on it and optax sees
only float arrays.

Two rooms: :mod:`absorbjax.models.blocks` (the params types, ``mlp``, ``skip_mlp``, ``stack``,
``reduce_skip``, ``check_layout``) and :mod:`absorbjax.models.draws` (random weights: ``init``, ``sample``,
``absorbable``); every name is used as ``models.<name>``.
"""

from absorbjax.models.blocks import (
    GatedParams,
    MLPParams,
    NarrowBlockWarning,
    Params,
    check_layout,
    dims,
    flax_kernel,
    mlp,
    reduce_skip,
    skip_mlp,
    stack,
)
from absorbjax.models.draws import (
    DISTS,
    absorbable,
    absorbable_sample,
    compiled_programs,
    init,
    sample,
    size_bucket,
)

__all__ = [
    "MLPParams",
    "GatedParams",
    "Params",
    "mlp",
    "skip_mlp",
    "stack",
    "init",
    "sample",
    "absorbable",
    "absorbable_sample",
    "reduce_skip",
    "dims",
    "flax_kernel",
    "check_layout",
    "NarrowBlockWarning",
    "size_bucket",
    "compiled_programs",
    "DISTS",
]
