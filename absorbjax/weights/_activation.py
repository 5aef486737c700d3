"""Which activation a checkpoint's MLPs use: the caller's name, a ``config.json`` beside the file,
GGUF metadata, what the file says (an ONNX graph's activation nodes, a CTranslate2 ``activation``
scalar, an ``activation`` entry); never a silent default.

A tanh-approximate GELU gate (Gemma's ``gelu_pytorch_tanh``) is named ``geglu_tanh`` when the
activation registry has that name; until it does, such blocks are read as ``geglu`` (the exact-GELU
gate) and the source says so: both gates are differentiable at 0 with ``g(0) = 0``, so Prop 6
decides them alike, but the label is not the file's.
"""

from __future__ import annotations

from pathlib import Path

from absorbjax.weights import _limits as limits
from absorbjax.weights._formats import Checkpoint

# Hugging Face ``hidden_act`` (``activation_function`` for GPT-2/OPT) → (ungated, gated) names.
HIDDEN_ACT = {
    "gelu": ("gelu", "geglu"),
    "gelu_new": ("gelu_tanh", "geglu_tanh"),
    "gelu_pytorch_tanh": ("gelu_tanh", "geglu_tanh"),
    "gelu_fast": ("gelu_tanh", "geglu_tanh"),
    "relu": ("relu", "reglu"),
    "silu": ("silu", "swiglu"),
    "swish": ("silu", "swiglu"),
}
# GGUF ``general.architecture`` → the ``hidden_act`` of its feed-forward blocks.
GGUF_ARCH = {
    "llama": "silu",
    "mistral": "silu",
    "qwen2": "silu",
    "qwen3": "silu",
    "phi3": "silu",
    "gemma": "gelu_pytorch_tanh",
    "gemma2": "gelu_pytorch_tanh",
    "gemma3": "gelu_pytorch_tanh",
    "gpt2": "gelu_new",
    "bert": "gelu",
    "starcoder2": "gelu_pytorch_tanh",
}
_CONFIG_KEYS = ("hidden_act", "activation_function", "hidden_activation")


def _from_hidden_act(value: str, gated: bool, where: str, path: Path) -> tuple[str, str]:
    if value not in HIDDEN_ACT:
        raise ValueError(
            f"{path}: {where} names activation {value!r}, which has no registered counterpart "
            f"(known: {', '.join(HIDDEN_ACT)}); pass --activation NAME"
        )
    name = HIDDEN_ACT[value][gated]
    from absorbjax import activations

    if name == "geglu_tanh" and name not in activations.names():
        return "geglu", f"{where}: a tanh-GELU gate, read as the exact-GELU geglu (no geglu_tanh registered)"
    return name, where


def resolve(ckpt: Checkpoint, gated: bool, activation: str | None) -> tuple[str, str]:
    """``(name, source)`` for a checkpoint whose blocks are ``gated`` or not.

    Order: ``activation`` (source ``"argument"``); ``config.json`` beside the file
    (``hidden_act``, ``activation_function`` or ``hidden_activation``; gelu → exact ``gelu``,
    gelu_new / gelu_pytorch_tanh → ``gelu_tanh``, silu → ``silu``, or for gated blocks their gated
    names ``geglu`` / ``geglu_tanh`` (see the module docstring) / ``swiglu``); GGUF
    ``general.architecture`` (llama → ``swiglu``); a ``hidden_act`` the reader found (ONNX graph,
    CTranslate2); an ``activation`` string in the file. Without any: ``ValueError`` asking for ``--activation``.
    The name must be registered and gated exactly when the blocks are.
    """
    from absorbjax import activations

    path = ckpt.path
    if activation is not None:
        name, source = activation, "argument"
    else:
        name = source = None
        config = path.parent / "config.json"
        if config.is_file():
            try:
                cfg = limits.read_json(config)
            except (OSError, ValueError) as err:
                why = " ".join(str(err).split())[:200]
                raise ValueError(f"{path}: {config} is not readable JSON ({why}); pass --activation NAME") from None
            for key in _CONFIG_KEYS:
                if isinstance(cfg, dict) and isinstance(cfg.get(key), str):
                    name, source = _from_hidden_act(cfg[key], gated, f"config.json {key}={cfg[key]}", path)
                    break
        arch = ckpt.metadata.get("general.architecture")
        if name is None and arch is not None:
            if arch not in GGUF_ARCH:
                raise ValueError(f"{path}: GGUF architecture {arch!r} has no known activation; pass --activation NAME")
            name, source = _from_hidden_act(GGUF_ARCH[arch], gated, f"gguf general.architecture={arch}", path)
        if name is None and "hidden_act" in ckpt.metadata:
            what = ckpt.metadata.get("hidden_act_source", "file")
            name, source = _from_hidden_act(ckpt.metadata["hidden_act"], gated, what, path)
        if name is None and "activation" in ckpt.metadata:
            name, source = ckpt.metadata["activation"], "file"
        if name is None:
            raise ValueError(
                f"{path}: no activation known (no config.json with hidden_act beside it, no GGUF "
                f"architecture, no 'activation' entry); pass --activation NAME (one of "
                f"{', '.join(activations.names(gated=gated))})"
            )
    try:
        act = activations.get(name)
    except ValueError as err:
        raise ValueError(f"{path}: {' '.join(str(err).split())}") from None
    if act.gated != gated:
        want, have = ("gated", "ungated") if act.gated else ("ungated", "gated")
        raise ValueError(
            f"{path}: activation {act.name!r} ({source}) is {want} but the file holds {have} blocks; "
            "pass --activation NAME"
        )
    return act.name, source
