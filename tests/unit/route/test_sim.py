"""The virtual-clock harness and the cache references on small synthetic workloads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from capstan.config import load_model
from capstan.enginesim import EngineConfig, LatencyModel
from capstan.errors import UserError
from capstan.percentile import percentile
from capstan.replay import AgenticConfig, agentic_requests
from capstan.route import (
    SchedulerConfig,
    SimRequest,
    from_replay_requests,
    mooncake_requests,
    pooled_cache_reference,
    simulate,
)

pytestmark = pytest.mark.unit

ENGINE = EngineConfig(
    latency=LatencyModel(step_overhead_s=0.005, prefill_s_per_token=0.0001, decode_s_per_seq=0.0001),
    num_gpu_blocks=1200,
    max_num_seqs=16,
)


def sessions(n_sessions: int = 13, turns: int = 4, gap: float = 0.5) -> list[SimRequest]:
    """Each session resends its growing history: turn t has 64 * (t + 1) blocks of its own chain."""
    out = []
    for s in range(n_sessions):
        chain = [s * 10_000 + i for i in range(64 * turns)]
        for t in range(turns):
            blocks = chain[: 64 * (t + 1)]
            out.append(SimRequest(s * 0.05 + t * gap, f"s{s}t{t}", blocks, len(blocks) * 16 + 5, 8, f"s{s}"))
    return sorted(out, key=lambda r: (r.arrival, r.request_id))


def cfg(data: dict[str, object]) -> SchedulerConfig:
    return load_model(SchedulerConfig, data, "test")


def test_cache_aware_policies_reuse_what_round_robin_recomputes() -> None:
    reqs = sessions()
    rr = simulate(reqs, cfg({"picker": {"type": "round-robin"}, "prefix": {"kind": "none"}}), ENGINE, 4)
    precise = simulate(reqs, cfg({"prefix": {"kind": "precise"}}), ENGINE, 4)
    approx = simulate(
        reqs, cfg({"prefix": {"kind": "approximate", "stride": 1}}), ENGINE, 4, quiet_decisions=10
    )
    assert 0 < approx.extra["quiet_p50_s"] <= approx.extra["quiet_p99_s"]
    bound = pooled_cache_reference(reqs, None).hit_ratio
    assert rr.hit_ratio < 0.5 * bound
    assert precise.hit_ratio > 0.9 * bound
    assert approx.hit_ratio > 0.9 * bound
    assert precise.gpu_seconds_per_request < rr.gpu_seconds_per_request
    assert len(precise.ttft) == len(reqs) and precise.rejected == 0
    assert precise.index_entries > 0 and precise.predicted_cached_tokens > 0


def test_the_cache_bound_optimum_hits_the_infinite_bound_and_costs_no_more_than_the_same_routing() -> None:
    """Every request counting the infinite-cache bound's blocks as cached, wherever it goes: its hit ratio is the
    bound's, and the same routing with it spends no more busy GPU-seconds than without (batching differs between
    routings, through the steps' fixed overhead, so the optimum is taken per routing)."""
    reqs = sessions()
    bound = pooled_cache_reference(reqs, None)
    assert sum(bound.blocks_hit.values()) * 16 == bound.hits and len(bound.blocks_hit) == len(reqs)
    policies: list[dict[str, object]] = [
        {"picker": {"type": "round-robin"}, "prefix": {"kind": "none"}},
        {"prefix": {"kind": "precise"}},
    ]
    for policy in policies:
        plain = simulate(reqs, cfg(policy), ENGINE, 4)
        optimum = simulate(reqs, cfg(policy), ENGINE, 4, assume_cached=bound.blocks_hit)
        assert optimum.hit_ratio == pytest.approx(bound.hit_ratio)
        assert optimum.hit_ratio >= plain.hit_ratio
        busy = [sum(r.busy_seconds for r in res.replicas) for res in (optimum, plain)]
        assert busy[0] <= busy[1], (policy, busy)
        assert sum(r.prefill_tokens for r in optimum.replicas) <= sum(
            r.prefill_tokens for r in plain.replicas
        )


def test_simulation_is_deterministic() -> None:
    reqs = sessions()
    a = simulate(reqs, cfg({"picker": {"type": "random"}, "seed": 3}), ENGINE, 4)
    b = simulate(reqs, cfg({"picker": {"type": "random"}, "seed": 3}), ENGINE, 4)
    assert a.ttft == b.ttft and [r.prefill_tokens for r in a.replicas] == [
        r.prefill_tokens for r in b.replicas
    ]


def test_pooled_reference_counts_leading_blocks_and_evicts_lru() -> None:
    r1 = SimRequest(0, "a", [1, 2, 3], 48, 1)
    r2 = SimRequest(1, "b", [1, 2, 4], 48, 1)
    # the last token is always recomputed: a 48-token prompt can hit at most 2 blocks
    assert pooled_cache_reference([r1, r2], None).hits == 32
    # capacity 3: after r1 the cache holds 3,2,1 (1 most recent); r2 hits 1,2
    assert pooled_cache_reference([r1, r2], 3).hits == 32
    # capacity 1: only block 1 survives r1
    assert pooled_cache_reference([r1, r2], 1).hits == 16
    assert pooled_cache_reference([r1, r2], 1).queries == 96


def test_pooled_reference_leaves_out_what_the_engines_reject() -> None:
    engine = replace(ENGINE, num_gpu_blocks=10, max_model_len=100)
    reqs = [
        SimRequest(
            0.0, "big", list(range(1, 12)), 176, 8
        ),  # 184 tokens: 12 blocks, more than one replica has
        SimRequest(0.1, "long", [1, 2, 3, 4, 5], 80, 30),  # 110 tokens: beyond the context of 100
        SimRequest(0.2, "silent", [1, 2, 3], 48, 0),  # no output token asked for
        SimRequest(10.0, "a", [1, 2, 3], 48, 1),
        SimRequest(20.0, "b", [1, 2, 9], 48, 1),
    ]
    counted = pooled_cache_reference(reqs, None)
    assert counted.rejected == 0 and counted.queries == 176 + 80 + 48 * 3
    ref = pooled_cache_reference(reqs, None, engine=engine)
    # only a and b reach a cache: a finds nothing (the rejected requests stored nothing), b reuses 1, 2
    assert (ref.rejected, ref.queries, ref.hits) == (3, 96, 32)
    assert pooled_cache_reference(reqs, 20, engine=engine).hits == 32
    # the simulated engines reject the same three, and one replica then reuses what the reference says
    res = simulate(reqs, cfg({"prefix": {"kind": "precise"}}), engine, 1)
    assert res.rejected == ref.rejected and len(res.ttft) == 2
    assert res.hit_ratio == ref.hit_ratio
    with pytest.raises(ValueError, match="block_size 32"):
        pooled_cache_reference(reqs, None, 32, engine=engine)


def test_percentile_nearest_rank() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 90) == 4.0
    assert percentile([], 50) != percentile([], 50)  # NaN


def test_mooncake_loader_names_the_bad_line(tmp_path: Path) -> None:
    good = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
    path = tmp_path / "t.jsonl"
    path.write_text(good + '{"timestamp": 1, "input_length": 10}\n')
    with pytest.raises(UserError, match=r"t.jsonl:2: bad Mooncake record"):
        mooncake_requests(path)
    path.write_text(good * 3)
    reqs = mooncake_requests(path, time_scale=2.0, limit=2)
    assert [r.arrival for r in reqs] == [0.0, 0.0]
    assert len(reqs) == 2 and len(reqs[0].block_hashes) == 600 // 16
    assert reqs[0].block_hashes == reqs[1].block_hashes


def test_agentic_sessions_run_closed_loop() -> None:
    cfg_a = AgenticConfig(
        sessions=6,
        session_rate=2.0,
        turns_min=3,
        turns_max=5,
        system_tokens=300,
        tools=2,
        tool_schema_tokens=50,
        user_tokens=20,
        tool_output_tokens=60,
        answer_tokens=10,
        think_time_s=0.5,
    )
    reqs = from_replay_requests(agentic_requests(cfg_a))
    assert any(r.think_s is not None for r in reqs)
    res = simulate(reqs, cfg({"prefix": {"kind": "precise"}}), ENGINE, 2)
    assert len(res.ttft) == len(reqs) and res.rejected == 0
    rr = simulate(reqs, cfg({"picker": {"type": "round-robin"}, "prefix": {"kind": "none"}}), ENGINE, 2)
    assert res.hit_ratio > rr.hit_ratio
    # closed loop: a session's turns never overlap, so the makespan exceeds the sum of one session's turns
    assert res.makespan_s > 0.5
