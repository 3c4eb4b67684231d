"""Restart records, the writer's side: the restart watcher's records and the last-seen restart count of every
container, which it compares with after Capstan restarts (readers list the records through the history)."""

from __future__ import annotations

from sqlalchemy import select

from capstan.store import _schema as s
from capstan.store._batchwrite import BatchWrites
from capstan.store._database import Database
from capstan.store._models import Batch, RestartCount, WriteResult


class RestartRecords:
    """Writes restart records and last-seen counts (through the store's one batch write path) and reads the
    counts back."""

    def __init__(self, db: Database, writes: BatchWrites) -> None:
        self._db = db
        self._writes = writes

    def write(self, batch: Batch) -> WriteResult:
        """Write the restarts and restart counts of ``batch`` in ONE transaction (idempotent); a batch holding
        other records is a programming error (ValueError): those are the history's to write."""
        history = (
            batch.object_changes,
            batch.state_puts,
            batch.state_deletes,
            batch.kind_cursors,
            batch.kube_events,
            batch.engine_entries,
            batch.engine_cursors,
            batch.gaps,
        )
        if any(history):
            raise ValueError("a restart-record batch holds only restarts and restart counts")
        return self._writes.write(batch)

    def restart_counts(self) -> dict[tuple[str, str], RestartCount]:
        """The last-seen restart count of every container, keyed by (pod uid, container)."""
        with self._db.read_sql_engine.begin() as conn:
            rows = conn.execute(select(s.restart_counts)).all()
        return {
            (r.pod_uid, r.container): RestartCount(
                r.pod_uid, r.container, r.namespace, r.pod, r.restart_count
            )
            for r in rows
        }
