"""Results records: JSON with the numbers, the configuration, the seed and the versions.

Importing this module does not import JAX (the NumPy decision's certificates use
:func:`to_jsonable`); :func:`environment` and :func:`subkey` import it when called.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import jax

__all__ = ["environment", "save_record", "load_record", "to_jsonable", "atomic_open", "subkey"]


def environment() -> dict[str, Any]:
    """Versions, device and processor of this process, for every results record.

    ``cores`` counts the CPU cores this process may run on (its affinity), ``cpu`` names the
    processor; ``x64`` says whether float64 was enabled when the record was written.

    Examples:
      >>> from absorbjax import io
      >>> env = io.environment()
      >>> sorted(env)
      ['absorbjax', 'backend', 'cores', 'cpu', 'devices', 'jax', 'jaxlib', 'numpy', 'python',
       'scipy', 'time', 'x64']
      >>> env["x64"]  # absorbjax never switches float64 on
      False
    """
    import jax

    import absorbjax

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "absorbjax": absorbjax.__version__,
        "jax": jax.__version__,
        "jaxlib": getattr(jax.lib, "__version__", None) or _pkg_version("jaxlib"),
        "numpy": np.__version__,
        "scipy": _pkg_version("scipy"),
        "python": platform.python_version(),
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "cpu": platform.machine(),  # platform.processor() would fork `uname -p` beside XLA threads
        "cores": cores,
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
    """Arrays, NumPy scalars, tuples and NamedTuples turned into plain JSON values.

    NaN and ±inf become ``None`` (JSON has no such numbers); a reader of a record sees a missing
    value, never a number that was not measured.

    Examples:
      >>> import jax.numpy as jnp, numpy as np
      >>> from absorbjax import io, models
      >>> io.to_jsonable({"loss": jnp.array([0.5, jnp.inf]), "n": np.int64(3), "d": (2, np.nan)})
      {'loss': [0.5, None], 'n': 3, 'd': [2, None]}
      >>> io.to_jsonable(models.MLPParams(up=np.ones((1, 2)), down=np.zeros((2, 1))))
      {'up': [[1.0, 1.0]], 'down': [[0.0], [0.0]]}
    """
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if hasattr(obj, "_asdict"):
        return to_jsonable(obj._asdict())
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, (np.ndarray, np.generic)) or _is_jax_array(obj):
        arr = np.asarray(obj)
        if arr.dtype.kind == "f":
            arr = arr.astype(float)
            out = np.where(np.isfinite(arr), arr, None) if arr.ndim else (float(arr) if np.isfinite(arr) else None)
            return out.tolist() if isinstance(out, np.ndarray) else out
        return arr.tolist()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def _is_jax_array(obj: Any) -> bool:
    """Whether ``obj`` is a ``jax.Array``; without JAX imported, nothing is one."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(obj, jax.Array)


def save_record(
    path: str | os.PathLike,
    *,
    name: str,
    seed: int | None,
    config: dict,
    results: dict,
    env: dict | None = None,
) -> Path:
    """Write ``{name, seed, config, results, environment}`` as JSON atomically; returns the path.

    ``config`` and ``results`` go through :func:`to_jsonable`; ``environment`` is ``env``, by
    default :func:`environment` at the time of writing (:mod:`absorbjax.lab.reproduce` passes it without
    ``time`` and keeps when and how long each run took in a separate record).

    Examples:
      >>> import tempfile, pathlib
      >>> from absorbjax import io
      >>> with tempfile.TemporaryDirectory() as tmp:
      ...     path = io.save_record(pathlib.Path(tmp) / "demo.json", name="demo", seed=0,
      ...                           config={"d": 2}, results={"error": 1e-16})
      ...     record = io.load_record(path)
      >>> record["name"], record["config"], record["results"], record["environment"]["x64"]
      ('demo', {'d': 2}, {'error': 1e-16}, False)
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "name": name,
        "seed": seed,
        "config": to_jsonable(config),
        "results": to_jsonable(results),
        "environment": to_jsonable(environment() if env is None else env),
    }
    with atomic_open(path) as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    return path


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w"):
    """A file to write ``path`` through: a temporary file in the same folder that replaces
    ``path`` in one step when the block ends, and is removed if it raises (so a reader sees the
    old file or the whole new one, never a partial write).

    Examples:
      >>> import tempfile, pathlib
      >>> from absorbjax import io
      >>> with tempfile.TemporaryDirectory() as tmp:
      ...     path = pathlib.Path(tmp) / "out.txt"
      ...     with io.atomic_open(path) as f:
      ...         _ = f.write("old")
      ...     try:
      ...         with io.atomic_open(path) as f:
      ...             _ = f.write("half a new fi")
      ...             raise RuntimeError("interrupted")
      ...     except RuntimeError:
      ...         pass
      ...     print(path.read_text(), sorted(p.name for p in path.parent.iterdir()))
      old ['out.txt']
    """
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
    """Read a record written by :func:`save_record` (a dict; see its example)."""
    with open(path) as f:
        return json.load(f)


def subkey(key: jax.Array, *path: int) -> jax.Array:
    """The key at ``path`` below ``key``: ``fold_in`` applied along the path.

    One base key per experiment, one path per purpose (``subkey(key, 0, i)``: the weights of
    draw ``i`` of part 0; ``subkey(key, 1, i)``: its inputs), so no two purposes share a key.

    Examples:
      >>> import jax
      >>> from absorbjax import io
      >>> key = jax.random.key(0)
      >>> k = io.subkey(key, 2, 5)
      >>> bool((jax.random.key_data(k) == jax.random.key_data(
      ...     jax.random.fold_in(jax.random.fold_in(key, 2), 5))).all())
      True
    """
    import jax

    for i in path:
        key = jax.random.fold_in(key, i)
    return key
