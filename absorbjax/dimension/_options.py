"""How the probe computes, as one typed object: :class:`Probe`, taken by
:func:`~absorbjax.dimension.certify`. What describes the family or point decided (the activation, the
size, the key, ``residual``, ``bias``, ``subfamily``, ``params``) is not here: those are certify's own
parameters. The checks of single values are shared with :func:`~absorbjax.dimension.rational_point`
and :func:`~absorbjax.dimension.exact_rank`."""

from __future__ import annotations

import dataclasses

import flint
import numpy as np

from absorbjax.dimension._counts import PRIME


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def check_count(name: str, v) -> int:
    """``v`` as an ``int``; ``ValueError`` naming ``name`` unless it is a positive integer."""
    if not _is_int(v) or v < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)


def check_denominator(q) -> int:
    """``q`` as an ``int``; ``ValueError`` unless it is a power of two (``1, 2, 4, …``)."""
    if not _is_int(q) or q < 1 or q & (q - 1):
        raise ValueError(f"denominator must be a power of two, got {q!r}")
    return int(q)


def check_shrink(s) -> int:
    """``s`` as an ``int``; ``ValueError`` unless it is an integer in ``[0, 24]``."""
    if not _is_int(s) or not 0 <= s <= 24:
        raise ValueError(f"shrink must be an integer in [0, 24], got {s!r}")
    return int(s)


def check_prime(p) -> int:
    """``p`` as an ``int``; ``ValueError`` unless it is an odd prime below ``2^21`` (sums of
    products mod ``p`` stay exact in float64)."""
    if not _is_int(p) or not 3 <= p < 2**21:
        raise ValueError(f"prime must be an odd prime below 2^21, got {p!r}")
    if not flint.fmpz(int(p)).is_prime():
        raise ValueError(f"prime must be prime, got {p}")
    return int(p)


def check_jet_order(prime: int, order: int, name: str = "order") -> None:
    """``ValueError`` unless ``prime > order`` (the largest GELU jet order, called ``name``): every
    Taylor denominator ``2^k k! (2k+1)``, ``k ≤ order``, must be a unit mod ``p`` (a smaller prime
    would drop terms of the series, and the rank would not be a bound)."""
    if prime <= order:
        raise ValueError(
            f"prime must exceed {name}, the largest jet order (the Taylor denominators 2^k k! (2k+1) "
            f"must be units mod p), got prime={prime} <= {name}={order}: use a larger prime such as {PRIME}"
        )


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Probe:
    """How :func:`~absorbjax.dimension.certify` probes the point: the one options object of the depth
    certificate (``certify("gelu", 2, 2, 2, key=k, probe=Probe(float_check=False))``); the family and
    the point decided (activation, size, ``key``, ``residual``, ``bias``, ``subfamily``, ``params``)
    are certify's own parameters. Built by keyword, checked when built (``ValueError``); change one
    field with ``dataclasses.replace``.

    Attributes:
      order: first GELU jet order, a positive integer (``None``: the smallest whose jet space holds
        ``1.5 P``); ignored for ReLU.
      inputs: probe inputs / jet directions, a positive integer (``None``: about ``1.5 P`` rows for
        GELU, ``2 P / d`` for ReLU).
      denominator: power of two, the weights' and inputs' denominator.
      prime: modulus of the exact rank, an odd prime below ``2^21``; for GELU it must exceed
        ``max_order`` (checked here for the orders named, by certify for the default one).
      max_order: largest GELU jet order tried, a positive integer (``None``: ``order + 4``); the
        order grows by 2 while the rank grows, up to it.
      shrink: scale every ``W_down^ℓ`` by ``2^-shrink``, an integer in ``[0, 24]`` (a near-identity
        point, step 4 of ``docs/theory/depth.md``).
      float_check: also compute the float64 SVD rank at the same point (needs float64).

    Examples:
      >>> from absorbjax import dimension
      >>> dimension.Probe(float_check=False, order=4).max_order is None
      True
      >>> dimension.Probe(denominator=100)
      Traceback (most recent call last):
      ValueError: denominator must be a power of two, got 100
    """

    order: int | None = None
    inputs: int | None = None
    denominator: int = 256
    prime: int = PRIME
    max_order: int | None = None
    shrink: int = 0
    float_check: bool = True

    def __post_init__(self):
        for name in ("order", "inputs", "max_order"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_count(name, getattr(self, name)))
        if not isinstance(self.float_check, (bool, np.bool_)):
            raise ValueError(f"float_check must be True or False, got {self.float_check!r}")
        object.__setattr__(self, "denominator", check_denominator(self.denominator))
        object.__setattr__(self, "shrink", check_shrink(self.shrink))
        object.__setattr__(self, "prime", check_prime(self.prime))
        object.__setattr__(self, "float_check", bool(self.float_check))
        if self.order is not None or self.max_order is not None:
            jet_orders(self, self.order or 1)  # the orders named must be units mod the prime


def jet_orders(probe: Probe, default_order: int) -> tuple[int, int]:
    """The first and the largest GELU jet order ``probe`` tries (``default_order`` where it names
    none); ``ValueError`` unless its prime exceeds the largest."""
    order = default_order if probe.order is None else probe.order
    max_order = max(order, order + 4 if probe.max_order is None else probe.max_order)
    check_jet_order(probe.prime, max_order, "max_order")
    return order, max_order
