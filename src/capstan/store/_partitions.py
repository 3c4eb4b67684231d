"""Daily range partitions of the history tables on PostgreSQL: created ahead of the writes, dropped by retention.

``object_changes``, ``kube_events`` and ``engine_entries`` are partitioned by ``observed_at``, one partition per UTC
day (``object_changes_p20261130`` holds [2026-11-30, 2026-12-01)). The writer makes sure the days a batch touches
exist (plus today and the next :data:`DAYS_AHEAD` days, so midnight needs no DDL on the hot path); retention
detaches and drops whole days that lie before its cutoff. Dropping a day of object changes would lose what later
versions are rebuilt from, so the rows retention keeps (per object, the newest snapshot before the cutoff and every
row after it) are first copied into a base partition that covers everything before the dropped days.

Locks: creating a partition takes a brief exclusive lock on the parent. Dropping takes SHARE locks on the old
partitions only (late writes into those days wait; writes into current days go on) while the kept rows are copied,
then an exclusive lock on the parent for the detach, drop and attach alone, with a lock timeout so a long reader
makes the pass retry later instead of queueing every writer behind it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

from capstan.store._schema import KEY_TABLE, PARTITION_KEYS

DAY_US = 86_400 * 1_000_000
DAYS_AHEAD = 2
LOCK_TIMEOUT = "5s"
MAX_CREATE_ATTEMPTS = 3
PARTITIONED = tuple(PARTITION_KEYS)
_BOUND = re.compile(r"FROM \((.+?)\) TO \((.+?)\)")


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition: [lower, upper) in microseconds; ``lower`` None is MINVALUE (the base partition)."""

    name: str
    lower: int | None
    upper: int

    def covers(self, day: int) -> bool:
        return (self.lower is None or self.lower <= day) and day < self.upper


def day_of(us: int) -> int:
    """The start of the UTC day holding ``us`` (microseconds since the epoch)."""
    return us // DAY_US * DAY_US


def partition_name(table: str, day: int) -> str:
    return f"{table}_p{datetime.fromtimestamp(day / 1_000_000, UTC):%Y%m%d}"


def base_name(table: str) -> str:
    return f"{table}_base"


def list_partitions(conn: Connection, table: str) -> list[Partition]:
    """The partitions of ``table`` from the catalog, oldest first."""
    rows = conn.execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = CAST(:t AS regclass)"
        ),
        {"t": table},
    ).all()
    parts = []
    for name, bound in rows:
        match = _BOUND.search(str(bound))
        if match is None:  # a DEFAULT partition someone added by hand: not ours to manage
            continue
        lower, upper = (v.strip().strip("'") for v in match.groups())
        parts.append(Partition(str(name), None if lower == "MINVALUE" else int(lower), int(upper)))
    return sorted(parts, key=lambda p: p.upper)


def create_day_partitions(conn: Connection, table: str, days: Iterable[int]) -> list[str]:
    """Create the partitions for the UTC days (day starts in µs) that no partition covers yet; their names."""
    parts = list_partitions(conn, table)
    created = []
    for day in sorted(set(days)):
        if any(p.covers(day) for p in parts):
            continue
        name = partition_name(table, day)
        conn.exec_driver_sql(
            f'CREATE TABLE IF NOT EXISTS "{name}" PARTITION OF "{table}" FOR VALUES FROM ({day}) TO ({day + DAY_US})'
        )
        parts.append(Partition(name, day, day + DAY_US))
        created.append(name)
    return created


class PartitionCache:
    """Which days each partitioned table covers, as this process last saw it; creates the missing ones.

    Thread-safe; the catalog is read only when a batch touches a day not known to be covered."""

    def __init__(self, sql_engine: Engine) -> None:
        self._sql_engine = sql_engine
        self._lock = threading.Lock()
        self._covered: dict[str, list[Partition]] = {}
        self.created: list[str] = []

    def ensure(self, days_by_table: dict[str, set[int]], now_us: int) -> None:
        today = day_of(now_us)
        ahead = {today + i * DAY_US for i in range(DAYS_AHEAD + 1)}
        with self._lock:
            missing = {
                table: days | ahead
                for table, days in days_by_table.items()
                if any(not self._is_covered(table, d) for d in days | ahead)
            }
            if not missing:
                return
            for attempt in range(MAX_CREATE_ATTEMPTS):
                try:
                    with self._sql_engine.begin() as conn:
                        made = [
                            n
                            for table, days in missing.items()
                            for n in create_day_partitions(conn, table, days)
                        ]
                    self.created += made
                    break
                except DBAPIError:
                    # NOTE: another process created the same partition at the same moment; look again.
                    if attempt == MAX_CREATE_ATTEMPTS - 1:
                        raise
            with self._sql_engine.connect() as conn:
                for table in missing:
                    self._covered[table] = list_partitions(conn, table)

    def forget(self) -> None:
        """Read the catalog again on the next write (after retention dropped partitions)."""
        with self._lock:
            self._covered.clear()

    def _is_covered(self, table: str, day: int) -> bool:
        return any(p.covers(day) for p in self._covered.get(table, ()))


def drop_partitions_before(conn: Connection, table: str, cut_us: int) -> int:
    """Detach and drop every partition of ``table`` wholly before ``cut_us``; the rows removed.

    For ``object_changes`` the rows that keep later versions rebuildable are copied into a new base partition
    first. Runs in the caller's transaction (one transaction: all or nothing)."""
    parts = [p for p in list_partitions(conn, table) if p.upper <= cut_us]
    if not parts:
        return 0
    new_upper = max(p.upper for p in parts)
    conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
    for p in parts:
        conn.exec_driver_sql(f'LOCK TABLE "{p.name}" IN SHARE MODE')
    rows = sum(int(conn.exec_driver_sql(f'SELECT count(*) FROM "{p.name}"').scalar_one()) for p in parts)
    kept = 0
    staging = f"{table}_base_next"
    if table == "object_changes":
        conn.exec_driver_sql(
            f'CREATE TABLE "{staging}" (LIKE "{table}" INCLUDING DEFAULTS INCLUDING INDEXES)'
        )
        kept = conn.execute(text(_KEEP_OBJECT_CHANGES.format(staging=staging)), {"cut": new_upper}).rowcount
        conn.exec_driver_sql(
            f'ALTER TABLE "{staging}" ADD CONSTRAINT "{staging}_bound" CHECK (observed_at < {new_upper})'
        )
    for p in parts:
        conn.exec_driver_sql(f'ALTER TABLE "{table}" DETACH PARTITION "{p.name}"')
        conn.exec_driver_sql(f'DROP TABLE "{p.name}"')
    if table == "object_changes":
        # NOTE: the CHECK constraint proves the bound, so ATTACH does not scan the rows under the exclusive lock.
        conn.exec_driver_sql(
            f'ALTER TABLE "{table}" ATTACH PARTITION "{staging}" FOR VALUES FROM (MINVALUE) TO ({new_upper})'
        )
        conn.exec_driver_sql(f'ALTER TABLE "{staging}" DROP CONSTRAINT "{staging}_bound"')
        conn.exec_driver_sql(f'ALTER TABLE "{staging}" RENAME TO "{base_name(table)}"')
    return rows - max(0, int(kept or 0))


def trim_keys_before(conn: Connection, table: str, cut_us: int, limit: int) -> int:
    """Delete up to ``limit`` idempotency keys of ``table`` observed before ``cut_us``; the number deleted."""
    keys = KEY_TABLE[table]
    result = conn.execute(
        text(
            f'DELETE FROM "{keys}" WHERE ctid IN '
            f'(SELECT ctid FROM "{keys}" WHERE observed_at < :cut LIMIT :n)'
        ),
        {"cut": cut_us, "n": limit},
    )
    return max(0, int(result.rowcount or 0))


# Per object (source, uid): the newest snapshot before the cut and every later row, unless the object was deleted
# before the cut -- the same rule as the row-by-row retention in Retention.prune_before. One aggregate over the
# expiring rows and one hash join: linear in the rows dropped.
_KEEP_OBJECT_CHANGES = """
WITH per_object AS (
    SELECT source, uid,
           max(version_seq) FILTER (WHERE snapshot IS NOT NULL) AS keep_from,
           bool_or(change_type = 'deleted') AS deleted
    FROM object_changes WHERE observed_at < :cut
    GROUP BY source, uid
)
INSERT INTO "{staging}"
SELECT oc.* FROM object_changes oc JOIN per_object p ON p.source = oc.source AND p.uid = oc.uid
WHERE oc.observed_at < :cut AND NOT p.deleted AND oc.version_seq >= COALESCE(p.keep_from, 0)
"""
