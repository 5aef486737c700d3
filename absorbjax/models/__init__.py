"""Pure MLP blocks on one input ``x`` of shape ``(d,)``, their weights, and Lemma 4.

Shapes follow the paper (column vectors, PyTorch layout): ``W_up ∈ R^{n×d}`` (rows are hidden
units), ``W_down ∈ R^{d×n}``. Blocks act on ONE example; add batches, draws and restarts with
``jax.vmap`` at the call site. The activation is a static name from
:mod:`absorbjax.activations`, never a pytree leaf, so ``jit`` specialises on it and optax sees
only float arrays.

Three kinds of names, every one used as ``models.<name>``: the params types and their layout
checks (``MLPParams``, ``GatedParams``, ``dims``, ``check_layout``, ``flax_kernel``; NumPy only),
the blocks (``mlp``, ``hidden``, ``skip_mlp``, ``stack``, ``reduce_skip``) and random weights (``init``,
``sample``, ``planted``). The blocks and draws load on first use (PEP 562), so
``from absorbjax.models import MLPParams`` (the NumPy decision in :mod:`absorbjax.condition`)
does not import JAX.
"""

import importlib
from typing import TYPE_CHECKING

from absorbjax.models._params import (
    GatedParams,
    MLPParams,
    NarrowBlockWarning,
    Params,
    check_layout,
    dims,
    flax_kernel,
)

if TYPE_CHECKING:  # for editors and the API docs (griffe); at run time, __getattr__ below
    from absorbjax.models._blocks import hidden, mlp, reduce_skip, skip_mlp, stack
    from absorbjax.models._draws import (
        DISTS,
        init,
        planted,
        planted_sample,
        sample,
        size_bucket,
    )

_LAZY = {  # name -> the private module that defines it; imported (with JAX) on first use
    "mlp": "_blocks",
    "hidden": "_blocks",
    "skip_mlp": "_blocks",
    "stack": "_blocks",
    "reduce_skip": "_blocks",
    "init": "_draws",
    "sample": "_draws",
    "planted": "_draws",
    "planted_sample": "_draws",
    "size_bucket": "_draws",
    "DISTS": "_draws",
}

__all__ = [
    "MLPParams",
    "GatedParams",
    "Params",
    "mlp",
    "hidden",
    "skip_mlp",
    "stack",
    "init",
    "sample",
    "planted",
    "planted_sample",
    "reduce_skip",
    "dims",
    "flax_kernel",
    "check_layout",
    "NarrowBlockWarning",
    "size_bucket",
    "DISTS",
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'absorbjax.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"absorbjax.models.{_LAZY[name]}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
