"""The engine-simulator benchmark runs in smoke mode (so it cannot rot); figures are not asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]


def test_enginesim_bench_smoke(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench/enginesim_fidelity.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"stdout: {proc.stdout[-1500:]}\nstderr: {proc.stderr[-2500:]}"
    assert "TTFT vs cached ratio" in proc.stdout
    assert (tmp_path / "enginesim_ttft_vs_cached.png").stat().st_size > 0
    assert (tmp_path / "enginesim_throughput.png").stat().st_size > 0
