"""The history: batched writes of what the recorders observed, their cursors, and every query over it.

:class:`HistoryStore` is one database's history (object changes, last object states, Kubernetes Events, engine
entries, gaps, and the restart records as readers see them). Writers (the recorders) use :meth:`~HistoryStore.write`
and the cursor reads (the :class:`HistoryWriter` protocol); readers (the HTTP API, the CLI, the restart watcher's
evidence) use the listings and the object rebuilds (the :class:`HistoryReader` protocol).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import jsonpatch
from sqlalchemy import Connection, Select, func, select
from sqlalchemy.engine import URL, Row

from capstan.redact import RedactionPolicy, Redactor
from capstan.store import _rows
from capstan.store import _schema as s
from capstan.store._batchwrite import BatchWrites
from capstan.store._cursor import Position
from capstan.store._database import Database
from capstan.store._keys import RedactionKeys
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
    Restart,
    WriteResult,
    from_us,
    to_us,
)
from capstan.store._rows import DEFAULT_LIMIT

MAX_PATCH_CHAIN = 100_000
T = TypeVar("T")


class StoreCorruptHistory(RuntimeError):
    """A version cannot be rebuilt (no snapshot before it): should never happen; retention keeps snapshots."""


class HistoryWriter(Protocol):
    """What a recorder needs: transactional batch writes, its cursors and last states, and the store's redactor."""

    def write(self, batch: Batch) -> WriteResult: ...

    def kind_cursor(self, source: str, kind: str) -> KindCursor | None: ...

    def object_states(self, source: str, kind: str | None = None) -> dict[str, ObjectState]: ...

    def engine_cursor(self, target: str, log_name: str) -> EngineCursor | None: ...

    def redactor(self, policy: RedactionPolicy | None = None, *, create_key: bool = True) -> Redactor: ...


class HistoryReader(Protocol):
    """What a reader of the history needs (the HTTP API, the CLI's queries): the listings, paged by keyset
    :data:`Position`, and the objects rebuilt at a time."""

    @property
    def url(self) -> URL: ...

    def schema_revision(self) -> str | None: ...

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
    ) -> list[ObjectChange]: ...

    def object_at(
        self, kind: str, namespace: str, name: str, at: float, *, source: str | None = None
    ) -> ObjectVersion | None: ...

    def diff(
        self, kind: str, namespace: str, name: str, since: float, until: float, *, source: str | None = None
    ) -> ObjectDiff: ...

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
    ) -> list[KubeEvent]: ...

    def engine_entries(
        self,
        *,
        target: str | None = None,
        log_name: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = DEFAULT_LIMIT,
        after: Position | None = None,
    ) -> list[EngineEntry]: ...

    def gaps(
        self,
        *,
        source: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = DEFAULT_LIMIT,
        after: Position | None = None,
    ) -> list[Gap]: ...

    def restarts(
        self,
        *,
        namespace: str | None = None,
        pod: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = DEFAULT_LIMIT,
        after: Position | None = None,
    ) -> list[Restart]: ...


class HistoryStore:
    """One database's history (see the module docstring); a :class:`HistoryWriter` and a
    :class:`HistoryReader`."""

    def __init__(self, db: Database, writes: BatchWrites, keys: RedactionKeys) -> None:
        self._db = db
        self._writes = writes
        self._keys = keys

    @property
    def url(self) -> URL:
        return self._db.url

    def schema_revision(self) -> str | None:
        return self._db.schema_revision()

    # ------------------------------------------------------------------ writes
    def write(self, batch: Batch) -> WriteResult:
        """Write a batch in ONE transaction; idempotent. Raises StoreWriteError (rolled back) on failure."""
        return self._writes.write(batch)

    def add_commit_listener(self, listener: Callable[[Batch], None]) -> None:
        """Call ``listener(batch)`` after each successful commit (OTLP export, live feeds). Errors are logged."""
        self._writes.add_commit_listener(listener)

    def redactor(self, policy: RedactionPolicy | None = None, *, create_key: bool = True) -> Redactor:
        """The redactor keyed with this database's redaction key (:meth:`RedactionKeys.redactor`)."""
        return self._keys.redactor(policy, create_key=create_key)

    # ------------------------------------------------------------------ cursors and state
    def kind_cursor(self, source: str, kind: str) -> KindCursor | None:
        with self._db.read_sql_engine.begin() as conn:
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
        with self._db.read_sql_engine.begin() as conn:
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
        with self._db.read_sql_engine.begin() as conn:
            row = conn.execute(
                select(s.engine_cursors).where(
                    s.engine_cursors.c.target == target, s.engine_cursors.c.log == log_name
                )
            ).first()
        return None if row is None else EngineCursor(row.target, row.log, row.run_id, row.last_id, row.state)

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
        filters = {"source": source, "kind": kind, "namespace": namespace, "name": name, "uid": uid}
        q = _rows.listing_query(s.object_changes, filters, since=since, until=until, after=after, limit=limit)
        return self._list(q, _rows.change_from_row)

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
        with self._db.read_sql_engine.begin() as conn:
            hit = conn.execute(q).first()
            if hit is None:
                return None
            return self._rebuild(conn, hit.source, hit.uid, hit.version_seq)

    def version(self, source: str, uid: str, version_seq: int) -> ObjectVersion:
        """Rebuild one recorded version of an object."""
        with self._db.read_sql_engine.begin() as conn:
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
        filters = {"involved_uid": involved_uid, "namespace": namespace, "involved_name": involved_name}
        q = _rows.listing_query(s.kube_events, filters, since=since, until=until, after=after, limit=limit)
        return self._list(q, _rows.event_from_row)

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
        q = _rows.listing_query(
            s.engine_entries,
            {"target": target, "log": log_name},
            time_column="happened_at",
            since=since,
            until=until,
            after=after,
            limit=limit,
        )
        return self._list(q, _rows.entry_from_row)

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
        q = _rows.listing_query(
            s.gaps, {"source": source}, since=since, until=until, after=after, limit=limit
        )
        return self._list(q, _rows.gap_from_row)

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
        filters = {"namespace": namespace, "pod": pod}
        q = _rows.listing_query(s.restarts, filters, since=since, until=until, after=after, limit=limit)
        return self._list(q, _rows.restart_from_row)

    def _list(self, q: Select[Any], from_row: Callable[[Row[Any]], T]) -> list[T]:
        """The records of one listing query, read in one short read transaction."""
        with self._db.read_sql_engine.begin() as conn:
            return [from_row(r) for r in conn.execute(q)]
