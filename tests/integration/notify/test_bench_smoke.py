"""The restart-delivery benchmark runs in smoke mode (so it cannot rot); figures are not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.benches import run_smoke

pytestmark = pytest.mark.integration


def test_restart_delivery_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("restart_delivery.py", tmp_path)
    assert "Restart delivery" in proc.stdout
    results = json.loads((tmp_path / "restart_delivery.json").read_text())["results"]
    assert [r["peer"] for r in results] == ["memory+webhook", "sqlite+webhook", "sqlite+bot"]
    assert (tmp_path / "restart_delivery_latency.png").stat().st_size > 0
