"""The replica shell without a network: injected clock and time scale, scrape-time metrics, request parsing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from capstan.enginesim import EngineRequest, LatencyModel, Replica, ReplicaSpec
from capstan.enginesim._request import BadRequest, build_engine_request
from capstan.kvcache import Tokenizer, block_hashes

pytestmark = pytest.mark.unit

LAT = LatencyModel(step_overhead_s=0.01, prefill_s_per_token=0.001, decode_s_per_seq=0.0)


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_time_scale_maps_wall_to_model_time_and_metrics_follow() -> None:
    clock = FakeClock()
    rep = Replica(ReplicaSpec(model="m", latency=LAT, num_gpu_blocks=64, time_scale=10.0), clock=clock)
    toks = list(range(40))
    clock.t += 0.1  # 1 model second
    assert rep.model_now() == pytest.approx(1.0)
    rep.engine.submit(EngineRequest("r", 40, block_hashes(toks), 1), rep.model_now())
    # TTFT = 0.01 + 40 * 0.001 = 0.05 model s = 5 ms wall at scale 10.
    clock.t += 0.004
    text = generate_latest(rep.registry).decode()
    assert 'vllm:num_requests_running{engine="0",model_name="m"} 1.0' in text
    clock.t += 0.002
    text = generate_latest(rep.registry).decode()
    assert 'vllm:num_requests_running{engine="0",model_name="m"} 0.0' in text
    assert 'vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 1.0' in text
    assert 'vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.05' in text
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 40.0' in text
    assert "capstan_enginesim_gpu_busy_seconds_total" in text
    assert 'vllm:cache_config_info{block_size="16"' in text


def test_two_replicas_have_separate_registries() -> None:
    a = Replica(ReplicaSpec(model="m", latency=LAT, num_gpu_blocks=64))
    b = Replica(ReplicaSpec(model="m", latency=LAT, num_gpu_blocks=32))
    assert 'num_gpu_blocks="64"' in generate_latest(a.registry).decode()
    assert 'num_gpu_blocks="32"' in generate_latest(b.registry).decode()


def test_build_request_fields() -> None:
    tok = Tokenizer()
    r = build_engine_request(
        {"model": "m", "prompt": "hello world " * 10, "max_completion_tokens": 7, "cache_salt": "t1"},
        "x",
        tok,
    )
    assert r.max_tokens == 7 and r.prompt_len == 21  # the trailing space is a token
    assert r.block_hashes == block_hashes(tok.encode("hello world " * 10), salt="t1")
    assert build_engine_request({"model": "m", "prompt": "a"}, "x", tok).max_tokens == 16
    with pytest.raises(BadRequest, match="'messages' is required"):
        build_engine_request({"model": "m", "prompt": "a"}, "x", tok, chat=True)
    with pytest.raises(BadRequest, match="max_tokens"):
        build_engine_request({"model": "m", "prompt": "a", "max_tokens": 0}, "x", tok)
    with pytest.raises(BadRequest, match="empty"):
        build_engine_request({"model": "m", "prompt": ""}, "x", tok)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)


@given(
    st.dictionaries(
        st.sampled_from(["model", "messages", "prompt", "max_tokens", "stream", "cache_salt", "x"]),
        json_values,
        max_size=6,
    ),
    st.sampled_from([True, False, None]),
)
@settings(max_examples=300, deadline=None)
def test_any_json_body_is_a_request_or_a_bad_request(body: dict[str, Any], chat: bool | None) -> None:
    try:
        r = build_engine_request(body, "x", Tokenizer(), chat=chat)
    except BadRequest as exc:
        assert str(exc)
    else:
        assert r.prompt_len >= 1 and r.max_tokens >= 1
