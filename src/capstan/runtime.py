"""Process-level settings for Capstan's long-running commands (called at command start, never at import).

``limit_malloc_arenas``: glibc gives every thread that allocates its own malloc arena (up to 8 per core), and
memory freed in one is not reused by another, so a Python service whose worker threads (SQLite writes, Slack
sends) allocate in turn keeps several partly-empty arenas resident. Capping the arenas is what
``MALLOC_ARENA_MAX=2`` in a container's environment does; this makes it the default for the process without
relying on the environment. It must run before the first worker thread starts. No-op off glibc.

``fix_mmap_threshold``: asyncio reads every socket into a fresh 256 KiB buffer and shrinks it to what arrived.
Once glibc has raised its dynamic mmap threshold above that size (it does after freeing a larger mmapped block),
those buffers come from the heap, and shrinking them in place leaves holes that the heap keeps: an HTTP server
with hundreds of busy connections grows its RSS steadily while its Python objects stay the same (the gateway
under 200 streaming clients: +10 MiB per 12,000 requests, traced allocations flat at 6 MiB; with the threshold
fixed at 128 KiB, +0.5 MiB). A fixed threshold, as ``MALLOC_MMAP_THRESHOLD_=131072`` in the environment does,
gives such buffers their own mapping, returned to the system when freed. No-op off glibc.

``shorten_gil_switch_interval``: the recorder's writer thread waits on the database and, each time an answer
arrives, needs the GIL back from the main thread, which is busy decoding and diffing the next changes and gives
the GIL up only when CPython's switch interval (5 ms) asks it to. A PostgreSQL batch is about ten round trips, so
the writer lost up to 50 ms a batch waiting for its own thread's turn, and the whole path was the writer's: in
process on PostgreSQL, 8,334 changes/s at 5 ms against 10,052 at 0.5 ms (means of three interleaved runs each,
every pair won by 0.5 ms; a throwaway script running bench/_history_e2e.py, 100,000 changes, at each interval). SQLite, whose writer waits less, moved within
the noise.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

_M_ARENA_MAX = -8  # from glibc's malloc.h
_M_MMAP_THRESHOLD = -3


def _mallopt(param: int, value: int, name: str) -> bool:
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    try:
        libc = ctypes.CDLL(libc_name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = bool(mallopt(param, value))
    if not applied:
        log.debug("mallopt(%s) was refused; keeping glibc's default", name)
    return applied


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas for this process; True if applied."""
    return _mallopt(_M_ARENA_MAX, max(1, arenas), "M_ARENA_MAX")


def fix_mmap_threshold(threshold: int = 128 * 1024) -> bool:
    """Fix glibc's mmap threshold (allocations at least this big get their own mapping); True if applied."""
    return _mallopt(_M_MMAP_THRESHOLD, threshold, "M_MMAP_THRESHOLD")


def shorten_gil_switch_interval(seconds: float = 0.0005) -> None:
    """Make a thread that holds the GIL hand it over after ``seconds`` (CPython's default is 5 ms) when another
    thread waits for it: for a process whose I/O thread answers a busy CPU thread (``capstan record``)."""
    sys.setswitchinterval(seconds)
