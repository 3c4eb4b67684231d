"""Crash and disk-failure safety of the store: kill -9 mid-burst, a full disk, a read-only disk."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from capstan.errors import UserError
from capstan.store import Batch, EngineEntry, StoreWriteError, open_store
from tests.integration.store._burst_writer import OBJECTS, SOURCE, obj

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
TOTAL, BATCH = 5000, 50


def _writer(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.store._burst_writer", url, str(TOTAL), str(BATCH)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_kill_9_mid_burst_then_restart_stores_every_change_exactly_once(history_store_url: str) -> None:
    proc = _writer(history_store_url)
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:  # bounded by the writer's output
        if line.startswith("committed"):
            seen += 1
            if seen == 20:
                os.kill(proc.pid, signal.SIGKILL)
                break
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    store = open_store(history_store_url)
    cursor = store.history.kind_cursor(SOURCE, "apps/v1/Deployment")
    assert cursor is not None
    # The cursor and the records committed together: the records go exactly up to the cursor.
    killed_at = int(cursor.resource_version)
    assert killed_at >= 20 * BATCH
    assert store.database.count("object_changes") == killed_at
    store.close()

    proc = _writer(history_store_url)
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err

    store = open_store(history_store_url)
    changes = store.history.timeline(source=SOURCE, limit=100_000)
    assert sorted(int(c.resource_version) for c in changes) == list(range(1, TOTAL + 1))
    cursor = store.history.kind_cursor(SOURCE, "apps/v1/Deployment")
    assert cursor is not None and cursor.resource_version == str(TOTAL)
    # Every object's stored last state and rebuilt last version equal the last object written.
    states = store.history.object_states(SOURCE)
    assert len(states) == OBJECTS
    for i in range(TOTAL - OBJECTS + 1, TOTAL + 1):
        want = obj(i)
        k = i % OBJECTS
        version = store.history.object_at("Deployment", "ns", f"d{k}", 1000.0 + TOTAL + 1)
        assert version is not None
        assert version.object["spec"] == want["spec"]
        assert states[f"uid-{k}"].resource_version == str(i)
    store.close()


@pytest.fixture
def tiny_fs() -> Iterator[Path]:
    mount_point = Path(tempfile.mkdtemp(prefix="capstan-tinyfs-"))
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=640k", "tmpfs", str(mount_point)],
        capture_output=True,
        timeout=30,
    )
    if res.returncode != 0:
        mount_point.rmdir()
        pytest.skip(f"cannot mount a tiny tmpfs here: {res.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, timeout=30)
        mount_point.rmdir()


def _entries(start: int, n: int) -> Batch:
    return Batch(
        engine_entries=[
            EngineEntry("t", "slowlog", "r", str(i), float(i), float(i), {"args": ["SET", "k", "v" * 200]})
            for i in range(start, start + n)
        ]
    )


def test_a_full_disk_stops_writes_loudly_and_leaves_the_store_intact(tiny_fs: Path) -> None:
    url = str(tiny_fs / "h.db")
    store = open_store(url)
    written = 0
    error: StoreWriteError | None = None
    for step in range(1000):  # bounded; the disk fills long before
        try:
            store.history.write(_entries(step * 100, 100))
            written += 100
        except StoreWriteError as exc:
            error = exc
            break
    assert error is not None
    assert "full" in str(error).lower()
    assert written > 0
    store.close()
    subprocess.run(["mount", "-o", "remount,size=8m", str(tiny_fs)], check=True, timeout=30)
    store = open_store(url)
    with (
        store.database.read_sql_engine.connect() as conn
    ):  # integrity of the file after the failed transaction
        assert conn.execute(text("PRAGMA integrity_check")).scalar_one() == "ok"
    assert store.database.count("engine_entries") == written
    store.history.write(_entries(10**6, 10))
    assert store.database.count("engine_entries") == written + 10
    store.close()


def test_a_read_only_disk_stops_writes_loudly(tiny_fs: Path) -> None:
    url = str(tiny_fs / "h.db")
    store = open_store(url)
    store.history.write(_entries(0, 10))
    # The kernel refuses a read-only remount while files are open for writing, so the pooled connections are
    # closed first; the store object stays in use and reconnects on the next write.
    store.close()
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True, timeout=30)
    try:
        with pytest.raises(StoreWriteError) as info:
            store.history.write(_entries(10, 10))
        assert "\n" not in str(info.value)
        assert "h.db" in str(info.value)
        store.close()
        with pytest.raises(UserError) as opening:
            open_store(url)
        assert "\n" not in str(opening.value)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(tiny_fs)], check=True, timeout=30)
    store = open_store(url)
    assert store.database.count("engine_entries") == 10
    store.close()
