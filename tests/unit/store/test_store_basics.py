"""Store basics on a SQLite file: migrations match the schema, batched writes, metrics, the JSON contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from prometheus_client import CollectorRegistry

from capstan.store import (
    Batch,
    BatchWriter,
    EngineEntry,
    Gap,
    HistoryMetrics,
    ObjectChange,
    open_store,
    parse_database_url,
    to_json,
)
from capstan.store._schema import metadata

pytestmark = pytest.mark.unit


def test_the_migrated_database_matches_the_schema_metadata(tmp_path: Path) -> None:
    from capstan.store import HEAD_REVISION

    store = open_store(str(tmp_path / "h.db"))
    assert store.schema_revision() == HEAD_REVISION
    with store.database.read_sql_engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []
    store.close()
    again = open_store(str(tmp_path / "h.db"))  # migrating twice is a no-op
    assert again.schema_revision() == HEAD_REVISION
    again.close()


def test_a_fresh_store_is_created_without_alembic_exactly_as_migrations_create_it(tmp_path: Path) -> None:
    from sqlalchemy import create_engine

    from capstan.store import HEAD_REVISION
    from capstan.store._connection import migrate

    fresh = create_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    migrate(fresh)  # the direct path
    migrated = create_engine(f"sqlite:///{tmp_path / 'migrated.db'}")
    from alembic import command
    from alembic.config import Config

    from capstan.store import MIGRATIONS_DIR

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with migrated.begin() as conn:  # a store made by the first release, then upgraded revision by revision
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    migrate(migrated)

    def schema(sql_engine: Any) -> list[str]:
        with sql_engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").all()
        return [f"{t} {n} {sql}" for t, n, sql in rows]

    assert schema(fresh) == schema(migrated)
    with fresh.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
        assert MigrationContext.configure(conn).get_current_revision() == HEAD_REVISION
    migrate(fresh)  # idempotent


def test_head_revision_constant_is_alembics_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from capstan.store import HEAD_REVISION, MIGRATIONS_DIR

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD_REVISION


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "h.db"))
    with store.database.read_sql_engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
    store.close()


def test_urls_map_to_sqlite_or_psycopg(tmp_path: Path) -> None:
    assert parse_database_url(str(tmp_path / "a.db")).get_backend_name() == "sqlite"
    assert parse_database_url("postgresql://u:p@127.0.0.1/db").drivername == "postgresql+psycopg"


def test_batch_writer_commits_when_full_or_flushed(tmp_path: Path) -> None:
    now = [0.0]
    store = open_store(str(tmp_path / "h.db"))
    writer = BatchWriter(store.history, max_rows=3, max_delay_s=10, clock=lambda: now[0])

    def one(i: int) -> Batch:
        return Batch(engine_entries=[EngineEntry("t", "slowlog", "r", str(i), 1.0, 1.0, {})])

    assert writer.add(one(1)) is None
    assert writer.add(one(2)) is None
    assert store.database.count("engine_entries") == 0
    result = writer.add(one(3))
    assert result is not None and result.inserted == {"engine_entries": 3}
    writer.add(one(4))
    now[0] = 11.0
    assert writer.due()
    writer.flush()
    assert store.database.count("engine_entries") == 4
    store.close()


def test_metrics_count_new_records_gaps_and_lost_entries(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    store = open_store(str(tmp_path / "h.db"), metrics=HistoryMetrics(registry), clock=lambda: 10.0)
    batch = Batch(
        engine_entries=[EngineEntry("cache", "slowlog", "r", str(i), 1.0, 9.0, {}) for i in range(4)],
        gaps=[Gap("cache", "slowlog", "k", 9.0, 7, "ring overwrote entries before they were read")],
    )
    store.history.write(batch)
    store.history.write(batch)  # idempotent: counts nothing new
    value = registry.get_sample_value
    assert value("capstan_history_records_written_total", {"source": "cache", "table": "engine_entries"}) == 4
    assert value("capstan_history_gaps_total", {"source": "cache", "log": "slowlog"}) == 1
    assert value("capstan_history_lost_entries_total", {"source": "cache", "log": "slowlog"}) == 7
    assert value("capstan_history_write_lag_seconds_count", {"table": "engine_entries"}) == 8
    store.close()


def test_json_form_uses_rfc3339_times() -> None:
    change = ObjectChange(
        "c", 0.5, "Pod", "v1", "ns", "p", "u", "1", "added", "watch", 1, None, {"a": 1}, id=3
    )
    out = to_json(change)
    assert out["observed_at"] == "1970-01-01T00:00:00.500000Z"
    assert out["snapshot"] == {"a": 1}
    assert out["id"] == 3


def test_a_change_and_a_state_cross_a_process_boundary_whole() -> None:
    """The diff workers pickle what they build: every field comes back, ``encoded`` (outside equality) too."""
    import dataclasses
    import pickle

    from capstan.store import ObjectState

    change = ObjectChange(
        "src", 1.5, "Deployment", "apps/v1", "ns", "web", "uid-1", "42", "modified", "watch", 3,
        [{"op": "replace", "path": "/spec/replicas", "value": 2}], {"spec": {"replicas": 2}}, id=9,
    )  # fmt: skip
    state = ObjectState(
        "src", "uid-1", "Deployment", "apps/v1", "ns", "web", "42", 3, {"a": [1]}, '{"a":[1]}'
    )
    for record in (change, state):
        back = pickle.loads(pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))
        assert type(back) is type(record)
        assert dataclasses.astuple(back) == dataclasses.astuple(record)  # every field, `encoded` included


def test_a_store_opened_while_another_connection_holds_the_write_lock_waits_for_it(tmp_path: Path) -> None:
    """A fresh SQLite file in rollback-journal mode whose write lock another connection holds answers the switch
    to WAL with "database is locked" at once (no busy handler): two recorders started together on one new file
    failed so. The opener waits for the lock instead."""
    import sqlite3
    import threading

    path = tmp_path / "contended.db"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE unrelated (a)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO unrelated VALUES (1)")
    released = threading.Event()

    def release() -> None:
        released.wait(timeout=30)
        other.execute("COMMIT")

    threading.Thread(target=release, daemon=True).start()
    threading.Timer(0.3, released.set).start()
    store = open_store(str(path))
    try:
        assert released.is_set()  # it opened only after the lock was let go
        assert store.database.count("object_changes") == 0
    finally:
        store.close()
        other.close()
