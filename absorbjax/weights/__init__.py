"""Reading what people have: MLP blocks of real checkpoints, and the one rule that decides them.

* :mod:`~absorbjax.weights._formats`: ``.npz``, ``.safetensors`` (sharded with ``*.index.json``),
  GGUF (``gguf``'s reader and dequantisation), ONNX, PyTorch zips (without torch), CTranslate2,
  model directories → named tensors with shapes, stored dtypes and loaders.
* :mod:`~absorbjax.weights._conventions`: BERT/ViT, GPT-2 (Conv1D, transposed), LLaMA-family,
  OPT/Whisper, GPT-J, GPT-NeoX, T5, Phi-3 (fused), CTranslate2, GGUF and plain names, matched by
  exact suffix; attention is never an MLP; quantised MLP weights named.
* :mod:`~absorbjax.weights._onnxgraph`: ONNX blocks found by the graph's structure.
* :mod:`~absorbjax.weights._activation`: the activation from the caller, ``config.json``, GGUF
  metadata or the file; never a silent default.
* :mod:`~absorbjax.weights._model`: every block of a checkpoint and the tensors no block uses
  (:func:`scan`), layer by layer (:func:`blocks`), one block read (:func:`load_block`), a skip
  matrix (:func:`load_skip`).
* :func:`check` (``weights/_check.py``): the decision for one read block (biases included), a
  :class:`BlockCheck`, used by ``absorbjax check`` and the experiments.
* :mod:`~absorbjax.weights._plot`: the per-layer distance figure of ``absorbjax check --plot``.
* :mod:`~absorbjax.weights._packages`: checkpoints installed as Python packages.

Every problem raises ``ValueError`` with one line naming the file and the fix.
"""

from absorbjax.weights import (
    _activation as activation,
    _conventions as conventions,
    _formats as formats,
    _model as model,
    _packages as packages,
)
from absorbjax.weights._check import BlockCheck, check, gaussian_like
from absorbjax.weights._model import Block, Layout, Model, blocks, load_block, load_skip, scan
from absorbjax.weights._packages import checkpoint_file

__all__ = [
    "Block",
    "Model",
    "Layout",
    "BlockCheck",
    "scan",
    "blocks",
    "load_block",
    "load_skip",
    "check",
    "gaussian_like",
    "checkpoint_file",
    "activation",
    "conventions",
    "formats",
    "model",
    "packages",
]
