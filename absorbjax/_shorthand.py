"""Keyword shorthand for option objects: ``f(..., rtol=1e-9)`` replaces that field of the frozen
options dataclass that ``f`` takes (``condition.Decision``, ``weights.Layout``, ``fit.Problem``,
``fit.Solver`` and ``fit.Run``). NumPy-free and JAX-free: the one path from a keyword to a field."""

from __future__ import annotations

import dataclasses


def with_shorthand(objects: tuple, shorthand: dict, where: str) -> tuple:
    """``objects`` (frozen dataclasses with disjoint fields) with the fields named in ``shorthand``
    replaced; any other keyword is a ``TypeError`` naming the fields, as Python names an unexpected
    keyword argument.

    Examples:
      >>> from absorbjax import condition, fit
      >>> from absorbjax._shorthand import with_shorthand
      >>> with_shorthand((condition.Decision(),), {"method": "milp"}, "find_absorbing_set")[0].method
      'milp'
      >>> s, r = with_shorthand((fit.Solver(), fit.Run()), {"restarts": 8, "progress": False}, "search")
      >>> s.restarts, r.progress
      (8, False)
      >>> with_shorthand((fit.Solver(), fit.Run()), {"restart": 8}, "search")
      Traceback (most recent call last):
      TypeError: search() got an unexpected keyword argument 'restart' (the options are the fields of fit.Solver: method, restarts, steps, init, optimizer, polish, tol, hops, and of fit.Run: batch_size, chunk_size, mesh, progress, checkpoint)
    """
    names = [[f.name for f in dataclasses.fields(o)] for o in objects]
    unknown = [k for k in shorthand if not any(k in fields for fields in names)]
    if unknown:
        listed = ", and of ".join(
            f"{type(o).__module__.split('.')[1]}.{type(o).__name__}: {', '.join(fields)}"  # absorbjax.<namespace>._x
            for o, fields in zip(objects, names)
        )
        raise TypeError(
            f"{where}() got an unexpected keyword argument {unknown[0]!r} (the options are the fields of {listed})"
        )
    return tuple(
        dataclasses.replace(o, **{k: v for k, v in shorthand.items() if k in fields})
        if any(k in fields for k in shorthand)
        else o
        for o, fields in zip(objects, names)
    )
