"""Retention by age and by size, applied by a background thread in small transactions.

Deleting in batches of a few thousand rows means a writer waits at most one short batch for the SQLite write lock
(PostgreSQL row locks do not block inserts at all). On PostgreSQL, whose big tables are partitioned by day,
:meth:`Retention.prune_before` first drops the whole days before the cutoff (see capstan/store/_partitions.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, or_, select, text
from sqlalchemy.exc import DBAPIError, OperationalError

from capstan.store import _schema as s
from capstan.store._database import Database, StoreWriteError
from capstan.store._metrics import HistoryMetrics
from capstan.store._models import from_us, to_us
from capstan.store._partitions import PARTITIONED, drop_partitions_before, list_partitions, trim_keys_before

log = logging.getLogger(__name__)

MAX_SIZE_ROUNDS = 20


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """Keep at most ``max_age_s`` seconds and ``max_bytes`` bytes of history (None = unlimited)."""

    max_age_s: float | None = 14 * 86400.0
    max_bytes: int | None = None
    batch_rows: int = 5000


class Retention:
    """Deletes old history of one database in small transactions, and says how big and how old it is."""

    def __init__(self, db: Database, *, metrics: HistoryMetrics | None = None) -> None:
        self._db = db
        self.metrics = metrics

    def size_bytes(self) -> int:
        """Bytes the data occupies (SQLite: used pages; PostgreSQL: the database size)."""
        with self._db.read_sql_engine.begin() as conn:
            if self._db.dialect == "sqlite":
                pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
                free = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
                size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
                return int((pages - free) * size)
            return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())

    def oldest_observed(self) -> float | None:
        with self._db.read_sql_engine.begin() as conn:
            values = [
                conn.execute(select(func.min(col))).scalar()
                for col in (
                    s.object_changes.c.observed_at,
                    s.kube_events.c.observed_at,
                    s.engine_entries.c.observed_at,
                    s.gaps.c.observed_at,
                )
            ]
        present = [v for v in values if v is not None]
        return from_us(min(present)) if present else None

    def prune_before(self, cutoff: float, *, batch_rows: int = 5000, max_batches: int = 10_000) -> int:
        """Delete history observed before ``cutoff`` in small transactions (writers wait at most one batch).

        Object changes keep, per object, the newest snapshot before the cutoff and everything after it, so every
        version after the cutoff can still be rebuilt; objects deleted before the cutoff go entirely.
        """
        cut = to_us(cutoff)
        total = self._drop_partitions(cut, batch_rows, max_batches) if self._db.partitions is not None else 0
        oc = s.object_changes
        o2 = oc.alias("o2")
        keep_from = (
            select(func.max(o2.c.version_seq))
            .where(
                o2.c.source == oc.c.source,
                o2.c.uid == oc.c.uid,
                o2.c.observed_at < cut,
                o2.c.snapshot.is_not(None),
            )
            .scalar_subquery()
        )
        o3 = oc.alias("o3")
        deleted_before = (
            select(o3.c.id)
            .where(
                o3.c.source == oc.c.source,
                o3.c.uid == oc.c.uid,
                o3.c.change_type == "deleted",
                o3.c.observed_at < cut,
            )
            .exists()
        )
        victims = select(oc.c.id).where(
            oc.c.observed_at < cut, or_(oc.c.version_seq < keep_from, deleted_before)
        )
        plans: list[tuple[Any, Any]] = [(oc, victims)]
        for tbl in (s.kube_events, s.engine_entries, s.gaps, s.restarts):
            plans.append((tbl, select(tbl.c.id).where(tbl.c.observed_at < cut)))
        plans.append(
            (
                s.outbox,
                select(s.outbox.c.id).where(s.outbox.c.state != "pending", s.outbox.c.updated_at < cut),
            )
        )
        with self._db.writing() as conn:  # a handful of rows per workload: one statement
            result = conn.execute(delete(s.notify_threads).where(s.notify_threads.c.created_at < cut))
            total += max(0, int(result.rowcount or 0))
        for tbl, ids_q in plans:
            for _ in range(max_batches):
                with self._db.writing() as conn:
                    ids = [r[0] for r in conn.execute(ids_q.limit(batch_rows))]
                    if ids:
                        conn.execute(delete(tbl).where(tbl.c.id.in_(ids)))
                total += len(ids)
                if len(ids) < batch_rows:
                    break
        return total

    def _drop_partitions(self, cut: int, batch_rows: int, max_batches: int) -> int:
        """PostgreSQL: drop the day partitions wholly before ``cut`` (keeping what later versions need) and trim
        the key tables; the rest before ``cut`` is left to the row-by-row pass. Not under the process's write lock:
        PostgreSQL's own locks let this process's writers go on into the current days meanwhile."""
        assert self._db.partitions is not None
        total = 0
        try:
            for table in PARTITIONED:
                with self._db.write_sql_engine.begin() as conn:
                    total += drop_partitions_before(conn, table, cut)
                for _ in range(max_batches):
                    with self._db.write_sql_engine.begin() as conn:
                        n = trim_keys_before(conn, table, cut, batch_rows)
                    if n < batch_rows:
                        break
        except (OperationalError, DBAPIError) as exc:
            raise self._db.write_error(exc, "partition drop rolled back") from exc
        finally:
            self._db.partitions.forget()
        return total

    def partitions(self) -> dict[str, list[str]]:
        """PostgreSQL: the partitions of each partitioned table, oldest first ({} on SQLite)."""
        if self._db.partitions is None:
            return {}
        with self._db.read_sql_engine.connect() as conn:
            return {table: [p.name for p in list_partitions(conn, table)] for table in PARTITIONED}

    def vacuum(self) -> None:
        """Give freed pages back to the file system (SQLite: incremental checkpoint + VACUUM; PG: nothing)."""
        if self._db.dialect == "sqlite":
            with self._db.write_sql_engine.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


def apply_retention(retention: Retention, policy: RetentionPolicy, now: float) -> int:
    """One retention pass; returns the rows deleted. Size: drop the oldest tenth of the span until under."""
    deleted = 0
    if policy.max_age_s is not None:
        deleted += retention.prune_before(now - policy.max_age_s, batch_rows=policy.batch_rows)
    if policy.max_bytes is not None:
        for _ in range(MAX_SIZE_ROUNDS):
            if retention.size_bytes() <= policy.max_bytes:
                break
            oldest = retention.oldest_observed()
            if oldest is None:
                break
            cutoff = oldest + max(1.0, (now - oldest) / 10)
            n = retention.prune_before(cutoff, batch_rows=policy.batch_rows)
            deleted += n
            if n == 0 and cutoff >= now:
                break
    if deleted and retention.metrics is not None:
        retention.metrics.pruned.inc(deleted)
    return deleted


class RetentionWorker:
    """Runs :func:`apply_retention` every ``interval_s`` on a daemon thread until :meth:`stop`."""

    def __init__(
        self,
        retention: Retention,
        policy: RetentionPolicy,
        *,
        interval_s: float = 300.0,
        clock: Callable[[], float],
    ) -> None:
        self._retention = retention
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
                apply_retention(self._retention, self._policy, self._clock())
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
