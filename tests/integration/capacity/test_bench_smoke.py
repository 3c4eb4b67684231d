"""The capacity benchmarks run end to end in smoke mode so they cannot rot (figures are not checked)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def run(name: str, out: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / name), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_capacity_policies_bench_smoke(tmp_path: Path) -> None:
    run("capacity_policies.py", tmp_path)
    data = json.loads((tmp_path / "capacity_policies.json").read_text())
    assert data["smoke"] is True
    for row in data["rows"]:
        assert set(row["policies"]) == {"capstan", "cluster-autoscaler", "karpenter", "static", "oracle"}
        assert all(p["problems"] == 0 for p in row["policies"].values())


def test_capacity_planner_speed_bench_smoke(tmp_path: Path) -> None:
    run("capacity_planner_speed.py", tmp_path)
    rows = json.loads((tmp_path / "capacity_planner_speed.json").read_text())
    assert rows[0]["pods"] == 100 and rows[0]["launches"] > 0
