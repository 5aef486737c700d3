"""absorbjax: can an MLP absorb its own skip connection? (Mijoski & Karbevski, arXiv 2604.23705).

Pure-functional JAX blocks, exact checks of the paper's conditions, and vmapped searches for
absorbing weights. Exactness claims need float64: enable it yourself with
``jax.config.update("jax_enable_x64", True)`` (or for a block of code, ``with
jax.enable_x64(True):``); absorbjax never switches it on.

Examples:
  A residual GELU block whose weights satisfy ``W_down[:,S] W_up[S,:] = −I`` and the
  residual-free block that absorbs its skip (Thm 10), equal to rounding error in float64:

  >>> import jax, jax.numpy as jnp
  >>> from absorbjax import condition, models
  >>> with jax.enable_x64(True):
  ...     params, S = models.planted("gelu", 2, 4, key=jax.random.key(0))
  ...     V = condition.absorber(params, S, "gelu")
  ...     x = jnp.array([0.5, -2.0])
  ...     gap = models.skip_mlp(params, x, "gelu") - models.mlp(V, x, "gelu")
  ...     print(bool(jnp.abs(gap).max() < 1e-14))
  True
"""

import importlib
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("absorbjax")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"

# Every name is imported on first use (PEP 562): `import absorbjax` costs no JAX import, so the
# command line answers argument and file errors at once; `absorbjax.weights.blocks(...)` and
# `absorbjax.find_absorbing_set(...)` work right after `import absorbjax`.
_NAMESPACES = (
    "activations",
    "condition",
    "dimension",
    "fit",
    "io",
    "lab",
    "models",
    "nn",
    "probes",
    "results",
    "weights",
)
_NAMES = {  # the flat API: name -> the module that defines it
    # the one-layer question (Thm 8/10): decide, absorb, measure
    "find_absorbing_set": "condition",
    "find_absorbing_sets": "condition",
    "absorber": "condition",
    "distance": "condition",
    "Certificate": "condition",
    "Distance": "condition",
    # extra width
    "min_extra_width": "condition",
    "wide_absorber": "condition.width",
    # searches for absorbing weights
    "search": "fit",
    "expand_search": "fit",
    "SearchResult": "fit",
    # blocks and results
    "MLPParams": "models",
    "GatedParams": "models",
    "mlp": "models",
    "skip_mlp": "models",
    "stack": "models",
    "Result": "results",
    # an independent check of a certificate
    "verify": "_verify",
    "Verification": "_verify",
}

__all__ = [*_NAMES, *_NAMESPACES, "__version__"]


def __getattr__(name: str):
    if name in _NAMESPACES:
        value = importlib.import_module(f"absorbjax.{name}")
    elif name in _NAMES:
        value = getattr(importlib.import_module(f"absorbjax.{_NAMES[name]}"), name)
    else:
        raise AttributeError(f"module 'absorbjax' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
