"""How the process heap treats large buffers during CPU inference (Linux glibc).

Why: glibc serves allocations above its mmap threshold (128 KiB) with their own mappings, returned to the
system on free, but after a large mapped buffer is freed it raises that threshold to the buffer's size (up to
32 MiB). From then on the few-hundred-KiB buffers of every decoded token (a 1.7B's logits are 0.6 MiB) come
from the heap, which they fragment and keep grown: +16 MiB resident after one 128 + 64-token generation of the
1.7B on the CPU, and peak RSS is one of the figures users compare with llama.cpp. Fixing the threshold turns
that adjustment off. Elsewhere (macOS, Windows, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import sys

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
DEFAULT_THRESHOLD = 128 * 1024  # glibc's own starting value


def keep_large_buffers_out_of_heap(threshold: int = DEFAULT_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes for this process; True where that took effect."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # no mallopt: not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, int(threshold)) == 1
