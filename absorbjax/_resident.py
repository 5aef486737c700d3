"""Reading memory-mapped arrays in windows without keeping them resident: :func:`release`.

A memory map is not an allocation, but every page a read touches stays in the process's resident set
until the map is closed: reading a 4 GB tensor block by block leaves 4 GB resident. After a window
has been copied out, :func:`release` tells the kernel that this process no longer needs its pages
(``madvise(MADV_DONTNEED)``); the file's bytes stay in the page cache, and a later read maps them
again. The readers of ``condition`` (``_reader.as_float64``) and ``absorbjax.verify`` call it.
"""

from __future__ import annotations

import mmap

import numpy as np
from numpy.lib.array_utils import byte_bounds

_PAGE = mmap.PAGESIZE
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)  # Linux and the BSDs; elsewhere nothing is released


def _mapping(x) -> mmap.mmap | None:
    """The ``mmap.mmap`` under ``x`` (a ``np.memmap``, a view of one, or an array over a map), or ``None``."""
    for _ in range(32):  # views of views: a short chain
        if isinstance(x, mmap.mmap):
            return x
        x = getattr(x, "_mmap", None) or getattr(x, "base", None)
        if x is None:
            return None
    return None


def mapped(x) -> bool:
    """Whether ``x`` is (a view of) a memory-mapped array."""
    return isinstance(x, np.ndarray) and _mapping(x) is not None


def release(x) -> None:
    """Drop the pages under ``x`` (a memory-mapped array or a view of one, already read) from this
    process's resident set; nothing for arrays that are not mapped, or where ``madvise`` is missing.
    The range is widened to whole pages, which may drop pages of neighbouring data too: they are read
    again from the page cache when next touched. A window of columns of a row-major matrix spans every
    row, so it is released only when it completes a page in its first row (one ``madvise`` over the
    span per page of columns, not per window)."""
    if _DONTNEED is None or not isinstance(x, np.ndarray) or x.size == 0:
        return
    mm = _mapping(x)
    if mm is None or mm.closed:
        return
    try:
        origin = np.frombuffer(mm, np.uint8).__array_interface__["data"][0]
    except (TypeError, ValueError, BufferError):
        return
    low, high = byte_bounds(x)
    if x.ndim == 2 and not (x.flags.c_contiguous or x.flags.f_contiguous) and x.strides[1] == x.itemsize:
        # a window of columns of a row-major matrix
        row = x.shape[1] * x.itemsize  # its bytes in each row: release once a page of them is done
        if (low - origin) // _PAGE == (low - origin + row) // _PAGE:
            return  # the window ends inside the page it began in: the next windows need that page
    start = max((low - origin) // _PAGE * _PAGE, 0)
    end = min(-(-(high - origin) // _PAGE) * _PAGE, len(mm))
    if end > start:
        mm.madvise(_DONTNEED, start, end - start)
