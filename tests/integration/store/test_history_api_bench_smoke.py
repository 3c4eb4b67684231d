"""The history API memory bench runs in smoke mode (so it cannot rot): this code's server and the peer's (the code
before bounded responses) under concurrent clients; figures are not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.benches import run_smoke

pytestmark = pytest.mark.integration


def test_history_api_memory_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("history_api_memory.py", tmp_path)
    assert "peak MB" in proc.stdout
    data = json.loads((tmp_path / "history_api_memory.json").read_text())
    runs = {r["variant"]: r for r in data["runs"]}
    paged = runs["capstan: same volume, paged"]
    # every client followed the cursors to its last page, and got every row asked for, without an error
    assert paged["rows"] == data["clients"] * data["pages"] * 1000 and not paged["errors"]
    assert runs["capstan: one maximum page"]["rows"] == data["clients"] * 1000
    assert all(r["peak_mb"] > 0 for r in data["runs"])
    assert (tmp_path / "history_api_memory.png").stat().st_size > 0
