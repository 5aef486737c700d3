"""Rule (★), the acceptance of a set ``S``: ``c·W_down[:,S] W_up[S,:] = −A`` up to the entrywise
slack ``r_S (Σ_{i∈S} |W_down[k,i]||W_up[i,j]| + |A_kj|)``, judged on the exact miss; its Frobenius
threshold ``τ`` (one function, :func:`threshold_of`, that both paths of the decision read through
:meth:`Rule.threshold`); masks and misses of sets."""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np

from absorbjax.condition._arith import EPS, ETA, ONE, gamma, verify_miss
from absorbjax.condition._validate import check_rtol, float_weights, skip_matrix
from absorbjax.models import MLPParams


def _allowed(U, D, A, m: np.ndarray, rtol: float) -> np.ndarray:
    """The entrywise bound ``r_S · (Σ_{i∈S} |W_down[k,i]| |W_up[i,j]| + |A_kj|)`` (``d×d``) of rule (★)."""
    r = rtol + 2 * gamma(int(m.sum()) + 1)
    return r * (np.abs(D[:, m]) @ np.abs(U[m, :]) + np.abs(A))


def accepts(U, D, A, m: np.ndarray, rtol: float, c: Fraction = ONE) -> tuple[bool, float]:
    """Whether rule (★) accepts the mask ``m`` on the *exact* miss ``M_S = c·W_down[:,S] W_up[S,:] + A``
    (a rigorous float64 bound, else rational arithmetic: :func:`_arith.verify_miss`), and
    ``‖M_S‖_max``; ``c`` is the activation's odd slope (an exact fraction)."""
    v = verify_miss(U, D, A, m, rtol + 2 * gamma(int(m.sum()) + 1), c)
    return v.passes, v.miss_max


class Rule(NamedTuple):
    """Rule (★) for ``c·W_down[:,S] W_up[S,:] = −A`` in one place: the exact skip ``A`` ``(d, d)``,
    the slack ``rtol``, the odd slope ``c`` (exact), and the search's float64 skip ``Ac = fl(A/c)``
    with ``approx ≥ ‖Ac − A/c‖_F`` (0 for ``c = 1``). The searches and proofs of absence run on
    ``W_down[:,S] W_up[S,:] = −Ac`` with :meth:`threshold` widened by ``approx``; a set is accepted
    only by :meth:`accepts`, on the exact ``c`` and ``A``."""

    A: np.ndarray
    rtol: float
    c: Fraction
    Ac: np.ndarray
    approx: float

    @classmethod
    def of(cls, A: np.ndarray, rtol: float, c: Fraction = ONE) -> Rule:
        if c == 1:
            return cls(A, rtol, ONE, A, 0.0)
        Ac = A / float(c)  # |Ac − A/c| ≤ 2.1u |A/c| entrywise (two roundings)
        return cls(A, rtol, Fraction(c), Ac, 3 * EPS * float(np.linalg.norm(Ac)))

    def loose(self, rtol: float) -> Rule:
        """The same rule with another slack (storage rounding)."""
        return self._replace(rtol=rtol)

    def accepts(self, U, D, m: np.ndarray) -> tuple[bool, float]:
        """:func:`accepts` for this rule: exact ``c`` and ``A``."""
        return accepts(U, D, self.A, m, self.rtol, self.c)

    def widen(self, thr: float) -> float:
        """A Frobenius bound computed on ``Ac`` made valid for ``A/c``: ``|A/c| ≤ (1 + 3u)|Ac|`` in the
        rule's sum, and the distance ``approx`` between the two."""
        return thr if self.approx == 0 else thr * (1 + 2 * EPS) + self.approx * (1 + 2 * EPS)

    def threshold(self, U, D, *, nu: float | None = None) -> float:
        """:func:`threshold_of` on ``Ac``, widened (:meth:`widen`): both paths' ``τ``."""
        return self.widen(threshold_of(U, D, self.Ac, self.rtol, nu=nu))


def threshold_of(U, D, A, rtol: float, *, nu: float | None = None) -> float:
    """A Frobenius bound ``τ`` on the exact miss of every set that rule (★) can accept.

    An accepted ``S`` has exact ``|miss_kj| ≤ r (Σ_{i∈S}|D_ki||U_ij| + |A_kj|)``, ``r = rtol + 4γ_{n+1}``,
    and ``Σ_{i∈S}|D_ki||U_ij| ≤ (|W_down| |W_up|)_kj``; so a certified lower bound above ``τ`` on
    ``‖Σ m_i M_i + A‖_F`` for every ``m`` rules every ``S`` out. ``nu=None``: ``τ`` from the
    Frobenius norm of ``r (|W_down| |W_up| + |A|)`` (one ``O(n d²)`` product; the Gram path);
    ``nu ≥ Σ_i ‖W_down[:,i]‖ ‖W_up[i,:]‖`` (``condition._screen.norm_sum``, one pass over the units):
    the triangle inequality on the rank-one terms, ``r (ν + ‖A‖_F)``, in ``O(d²)`` (the wide path;
    never below the first). Both add the subnormal range's absolute rounding ``(n + 2) d η``.
    """
    n, d = U.shape
    r = rtol + 4 * gamma(n + 1)
    absolute = (n + 2) * d * ETA  # the subnormal range's absolute rounding
    if nu is not None:
        return r * (nu + float(np.linalg.norm(A)) * (1 + gamma(d * d + 2))) * (1 + 4 * EPS) + absolute
    return r * (1 + gamma(n + 1)) * float(np.linalg.norm(np.abs(D) @ np.abs(U) + np.abs(A))) + absolute


def tolerance(params: MLPParams, S, *, skip=None, rtol: float | None = None) -> np.ndarray:
    """The entrywise tolerance ``(d, d)`` that rule (★) of :mod:`absorbjax.condition` allows ``S``.

    ``|(W_down[:,S] W_up[S,:] + A)_kj| ≤ r_S (Σ_{i∈S} |W_down[k,i]| |W_up[i,j]| + |A_kj|)`` with
    ``r_S = rtol + 2γ_{|S|+1}``; ``rtol`` defaults to ``1e3·eps64``. It depends only on the units in
    ``S`` (a huge unit outside ``S`` does not loosen it) and the empty set can never meet it
    (``r_S < 1``). Examples:

    >>> import numpy as np
    >>> from absorbjax import condition, models
    >>> p = models.MLPParams(np.array([[1.0], [2.0]]), np.array([[-1.0, 3.0]]))
    >>> float(condition.tolerance(p, [0])[0, 0]) < 1e-12
    True
    """
    U, D, _ = float_weights(params, batched=False)
    A = skip_matrix(skip, U.shape[1])
    return _allowed(U, D, A, mask_of(S, U.shape[0]), check_rtol(rtol))


def mask_of(S, n: int) -> np.ndarray:
    S = np.asarray(S)
    if S.size == 0 and S.ndim == 1:
        return np.zeros(n, bool)
    if S.dtype == bool:
        if S.shape != (n,):
            raise ValueError(f"a boolean S must have shape ({n},), got {S.shape}")
        return S.copy()
    if S.ndim != 1 or (S.size and not np.issubdtype(S.dtype, np.integer)):
        raise ValueError(f"S must be a 1-D array of hidden-unit indices, got {S!r}")
    if S.size and (S.min() < 0 or S.max() >= n):
        raise ValueError(f"S must index hidden units 0..{n - 1}, got {S.tolist()}")
    if np.unique(S).size != S.size:
        raise ValueError(f"S has repeated indices: {S.tolist()}")
    m = np.zeros(n, bool)
    m[S] = True
    return m


def miss_matrix(U, D, A, m: np.ndarray) -> np.ndarray:
    """``W_down[:,S] W_up[S,:] + A`` (``d×d``) for the mask ``m``."""
    return D[:, m] @ U[m, :] + A
