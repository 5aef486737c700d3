"""One base type for everything absorbjax answers: :class:`Result`.

A result is an answer together with the numbers that justify it. Every result type (a search's
:class:`~absorbjax.fit.SearchResult`, and the certificates that adopt this base) shares three
habits:

- ``to_dict()``: a plain, JSON-ready dict (via :func:`absorbjax.io.to_jsonable`);
- ``summary()``: a few human-readable lines;
- no truth value: ``bool(result)`` raises :class:`TypeError` naming the field to read. A
  certificate for ``not_absorbable`` is an object, and ``if certificate:`` would be true for it;
  the error makes the caller say which answer they mean (``certificate.status == "absorbable"``).

The word for "no proof either way" is :data:`UNDECIDED` in every vocabulary.

This module sits low in the import graph (it imports only :mod:`absorbjax.io`), so any module
may adopt the base. It works with ``typing.NamedTuple`` (subclass the named tuple together
with :class:`Result`, ``__slots__ = ()``) and with dataclasses; :class:`Verdict` is the frozen
dataclass base of the certificates (``status``, ``method``, ``reason`` first).

Examples:
  >>> from typing import NamedTuple
  >>> from absorbjax.results import Result
  >>> class _Fields(NamedTuple):
  ...     status: str
  ...     margin: float
  >>> class Answer(_Fields, Result):
  ...     __slots__ = ()
  ...     truth_field = "status"
  >>> a = Answer("undecided", 0.5)
  >>> a.to_dict()
  {'status': 'undecided', 'margin': 0.5}
  >>> print(a.summary())
  Answer: status=undecided, margin=0.5
  >>> bool(a)
  Traceback (most recent call last):
  ...
  TypeError: Answer has no truth value: read `result.status` instead
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from absorbjax import io

__all__ = ["Result", "UNDECIDED", "Verdict", "fields_of"]

UNDECIDED = "undecided"
"""The one word for "no proof either way", in every result's vocabulary."""


def fields_of(obj: Any) -> dict[str, Any]:
    """``{name: value}`` of a named tuple's or a dataclass's fields, in declaration order."""
    if hasattr(obj, "_fields"):
        return {name: getattr(obj, name) for name in obj._fields}
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    raise TypeError(f"{type(obj).__name__} is neither a NamedTuple nor a dataclass")


class Result:
    """Mixin base of absorbjax's answers: ``to_dict``, ``summary`` and no truth value.

    Subclasses set :attr:`truth_field`, the field (or method, written with ``()``) a caller
    should read instead of ``bool(result)``.
    """

    __slots__ = ()
    truth_field: ClassVar[str] = "status"

    def __bool__(self) -> bool:
        name = type(self).__name__
        field = self.truth_field
        raise TypeError(f"{name} has no truth value: read `result.{field}` instead")

    def to_dict(self) -> dict:
        """Plain JSON-ready dict of the fields."""
        return io.to_jsonable(fields_of(self))

    def summary(self) -> str:
        """One line: the type and its scalar fields."""
        scalars = {k: v for k, v in fields_of(self).items() if isinstance(v, (str, int, float, bool, type(None)))}
        return f"{type(self).__name__}: " + ", ".join(f"{k}={v}" for k, v in scalars.items())


@dataclasses.dataclass(frozen=True, eq=False)
class Verdict(Result):
    """Dataclass base of a certificate: what it says, how it was decided and why.

    Attributes:
      status: the answer, in the certificate's vocabulary (:data:`UNDECIDED` for no proof).
      method: what decided it.
      reason: one sentence saying why.

    Subclasses (frozen dataclasses, ``eq=False``) add their fields after these three.
    """

    status: str
    method: str
    reason: str
