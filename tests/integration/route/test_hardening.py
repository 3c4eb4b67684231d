"""The gateway against hostile clients and failing upstreams, over real loopback HTTP: bad bodies on one kept-alive
connection, a real `capstan enginesim serve` frozen with SIGSTOP mid-stream, upstreams that never answer, clients
that leave, clients that never finish sending, and metrics that count what happened."""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from capstan.config import load_model
from capstan.route import RouteConfig, Router, upstream_for
from tests.integration._slow_clients import read_until_closed, unfinished_requests_answers

from ._servers import EngineProcess, ServerThread, Upstream

pytestmark = pytest.mark.integration

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}


def wait_until(cond: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # bounded by the deadline
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def router_for(urls: list[tuple[str, str]], **proxy: object) -> Router:
    cfg = {
        "endpoints": [{"name": n, "url": u, "models": ["m"]} for n, u in urls],
        "proxy": {"poll_interval_s": 0.05, **proxy},
    }
    route = load_model(RouteConfig, cfg, "test")
    return Router(route, upstream=upstream_for(route.proxy))


def serve(router: Router) -> ServerThread:
    """The router served as `capstan route serve` serves it (with its header deadline)."""
    return ServerThread(config=router.server_config("127.0.0.1", 0, lifespan="on"))


def sample(metrics: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` with these labels in a Prometheus text page (0 when absent)."""
    total = 0.0
    for line in metrics.splitlines():
        m = re.match(r"^([^{ ]+)(?:\{(.*)\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineProcess]:
    with EngineProcess() as e:
        yield e


def deep(n: int) -> str:
    return "[" * n + "]" * n


BAD_BODIES: list[tuple[str, str, bytes]] = [
    ("nested 5000 deep", "/v1/chat/completions",
     b'{"model":"m","messages":[{"role":"user","content":"x"}],"x":' + deep(5000).encode() + b"}"),
    ("token id -1", "/v1/completions", json.dumps({"model": "m", "prompt": [-1] * 20}).encode()),
    ("token id 2**32", "/v1/completions", json.dumps({"model": "m", "prompt": [2**32] * 20}).encode()),
    ("token id 2**70", "/v1/completions", json.dumps({"model": "m", "prompt": [2**70]}).encode()),
    ("stream_options 'x'", "/v1/chat/completions",
     json.dumps(CHAT | {"stream": True, "stream_options": "x"}).encode()),
    ("temperature 'hot'", "/v1/chat/completions", json.dumps(CHAT | {"temperature": "hot"}).encode()),
    ("temperature NaN", "/v1/chat/completions", json.dumps(CHAT | {"temperature": float("nan")}).encode()),
    ("temperature 1e999", "/v1/chat/completions",
     json.dumps(CHAT).encode()[:-1] + b', "temperature": 1e999}'),
    ("cache_salt lone surrogate", "/v1/chat/completions", json.dumps(CHAT | {"cache_salt": "\ud800"}).encode()),
    ("tools [1]", "/v1/chat/completions", json.dumps(CHAT | {"tools": [1]}).encode()),
    ("content part text 5", "/v1/chat/completions",
     json.dumps({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}).encode()),
    ("token id outside the engine's vocabulary", "/v1/completions",
     json.dumps({"model": "m", "prompt": [131072] * 20}).encode()),
]  # fmt: skip


def test_bad_bodies_get_400_and_the_kept_alive_connection_stays_usable(engine: EngineProcess) -> None:
    router = router_for([("e0", engine.url)])
    with serve(router) as srv:
        wait_until(lambda: all(e.healthy for e in router.snapshot(set())))
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        conn.connect()
        sock = conn.sock
        for name, path, body in BAD_BODIES:
            conn.request("POST", path, body=body, headers={"content-type": "application/json"})
            resp = conn.getresponse()
            data = json.loads(resp.read())
            assert resp.status == 400, (name, data)
            assert set(data["error"]) == {"message", "type", "param", "code"}, name
            assert not resp.will_close and conn.sock is sock, f"{name}: the connection was closed"
        conn.request("POST", "/v1/chat/completions", body=json.dumps(CHAT | {"max_tokens": 3}))
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["usage"]["completion_tokens"] == 3
        assert conn.sock is sock
        conn.close()
        metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
    relayed = 1  # the vocabulary is the engine's to check: its 400 is relayed
    assert sample(metrics, "capstan_route_rejected_total", status="400") == len(BAD_BODIES) - relayed
    assert sample(metrics, "capstan_route_responses_total", status="400") == len(BAD_BODIES)


def test_a_frozen_upstream_ends_the_stream_with_an_error_event_and_is_marked_unhealthy() -> None:
    with EngineProcess() as frozen:
        router = router_for([("e0", frozen.url)], stall_timeout_s=1.0)
        with serve(router) as srv:
            wait_until(lambda: all(e.healthy for e in router.snapshot(set())))
            body = CHAT | {"stream": True, "max_tokens": 3000}
            events: list[str] = []
            try:
                with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json=body, timeout=30) as r:
                    assert r.status_code == 200
                    for line in r.iter_lines():
                        if not line:
                            continue
                        events.append(line)
                        if len(events) == 2:
                            frozen.signal(signal.SIGSTOP)  # the engine stops mid-stream, connections open
                healthy_while_frozen = next(e for e in router.snapshot(set())).healthy
                time.sleep(0.5)  # several polling rounds against the frozen process
                still_unhealthy = not next(e for e in router.snapshot(set())).healthy
                metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
            finally:
                frozen.signal(signal.SIGCONT)
            wait_until(lambda: next(e for e in router.snapshot(set())).healthy)  # it answers again
    assert all(e.startswith("data: ") for e in events)
    last = json.loads(events[-1][len("data: ") :])
    assert last["error"]["code"] == "upstream_timeout" and "sent nothing for 1 s" in last["error"]["message"]
    assert "[DONE]" not in events[-1]
    assert not healthy_while_frozen and still_unhealthy
    assert sample(metrics, "capstan_route_errors_total", endpoint="e0", kind="stall") == 1
    assert sample(metrics, "capstan_route_errors_total", endpoint="e0", kind="client_disconnect") == 0


def test_a_stream_queued_before_its_first_token_is_not_a_stall() -> None:
    """A busy engine sends a stream's headers at once and nothing until it has prefilled the prompt: longer than
    the stall timeout under load. While the engine answers its health checks that wait is a queue, not a stall,
    up to the read timeout; a stream silent after its first chunk still stalls at the stall timeout."""
    a = Upstream("a")
    with ServerThread(a.app) as sa:
        router = router_for([("a", sa.url)], stall_timeout_s=0.5, read_timeout_s=1.8)
        with serve(router) as srv:
            wait_until(lambda: all(e.healthy for e in router.snapshot(set())))
            body = CHAT | {"stream": True}
            queued = httpx.post(
                f"{srv.url}/v1/chat/completions", json=body, headers={"x-test-mode": "queued=1.2"}, timeout=20
            )
            healthy_after = next(e for e in router.snapshot(set())).healthy
            metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
            assert sample(metrics, "capstan_route_errors_total", endpoint="a", kind="stall") == 0
            # past the read timeout a silent engine is given up on even though it answers health checks
            too_long = httpx.post(
                f"{srv.url}/v1/chat/completions", json=body, headers={"x-test-mode": "queued=5"}, timeout=20
            )
            metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
    events = [line for line in queued.text.splitlines() if line]
    assert queued.status_code == 200 and events[-1] == "data: [DONE]" and len(events) == 4, queued.text
    assert healthy_after
    last = json.loads([line for line in too_long.text.splitlines() if line][-1][len("data: ") :])
    assert last["error"]["code"] == "upstream_timeout"
    # it says what it waited for: a first token, for the read timeout (not "nothing for" the stall timeout)
    assert "sent no first token within the read timeout (1.8 s)" in last["error"]["message"], last
    assert sample(metrics, "capstan_route_errors_total", endpoint="a", kind="stall") == 1


def test_a_stream_whose_upstream_sends_no_headers_is_sent_elsewhere() -> None:
    a, b = Upstream("a"), Upstream("b")
    with ServerThread(a.app) as sa, ServerThread(b.app) as sb:
        router = router_for([("a", sa.url), ("b", sb.url)], stall_timeout_s=0.5)
        with serve(router) as srv:
            served = set()
            timeouts = 0.0
            for i in range(20):  # until one request went to the silent endpoint first
                wait_until(lambda: all(e.healthy for e in router.snapshot(set())))
                r = httpx.post(
                    f"{srv.url}/v1/chat/completions",
                    json=CHAT | {"stream": True, "messages": [{"role": "user", "content": f"q{i}"}]},
                    headers={"x-test-mode": "hang=a"},
                    timeout=20,
                )
                assert r.status_code == 200
                served.add(json.loads(r.text.splitlines()[0][len("data: ") :])["served_by"])
                metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
                timeouts = sample(metrics, "capstan_route_errors_total", endpoint="a", kind="timeout")
                if timeouts:
                    break
    assert served == {"b"} and timeouts == 1


def test_every_upstream_silent_is_504() -> None:
    a = Upstream("a")
    with ServerThread(a.app) as sa:
        router = router_for([("a", sa.url)], stall_timeout_s=0.5)
        with serve(router) as srv:
            wait_until(lambda: all(e.healthy for e in router.snapshot(set())))
            r = httpx.post(
                f"{srv.url}/v1/chat/completions",
                json=CHAT | {"stream": True},
                headers={"x-test-mode": "hang=a"},
                timeout=20,
            )
            metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "upstream_timeout" and r.json()["error"]["type"] == "server_error"
    assert sample(metrics, "capstan_route_rejected_total", status="504", reason="upstream_timeout") == 1
    assert sample(metrics, "capstan_route_responses_total", status="504") == 1


def test_a_client_that_leaves_a_buffered_request_aborts_the_engine_work(engine: EngineProcess) -> None:
    router = router_for([("e0", engine.url)])
    before = engine.metrics()
    with serve(router) as srv:
        wait_until(lambda: all(e.healthy for e in router.snapshot(set())))
        body = json.dumps(CHAT | {"max_tokens": 3000}).encode()  # about 15 s of decoding on tiny-test
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            wait_until(lambda: sample(engine.metrics(), "vllm:num_requests_running") == 1)
        # the client is gone: the gateway cancels its upstream request and the engine frees the sequence (a long
        # wait: on a saturated machine noticing the disconnect can take seconds; the generation takes longer)
        wait_until(
            lambda: (
                sample(engine.metrics(), "vllm:request_success_total", finished_reason="abort")
                == sample(before, "vllm:request_success_total", finished_reason="abort") + 1
            ),
            timeout=60.0,
        )
        after = engine.metrics()
        metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
    assert sample(after, "vllm:num_requests_running") == 0
    assert sample(after, "vllm:kv_cache_usage_perc") == 0
    assert sample(after, "vllm:request_success_total", finished_reason="length") == sample(
        before, "vllm:request_success_total", finished_reason="length"
    )
    assert sample(metrics, "capstan_route_errors_total", endpoint="e0", kind="client_disconnect") == 1
    assert sample(metrics, "capstan_route_responses_total", status="499") == 1


def test_clients_that_do_not_finish_sending_are_dropped() -> None:
    a = Upstream("a")
    with ServerThread(a.app) as sa:
        router = router_for([("a", sa.url)], header_timeout_s=0.5, body_timeout_s=0.5)
        with serve(router) as srv:
            addr = ("127.0.0.1", srv.port)
            answer = unfinished_requests_answers(addr, "/v1/chat/completions")
            assert answer.startswith(b"HTTP/1.1 408 ")
            assert b'"code":"body_timeout"' in answer.replace(b" ", b"")
            with socket.create_connection(addr, timeout=15) as s:  # one request, then half of the next
                body = json.dumps(CHAT).encode()
                s.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                    + b"POST /v1/chat/completions HTTP/1.1\r\nHo"
                )
                answer = read_until_closed(s)
                assert answer.startswith(b"HTTP/1.1 200 ") and answer.count(b"HTTP/1.1 ") == 1
            metrics = httpx.get(f"{srv.url}/metrics", timeout=10).text
    assert sample(metrics, "capstan_route_rejected_total", status="408", reason="body_timeout") == 1


def test_metrics_count_what_happened() -> None:
    a = Upstream("a")
    with ServerThread(a.app) as sa:
        router = router_for([("a", sa.url)])
        with serve(router) as srv:
            wait_until(lambda: all(e.healthy for e in router.snapshot(set())))
            for i in range(3):  # complete streams: not client disconnects
                with httpx.stream(
                    "POST", f"{srv.url}/v1/chat/completions", json=CHAT | {"stream": True}, timeout=10
                ) as r:
                    assert [ln for ln in r.iter_lines() if ln][-1] == "data: [DONE]", i
            with httpx.stream(  # a client that leaves mid-stream: one client disconnect
                "POST",
                f"{srv.url}/v1/chat/completions",
                json=CHAT | {"stream": True},
                headers={"x-test-mode": "slow"},
                timeout=10,
            ) as r:
                next(r.iter_lines())
            wait_until(lambda: a.cancelled.is_set())
            relayed = httpx.post(
                f"{srv.url}/v1/chat/completions", json=CHAT, headers={"x-test-mode": "error=a"}, timeout=10
            )
            assert relayed.status_code == 500  # the engine's own 500, relayed
            retried = httpx.post(
                f"{srv.url}/v1/chat/completions", json=CHAT, headers={"x-test-mode": "fail=a"}, timeout=10
            )
            assert retried.status_code == 502  # 503 from the only endpoint: nothing left to try
            a.healthy = False
            wait_until(lambda: not router.snapshot(set())[0].healthy)
            none_left = httpx.post(f"{srv.url}/v1/chat/completions", json=CHAT, timeout=10)
            assert none_left.status_code == 503
            m = httpx.get(f"{srv.url}/metrics", timeout=10).text
    assert sample(m, "capstan_route_errors_total", endpoint="a", kind="client_disconnect") == 1
    assert sample(m, "capstan_route_errors_total", endpoint="a", kind="status") == 2  # the 500 and the 503
    assert sample(m, "capstan_route_responses_total", status="200") == 4
    assert sample(m, "capstan_route_responses_total", status="500") == 1
    assert sample(m, "capstan_route_responses_total", status="502") == 1
    assert sample(m, "capstan_route_responses_total", status="503") == 1
    assert sample(m, "capstan_route_rejected_total", status="502", reason="upstream_error") == 1
    assert sample(m, "capstan_route_rejected_total", status="503", reason="no_healthy_endpoint") == 1
