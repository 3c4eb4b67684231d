"""The routing benchmarks run in smoke mode (so they cannot rot); figures are not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.benches import run_smoke

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("shape", "extra"), [("chat", ()), ("coding", ("--agentic-answer-tokens", "50"))])
def test_route_sim_bench_smoke(tmp_path: Path, shape: str, extra: tuple[str, ...]) -> None:
    proc = run_smoke("route_sim.py", tmp_path, "--agentic-shape", shape, *extra)
    assert "pooled-cache reference" in proc.stdout
    assert (tmp_path / "route_sim_hit_vs_capacity.png").stat().st_size > 0
    data = json.loads((tmp_path / "route_sim.json").read_text())
    rows = data["agentic"]["rows"]
    assert {"capstan-precise", "capstan-approx", "round-robin", "least-loaded", "random"} <= {
        r["policy"] for r in rows
    }
    by = {r["policy"]: r for r in rows}
    assert by["round-robin"]["prefill_vs_round_robin"] == 1.0  # the column is relative to round-robin
    assert by["capstan-approx"]["learn_p99_us"] > 0  # the approximate index's recording was timed
    if extra:
        assert "50 output tokens per turn" in proc.stdout.replace("\n", " ")


def test_route_http_bench_smoke(tmp_path: Path) -> None:
    run_smoke("route_http.py", tmp_path)
    data = json.loads((tmp_path / "route_http.json").read_text())
    (row,) = data["rows"]
    assert row["policy"] == "capstan-precise" and row["ok"] > 0 and row["errors"] == 0
    assert (tmp_path / "route_http_ttft_p90.png").stat().st_size > 0


def test_route_index_bench_smoke(tmp_path: Path) -> None:
    run_smoke("route_index.py", tmp_path)
    data = json.loads((tmp_path / "route_index.json").read_text())
    assert data["entries"] > 0 and data["match_us"]["p99"] > 0
    assert set(data["bytes_per_entry"]) == {"precise", "approximate"}
    assert (tmp_path / "route_index_match.png").stat().st_size > 0


def test_route_soak_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("route_soak.py", tmp_path)
    assert "file descriptors back to the baseline" in proc.stdout
    data = json.loads((tmp_path / "route_soak.json").read_text())
    assert data["requests"] > 0 and data["statuses"].get("200", 0) > 0
    assert "500" not in data["statuses"] and not data["undocumented_5xx"]
    assert set(data["statuses"]) <= {"200", "502", "503", "504"}
    assert not data["client_errors"]  # the gateway never dropped a client's connection
    assert (
        "cut (no [DONE], no error event)" not in data["streams"]
    )  # every stream ends cleanly or with an event
    kinds = {kind for _, kind, _ in data["events"]}
    assert {"kill", "restart", "freeze", "thaw"} <= kinds
    assert data["end"]["fds"] <= data["baseline"]["fds"]
    assert data["end"]["conns"] <= data["baseline"]["conns"]
    assert (tmp_path / "route_soak.png").stat().st_size > 0
