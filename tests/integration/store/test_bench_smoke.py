"""The history benchmarks run in smoke mode (so they cannot rot); figures are not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.benches import run_smoke

pytestmark = pytest.mark.integration


def test_history_ingest_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("history_ingest.py", tmp_path)
    assert "timeline" in proc.stdout
    data = json.loads((tmp_path / "history_ingest.json").read_text())
    assert set(data["backends"]) == {"sqlite", "postgresql"}
    assert data["backends"]["sqlite"]["stored_records"] == data["records"]
    assert all(b["pipelined_changes_per_s"] > 0 for b in data["backends"].values())
    assert (tmp_path / "history_ingest.png").stat().st_size > 0


def test_slowlog_vs_exporter_bench_smoke(tmp_path: Path) -> None:
    run_smoke("history_slowlog_vs_exporter.py", tmp_path)
    data = json.loads((tmp_path / "history_slowlog_vs_exporter.json").read_text())
    capstan = data["capstan"]
    # Every flood command is either recovered with its arguments or counted in a gap record.
    assert capstan["with_args_and_client"] + capstan["known_lost"] >= data["issued"]
    # the peer runs beside it (Debian's prometheus-redis-exporter, installed by the bootstrap) and saw the flood
    exporter = data["redis_exporter"]
    assert exporter["scrapes"] > 0 and exporter["counted"] > 0
    assert (tmp_path / "history_slowlog_vs_exporter.png").stat().st_size > 0
