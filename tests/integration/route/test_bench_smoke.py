"""The routing benchmarks run in smoke mode (so they cannot rot); figures are not asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("shape", ["chat", "coding"])
def test_route_sim_bench_smoke(tmp_path: Path, shape: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench/route_sim.py"),
            "--smoke",
            "--agentic-shape",
            shape,
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "pooled-cache reference" in proc.stdout
    assert (tmp_path / "route_sim_hit_vs_capacity.png").stat().st_size > 0
    data = json.loads((tmp_path / "route_sim.json").read_text())
    policies = {r["policy"] for r in data["agentic"]["rows"]}
    assert {"capstan-precise", "capstan-approx", "round-robin", "least-loaded", "random"} <= policies


def test_route_http_bench_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench/route_http.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads((tmp_path / "route_http.json").read_text())
    (row,) = data["rows"]
    assert row["policy"] == "capstan-precise" and row["ok"] > 0 and row["errors"] == 0
    assert (tmp_path / "route_http_ttft_p90.png").stat().st_size > 0


def test_route_index_bench_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench/route_index.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "route_index.json").read_text())
    assert data["entries"] > 0 and data["match_us"]["p99"] > 0
    assert set(data["bytes_per_entry"]) == {"precise", "approximate"}
    assert (tmp_path / "route_index_match.png").stat().st_size > 0
