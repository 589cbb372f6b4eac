"""The C allocator of the router process, kept from handing megabytes back to the kernel.

Every request brings ~1 MB of body: the event loop reads it in pieces of up to 256 KiB,
the pieces are joined, the data URLs cut out and put back, and the arm payload written.
Each of those buffers is a ``malloc`` above glibc's thresholds: with its defaults a
buffer that large is either ``mmap``-ed and ``munmap``-ed (128 KiB threshold, raised
only as far as the largest buffer freed so far) or, freed at the top of the heap, given
back by ``brk`` once 128 KiB lie free there. Either way the next request maps the same
pages again and the kernel zeroes each of them on its first touch. Measured on a bare
asyncio server reading 1 MB POSTs (``benchmarks/router_overhead.md``): 1.7-2.0 ms of CPU
per request, 1.5 of it in the kernel, against 0.25 ms once freed memory stays in the
heap. The router keeps up to ``TRIM_THRESHOLD_BYTES`` free in the heap instead (two
bodies at the 32 MiB default limit, 64 of the 1 MB requests this was measured with),
and allocates below ``MMAP_THRESHOLD_BYTES`` from the heap, so its pages are reused.

Only glibc has ``mallopt`` with these parameters; on any other C library (musl in an
Alpine image, macOS) this is a no-op and says so in the log.
"""

from __future__ import annotations

import ctypes
import logging
import platform

log = logging.getLogger(__name__)

# glibc's malloc.h parameter numbers.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

TRIM_THRESHOLD_BYTES = 64 << 20
# glibc's ceiling for this parameter on 64-bit hosts (half its 64 MiB heap size).
MMAP_THRESHOLD_BYTES = 32 << 20


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds for this process; ``False`` where the C
    library is not glibc or refused a value (then the defaults stay, nothing else
    changes)."""
    if platform.libc_ver()[0] != "glibc":
        log.info("allocator: C library is not glibc; its defaults stay")
        return False
    libc = ctypes.CDLL(None)
    settings = ((M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES), (M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    applied = all(libc.mallopt(param, value) == 1 for param, value in settings)
    if not applied:
        log.warning("allocator: glibc refused a threshold; its defaults stay in part")
    return applied
