"""Reading what people have: MLP blocks of real checkpoints.

* :mod:`~absorbjax.weights.formats`: ``.npz``, ``.safetensors``, GGUF (``gguf``'s reader and
  dequantisation) → named tensors with shapes, stored dtypes and loaders.
* :mod:`~absorbjax.weights.conventions`: BERT/ViT, GPT-2 (Conv1D, transposed), LLaMA-family,
  OPT/Whisper, GGUF and plain names, matched by exact suffix; attention is never an MLP.
* :mod:`~absorbjax.weights.activation`: the activation from the caller, ``config.json``, GGUF
  metadata or the file; never a silent default.
* :mod:`~absorbjax.weights.model`: every block of a file, layer by layer (:func:`blocks`), one
  block read (:func:`load_block`), a skip matrix (:func:`load_skip`).
* :mod:`~absorbjax.weights.packages`: checkpoints installed as Python packages.

Every problem raises ``ValueError`` with one line naming the file and the fix.
"""

from absorbjax.weights import activation, conventions, formats, model, packages
from absorbjax.weights.model import Block, blocks, load_block, load_skip
from absorbjax.weights.packages import checkpoint_file

__all__ = ["Block", "blocks", "load_block", "load_skip", "checkpoint_file",
           "activation", "conventions", "formats", "model", "packages"]
