"""The history store: transactional batched writes, idempotent by unique keys, and the query API.

One :class:`Store` per database. Every write goes through :meth:`Store.write` with a :class:`Batch`, so records and
the cursors that cover them commit in the same transaction: after a crash either both are there or neither is,
and re-writing the same records is a no-op (ON CONFLICT DO NOTHING, or DO UPDATE for mutable engine entries; on
PostgreSQL, whose big tables are partitioned by day, through their key tables: see capstan/store/_partitions.py).
A failed write (full or read-only disk, lost database) raises :class:`StoreWriteError` after the transaction rolled
back; the store stays consistent and the caller must stop writing loudly.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jsonpatch
from sqlalchemy import (
    JSON,
    Connection,
    Engine,
    Select,
    and_,
    bindparam,
    delete,
    func,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Row
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from capstan import jsontext
from capstan.errors import UserError
from capstan.redact import RedactionPolicy, Redactor
from capstan.store import _schema as s
from capstan.store._cursor import Position
from capstan.store._engine import (
    check_connect,
    create_engines,
    current_revision,
    describe_db_error,
    migrate,
    parse_database_url,
    require_existing_file,
    require_schema,
    safe_url,
)
from capstan.store._metrics import HistoryMetrics
from capstan.store._models import (
    Batch,
    EngineCursor,
    EngineEntry,
    Gap,
    JsonDict,
    KindCursor,
    KubeEvent,
    ObjectChange,
    ObjectDiff,
    ObjectState,
    ObjectVersion,
    OutboxItem,
    Restart,
    RestartCount,
    WriteResult,
    from_us,
    to_us,
)
from capstan.store._partitions import (
    PARTITIONED,
    PartitionCache,
    day_of,
    drop_partitions_before,
    list_partitions,
    trim_keys_before,
)

log = logging.getLogger(__name__)

Clock = Callable[[], float]
DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000
MAX_PATCH_CHAIN = 100_000


class StoreWriteError(RuntimeError):
    """A write failed and was rolled back (disk full, read-only, database gone): stop writing, say so loudly."""


class StoreCorruptHistory(RuntimeError):
    """A version cannot be rebuilt (no snapshot before it): should never happen; retention keeps snapshots."""


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
    ``writer_cache_kib``: the SQLite writer's page cache (see :func:`create_engines`).

    Only writers create a store: a reader passes ``create=False``, and a SQLite file that does not exist, or a
    database that holds no store, is a one-line :class:`UserError` instead of a new, empty store (which SQLite
    would otherwise create as a side effect of connecting, and every later read would quietly show nothing)."""
    url = parse_database_url(location)
    if not create:
        require_existing_file(url)
    write, read = create_engines(url, writer_cache_kib=writer_cache_kib)
    check_connect(write, url)
    if not create:
        require_schema(read, url)
    if run_migrations:
        try:
            migrate(write)
        except (OperationalError, DBAPIError) as exc:
            raise UserError(describe_db_error(url, exc) + " (while migrating)") from None
    return Store(url, write, read, clock=clock, metrics=metrics)


class Store:
    """Durable history of cluster changes and engine events (see the module docstring)."""

    def __init__(
        self,
        url: URL,
        write_engine: Engine,
        read_engine: Engine,
        *,
        clock: Clock = time.time,
        metrics: HistoryMetrics | None = None,
    ) -> None:
        self.url = url
        self._write = write_engine
        self._read = read_engine
        self._clock = clock
        self.metrics = metrics
        self.dialect = url.get_backend_name()
        self._write_lock = threading.Lock()
        self._listeners: list[Callable[[Batch], None]] = []
        self._partitions = PartitionCache(write_engine) if self.dialect == "postgresql" else None
        self._redaction_key: bytes | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def display_url(self) -> str:
        return safe_url(self.url)

    def close(self) -> None:
        self._write.dispose()
        if self._read is not self._write:
            self._read.dispose()

    def schema_revision(self) -> str | None:
        return current_revision(self._read)

    def redaction_key(self, *, create: bool = True) -> bytes | None:
        """The random key of the keyed hashes that stand for redacted values (:mod:`capstan.redact`), created on
        first use by a writer (``create``; a reader gets None while no writer has made one). Every process on this
        store gets the same key, so a value redacted by the recorder yesterday and by the HTTP API today has the
        same marker; the key itself is never served."""
        if self._redaction_key is not None:
            return self._redaction_key
        t = s.store_keys
        with self._read.begin() as conn:
            row = conn.execute(select(t.c.value).where(t.c.name == "redaction")).first()
        if row is None and not create:
            return None
        if row is None:
            stmt = (
                self._insert(t)
                .values(name="redaction", value=secrets.token_hex(32), created_at=to_us(self._clock()))
                .on_conflict_do_nothing(index_elements=["name"])
            )
            with self._writing() as conn:
                conn.execute(stmt)
                # another process may have won the race: read what is stored, in the same transaction
                row = conn.execute(select(t.c.value).where(t.c.name == "redaction")).first()
        assert row is not None
        self._redaction_key = bytes.fromhex(row.value)
        return self._redaction_key

    def redactor(self, policy: RedactionPolicy | None = None, *, create_key: bool = True) -> Redactor:
        """A :class:`~capstan.redact.Redactor` keyed with this store's :meth:`redaction_key` (readers pass
        ``create_key=False``: without a key yet, markers carry no hash)."""
        return Redactor(policy, key=self.redaction_key(create=create_key))

    def add_commit_listener(self, listener: Callable[[Batch], None]) -> None:
        """Call ``listener(batch)`` after each successful commit (OTLP export, live feeds). Errors are logged."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ writes
    def _insert(self, table: Any) -> Any:
        if self.dialect == "postgresql":
            return postgresql.insert(table)
        return sqlite.insert(table)

    def write(self, batch: Batch) -> WriteResult:
        """Write a batch in ONE transaction; idempotent. Raises StoreWriteError (rolled back) on failure."""
        if batch.is_empty():
            return WriteResult({})
        inserted: dict[str, int] = {}
        try:
            if self._partitions is not None:
                self._partitions.ensure(_days_by_table(batch), to_us(self._clock()))
            with self._write_lock, self._write.begin() as conn:
                self._write_batch(conn, batch, inserted)
        except (OperationalError, DBAPIError) as exc:
            if isinstance(exc, IntegrityError):
                raise
            if self.metrics is not None:
                self.metrics.write_failures.inc()
            raise StoreWriteError(describe_db_error(self.url, exc) + " (write rolled back)") from exc
        now = self._clock()
        if self.metrics is not None:
            self.metrics.observe_write(batch, inserted, now)
        for listener in self._listeners:
            try:
                listener(batch)
            except Exception:
                log.exception("history commit listener failed")
        return WriteResult(inserted)

    def _write_batch(self, conn: Connection, batch: Batch, inserted: dict[str, int]) -> None:
        now_us = to_us(self._clock())

        def run(name: str, stmt: Any, rows: list[dict[str, Any]]) -> None:
            if rows:
                # NOTE: RETURNING counts the rows really inserted on both back ends (rowcount of an executemany
                # is not reliable with psycopg).
                result = conn.execute(stmt.returning(literal_column("1")), rows)
                inserted[name] = inserted.get(name, 0) + len(result.all())

        if batch.object_changes and self.dialect == "sqlite":
            change_rows = [_change_row(c) for c in batch.object_changes]
            inserted["object_changes"] = _sqlite_insert_ignore(conn, s.object_changes, change_rows)
        elif batch.object_changes:
            change_rows = _claim_keys(conn, "object_changes", [_change_row(c) for c in batch.object_changes])
            if change_rows:
                conn.execute(s.object_changes.insert(), change_rows)
            inserted["object_changes"] = len(change_rows)
        if batch.state_deletes:
            for source, uid in batch.state_deletes:
                conn.execute(
                    delete(s.object_state).where(
                        s.object_state.c.source == source, s.object_state.c.uid == uid
                    )
                )
        if batch.state_puts:
            ins = self._insert(s.object_state)
            stmt = ins.on_conflict_do_update(
                index_elements=["source", "uid"],
                set_={c: ins.excluded[c] for c in _STATE_COLUMNS[2:]},
            )
            # NOTE: a uid is never reused, so a uid deleted anywhere in the batch stays deleted.
            gone = set(batch.state_deletes)
            puts = [st for st in _last_per_key(batch.state_puts) if (st.source, st.uid) not in gone]
            if puts and self.dialect == "sqlite":
                _sqlite_upsert_states(conn, puts, now_us)
            elif puts:
                conn.execute(stmt, [_state_row(st, now_us) for st in puts])
        if batch.kind_cursors:
            ins = self._insert(s.kind_cursors)
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
        if batch.kube_events and self.dialect == "postgresql":
            event_rows = _claim_keys(conn, "kube_events", [_event_row(e) for e in batch.kube_events])
            if event_rows:
                conn.execute(s.kube_events.insert(), event_rows)
            inserted["kube_events"] = len(event_rows)
        elif batch.kube_events:
            stmt = self._insert(s.kube_events).on_conflict_do_nothing(
                index_elements=["source", "uid", "resource_version"]
            )
            run("kube_events", stmt, [_event_row(e) for e in batch.kube_events])
        immutable = [e for e in batch.engine_entries if not e.mutable]
        # NOTE: PostgreSQL refuses to upsert one key twice in a statement; the last version of an entry wins.
        mutable = list(
            {(e.target, e.log, e.run_id, e.native_id): e for e in batch.engine_entries if e.mutable}.values()
        )
        if self.dialect == "postgresql" and (immutable or mutable):
            _write_engine_entries_partitioned(conn, immutable, mutable, inserted)
        elif immutable:
            stmt = self._insert(s.engine_entries).on_conflict_do_nothing(
                index_elements=["target", "log", "run_id", "native_id"]
            )
            run("engine_entries", stmt, [_entry_row(e) for e in immutable])
        if mutable and self.dialect != "postgresql":
            ins = self._insert(s.engine_entries)
            stmt = ins.on_conflict_do_update(
                index_elements=["target", "log", "run_id", "native_id"],
                set_={"payload": ins.excluded.payload, "happened_at": ins.excluded.happened_at},
            )
            run("engine_entries", stmt, [_entry_row(e) for e in mutable])
        if batch.gaps:
            stmt = self._insert(s.gaps).on_conflict_do_nothing(index_elements=["source", "log", "key"])
            run("gaps", stmt, [_gap_row(g) for g in batch.gaps])
        if batch.engine_cursors:
            ins = self._insert(s.engine_cursors)
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
            stmt = self._insert(s.restarts).on_conflict_do_nothing(
                index_elements=["pod_uid", "container", "restart_count"]
            )
            run("restarts", stmt, [_restart_row(r) for r in batch.restarts])
        if batch.restart_counts:
            ins = self._insert(s.restart_counts)
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

    # ------------------------------------------------------------------ cursors and state
    def kind_cursor(self, source: str, kind: str) -> KindCursor | None:
        with self._read.begin() as conn:
            row = conn.execute(
                select(s.kind_cursors.c.resource_version).where(
                    s.kind_cursors.c.source == source, s.kind_cursors.c.kind == kind
                )
            ).first()
        return None if row is None else KindCursor(source, kind, row.resource_version)

    def object_states(self, source: str, kind: str | None = None) -> dict[str, ObjectState]:
        """Last known state of every live object of ``source`` (optionally one kind), keyed by uid."""
        q = select(s.object_state).where(s.object_state.c.source == source)
        if kind is not None:
            q = q.where(s.object_state.c.kind == kind)
        with self._read.begin() as conn:
            rows = conn.execute(q).all()
        return {
            r.uid: ObjectState(
                r.source,
                r.uid,
                r.kind,
                r.api_version,
                r.namespace,
                r.name,
                r.resource_version,
                r.version_seq,
                r.object,
            )
            for r in rows
        }

    def engine_cursor(self, target: str, log_name: str) -> EngineCursor | None:
        with self._read.begin() as conn:
            row = conn.execute(
                select(s.engine_cursors).where(
                    s.engine_cursors.c.target == target, s.engine_cursors.c.log == log_name
                )
            ).first()
        return None if row is None else EngineCursor(row.target, row.log, row.run_id, row.last_id, row.state)

    def restart_counts(self) -> dict[tuple[str, str], RestartCount]:
        with self._read.begin() as conn:
            rows = conn.execute(select(s.restart_counts)).all()
        return {
            (r.pod_uid, r.container): RestartCount(
                r.pod_uid, r.container, r.namespace, r.pod, r.restart_count
            )
            for r in rows
        }

    # ------------------------------------------------------------------ queries
    def timeline(
        self,
        *,
        source: str | None = None,
        kind: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        uid: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = DEFAULT_LIMIT,
        after: Position | None = None,
    ) -> list[ObjectChange]:
        """Object changes matching the filters, oldest first (``observed_at`` in [since, until]); ``after``: only
        those after that (observed_at µs, id) position (see :func:`position_of`)."""
        t = s.object_changes
        q = select(t)
        for col, value in (
            (t.c.source, source),
            (t.c.kind, kind),
            (t.c.namespace, namespace),
            (t.c.name, name),
            (t.c.uid, uid),
        ):
            if value is not None:
                q = q.where(col == value)
        q = _page(_window(q, t.c.observed_at, since, until), t.c.observed_at, t.c.id, after, limit)
        with self._read.begin() as conn:
            return [_change_from_row(r) for r in conn.execute(q)]

    def object_at(
        self, kind: str, namespace: str, name: str, at: float, *, source: str | None = None
    ) -> ObjectVersion | None:
        """The object named (kind, namespace, name) as recorded at time ``at``; None if never seen by then."""
        t = s.object_changes
        q = select(t.c.source, t.c.uid, t.c.version_seq).where(
            t.c.kind == kind, t.c.namespace == namespace, t.c.name == name, t.c.observed_at <= to_us(at)
        )
        if source is not None:
            q = q.where(t.c.source == source)
        q = q.order_by(t.c.observed_at.desc(), t.c.id.desc()).limit(1)
        with self._read.begin() as conn:
            hit = conn.execute(q).first()
            if hit is None:
                return None
            return self._rebuild(conn, hit.source, hit.uid, hit.version_seq)

    def version(self, source: str, uid: str, version_seq: int) -> ObjectVersion:
        """Rebuild one recorded version of an object."""
        with self._read.begin() as conn:
            return self._rebuild(conn, source, uid, version_seq)

    def _rebuild(self, conn: Connection, source: str, uid: str, seq: int) -> ObjectVersion:
        t = s.object_changes
        snap_seq = conn.execute(
            select(func.max(t.c.version_seq)).where(
                t.c.source == source, t.c.uid == uid, t.c.version_seq <= seq, t.c.snapshot.is_not(None)
            )
        ).scalar()
        if snap_seq is None:
            raise StoreCorruptHistory(f"object uid {uid} version {seq}: no snapshot at or before it")
        rows = conn.execute(
            select(t)
            .where(t.c.source == source, t.c.uid == uid, t.c.version_seq >= snap_seq, t.c.version_seq <= seq)
            .order_by(t.c.version_seq, t.c.id)
            .limit(MAX_PATCH_CHAIN)
        ).all()
        obj: JsonDict = {}
        last: Row[Any] | None = None
        for r in rows:
            if r.version_seq == snap_seq and r.snapshot is not None:
                obj = r.snapshot
            elif r.patch:
                obj = jsonpatch.apply_patch(obj, r.patch, in_place=False)
            last = r
        assert last is not None
        return ObjectVersion(
            source=last.source,
            kind=last.kind,
            namespace=last.namespace,
            name=last.name,
            uid=last.uid,
            resource_version=last.resource_version,
            version_seq=last.version_seq,
            observed_at=from_us(last.observed_at),
            deleted=last.change_type == "deleted",
            object=obj,
        )

    def diff(
        self, kind: str, namespace: str, name: str, since: float, until: float, *, source: str | None = None
    ) -> ObjectDiff:
        """The patch from the object at ``since`` to the object at ``until`` (absent or deleted = empty object)."""
        before = self.object_at(kind, namespace, name, since, source=source)
        after = self.object_at(kind, namespace, name, until, source=source)
        a = before.object if before is not None and not before.deleted else {}
        b = after.object if after is not None and not after.deleted else {}
        patch = list(jsonpatch.make_patch(a, b))
        return ObjectDiff(kind, namespace, name, since, until, before, after, patch)

    def events(
        self,
        *,
        involved_uid: str | None = None,
        namespace: str | None = None,
        involved_name: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = DEFAULT_LIMIT,
        after: Position | None = None,
    ) -> list[KubeEvent]:
        """Event occurrences, oldest observed first; ``after`` as in :meth:`timeline`."""
        t = s.kube_events
        q = select(t)
        if involved_uid is not None:
            q = q.where(t.c.involved_uid == involved_uid)
        if namespace is not None:
            q = q.where(t.c.namespace == namespace)
        if involved_name is not None:
            q = q.where(t.c.involved_name == involved_name)
        q = _page(_window(q, t.c.observed_at, since, until), t.c.observed_at, t.c.id, after, limit)
        with self._read.begin() as conn:
            return [_event_from_row(r) for r in conn.execute(q)]

    def engine_entries(
        self,
        *,
        target: str | None = None,
        log_name: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = DEFAULT_LIMIT,
        after: Position | None = None,
    ) -> list[EngineEntry]:
        """Engine entries by target and log, ordered by when they happened (then by native id order of insertion);
        ``after`` a (happened_at µs, id) position. NOTE: an ACL LOG entry whose count rose has a later happened_at,
        so a client paging meanwhile sees it again, at its new place."""
        t = s.engine_entries
        q = select(t)
        if target is not None:
            q = q.where(t.c.target == target)
        if log_name is not None:
            q = q.where(t.c.log == log_name)
        q = _page(_window(q, t.c.happened_at, since, until), t.c.happened_at, t.c.id, after, limit)
        with self._read.begin() as conn:
            return [_entry_from_row(r) for r in conn.execute(q)]

    def gaps(
        self,
        *,
        source: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = DEFAULT_LIMIT,
        after: Position | None = None,
    ) -> list[Gap]:
        """Gap records, oldest observed first; ``after`` as in :meth:`timeline`."""
        t = s.gaps
        q = select(t)
        if source is not None:
            q = q.where(t.c.source == source)
        q = _page(_window(q, t.c.observed_at, since, until), t.c.observed_at, t.c.id, after, limit)
        with self._read.begin() as conn:
            return [
                Gap(r.source, r.log, r.key, from_us(r.observed_at), r.lost, r.reason, r.detail, r.id)
                for r in conn.execute(q)
            ]

    def restarts(
        self,
        *,
        namespace: str | None = None,
        pod: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = DEFAULT_LIMIT,
        after: Position | None = None,
    ) -> list[Restart]:
        """Observed restarts, oldest first; ``after`` as in :meth:`timeline`."""
        t = s.restarts
        q = select(t)
        if namespace is not None:
            q = q.where(t.c.namespace == namespace)
        if pod is not None:
            q = q.where(t.c.pod == pod)
        q = _page(_window(q, t.c.observed_at, since, until), t.c.observed_at, t.c.id, after, limit)
        with self._read.begin() as conn:
            return [
                Restart(
                    r.pod_uid,
                    r.namespace,
                    r.pod,
                    r.container,
                    r.container_type,
                    r.restart_count,
                    from_us(r.observed_at),
                    r.reason,
                    r.exit_code,
                    r.reported_state,
                    r.id,
                )
                for r in conn.execute(q)
            ]

    def count(self, table: str) -> int:
        tbl = s.metadata.tables[table]
        with self._read.begin() as conn:
            return int(conn.execute(select(func.count()).select_from(tbl)).scalar_one())

    def dump_all_text(self) -> Iterable[str]:
        """Every cell of every table as text (for tests that prove a value is stored nowhere)."""
        schema = s.postgres_metadata if self.dialect == "postgresql" else s.metadata
        with self._read.begin() as conn:
            for tbl in schema.sorted_tables:
                for row in conn.execute(select(tbl)):
                    for value in row:
                        yield str(value)

    # ------------------------------------------------------------------ outbox
    def enqueue(
        self, destination: str, payload: JsonDict, dedupe_key: str, *, now: float | None = None
    ) -> OutboxItem | None:
        """Add a notification; returns None when ``dedupe_key`` is already in the outbox (idempotent)."""
        at = to_us(self._clock() if now is None else now)
        stmt = (
            self._insert(s.outbox)
            .values(
                destination=destination,
                payload=payload,
                dedupe_key=dedupe_key,
                state="pending",
                attempts=0,
                next_attempt_at=at,
                last_error=None,
                created_at=at,
                updated_at=at,
            )
            .on_conflict_do_nothing(index_elements=["dedupe_key"])
        )
        with self._writing() as conn:
            row = conn.execute(stmt.returning(*s.outbox.c)).first()
        return None if row is None else _outbox_from_row(row)

    def claim_due(self, now: float, limit: int, *, lease_seconds: float = 60.0) -> list[OutboxItem]:
        """Pending items due at ``now`` in enqueue order; each claim counts an attempt and leases the item until
        ``now + lease_seconds`` so a second drainer does not take it meanwhile."""
        t = s.outbox
        q = (
            select(t)
            .where(t.c.state == "pending", t.c.next_attempt_at <= to_us(now))
            .order_by(t.c.id)
            .limit(_limit(limit))
        )
        if self.dialect == "postgresql":
            q = q.with_for_update(skip_locked=True)
        with self._writing() as conn:
            rows = conn.execute(q).all()
            ids = [r.id for r in rows]
            if ids:
                conn.execute(
                    update(t)
                    .where(t.c.id.in_(ids))
                    .values(
                        attempts=t.c.attempts + 1,
                        next_attempt_at=to_us(now + lease_seconds),
                        updated_at=to_us(now),
                    )
                )
                rows = conn.execute(select(t).where(t.c.id.in_(ids)).order_by(t.c.id)).all()
        by_id = {r.id: r for r in rows}
        return [_outbox_from_row(by_id[i]) for i in ids]

    def mark_sent(self, item_id: int, *, now: float | None = None) -> None:
        self._outbox_update(item_id, now, state="sent", last_error=None)

    def mark_retry(self, item_id: int, at: float, error: str, *, now: float | None = None) -> None:
        self._outbox_update(item_id, now, state="pending", next_attempt_at=to_us(at), last_error=error)

    def mark_dead(self, item_id: int, error: str, *, now: float | None = None) -> None:
        self._outbox_update(item_id, now, state="dead", last_error=error)

    def release(self, item_ids: Sequence[int], at: float, *, now: float | None = None) -> None:
        """Give claimed items back, due at ``at``, without counting the claim as an attempt (the drainer had no
        send slot for them; nothing was tried)."""
        if not item_ids:
            return
        t = s.outbox
        with self._writing() as conn:
            conn.execute(
                update(t)
                .where(t.c.id.in_(list(item_ids)), t.c.state == "pending")
                .values(
                    attempts=func.max(t.c.attempts - 1, 0)
                    if self.dialect == "sqlite"
                    else func.greatest(t.c.attempts - 1, 0),
                    next_attempt_at=to_us(at),
                    updated_at=to_us(self._clock() if now is None else now),
                )
            )

    def thread_get(self, key: str) -> tuple[str, str] | None:
        """(channel, ts) of the chat thread started for ``key``, or None."""
        t = s.notify_threads
        with self._read.begin() as conn:
            row = conn.execute(select(t.c.channel, t.c.ts).where(t.c.key == key)).first()
        return None if row is None else (str(row.channel), str(row.ts))

    def thread_put(self, key: str, channel: str, ts: str, *, now: float | None = None) -> None:
        """Remember where the thread for ``key`` started; the first one stays (later puts are ignored)."""
        at = to_us(self._clock() if now is None else now)
        stmt = (
            self._insert(s.notify_threads)
            .values(key=key, channel=channel, ts=ts, created_at=at)
            .on_conflict_do_nothing(index_elements=["key"])
        )
        with self._writing() as conn:
            conn.execute(stmt)

    def outbox_item(self, item_id: int) -> OutboxItem | None:
        """One outbox message by id (any state), or None."""
        with self._read.begin() as conn:
            row = conn.execute(select(s.outbox).where(s.outbox.c.id == item_id)).first()
        return None if row is None else _outbox_from_row(row)

    def _outbox_update(self, item_id: int, now: float | None, **values: Any) -> None:
        at = to_us(self._clock() if now is None else now)
        with self._writing() as conn:
            res = conn.execute(
                update(s.outbox).where(s.outbox.c.id == item_id).values(updated_at=at, **values)
            )
            if res.rowcount == 0:
                raise KeyError(f"outbox item {item_id} not found")

    def outbox(self, *, state: str | None = None, limit: int = DEFAULT_LIMIT) -> list[OutboxItem]:
        q = select(s.outbox)
        if state is not None:
            q = q.where(s.outbox.c.state == state)
        q = q.order_by(s.outbox.c.id).limit(_limit(limit))
        with self._read.begin() as conn:
            return [_outbox_from_row(r) for r in conn.execute(q)]

    def _writing(self) -> _WriteTx:
        return _WriteTx(self)

    # ------------------------------------------------------------------ retention
    def size_bytes(self) -> int:
        """Bytes the data occupies (SQLite: used pages; PostgreSQL: the database size)."""
        with self._read.begin() as conn:
            if self.dialect == "sqlite":
                pages = conn.exec_driver_sql("PRAGMA page_count").scalar_one()
                free = conn.exec_driver_sql("PRAGMA freelist_count").scalar_one()
                size = conn.exec_driver_sql("PRAGMA page_size").scalar_one()
                return int((pages - free) * size)
            return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())

    def oldest_observed(self) -> float | None:
        with self._read.begin() as conn:
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
        total = self._drop_partitions(cut, batch_rows, max_batches) if self._partitions is not None else 0
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
        with self._writing() as conn:  # a handful of rows per workload: one statement
            result = conn.execute(delete(s.notify_threads).where(s.notify_threads.c.created_at < cut))
            total += max(0, int(result.rowcount or 0))
        for tbl, ids_q in plans:
            for _ in range(max_batches):
                with self._writing() as conn:
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
        assert self._partitions is not None
        total = 0
        try:
            for table in PARTITIONED:
                with self._write.begin() as conn:
                    total += drop_partitions_before(conn, table, cut)
                for _ in range(max_batches):
                    with self._write.begin() as conn:
                        n = trim_keys_before(conn, table, cut, batch_rows)
                    if n < batch_rows:
                        break
        except (OperationalError, DBAPIError) as exc:
            raise StoreWriteError(describe_db_error(self.url, exc) + " (partition drop rolled back)") from exc
        finally:
            self._partitions.forget()
        return total

    def partitions(self) -> dict[str, list[str]]:
        """PostgreSQL: the partitions of each partitioned table, oldest first ({} on SQLite)."""
        if self._partitions is None:
            return {}
        with self._read.connect() as conn:
            return {table: [p.name for p in list_partitions(conn, table)] for table in PARTITIONED}

    def vacuum(self) -> None:
        """Give freed pages back to the file system (SQLite: incremental checkpoint + VACUUM; PG: nothing)."""
        if self.dialect == "sqlite":
            with self._write.connect() as conn:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")


class _WriteTx:
    """Context manager: one serialized write transaction whose database errors become StoreWriteError."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._cm: Any = None

    def __enter__(self) -> Connection:
        self._store._write_lock.acquire()
        try:
            self._cm = self._store._write.begin()
            conn: Connection = self._cm.__enter__()
        except (OperationalError, DBAPIError) as exc:
            self._store._write_lock.release()
            raise StoreWriteError(describe_db_error(self._store.url, exc)) from exc
        except BaseException:
            self._store._write_lock.release()
            raise
        return conn

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        try:
            self._cm.__exit__(et, ev, tb)
        except (OperationalError, DBAPIError) as exc:
            if not isinstance(exc, IntegrityError):
                raise StoreWriteError(
                    describe_db_error(self._store.url, exc) + " (write rolled back)"
                ) from exc
            raise
        finally:
            self._store._write_lock.release()
        if isinstance(ev, (OperationalError, DBAPIError)) and not isinstance(ev, IntegrityError):
            raise StoreWriteError(describe_db_error(self._store.url, ev) + " (write rolled back)") from ev


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


def _write_engine_entries_partitioned(
    conn: Connection, immutable: list[EngineEntry], mutable: list[EngineEntry], inserted: dict[str, int]
) -> None:
    """Engine entries on PostgreSQL: new keys are inserted; a mutable entry already stored (an ACL LOG entry whose
    count rose) is updated in whichever day's partition holds it."""
    rows = _claim_keys(conn, "engine_entries", [_entry_row(e) for e in (*immutable, *mutable)])
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
def _sqlite_insert_ignore(conn: Connection, table: Any, rows: list[dict[str, Any]]) -> int:
    """The hot path of ingest on SQLite: one DB-API executemany with JSON pre-encoded, skipping SQLAlchemy's
    per-row parameter processing; sqlite3's rowcount of an executemany is the number of rows inserted."""
    cols = [c.name for c in table.columns if c.name in rows[0]]
    json_cols = {c.name for c in table.columns if isinstance(c.type, JSON)}
    sql = (
        f"INSERT INTO {table.name} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
        "ON CONFLICT DO NOTHING"
    )
    params = [
        tuple((None if r[c] is None else jsontext.dumps(r[c])) if c in json_cols else r[c] for c in cols)
        for r in rows
    ]
    result = conn.exec_driver_sql(sql, params)
    return max(int(result.rowcount), 0)


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
    f"INSERT INTO object_state ({', '.join(_STATE_COLUMNS)}) VALUES ({', '.join('?' * len(_STATE_COLUMNS))}) "
    "ON CONFLICT (source, uid) DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in _STATE_COLUMNS[2:])
)


def _sqlite_upsert_states(conn: Connection, states: Sequence[ObjectState], now_us: int) -> None:
    """The other half of the SQLite ingest hot path: last states upserted with one DB-API executemany, the object
    JSON taken as the diff builder already encoded it."""
    conn.exec_driver_sql(
        _SQLITE_STATE_UPSERT,
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


def _limit(limit: int) -> int:
    return max(1, min(int(limit), MAX_LIMIT))


def _page(q: Select[Any], time_col: Any, id_col: Any, after: Position | None, limit: int) -> Select[Any]:
    """``q`` in (time, id) order from just after ``after``, at most ``limit`` rows (one more than MAX_LIMIT may be
    asked for, so a caller can tell a full last page from a page with more after it). The keyset condition is
    written as ``time >= t AND (time > t OR id > i)`` so both back ends range-scan the time index."""
    if after is not None:
        t_us, row_id = after
        q = q.where(time_col >= t_us, or_(time_col > t_us, id_col > row_id))
    return q.order_by(time_col, id_col).limit(max(1, min(int(limit), MAX_LIMIT + 1)))


def position_of(record: ObjectChange | KubeEvent | EngineEntry | Gap | Restart) -> Position:
    """The keyset position of a record a listing returned: (its ordering time in µs, its row id)."""
    if record.id is None:
        raise ValueError("a record not read from the store has no position")
    at = record.happened_at if isinstance(record, EngineEntry) else record.observed_at
    return to_us(at), record.id


def _window(q: Select[Any], col: Any, since: float | None, until: float | None) -> Select[Any]:
    conds = []
    if since is not None:
        conds.append(col >= to_us(since))
    if until is not None:
        conds.append(col <= to_us(until))
    return q.where(and_(*conds)) if conds else q


def _last_per_key(states: Sequence[ObjectState]) -> list[ObjectState]:
    out: dict[tuple[str, str], ObjectState] = {}
    for st in states:
        out[(st.source, st.uid)] = st
    return list(out.values())


def _change_row(c: ObjectChange) -> dict[str, Any]:
    return {
        "source": c.source,
        "observed_at": to_us(c.observed_at),
        "kind": c.kind,
        "api_version": c.api_version,
        "namespace": c.namespace,
        "name": c.name,
        "uid": c.uid,
        "resource_version": c.resource_version,
        "change_type": c.change_type,
        "observed_via": c.observed_via,
        "version_seq": c.version_seq,
        "patch": c.patch,
        "snapshot": c.snapshot,
    }


def _change_from_row(r: Row[Any]) -> ObjectChange:
    return ObjectChange(
        source=r.source,
        observed_at=from_us(r.observed_at),
        kind=r.kind,
        api_version=r.api_version,
        namespace=r.namespace,
        name=r.name,
        uid=r.uid,
        resource_version=r.resource_version,
        change_type=r.change_type,
        observed_via=r.observed_via,
        version_seq=r.version_seq,
        patch=r.patch,
        snapshot=r.snapshot,
        id=r.id,
    )


def _state_row(st: ObjectState, now_us: int) -> dict[str, Any]:
    return {
        "source": st.source,
        "uid": st.uid,
        "kind": st.kind,
        "api_version": st.api_version,
        "namespace": st.namespace,
        "name": st.name,
        "resource_version": st.resource_version,
        "version_seq": st.version_seq,
        "object": st.object,
        "updated_at": now_us,
    }


def _event_row(e: KubeEvent) -> dict[str, Any]:
    return {
        "source": e.source,
        "uid": e.uid,
        "resource_version": e.resource_version,
        "observed_at": to_us(e.observed_at),
        "event_time": None if e.event_time is None else to_us(e.event_time),
        "namespace": e.namespace,
        "name": e.name,
        "reason": e.reason,
        "type": e.type,
        "message": e.message,
        "count": e.count,
        "involved_uid": e.involved_uid,
        "involved_kind": e.involved_kind,
        "involved_namespace": e.involved_namespace,
        "involved_name": e.involved_name,
        "payload": e.payload,
    }


def _event_from_row(r: Row[Any]) -> KubeEvent:
    return KubeEvent(
        source=r.source,
        uid=r.uid,
        resource_version=r.resource_version,
        observed_at=from_us(r.observed_at),
        event_time=None if r.event_time is None else from_us(r.event_time),
        namespace=r.namespace,
        name=r.name,
        reason=r.reason,
        type=r.type,
        message=r.message,
        count=r._mapping["count"],
        involved_uid=r.involved_uid,
        involved_kind=r.involved_kind,
        involved_namespace=r.involved_namespace,
        involved_name=r.involved_name,
        payload=r.payload,
        id=r.id,
    )


def _entry_row(e: EngineEntry) -> dict[str, Any]:
    return {
        "target": e.target,
        "log": e.log,
        "run_id": e.run_id,
        "native_id": e.native_id,
        "happened_at": to_us(e.happened_at),
        "observed_at": to_us(e.observed_at),
        "payload": e.payload,
    }


def _entry_from_row(r: Row[Any]) -> EngineEntry:
    return EngineEntry(
        target=r.target,
        log=r.log,
        run_id=r.run_id,
        native_id=r.native_id,
        happened_at=from_us(r.happened_at),
        observed_at=from_us(r.observed_at),
        payload=r.payload,
        id=r.id,
    )


def _gap_row(g: Gap) -> dict[str, Any]:
    return {
        "source": g.source,
        "log": g.log,
        "key": g.key,
        "observed_at": to_us(g.observed_at),
        "lost": g.lost,
        "reason": g.reason,
        "detail": g.detail,
    }


def _restart_row(r: Restart) -> dict[str, Any]:
    return {
        "pod_uid": r.pod_uid,
        "namespace": r.namespace,
        "pod": r.pod,
        "container": r.container,
        "container_type": r.container_type,
        "restart_count": r.restart_count,
        "observed_at": to_us(r.observed_at),
        "reason": r.reason,
        "exit_code": r.exit_code,
        "reported_state": r.reported_state,
    }


def _outbox_from_row(r: Row[Any]) -> OutboxItem:
    return OutboxItem(
        id=r.id,
        destination=r.destination,
        payload=r.payload,
        dedupe_key=r.dedupe_key,
        state=r.state,
        attempts=r.attempts,
        next_attempt_at=from_us(r.next_attempt_at),
        last_error=r.last_error,
        created_at=from_us(r.created_at),
        updated_at=from_us(r.updated_at),
    )
