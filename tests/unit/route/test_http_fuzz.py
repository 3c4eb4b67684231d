"""Fuzzing the gateway's HTTP surface in-process (ASGI, no network): it never answers 5xx other than 503 for
well-formed requests with no healthy endpoint, and every error has OpenAI's shape. Cases hypothesis found are kept
as explicit examples."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from capstan.config import load_model
from capstan.route import Endpoint, RouteConfig
from capstan.route._proxy import Router, validate_body

pytestmark = pytest.mark.unit

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant"]) | json_values},
    optional={"content": st.text(max_size=50) | json_values},
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["m", "other"]) | json_values,
        "messages": st.lists(message, max_size=3) | json_values,
        "prompt": st.text(max_size=50) | st.lists(st.integers(0, 1000), max_size=40) | json_values,
        "stream": st.booleans() | json_values,
        "max_tokens": st.integers(-5, 50) | json_values,
        "cache_salt": st.text(max_size=5) | json_values,
    },
)


def make_router() -> Router:
    cfg = load_model(RouteConfig, {"proxy": {"max_body_bytes": 2000}}, "test")
    router = Router(cfg)
    # No monitor running: the endpoint stays unhealthy, so a valid request ends in 503.
    router.monitor.endpoints = (Endpoint("e0", "http://127.0.0.1:9", ("m",)),)
    return router


ROUTER = make_router()
TRANSPORT = httpx.ASGITransport(app=ROUTER.app)


async def post(path: str, content: bytes) -> httpx.Response:
    async with httpx.AsyncClient(transport=TRANSPORT, base_url="http://router") as client:
        return await client.post(path, content=content, headers={"content-type": "application/json"})


def check(resp: httpx.Response) -> None:
    assert resp.status_code in {400, 404, 413, 503}, resp.text
    err = resp.json()["error"]
    assert isinstance(err["message"], str) and err["message"]
    assert set(err) == {"message", "type", "param", "code"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]), body=bodies)
@example(path="/v1/chat/completions", body={"model": "m", "messages": [{"role": "user", "content": [1]}]})
@example(path="/v1/chat/completions", body={"model": "m", "messages": [{"role": "user", "content": {}}]})
@example(path="/v1/completions", body={"model": "m", "prompt": [True]})
@example(path="/v1/completions", body={"model": "m", "prompt": [], "max_tokens": True})
async def test_json_bodies_never_break_the_router(path: str, body: dict[str, Any]) -> None:
    check(await post(path, json.dumps(body).encode()))


@settings(max_examples=100, deadline=None)
@given(raw=st.binary(max_size=3000))
@example(raw=b"\xff\xfe")
@example(raw=b'"just a string"')
@example(raw=b"1e999999")
async def test_arbitrary_bytes_never_break_the_router(raw: bytes) -> None:
    check(await post("/v1/chat/completions", raw))


def test_validation_accepts_the_openai_shapes() -> None:
    validate_body(json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}).encode(), "chat")
    validate_body(
        json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}
        ).encode(),
        "chat",
    )
    validate_body(json.dumps({"model": "m", "prompt": [1, 2, 3], "stream": True}).encode(), "completions")
    validate_body(json.dumps({"model": "m", "prompt": ["a", "b"]}).encode(), "completions")
