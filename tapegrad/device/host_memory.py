"""Keep large host arrays in the malloc heap instead of fresh mmaps.

glibc serves every allocation above 128 KiB-32 MiB (its adaptive mmap
threshold) with a new mmap and returns it to the kernel on free, so every
large temporary of every training step page-faults again: on the conv layers
of the benchmarks that cost as much as the GEMMs. Raising the mmap and trim
thresholds makes freed blocks reusable, which is what PyTorch's CPU caching
allocator achieves. The cost: the heap does not shrink back after a peak.

Applied once at import on Linux with glibc; set ``TAPEGRAD_KEEP_MALLOC=1``
to leave the process's malloc settings alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_applied = False


def tune_malloc(mmap_threshold: int = 1 << 30, trim_threshold: int = 1 << 30) -> bool:
    """Raise glibc's mmap/trim thresholds; True if applied."""
    global _applied
    if _applied or not sys.platform.startswith("linux"):
        return _applied
    if os.environ.get("TAPEGRAD_KEEP_MALLOC"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    # glibc caps the mmap threshold at HEAP_MAX (32 MiB on 64-bit) and refuses
    # larger values; try the request first, then the cap
    ok = bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) or bool(
        mallopt(_M_MMAP_THRESHOLD, 32 * 1024 * 1024))
    ok = bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold)) and ok
    _applied = ok
    return ok
