"""Flax NNX modules for the paper's blocks, whose weights convert to and from :mod:`absorbjax.models`.

Anyone who trains with flax can hand a trained module to :mod:`absorbjax.condition`,
:mod:`absorbjax.probes` or :mod:`absorbjax.fit`: ``module.to_params()`` returns the
:class:`~absorbjax.models.MLPParams` / :class:`~absorbjax.models.GatedParams` the pure blocks take
(with a leading ``L`` axis for a :class:`Stack`, as :func:`absorbjax.models.stack` takes), and
``from_params`` builds the module back from them. The weights are stored in the paper's PyTorch
layout, so the conversion copies no numbers and loses none:

* :class:`MLP`: residual-free block ``V_down σ(V_up x)`` (gated: ``V_down (g(V_gate x) ⊙ V_value x)``);
* :class:`ResidualMLP`: residual block ``x + W_down σ(W_up x)``;
* :class:`Stack`: ``L`` of either, composed (``lax.scan`` over the leading ``L`` axis).

Blocks are bias-free by default, as in the paper. ``bias=True`` adds ``b`` inside and ``c`` after,
``W_down σ(W_up x + b) + c`` (gated: a bias on each of ``W_gate x``, ``W_value x``), kept apart
from the weights: ``to_biases()`` returns them as a dict keyed like the params' fields. Unlike the
pure blocks (one ``x: (d,)``, vmap for batches), the modules take any leading batch axes,
``x: (..., d)``, as flax modules usually do. The activation is any name registered in
:mod:`absorbjax.activations`; gated names give gated blocks.

``import absorbjax`` does not import flax; use ``from absorbjax import nn``.
"""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
from flax import nnx
from jax import lax

from absorbjax import activations, models

__all__ = ["MLP", "ResidualMLP", "Stack"]


def _block(params: models.Params, biases: dict | None, x: jax.Array, activation: str, residual: bool) -> jax.Array:
    """One block on ``x: (..., d)``: :func:`absorbjax.models.mlp` / :func:`~absorbjax.models.skip_mlp`
    (the one forward pass) vmapped over the leading axes."""
    block = models.skip_mlp if residual else models.mlp
    flat = x.reshape(-1, x.shape[-1])
    out = jax.vmap(lambda v: block(params, v, activation, bias=biases))(flat)
    return out.reshape(x.shape)


def _shown(cls):
    """``cls`` with the signature of its ``__init__`` (``self`` and private parameters left out) as
    its own: what ``help()``, editors and the API snapshot show, where nnx's metaclass shows
    ``(*args, **kwargs)``."""
    sig = inspect.signature(cls.__init__)
    params = [p for name, p in sig.parameters.items() if name != "self" and not name.startswith("_")]
    cls.__signature__ = sig.replace(parameters=params)
    return cls


class _Blocks(nnx.Module):
    """The weights of one block (``depth=None``) or of ``L`` stacked blocks, and their forward pass."""

    def __init__(
        self,
        d: int,
        n: int,
        activation: str,
        *,
        residual: bool,
        depth: int | None,
        bias: bool,
        rngs: nnx.Rngs | None,
        dtype=None,
        dist: str = "gaussian",
        _weights: tuple | None = None,
    ):
        if _weights is not None:  # from_params: already checked
            params, biases = _weights
        else:
            if not isinstance(bias, bool):
                raise ValueError(f"bias must be True or False, got {bias!r}")
            if not isinstance(rngs, nnx.Rngs):
                raise ValueError(f"rngs must be flax.nnx.Rngs, got {type(rngs).__name__}")
            params = models.init(activation, d, n, key=rngs.params(), dist=dist, dtype=dtype, depth=depth)
            biases = None
            if bias:
                lead = () if depth is None else (depth,)
                biases = {f: jnp.zeros(lead + (d if f == "down" else n,), params.down.dtype) for f in params._fields}
        self.activation = activations.get(activation).name
        self.residual = residual
        self.depth = depth
        self.gated = isinstance(params, models.GatedParams)
        self.fields = params._fields
        for field in params._fields:
            setattr(self, field, nnx.Param(jnp.asarray(getattr(params, field))))
        self.bias = biases is not None
        if biases is not None:
            for field in params._fields:
                setattr(self, f"{field}_bias", nnx.Param(jnp.asarray(biases[field])))

    @staticmethod
    def _checked(params, activation, depth, biases):
        """``(d, n, activation name)`` after checking ``params`` and ``biases`` against each other."""
        act = activations.get(activation)
        want = models.GatedParams if act.gated else models.MLPParams
        if not isinstance(params, want):
            raise ValueError(f"params must be {want.__name__} for activation {act.name!r}, got {type(params).__name__}")
        d, n = models.dims(params)
        lead = () if depth is None else (depth,)
        for field in params._fields:
            if jnp.ndim(getattr(params, field)) != len(lead) + 2:
                raise ValueError(
                    f"params.{field} must have shape {lead + ('*', '*')} "
                    f"({'stacked, leading L axis' if lead else 'one block, no leading axes'}), "
                    f"got {jnp.shape(getattr(params, field))}"
                )
        if depth is not None and any(jnp.shape(getattr(params, f))[0] != depth for f in params._fields):
            raise ValueError(
                "params must all have the same leading L axis, got "
                f"{[jnp.shape(getattr(params, f))[0] for f in params._fields]}"
            )
        if biases is not None:
            if not isinstance(biases, dict) or set(biases) != set(params._fields):
                raise ValueError(f"biases must be a dict with keys {params._fields}, got {biases!r:.80}")
            for field in params._fields:
                want_shape = lead + ((d,) if field == "down" else (n,))
                if jnp.shape(biases[field]) != want_shape:
                    raise ValueError(f"biases[{field!r}] must have shape {want_shape}, got {jnp.shape(biases[field])}")
        return d, n, act.name

    @property
    def d(self) -> int:
        return self.down[...].shape[-2]

    @property
    def n(self) -> int:
        return self.down[...].shape[-1]

    def to_params(self) -> models.Params:
        """The weights as :class:`~absorbjax.models.MLPParams` / :class:`~absorbjax.models.GatedParams`
        (the same arrays; a :class:`Stack` gives them with a leading ``L`` axis)."""
        kind = models.GatedParams if self.gated else models.MLPParams
        return kind(*(getattr(self, f)[...] for f in self.fields))

    def to_biases(self) -> dict | None:
        """``{field: bias}`` (``(n,)`` for ``up``/``gate``/``value``, ``(d,)`` for ``down``, with a
        leading ``L`` axis for a stack), or ``None`` for a bias-free module."""
        if not self.bias:
            return None
        return {f: getattr(self, f"{f}_bias")[...] for f in self.fields}

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x)
        if jnp.ndim(x) < 1 or x.shape[-1] != self.d:
            raise ValueError(f"x must have shape (..., {self.d}), got {jnp.shape(x)}")
        params, biases = self.to_params(), self.to_biases()
        x = x.astype(jnp.result_type(x, self.down[...]))
        if self.depth is None:
            return _block(params, biases, x, self.activation, self.residual)

        def layer(h, wb):
            return _block(*wb, h, self.activation, self.residual), None

        return lax.scan(layer, x, (params, biases))[0]


class _OneBlock(_Blocks):
    """One block (no leading axes); subclasses say whether it is residual."""

    residual_block: bool = False

    def __init__(
        self,
        d: int,
        n: int,
        activation: str,
        *,
        rngs: nnx.Rngs,
        bias: bool = False,
        dtype=None,
        dist: str = "gaussian",
        _weights: tuple | None = None,
    ):
        options = dict(bias=bias, rngs=rngs, dtype=dtype, dist=dist, _weights=_weights)
        super().__init__(d, n, activation, residual=self.residual_block, depth=None, **options)

    @classmethod
    def from_params(cls, params: models.Params, activation: str, *, biases: dict | None = None):
        """The module holding ``params`` (one block, no leading axes) and optional ``biases``."""
        d, n, name = cls._checked(params, activation, None, biases)
        return cls(d, n, name, rngs=None, _weights=(params, biases))


@_shown
class MLP(_OneBlock):
    """Residual-free block ``x ↦ V_down σ(V_up x)`` (gated: ``V_down (g(V_gate x) ⊙ V_value x)``).

    Args:
      d: input/output dimension ``d``.
      n: hidden width ``n``.
      activation: a name registered in :mod:`absorbjax.activations`.
      rngs: ``flax.nnx.Rngs``; the weights are ``models.init(activation, d, n, key=rngs.params())``.
      bias: add biases (initialised to zero).
      dtype: float dtype of the weights; default follows ``jax_enable_x64``.
      dist: weight distribution, as in :func:`absorbjax.models.init`.

    Parameters (``nnx.Param``, PyTorch layout): ``up`` ``(n, d)`` and ``down`` ``(d, n)``, or
    ``gate``, ``value`` ``(n, d)`` and ``down`` ``(d, n)``; with biases also ``<field>_bias``.
    Calls take ``x: (..., d)``.

    Examples:
      >>> import jax
      >>> from flax import nnx
      >>> from absorbjax import models, nn
      >>> block = nn.MLP(4, 8, "gelu", rngs=nnx.Rngs(0))
      >>> params = block.to_params()                  # models.MLPParams: up (8, 4), down (4, 8)
      >>> x = jax.random.normal(jax.random.key(1), (4,))
      >>> bool(jax.numpy.allclose(block(x), models.mlp(params, x, "gelu")))
      True
      >>> nn.MLP.from_params(params, "gelu").to_params().up.shape
      (8, 4)
    """


@_shown
class ResidualMLP(_OneBlock):
    """Residual block ``x ↦ x + W_down σ(W_up x)`` (or its gated form); arguments as :class:`MLP`.

    Examples:
      >>> import jax
      >>> from flax import nnx
      >>> from absorbjax import condition, models, nn
      >>> with jax.enable_x64(True):
      ...     params, S = models.planted("relu", d=3, n=8, key=jax.random.key(0))
      ...     block = nn.ResidualMLP.from_params(params, "relu")
      ...     free = nn.MLP.from_params(condition.absorber(block.to_params(), S, "relu"), "relu")
      ...     x = jax.random.normal(jax.random.key(1), (5, 3))   # any leading batch axes
      ...     print(float(abs(block(x) - free(x)).max()) < 1e-13)
      True
    """

    residual_block = True


@_shown
class Stack(_Blocks):
    """``L`` blocks composed: residual (``x ↦ x + W_down σ(W_up x)``, default) or residual-free.

    Args:
      d, n, activation, rngs, bias, dtype, dist: as :class:`MLP`; layer ``l`` draws its weights
        from ``fold_in(rngs.params(), l)``, as :func:`absorbjax.models.init` with ``depth=L``.
      depth: the number of blocks ``L``.
      residual: residual blocks (``True``) or residual-free ones.

    Every parameter carries a leading ``L`` axis: ``to_params()`` is what
    :func:`absorbjax.models.stack` takes, and ``jax.tree.map(lambda a: a[l], stack.to_params())``
    is block ``l``.

    Examples:
      >>> import jax
      >>> from flax import nnx
      >>> from absorbjax import models, nn
      >>> net = nn.Stack(4, 8, "swiglu", depth=3, rngs=nnx.Rngs(0))
      >>> params = net.to_params()                    # GatedParams, gate (3, 8, 4)
      >>> x = jax.random.normal(jax.random.key(1), (4,))
      >>> bool(jax.numpy.allclose(net(x), models.stack(params, x, "swiglu"), atol=1e-6))
      True
      >>> nn.Stack.from_params(params, "swiglu", residual=False).depth
      3
    """

    def __init__(
        self,
        d: int,
        n: int,
        activation: str,
        *,
        depth: int,
        rngs: nnx.Rngs,
        residual: bool = True,
        bias: bool = False,
        dtype=None,
        dist: str = "gaussian",
        _weights: tuple | None = None,
    ):
        if not isinstance(residual, bool):
            raise ValueError(f"residual must be True or False, got {residual!r}")
        if depth is None:
            raise ValueError("depth must be a positive integer, got None")
        options = dict(bias=bias, rngs=rngs, dtype=dtype, dist=dist, _weights=_weights)
        super().__init__(d, n, activation, residual=residual, depth=depth, **options)

    @classmethod
    def from_params(
        cls, params: models.Params, activation: str, *, residual: bool = True, biases: dict | None = None
    ) -> Stack:
        """The stack holding ``params`` (leading ``L`` axis on every field) and optional ``biases``."""
        if not isinstance(residual, bool):
            raise ValueError(f"residual must be True or False, got {residual!r}")
        if not isinstance(params, (models.MLPParams, models.GatedParams)):
            raise ValueError(f"params must be MLPParams or GatedParams, got {type(params).__name__}")
        if jnp.ndim(params.down) != 3:
            raise ValueError(f"params.down must have shape (L, d, n) for a stack, got {jnp.shape(params.down)}")
        depth = int(jnp.shape(params.down)[0])
        d, n, name = cls._checked(params, activation, depth, biases)
        return cls(d, n, name, depth=depth, rngs=None, residual=residual, _weights=(params, biases))
