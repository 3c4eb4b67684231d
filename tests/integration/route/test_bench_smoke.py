"""The routing benchmarks run in smoke mode (so they cannot rot); figures are not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fixtures.benches import run_bench, run_smoke

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
    # every policy is set against the cache-bound optimum of its own routing
    assert all(r["busy_vs_bound"] > 0 for r in rows) and "cache-bound optimum" in proc.stdout
    if extra:
        assert "50 output tokens per turn" in proc.stdout.replace("\n", " ")


def _trace(path: Path, *, huge: bool = True) -> Path:
    """30 requests of 2,000 tokens on 4 shared prefixes, and (``huge``) one of 30,000 tokens."""
    lines = [
        json.dumps(
            {
                "timestamp": i * 500,
                "input_length": 2000,
                "output_length": 10,
                "hash_ids": [0, i % 4 + 1, 100 + i, 200 + i],
            }
        )
        for i in range(30)
    ]
    if huge:
        lines.insert(
            10,
            json.dumps(
                {
                    "timestamp": 4800,
                    "input_length": 30000,
                    "output_length": 10,
                    "hash_ids": list(range(1000, 1059)),
                }
            ),
        )
    path.write_text("\n".join(lines) + "\n")
    return path


def test_route_sim_bench_takes_any_trace_and_any_point(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "my-sessions.jsonl")
    out = tmp_path / "out"
    proc = run_smoke(
        "route_sim.py", out, "--trace", str(trace), "--kv-tokens", "20000,40000", "--load", "0.5,2"
    )
    assert "my-sessions.jsonl" in proc.stdout and "Mooncake" not in proc.stdout
    data = json.loads((out / "route_sim.json").read_text())["trace"]
    assert data["name"] == "my-sessions.jsonl" and data["requests"] == 31
    points = {(p["kv_tokens_per_replica"], p["load"]): p for p in data["points"]}
    assert set(points) == {(20000, 0.5), (20000, 2.0), (40000, 0.5), (40000, 2.0)}
    policies = {"capstan-precise", "capstan-precise-events", "capstan-approx", "llmd-weights-precise"}
    policies |= {"llmd-weights-approx", "least-loaded", "round-robin", "random"}
    # the saturation point per capacity: printed, stored, and the same at every load of that capacity
    assert "saturation at load" in proc.stdout and "route.mooncake_hit_under_load" in proc.stdout
    assert set(data["saturation_load"]) == {"20000", "40000"}
    assert all(p["saturation_load"] == data["saturation_load"][str(kv)] > 0 for (kv, _), p in points.items())
    for (kv, _), p in points.items():
        assert {r["policy"] for r in p["rows"]} == policies  # every policy at every point
        # 30,010 tokens need 1,876 KV blocks: a replica of 20,000 tokens has 1,250, one of 40,000 has 2,500
        assert p["rejected"] == (1 if kv == 20000 else 0)
        assert {r["rejected"] for r in p["rows"]} == {p["rejected"]}
        assert all(r["hit_vs_pooled"] > 0 for r in p["rows"] if r["policy"] != "random")
    # load 0.5 stretches the recorded arrivals by 2, load 2 compresses them by 2
    assert points[(20000, 0.5)]["arrival_span_s"] == 4 * points[(20000, 2.0)]["arrival_span_s"] > 0


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (("--kv-tokens", ""), "--kv-tokens '': give at least one capacity"),
        (("--kv-tokens", "8"), "--kv-tokens: 8 is less than one KV block"),
        (("--load=0.5,0",), "--load '0.5,0': '0' must be a positive load factor"),
        (("--load=-1",), "'-1' must be a positive load factor"),
        (("--load", "fast"), "'fast' is not a number"),
    ],
)
def test_route_sim_bench_bad_points_are_one_line(tmp_path: Path, args: tuple[str, ...], problem: str) -> None:
    proc = run_bench(
        "route_sim.py", "--smoke", "--out", str(tmp_path), "--trace", str(_trace(tmp_path / "t.jsonl")), *args
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and problem in lines[0], proc.stderr


def test_route_sim_bench_names_a_bad_trace_line(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.jsonl", huge=False)
    trace.write_text(trace.read_text() + '{"timestamp": 1}\n')
    proc = run_bench("route_sim.py", "--smoke", "--out", str(tmp_path), "--trace", str(trace))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and f"{trace}:31: bad Mooncake record" in lines[0], (
        proc.stderr
    )


def test_route_http_bench_smoke(tmp_path: Path) -> None:
    run_smoke("route_http.py", tmp_path)
    data = json.loads((tmp_path / "route_http.json").read_text())
    (row,) = data["rows"]
    assert row["policy"] == "capstan-precise" and row["ok"] > 0 and row["errors"] == 0
    assert (tmp_path / "route_http_ttft_p90.png").stat().st_size > 0


def test_route_http_bench_replays_any_trace(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "my-sessions.jsonl", huge=False)
    out = tmp_path / "out"
    proc = run_smoke("route_http.py", out, "--trace", str(trace))
    assert "my-sessions.jsonl, 12 requests" in proc.stdout
    data = json.loads((out / "route_http.json").read_text())
    assert data["workload"] == {"trace": "my-sessions.jsonl", "requests": 12}
    (row,) = data["rows"]
    assert row["policy"] == "capstan-precise" and row["ok"] == 12 and row["errors"] == 0
    assert row["backend_hit_ratio"] > 0  # the trace's shared prefixes reached the replicas as shared text
    # the pooled reference is computed in the engines' own tokens: a cache-aware policy lands near it
    assert 0 < data["pooled"] <= 1 and data["pooled_rejected"] == 0
    assert row["hit_vs_pooled"] == row["backend_hit_ratio"] / data["pooled"]
    assert 0.5 < row["hit_vs_pooled"] < 1.5, (row["backend_hit_ratio"], data["pooled"])
    assert "pooled-cache reference" in proc.stdout


def test_route_http_bench_names_a_bad_trace_line(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.jsonl", huge=False)
    trace.write_text('{"timestamp": 0, "input_length": 2000, "output_length": 1, "hash_ids": [1]}\n')
    proc = run_bench("route_http.py", "--smoke", "--out", str(tmp_path / "out"), "--trace", str(trace))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and f"{trace}:1: input_length 2000 needs more" in lines[0]
    assert not (tmp_path / "out").exists()  # nothing started


def test_route_index_bench_smoke(tmp_path: Path) -> None:
    run_smoke("route_index.py", tmp_path)
    data = json.loads((tmp_path / "route_index.json").read_text())
    assert data["entries"] > 0 and data["match_us"]["p99"] > 0
    assert set(data["bytes_per_entry"]) == {"precise", "approximate"}
    assert (tmp_path / "route_index_match.png").stat().st_size > 0


def test_route_served_model_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("route_served_model.py", tmp_path)
    assert "loop stall" in proc.stdout
    data = json.loads((tmp_path / "route_served_model.json").read_text())
    rows = data["rows"]
    assert [r["prompt_tokens"] > 0 for r in rows] == [True, True]
    assert rows[1]["prompt_tokens"] > rows[0]["prompt_tokens"]
    assert all(r["served"]["sha256"]["hash_cold_us"] > 0 and r["tokenize_us"] > 0 for r in rows)
    assert set(data["thread_speed_beside"]) == {"encode", "encode_batch"}
    assert (tmp_path / "route_served_model.png").stat().st_size > 0


def test_route_served_model_bench_refuses_an_unknown_algorithm(tmp_path: Path) -> None:
    proc = run_bench("route_served_model.py", "--algos", "md5", "--out", str(tmp_path))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "unknown ['md5']" in lines[0], proc.stderr


def test_route_sim_runs_only_the_policies_asked_for(tmp_path: Path) -> None:
    proc = run_smoke("route_sim.py", tmp_path, "--policies", "capstan-precise", "--no-agentic")
    data = json.loads((tmp_path / "route_sim.json").read_text())
    assert {r["policy"] for p in data["trace"]["points"] for r in p["rows"]} == {
        "capstan-precise",
        "round-robin",
    }
    assert "agentic" not in data and "Agentic" not in proc.stdout
    bad = run_bench("route_sim.py", "--smoke", "--policies", "capstan-exact", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and "unknown ['capstan-exact']" in bad.stderr


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
