"""The diagnosis benchmark runs end to end in smoke mode, so it cannot rot (figures are not checked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.benches import run_smoke

pytestmark = pytest.mark.integration


def test_diagnose_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("diagnose.py", tmp_path, timeout=300)
    assert "cl100k_base tokens" in proc.stdout
    data = json.loads((tmp_path / "diagnose.json").read_text())
    assert [r["pods"] for r in data["scale"]] == [200, 400]
    top = data["scale"][-1]
    assert top["findings"] > 0 and top["json_tokens"] > 0 and not top["failures"]
    faults = data["per_fault_tokens"]
    assert faults["planted"] > 0 and faults["named"] == faults["planted"]
    assert (tmp_path / "diagnose_scale.png").stat().st_size > 0
