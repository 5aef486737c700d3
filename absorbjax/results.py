"""One base type for everything absorbjax answers: :class:`Result`.

A result is an answer together with the numbers that justify it. Every result type (a search's
:class:`~absorbjax.fit.SearchResult`, and the certificates that adopt this base) shares three
habits:

- a short ``repr``: one line of at most :data:`REPR_LIMIT` characters, the answer and the numbers
  that matter, ending with where the rest is (a subclass words it in a ``_summary`` method);
- ``details()``: everything, readable: ``summary()`` and then every field, one a line;
- ``to_dict()``: a plain, JSON-ready dict (via :func:`absorbjax.io.to_jsonable`): every number;
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
  >>> a
  Answer(status=undecided, margin=0.5 · .details() for everything)
  >>> print(a.details())
  Answer: status=undecided, margin=0.5
  status: 'undecided'
  margin: 0.5
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
import enum
from typing import Any, ClassVar

import numpy as np

from absorbjax import io

__all__ = ["Result", "UNDECIDED", "Verdict", "Word", "fields_of", "REPR_LIMIT"]

UNDECIDED = "undecided"


class Word(enum.StrEnum):
    """A vocabulary (statuses, methods): a member equals, prints and reprs as its word, so
    ``cert.status == "absorbable"`` holds and a list of statuses in a message or a JSON record reads
    ``['absorbable']`` as plain strings did; ``type(cert.status)`` still names the vocabulary.

    Examples:
      >>> from absorbjax import condition
      >>> condition.Status.ABSORBABLE, [condition.Status.UNDECIDED], type(condition.Status.ABSORBABLE).__name__
      ('absorbable', ['undecided'], 'Status')
    """

    def __repr__(self) -> str:
        return repr(self.value)


"""The one word for "no proof either way", in every result's vocabulary."""

REPR_LIMIT = 400
"""The most characters a result's ``repr`` takes: what matters, not every number."""


def fields_of(obj: Any) -> dict[str, Any]:
    """``{name: value}`` of a named tuple's or a dataclass's fields, in declaration order."""
    if hasattr(obj, "_fields"):
        return {name: getattr(obj, name) for name in obj._fields}
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    raise TypeError(f"{type(obj).__name__} is neither a NamedTuple nor a dataclass")


class Result:
    """Mixin base of absorbjax's answers: a short ``repr``, ``details``, ``to_dict``, ``summary``
    and no truth value.

    Subclasses set :attr:`truth_field`, the field (or method, written with ``()``) a caller
    should read instead of ``bool(result)``, and may word their short ``repr`` in ``_summary``
    (the answer and the numbers that matter; it is cut to fit :data:`REPR_LIMIT`). Every subclass
    gets this ``repr`` unless it defines its own, dataclasses included (``@dataclass`` keeps a
    ``__repr__`` it finds in the class body, which :meth:`__init_subclass__` puts there).
    """

    __slots__ = ()
    truth_field: ClassVar[str] = "status"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = Result.__repr__

    def __bool__(self) -> bool:
        name = type(self).__name__
        field = self.truth_field
        raise TypeError(f"{name} has no truth value: read `result.{field}` instead")

    def __repr__(self) -> str:
        name, tail = type(self).__name__, " · .details() for everything"
        text = " ".join(self._summary().split())
        room = REPR_LIMIT - len(name) - len(tail) - 2
        if len(text) > room:
            text = text[: room - 1] + "…"
        return f"{name}({text}{tail})"

    def _summary(self) -> str:
        """The short repr's text: the scalar fields (long strings cut)."""
        return ", ".join(f"{k}={_short(v)}" for k, v in fields_of(self).items() if _is_scalar(v))

    def details(self) -> str:
        """Everything, readable: :meth:`summary`, then every field, one a line (a nested result
        by its own details; large arrays abridged by NumPy: :meth:`to_dict` has every number)."""
        lines = [self.summary()]
        for key, value in fields_of(self).items():
            if isinstance(value, Result):
                text = "\n  ".join(value.details().splitlines())
            elif isinstance(value, np.ndarray) or hasattr(value, "__array__"):
                text = np.array2string(np.asarray(value), separator=", ")
            else:
                text = repr(value)
            lines.append(f"{key}: {text}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """Plain JSON-ready dict of the fields."""
        return io.to_jsonable(fields_of(self))

    def summary(self) -> str:
        """One line: the type and its scalar fields."""
        scalars = {k: v for k, v in fields_of(self).items() if isinstance(v, (str, int, float, bool, type(None)))}
        return f"{type(self).__name__}: " + ", ".join(f"{k}={v}" for k, v in scalars.items())


def _is_scalar(value) -> bool:
    return isinstance(value, (str, int, float, bool, np.generic, type(None)))


def _short(value) -> str:
    """A scalar in a few characters: floats to 3 significant digits, strings cut at 80."""
    if isinstance(value, (float, np.floating)):
        return f"{value:.3g}"
    text = str(value)
    return text if len(text) <= 80 else text[:79] + "…"


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

    def _summary(self) -> str:
        """``status by method``, the first five numeric fields (not ``seconds``), then the reason."""
        numeric = [
            f"{k}={_short(v)}"
            for k, v in fields_of(self).items()
            if _is_scalar(v) and not isinstance(v, str) and v is not None and k != "seconds"
        ]
        numbers = ", ".join(numeric[:5])
        return f"{self.status} by {self.method}" + (f" ({numbers})" if numbers else "") + f": {self.reason}"
