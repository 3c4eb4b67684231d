"""Fuzzing the engine simulator's HTTP surface in-process (ASGI, no network) over the whole input space (the
gateway's strategies, ``tests/unit/route/_bodies.py``): every answer is a 200 (the driver runs, time-scaled, so
accepted requests are generated) or an OpenAI-style 4xx in vLLM's wording, never a 5xx."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from capstan.enginesim import LatencyModel, Replica, ReplicaSpec
from tests.unit.route._bodies import Raw, any_bodies, deep, encode

pytestmark = pytest.mark.unit

LAT = LatencyModel(step_overhead_s=0.002, prefill_s_per_token=0.00001, decode_s_per_seq=0.0001)
REPLICA = Replica(
    ReplicaSpec(
        model="m",
        latency=LAT,
        num_gpu_blocks=256,
        max_model_len=2048,
        max_body_bytes=64 * 1024,
        time_scale=1000.0,
    )
)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def post(path: str, content: bytes) -> httpx.Response:
    await REPLICA.start()  # the driver runs in the loop of the example (a no-op when already started)
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=REPLICA.app), base_url="http://sim", timeout=30
        ) as client:
            return await client.post(path, content=content, headers={"content-type": "application/json"})
    finally:
        await REPLICA.stop()


def check(resp: httpx.Response) -> None:
    assert resp.status_code in {200, 400, 404, 413}, resp.text
    if resp.status_code != 200:
        err = resp.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert isinstance(err["message"], str) and err["message"] and err["code"] == resp.status_code


@settings(max_examples=200, deadline=None)
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/completions", "/tokenize"]), body=any_bodies)
@example(path="/v1/chat/completions", body=CHAT | {"x": deep(5000, "[")})  # RecursionError: 500
@example(
    path="/v1/completions", body={"model": "m", "prompt": [-1] * 16}
)  # OverflowError packing uint32: 500
@example(path="/v1/completions", body={"model": "m", "prompt": [2**32] * 16})
@example(path="/v1/completions", body={"model": "m", "prompt": [131072] * 16})  # outside the vocabulary
@example(
    path="/v1/chat/completions", body=CHAT | {"stream": True, "stream_options": "x"}
)  # AttributeError: 500
@example(path="/v1/chat/completions", body=CHAT | {"cache_salt": "\ud800"})  # UnicodeEncodeError: 500
@example(path="/v1/chat/completions", body=CHAT | {"temperature": Raw("1e999")})
@example(path="/tokenize", body={"model": "m", "prompt": [2**40]})
async def test_json_bodies_never_break_the_simulator(path: str, body: Any) -> None:
    check(await post(path, encode(body)))


@pytest.mark.parametrize(
    ("body", "param", "needle"),
    [
        ({"model": "m", "prompt": [5, 131072]}, "prompt", "Token id 131072 is out of vocabulary"),
        ({"model": "m", "prompt": [5, -3]}, "prompt[1]", "greater than or equal to 0"),
        (CHAT | {"stream": True, "stream_options": "x"}, "stream_options", "expected an object"),
        (CHAT | {"x": deep(300, "{")}, None, "nested more than 200 levels"),
        (CHAT | {"top_k": 1.5}, "top_k", "expected an integer, but got a number"),
    ],
)
async def test_bad_fields_are_400_naming_them(body: dict[str, Any], param: str | None, needle: str) -> None:
    path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
    resp = await post(path, encode(body))
    assert resp.status_code == 400
    err = resp.json()["error"]
    assert err["param"] == param and needle in err["message"] and err["type"] == "BadRequestError"
