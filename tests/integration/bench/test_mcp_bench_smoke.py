"""The MCP benchmark (bench/mcp_context.py) runs end to end in smoke mode, so it cannot rot (figures are not checked): the
scale mode on 200 and 400 synthetic pods with a real SQLite history store, and the suite mode on two fault
scenarios played on the session sandbox (kubernetes-mcp-server beside it when its npm install is found, see
docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capstan.mcp import tool_names
from capstan.sandbox import Sandbox
from tests.fixtures.benches import run_smoke

pytestmark = pytest.mark.integration


def test_mcp_bench_scale_smoke(tmp_path: Path) -> None:
    proc = run_smoke("mcp_context.py", tmp_path, timeout=300)
    assert "goal mcp.budget" in proc.stdout
    data = json.loads((tmp_path / "mcp.json").read_text())
    assert [r["pods"] for r in data["runs"]] == [200, 400]
    top = data["runs"][-1]
    # every registered tool was called (none skipped), answered without an error and within its budget
    assert [r["tool"] for r in top["tools"]] == tool_names()
    assert all(r["tokens"] > 0 and r["p99_ms"] > 0 and not r["errors"] for r in top["tools"])
    assert data["over_budget"] == 0
    assert top["store_rows"]["object_changes"] > 0 and top["store_rows"]["restarts"] > 0
    assert top["first_call"]["ms"] > 0
    assert (tmp_path / "mcp_scale.png").stat().st_size > 0


def test_mcp_bench_suite_smoke(tmp_path: Path, sandbox: Sandbox, kubeconfig: Path) -> None:
    proc = run_smoke(
        "mcp_context.py", tmp_path, "--suite", "--kubeconfig", str(kubeconfig),
        "--log-dir", str(sandbox.directory / "pod-logs"), timeout=600,
    )  # fmt: skip
    assert "Context an agent can act on: summary" in proc.stdout
    data = json.loads((tmp_path / "mcp_suite.json").read_text())
    rows = data["rows"]
    assert len(rows) == 2 and not any(r["error"] for r in rows), rows
    # two plain scenarios the diagnosis gets right: the first `problems` answer has them, within budget
    assert all(r["problems"]["hit"] and not r["problems"]["over_budget"] for r in rows)
    assert all(0 < r["problems"]["tokens"] <= 1500 for r in rows)
    if data["peer"]:
        assert all(r["peer_calls"] and r["peer_tokens"] and not r["peer_error"] for r in rows), rows
    assert (tmp_path / "mcp_suite.png").stat().st_size > 0
