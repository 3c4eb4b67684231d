"""Retention by age and by size, applied by a background thread in small transactions.

Deleting in batches of a few thousand rows means a writer waits at most one short batch for the SQLite write lock
(PostgreSQL row locks do not block inserts at all). On PostgreSQL, whose big tables are partitioned by day,
:meth:`Store.prune_before` first drops the whole days before the cutoff (see capstan/store/_partitions.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from capstan.store._store import Store, StoreWriteError

log = logging.getLogger(__name__)

MAX_SIZE_ROUNDS = 20


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Keep at most ``max_age_s`` seconds and ``max_bytes`` bytes of history (None = unlimited)."""

    max_age_s: float | None = 14 * 86400.0
    max_bytes: int | None = None
    batch_rows: int = 5000


def apply_retention(store: Store, policy: RetentionPolicy, now: float) -> int:
    """One retention pass; returns the rows deleted. Size: drop the oldest tenth of the span until under."""
    deleted = 0
    if policy.max_age_s is not None:
        deleted += store.prune_before(now - policy.max_age_s, batch_rows=policy.batch_rows)
    if policy.max_bytes is not None:
        for _ in range(MAX_SIZE_ROUNDS):
            if store.size_bytes() <= policy.max_bytes:
                break
            oldest = store.oldest_observed()
            if oldest is None:
                break
            cutoff = oldest + max(1.0, (now - oldest) / 10)
            n = store.prune_before(cutoff, batch_rows=policy.batch_rows)
            deleted += n
            if n == 0 and cutoff >= now:
                break
    if deleted and store.metrics is not None:
        store.metrics.pruned.inc(deleted)
    return deleted


class RetentionWorker:
    """Runs :func:`apply_retention` every ``interval_s`` on a daemon thread until :meth:`stop`."""

    def __init__(
        self, store: Store, policy: RetentionPolicy, *, interval_s: float = 300.0, clock: Callable[[], float]
    ) -> None:
        self._store = store
        self._policy = policy
        self._interval = interval_s
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.passes = 0
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="capstan-history-retention", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                apply_retention(self._store, self._policy, self._clock())
                self.last_error = None
            except StoreWriteError as exc:
                self.last_error = str(exc)
                log.error("history retention failed: %s", exc)
            self.passes += 1
            self._stop.wait(self._interval)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
