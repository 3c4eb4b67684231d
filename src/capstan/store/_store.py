"""The store: one database and its parts, each behind the narrow seam its callers need.

:func:`open_store` opens (and by default migrates) the database; the :class:`Store` it returns holds one
:class:`~capstan.store._database.Database` handle and the parts over it, as attributes:

- ``history`` (:class:`~capstan.store.HistoryStore`): the recorders' batched writes and cursors
  (:class:`~capstan.store.HistoryWriter`) and every query (:class:`~capstan.store.HistoryReader`);
- ``restart_records`` (:class:`~capstan.store.RestartRecords`): the restart watcher's records and last-seen counts;
- ``outbox`` and ``threads``: the notifier's durable outbox and chat-thread index (:mod:`capstan.notify`'s seams);
- ``retention`` (:class:`~capstan.store.Retention`): pruning by age and size, PostgreSQL's day partitions;
- ``keys`` (:class:`~capstan.store.RedactionKeys`): the redaction key every process on this database shares.

A caller takes the part it uses, never the whole store; only a composition root (the CLI) holds a :class:`Store`.
"""

from __future__ import annotations

import time

from sqlalchemy.engine import URL

from capstan.store._batchwrite import BatchWrites
from capstan.store._database import Clock, Database, open_database
from capstan.store._history import HistoryStore
from capstan.store._keys import RedactionKeys
from capstan.store._metrics import HistoryMetrics
from capstan.store._outbox import NotifyThreads, Outbox
from capstan.store._restart_records import RestartRecords
from capstan.store._retention import Retention


def open_store(
    location: str,
    *,
    clock: Clock = time.time,
    metrics: HistoryMetrics | None = None,
    run_migrations: bool = True,
    writer_cache_kib: int | None = None,
    create: bool = True,
) -> Store:
    """Open (and by default migrate) the store at a file path or database URL; bad URLs are one-line UserErrors.
    ``writer_cache_kib``: the SQLite writer's page cache (see :func:`create_sql_engines`).

    Only writers create a store: a reader passes ``create=False``, and a SQLite file that does not exist, or a
    database that holds no store, is a one-line :class:`UserError` instead of a new, empty store (which SQLite
    would otherwise create as a side effect of connecting, and every later read would quietly show nothing)."""
    db = open_database(
        location, clock=clock, run_migrations=run_migrations, writer_cache_kib=writer_cache_kib, create=create
    )
    return Store(db, metrics=metrics)


class Store:
    """One database and its parts (see the module docstring); :meth:`close` closes them all."""

    def __init__(self, database: Database, *, metrics: HistoryMetrics | None = None) -> None:
        self.database = database
        self.metrics = metrics
        writes = BatchWrites(database, metrics=metrics)  # one write path: one set of metrics and listeners
        self.keys = RedactionKeys(database)
        self.history = HistoryStore(database, writes, self.keys)
        self.restart_records = RestartRecords(database, writes)
        self.outbox = Outbox(database)
        self.threads = NotifyThreads(database)
        self.retention = Retention(database, metrics=metrics)

    @property
    def url(self) -> URL:
        return self.database.url

    @property
    def display_url(self) -> str:
        return self.database.display_url

    @property
    def dialect(self) -> str:
        return self.database.dialect

    def schema_revision(self) -> str | None:
        return self.database.schema_revision()

    def close(self) -> None:
        self.database.close()
