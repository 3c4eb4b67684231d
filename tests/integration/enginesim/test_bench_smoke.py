"""The engine-simulator benchmark runs in smoke mode (so it cannot rot); figures are not asserted."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.benches import run_smoke

pytestmark = pytest.mark.integration


def test_enginesim_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("enginesim_fidelity.py", tmp_path)
    assert "TTFT vs cached ratio" in proc.stdout
    assert (tmp_path / "enginesim_ttft_vs_cached.png").stat().st_size > 0
    assert (tmp_path / "enginesim_throughput.png").stat().st_size > 0
