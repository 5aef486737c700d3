"""Naming conventions of MLP blocks in checkpoints, matched by exact dotted suffix, with layouts.

A tensor ``<prefix>.<suffix>.weight`` (also ``_weight``, ``.w`` or a bare ``<suffix>``) or
``<prefix>.<suffix>.bias`` (also ``_bias``, ``.b``: ``up_bias``, ``fc1.bias``, ``c_fc.bias``)
belongs to the block ``<prefix>`` in the role the suffix names. Roles: ``up`` = ``W_up`` ``(n, d)``, ``down`` =
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
fc_in      mlp.fc_in / mlp.fc_out                 GPT-J
neox       mlp.dense_h_to_4h / mlp.dense_4h_to_h  GPT-NeoX, Pythia, Falcon, BLOOM
t5         DenseReluDense.wi(_0, _1) / .wo         T5 (gated: wi_0 activated, wi_1 value)
phi3       mlp.gate_up_proj / mlp.down_proj        Phi-3: gate and value fused, gate first
ct2        ffn.linear_0 (_noact) / ffn.linear_1    CTranslate2 (gated: linear_0_noact value)
gguf       ffn_gate / ffn_up / ffn_down           GGUF ``blk.N.`` (gated when ffn_gate exists)
plain      gate / value (or up) / down, up / down  this package's own files
=========  =====================================  =====================================

A fused role ``gate_value`` ``(2n, d)`` holds ``W_gate`` and ``W_value`` stacked, in the order
:data:`FUSED_ORDERS` names (Phi-3: gate first); any ungated convention's ``up`` may be declared
fused by the caller (``--fused gate-value``).

Quantised MLP weights that are not dequantised here (GPTQ/AWQ ``qweight``/``qzeros``/``scales``,
bitsandbytes ``SCB``/``absmax``, ``weight_scale``) are named by :func:`quantisation`.

A group counts as a block only when it holds its convention's key role (``up``, or ``gate`` for
gated ones), so attention tensors never pass for MLPs: BERT's ``attention.output.dense`` forms the
group ``...attention`` with a ``down`` and no ``up``; ``attention.self.value`` a ``value`` with no
``gate``; a mixture-of-experts router ``mlp.gate`` has no ``value``/``down`` beside it.

Names come from files, so they may hold anything: :func:`printable` is the one way a name is
printed (control characters, lone surrogates and format characters escaped as ``\\r``, ``\\x1b``,
``\\ud800``). Every tensor name is made printable when its file is read
(:func:`absorbjax.weights._formats.read`; two names that print alike are refused), so block names,
unused tensors and errors hold printable names from Python too; :func:`absorbjax.weights.check` and
``absorbjax check`` (which escapes every line it prints) apply it again, which changes nothing.
"""

from __future__ import annotations

import dataclasses
import re

FUSED_ORDERS = ("gate-value", "value-gate")


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
        if "gate_value" in self.roles:
            return "gate_value"
        return "gate" if self.gated else "up"


# Gated variants first: a group matching both takes the gated reading.
CONVENTIONS = (
    Convention("bert", {"up": "intermediate.dense", "down": "output.dense"}),
    Convention("gpt2", {"up": "mlp.c_fc", "down": "mlp.c_proj"}, transposed=True),
    Convention("llama", {"gate": "mlp.gate_proj", "value": "mlp.up_proj", "down": "mlp.down_proj"}, gated=True),
    Convention("fc", {"up": "fc1", "down": "fc2"}),
    Convention("fc_in", {"up": "mlp.fc_in", "down": "mlp.fc_out"}),
    Convention("neox", {"up": "mlp.dense_h_to_4h", "down": "mlp.dense_4h_to_h"}),
    Convention(
        "t5-gated",
        {"gate": "DenseReluDense.wi_0", "value": "DenseReluDense.wi_1", "down": "DenseReluDense.wo"},
        gated=True,
    ),
    Convention("t5", {"up": "DenseReluDense.wi", "down": "DenseReluDense.wo"}),
    Convention("phi3", {"gate_value": "mlp.gate_up_proj", "down": "mlp.down_proj"}, gated=True),
    Convention(
        "ct2-gated", {"gate": "ffn.linear_0", "value": "ffn.linear_0_noact", "down": "ffn.linear_1"}, gated=True
    ),
    Convention("ct2", {"up": "ffn.linear_0", "down": "ffn.linear_1"}),
    Convention("gguf-gated", {"gate": "ffn_gate", "value": "ffn_up", "down": "ffn_down"}, gated=True),
    Convention("gguf", {"up": "ffn_up", "down": "ffn_down"}),
    Convention("plain-gated", {"gate": "gate", "value": "value", "down": "down"}, gated=True),
    Convention("plain-gated", {"gate": "gate", "value": "up", "down": "down"}, gated=True),
    Convention("plain", {"up": "up", "down": "down"}),
)


@dataclasses.dataclass(frozen=True)
class Group:
    """Tensors of one candidate block: ``weights`` / ``biases`` map role → tensor name.
    ``activation`` / ``residual``: what a graph says about the block (ONNX), else ``None``."""

    prefix: str
    convention: Convention
    weights: dict[str, str]
    biases: dict[str, str]
    activation: str | None = None
    residual: bool | None = None

    @property
    def missing(self) -> list[str]:
        return [self.full(r) for r in self.convention.roles if r not in self.weights]

    def full(self, role: str) -> str:
        """The tensor name (without ``.weight``) that ``role`` has in this group."""
        suffix = self.convention.roles[role]
        return f"{self.prefix}.{suffix}" if self.prefix else suffix


_ENDINGS = (
    (".weight", "weight"),
    ("_weight", "weight"),
    (".w", "weight"),
    (".bias", "bias"),
    ("_bias", "bias"),
    (".b", "bias"),
)


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text, limit: int | None = None) -> str:
    """``text`` (a tensor, node or file name, or a message holding one) as it may be printed: every
    character that is not printable (``str.isprintable``: control characters such as ``\\r``,
    ``\\n``, ESC, lone surrogates, format and separator characters such as U+202E or U+2028) written
    as a Python escape (``\\r``, ``\\x1b``, ``\\ud800``, ``\\u202e``), so that no name read from a
    file can move the cursor, colour the terminal, start a line of its own or fail to encode;
    printable characters (backslashes and non-ASCII letters included) are kept, so applying it twice
    changes nothing. At most ``limit`` characters, then ``…``. The one function every name printed
    by the readers, ``weights.check`` and ``absorbjax check`` (table, ``--json``, errors) goes
    through."""
    text = str(text)
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else _escape(ch) for ch in text)
    if limit is not None and len(text) > limit:
        return text[:limit] + "…"
    return text


def _escape(ch: str) -> str:
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def split_name(name: str) -> tuple[str, str]:
    """``(stem, "weight" | "bias")``: ``fc1.bias`` → ``(fc1, bias)``, ``up_bias`` → ``(up, bias)``."""
    for ending, kind in _ENDINGS:
        if name.endswith(ending) and len(name) > len(ending):
            return name[: -len(ending)], kind
    return name, "weight"


# the last component of a tensor name → the quantisation it belongs to
QUANT_MARKERS = {
    "qweight": "GPTQ/AWQ",
    "qzeros": "GPTQ/AWQ",
    "scales": "GPTQ/AWQ",
    "g_idx": "GPTQ",
    "SCB": "bitsandbytes int8",
    "weight_format": "bitsandbytes int8",
    "absmax": "bitsandbytes 4-bit",
    "quant_map": "bitsandbytes 4-bit",
    "weight_scale": "int8/fp8 with weight_scale",
    "weight_scale_inv": "fp8 with weight_scale_inv",
    "weight_packed": "compressed-tensors",
    "scale": "int8 with scale",
    "weight_zero_point": "compressed-tensors",
}


def _marker(name: str) -> tuple[str, str] | None:
    for marker in QUANT_MARKERS:
        for sep in (".", "_"):
            if name.endswith(sep + marker):
                return name[: -len(marker) - 1], marker
        if ".quant_state." in name:
            return name.split(".weight.quant_state.")[0], "absmax"
    return None


def quantisation(names) -> str | None:
    """The quantisation of the MLP weights among ``names`` (``"GPTQ/AWQ (qweight, qzeros, scales:
    e.g. model.layers.0.mlp.down_proj.qweight)"``), or ``None`` when no MLP role is quantised."""
    suffixes = {s for conv in CONVENTIONS for s in conv.roles.values()}
    found: dict[str, list[str]] = {}
    for name in names:
        hit = _marker(name)
        if hit is None:
            continue
        stem = split_name(hit[0])[0]
        if any(stem == sfx or stem.endswith("." + sfx) for sfx in suffixes):
            found.setdefault(QUANT_MARKERS[hit[1]], []).append(name)
    if not found:
        return None
    some = sorted(n for names_ in found.values() for n in names_)
    markers = sorted({_marker(n)[1] for n in some})
    return f"{' / '.join(sorted(found))} ({', '.join(markers)}: e.g. {some[0]})"


def _natural(prefix: str):
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"[.]", prefix)]


def group(names) -> tuple[list[Group], list[Group]]:
    """``(blocks, incomplete)`` from tensor names: groups holding every role of a convention, in
    natural order of their prefixes (``layer.2`` before ``layer.10``), and groups holding the key
    role but not every other role (one per prefix), for the caller to report."""
    found: dict[tuple[int, str], Group] = {}
    for full in names:
        stem, kind = split_name(full)
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
