"""Files are untrusted input: the one memory budget every reader checks before it allocates, and
the checks on a path made before any file is opened.

The budget ``B`` (:func:`max_bytes`; 1 GiB by default, ``ABSORBJAX_MAX_BYTES`` or ``absorbjax check
--max-bytes`` for genuinely huge files) bounds

* every single allocation made from a file: one tensor, one zip member inflated (its declared size
  is checked before inflating, and the reader stops at that size), one ONNX external-data range;
* metadata: ``data.pkl``, JSON files (index, ``config.json``), safetensors and GGUF headers, at most
  ``B / 16`` each (64 MiB by default);
* a pickle's objects: the expanded size of any object (the memo's shared references counted every
  time they are used) at most ``B / 256`` nodes (4 Mi by default), nesting at most :data:`MAX_DEPTH`.

A path is stated before it is opened (:func:`regular_file`): a FIFO, a device, a socket or a folder
is named as such and never opened (opening a FIFO for reading blocks).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import stat
import zipfile
from pathlib import Path

DEFAULT_MAX_BYTES = 1 << 30
MAX_DEPTH = 64
HINT = "if the file is genuine, raise the budget with --max-bytes N (ABSORBJAX_MAX_BYTES)"


_BUDGET: contextvars.ContextVar[int | None] = contextvars.ContextVar("absorbjax_max_bytes", default=None)


@contextlib.contextmanager
def budget(n: int | None):
    """Within the block :func:`max_bytes` is ``n`` (``None``: unchanged); ``absorbjax check
    --max-bytes N`` reads its file inside one, so nothing outlives the command."""
    token = None if n is None else _BUDGET.set(int(n))
    try:
        yield
    finally:
        if token is not None:
            _BUDGET.reset(token)


def max_bytes() -> int:
    """The budget ``B`` in bytes: the enclosing :func:`budget`, else ``ABSORBJAX_MAX_BYTES`` when
    set, else :data:`DEFAULT_MAX_BYTES`."""
    if (n := _BUDGET.get()) is not None:
        return n
    raw = os.environ.get("ABSORBJAX_MAX_BYTES", "")
    if not raw:
        return DEFAULT_MAX_BYTES
    if not raw.isdigit() or int(raw) < 1 << 20:
        raise ValueError(f"ABSORBJAX_MAX_BYTES must be a number of bytes ≥ 1048576, got {raw!r}")
    return int(raw)


def metadata_bytes() -> int:
    """The most bytes of a header, pickle or JSON file read: ``B / 16``."""
    return max_bytes() // 16


def pickle_nodes() -> int:
    """The most objects a pickle's object may expand to: ``B / 256``."""
    return max_bytes() // 256


def over(what: str, size: int, limit: int) -> ValueError:
    """The one-line refusal for ``size`` bytes of ``what`` above ``limit``."""
    return ValueError(f"{what} would take {size:,} bytes, over the budget of {limit:,}; {HINT}")


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def regular_file(path: Path, what: str = "file") -> int:
    """The size of ``path`` after ``os.stat`` (never opening it); ``ValueError`` naming what it is
    when it is not a regular file (FIFO, device, socket, folder) or does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such {what}") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot stat the {what} ({err.strerror})") from None
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise ValueError(f"{path}: is {kind}, not a checkpoint {what}; pass a regular file")
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path}: is not a regular {what}")
    return st.st_size


def unique_keys(pairs):
    """``json.loads``' ``object_pairs_hook``: the object as a dict, or ``ValueError`` when a name
    appears twice (JSON itself would keep the last one silently)."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the name {k[:80]!r} appears twice; refusing to choose one")
        out[k] = v
    return out


def read_json(path: Path):
    """``path`` parsed as JSON: a regular file of at most ``B / 16`` bytes, no duplicate key in
    any object, nesting within the interpreter's recursion limit; else ``ValueError``."""
    size, limit = regular_file(path, "JSON file"), metadata_bytes()
    if size > limit:
        raise over(f"{path.name}", size, limit)
    try:
        return json.loads(path.read_bytes(), object_pairs_hook=unique_keys)
    except RecursionError:
        raise ValueError(f"{path.name} is nested too deeply to be a model's JSON") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path.name} is not UTF-8 text") from None


def array_bytes(shape, itemsize: int, what: str) -> int:
    """The bytes of an array of ``shape`` (dimensions ≥ 0) and ``itemsize``, checked against ``B``."""
    count = 1
    for s in shape:
        if not isinstance(s, int) or s < 0:
            raise ValueError(f"{what} has an invalid shape {tuple(shape)!r:.120}")
        count *= s
    size = count * itemsize
    if size > max_bytes():
        raise over(what, size, max_bytes())
    return size


def zip_members(zf: zipfile.ZipFile, what: str) -> dict[str, zipfile.ZipInfo]:
    """name → member of a zip whose names are unique, none encrypted, each stored or deflated
    (the methods ``torch.save`` and ``numpy.savez(_compressed)`` write); else ``ValueError``."""
    out: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        if info.filename in out:
            raise ValueError(f"{what} holds two members named {info.filename[:80]!r}; refusing to choose one")
        if info.flag_bits & 0x1:
            raise ValueError(f"{what} member {info.filename[:80]!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ValueError(
                f"{what} member {info.filename[:80]!r} uses compression method {info.compress_type}, "
                "not stored or deflated"
            )
        out[info.filename] = info
    return out


def read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int | None = None) -> bytes:
    """The bytes of one zip member: its declared size checked against ``limit`` (``B``) before
    inflating, and never more than that size inflated; a bad CRC is a ``ValueError``."""
    limit = max_bytes() if limit is None else limit
    if info.file_size > limit:
        raise over(f"zip member {info.filename[:80]!r} (inflated)", info.file_size, limit)
    try:
        with zf.open(info) as f:
            raw = f.read(info.file_size)
    except zipfile.BadZipFile as err:
        raise ValueError(f"zip member {info.filename[:80]!r} is damaged ({err})") from None
    if len(raw) != info.file_size:
        raise ValueError(f"zip member {info.filename[:80]!r} is shorter than its declared size")
    return raw


def inside(folder: Path, name: str, what: str) -> Path:
    """``folder / name`` for a file another file names (a shard, ONNX external data): a relative
    name without ``..``, whose resolved path (symlinks followed) stays inside ``folder`` — or, for a
    Hugging Face cache snapshot (``…/snapshots/<rev>/``), inside that repository's ``blobs/`` —
    and is a regular file; else ``ValueError``."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError(f"{what}: an empty or invalid file name")
    rel = Path(name)
    if rel.is_absolute() or name.startswith(("/", "\\")) or ".." in rel.parts:
        raise ValueError(f"{what}: {name[:120]!r} is not a plain relative name inside {folder}; refusing to read it")
    base = folder.resolve()
    target = (folder / rel).resolve()
    roots = [base]
    if base.parent.name == "snapshots":
        roots.append(base.parent.parent / "blobs")
    if not any(target == r or r in target.parents for r in roots):
        raise ValueError(f"{what}: {name[:120]!r} resolves to {target}, outside {folder}; refusing to read it")
    regular_file(folder / rel, what)
    return folder / rel
