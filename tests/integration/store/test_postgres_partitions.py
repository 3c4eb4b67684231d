"""PostgreSQL's day partitions on a real server: created as writes need them, idempotent across days through the
key tables, dropped whole by retention with the same answers as SQLite's row-by-row retention, and reached by
migrating a store that holds data from the unpartitioned schema."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import JSON, MetaData, Table, create_engine, text
from sqlalchemy.dialects.postgresql import JSONB

from capstan.record import DiffPolicy, ObjectHistory, event_record
from capstan.sandbox import PostgresServer
from capstan.store import (
    HEAD_REVISION,
    MIGRATIONS_DIR,
    Batch,
    EngineEntry,
    RetentionPolicy,
    Store,
    apply_retention,
    open_store,
    parse_database_url,
    schema_metadata,
)

pytestmark = pytest.mark.integration

DAY = 86_400.0
T0 = 1_790_000_000.0 // DAY * DAY  # midnight UTC, 2026-09-21


def pod(uid: str, name: str, rv: int, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid, "resourceVersion": str(rv)},
        "spec": {"containers": [{"name": "main", "image": image}]},
    }


def event(uid: str, rv: int, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "web.1", "namespace": "ml", "uid": uid, "resourceVersion": str(rv)},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": "ml", "uid": "p1"},
        "reason": "BackOff",
        "type": "Warning",
        "message": "Back-off restarting failed container",
        "count": count,
    }


def history_batches() -> list[Batch]:
    """Six days of history: a long-lived pod edited every 6 hours, a pod deleted on day 1, events and slowlog
    entries every day, and an ACL LOG entry first seen on day 0 whose count rises on day 4."""
    history = ObjectHistory("c1", policy=DiffPolicy(snapshot_every=5))
    batches = []
    rv = 0
    for step in range(24):
        at = T0 + step * DAY / 4 + 60.0
        rv += 1
        batches.append(
            history.observe(
                "ADDED" if step == 0 else "MODIFIED", pod("u1", "web", rv, f"img:{step}"), observed_at=at
            )
        )
        if step == 2:
            rv += 1
            batches.append(history.observe("ADDED", pod("u2", "old", rv, "img:a"), observed_at=at + 1))
        if step == 5:
            rv += 1
            batches.append(history.observe("DELETED", pod("u2", "old", rv, "img:a"), observed_at=at + 1))
        if step % 4 == 0:
            day = step // 4
            batches.append(
                Batch(kube_events=[event_record("c1", event("e1", 1000 + day, day + 1), observed_at=at + 2)])
            )
            batches.append(
                Batch(engine_entries=[EngineEntry("cache", "slowlog", "r", str(day), at, at + 3, {"n": day})])
            )
    acl = EngineEntry("cache", "acllog", "r", "7", T0 + 10, T0 + 10, {"count": 1}, mutable=True)
    batches.insert(1, Batch(engine_entries=[acl]))
    batches.append(
        Batch(
            engine_entries=[
                EngineEntry(
                    "cache", "acllog", "r", "7", T0 + 4 * DAY, T0 + 4 * DAY + 5, {"count": 9}, mutable=True
                )
            ]
        )
    )
    return batches


@pytest.fixture
def pg(postgres_server: PostgresServer) -> Iterator[Store]:
    postgres_server.reset()
    st = open_store(postgres_server.url, clock=lambda: T0 + 6 * DAY)
    yield st
    st.close()


def test_writes_create_day_partitions_and_stay_idempotent_across_days(pg: Store) -> None:
    batches = history_batches()
    for b in batches:
        pg.history.write(b)
    parts = pg.retention.partitions()
    # six days written, plus today (day 6) and the two days ahead
    assert parts["object_changes"] == [f"object_changes_p{d}" for d in range(20260921, 20260930)]
    assert len(parts["kube_events"]) == len(parts["engine_entries"]) == 9
    before = {t: pg.database.count(t) for t in ("object_changes", "kube_events", "engine_entries")}
    for b in batches:  # everything again, as a re-delivery after a crash would
        result = pg.history.write(b)
        assert result.inserted.get("object_changes", 0) == 0 and result.inserted.get("kube_events", 0) == 0
    assert {t: pg.database.count(t) for t in before} == before
    acl = pg.history.engine_entries(target="cache", log_name="acllog")
    assert [(e.native_id, e.payload["count"], e.observed_at) for e in acl] == [("7", 9, T0 + 10)]


def test_age_retention_drops_whole_days_and_answers_like_row_retention(pg: Store, tmp_path: Path) -> None:
    lite = open_store(str(tmp_path / "h.db"), clock=lambda: T0 + 6 * DAY)
    for b in history_batches():
        pg.history.write(b)
        lite.history.write(b)
    now = T0 + 6 * DAY
    max_age_s = 3 * DAY - 3600.0  # cutoff at 01:00 on day 3
    policy = RetentionPolicy(max_age_s=max_age_s)
    dropped = apply_retention(pg.retention, policy, now=now)
    apply_retention(lite.retention, policy, now=now)
    assert dropped > 0
    parts = pg.retention.partitions()
    assert parts["object_changes"][0] == "object_changes_base"
    assert "object_changes_p20260923" not in parts["object_changes"]  # day 2 dropped whole
    assert parts["kube_events"][0] == "kube_events_p20260924"  # day 3 stays: the cutoff is inside it
    with pg.database.read_sql_engine.connect() as conn:
        stale_keys = conn.execute(
            text("SELECT count(*) FROM object_change_keys WHERE observed_at < :c"),
            {"c": int((now - max_age_s) * 1e6)},
        ).scalar_one()
    assert stale_keys == 0

    def versions(st: Store) -> list[tuple[int, str, str]]:
        return [
            (c.version_seq, c.resource_version, c.change_type)
            for c in st.history.timeline(uid="u1", limit=10_000)
        ]

    assert versions(pg) == versions(lite)
    assert versions(pg)[0][0] <= 13  # the newest snapshot before the cutoff (every 5th version) survived
    assert pg.history.timeline(uid="u2") == lite.history.timeline(uid="u2") == []
    for step in range(12, 24):  # every version after the cutoff still rebuilds, identically on both back ends
        at = T0 + step * DAY / 4 + 120.0
        got, want = (
            pg.history.object_at("Pod", "ml", "web", at),
            lite.history.object_at("Pod", "ml", "web", at),
        )
        assert got is not None and want is not None
        assert got.object == want.object and got.object["spec"]["containers"][0]["image"] == f"img:{step}"
    assert [e.payload for e in pg.history.engine_entries(target="cache")] == [
        e.payload for e in lite.history.engine_entries(target="cache")
    ]
    assert (
        [e.count for e in pg.history.events(involved_uid="p1")]
        == [e.count for e in lite.history.events(involved_uid="p1")]
        == [5, 6]
    )
    # retention runs again a day later: the base partition is rebuilt from itself and the next day
    apply_retention(pg.retention, policy, now=now + DAY)
    apply_retention(lite.retention, policy, now=now + DAY)
    assert versions(pg) == versions(lite)
    assert "object_changes_p20260924" not in pg.retention.partitions()["object_changes"]
    lite.close()


PARTITIONED = ("object_changes", "kube_events", "engine_entries")  # by day, since revision 0003
STORED_TIMES = ("observed_at", "event_time", "happened_at")  # stored as integer microseconds since the epoch


def _stored(table: Table, record: Any) -> dict[str, Any]:
    """``record`` as revision 0002 stored it in ``table``: each column but ``id`` from the record's field of the
    same name, times in integer microseconds."""
    row = {}
    for column in table.columns:
        if column.name == "id":
            continue
        value = getattr(record, column.name)
        row[column.name] = (
            round(value * 1_000_000) if column.name in STORED_TIMES and value is not None else value
        )
    return row


def _sql_rows(store_url: str) -> None:
    """Write history_batches() through the unpartitioned tables of revision 0002, as that release stored them
    (the tables as the database has them, a JSON None as SQL NULL)."""
    sql_engine = create_engine(parse_database_url(store_url))
    with sql_engine.begin() as conn:
        tables = MetaData()
        tables.reflect(conn, only=["object_changes", "kube_events", "engine_entries"])
        for table in tables.tables.values():
            for column in table.columns:
                if isinstance(column.type, JSON):
                    column.type = JSONB(none_as_null=True)
        changes, events, entries = (
            tables.tables[n] for n in ("object_changes", "kube_events", "engine_entries")
        )
        for b in history_batches():
            if b.object_changes:
                conn.execute(changes.insert(), [_stored(changes, c) for c in b.object_changes])
            if b.kube_events:
                conn.execute(events.insert(), [_stored(events, e) for e in b.kube_events])
            fresh = [e for e in b.engine_entries if not (e.mutable and e.payload["count"] > 1)]
            if fresh:
                conn.execute(entries.insert(), [_stored(entries, e) for e in fresh])
    sql_engine.dispose()


def test_a_store_from_the_unpartitioned_schema_migrates_with_its_data(
    postgres_server: PostgresServer,
) -> None:
    postgres_server.reset()
    sql_engine = create_engine(parse_database_url(postgres_server.url))
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with sql_engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")
    _sql_rows(postgres_server.url)
    st = open_store(postgres_server.url, clock=lambda: T0 + 6 * DAY)  # migrates to the head
    assert st.schema_revision() == HEAD_REVISION
    assert (
        st.database.count("object_changes") == 26
        and st.database.count("kube_events") == 6
        and st.database.count("engine_entries") == 7
    )
    assert st.retention.partitions()["object_changes"][:6] == [
        f"object_changes_p{d}" for d in range(20260921, 20260927)
    ]
    for b in history_batches():  # the migrated keys make the old rows' re-delivery a no-op
        st.history.write(b)
    assert (
        st.database.count("object_changes") == 26
        and st.database.count("kube_events") == 6
        and st.database.count("engine_entries") == 7
    )
    got = st.history.object_at("Pod", "ml", "web", T0 + 5 * DAY + 120.0)
    assert got is not None and got.object["spec"]["containers"][0]["image"] == "img:20"
    new = st.history.write(
        Batch(engine_entries=[EngineEntry("cache", "slowlog", "r", "99", T0, T0 + 6 * DAY, {})])
    )
    assert new.inserted["engine_entries"] == 1  # the id sequence carried on past the copied rows
    with sql_engine.connect() as conn:
        diff = compare_metadata(
            MigrationContext.configure(conn, opts={"include_name": _not_a_partition}),
            schema_metadata(partitioned=True),
        )
    assert diff == []
    st.close()

    with sql_engine.begin() as conn:  # and back: plain tables with their unique keys, the rows and ids kept
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")
    with sql_engine.connect() as conn:
        at_0002 = MigrationContext.configure(conn, opts={"include_object": _before_0004})
        assert compare_metadata(at_0002, schema_metadata()) == []
        counts = [conn.exec_driver_sql(f"SELECT count(*), max(id) FROM {t}").one() for t in PARTITIONED]
        partitions = conn.exec_driver_sql("SELECT count(*) FROM pg_inherits").scalar_one()
    assert [c[0] for c in counts] == [26, 6, 8] and partitions == 0
    again = open_store(postgres_server.url, clock=lambda: T0 + 6 * DAY)  # and up once more
    assert (
        again.history.write(
            Batch(engine_entries=[EngineEntry("cache", "slowlog", "r", "100", T0, T0, {})])
        ).inserted["engine_entries"]
        == 1
    )
    assert again.database.count("engine_entries") == 9
    again.close()
    sql_engine.dispose()


def _before_0004(_obj: Any, name: str | None, type_: str, _reflected: bool, _other: Any) -> bool:
    """The tables revision 0002 has (revision 0004 added ``store_keys``)."""
    return not (type_ == "table" and name == "store_keys")


def _not_a_partition(name: str | None, type_: str, _parent: Any) -> bool:
    return not (type_ == "table" and name is not None and re.search(r"_(p\d{8}|base)$", name) is not None)


def test_a_fresh_postgres_store_has_exactly_the_partitioned_schema(pg: Store) -> None:
    with pg.database.read_sql_engine.connect() as conn:
        diff = compare_metadata(
            MigrationContext.configure(conn, opts={"include_name": _not_a_partition}),
            schema_metadata(partitioned=True),
        )
        kinds: dict[str, str] = dict(
            conn.execute(
                text(
                    "SELECT relname, relkind FROM pg_class WHERE relname IN ('object_changes', 'object_change_keys')"
                )
            ).all()
        )
    assert diff == []
    assert kinds == {"object_changes": "p", "object_change_keys": "r"}


def test_stores_opened_at_once_on_an_empty_database_create_its_schema_once(
    postgres_server: PostgresServer,
) -> None:
    """Shards of one store (several recorders) start together: each opens the empty database at the same moment;
    the schema lock lets one create the tables while the others wait and then find them."""
    postgres_server.reset()
    gate = threading.Barrier(6)
    errors: list[BaseException] = []
    opened: list[Store] = []

    def open_one() -> None:
        gate.wait(30)
        try:
            opened.append(open_store(postgres_server.url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors, errors[0]
        assert len(opened) == 6
        with create_engine(parse_database_url(postgres_server.url)).connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM alembic_version")).scalar() == 1
    finally:
        for store in opened:
            store.close()
