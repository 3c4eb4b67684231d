"""Records to rows and back, and the one query shape every listing shares (:func:`listing_query`).

A listing is a table's rows matching equality filters, in a time window, ordered by (time, row id), going on from a
:data:`~capstan.store.Position` (see :mod:`capstan.store._cursor`); the limits are the store's, whatever the caller
asks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Select, Table, and_, or_, select
from sqlalchemy.engine import Row

from capstan.store._cursor import Position
from capstan.store._models import (
    EngineEntry,
    Gap,
    KubeEvent,
    ObjectChange,
    ObjectState,
    OutboxItem,
    Restart,
    from_us,
    to_us,
)

DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000


def clamp_limit(limit: int) -> int:
    """``limit`` within [1, MAX_LIMIT]."""
    return max(1, min(int(limit), MAX_LIMIT))


def listing_query(
    table: Table,
    filters: Mapping[str, str | None],
    *,
    time_column: str = "observed_at",
    since: float | None,
    until: float | None,
    after: Position | None,
    limit: int,
) -> Select[Any]:
    """Every column of ``table``'s rows whose columns equal ``filters`` (column name to value; None: no filter, in
    the order given), with ``time_column`` in [since, until], one keyset page of them (:func:`page`, by
    (``time_column``, ``id``))."""
    q = select(table)
    for column, value in filters.items():
        if value is not None:
            q = q.where(table.c[column] == value)
    time_col = table.c[time_column]
    return page(window(q, time_col, since, until), time_col, table.c.id, after, limit)


def page(q: Select[Any], time_col: Any, id_col: Any, after: Position | None, limit: int) -> Select[Any]:
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


def window(q: Select[Any], col: Any, since: float | None, until: float | None) -> Select[Any]:
    conds = []
    if since is not None:
        conds.append(col >= to_us(since))
    if until is not None:
        conds.append(col <= to_us(until))
    return q.where(and_(*conds)) if conds else q


def last_per_key(states: Sequence[ObjectState]) -> list[ObjectState]:
    out: dict[tuple[str, str], ObjectState] = {}
    for st in states:
        out[(st.source, st.uid)] = st
    return list(out.values())


def change_row(c: ObjectChange) -> dict[str, Any]:
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


def change_from_row(r: Row[Any]) -> ObjectChange:
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


def state_row(st: ObjectState, now_us: int) -> dict[str, Any]:
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


def event_row(e: KubeEvent) -> dict[str, Any]:
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


def event_from_row(r: Row[Any]) -> KubeEvent:
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


def entry_row(e: EngineEntry) -> dict[str, Any]:
    return {
        "target": e.target,
        "log": e.log,
        "run_id": e.run_id,
        "native_id": e.native_id,
        "happened_at": to_us(e.happened_at),
        "observed_at": to_us(e.observed_at),
        "payload": e.payload,
    }


def entry_from_row(r: Row[Any]) -> EngineEntry:
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


def gap_row(g: Gap) -> dict[str, Any]:
    return {
        "source": g.source,
        "log": g.log,
        "key": g.key,
        "observed_at": to_us(g.observed_at),
        "lost": g.lost,
        "reason": g.reason,
        "detail": g.detail,
    }


def restart_row(r: Restart) -> dict[str, Any]:
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


def outbox_from_row(r: Row[Any]) -> OutboxItem:
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


def gap_from_row(r: Row[Any]) -> Gap:
    return Gap(r.source, r.log, r.key, from_us(r.observed_at), r.lost, r.reason, r.detail, r.id)


def restart_from_row(r: Row[Any]) -> Restart:
    return Restart(
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
