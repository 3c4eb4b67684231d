"""Process-level settings for Capstan's long-running commands (called at command start, never at import).

``limit_malloc_arenas``: glibc gives every thread that allocates its own malloc arena (up to 8 per core), and
memory freed in one is not reused by another, so a Python service whose worker threads (SQLite writes, Slack
sends) allocate in turn keeps several partly-empty arenas resident. Capping the arenas is what
``MALLOC_ARENA_MAX=2`` in a container's environment does; this makes it the default for the process without
relying on the environment. It must run before the first worker thread starts. No-op off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_ARENA_MAX = -8  # from glibc's malloc.h


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas for this process; True if applied."""
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    applied = bool(mallopt(_M_ARENA_MAX, max(1, arenas)))
    if not applied:
        log.debug("mallopt(M_ARENA_MAX) was refused; keeping the default arenas")
    return applied
