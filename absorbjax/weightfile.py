"""Load one MLP block (and a skip matrix) from ``.npz`` or ``.safetensors`` files.

Layout is PyTorch's ``(out, in)``, which is ours: ``up`` = ``nn.Linear(d, n).weight`` ``(n, d)``,
``down`` = ``nn.Linear(n, d).weight`` ``(d, n)``. Accepted tensor names (a trailing ``.weight``
and any dotted prefix such as ``model.layers.0.mlp.`` are ignored):

* ungated: ``up``, ``down``; or ``fc1``, ``fc2`` (ViT / BERT style ``nn.Linear`` pairs);
* gated: ``gate``, ``value``, ``down``; or Hugging Face LLaMA names ``gate_proj`` (activated),
  ``up_proj`` (the linear value branch) and ``down_proj``.

Blocks with biases are refused: the theorems are about bias-free blocks. The activation comes
from the argument, else from the file (an ``activation`` string entry of an ``.npz``, or the
``activation`` metadata of a ``.safetensors``), else the default by kind: ``relu`` for ungated
blocks (Thm 8 and Thm 10 share one condition, so ``gelu`` gets the same answer), ``swiglu`` for
gated ones. Every problem raises ``ValueError`` with a one-line message naming the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from absorbjax import activations
from absorbjax.models import GatedParams, MLPParams

__all__ = ["load_block", "load_skip", "SCHEMES"]

# name in the file -> field of the params, per naming scheme (first match wins).
SCHEMES = (
    ("hf-gated", GatedParams, {"gate_proj": "gate", "up_proj": "value", "down_proj": "down"}),
    ("gated", GatedParams, {"gate": "gate", "value": "value", "down": "down"}),
    ("ungated", MLPParams, {"up": "up", "down": "down"}),
    ("fc", MLPParams, {"fc1": "up", "fc2": "down"}),
)


_DEFAULT = {False: "relu", True: "swiglu"}


def _why(err: Exception) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def _read(path) -> tuple[Path, dict[str, np.ndarray], dict[str, str]]:
    """``(path, {name: array}, metadata)``; the metadata holds string entries."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    suffix = path.suffix.lower()
    if suffix in (".npz", ".npy"):
        try:
            if suffix == ".npz":
                with np.load(path, allow_pickle=False) as data:
                    arrays = {k: np.asarray(data[k]) for k in data.files}
            else:
                arrays = {"": np.load(path, allow_pickle=False)}
        except Exception as err:  # noqa: BLE001 - any parse failure means "unreadable"
            raise ValueError(f"{path}: not a readable {suffix} file ({_why(err)})") from None
        meta = {k: str(v) for k, v in arrays.items() if v.dtype.kind in "US" and v.ndim == 0}
        return path, {k: v for k, v in arrays.items() if k not in meta}, meta
    if suffix == ".safetensors":
        try:
            from safetensors import safe_open
        except ImportError:
            raise ValueError(
                f"{path}: reading .safetensors needs the optional package 'safetensors' "
                "(pip install safetensors)"
            ) from None
        try:
            with safe_open(str(path), framework="np") as f:
                meta = dict(f.metadata() or {})
                arrays = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as err:  # noqa: BLE001
            raise ValueError(f"{path}: not a readable .safetensors file ({_why(err)})") from None
        return path, arrays, meta
    raise ValueError(f"{path}: unknown format {suffix or '(no suffix)'!r}; use .npz or .safetensors")


def _short(name: str) -> str:
    """``model.layers.0.mlp.up_proj.weight`` -> ``up_proj``."""
    if name.endswith(".weight"):
        name = name[: -len(".weight")]
    return name.rsplit(".", 1)[-1]


def _matrix(path: Path, name: str, a: np.ndarray) -> np.ndarray:
    if a.ndim != 2:
        raise ValueError(f"{path}: {name} must be a 2-D matrix, got shape {a.shape}")
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{path}: {name} must hold real numbers, got dtype {a.dtype}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{path}: {name} contains NaN or inf")
    return a


def load_block(path, activation: str | None = None) -> tuple[MLPParams | GatedParams, str]:
    """One block's weights from ``path`` (``.npz`` or ``.safetensors``).

    Returns ``(params, activation_name)``: :class:`MLPParams` ``(up (n, d), down (d, n))`` or
    :class:`GatedParams` ``(gate (n, d), value (n, d), down (d, n))`` as NumPy arrays in the file's
    dtype, and the activation (argument, else file, else ``relu`` / ``swiglu`` by kind),
    checked against the registry and against gated/ungated weights.
    """
    path, arrays, meta = _read(path)
    by_short: dict[str, list[str]] = {}
    for key in arrays:
        by_short.setdefault(_short(key), []).append(key)
    for scheme, kind, names in SCHEMES:
        if not any(name in by_short for name in names if name != "down"):
            continue
        missing = [name for name in names if name not in by_short]
        if missing:
            raise ValueError(
                f"{path}: {scheme} block needs tensors {sorted(names)}, missing {missing}; "
                f"found {sorted(arrays)}"
            )
        fields = {}
        for name, field in names.items():
            keys = by_short[name]
            if len(keys) > 1:
                raise ValueError(
                    f"{path}: several tensors named {name}: {sorted(keys)}; save one block per file"
                )
            biases = [k for k in arrays if k.endswith(".bias") and _short(k[: -len(".bias")]) == name]
            if biases:
                raise ValueError(f"{path}: {biases[0]} is a bias; the theorems are for bias-free blocks")
            fields[field] = _matrix(path, keys[0], arrays[keys[0]])
        params = kind(**fields)
        _check_shapes(path, params)
        break
    else:
        raise ValueError(
            f"{path}: no MLP block found; expected tensors up/down, gate/value/down, fc1/fc2 or "
            f"gate_proj/up_proj/down_proj, found {sorted(arrays)}"
        )
    gated = isinstance(params, GatedParams)
    name = activation if activation is not None else meta.get("activation", _DEFAULT[gated])
    try:
        act = activations.get(name)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    if act.gated != gated:
        want = "gated" if act.gated else "ungated"
        raise ValueError(f"{path}: activation {act.name!r} is {want} but the file holds a {scheme} block")
    return params, act.name


def _check_shapes(path: Path, params) -> None:
    d, n = params.down.shape
    for field in params._fields[:-1]:
        shape = getattr(params, field).shape
        if shape != (n, d):
            raise ValueError(
                f"{path}: {field} must have shape ({n}, {d}) to match down {params.down.shape} "
                f"(PyTorch layout: up is (n, d), down is (d, n)), got {shape}"
            )


def load_skip(path) -> np.ndarray:
    """The skip matrix ``A`` ``(d, d)``: a ``.npz`` with one array or a ``skip`` entry (also
    ``.npy`` or ``.safetensors``). Conditioning is checked where it is used
    (:func:`absorbjax.condition.find_absorbing_set`)."""
    path, arrays, _ = _read(path)
    if "skip" in arrays:
        key = "skip"
    elif len(arrays) == 1:
        (key,) = arrays
    else:
        raise ValueError(f"{path}: expected one array or an entry 'skip', found {sorted(arrays)}")
    A = _matrix(path, key or "the array", arrays[key])
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"{path}: the skip matrix must be square (d, d), got shape {A.shape}")
    return A
