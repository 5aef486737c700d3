"""absorbjax: can an MLP absorb its own skip connection? (Mijoski & Karbevski, arXiv 2604.23705).

Pure-functional JAX blocks, exact checks of the paper's conditions, and vmapped searches for
absorbing weights. Exactness claims need float64: enable it yourself with
``jax.config.update("jax_enable_x64", True)``; absorbjax never switches it on.
"""

from importlib.metadata import PackageNotFoundError, version

from absorbjax import activations, condition, dimension, fit, io, models, probes
from absorbjax.models import GatedParams, MLPParams, mlp, skip_mlp, stack

try:
    __version__ = version("absorbjax")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0.0.0+unknown"

__all__ = ["activations", "condition", "dimension", "fit", "io", "models", "probes", "MLPParams", "GatedParams", "mlp", "skip_mlp", "stack", "__version__"]
