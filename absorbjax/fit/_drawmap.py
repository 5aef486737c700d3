"""A batched, sharded, checkpointed map of one per-draw function over many draws.

``map_draws(fn, static, key, arrays, ...)`` computes ``fn(*static, key, i, *arrays[i])`` for every
draw ``i`` and returns the per-draw outputs (a flat dict of arrays) stacked along a leading draws
axis, as NumPy arrays. Draws go through one jitted function in batches of ``batch_size`` per
device (so memory stays bounded at any number of draws), the batches' draws axis sharded over a
``"draws"`` mesh axis when there are several devices; the progress bar and the checkpoint
advance per chunk of batches, from Python, never from inside ``jit``. Every batch has the same
shapes (the last one is padded with the last draw), so a draw's result does not depend on the
chunk size or the number of devices, and the jitted function is traced once.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import types
from pathlib import Path
from typing import Callable, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from absorbjax import io


class Layout(NamedTuple):
    """How draws are grouped: ``batch_size`` per device per jitted call, ``chunk_size`` per
    progress update and checkpoint file (a multiple of ``batch_size × devices``)."""

    batch_size: int
    chunk_size: int
    devices: int
    mesh: Mesh | None


def make_mesh(mesh: Mesh | None) -> Mesh | None:
    """``mesh`` checked for a ``"draws"`` axis, or one over all devices when there are several."""
    if mesh is not None:
        if "draws" not in mesh.axis_names:
            raise ValueError(f"mesh needs an axis named 'draws', got {mesh.axis_names}")
        return mesh
    if jax.device_count() == 1:
        return None
    return Mesh(np.asarray(jax.devices()), ("draws",))


def memory_budget() -> int:
    """Bytes one batch's largest arrays may take: 32 MiB on CPU (small batches stay in cache and
    run fastest there), an eighth of the device memory on accelerators (large batches fill them)."""
    dev = jax.devices()[0]
    stats = dev.memory_stats() if dev.platform != "cpu" else None
    return stats["bytes_limit"] // 8 if stats and "bytes_limit" in stats else 32 * 2**20


def layout(draws: int, bytes_per_draw: int, *, batch_size=None, chunk_size=None, mesh=None) -> Layout:
    """Batch and chunk sizes for ``draws`` draws.

    The default batch keeps one batch's largest arrays within :func:`memory_budget`. The default
    chunk gives about 20 chunks.
    """
    mesh = make_mesh(mesh)
    ndev = 1 if mesh is None else mesh.shape["draws"]
    if batch_size is None:
        batch_size = int(max(1, min(draws, memory_budget() // max(bytes_per_draw, 1))))
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    unit = int(batch_size) * ndev  # one batch per device
    if chunk_size is None:
        chunk_size = unit * max(1, -(-draws // (unit * 20)))  # at most ~20 chunks
    if not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    return Layout(int(batch_size), int(-(-chunk_size // unit) * unit), ndev, mesh)


def split_key(key) -> tuple[np.ndarray, str | None]:
    """Raw key data and the PRNG implementation's name (``None`` for a legacy uint32 key)."""
    typed = jax.numpy.issubdtype(jax.numpy.asarray(key).dtype, jax.dtypes.prng_key)
    if typed and jax.numpy.shape(key) != ():
        raise ValueError(f"key must be a single PRNG key, got shape {jax.numpy.shape(key)}")
    key_data = np.asarray(jax.random.key_data(key) if typed else key)
    return key_data, (str(jax.random.key_impl(key)) if typed else None)


@functools.lru_cache(maxsize=32)
def compiled(fn: Callable, static: tuple, arity: int, mesh: Mesh | None, impl: str | None):
    """The jitted step: ``fn(*static, key, i, *arrays_i)`` (``arity`` arrays) vmapped over one
    batch of draws per device (``shard_map`` over the ``"draws"`` mesh axis). The base key
    travels as raw key data (``impl`` names a typed key's PRNG; ``None``: a legacy uint32 key).
    Cached on its arguments, so repeated calls with equal settings compile once."""

    def batch(key_data, index, *arrays):
        base = key_data if impl is None else jax.random.wrap_key_data(key_data, impl=impl)
        return jax.vmap(lambda i, *a: fn(*static, base, i, *a))(index, *arrays)

    if mesh is None:
        return jax.jit(batch)
    draws = P("draws")
    specs = (P(),) + (draws,) * (1 + arity)
    return jax.jit(jax.shard_map(batch, mesh=mesh, in_specs=specs, out_specs=draws, check_vma=False))


def fingerprint(record: dict, arrays, key_data: np.ndarray) -> str:
    """SHA-256 of the settings ``record`` (as JSON), every array's shape, dtype and bytes, and the key."""
    h = hashlib.sha256()
    h.update(json.dumps(record, sort_keys=True, default=str).encode())
    for a in jax.tree.leaves(arrays):
        a = np.ascontiguousarray(np.asarray(a))
        h.update(str((a.shape, a.dtype)).encode())
        h.update(a.tobytes())
    h.update(np.ascontiguousarray(key_data).tobytes())
    return h.hexdigest()


def code_identity(fn: Callable) -> str:
    """A SHA-256 of what a callable computes, the same in every process of one Python version.

    A function gives its module, qualified name, code (bytecode, constants, names, nested
    functions' code), defaults and closure values; a ``functools.partial`` its function and bound
    arguments; a wrapper (``jax.jit``'s ``__wrapped__``, ``jax.custom_jvp``'s ``fun``) the wrapped
    function; anything else its type's name. Globals the code calls are named, not hashed. A
    checkpoint's fingerprint includes it (:func:`absorbjax.fit._driver.search`), so a name
    re-registered with another function does not resume from the old function's chunks.

    Examples:
      >>> from absorbjax.fit import _drawmap as drawmap
      >>> drawmap.code_identity(lambda z: z * 2) == drawmap.code_identity(lambda z: z * 2)
      True
      >>> drawmap.code_identity(lambda z: z * 2) == drawmap.code_identity(lambda z: z * 3)
      False
    """
    h = hashlib.sha256()
    _feed(h, fn, set())
    return h.hexdigest()


def _feed(h, obj, seen: set) -> None:
    """Hash ``obj`` into ``h`` for :func:`code_identity` (each object once: ``seen`` ends cycles)."""
    if isinstance(obj, (type(None), bool, int, float, complex, str, bytes)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
        return
    if id(obj) in seen:
        h.update(b"<seen>;")
        return
    seen.add(id(obj))
    if isinstance(obj, (np.ndarray, np.generic)):
        a = np.ascontiguousarray(obj)
        h.update(f"array:{a.dtype}{a.shape};".encode() + a.tobytes())
    elif isinstance(obj, (tuple, list)):
        h.update(f"{type(obj).__name__}[{len(obj)}];".encode())
        for v in obj:
            _feed(h, v, seen)
    elif isinstance(obj, dict):
        h.update(f"dict[{len(obj)}];".encode())
        for k in sorted(obj, key=repr):
            _feed(h, k, seen)
            _feed(h, obj[k], seen)
    elif isinstance(obj, types.CodeType):
        h.update(obj.co_code + repr((obj.co_names, obj.co_varnames, obj.co_freevars)).encode())
        _feed(h, obj.co_consts, seen)
    elif isinstance(obj, types.FunctionType):
        h.update(f"function:{obj.__module__}.{obj.__qualname__};".encode())
        _feed(h, obj.__code__, seen)
        _feed(h, (obj.__defaults__, obj.__kwdefaults__), seen)
        for cell in obj.__closure__ or ():
            try:
                _feed(h, cell.cell_contents, seen)
            except ValueError:  # an empty cell
                h.update(b"<empty>;")
    elif isinstance(obj, functools.partial):
        h.update(b"partial;")
        _feed(h, (obj.func, obj.args, obj.keywords), seen)
    elif callable(inner := getattr(obj, "__wrapped__", None) or getattr(obj, "fun", None)):
        h.update(f"wrapper:{type(obj).__qualname__};".encode())
        _feed(h, inner, seen)
    else:
        kind = type(obj)
        name = getattr(obj, "__qualname__", getattr(obj, "__name__", ""))
        h.update(f"object:{kind.__module__}.{kind.__qualname__}:{getattr(obj, '__module__', '')}.{name};".encode())


def atomic_save(path: Path, arrays: dict) -> None:
    with io.atomic_open(path, "wb") as f:
        np.savez(f, **arrays)


def _open_checkpoint(checkpoint, fp: str, record: dict) -> Path:
    """The checkpoint directory, refusing one written by a different computation."""
    ckpt = Path(checkpoint)
    meta = ckpt / "config.json"
    if meta.exists():
        if json.loads(meta.read_text()).get("fingerprint") != fp:
            raise ValueError(
                f"checkpoint {ckpt} holds a different search (other target, key or settings); use a fresh directory"
            )
    elif jax.process_index() == 0:
        with io.atomic_open(meta) as f:
            json.dump({"fingerprint": fp, "config": record}, f, indent=2, default=str)
    return ckpt


def _to_device(tree, sharding):
    """Host arrays → device arrays laid out by ``sharding`` (the same host values on every
    process when there are several)."""
    if sharding is None:
        return tree
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)
    return jax.tree.map(lambda a: jax.make_array_from_callback(a.shape, sharding, lambda idx, a=a: a[idx]), tree)


def _to_host(tree):
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        tree = multihost_utils.process_allgather(tree, tiled=True)
    return jax.tree.map(np.asarray, tree)


def map_draws(
    fn: Callable,
    static: tuple,
    key,
    arrays: tuple,
    *,
    draws: int,
    layout: Layout,
    record: dict,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = True,
    desc: str = "draws",
) -> dict[str, np.ndarray]:
    """``fn(*static, key, i, *(a[i] for a in arrays))`` for ``i < draws``, stacked.

    Args:
      fn: a module-level (hashable) function returning a flat dict of arrays; ``static``: its
        hashable leading arguments (they key the compile cache).
      key: the base PRNG key (typed or legacy), passed unchanged to every draw.
      arrays: pytrees (or ``None``) with a leading draws axis of length ``draws``.
      layout: from :func:`layout`.
      record: the settings, hashed with ``arrays`` and ``key`` into the checkpoint's fingerprint
        and written beside it.
      checkpoint: directory; finished chunks are written there atomically and a rerun of the
        same computation resumes from them (a directory from another computation is refused).
      progress, desc: a tqdm bar advanced per chunk (process 0 only).

    Returns:
      The outputs with a leading draws axis, as NumPy arrays.
    """
    from absorbjax._progress import tqdm

    key_data, impl = split_key(key)
    host = jax.tree.map(np.asarray, tuple(arrays))
    ckpt = None
    if checkpoint is not None:
        ckpt = _open_checkpoint(checkpoint, fingerprint(record, host, key_data), record)
    mesh = layout.mesh
    sharding = None if mesh is None else NamedSharding(mesh, P("draws"))
    step = compiled(fn, static, len(host), mesh, impl)
    base = key_data if mesh is None else _to_device(key_data, NamedSharding(mesh, P()))
    unit = layout.batch_size * layout.devices
    parts = []
    bar = tqdm(total=draws, desc=desc, unit="draw", disable=not progress or jax.process_index() != 0)
    try:
        for start in range(0, draws, layout.chunk_size):
            stop = min(start + layout.chunk_size, draws)
            path = None if ckpt is None else ckpt / f"chunk_{start:09d}_{stop:09d}.npz"
            if path is not None and path.exists():
                with np.load(path) as z:
                    parts.append(dict(z))
                bar.update(stop - start)
                continue
            outs = []
            for b in range(start, stop, unit):  # dispatched asynchronously, gathered per chunk
                idx = np.minimum(np.arange(b, b + unit), draws - 1)  # pad with the last draw
                args = (idx.astype(np.int32),) + jax.tree.map(lambda a: a[idx], host)
                outs.append(step(base, *_to_device(args, sharding)))
            out = jax.tree.map(lambda *a: np.concatenate(a)[: stop - start], *_to_host(outs))
            if path is not None and jax.process_index() == 0:
                atomic_save(path, out)
            parts.append(out)
            bar.update(stop - start)
    finally:
        bar.close()
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
