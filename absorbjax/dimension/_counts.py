"""Parameter counts, the free family's dimension bound and the residual family's maximum rank.

The free bound ``b = 2Lnd − (L−1)d²`` (``− nL`` for ReLU) is *proved* in ``docs/theory/depth.md``
(step 1: the junction gauges and, for ReLU, the unit rescalings are independent symmetries of a
residual-free stack). Below the input width (``n < d``, §8) a free stack depends on each junction's
weights only through the ``n × n`` product ``V_up^{ℓ+1} V_down^ℓ``, so the junction removes
``2nd − n² = d² − (d − n)²`` instead of ``d²``. With biases (``bias=True``: hidden biases ``β_ℓ`` ``(n,)`` and output biases
``γ_ℓ`` ``(d,)`` per block) every count gains ``L(n + d)`` parameters, the free junction gauge becomes
affine (``(L−1)(d² + d)``) and residual stacks gain a translation gauge (``(L−1)d``), step 9.
"""

from __future__ import annotations

import numpy as np

from absorbjax import activations

ACTIVATIONS = ("relu", "gelu")
PRIME = 2097143  # largest prime below 2^21: products < 2^42, so float64 sums of 2^11 of them are exact


def check_sizes(activation: str, d: int, n: int, depth: int) -> str:
    """Validate a size ``(d, n, L)`` (every ``d, n, L ≥ 1``; ``n < d`` too) and return the activation's
    canonical name."""
    name = activations.get(activation).name
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    for arg, v in (("d", d), ("n", n), ("depth", depth)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{arg} must be a positive integer, got {v!r}")
    return name


def param_count(d: int, n: int, depth: int, *, bias: bool = False) -> int:
    """``P = 2 L n d`` (``+ L(n + d)`` with biases): the parameters of a depth-``L`` stack of width
    ``n`` on ``R^d``."""
    return 2 * depth * n * d + (depth * (n + d) if bias else 0)


def free_bound(activation: str, d: int, n: int, depth: int, *, bias: bool = False) -> int:
    """Upper bound (proved) on the functional dimension of free stacks:
    ``2Lnd − (L−1)d²``, minus ``nL`` for ReLU; with biases ``P − (L−1)(d² + d)`` (the junction
    gauge is affine), minus ``nL`` for ReLU. For ``n < d`` each junction removes
    ``d² − (d − n)² = 2nd − n²`` instead of ``d²``: the stack depends on ``V_down^ℓ`` and
    ``V_up^{ℓ+1}`` only through their ``n × n`` product (and, with biases, on ``e_ℓ`` and ``β_{ℓ+1}``
    only through ``V_up^{ℓ+1} e_ℓ + β_{ℓ+1}``), ``docs/theory/depth.md`` §8.

    Examples:
      >>> free_bound("gelu", 2, 2, 2), free_bound("relu", 3, 6, 2), free_bound("gelu", 2, 2, 2, bias=True)
      (12, 51, 18)
      >>> free_bound("gelu", 3, 1, 2)  # 2nd + (L−1)n²
      7
    """
    name = check_sizes(activation, d, n, depth)
    junction = d * d - max(d - n, 0) ** 2
    gauge = (depth - 1) * (junction + (d if bias else 0))
    return param_count(d, n, depth, bias=bias) - gauge - (n * depth if name == "relu" else 0)


def residual_max(activation: str, d: int, n: int, depth: int, *, bias: bool = False) -> int:
    """The largest functional dimension a residual stack can have: ``P``, minus ``nL`` for ReLU
    (the positive rescalings of each unit survive the skip; the junction gauge does not); with
    biases also minus ``(L−1)d``, the translations ``γ_ℓ += t``, ``β_{ℓ+1} −= U_{ℓ+1} t``,
    ``γ_{ℓ+1} −= t`` that the skip keeps. Attained by almost all GELU weights (with or without
    biases) and on an open set of bias-free ReLU weights (proved, ``docs/theory/depth.md``)."""
    name = check_sizes(activation, d, n, depth)
    translations = (depth - 1) * d if bias else 0
    return param_count(d, n, depth, bias=bias) - translations - (n * depth if name == "relu" else 0)
