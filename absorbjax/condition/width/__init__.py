"""Minimal extra width: the smallest ``k`` such that a residual-free block of width ``n + k`` equals
``x ↦ A x + W_down σ(W_up x)`` (ReLU, GELU), decided with a certificate, and the wider absorber.

The argument (parity, atoms, covering, bounds) is in the docstring of
``absorbjax/condition/width/_extra.py``, the decision and its certificate; the construction's parts
(atoms, the search over flats, certified ranks) are in ``_parts.py``.
"""

from absorbjax.condition.width._extra import WidthCertificate, WidthStatus, min_extra_width, wide_absorber

__all__ = ["WidthCertificate", "WidthStatus", "min_extra_width", "wide_absorber"]
