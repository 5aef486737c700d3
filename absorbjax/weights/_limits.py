"""Files are untrusted input: the one memory budget every reader checks before it allocates, and
the checks on a path made before any file is opened.

The budget ``B`` (:func:`max_bytes`; 1 GiB by default, ``ABSORBJAX_MAX_BYTES`` or ``absorbjax check
--max-bytes`` for genuinely huge files) bounds

* every single allocation made from a file: one tensor, one zip member inflated (its declared size
  is checked before inflating, and the reader stops at that size), one ONNX external-data range;
* metadata: ``data.pkl``, JSON files (index, ``config.json``), safetensors and GGUF headers, at most
  ``B / 16`` each (64 MiB by default);
* a pickle's objects: the expanded size of any object (the memo's shared references counted every
  time they are used) at most ``B / 256`` nodes (4 Mi by default), nesting at most :data:`MAX_DEPTH`;
* counts, which cost time and Python objects whatever their bytes: at most ``B / 4096`` tensors in
  a checkpoint (262,144 at 1 GiB; :func:`max_tensors`), checked on the count a header declares
  before an object is built for any tensor (safetensors, GGUF, CTranslate2, zip archives, an index),
  and at most ``B / 16384`` MLP blocks (65,536; :func:`max_blocks`), checked before a block is built.

A path is stated before it is opened (:func:`regular_file`): a FIFO, a device, a socket or a folder
is named as such and never opened (opening a FIFO for reading blocks).

Every file is contained before it is opened: a file another file names (a shard, ONNX external data,
:func:`inside`) and the checkpoint file and ``config.json`` of a model folder (:func:`contained`)
must resolve, symlinks followed, inside that folder, or, for a folder inside a Hugging Face cache
snapshot (``models--ORG--NAME/snapshots/REV/``), inside that repository's ``blobs/`` and nowhere
else (:func:`roots`); a link outside (another model's file, ``/proc/self/environ``) is refused naming
the link, never read. The names of an index are canonicalised (:func:`relative_name`,
:func:`file_id`), so that a file is read once however often, and however, it is spelled; an index
names at most :data:`MAX_SHARD_FILES` files.

Memory maps (safetensors tensors, unquantised GGUF floats) are not allocations: the pages they make
resident are the file's own bytes, and every reader of a map (the finite check, the decision, the
distance's search, ``absorbjax.verify``) reads it in windows and releases each window's pages once
copied (:func:`absorbjax._resident.release`), so about one window stays resident, not the map. A sparse file's holes are the exception, pages that are on no
disk, so the holes under the mapped tensors of one checkpoint count against ``B``
(:func:`holes`). Tensors that are read rather than mapped are read in bounded windows
(:func:`read_range`), a file that ends early (truncated while being read) being a one-line
``ValueError``.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import stat
import struct
import zipfile
from pathlib import Path

from absorbjax.weights._conventions import printable

DEFAULT_MAX_BYTES = 1 << 30
MAX_DEPTH = 64
MAX_SHARD_FILES = 10_000  # distinct file names in one index (the largest published models have a few hundred)
WINDOW = 1 << 26  # the most bytes one read of a tensor asks for (read_range)
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


def max_tensors() -> int:
    """The most tensors (or zip members, index entries) one checkpoint may hold: ``B / 4096``."""
    return max_bytes() // 4096


def max_blocks() -> int:
    """The most MLP blocks one checkpoint may hold: ``B / 16384`` (each is read and decided)."""
    return max_bytes() // 16384


def count(what: str, n: int, cap: int | None = None) -> int:
    """``n``, a count of ``what`` that a file declares or holds, when it is at most ``cap``
    (:func:`max_tensors` by default); else the one-line refusal, made before anything is built for
    them, which does not print ``n`` (a raw number of the file)."""
    cap = max_tensors() if cap is None else cap
    if n > cap:
        raise ValueError(f"{what}: more than {cap:,}, the most the budget of {max_bytes():,} bytes allows; {HINT}")
    return n


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


ZIP_EXTRA = 64  # members of an archive beside its tensors (torch: data.pkl, version, byteorder, …)
ZIP_ENTRY_BYTES = 16 * zipfile.sizeCentralDir  # central-directory bytes allowed a member (46 fixed, the rest its name)


def zip_open(path) -> zipfile.ZipFile:
    """``zipfile.ZipFile(path)`` once the number of members its end record declares (ZIP64 included)
    is within :func:`max_tensors` (plus :data:`ZIP_EXTRA`), and so is its central directory's size
    over :data:`ZIP_ENTRY_BYTES`: ``zipfile`` builds an object for every entry of the directory when
    it opens an archive, reading entries until the directory's bytes end, whatever the count says
    (an entry is at least 46 bytes, so at most 16 times the cap are parsed)."""
    end = None
    with contextlib.suppress(AttributeError, IndexError, OSError, struct.error):
        with open(path, "rb") as f:
            end = zipfile._EndRecData(f)  # the stdlib's own reading of the end record
    if end:
        cap = max_tensors() + ZIP_EXTRA
        count("the zip archive's members", end[zipfile._ECD_ENTRIES_TOTAL], cap)
        count("the zip archive's members (by its directory's size)", -(-end[zipfile._ECD_SIZE] // ZIP_ENTRY_BYTES), cap)
    return zipfile.ZipFile(path)


class ZipReader:
    """The members of one zip archive read through one ``zipfile.ZipFile`` (:func:`zip_open`), opened
    on first use and kept while the file is the same (device, inode, size, modification time): opening
    an archive parses its whole central directory, so opening it for each tensor made reading the
    ``k`` tensors of an archive ``O(k²)`` (6,000 1 × 1 blocks of an ``.npz``: 70 s per 1,000)."""

    def __init__(self, path):
        self.path, self._zf, self._id = path, None, None

    def read(self, member: str) -> bytes:
        """The bytes of ``member`` (:func:`read_member`: within the budget, CRC checked)."""
        st = os.stat(self.path)
        ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if self._zf is None or ident != self._id:
            if self._zf is not None:
                self._zf.close()
            self._zf, self._id = zip_open(self.path), ident
        try:
            info = self._zf.getinfo(member)
        except KeyError:
            raise ValueError(f"the archive no longer holds {member[:80]!r}") from None
        return read_member(self._zf, info)


def zip_members(zf: zipfile.ZipFile, what: str) -> dict[str, zipfile.ZipInfo]:
    """name → member of a zip whose names are unique, none encrypted, each stored or deflated
    (the methods ``torch.save`` and ``numpy.savez(_compressed)`` write), at most :func:`max_tensors`
    (plus :data:`ZIP_EXTRA`) of them; else ``ValueError``."""
    count(f"{what}'s members", len(zf.filelist), max_tensors() + ZIP_EXTRA)
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


def relative_name(name, what: str) -> str:
    """``name`` (a file another file names) as a normalised relative path (``./F``, ``.//./F`` →
    ``F``), checked as text only: not empty, no NUL, not absolute, no ``..``; else ``ValueError``."""
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError(f"{what}: an empty or invalid file name")
    rel = Path(name)
    if rel.is_absolute() or name.startswith(("/", "\\")) or ".." in rel.parts:
        raise ValueError(f"{what}: {name[:120]!r} is not a plain relative name; refusing to read it")
    norm = os.path.normpath(name)
    if norm in (".", ""):
        raise ValueError(f"{what}: {name[:120]!r} names the folder, not a file")
    return norm


def _real(path) -> Path:
    return Path(os.path.realpath(path))


def snapshot_blobs(real_folder: Path) -> Path | None:
    """``<repo>/blobs`` when ``real_folder`` (symlinks resolved) lies in a Hugging Face cache
    snapshot ``<repo>/snapshots/<rev>/…`` of a repository folder ``models--…``, ``datasets--…`` or
    ``spaces--…``; else ``None``."""
    parts = real_folder.parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "snapshots" and parts[i - 1].startswith(("models--", "datasets--", "spaces--")):
            return Path(*parts[:i]) / "blobs"
    return None


def roots(folder: Path) -> tuple[Path, ...]:
    """Where the files of the model folder ``folder`` may resolve: the folder (resolved), and in a
    Hugging Face snapshot its repository's ``blobs/`` (taken literally: a ``blobs`` link leads
    nowhere)."""
    base = _real(folder)
    blobs = snapshot_blobs(base)
    return (base,) if blobs is None else (base, blobs)


def _within(target: Path, places: tuple[Path, ...]) -> bool:
    return any(target == r or r in target.parents for r in places)


def contained(folder: Path, path: Path, what: str, hint: str = "") -> Path:
    """``path``, a file of the model folder ``folder`` (the checkpoint file a folder holds, its
    ``config.json``), when it resolves (symlinks followed) inside :func:`roots` of ``folder``; else
    a one-line ``ValueError`` naming ``path`` and where it leads. Nothing is opened or read."""
    target, places = _real(path), roots(folder)
    if not _within(target, places):
        where = f"{folder}" + (" or its repository's blobs/" if len(places) > 1 else "")
        raise ValueError(
            printable(
                f"{path}: the {what} resolves to {str(target)[:200]!r}, outside {where}; refusing to read it{hint}"
            )
        )
    return path


def inside(folder: Path, name: str, what: str) -> Path:
    """``folder / name`` for a file another file names (a shard, ONNX external data): a plain
    relative name (:func:`relative_name`) whose resolved path (symlinks followed) stays inside
    ``folder`` — or, for a Hugging Face cache snapshot (``…/snapshots/<rev>/``), inside that
    repository's ``blobs/`` — and is a regular file; else ``ValueError``."""
    norm = relative_name(name, what)
    path = folder / norm
    target = _real(path)
    if not _within(target, roots(folder)):
        raise ValueError(
            printable(
                f"{what}: {name[:120]!r} resolves to {str(target)[:200]!r}, outside {folder}; refusing to read it"
            )
        )
    regular_file(path, what)
    return path


def file_id(path: Path) -> tuple[int, int]:
    """``(device, inode)`` of the file ``path`` leads to: two spellings of one file have one id."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def holes(path, start: int, end: int, cap: int) -> int:
    """Bytes of ``[start, end)`` of the file that are holes (ranges of a sparse file with no data on
    disk, whose pages a memory map makes resident from nothing), found with ``SEEK_DATA`` /
    ``SEEK_HOLE`` and counted until ``cap`` is passed; 0 where the system cannot say."""
    if not hasattr(os, "SEEK_DATA"):
        return 0
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        pos, out = start, 0
        while pos < end and out <= cap:
            try:
                data = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as err:  # ENXIO: a hole from pos to the end of the file
                return out + (end - pos if err.errno == errno.ENXIO else 0)
            out += min(data, end) - pos
            if data >= end:
                break
            pos = os.lseek(fd, data, os.SEEK_HOLE)
        return out
    finally:
        os.close(fd)


def read_range(path, offset: int, nbytes: int, what: str) -> bytearray:
    """``nbytes`` bytes of the file from ``offset``, read into one buffer in windows of at most
    :data:`WINDOW` bytes (never a memory map: a file truncated while it is read is a short read and
    a one-line ``ValueError``, not ``SIGBUS``). The caller checks ``nbytes`` against the budget."""
    out = bytearray(nbytes)
    view = memoryview(out)
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        pos = 0
        while pos < nbytes:
            got = f.readinto(view[pos : pos + WINDOW])
            if not got:
                raise ValueError(f"{what}: the file ends {nbytes - pos:,} bytes before the data does (truncated?)")
            pos += got
    return out
