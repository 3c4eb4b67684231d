"""The outbox seam: what the drainer needs from persistent storage, and an in-memory stand-in for unit tests.

The protocol matches :class:`capstan.store.Outbox` (the store's ``store.outbox``), so it plugs in directly; the
notifier never imports the store. Semantics (kept by both): ``enqueue`` is idempotent on ``dedupe_key``; ``claim_due``
returns pending items due at ``now`` in enqueue order, counts an attempt on each and leases it until
``now + lease_seconds``; ``mark_retry`` puts an item back as pending at a later time; ``release`` gives claimed
items back due at a later time without counting the claim (nothing was tried); ``mark_dead`` keeps it, visible,
in the dead state.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

OutboxState = Literal["pending", "sent", "dead"]


class OutboxEntry(Protocol):
    """One message in the outbox (read-only view)."""

    @property
    def id(self) -> int: ...
    @property
    def destination(self) -> str: ...
    @property
    def payload(self) -> dict[str, Any]: ...
    @property
    def dedupe_key(self) -> str: ...
    @property
    def state(self) -> OutboxState: ...
    @property
    def attempts(self) -> int: ...
    @property
    def next_attempt_at(self) -> float: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def created_at(self) -> float: ...


class Outbox(Protocol):
    """Persistent queue of notifications (implemented by :class:`capstan.store.Outbox`)."""

    def enqueue(
        self, destination: str, payload: dict[str, Any], dedupe_key: str, *, now: float | None = None
    ) -> OutboxEntry | None: ...

    def claim_due(self, now: float, limit: int, *, lease_seconds: float = 60.0) -> list[Any]: ...

    def mark_sent(self, item_id: int, *, now: float | None = None) -> None: ...

    def mark_retry(self, item_id: int, at: float, error: str, *, now: float | None = None) -> None: ...

    def mark_dead(self, item_id: int, error: str, *, now: float | None = None) -> None: ...

    def release(self, item_ids: Sequence[int], at: float, *, now: float | None = None) -> None: ...

    def items(self, *, state: str | None = None, limit: int = 100) -> list[Any]: ...


@dataclass(frozen=True)
class MemoryOutboxItem:
    id: int
    destination: str
    payload: dict[str, Any]
    dedupe_key: str
    state: OutboxState
    attempts: int
    next_attempt_at: float
    last_error: str | None
    created_at: float
    updated_at: float


class MemoryOutbox:
    """An in-memory outbox with the store's semantics, for unit tests of the drainer (lost on restart)."""

    def __init__(self) -> None:
        self._items: dict[int, MemoryOutboxItem] = {}
        self._keys: set[str] = set()
        self._next_id = 1

    def enqueue(
        self, destination: str, payload: dict[str, Any], dedupe_key: str, *, now: float | None = None
    ) -> MemoryOutboxItem | None:
        if dedupe_key in self._keys:
            return None
        at = 0.0 if now is None else now
        item = MemoryOutboxItem(
            self._next_id, destination, copy.deepcopy(payload), dedupe_key, "pending", 0, at, None, at, at
        )
        self._items[item.id] = item
        self._keys.add(dedupe_key)
        self._next_id += 1
        return item

    def claim_due(self, now: float, limit: int, *, lease_seconds: float = 60.0) -> list[MemoryOutboxItem]:
        due = sorted(
            (i for i in self._items.values() if i.state == "pending" and i.next_attempt_at <= now),
            key=lambda i: i.id,
        )[: max(0, limit)]
        claimed = []
        for item in due:
            updated = replace(
                item, attempts=item.attempts + 1, next_attempt_at=now + lease_seconds, updated_at=now
            )
            self._items[item.id] = updated
            claimed.append(updated)
        return claimed

    def _update(self, item_id: int, now: float | None, **values: Any) -> None:
        if item_id not in self._items:
            raise KeyError(f"outbox item {item_id} not found")
        item = self._items[item_id]
        self._items[item_id] = replace(item, updated_at=item.updated_at if now is None else now, **values)

    def mark_sent(self, item_id: int, *, now: float | None = None) -> None:
        self._update(item_id, now, state="sent", last_error=None)

    def mark_retry(self, item_id: int, at: float, error: str, *, now: float | None = None) -> None:
        self._update(item_id, now, state="pending", next_attempt_at=at, last_error=error)

    def mark_dead(self, item_id: int, error: str, *, now: float | None = None) -> None:
        self._update(item_id, now, state="dead", last_error=error)

    def release(self, item_ids: Sequence[int], at: float, *, now: float | None = None) -> None:
        for item_id in item_ids:
            item = self._items[item_id]
            if item.state == "pending":
                self._update(item_id, now, attempts=max(0, item.attempts - 1), next_attempt_at=at)

    def items(self, *, state: str | None = None, limit: int = 100) -> list[MemoryOutboxItem]:
        items = [
            i for i in sorted(self._items.values(), key=lambda i: i.id) if state is None or i.state == state
        ]
        return items[: max(0, limit)]
