"""The restart-delivery benchmark runs in smoke mode (so it cannot rot); figures are not asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def test_restart_delivery_bench_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench/restart_delivery.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Restart delivery" in proc.stdout
    results = json.loads((tmp_path / "restart_delivery.json").read_text())["results"]
    assert [r["peer"] for r in results] == ["memory+webhook", "sqlite+webhook", "sqlite+bot"]
    assert (tmp_path / "restart_delivery_latency.png").stat().st_size > 0
