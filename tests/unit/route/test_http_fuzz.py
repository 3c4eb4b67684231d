"""Fuzzing the gateway's HTTP surface in-process (ASGI, no network) over the whole input space (``_bodies``): it
never answers 5xx other than 503 (no healthy endpoint, for the requests it accepts), and every error has OpenAI's
shape. Cases hypothesis found are kept as explicit examples."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from capstan.config import load_model
from capstan.route import Endpoint, RouteConfig, Router, upstream_for
from capstan.route._proxy import validate_body

from ._bodies import Raw, any_bodies, deep, encode

pytestmark = pytest.mark.unit


def make_router() -> Router:
    cfg = load_model(RouteConfig, {"proxy": {"max_body_bytes": 64 * 1024}}, "test")
    router = Router(cfg, upstream=upstream_for(cfg.proxy))
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
    assert err["type"] == ("invalid_request_error" if resp.status_code < 500 else "server_error")


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]), body=any_bodies)
@example(path="/v1/chat/completions", body={"model": "m", "messages": [{"role": "user", "content": [1]}]})
@example(path="/v1/chat/completions", body={"model": "m", "messages": [{"role": "user", "content": {}}]})
@example(path="/v1/completions", body={"model": "m", "prompt": [True]})
@example(path="/v1/completions", body={"model": "m", "prompt": [], "max_tokens": True})
@example(path="/v1/chat/completions", body=CHAT | {"x": deep(5000, "[")})  # RecursionError: 500
@example(path="/v1/chat/completions", body=CHAT | {"x": deep(5000, "{")})
@example(
    path="/v1/completions", body={"model": "m", "prompt": [-1] * 16}
)  # OverflowError packing uint32: 500
@example(path="/v1/completions", body={"model": "m", "prompt": [2**32] * 16})
@example(path="/v1/completions", body={"model": "m", "prompt": [2**70]})
@example(
    path="/v1/chat/completions", body=CHAT | {"stream": True, "stream_options": "x"}
)  # AttributeError: 500
@example(path="/v1/chat/completions", body=CHAT | {"cache_salt": "\ud800"})  # UnicodeEncodeError: 500
@example(path="/v1/chat/completions", body=CHAT | {"temperature": float("nan")})
@example(path="/v1/chat/completions", body=CHAT | {"temperature": Raw("1e999")})
async def test_json_bodies_never_break_the_router(path: str, body: Any) -> None:
    check(await post(path, encode(body)))


@settings(max_examples=100, deadline=None)
@given(raw=st.binary(max_size=3000))
@example(raw=b"\xff\xfe")
@example(raw=b'"just a string"')
@example(raw=b"1e999999")
@example(raw=b"[" * 100_000)
async def test_arbitrary_bytes_never_break_the_router(raw: bytes) -> None:
    check(await post("/v1/chat/completions", raw))


@pytest.mark.parametrize(
    ("body", "param", "needle"),
    [
        (CHAT | {"x": deep(5000, "[")}, None, "nested more than 200 levels"),
        ({"model": "m", "prompt": [1, -1]}, "prompt[1]", "greater than or equal to 0"),
        ({"model": "m", "prompt": [2**32]}, "prompt[0]", "less than or equal to 4294967295"),
        (CHAT | {"stream_options": "x"}, "stream_options", "expected an object, but got a string"),
        (CHAT | {"stream_options": {"include_usage": 1}}, "stream_options.include_usage", "a boolean"),
        (CHAT | {"temperature": "hot"}, "temperature", "expected a number, but got a string"),
        (CHAT | {"temperature": Raw("1e999")}, "temperature", "finite"),
        (CHAT | {"temperature": float("nan")}, None, "invalid JSON"),
        (CHAT | {"stop": 3}, "stop", "expected a string or an array"),
        (CHAT | {"tools": [{"type": "function", "function": {}}]}, "tools[0].function.name", "Missing"),
        (CHAT | {"n": "2"}, "n", "expected an integer, but got a string"),
        (CHAT | {"seed": 2**80}, "seed", "less than or equal"),
        (CHAT | {"logit_bias": []}, "logit_bias", "expected an object"),
        (
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
            "messages[0].content[0].text",
            "expected a string, but got an integer",
        ),
        (
            {"model": "m", "messages": [{"role": "a", "tool_calls": "x"}]},
            "messages[0].tool_calls",
            "an array",
        ),
    ],
)
def test_each_wrong_field_is_named(body: dict[str, Any], param: str | None, needle: str) -> None:
    kind = "completions" if "prompt" in body else "chat"
    with pytest.raises(Exception) as info:
        validate_body(encode(body), kind)  # type: ignore[arg-type]
    rej = info.value
    assert getattr(rej, "status", None) == 400
    assert getattr(rej, "param", None) == param and needle in str(rej)


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
    full = {
        **CHAT,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
        "top_p": 0.9,
        "max_completion_tokens": 5,
        "stop": ["\n"],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "tool_choice": "auto",
        "response_format": {"type": "json_object"},
        "logit_bias": {"50256": -100},
        "seed": -1,
        "vendor_extension": {"anything": [1, "x", None]},  # unknown fields pass through, as vLLM lets them
    }
    assert validate_body(json.dumps(full).encode(), "chat") == full
