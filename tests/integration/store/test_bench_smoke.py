"""The history benchmarks run in smoke mode (so they cannot rot); figures are not asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def test_history_ingest_bench_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench/history_ingest.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "timeline" in proc.stdout
    data = json.loads((tmp_path / "history_ingest.json").read_text())
    assert set(data["backends"]) == {"sqlite", "postgresql"}
    assert data["backends"]["sqlite"]["stored_records"] == data["records"]
    assert (tmp_path / "history_ingest.png").stat().st_size > 0


def test_slowlog_vs_exporter_bench_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench/history_slowlog_vs_exporter.py"),
            "--smoke",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "history_slowlog_vs_exporter.json").read_text())
    capstan = data["capstan"]
    # Every flood command is either recovered with its arguments or counted in a gap record.
    assert capstan["with_args_and_client"] + capstan["known_lost"] >= data["issued"]
    # the peer runs beside it (Debian's prometheus-redis-exporter, installed by the bootstrap) and saw the flood
    exporter = data["redis_exporter"]
    assert exporter["scrapes"] > 0 and exporter["counted"] > 0
    assert (tmp_path / "history_slowlog_vs_exporter.png").stat().st_size > 0
