"""Background retention runs beside a writer without failing or losing its writes (on PostgreSQL it drops the
old day's partition while the writer writes into the current day)."""

from __future__ import annotations

import threading

import pytest

from capstan.store import Batch, EngineEntry, RetentionPolicy, RetentionWorker, open_store

pytestmark = pytest.mark.integration

DAY = 86_400.0
NOW = 3 * DAY + 5000.0


def test_retention_thread_deletes_old_rows_while_the_writer_keeps_writing(history_store_url: str) -> None:
    store = open_store(history_store_url, clock=lambda: NOW)
    old = Batch(
        engine_entries=[EngineEntry("t", "slowlog", "r", f"old{i}", 10.0, 10.0, {}) for i in range(3000)]
    )
    store.history.write(old)
    worker = RetentionWorker(
        store.retention, RetentionPolicy(max_age_s=DAY, batch_rows=200), interval_s=0.01, clock=lambda: NOW
    )
    errors: list[BaseException] = []
    written = 0

    def writer() -> None:
        nonlocal written
        try:
            for i in range(60):
                store.history.write(
                    Batch(
                        engine_entries=[
                            EngineEntry("t", "slowlog", "r", f"new{i}-{j}", NOW - 500.0, NOW - 500.0, {})
                            for j in range(50)
                        ]
                    )
                )
                written += 50
        except BaseException as exc:  # the assertion below reports it
            errors.append(exc)

    worker.start()
    thread = threading.Thread(target=writer)
    thread.start()
    thread.join(timeout=300)
    for _ in range(1000):  # bounded: wait until a pass ran after the writer finished
        passes = worker.passes
        if passes >= 2 and store.database.count("engine_entries") == written:
            break
        threading.Event().wait(0.01)
    worker.stop()
    assert errors == []
    assert worker.last_error is None
    assert written == 3000
    assert store.database.count("engine_entries") == 3000  # all new rows, none of the old
    if store.dialect == "postgresql":
        assert (
            "engine_entries_p19700101" not in store.retention.partitions()["engine_entries"]
        )  # dropped whole
    store.close()
