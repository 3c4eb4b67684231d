"""Restarts in the SQLite store: records per restart number, last-seen counts, restarts while Capstan was down."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.restarts import detect_restarts, detect_while_down, last_seen, restart_batch
from tests.unit.restarts.podkit import pod, status

pytestmark = pytest.mark.integration


def test_records_counts_and_restarts_while_down(tmp_path: Path) -> None:
    store_mod = pytest.importorskip("capstan.store")
    path = str(tmp_path / "capstan.db")
    store = store_mod.open_store(path)
    old = pod(containers=[status("app", 3), status("proxy", 0)])
    new = pod(containers=[status("app", 5, reason="OOMKilled", exit_code=137), status("proxy", 0)])
    restarts = detect_restarts(old, new)
    batch = restart_batch(new, restarts, observed_at=1000.0)
    store.write(batch)
    assert store.write(batch).inserted.get("restarts", 0) == 0  # idempotent
    rows = sorted(store.restarts(namespace="default"), key=lambda r: r.restart_count)
    assert [(r.container, r.restart_count, r.reason, r.exit_code) for r in rows] == [
        ("app", 4, "unobserved", None),
        ("app", 5, "OOMKilled", 137),
    ]
    assert rows[1].reported_state["termination"]["finished_at"] == "2026-11-29T10:05:00Z"
    store.close()

    # Capstan stops; meanwhile app restarts twice more and proxy once; then Capstan starts and lists the pod
    reopened = store_mod.open_store(path)
    listed = pod(containers=[status("app", 7, reason="Error", exit_code=1), status("proxy", 1)])
    found = detect_while_down(listed, last_seen(reopened.restart_counts()))
    assert [(r.container, r.previous_count, r.restart_count, r.while_down) for r in found] == [
        ("app", 5, 7, True),
        ("proxy", 0, 1, True),
    ]
    reopened.close()
