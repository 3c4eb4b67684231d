"""Gap-aware cursor logic for Redis/Valkey logs, as pure functions of (stored cursor, what the server returned).

Each Redis/Valkey log (SLOWLOG, ACL LOG, COMMANDLOG) is a ring with monotonically increasing ids that restart at 0 with the server process. Given the
cursor from the store and one poll's entries, :func:`plan_ring` decides which entries are new, whether the ring
overwrote entries since the last poll (a gap with the exact lost count: the ids are consecutive), and whether the
server restarted (run id changed, or ids went backwards). The shell in ``_redis.py`` only fetches and writes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from capstan.store import Batch, EngineCursor, EngineEntry, Gap

JsonDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RingEntry:
    """One entry of a ring log as read from the server. ``updated_ms`` is set for entries that mutate (ACL LOG)."""

    id: int
    happened_at: float
    payload: JsonDict
    updated_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What identifies one server process: ``run_id`` changes on every restart; ``name`` is ``redis`` or
    ``valkey`` (INFO's ``server_name``), ``version`` that server's own version (``valkey_version`` on Valkey,
    whose ``redis_version`` is a compatibility number)."""

    run_id: str
    uptime_s: float
    version: str
    name: str = "redis"

    def stamp(self, entries: Sequence[EngineEntry]) -> list[EngineEntry]:
        """The entries with the server they came from in their payload: ``server`` and ``server_version``."""
        return [
            replace(e, payload={**e.payload, "server": self.name, "server_version": self.version})
            for e in entries
        ]


@dataclass(slots=True)
class PollPlan:
    """What one poll of one target writes: entries, gaps and the new cursors, in one transaction."""

    batch: Batch = field(default_factory=Batch)

    def add(self, entries: Sequence[EngineEntry], gaps: Sequence[Gap], cursor: EngineCursor | None) -> None:
        self.batch.engine_entries.extend(entries)
        self.batch.gaps.extend(gaps)
        if cursor is not None:
            self.batch.engine_cursors.append(cursor)


def plan_server(
    target: str, info: ServerInfo, cursor: EngineCursor | None, *, observed_at: float
) -> tuple[list[EngineEntry], EngineCursor]:
    """Record a server restart when the run id differs from the stored one (first sight records nothing)."""
    entries: list[EngineEntry] = []
    if cursor is not None and cursor.run_id != info.run_id:
        entries.append(
            EngineEntry(
                target=target,
                log="restart",
                run_id=info.run_id,
                native_id=info.run_id,
                happened_at=observed_at - info.uptime_s,
                observed_at=observed_at,
                payload={
                    "previous_run_id": cursor.run_id,
                    "run_id": info.run_id,
                    "uptime_s": info.uptime_s,
                    "version": info.version,
                },
            )
        )
    return entries, EngineCursor(
        target, "server", info.run_id, 0, {"version": info.version, "server": info.name}
    )


def plan_ring(
    target: str,
    log: str,
    run_id: str,
    cursor: EngineCursor | None,
    entries: Sequence[RingEntry],
    *,
    observed_at: float,
    mutable: bool = False,
) -> tuple[list[EngineEntry], list[Gap], EngineCursor]:
    """New entries, gaps and the next cursor for one poll of one ring log (see the module docstring).

    Mutable logs (ACL LOG) also re-emit an already stored entry whose ``updated_ms`` grew, so its merged
    ``count`` and last-updated time stay current; the cursor state remembers ``updated_ms`` per id in the ring.
    """
    gaps: list[Gap] = []
    last = -1
    restarted = False
    if cursor is not None:
        last = cursor.last_id
        if cursor.run_id != run_id:
            restarted = True
            gaps.append(
                Gap(
                    source=target,
                    log=log,
                    key=f"restart:{cursor.run_id}->{run_id}",
                    observed_at=observed_at,
                    lost=None,
                    reason="server restarted: entries logged after the last poll of the old process are unknown",
                    detail={"previous_run_id": cursor.run_id, "run_id": run_id, "last_id": cursor.last_id},
                )
            )
            last = -1
        elif entries and max(e.id for e in entries) < last:
            restarted = True
            gaps.append(
                Gap(
                    source=target,
                    log=log,
                    key=f"reset:{run_id}:{last}",
                    observed_at=observed_at,
                    lost=None,
                    reason="entry ids went backwards without a new run id (log reset): later entries unknown",
                    detail={"run_id": run_id, "last_id": last, "max_id": max(e.id for e in entries)},
                )
            )
            last = -1
    known: Mapping[str, Any] = {} if (cursor is None or restarted) else cursor.state.get("updated", {})
    fresh = sorted((e for e in entries if e.id > last), key=lambda e: e.id)
    if fresh and cursor is not None:
        first = fresh[0].id
        # After a restart ids start again at 0, so ids below the first one we see were lost, exactly.
        expected = 0 if restarted else last + 1
        if first > expected:
            gaps.append(
                Gap(
                    source=target,
                    log=log,
                    key=f"{run_id}:{expected}-{first - 1}",
                    observed_at=observed_at,
                    lost=first - expected,
                    reason="ring overwrote entries before they were read",
                    detail={"run_id": run_id, "first_lost_id": expected, "last_lost_id": first - 1},
                )
            )
    out = [_entry(target, log, run_id, e, observed_at, mutable) for e in fresh]
    if mutable:
        for e in entries:
            if e.id <= last and e.updated_ms is not None and e.updated_ms > int(known.get(str(e.id), -1)):
                out.append(_entry(target, log, run_id, e, observed_at, mutable))
    new_last = max([last, *(e.id for e in fresh)])
    state: JsonDict = {}
    if mutable:
        state["updated"] = {str(e.id): e.updated_ms for e in entries if e.updated_ms is not None}
    return out, gaps, EngineCursor(target, log, run_id, new_last, state)


def _entry(
    target: str, log: str, run_id: str, e: RingEntry, observed_at: float, mutable: bool
) -> EngineEntry:
    return EngineEntry(
        target=target,
        log=log,
        run_id=run_id,
        native_id=str(e.id),
        happened_at=e.happened_at,
        observed_at=observed_at,
        payload=e.payload,
        mutable=mutable,
    )


def plan_config(
    target: str,
    run_id: str,
    cursor: EngineCursor | None,
    config: Mapping[str, str],
    *,
    observed_at: float,
    ignore: frozenset[str] = frozenset(),
    redact: Callable[[str, str], str] = lambda _name, value: value,
) -> tuple[list[EngineEntry], EngineCursor]:
    """Each parameter whose value differs from the stored snapshot becomes one ``config`` record.

    The first snapshot is only stored (there is nothing to compare with). ``last_id`` counts the changes ever
    recorded for the target and is the native id, so re-running a poll after a crash writes nothing twice.
    ``redact(name, value)`` is applied to both the server's values and the stored snapshot's before they are
    compared (it must be idempotent and keyed: a secret parameter is stored and compared as its keyed hash, and a
    snapshot stored before redaction compares equal to the same value redacted, so no record shows it).
    """
    current = {k: redact(k, v) for k, v in config.items() if k not in ignore}
    if cursor is None:
        return [], EngineCursor(target, "config", run_id, 0, {"config": current})
    before = {k: redact(k, v) for k, v in cursor.state.get("config", {}).items()}
    seq = cursor.last_id
    out: list[EngineEntry] = []
    for key in sorted(set(before) | set(current)):
        old, new = before.get(key), current.get(key)
        if old == new:
            continue
        seq += 1
        out.append(
            EngineEntry(
                target=target,
                log="config",
                run_id=run_id,
                native_id=str(seq),
                happened_at=observed_at,
                observed_at=observed_at,
                payload={
                    "parameter": key,
                    "old": old,
                    "new": new,
                    "server_restarted": cursor.run_id != run_id,
                },
            )
        )
    return out, EngineCursor(target, "config", run_id, seq, {"config": current})


def plan_acllog_without_ids(
    target: str,
    run_id: str,
    cursor: EngineCursor | None,
    newest_first: Sequence[JsonDict],
    *,
    observed_at: float,
) -> tuple[list[EngineEntry], EngineCursor]:
    """ACL LOG of servers before Redis 7.2 (no ``entry-id``): identities derived from (reason, context, object,
    username), best effort.

    Only the newest entry of a key can still merge (the server merges within 60 s), so it is tracked as live: the
    same key with a count at least the stored one is the same entry (re-emitted when the count grew); a smaller
    count is a new entry. Entries behind it are frozen and were recorded when first seen. Lost entries cannot be
    counted without ids, so no gap records come from this path.
    """
    restarted = cursor is None or cursor.run_id != run_id
    state: JsonDict = {} if restarted or cursor is None else dict(cursor.state)
    live: dict[str, Any] = dict(state.get("live", {}))
    next_id = int(state.get("next_id", 0))
    first_poll = cursor is None or restarted
    out: list[EngineEntry] = []
    seen_keys: set[str] = set()
    for d in newest_first:
        key = "\x1f".join(str(d.get(k, "")) for k in ("reason", "context", "object", "username"))
        count = int(d.get("count", 0))
        age = float(d.get("age_seconds", 0.0))
        if key in seen_keys:
            if not first_poll:
                continue  # an older, frozen entry of a key: recorded when it was first seen
            ident = next_id
            next_id += 1
        else:
            seen_keys.add(key)
            known = live.get(key)
            if known is not None and count >= int(known["count"]):
                if count == int(known["count"]):
                    continue
                ident = int(known["id"])
            else:
                ident = next_id
                next_id += 1
            live[key] = {"id": ident, "count": count}
        payload = {**d, "entry_id": None, "derived_id": ident}
        out.append(
            EngineEntry(
                target=target,
                log="acllog",
                run_id=run_id,
                native_id=f"derived-{ident}",
                happened_at=observed_at - age,
                observed_at=observed_at,
                payload=payload,
                mutable=True,
            )
        )
    new_state: JsonDict = {"live": live, "next_id": next_id, "derived": True}
    return out, EngineCursor(target, "acllog", run_id, next_id - 1, new_state)
