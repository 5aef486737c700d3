"""Naming conventions of MLP blocks in checkpoints, matched by exact dotted suffix, with layouts.

A tensor ``<prefix>.<suffix>.weight`` (or ``.bias``; a bare ``<suffix>`` too) belongs to the block
``<prefix>`` in the role the suffix names. Roles: ``up`` = ``W_up`` ``(n, d)``, ``down`` =
``W_down`` ``(d, n)`` for ungated blocks; ``gate``, ``value``, ``down`` for gated ones
(``W_down (g(W_gate x) ⊙ W_value x)``). Layouts are PyTorch's ``(out, in)`` except GPT-2's
``Conv1D``, stored ``(in, out)`` (``transposed``).

=========  =====================================  =====================================
name       tensors (suffixes)                     models
=========  =====================================  =====================================
bert       intermediate.dense / output.dense      BERT, RoBERTa, ViT (Hugging Face)
gpt2       mlp.c_fc / mlp.c_proj (transposed)     GPT-2 (Conv1D)
llama      mlp.gate_proj / mlp.up_proj /          LLaMA, Mistral, Qwen, SmolLM (gated)
           mlp.down_proj
fc         fc1 / fc2                              OPT, Whisper, timm ViT
gguf       ffn_gate / ffn_up / ffn_down           GGUF ``blk.N.`` (gated when ffn_gate exists)
plain      gate / value (or up) / down, up / down  this package's own files
=========  =====================================  =====================================

A group counts as a block only when it holds its convention's key role (``up``, or ``gate`` for
gated ones), so attention tensors never pass for MLPs: BERT's ``attention.output.dense`` forms the
group ``...attention`` with a ``down`` and no ``up``; ``attention.self.value`` a ``value`` with no
``gate``; a mixture-of-experts router ``mlp.gate`` has no ``value``/``down`` beside it.
"""

from __future__ import annotations

import dataclasses
import re

__all__ = ["Convention", "CONVENTIONS", "Group", "group"]


@dataclasses.dataclass(frozen=True)
class Convention:
    """``roles``: role → suffix; ``gated``: whether ``gate``/``value`` replace ``up``;
    ``transposed``: stored ``(in, out)``."""

    name: str
    roles: dict[str, str]
    gated: bool = False
    transposed: bool = False

    @property
    def key(self) -> str:
        return "gate" if self.gated else "up"


# Gated variants first: a group matching both takes the gated reading.
CONVENTIONS = (
    Convention("bert", {"up": "intermediate.dense", "down": "output.dense"}),
    Convention("gpt2", {"up": "mlp.c_fc", "down": "mlp.c_proj"}, transposed=True),
    Convention("llama", {"gate": "mlp.gate_proj", "value": "mlp.up_proj", "down": "mlp.down_proj"}, gated=True),
    Convention("fc", {"up": "fc1", "down": "fc2"}),
    Convention("gguf-gated", {"gate": "ffn_gate", "value": "ffn_up", "down": "ffn_down"}, gated=True),
    Convention("gguf", {"up": "ffn_up", "down": "ffn_down"}),
    Convention("plain-gated", {"gate": "gate", "value": "value", "down": "down"}, gated=True),
    Convention("plain-gated", {"gate": "gate", "value": "up", "down": "down"}, gated=True),
    Convention("plain", {"up": "up", "down": "down"}),
)


@dataclasses.dataclass(frozen=True)
class Group:
    """Tensors of one candidate block: ``weights`` / ``biases`` map role → tensor name."""

    prefix: str
    convention: Convention
    weights: dict[str, str]
    biases: dict[str, str]

    @property
    def missing(self) -> list[str]:
        return [self._full(r) for r in self.convention.roles if r not in self.weights]

    def _full(self, role: str) -> str:
        suffix = self.convention.roles[role]
        return f"{self.prefix}.{suffix}" if self.prefix else suffix


def _split(name: str) -> tuple[str, str]:
    for kind in ("weight", "bias"):
        if name.endswith("." + kind):
            return name[: -len(kind) - 1], kind
    return name, "weight"


def _natural(prefix: str):
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.]", prefix)]


def group(names) -> tuple[list[Group], list[Group]]:
    """``(blocks, incomplete)`` from tensor names: groups holding every role of a convention, in
    natural order of their prefixes (``layer.2`` before ``layer.10``), and groups holding the key
    role but not every other role (one per prefix), for the caller to report."""
    found: dict[tuple[int, str], Group] = {}
    for full in names:
        stem, kind = _split(full)
        for ci, conv in enumerate(CONVENTIONS):
            for role, suffix in conv.roles.items():
                if stem == suffix:
                    prefix = ""
                elif stem.endswith("." + suffix):
                    prefix = stem[: -len(suffix) - 1]
                else:
                    continue
                g = found.setdefault((ci, prefix), Group(prefix, conv, {}, {}))
                (g.weights if kind == "weight" else g.biases)[role] = full
    blocks, incomplete, taken = [], [], set()
    for (ci, prefix), g in sorted(found.items(), key=lambda kv: kv[0][0]):
        if prefix in taken or g.convention.key not in g.weights:
            continue
        if not g.missing:
            blocks.append(g)
            taken.add(prefix)
        else:
            incomplete.append(g)
    seen: set[str] = set()
    incomplete = [g for g in incomplete if g.prefix not in taken and not (g.prefix in seen or seen.add(g.prefix))]
    blocks.sort(key=lambda g: _natural(g.prefix))
    return blocks, incomplete
