"""Reading what people have: MLP blocks of real checkpoints, and the one rule that decides them.

* What it reads: ``.npz``, ``.safetensors`` (sharded with ``*.index.json``), GGUF (``gguf``'s
  reader and dequantisation), ONNX (blocks found by the graph's structure), PyTorch zips (without
  torch), CTranslate2 and model directories, as named tensors with shapes, stored dtypes and
  loaders.
* Which tensors are an MLP: BERT/ViT, GPT-2 (Conv1D, transposed), LLaMA-family, OPT/Whisper, GPT-J,
  GPT-NeoX, T5, Phi-3 (fused), CTranslate2, GGUF and plain names, matched by exact suffix;
  attention is never an MLP; quantised MLP weights named.
* The activation: from the caller, ``config.json``, GGUF metadata or the file; never a silent
  default.
* Every block of a checkpoint and the tensors no block uses (:func:`scan`), layer by layer
  (:func:`blocks`), one block read (:func:`load_block`), a skip matrix (:func:`load_skip`);
  checkpoints installed as Python packages (:func:`checkpoint_file`).
* :func:`check`: the decision for one read block (biases included), a :class:`BlockCheck`, used by
  ``absorbjax check`` (whose ``--plot`` draws the per-layer distances) and the experiments.

Every problem raises ``ValueError`` with one line naming the file and the fix.
"""

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
]
