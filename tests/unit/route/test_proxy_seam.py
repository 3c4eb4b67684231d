"""The proxy's failure handling over its upstream seam: a scripted upstream (``fakeupstream``) behind the real
Router, called in-process through ASGI. Which endpoints are tried, what the client gets, what is counted and
closed; the same against real servers and real clients is tests/integration/route/test_hardening.py.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import generate_latest

from capstan.config import load_model
from capstan.route import RouteConfig, Router

from .fakeupstream import Answer, FakeUpstream, healthy_endpoints, sse

pytestmark = pytest.mark.unit

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
URLS = {"a": "http://a.test", "b": "http://b.test"}


async def gateway(upstream: FakeUpstream, *names: str, waiting: dict[str, int] | None = None) -> Router:
    cfg = {
        "endpoints": [{"name": n, "url": URLS[n], "models": ["m"]} for n in names],
        "proxy": {"stall_timeout_s": 1.5, "read_timeout_s": 7.0},
    }
    router = Router(
        load_model(RouteConfig, cfg, "test"), upstream=upstream, transport=healthy_endpoints(waiting)
    )
    await (
        router.monitor.refresh()
    )  # one polling round: every endpoint healthy (the monitor loop is not started)
    return router


async def post(router: Router, body: dict[str, Any]) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=router.app), base_url="http://gw"
    ) as client:
        return await client.post("/v1/chat/completions", json=body)


def healthy(router: Router) -> dict[str, bool]:
    return {e.endpoint.name: e.healthy for e in router.snapshot(set())}


async def test_an_endpoint_that_refuses_is_excluded_and_the_next_one_answers() -> None:
    upstream = FakeUpstream({URLS["a"]: [Answer(before="connect")], URLS["b"]: [Answer(), Answer()]})
    router = await gateway(upstream, "a", "b", waiting={"b.test": 50})  # a, the idle one, is picked first
    reply = await post(router, CHAT)
    assert reply.status_code == 200 and reply.json() == {"ok": True}
    assert upstream.opened == [URLS["a"], URLS["b"]] and upstream.closed == [URLS["b"]]
    assert healthy(router) == {"a": False, "b": True}  # left out until its health check answers again
    assert (await post(router, CHAT)).status_code == 200
    assert upstream.opened[2:] == [URLS["b"]]


async def test_every_endpoint_answering_503_is_502_after_trying_each_once() -> None:
    upstream = FakeUpstream({URLS["a"]: [Answer(status=503)], URLS["b"]: [Answer(status=503)]})
    router = await gateway(upstream, "a", "b")
    reply = await post(router, CHAT)
    assert reply.status_code == 502
    error = reply.json()["error"]
    assert error["code"] == "upstream_error" and "HTTP 503" in error["message"]
    assert sorted(upstream.opened) == sorted(URLS.values()) and sorted(upstream.closed) == sorted(
        URLS.values()
    )
    assert router.tracker.in_flight.get("a", 0) == 0 and router.tracker.in_flight.get("b", 0) == 0


async def test_a_buffered_request_that_times_out_is_504_and_not_sent_elsewhere() -> None:
    upstream = FakeUpstream({URLS["a"]: [Answer(before="timeout")], URLS["b"]: [Answer(before="timeout")]})
    router = await gateway(upstream, "a", "b")
    reply = await post(router, CHAT)
    assert reply.status_code == 504 and reply.json()["error"]["code"] == "upstream_timeout"
    assert len(upstream.opened) == 1  # it may have run the whole time: another engine would start over
    assert upstream.read_timeouts == [7.0]  # buffered: the read timeout, not the stall timeout


async def test_a_stream_that_breaks_ends_with_an_error_event_after_what_was_relayed() -> None:
    upstream = FakeUpstream({URLS["a"]: [sse('{"n": 1}', '{"n": 2}', after="broken")]})
    router = await gateway(upstream, "a")
    reply = await post(router, CHAT | {"stream": True})
    assert reply.status_code == 200
    events = [line[len("data: ") :] for line in reply.text.split("\n\n") if line.startswith("data: ")]
    assert [json.loads(e) for e in events[:2]] == [{"n": 1}, {"n": 2}]
    assert json.loads(events[2])["error"]["code"] == "upstream_error"
    # the socket's timeout of a stream is the read timeout, a backstop: the relay's watchdog enforces the stall one
    assert upstream.read_timeouts == [7.0] and upstream.closed == [URLS["a"]]
    assert healthy(router)["a"]  # a broken stream is not a silent endpoint


async def test_a_stream_that_stalls_ends_with_a_timeout_event_and_marks_the_endpoint_unhealthy() -> None:
    upstream = FakeUpstream({URLS["a"]: [sse('{"n": 1}', after="stall")]})
    router = await gateway(upstream, "a")
    reply = await post(router, CHAT | {"stream": True})
    events = [line[len("data: ") :] for line in reply.text.split("\n\n") if line.startswith("data: ")]
    error = json.loads(events[-1])["error"]
    # the scripted stall is the socket's read timeout (7 s), the backstop behind the watchdog's 1.5 s: the event
    # says which silence ended the stream
    assert error["code"] == "upstream_timeout" and "sent nothing for 7 s mid-stream" in error["message"]
    assert not healthy(router)["a"] and upstream.closed == [URLS["a"]]


async def test_a_client_slow_to_take_the_stream_is_not_the_upstream_stalling() -> None:
    """While the relay waits for the client to take a chunk (backpressure), nothing is read from the upstream: that
    wait is the client's, so it must neither end the stream nor mark the endpoint unhealthy."""
    upstream = FakeUpstream({URLS["a"]: [sse('{"n": 1}', '{"n": 2}', '{"n": 3}')]})
    cfg = {
        "endpoints": [{"name": "a", "url": URLS["a"], "models": ["m"]}],
        "proxy": {"stall_timeout_s": 0.2, "read_timeout_s": 7.0},
    }
    router = Router(
        load_model(RouteConfig, cfg, "test"), upstream=upstream, transport=healthy_endpoints(None)
    )
    await router.monitor.refresh()
    body = json.dumps(CHAT | {"stream": True}).encode()
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"",
        "root_path": "", "headers": [(b"content-type", b"application/json"), (b"host", b"gw")],
        "client": ("127.0.0.1", 1), "server": ("gw", 80),
    }  # fmt: skip
    done = anyio.Event()
    delivered = [False]

    async def receive() -> dict[str, Any]:
        if not delivered[0]:
            delivered[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    sent: list[bytes] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            if message.get("body"):
                await anyio.sleep(0.5)  # the client takes each chunk late: longer than the stall timeout
                sent.append(message["body"])
            if not message.get("more_body"):
                done.set()

    await router.app(scope, receive, send)
    text = b"".join(sent).decode()
    assert [json.loads(e) for e in text.split("data: ")[1:]] == [{"n": 1}, {"n": 2}, {"n": 3}], text
    assert healthy(router)["a"]
    assert 'kind="stall"' not in generate_latest(router.metrics.registry).decode()
