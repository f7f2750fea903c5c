"""Drop pages of a read-only file mapping once a tensor has been copied out of it.

Why: converting streams a multi-GB source through a memory map; without this every page read
stays in the process's resident set until the end (harmless to the OS, alarming in a task
manager and in peak-RSS measurements). After ``release`` the pages are re-read from the file if
touched again, so this is only ever an optimisation.
"""

from __future__ import annotations

import mmap


def release(mm: mmap.mmap | None, offset: int, nbytes: int) -> None:
    """``madvise(MADV_DONTNEED)`` the whole pages inside ``[offset, offset + nbytes)`` (best effort)."""
    advice = getattr(mmap, "MADV_DONTNEED", None)
    if mm is None or advice is None or nbytes <= 0:
        return
    page = mmap.PAGESIZE
    start = (offset + page - 1) // page * page
    end = (offset + nbytes) // page * page
    if end > start:
        try:
            mm.madvise(advice, start, end - start)
        except (OSError, ValueError):
            pass
