"""What a block does near the origin: Jacobian, Taylor order, scaling, homogeneity, parity.

These probes make Prop 5, Prop 6 and Cor 7 visible numerically. Every probe takes a function
``f: (d,) -> (d,)`` — one block with its params closed over, e.g.
``lambda x: models.mlp(p, x, "swiglu")``, or a depth-``L`` ``models.stack`` — and works in
whatever precision the caller runs. Exactness claims (a Jacobian that is exactly ``0``, a
Taylor coefficient that vanishes, a degree that is exactly ``2``) need float64; absorbjax
never enables it: call ``jax.config.update("jax_enable_x64", True)`` yourself.

- Prop 6: a gated block with ``g(0) = 0`` (SwiGLU, GeGLU) has Jacobian ``0`` at the origin, a
  residual block has ``I`` (:func:`jacobian_at_origin`); its Taylor expansion along any line
  starts at order 2, the residual block's at order 1 (:func:`vanishing_order`).
- Cor 7: a depth-``L`` residual-free gated stack vanishes to order ``2^L``, a residual stack
  to order 1.
- Prop 5: a residual-free block with positively homogeneous activation of degree ``k``
  (ReLU², ReGLU: ``k = 2``) satisfies ``f(t x) = t^k f(x)`` (:func:`homogeneity_degree`); the
  residual block grows like ``t`` near 0 and like ``t^k`` far out (:func:`scaling_exponent`).

The array-valued probes (:func:`jacobian_at_origin`, :func:`hessian_at_origin`,
:func:`taylor_coefficients`, :func:`taylor_norms`, :func:`orders_from_norms`,
:func:`scaling_exponent`, :func:`local_exponents`, :func:`homogeneity_fit`) are pure and
``jit``/``vmap``-able over draws of params; :func:`vanishing_order` and
:func:`homogeneity_degree` turn their results into Python values.

At a kink of the activation (ReLU, ReLU², ReGLU at ``x = 0``) derivatives at the origin report
JAX's convention (``relu'(0) = 0``), not a property of the block: probe those blocks with
:func:`homogeneity_degree` and :func:`scaling_exponent` instead.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental.jet import jet_rules
from jax.extend import core as jcore
from jax.extend.core import primitives as prims

__all__ = [
    "jacobian_at_origin",
    "hessian_at_origin",
    "taylor_coefficients",
    "TaylorNorms",
    "taylor_norms",
    "orders_from_norms",
    "vanishing_order",
    "scaling_exponent",
    "local_exponents",
    "homogeneity_fit",
    "homogeneity_degree",
    "parity",
]

Fn = Callable[[jax.Array], jax.Array]


def _check_d(d):
    if not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")


def _dtype(f, d, dtype):
    """``dtype``, or by default the precision of ``f``'s params: its output dtype on a float32
    input (float64 params give float64, float32 params float32 even under ``jax_enable_x64``)."""
    if dtype is not None:
        return jnp.dtype(dtype)
    out = jax.eval_shape(f, jax.ShapeDtypeStruct((d,), jnp.float32)).dtype
    return out if jnp.issubdtype(out, jnp.floating) else jnp.result_type(float)


# ---------------------------------------------------------------------------------------------
# Derivatives at the origin


def jacobian_at_origin(f: Fn, d: int, dtype=None) -> jax.Array:
    """``∂f/∂x`` at ``x = 0`` with ``jax.jacfwd``: shape ``(d_out, d)``.

    Residual block: ``A`` (``I`` by default); residual-free SwiGLU/GeGLU block: ``0`` (Prop 6);
    sigmoid-GLU block: ``W_down diag(g(0)) W_value = ½ W_down W_value``. ``dtype`` of the
    origin defaults to the precision of ``f``'s params.

    Examples:
      >>> import jax
      >>> from absorbjax import models, probes
      >>> p = models.init("swiglu", 3, 6, key=jax.random.key(0))
      >>> probes.jacobian_at_origin(lambda x: models.mlp(p, x, "swiglu"), 3).tolist()
      [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
      >>> probes.jacobian_at_origin(lambda x: models.skip_mlp(p, x, "swiglu"), 3).tolist()
      [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]

    References:
      Prop 6: a residual-free gated block with ``g(0) = 0`` has Jacobian ``0`` at the origin,
      the residual block ``I``, so no such block absorbs its skip.
    """
    _check_d(d)
    return jax.jacfwd(f)(jnp.zeros((d,), _dtype(f, d, dtype)))


def hessian_at_origin(f: Fn, d: int, dtype=None) -> jax.Array:
    """``∂²f_i/∂x_j∂x_k`` at ``x = 0`` with ``jax.hessian``: shape ``(d_out, d, d)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import probes
      >>> probes.hessian_at_origin(lambda x: jnp.stack([x[0] * x[1], x[0] ** 2]), 2).tolist()
      [[[0.0, 1.0], [1.0, 0.0]], [[2.0, 0.0], [0.0, 0.0]]]
    """
    _check_d(d)
    return jax.hessian(f)(jnp.zeros((d,), _dtype(f, d, dtype)))


# ---------------------------------------------------------------------------------------------
# Taylor mode along a line through the origin: a jaxpr interpreter that applies
# jax.experimental.jet's rules (why not `jet` itself: see taylor_coefficients).


def _zeros(x):
    return jnp.zeros(np.shape(x), jnp.result_type(x))


def _series(s, x, order):
    return [_zeros(x)] * order if s is None else s


def _bind(prim, params, args):
    out = prim.bind(*args, **prim.get_bind_params(params))
    return out if prim.multiple_results else [out]


def _custom_jvp_taylor(eqn, primals, series, order):
    """Taylor series of a custom_jvp function ``h`` through its own JVP rule.

    With ``z(t) = z_0 + z_1 t + … + z_K t^K`` the input polynomial, ``w(t) = d/dt h(z(t)) =
    ∂h(z(t))[z'(t)]`` is expanded to order ``K − 1`` by the same interpreter and integrated
    termwise: ``h_k = w_{k−1} / k``.
    """
    moving = [i for i, s in enumerate(series) if s is not None]

    def h(*zs):
        args = list(primals)
        for i, z in zip(moving, zs):
            args[i] = z
        return _bind(eqn.primitive, eqn.params, args)

    z0 = [primals[i] for i in moving]
    zs = [series[i] for i in moving]
    out0 = h(*z0)
    if order == 1:
        w = jax.jvp(h, z0, [s[0] for s in zs])[1]
        return out0, [[wj] for wj in w]
    m = len(moving)
    rule = jax.make_jaxpr(lambda *a: jax.jvp(h, a[:m], a[m:])[1])(*z0, *z0)
    args = [(z, s[:-1]) for z, s in zip(z0, zs)]
    args += [(s[0], [(k + 2) * c for k, c in enumerate(s[1:])]) for s in zs]
    w = _taylor_eval(rule, args, order - 1)
    terms = [[w0, *_series(ws, w0, order - 1)] for w0, ws in w]
    return out0, [[c / (k + 1) for k, c in enumerate(t)] for t in terms]


def _unrolled_scan(primals, series, order, *, jaxpr, length, reverse, num_consts, num_carry, **_):
    pairs = list(zip(primals, series))
    consts, carry = pairs[:num_consts], pairs[num_consts : num_consts + num_carry]
    xs = pairs[num_consts + num_carry :]
    ys = []
    for i in range(length)[::-1] if reverse else range(length):
        x_i = [(p[i], None if s is None else [c[i] for c in s]) for p, s in xs]
        out = _taylor_eval(jaxpr, consts + carry + x_i, order)
        carry, y = out[:num_carry], out[num_carry:]
        ys.append(y)
    ys = ys[::-1] if reverse else ys
    stacked = []
    for col in zip(*ys):
        p = jnp.stack([y for y, _ in col])
        if all(s is None for _, s in col):
            stacked.append((p, None))
        else:
            terms = [_series(s, y, order) for y, s in col]
            stacked.append((p, [jnp.stack(t) for t in zip(*terms)]))
    return carry + stacked


_BILINEAR = (lax.mul_p, lax.dot_general_p)


def _linear_in_one(prim, params, primals, series):
    """A bilinear primitive with one constant operand is linear in the other: ``O(K)`` terms."""
    terms = next(s for s in series if s is not None)
    out = [prim.bind(*(p if s is None else c for p, s in zip(primals, series)), **params) for c in terms]
    return prim.bind(*primals, **params), out


def _taylor_eval(closed, args, order):
    """Evaluate a ``ClosedJaxpr`` on ``(primal, series | None)`` pairs; returns such pairs."""
    jaxpr = closed.jaxpr
    env = {}

    def read(a):
        return (a.val, None) if isinstance(a, jcore.Literal) else env[a]

    for v, c in zip(jaxpr.constvars, closed.consts):
        env[v] = (c, None)
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        primals, series = zip(*map(read, eqn.invars)) if eqn.invars else ((), ())
        prim = eqn.primitive
        if all(s is None for s in series):
            out = [(o, None) for o in _bind(prim, eqn.params, primals)]
        elif prim is prims.jit_p:
            out = _taylor_eval(eqn.params["jaxpr"], list(zip(primals, series)), order)
        elif prim is prims.scan_p:
            out = _unrolled_scan(primals, series, order, **eqn.params)
        elif prim is prims.custom_jvp_call_p:
            out = list(zip(*_custom_jvp_taylor(eqn, primals, series, order)))
        elif prim in _BILINEAR and any(s is None for s in series):
            out = [_linear_in_one(prim, eqn.params, primals, series)]
        elif prim in jet_rules:
            full = [_series(s, p, order) for p, s in zip(primals, series)]
            p_out, s_out = jet_rules[prim](list(primals), full, **eqn.params)
            if not prim.multiple_results:
                p_out, s_out = [p_out], [s_out]
            out = [(p, list(s) if isinstance(s, (list, tuple)) else None) for p, s in zip(p_out, s_out)]
        else:
            raise NotImplementedError(f"taylor_coefficients has no Taylor rule for primitive {prim.name!r}")
        for v, o in zip(eqn.outvars, out):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def taylor_coefficients(f: Fn, direction: jax.Array, order: int) -> jax.Array:
    """Taylor coefficients ``c_0, …, c_K`` of ``t ↦ f(t v)`` at ``t = 0``.

    ``f(t v) = Σ_k c_k t^k + O(t^{K+1})`` with ``c_k = (1/k!) dᵏ/dtᵏ f(t v)|_{t=0}``;
    ``c_0 = f(0)``, ``c_1 = J(0) v``.

    Args:
      f: ``(d,) -> (d_out,)``, one array out.
      direction: ``v``, shape ``(d,)``; its dtype is the dtype of the origin.
      order: ``K ≥ 0``.

    Returns:
      ``(K + 1, d_out)``.

    Computed in Taylor mode with ``jax.experimental.jet``'s rules, ``O(K²)`` work per
    primitive (nested ``jax.jvp`` would cost ``O(2^K)``: minutes of compilation at ``K = 8``).
    ``jet`` itself cannot run these blocks in JAX 0.10.2: it has no rule for ``lax.scan``
    (``models.stack``), it fails on ``custom_jvp`` functions such as ``jax.nn.relu`` and
    ``jax.nn.softplus`` (jax-ml/jax#30352), and where it runs them it ignores their custom
    rules (wrong for softplus at 0, whose primal formula has kinks that cancel). So a small
    jaxpr interpreter applies jet's rules itself: ``jit`` is inlined, ``scan`` is unrolled (its
    length is static), and a ``custom_jvp`` function ``h`` is expanded through its own JVP
    rule — ``d/dt h(z(t)) = ∂h(z(t))[z'(t)]`` is expanded to order ``K − 1`` and integrated
    termwise — so the rule is honoured exactly as ``jax.jvp`` honours it (``relu'(0) = 0``, as in
    ``jacfwd``). Primitives with no jet rule (``cond``, ``while``, ``custom_vjp``, …) raise
    ``NotImplementedError``. ``jit``/``vmap`` over ``f``'s closed-over params work as usual.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import probes
      >>> c = probes.taylor_coefficients(jax.nn.softplus, jnp.ones(1), 3)  # log 2 + t/2 + t²/8 + 0 t³
      >>> [round(float(v), 5) for v in c[:, 0]]
      [0.69315, 0.5, 0.125, 0.0]

    References:
      Cor 7: the Taylor series of a residual-free gated stack of depth ``L`` starts at order
      ``2^L`` (:func:`vanishing_order`).
    """
    direction = jnp.asarray(direction)
    if direction.ndim != 1:
        raise ValueError(f"direction must have shape (d,), got {direction.shape}")
    if not isinstance(order, (int, np.integer)) or order < 0:
        raise ValueError(f"order must be a non-negative integer, got {order!r}")
    x0 = jnp.zeros_like(direction)
    if order == 0:
        return f(x0)[None]
    closed = jax.make_jaxpr(f)(jax.ShapeDtypeStruct(direction.shape, direction.dtype))
    if len(closed.jaxpr.outvars) != 1:
        raise ValueError("f must return one array")
    series = [direction] + [jnp.zeros_like(direction)] * (order - 1)
    ((y0, ys),) = _taylor_eval(closed, [(x0, series)], order)
    return jnp.stack([y0, *_series(ys, y0, order)])


class TaylorNorms(NamedTuple):
    """Sizes along ``m`` directions ``v``: ``coef`` ``(..., m, K+1)`` holds ``‖c_k(v)‖``,
    ``value`` ``(..., m)`` holds ``‖f(v)‖`` (the size of ``f`` at unit scale)."""

    coef: jax.Array
    value: jax.Array


def _directions(key, d, directions, dtype):
    """``directions`` as an ``(m, d)`` array; an integer ``m`` draws ``m`` random unit vectors."""
    if isinstance(directions, (int, np.integer)):
        if directions < 1:
            raise ValueError(f"directions must be positive or an (m, d) array, got {directions}")
        v = jax.random.normal(key, (directions, d), dtype)
        return v / jnp.linalg.norm(v, axis=-1, keepdims=True)
    v = jnp.asarray(directions, dtype)
    if v.ndim != 2 or v.shape[1] != d:
        raise ValueError(f"directions array must have shape (m, {d}), got {v.shape}")
    return v


def taylor_norms(f: Fn, d: int, *, key: jax.Array, max_order: int = 8, directions=4, dtype=None) -> TaylorNorms:
    """The vmappable core of :func:`vanishing_order`.

    Args:
      f: the block, ``(d,) -> (d_out,)``.
      d: input dimension ``d``.
      key: PRNG key for the directions.
      max_order: ``K``: coefficients ``c_0 … c_K``.
      directions: ``m`` random unit directions (``v ~ N(0, I)/‖·‖``), or an ``(m, d)`` array.
      dtype: dtype of the directions; default: the precision of ``f``'s params (its output
        dtype on a float32 input), which also sets the default ``rtol`` of
        :func:`orders_from_norms`.

    Returns:
      :class:`TaylorNorms` with ``coef (m, K+1)`` and ``value (m,)``.

    Examples:
      >>> import jax
      >>> from absorbjax import models, probes
      >>> ps = models.sample("geglu", 2, 4, key=jax.random.key(0), draws=16)  # 16 draws
      >>> norms = jax.jit(jax.vmap(lambda p: probes.taylor_norms(
      ...     lambda x: models.mlp(p, x, "geglu"), 2, key=jax.random.key(1), max_order=3)))(ps)
      >>> norms.coef.shape  # (draws, directions, K + 1)
      (16, 4, 4)
      >>> probes.orders_from_norms(norms).tolist() == [2] * 16
      True
    """
    _check_d(d)
    v = _directions(key, d, directions, _dtype(f, d, dtype))
    coef = jax.vmap(lambda u: jnp.linalg.norm(taylor_coefficients(f, u, max_order), axis=-1))(v)
    value = jax.vmap(lambda u: jnp.linalg.norm(f(u)))(v)
    return TaylorNorms(coef, value)


def _rtol(rtol, dtype):
    return float(np.sqrt(np.finfo(dtype).eps)) if rtol is None else rtol


def orders_from_norms(norms: TaylorNorms, rtol: float | None = None) -> jax.Array:
    """The vanishing order decided from :class:`TaylorNorms`, batched over leading axes.

    Along direction ``v`` the order is the first ``k`` with
    ``‖c_k(v)‖ > rtol · max(‖f(v)‖, max_j ‖c_j(v)‖)``; the order of ``f`` is the smallest over
    the ``m`` directions (a generic direction sees the true order). ``K + 1`` means no
    coefficient up to ``K`` is nonzero (order ``> K``, or ``f ≡ 0``). ``rtol`` defaults to
    ``√eps`` of the norms' dtype (1.5e-8 in float64, 3.5e-4 in float32).

    Returns an int array of shape ``norms.value.shape[:-1]``; jittable.

    Examples:
      >>> import jax.numpy as jnp
      >>> from absorbjax import probes
      >>> coef = jnp.array([[0.0, 1e-20, 0.3, 1.0], [0.0, 0.0, 0.0, 2.0]])  # 2 lines, K = 3
      >>> int(probes.orders_from_norms(probes.TaylorNorms(coef, jnp.ones(2))))
      2
    """
    coef, value = jnp.asarray(norms.coef), jnp.asarray(norms.value)
    rtol = _rtol(rtol, coef.dtype)
    scale = jnp.maximum(value, jnp.max(coef, axis=-1))
    nonzero = coef > rtol * scale[..., None]
    first = jnp.where(jnp.any(nonzero, axis=-1), jnp.argmax(nonzero, axis=-1), coef.shape[-1])
    return jnp.min(first, axis=-1)


def vanishing_order(
    f: Fn,
    d: int,
    *,
    key: jax.Array,
    max_order: int = 8,
    directions=4,
    rtol: float | None = None,
    dtype=None,
) -> int | None:
    """Order of the first nonvanishing Taylor term of ``f`` at ``0`` along random lines.

    ``0`` when ``f(0) ≠ 0``; ``1`` for any residual block (Jacobian ``I``); ``2`` for a
    residual-free SwiGLU/GeGLU block (Prop 6); ``2^L`` for a residual-free gated stack of depth
    ``L`` (Cor 7). ``None`` when nothing up to ``max_order`` is nonzero. ``key``
    draws the directions.

    This is :func:`orders_from_norms` (the decision and its tolerance) applied to
    :func:`taylor_norms`; for thousands of draws, ``jit(vmap(taylor_norms))`` and decide all at
    once with :func:`orders_from_norms`.

    Examples:
      >>> import jax
      >>> from absorbjax import models, probes
      >>> p = models.init("swiglu", 3, 6, key=jax.random.key(0))
      >>> probes.vanishing_order(lambda x: models.mlp(p, x, "swiglu"), 3, key=jax.random.key(1), max_order=3)
      2
      >>> probes.vanishing_order(lambda x: models.skip_mlp(p, x, "swiglu"), 3, key=jax.random.key(1), max_order=3)
      1

    References:
      Prop 6 (order 2 against 1) and Cor 7 (order ``2^L`` against 1 at depth ``L``).
    """
    norms = taylor_norms(f, d, key=key, max_order=max_order, directions=directions, dtype=dtype)
    order = int(orders_from_norms(norms, rtol))
    return None if order > max_order else order


# ---------------------------------------------------------------------------------------------
# Scaling and homogeneity (Prop 5)


def _log_norms(f, x, ts):
    ts = jnp.asarray(ts, jnp.result_type(x))
    if ts.ndim != 1 or ts.shape[0] < 2:
        raise ValueError(f"ts must be a 1-d array of at least two scales, got shape {ts.shape}")
    norms = jax.vmap(lambda t: jnp.linalg.norm(f(t * x)))(ts)
    return jnp.log(ts), jnp.log(norms)


def scaling_exponent(f: Fn, x: jax.Array, ts: jax.Array) -> jax.Array:
    """Least-squares slope of ``log ‖f(t x)‖`` against ``log t`` over the scales ``ts`` ``(m,)``.

    ``k`` for a block homogeneous of degree ``k``; for a residual ReLU² block ``≈ 1`` at small
    ``t`` (the skip ``t x`` dominates) and ``≈ 2`` at large ``t``. ``nan`` where
    ``f(t x) = 0``. The slope of ``jnp.polyfit(log t, log ‖f(t x)‖, 1)``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import models, probes
      >>> p = models.init("relu2", 3, 6, key=jax.random.key(0))
      >>> x = jnp.array([1.0, 0.5, -1.0])
      >>> round(float(probes.scaling_exponent(lambda z: models.mlp(p, z, "relu2"), x,
      ...                                     jnp.geomspace(1e-3, 1e3, 7))), 4)
      2.0
      >>> round(float(probes.scaling_exponent(lambda z: models.skip_mlp(p, z, "relu2"), x,
      ...                                     jnp.geomspace(1e-4, 1e-3, 3))), 2)
      1.0

    References:
      Prop 5: residual-free blocks of degree ``k ≠ 1`` scale as ``t^k``, the residual block as
      ``t`` near 0, so none absorbs its skip.
    """
    lt, ln = _log_norms(f, x, ts)
    return jnp.polyfit(lt, ln, 1)[0]


def local_exponents(f: Fn, x: jax.Array, ts: jax.Array) -> jax.Array:
    """Slopes between consecutive scales: ``Δ log ‖f(t x)‖ / Δ log t``, shape ``(m − 1,)``.

    Examples:
      >>> import jax.numpy as jnp
      >>> from absorbjax import probes
      >>> f = lambda x: x + x**2  # exponent 1 near 0, 2 far out
      >>> [round(float(s), 2) for s in probes.local_exponents(f, jnp.ones(1), jnp.array([1e-4, 1e-3, 1e3, 1e4]))]
      [1.0, 1.5, 2.0]
    """
    lt, ln = _log_norms(f, x, ts)
    return jnp.diff(ln) / jnp.diff(lt)


_TS = (0.1, 0.5, 2.0, 10.0)


def homogeneity_fit(
    f: Fn, d: int, *, key: jax.Array, ts=_TS, samples: int = 8, dtype=None
) -> tuple[jax.Array, jax.Array]:
    """Best exponent ``k`` for ``f(t x) = t^k f(x)`` and how well it holds; vmappable.

    ``x_i ~ N(0, I_d)`` (``samples`` of them), scales ``t_j`` from ``ts``. ``k`` is the
    least-squares fit of ``log(‖f(t x)‖ / ‖f(x)‖) = k log t`` over pairs where both norms are
    positive; the error is
    ``max_{i,j} ‖f(t_j x_i) − t_j^k f(x_i)‖ / (t_j^k max_i ‖f(x_i)‖)``.
    Returns ``(k, error)``, scalars; ``k`` is ``nan`` when ``f`` vanishes on every sample.

    Examples:
      >>> import jax
      >>> from absorbjax import models, probes
      >>> p = models.init("reglu", 3, 6, key=jax.random.key(0))
      >>> k, err = probes.homogeneity_fit(lambda x: models.mlp(p, x, "reglu"), 3, key=jax.random.key(1))
      >>> round(float(k), 4), bool(err < 1e-4)
      (2.0, True)
    """
    _check_d(d)
    x = jax.random.normal(key, (samples, d), _dtype(f, d, dtype))
    ts = jnp.asarray(ts, x.dtype)
    fx = jax.vmap(f)(x)  # (s, d_out)
    ftx = jax.vmap(lambda t: jax.vmap(f)(t * x))(ts)  # (m, s, d_out)
    n0 = jnp.linalg.norm(fx, axis=-1)
    nt = jnp.linalg.norm(ftx, axis=-1)
    lt = jnp.log(ts)[:, None]
    ok = (n0 > 0) & (nt > 0)
    ratio = jnp.where(ok, jnp.log(jnp.where(ok, nt, 1.0) / jnp.where(n0 > 0, n0, 1.0)), 0.0)
    # least squares through the origin over the pairs where both norms are positive
    a = jnp.where(ok, lt, 0.0).reshape(-1, 1)
    k = jnp.linalg.lstsq(a, ratio.reshape(-1))[0][0]
    k = jnp.where(jnp.any(ok), k, jnp.nan)
    tk = ts**k
    resid = jnp.linalg.norm(ftx - tk[:, None, None] * fx, axis=-1)
    err = jnp.max(resid / (tk[:, None] * jnp.max(n0)))
    return k, err


def homogeneity_degree(
    f: Fn, d: int, *, key: jax.Array, ts=_TS, samples: int = 8, rtol: float | None = None, dtype=None
) -> int | float | None:
    """Degree ``k`` with ``f(t x) = t^k f(x)`` for all sampled ``x`` and ``t ∈ ts``, else ``None``.

    Decided from :func:`homogeneity_fit`: homogeneous when its error is ``≤ rtol`` (default
    ``√eps`` of the dtype, which defaults to the precision of ``f``'s params). ``k`` is returned as an ``int`` when within ``rtol`` of one.
    ReLU² and ReGLU blocks: 2; ReLU blocks, residual or not: 1; GELU blocks and residual ReLU²
    blocks: ``None``.

    Examples:
      >>> import jax
      >>> from absorbjax import models, probes
      >>> p = models.init("relu2", 3, 6, key=jax.random.key(0))
      >>> key = jax.random.key(1)
      >>> probes.homogeneity_degree(lambda x: models.mlp(p, x, "relu2"), 3, key=key)
      2
      >>> print(probes.homogeneity_degree(lambda x: models.skip_mlp(p, x, "relu2"), 3, key=key))
      None

    References:
      Prop 5 (homogeneous blocks of degree ``k ≠ 1`` never absorb).
    """
    k, err = homogeneity_fit(f, d, key=key, ts=ts, samples=samples, dtype=dtype)
    rtol = _rtol(rtol, err.dtype)
    k, err = float(k), float(err)
    if not (np.isfinite(k) and err <= rtol):
        return None
    return int(round(k)) if abs(k - round(k)) <= rtol * max(1.0, abs(k)) else k


# ---------------------------------------------------------------------------------------------
# Parity


def parity(f: Fn) -> tuple[Fn, Fn]:
    """The odd and even parts ``x ↦ (f(x) − f(−x))/2`` and ``x ↦ (f(x) + f(−x))/2``.

    For an ungated activation with ``σ(z) − σ(−z) = z`` (ReLU, GELU, SiLU, softplus) the odd
    part of ``mlp`` is exactly ``½ W_down W_up x``.

    Examples:
      >>> import jax, jax.numpy as jnp
      >>> from absorbjax import models, probes
      >>> p = models.init("gelu", 2, 4, key=jax.random.key(0))
      >>> odd, even = probes.parity(lambda x: models.mlp(p, x, "gelu"))
      >>> x = jnp.array([0.7, -1.5])
      >>> bool(jnp.allclose(odd(x), 0.5 * p.down @ p.up @ x, atol=1e-6))
      True

    References:
      Thm 8/10: the odd part ``z/2`` of ReLU and GELU is what makes the sign-flip absorber exact.
    """

    def odd(x):
        return (f(x) - f(-x)) / 2

    def even(x):
        return (f(x) + f(-x)) / 2

    return odd, even
