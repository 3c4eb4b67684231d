"""Batched commits: collect small batches from a recorder and write them as one transaction when big or old enough.

Batching is what makes ingest fast (one fsync per few thousand records); flushing on age bounds how long a record
waits. The recorder must call :meth:`BatchWriter.flush` before it acknowledges anything it cannot re-read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from capstan.store._history import HistoryWriter
from capstan.store._models import Batch, WriteResult


class BatchWriter:
    """Accumulates :class:`Batch` objects and writes them through one :meth:`HistoryWriter.write` call."""

    def __init__(
        self,
        store: HistoryWriter,
        *,
        max_rows: int = 2000,
        max_delay_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._max_rows = max_rows
        self._max_delay = max_delay_s
        self._clock = clock
        self._pending = Batch()
        self._since: float | None = None
        self._lock = threading.Lock()

    def add(self, batch: Batch) -> WriteResult | None:
        """Queue ``batch``; writes (and returns the result) when the queue reaches ``max_rows`` or is overdue."""
        with self._lock:
            if self._since is None:
                self._since = self._clock()
            self._pending.extend(batch)
            if self._pending.size() < self._max_rows and self._clock() - self._since < self._max_delay:
                return None
        return self.flush()

    def due(self) -> bool:
        with self._lock:
            return self._since is not None and self._clock() - self._since >= self._max_delay

    def pending_rows(self) -> int:
        with self._lock:
            return self._pending.size()

    def flush(self) -> WriteResult:
        """Write everything queued now (no-op when empty). On failure the queue is kept and the error raised."""
        with self._lock:
            batch = self._pending
            if batch.is_empty():
                self._since = None
                return WriteResult({})
            result = self._store.write(batch)
            self._pending = Batch()
            self._since = None
            return result
