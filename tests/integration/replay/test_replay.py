"""The replayer against real simulated replicas over loopback HTTP."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.enginesim import LatencyModel, ReplicaSpec, running_replicas
from capstan.replay import (
    AgenticConfig,
    ReplayConfig,
    ReplayRequest,
    agentic_requests,
    mooncake_requests,
    replay,
)

pytestmark = pytest.mark.integration

LAT = LatencyModel(step_overhead_s=0.005, prefill_s_per_token=0.0001, decode_s_per_seq=0.0001)


def spec() -> ReplicaSpec:
    return ReplicaSpec(model="m", latency=LAT, num_gpu_blocks=4096, max_num_seqs=16, time_scale=10.0)


async def test_agentic_replay_records_cache_reuse_and_counters() -> None:
    cfg = AgenticConfig(
        model="m", sessions=4, session_rate=4.0, turns_min=3, turns_max=3, system_tokens=300, tools=2,
        tool_schema_tokens=50, user_tokens=20, tool_output_tokens=40, answer_tokens=10, think_time_s=0.5,
    )  # fmt: skip
    reqs = agentic_requests(cfg)
    async with running_replicas([spec()]) as (rep,):
        url = f"http://127.0.0.1:{rep.bound_port}"
        report = await replay(reqs, ReplayConfig(target=url, time_scale=10.0, backends=[url]))
    assert len(report.results) == 12
    assert all(r.ok for r in report.results), [r.error for r in report.results if not r.ok]
    for r in report.results:
        assert r.ttft is not None and r.e2e is not None and 0 < r.ttft <= r.e2e
        assert r.completion_tokens > 0
    follow_ups = [r for r in report.results if not r.id.endswith("t000")]
    # Every follow-up turn resends its session's conversation: its previous prompt is cached.
    assert all(r.cached_tokens > 0 for r in follow_ups)
    # Later sessions of an agent type find the system prompt cached too.
    (backend,) = report.backends
    assert backend.error is None
    assert backend.prefix_cache_hits == sum(r.cached_tokens for r in report.results)
    assert backend.prefix_cache_queries == sum(r.prompt_tokens for r in report.results)
    assert backend.gpu_busy_seconds > 0
    assert report.summary["backend_hit_ratio"] == pytest.approx(report.summary["usage_hit_ratio"])
    assert backend.ttft_count == 12 and backend.e2e_count == 12
    assert 0 < report.summary["backend_ttft_mean"] <= report.summary["backend_e2e_mean"]


async def test_schedule_is_honoured_and_errors_are_recorded() -> None:
    reqs = [
        ReplayRequest(
            t=0.0, api="completions", body={"model": "m", "prompt": "a b c", "max_tokens": 2}, id="a"
        ),
        ReplayRequest(
            t=5.0, api="completions", body={"model": "m", "prompt": "a b c", "max_tokens": 2}, id="b"
        ),
        ReplayRequest(
            t=5.0, api="completions", body={"model": "nope", "prompt": "x", "max_tokens": 2}, id="c"
        ),
    ]
    async with running_replicas([spec()]) as (rep,):
        url = f"http://127.0.0.1:{rep.bound_port}"
        report = await replay(reqs, ReplayConfig(target=url, time_scale=10.0, stream=False))
    by_id = {r.id: r for r in report.results}
    assert by_id["a"].ok and by_id["b"].ok
    # Sent at its planned model time (5 s), never earlier.
    assert by_id["b"].sent >= 5.0
    assert by_id["c"].status == 404 and by_id["c"].error is not None and "nope" in by_id["c"].error
    assert report.summary["errors"] == 1
    assert 0 <= report.summary["send_lateness_p99"] < 5.0


async def test_unreachable_target_is_an_error_not_a_hang() -> None:
    reqs = [ReplayRequest(t=0.0, api="completions", body={"model": "m", "prompt": "x"}, id="a")]
    report = await replay(reqs, ReplayConfig(target="http://127.0.0.1:9", backends=["http://127.0.0.1:9"]))
    assert report.results[0].error is not None
    assert report.backends[0].error is not None


async def test_mooncake_requests_share_prefixes_as_traced(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [0, 1, 2]}\n'
        '{"timestamp": 2000, "input_length": 1300, "output_length": 3, "hash_ids": [0, 1, 7]}\n'
        '{"timestamp": 4000, "input_length": 600, "output_length": 3, "hash_ids": [9, 10]}\n'
    )
    reqs = list(mooncake_requests(trace, model="m"))
    async with running_replicas([spec()]) as (rep,):
        url = f"http://127.0.0.1:{rep.bound_port}"
        report = await replay(reqs, ReplayConfig(target=url, time_scale=10.0))
    assert [r.prompt_tokens for r in report.results] == [1100, 1300, 600]
    # The second request shares hash ids 0 and 1 (1024 tokens = 64 blocks) with the first; the third nothing.
    assert [r.cached_tokens for r in report.results] == [0, 1024, 0]
