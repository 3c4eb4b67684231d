"""Writing a :class:`Batch`: every record and cursor in ONE transaction, idempotent by unique keys.

Records and the cursors that cover them commit together: after a crash either both are there or neither is, and
re-writing the same records is a no-op (ON CONFLICT DO NOTHING, or DO UPDATE for mutable engine entries; on
PostgreSQL, whose big tables are partitioned by day, through their key tables: see capstan/store/_partitions.py).
A failed write (full or read-only disk, lost database) raises :class:`StoreWriteError` after the transaction rolled
back; the store stays consistent and the caller must stop writing loudly. :class:`BatchWrites` is the one write
path of the history and of the restart records, so both share the metrics and the commit listeners.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Connection, bindparam, delete, literal_column, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from capstan import jsontext
from capstan.store import _rows
from capstan.store import _schema as s
from capstan.store._database import Database
from capstan.store._metrics import HistoryMetrics
from capstan.store._models import Batch, EngineEntry, ObjectChange, ObjectState, WriteResult, to_us
from capstan.store._partitions import day_of

log = logging.getLogger(__name__)


class BatchWrites:
    """Writes batches to ``db`` (see the module docstring); ``metrics`` account each commit."""

    def __init__(self, db: Database, *, metrics: HistoryMetrics | None = None) -> None:
        self._db = db
        self.metrics = metrics
        self._listeners: list[Callable[[Batch], None]] = []

    def add_commit_listener(self, listener: Callable[[Batch], None]) -> None:
        """Call ``listener(batch)`` after each successful commit (OTLP export, live feeds). Errors are logged."""
        self._listeners.append(listener)

    def write(self, batch: Batch) -> WriteResult:
        """Write a batch in ONE transaction; idempotent. Raises StoreWriteError (rolled back) on failure."""
        if batch.is_empty():
            return WriteResult({})
        inserted: dict[str, int] = {}
        try:
            if self._db.partitions is not None:
                self._db.partitions.ensure(_days_by_table(batch), to_us(self._db.clock()))
            with self._db.write_lock, self._db.write_sql_engine.begin() as conn:
                write_rows(conn, self._db, batch, inserted)
        except (OperationalError, DBAPIError) as exc:
            if isinstance(exc, IntegrityError):
                raise
            if self.metrics is not None:
                self.metrics.write_failures.inc()
            raise self._db.write_error(exc) from exc
        now = self._db.clock()
        if self.metrics is not None:
            self.metrics.observe_write(batch, inserted, now)
        for listener in self._listeners:
            try:
                listener(batch)
            except Exception:
                log.exception("history commit listener failed")
        return WriteResult(inserted)


def write_rows(conn: Connection, db: Database, batch: Batch, inserted: dict[str, int]) -> None:
    """Every record and cursor of ``batch`` in the open transaction ``conn``; ``inserted`` counts the new rows."""
    now_us = to_us(db.clock())

    def run(name: str, stmt: Any, rows: list[dict[str, Any]]) -> None:
        if rows:
            # NOTE: RETURNING counts the rows really inserted on both back ends (rowcount of an executemany
            # is not reliable with psycopg).
            result = conn.execute(stmt.returning(literal_column("1")), rows)
            inserted[name] = inserted.get(name, 0) + len(result.all())

    if batch.object_changes and db.dialect == "sqlite":
        inserted["object_changes"] = _sqlite_insert_rows(
            conn, _SQLITE_CHANGE_INSERT, len(_CHANGE_COLUMNS), _change_tuples(batch.object_changes)
        )
    elif batch.object_changes:
        inserted["object_changes"] = _postgres_copy_changes(conn, batch.object_changes)
    if batch.state_deletes:
        for source, uid in batch.state_deletes:
            conn.execute(
                delete(s.object_state).where(s.object_state.c.source == source, s.object_state.c.uid == uid)
            )
    if batch.state_puts:
        # NOTE: a uid is never reused, so a uid deleted anywhere in the batch stays deleted.
        gone = set(batch.state_deletes)
        puts = [st for st in _rows.last_per_key(batch.state_puts) if (st.source, st.uid) not in gone]
        if puts and db.dialect == "sqlite":
            _sqlite_upsert_states(conn, puts, now_us)
        elif puts:
            _postgres_upsert_states(conn, puts, now_us)
    if batch.kind_cursors:
        ins = db.insert(s.kind_cursors)
        stmt = ins.on_conflict_do_update(
            index_elements=["source", "kind"],
            set_={
                "resource_version": ins.excluded.resource_version,
                "updated_at": ins.excluded.updated_at,
            },
        )
        rows = {(c.source, c.kind): c for c in batch.kind_cursors}
        conn.execute(
            stmt,
            [
                {
                    "source": c.source,
                    "kind": c.kind,
                    "resource_version": c.resource_version,
                    "updated_at": now_us,
                }
                for c in rows.values()
            ],
        )
    if batch.kube_events and db.dialect == "postgresql":
        event_rows = _claim_keys(conn, "kube_events", [_rows.event_row(e) for e in batch.kube_events])
        if event_rows:
            conn.execute(s.kube_events.insert(), event_rows)
        inserted["kube_events"] = len(event_rows)
    elif batch.kube_events:
        stmt = db.insert(s.kube_events).on_conflict_do_nothing(
            index_elements=["source", "uid", "resource_version"]
        )
        run("kube_events", stmt, [_rows.event_row(e) for e in batch.kube_events])
    immutable = [e for e in batch.engine_entries if not e.mutable]
    # NOTE: PostgreSQL refuses to upsert one key twice in a statement; the last version of an entry wins.
    mutable = list(
        {(e.target, e.log, e.run_id, e.native_id): e for e in batch.engine_entries if e.mutable}.values()
    )
    if db.dialect == "postgresql" and (immutable or mutable):
        _write_engine_entries_partitioned(conn, immutable, mutable, inserted)
    elif immutable:
        stmt = db.insert(s.engine_entries).on_conflict_do_nothing(
            index_elements=["target", "log", "run_id", "native_id"]
        )
        run("engine_entries", stmt, [_rows.entry_row(e) for e in immutable])
    if mutable and db.dialect != "postgresql":
        ins = db.insert(s.engine_entries)
        stmt = ins.on_conflict_do_update(
            index_elements=["target", "log", "run_id", "native_id"],
            set_={"payload": ins.excluded.payload, "happened_at": ins.excluded.happened_at},
        )
        run("engine_entries", stmt, [_rows.entry_row(e) for e in mutable])
    if batch.gaps:
        stmt = db.insert(s.gaps).on_conflict_do_nothing(index_elements=["source", "log", "key"])
        run("gaps", stmt, [_rows.gap_row(g) for g in batch.gaps])
    if batch.engine_cursors:
        ins = db.insert(s.engine_cursors)
        stmt = ins.on_conflict_do_update(
            index_elements=["target", "log"],
            set_={c: ins.excluded[c] for c in ("run_id", "last_id", "state", "updated_at")},
        )
        rows_c = {(c.target, c.log): c for c in batch.engine_cursors}
        conn.execute(
            stmt,
            [
                {
                    "target": c.target,
                    "log": c.log,
                    "run_id": c.run_id,
                    "last_id": c.last_id,
                    "state": c.state,
                    "updated_at": now_us,
                }
                for c in rows_c.values()
            ],
        )
    if batch.restarts:
        stmt = db.insert(s.restarts).on_conflict_do_nothing(
            index_elements=["pod_uid", "container", "restart_count"]
        )
        run("restarts", stmt, [_rows.restart_row(r) for r in batch.restarts])
    if batch.restart_counts:
        ins = db.insert(s.restart_counts)
        stmt = ins.on_conflict_do_update(
            index_elements=["pod_uid", "container"],
            set_={c: ins.excluded[c] for c in ("namespace", "pod", "restart_count", "updated_at")},
        )
        rows_r = {(r.pod_uid, r.container): r for r in batch.restart_counts}
        conn.execute(
            stmt,
            [
                {
                    "pod_uid": r.pod_uid,
                    "container": r.container,
                    "namespace": r.namespace,
                    "pod": r.pod,
                    "restart_count": r.restart_count,
                    "updated_at": now_us,
                }
                for r in rows_r.values()
            ],
        )


# ---------------------------------------------------------------------- PostgreSQL's partitioned tables
def _days_by_table(batch: Batch) -> dict[str, set[int]]:
    """The UTC days (µs) each partitioned table receives rows for in ``batch``."""
    times = {
        "object_changes": [c.observed_at for c in batch.object_changes],
        "kube_events": [e.observed_at for e in batch.kube_events],
        "engine_entries": [e.observed_at for e in batch.engine_entries],
    }
    return {table: {day_of(to_us(t)) for t in ts} for table, ts in times.items() if ts}


def _claim_keys(conn: Connection, table: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Insert the rows' idempotency keys into ``table``'s key table; the rows whose key was new (first of each
    key in the batch wins, as ON CONFLICT DO NOTHING does on SQLite)."""
    key_cols = s.PARTITION_KEYS[table]
    keys_table = s.postgres_metadata.tables[s.KEY_TABLE[table]]
    first: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in rows:
        first.setdefault(tuple(r[c] for c in key_cols), r)
    stmt = (
        postgresql.insert(keys_table).on_conflict_do_nothing().returning(*[keys_table.c[c] for c in key_cols])
    )
    key_rows = [
        {**{c: k[i] for i, c in enumerate(key_cols)}, "observed_at": r["observed_at"]}
        for k, r in first.items()
    ]
    new = {tuple(row) for row in conn.execute(stmt, key_rows).all()}
    return [r for k, r in first.items() if k in new]


def _postgres_copy_changes(conn: Connection, changes: Sequence[ObjectChange]) -> int:
    """The PostgreSQL hot path of ingest: the batch's keys claimed in one statement (arrays, unnest), then the rows
    whose key was new streamed into the partitioned table with COPY (the first of each key in the batch wins, as on
    SQLite). Returns the rows inserted."""
    first: dict[tuple[str, str, str, str], int] = {}
    for i, c in enumerate(changes):
        first.setdefault((c.source, c.uid, c.resource_version, c.change_type), i)
    kept = [changes[i] for i in first.values()]
    result = conn.exec_driver_sql(
        _POSTGRES_CLAIM_CHANGE_KEYS,
        (
            [c.source for c in kept],
            [c.uid for c in kept],
            [c.resource_version for c in kept],
            [c.change_type for c in kept],
            [to_us(c.observed_at) for c in kept],
        ),
    )
    new = {tuple(row) for row in result.all()}
    fresh = [c for c in kept if (c.source, c.uid, c.resource_version, c.change_type) in new]
    if fresh:
        _postgres_copy(conn, _POSTGRES_COPY_CHANGES, _change_tuples(fresh))
    return len(fresh)


def _postgres_copy(conn: Connection, sql: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """``rows`` through ``COPY … FROM STDIN`` on the transaction's own psycopg connection; a database error is
    raised as SQLAlchemy raises it (so the caller's rollback and StoreWriteError apply)."""
    import psycopg  # the PostgreSQL driver: imported only where PostgreSQL is written

    raw: Any = conn.connection.dbapi_connection
    try:
        with raw.cursor() as cur, cur.copy(sql) as copy:
            for row in rows:
                copy.write_row(row)
    except psycopg.Error as exc:
        raise DBAPIError.instance(sql, None, exc, psycopg.Error) from exc


def _postgres_upsert_states(conn: Connection, states: Sequence[ObjectState], now_us: int) -> None:
    """Last states upserted on PostgreSQL in one statement (arrays, unnest), the object JSON taken as the diff
    builder already encoded it; ``states`` hold each key once (PostgreSQL refuses to upsert a key twice in one
    statement)."""
    conn.exec_driver_sql(
        _POSTGRES_STATE_UPSERT,
        (
            [st.source for st in states],
            [st.uid for st in states],
            [st.kind for st in states],
            [st.api_version for st in states],
            [st.namespace for st in states],
            [st.name for st in states],
            [st.resource_version for st in states],
            [st.version_seq for st in states],
            [st.encoded if st.encoded is not None else jsontext.dumps(st.object) for st in states],
            [now_us] * len(states),
        ),
    )


def _write_engine_entries_partitioned(
    conn: Connection, immutable: list[EngineEntry], mutable: list[EngineEntry], inserted: dict[str, int]
) -> None:
    """Engine entries on PostgreSQL: new keys are inserted; a mutable entry already stored (an ACL LOG entry whose
    count rose) is updated in whichever day's partition holds it."""
    rows = _claim_keys(conn, "engine_entries", [_rows.entry_row(e) for e in (*immutable, *mutable)])
    if rows:
        conn.execute(s.engine_entries.insert(), rows)
    fresh = {(r["target"], r["log"], r["run_id"], r["native_id"]) for r in rows}
    updates = [
        {
            "k_target": e.target,
            "k_log": e.log,
            "k_run_id": e.run_id,
            "k_native_id": e.native_id,
            "payload": e.payload,
            "happened_at": to_us(e.happened_at),
        }
        for e in mutable
        if (e.target, e.log, e.run_id, e.native_id) not in fresh
    ]
    if updates:
        ee = s.engine_entries
        conn.execute(
            update(ee)
            .where(
                ee.c.target == bindparam("k_target"),
                ee.c.log == bindparam("k_log"),
                ee.c.run_id == bindparam("k_run_id"),
                ee.c.native_id == bindparam("k_native_id"),
            )
            .values(payload=bindparam("payload"), happened_at=bindparam("happened_at")),
            updates,
        )
    inserted["engine_entries"] = inserted.get("engine_entries", 0) + len(rows) + len(updates)


# ---------------------------------------------------------------------- row mapping
_CHANGE_COLUMNS = (
    "source",
    "observed_at",
    "kind",
    "api_version",
    "namespace",
    "name",
    "uid",
    "resource_version",
    "change_type",
    "observed_via",
    "version_seq",
    "patch",
    "snapshot",
)
_SQLITE_CHANGE_INSERT = (
    f"INSERT INTO object_changes ({', '.join(_CHANGE_COLUMNS)}) VALUES {{values}} ON CONFLICT DO NOTHING"
)
_SQLITE_ROWS_PER_STATEMENT = 256
"""The most rows one INSERT carries on SQLite (13 parameters a row: far below the 32,766 parameters a statement
of SQLite since 3.32; an older library's limit, 999, makes it fewer, see :func:`_sqlite_rows_per_statement`)."""


def _sqlite_rows_per_statement(conn: Connection, width: int) -> int:
    """The most rows of ``width`` columns one statement may carry on this SQLite library, a power of two up to
    :data:`_SQLITE_ROWS_PER_STATEMENT` (SQLite before 3.32 takes at most 999 parameters a statement)."""
    import sqlite3  # the SQLite driver: imported only where SQLite is written

    dbapi: Any = conn.connection.dbapi_connection
    limit = int(dbapi.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
    size = _SQLITE_ROWS_PER_STATEMENT
    while size > 1 and size * width > limit:
        size //= 2
    return size


@functools.lru_cache(maxsize=64)
def _sqlite_rows_statement(sql: str, width: int, rows: int) -> str:
    """``sql`` with ``{values}`` replaced by the placeholders of ``rows`` rows of ``width`` columns."""
    return sql.format(values=", ".join(["(" + ", ".join("?" * width) + ")"] * rows))


def _sqlite_insert_rows(conn: Connection, sql: str, width: int, rows: Sequence[tuple[Any, ...]]) -> int:
    """``rows`` through ``sql`` (an INSERT whose ``{values}`` is replaced by the rows' placeholders), many rows a
    statement; returns the rows changed (inserted, or upserted).

    NOTE: one statement a row (``executemany``) releases the GIL for each row's ``sqlite3_step`` and must win it
    back from the recorder's busy diffing thread every time, waiting up to a switch interval per row: the writer
    crawled while the diff builder ran and the diff builder waited for the writer. Here a statement carries up to
    :data:`_SQLITE_ROWS_PER_STATEMENT` rows, and what is left over goes in statements of 128, 64, … rows, so
    every statement's text is one of nine per table and compiled once (SQLite's statement cache). Rows keep their
    order, so ``ON CONFLICT`` sees the same first row of a key as one statement a row does."""
    changed, start, size = 0, 0, _sqlite_rows_per_statement(conn, width)
    while start < len(rows):
        while size > len(rows) - start:
            size //= 2
        chunk = rows[start : start + size]
        params = tuple(itertools.chain.from_iterable(chunk))
        changed += max(
            int(conn.exec_driver_sql(_sqlite_rows_statement(sql, width, size), params).rowcount), 0
        )
        start += size
    return changed


def _change_tuples(changes: Sequence[ObjectChange]) -> list[tuple[Any, ...]]:
    """The hot path of ingest: object changes as the parameter tuples of :data:`_CHANGE_COLUMNS`, their JSON
    encoded here once (no row dicts, no per-row parameter processing)."""
    dumps = jsontext.dumps
    return [
        (
            c.source,
            to_us(c.observed_at),
            c.kind,
            c.api_version,
            c.namespace,
            c.name,
            c.uid,
            c.resource_version,
            c.change_type,
            c.observed_via,
            c.version_seq,
            None if c.patch is None else dumps(c.patch),
            None if c.snapshot is None else dumps(c.snapshot),
        )
        for c in changes
    ]


_STATE_COLUMNS = (
    "source",
    "uid",
    "kind",
    "api_version",
    "namespace",
    "name",
    "resource_version",
    "version_seq",
    "object",
    "updated_at",
)
_SQLITE_STATE_UPSERT = (
    f"INSERT INTO object_state ({', '.join(_STATE_COLUMNS)}) VALUES {{values}} "
    "ON CONFLICT (source, uid) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in _STATE_COLUMNS[2:])
)


def _sqlite_upsert_states(conn: Connection, states: Sequence[ObjectState], now_us: int) -> None:
    """The other half of the SQLite ingest hot path: last states upserted many a statement, the object
    JSON taken as the diff builder already encoded it."""
    _sqlite_insert_rows(
        conn,
        _SQLITE_STATE_UPSERT,
        len(_STATE_COLUMNS),
        [
            (
                st.source,
                st.uid,
                st.kind,
                st.api_version,
                st.namespace,
                st.name,
                st.resource_version,
                st.version_seq,
                st.encoded if st.encoded is not None else json.dumps(st.object),
                now_us,
            )
            for st in states
        ],
    )


# NOTE: the arrays go as binary parameters (%b): psycopg writes a text-format array element by element through a
# regular expression that escapes quotes and backslashes, which for the states' JSON took 60 µs a row of the
# recorder's one GIL (2000 states: 121 ms of client CPU as text, 4 ms as binary; bench/history_ingest.py).
_POSTGRES_CLAIM_CHANGE_KEYS = (
    "INSERT INTO object_change_keys (source, uid, resource_version, change_type, observed_at) "
    "SELECT * FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::bigint[]) "
    "ON CONFLICT DO NOTHING RETURNING source, uid, resource_version, change_type"
)
_POSTGRES_COPY_CHANGES = f"COPY object_changes ({', '.join(_CHANGE_COLUMNS)}) FROM STDIN"
_POSTGRES_STATE_UPSERT = (
    f"INSERT INTO object_state ({', '.join(_STATE_COLUMNS)}) "
    "SELECT s, u, k, a, ns, n, rv, seq, o::jsonb, t FROM unnest("
    "%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::integer[], "
    "%b::text[], %b::bigint[]) AS r(s, u, k, a, ns, n, rv, seq, o, t) "
    "ON CONFLICT (source, uid) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in _STATE_COLUMNS[2:])
)
