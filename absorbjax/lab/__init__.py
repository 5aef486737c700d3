"""The lab: what the paper's experiments use beside the library proper.

* :mod:`absorbjax.lab.reproduce` runs the experiments (``absorbjax reproduce``) and
  :mod:`absorbjax.lab.stall` reports a long run that stopped moving;
* :mod:`absorbjax.lab.plotting` draws figures without pyplot state, in the paper's style
  (:mod:`absorbjax.lab.figstyle`);
* :mod:`absorbjax.lab.stats` holds the statistics behind the claims and
  :mod:`absorbjax.lab.origin` the origin study's searches.

Each module is imported on first use (``from absorbjax.lab import figstyle``): importing the lab
imports no JAX.
"""

import importlib

_MODULES = ("figstyle", "origin", "plotting", "reproduce", "stall", "stats")

__all__ = list(_MODULES)


def __getattr__(name: str):
    if name not in _MODULES:
        raise AttributeError(f"module 'absorbjax.lab' has no attribute {name!r}")
    value = importlib.import_module(f"absorbjax.lab.{name}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
