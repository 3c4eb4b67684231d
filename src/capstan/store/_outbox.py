"""The notification outbox and the chat-thread index, the store's side of :mod:`capstan.notify`.

:class:`Outbox` implements :class:`capstan.notify.Outbox` (the drainer's seam) durably: ``enqueue`` is idempotent on
the dedupe key, ``claim_due`` leases due items (PostgreSQL: ``FOR UPDATE SKIP LOCKED``, so two drainers never take
the same one), and a crash loses no message. :class:`NotifyThreads` implements :class:`capstan.notify.ThreadIndex`,
so a digest threads under its workload's first report even when Capstan restarted in between.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, select, update

from capstan.store import _rows
from capstan.store import _schema as s
from capstan.store._database import Database
from capstan.store._models import JsonDict, OutboxItem, to_us
from capstan.store._rows import DEFAULT_LIMIT


class Outbox:
    """The persistent queue of notifications of one database (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def enqueue(
        self, destination: str, payload: JsonDict, dedupe_key: str, *, now: float | None = None
    ) -> OutboxItem | None:
        """Add a notification; returns None when ``dedupe_key`` is already in the outbox (idempotent)."""
        at = to_us(self._db.clock() if now is None else now)
        stmt = (
            self._db.insert(s.outbox)
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
        with self._db.writing() as conn:
            row = conn.execute(stmt.returning(*s.outbox.c)).first()
        return None if row is None else _rows.outbox_from_row(row)

    def claim_due(self, now: float, limit: int, *, lease_seconds: float = 60.0) -> list[OutboxItem]:
        """Pending items due at ``now`` in enqueue order; each claim counts an attempt and leases the item until
        ``now + lease_seconds`` so a second drainer does not take it meanwhile."""
        t = s.outbox
        q = (
            select(t)
            .where(t.c.state == "pending", t.c.next_attempt_at <= to_us(now))
            .order_by(t.c.id)
            .limit(_rows.clamp_limit(limit))
        )
        if self._db.dialect == "postgresql":
            q = q.with_for_update(skip_locked=True)
        with self._db.writing() as conn:
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
        return [_rows.outbox_from_row(by_id[i]) for i in ids]

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
        with self._db.writing() as conn:
            conn.execute(
                update(t)
                .where(t.c.id.in_(list(item_ids)), t.c.state == "pending")
                .values(
                    attempts=func.max(t.c.attempts - 1, 0)
                    if self._db.dialect == "sqlite"
                    else func.greatest(t.c.attempts - 1, 0),
                    next_attempt_at=to_us(at),
                    updated_at=to_us(self._db.clock() if now is None else now),
                )
            )

    def item(self, item_id: int) -> OutboxItem | None:
        """One outbox message by id (any state), or None."""
        with self._db.read_sql_engine.begin() as conn:
            row = conn.execute(select(s.outbox).where(s.outbox.c.id == item_id)).first()
        return None if row is None else _rows.outbox_from_row(row)

    def _outbox_update(self, item_id: int, now: float | None, **values: Any) -> None:
        at = to_us(self._db.clock() if now is None else now)
        with self._db.writing() as conn:
            res = conn.execute(
                update(s.outbox).where(s.outbox.c.id == item_id).values(updated_at=at, **values)
            )
            if res.rowcount == 0:
                raise KeyError(f"outbox item {item_id} not found")

    def items(self, *, state: str | None = None, limit: int = DEFAULT_LIMIT) -> list[OutboxItem]:
        """Messages in enqueue order, optionally in one state."""
        q = select(s.outbox)
        if state is not None:
            q = q.where(s.outbox.c.state == state)
        q = q.order_by(s.outbox.c.id).limit(_rows.clamp_limit(limit))
        with self._db.read_sql_engine.begin() as conn:
            return [_rows.outbox_from_row(r) for r in conn.execute(q)]


class NotifyThreads:
    """Where the chat thread of each key started (channel, ts); the first one stays."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def get(self, key: str) -> tuple[str, str] | None:
        """(channel, ts) of the chat thread started for ``key``, or None."""
        t = s.notify_threads
        with self._db.read_sql_engine.begin() as conn:
            row = conn.execute(select(t.c.channel, t.c.ts).where(t.c.key == key)).first()
        return None if row is None else (str(row.channel), str(row.ts))

    def put(self, key: str, channel: str, ts: str, *, now: float | None = None) -> None:
        """Remember where the thread for ``key`` started; the first one stays (later puts are ignored)."""
        at = to_us(self._db.clock() if now is None else now)
        stmt = (
            self._db.insert(s.notify_threads)
            .values(key=key, channel=channel, ts=ts, created_at=at)
            .on_conflict_do_nothing(index_elements=["key"])
        )
        with self._db.writing() as conn:
            conn.execute(stmt)
