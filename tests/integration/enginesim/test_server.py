"""Replicas over real loopback HTTP and a real ZMQ SUB socket."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import zmq
import zmq.asyncio
from prometheus_client.parser import text_string_to_metric_families

from capstan.enginesim import LatencyModel, Replica, ReplicaSpec, running_replicas
from capstan.kvcache import BlockStored, Tokenizer, block_hashes, decode_kv_batch, render_chat

pytestmark = pytest.mark.integration

LAT = LatencyModel(step_overhead_s=0.002, prefill_s_per_token=0.00001, decode_s_per_seq=0.0001)
MODEL = "sim-model"


def spec(**kw: object) -> ReplicaSpec:
    base: dict[str, object] = {
        "model": MODEL,
        "latency": LAT,
        "num_gpu_blocks": 512,
        "max_num_seqs": 8,
        "kv_events_port": 0,
        "max_body_bytes": 200_000,
        "max_model_len": 4096,
    }
    base.update(kw)
    return ReplicaSpec(**base)  # type: ignore[arg-type]


@pytest.fixture
async def replicas() -> AsyncIterator[list[Replica]]:
    async with running_replicas([spec(), spec(time_scale=5.0)]) as reps:
        yield reps


def url(r: Replica, path: str) -> str:
    return f"http://127.0.0.1:{r.bound_port}{path}"


def metrics(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in out:
                continue
            out[s.name] = s.value
    return out


SYSTEM = "You are a careful assistant. " * 40


async def test_chat_usage_reports_cached_tokens_on_reuse(replicas: list[Replica]) -> None:
    r = replicas[0]
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
    }
    async with httpx.AsyncClient(timeout=30) as client:
        first = (await client.post(url(r, "/v1/chat/completions"), json={**body, "max_tokens": 5})).json()
        second = (await client.post(url(r, "/v1/chat/completions"), json={**body, "max_tokens": 5})).json()
    prompt_tokens = len(Tokenizer().encode(render_chat(body["messages"])))
    assert first["usage"]["prompt_tokens"] == prompt_tokens
    assert first["usage"]["completion_tokens"] == 5
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == (prompt_tokens - 1) // 16 * 16
    assert second["choices"][0]["message"]["role"] == "assistant"
    assert second["choices"][0]["finish_reason"] == "length"


async def test_streaming_completions_and_usage(replicas: list[Replica]) -> None:
    r = replicas[1]
    body = {
        "model": MODEL,
        "prompt": "once upon a time " * 20,
        "max_tokens": 30,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events: list[str] = []
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", url(r, "/v1/completions"), json=body) as resp,
    ):
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
    assert len(Tokenizer().encode(text)) == 30
    assert len([c for c in chunks if c["choices"]]) >= 3  # tokens arrive in several groups, not all at once
    assert chunks[-1]["usage"]["completion_tokens"] == 30
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"


async def test_chat_streaming_and_token_ids_prompt(replicas: list[Replica]) -> None:
    r = replicas[0]
    async with httpx.AsyncClient(timeout=30) as client:
        async with client.stream(
            "POST",
            url(r, "/v1/chat/completions"),
            json={
                "model": MODEL,
                "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 3,
                "stream": True,
            },
        ) as resp:
            lines = [line async for line in resp.aiter_lines() if line.startswith("data: ")]
        first = json.loads(lines[0][6:])
        assert first["object"] == "chat.completion.chunk"
        assert first["choices"][0]["delta"]["role"] == "assistant"
        ids = list(range(100, 150))
        resp2 = await client.post(
            url(r, "/v1/completions"), json={"model": MODEL, "prompt": ids, "max_tokens": 2}
        )
        assert resp2.json()["usage"]["prompt_tokens"] == 50


@pytest.mark.parametrize(
    ("path", "payload", "status", "needle"),
    [
        ("/v1/chat/completions", b"{not json", 400, "invalid JSON"),
        ("/v1/chat/completions", b"[]", 400, "object"),
        ("/v1/chat/completions", json.dumps({"messages": []}).encode(), 400, "'model'"),
        ("/v1/chat/completions", json.dumps({"model": MODEL}).encode(), 400, "'messages'"),
        ("/v1/chat/completions", json.dumps({"model": MODEL, "messages": "hi"}).encode(), 400, "messages"),
        ("/v1/completions", json.dumps({"model": MODEL, "prompt": 5}).encode(), 400, "prompt"),
        (
            "/v1/completions",
            json.dumps({"model": MODEL, "prompt": "a", "max_tokens": "3"}).encode(),
            400,
            "max_tokens",
        ),
        ("/v1/completions", json.dumps({"model": "other", "prompt": "a"}).encode(), 404, "other"),
        (
            "/v1/completions",
            json.dumps({"model": MODEL, "prompt": "a " * 5000}).encode(),
            400,
            "max_model_len",
        ),
        ("/v1/completions", json.dumps({"model": MODEL, "prompt": "a" * 300_000}).encode(), 413, "limit"),
    ],
)
async def test_openai_style_errors(
    replicas: list[Replica], path: str, payload: bytes, status: int, needle: str
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        resp = await client.post(
            url(replicas[0], path), content=payload, headers={"content-type": "application/json"}
        )
    assert resp.status_code == status
    err = resp.json()["error"]
    assert needle in err["message"]
    assert err["code"] == status
    assert isinstance(err["type"], str)


async def test_models_health_tokenize(replicas: list[Replica]) -> None:
    r = replicas[0]
    async with httpx.AsyncClient(timeout=30) as client:
        assert (await client.get(url(r, "/health"))).status_code == 200
        models = (await client.get(url(r, "/v1/models"))).json()
        assert [m["id"] for m in models["data"]] == [MODEL]
        tok = (
            await client.post(url(r, "/tokenize"), json={"model": MODEL, "prompt": "hello big world"})
        ).json()
        assert tok["tokens"] == Tokenizer().encode("hello big world")
        assert tok["count"] == 3


async def test_metrics_use_vllm_names_and_count_tokens(replicas: list[Replica]) -> None:
    r = replicas[0]
    prompt = "shared prefix words " * 30
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(3):
            resp = await client.post(
                url(r, "/v1/completions"), json={"model": MODEL, "prompt": prompt, "max_tokens": 4}
            )
            assert resp.status_code == 200
        text = (await client.get(url(r, "/metrics"))).text
    m = metrics(text)
    n = len(Tokenizer().encode(prompt))
    assert m["vllm:prefix_cache_queries_total"] == 3 * n
    assert m["vllm:prefix_cache_hits_total"] == 2 * ((n - 1) // 16 * 16)
    assert m["vllm:prompt_tokens_total"] == 3 * n
    assert m["vllm:generation_tokens_total"] == 12
    assert m["vllm:num_requests_running"] == 0
    assert m["vllm:num_requests_waiting"] == 0
    assert m["vllm:kv_cache_usage_perc"] == 0
    assert m["vllm:time_to_first_token_seconds_count"] == 3
    assert m["vllm:e2e_request_latency_seconds_count"] == 3
    assert m["capstan_enginesim_gpu_busy_seconds_total"] > 0
    assert 'vllm:cache_config_info{block_size="16"' in text
    assert 'num_gpu_blocks="512"' in text
    assert 'model_name="sim-model"' in text


async def test_kv_events_reach_a_zmq_subscriber(replicas: list[Replica]) -> None:
    r = replicas[0]
    ctx = zmq.asyncio.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(f"tcp://127.0.0.1:{r.kv_bound_port}")
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    await asyncio.sleep(0.3)  # PUB/SUB slow joiner: let the subscription propagate before publishing
    prompt = "event words flow here " * 12
    tokens = Tokenizer().encode(prompt)
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            resp = await client.post(
                url(r, "/v1/completions"), json={"model": MODEL, "prompt": prompt, "max_tokens": 2}
            )
            assert resp.status_code == 200
        frames = await asyncio.wait_for(sub.recv_multipart(), 10)
    finally:
        sub.close()
        ctx.term()
    topic, seq, payload = frames
    assert topic == f"kv@127.0.0.1:{r.bound_port}@{MODEL}".encode()
    assert len(seq) == 8
    _, events = decode_kv_batch(payload)
    stored = [e for e in events if isinstance(e, BlockStored)]
    assert stored and stored[0].block_hashes == block_hashes(tokens)
    assert stored[0].parent_block_hash is None
    assert stored[0].token_ids == tokens[: len(stored[0].block_hashes) * 16]


async def test_client_disconnect_aborts_the_request(replicas: list[Replica]) -> None:
    r = replicas[0]
    body = {"model": MODEL, "prompt": "slow " * 10, "max_tokens": 3000, "stream": True}
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream("POST", url(r, "/v1/completions"), json=body) as resp,
    ):
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                break
    for _ in range(200):
        await asyncio.sleep(0.02)
        if r.engine.counters.requests_aborted:
            break
    assert r.engine.counters.requests_aborted == 1
    assert r.engine.load().running == 0
