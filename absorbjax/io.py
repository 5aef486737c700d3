"""Results records: JSON with the numbers, the configuration, the seed and the versions."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import jax
import numpy as np

__all__ = ["environment", "save_record", "load_record", "to_jsonable", "atomic_open"]


def environment() -> dict[str, Any]:
    """Versions and device of this process, for every results record."""
    import absorbjax

    return {
        "absorbjax": absorbjax.__version__,
        "jax": jax.__version__,
        "jaxlib": getattr(jax.lib, "__version__", None) or _pkg_version("jaxlib"),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "x64": bool(jax.config.jax_enable_x64),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _pkg_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def to_jsonable(obj: Any) -> Any:
    """Arrays, NumPy scalars, tuples and NamedTuples turned into plain JSON values."""
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if hasattr(obj, "_asdict"):
        return to_jsonable(obj._asdict())
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (jax.Array, np.ndarray, np.generic)):
        arr = np.asarray(obj)
        if arr.dtype.kind == "f":
            arr = arr.astype(float)
            out = np.where(np.isfinite(arr), arr, None) if arr.ndim else (float(arr) if np.isfinite(arr) else None)
            return out.tolist() if isinstance(out, np.ndarray) else out
        return arr.tolist()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def save_record(path: str | os.PathLike, *, name: str, seed: int | None, config: dict, results: dict) -> Path:
    """Write ``{name, seed, config, results, environment}`` as JSON atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "name": name,
        "seed": seed,
        "config": to_jsonable(config),
        "results": to_jsonable(results),
        "environment": environment(),
    }
    with atomic_open(path) as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    return path


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w"):
    """A file to write ``path`` through: a temporary file in the same folder that replaces
    ``path`` in one step when the block ends, and is removed if it raises (so a reader sees the
    old file or the whole new one, never a partial write)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_record(path: str | os.PathLike) -> dict:
    """Read a record written by :func:`save_record`."""
    with open(path) as f:
        return json.load(f)
