"""The router over real loopback HTTP: relaying, streaming, retries, failures, disconnects, KV events over ZMQ."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import zmq

from capstan.config import load_model
from capstan.kvcache import BlockStored, Tokenizer, block_hashes, encode_kv_batch, render_chat
from capstan.route import RouteConfig, Router, recommended_scheduler, upstream_for

from ._servers import ServerThread, Upstream

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # bounded by the deadline
        if cond():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError("condition not reached")


@pytest.fixture(scope="module")
def upstreams() -> Iterator[list[tuple[Upstream, ServerThread]]]:
    ups = [Upstream("a"), Upstream("b"), Upstream("c")]
    servers = [ServerThread(u.app).__enter__() for u in ups]
    yield list(zip(ups, servers, strict=True))
    for s in servers:
        s.__exit__()


def router_for(
    urls: list[tuple[str, str]], extra: dict[str, object] | None = None, models: list[str] | None = None
) -> Router:
    cfg = {
        "endpoints": [{"name": n, "url": u, "models": models or ["m"]} for n, u in urls],
        "proxy": {"poll_interval_s": 0.05},
        **(extra or {}),
    }
    route = load_model(RouteConfig, cfg, "test")
    return Router(route, upstream=upstream_for(route.proxy))


@pytest.fixture(scope="module", params=["aiohttp", "httpx"])
def gateway(
    request: pytest.FixtureRequest, upstreams: list[tuple[Upstream, ServerThread]]
) -> Iterator[tuple[Router, str]]:
    router = router_for(
        [(u.name, s.url) for u, s in upstreams],
        {
            "scheduler": {"prefix": {"kind": "approximate", "stride": 1}},
            "proxy": {"poll_interval_s": 0.05, "upstream_client": request.param},
        },
    )
    with ServerThread(router.app) as srv:
        wait_until(lambda: all(e.healthy for e in router.snapshot(set())))
        yield router, srv.url


def chat(text: str, **kw: object) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **kw}


def test_chat_and_completions_are_relayed(gateway: tuple[Router, str]) -> None:
    _router, url = gateway
    r = httpx.post(f"{url}/v1/chat/completions", json=chat("hello"), timeout=10)
    assert r.status_code == 200 and r.json()["served_by"] in {"a", "b", "c"}
    r = httpx.post(f"{url}/v1/completions", json={"model": "m", "prompt": "hello"}, timeout=10)
    assert r.status_code == 200 and r.json()["choices"] == [{"text": "hi"}]
    models = httpx.get(f"{url}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == ["m"]
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    assert "capstan_route_decision_seconds_count" in metrics
    learnt = re.search(r"^capstan_route_learn_seconds_count (\S+)$", metrics, re.M)
    assert learnt and float(learnt.group(1)) >= 2  # the two requests above, once each endpoint accepted them
    assert "capstan_route_prefix_index_entries" in metrics


def test_shared_prefix_sticks_to_one_upstream(gateway: tuple[Router, str]) -> None:
    _, url = gateway
    system = " ".join(f"rule{i}" for i in range(400))
    served = {
        httpx.post(
            f"{url}/v1/chat/completions",
            json={
                "model": "m",
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"q{i}"}],
            },
            timeout=10,
        ).json()["served_by"]
        for i in range(6)
    }
    assert len(served) == 1


def test_streaming_is_passed_through(gateway: tuple[Router, str]) -> None:
    _, url = gateway
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=chat("s", stream=True), timeout=10) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [ln for ln in r.iter_lines() if ln]
    assert lines[-1] == "data: [DONE]"
    assert [json.loads(ln[6:])["i"] for ln in lines[:-1]] == [0, 1, 2]


def test_backend_dying_mid_stream_gives_an_error_event(gateway: tuple[Router, str]) -> None:
    _, url = gateway
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json=chat("d", stream=True),
        headers={"x-test-mode": "die"},
        timeout=10,
    ) as r:
        lines = [ln for ln in r.iter_lines() if ln]
    assert len(lines) == 3
    err = json.loads(lines[-1][6:])
    assert err["error"]["code"] == "upstream_error"


def test_failure_before_first_byte_is_retried_elsewhere(
    gateway: tuple[Router, str], upstreams: list[tuple[Upstream, ServerThread]]
) -> None:
    router, url = gateway
    for target in ("a", "b", "c"):
        body = chat(f"retry {target} " + " ".join(f"w{i}" for i in range(200)))
        r = httpx.post(
            f"{url}/v1/chat/completions", json=body, headers={"x-test-mode": f"fail={target}"}, timeout=10
        )
        assert r.status_code == 200
        served = r.json()["served_by"]
        assert served != target
        # only the endpoint that accepted the request is assumed to hold its prompt
        hashes = router.route_request(body, {}).block_hashes
        assert hashes and router.scheduler.approximate is not None
        held = router.scheduler.approximate.match(hashes, ["a", "b", "c"])
        assert held[served] == len(hashes) and held[target] == 0


def test_client_disconnect_cancels_upstream(
    gateway: tuple[Router, str], upstreams: list[tuple[Upstream, ServerThread]]
) -> None:
    router, url = gateway
    for u, _ in upstreams:
        u.cancelled.clear()
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        json=chat("slow", stream=True),
        headers={"x-test-mode": "slow"},
        timeout=10,
    ) as r:
        first = next(r.iter_lines())
        assert first.startswith("data: ")
    wait_until(lambda: any(u.cancelled.is_set() for u, _ in upstreams))
    wait_until(lambda: sum(router.tracker.in_flight.values()) == 0)


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("/v1/chat/completions", b"{not json", 400, None),
        ("/v1/chat/completions", b"[1, 2]", 400, None),
        (
            "/v1/chat/completions",
            json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(),
            400,
            "model",
        ),
        ("/v1/chat/completions", json.dumps({"model": "m"}).encode(), 400, "messages"),
        ("/v1/chat/completions", json.dumps({"model": 3, "messages": []}).encode(), 400, "model"),
        ("/v1/chat/completions", json.dumps({"model": "m", "messages": "hi"}).encode(), 400, "messages"),
        ("/v1/chat/completions", json.dumps({**chat("x"), "stream": "yes"}).encode(), 400, "stream"),
        ("/v1/completions", json.dumps({"model": "m"}).encode(), 400, "prompt"),
        ("/v1/completions", json.dumps({"model": "m", "prompt": {"a": 1}}).encode(), 400, "prompt"),
        ("/v1/chat/completions", json.dumps(chat("x") | {"model": "gpt-9"}).encode(), 404, "model"),
    ],
)
def test_bad_requests_get_openai_errors(
    gateway: tuple[Router, str], path: str, body: bytes, status: int, param: str | None
) -> None:
    _, url = gateway
    r = httpx.post(f"{url}{path}", content=body, headers={"content-type": "application/json"}, timeout=10)
    assert r.status_code == status
    err = r.json()["error"]
    assert (
        err["param"] == param and isinstance(err["message"], str) and err["type"] == "invalid_request_error"
    )


def test_body_over_the_limit_is_413(upstreams: list[tuple[Upstream, ServerThread]]) -> None:
    router = router_for([("a", upstreams[0][1].url)], {"proxy": {"max_body_bytes": 1000}})
    with ServerThread(router.app) as srv:
        r = httpx.post(f"{srv.url}/v1/chat/completions", json=chat("x" * 2000), timeout=10)
        assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"

        def chunks() -> Iterator[bytes]:  # no content-length: the limit is enforced while reading
            yield b'{"model": "m", "messages": [{"role": "user", "content": "'
            for _ in range(30):
                yield b"y" * 100
            yield b'"}]}'

        r = httpx.post(f"{srv.url}/v1/chat/completions", content=chunks(), timeout=10)
        assert r.status_code == 413


def test_no_healthy_endpoint_is_503() -> None:
    router = router_for([("dead", f"http://127.0.0.1:{free_port()}")])
    with ServerThread(router.app) as srv:
        r = httpx.post(f"{srv.url}/v1/chat/completions", json=chat("x"), timeout=10)
        assert r.status_code == 503
        assert "no healthy endpoint" in r.json()["error"]["message"]
        assert httpx.get(f"{srv.url}/health", timeout=10).status_code == 503


def test_an_endpoint_that_goes_down_is_avoided(upstreams: list[tuple[Upstream, ServerThread]]) -> None:
    a, b = Upstream("a"), Upstream("b")
    with ServerThread(a.app) as sa, ServerThread(b.app) as sb:
        router = router_for([("a", sa.url), ("b", sb.url)])
        with ServerThread(router.app) as srv:
            wait_until(lambda: all(e.healthy for e in router.snapshot(set())))
            a.healthy = False
            wait_until(lambda: not next(e for e in router.snapshot(set()) if e.name == "a").healthy)
            served = {
                httpx.post(f"{srv.url}/v1/chat/completions", json=chat(f"{i}"), timeout=10).json()[
                    "served_by"
                ]
                for i in range(8)
            }
            assert served == {"b"}


def test_precise_index_follows_kv_events_over_zmq(upstreams: list[tuple[Upstream, ServerThread]]) -> None:
    ctx = zmq.Context()
    pubs, addrs = [], []
    for _ in upstreams:
        pub = ctx.socket(zmq.PUB)
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        pubs.append(pub)
        addrs.append(f"tcp://127.0.0.1:{port}")
    cfg = {
        "endpoints": [
            {"name": u.name, "url": s.url, "models": ["m"], "kv_events": addr}
            for (u, s), addr in zip(upstreams, addrs, strict=True)
        ],
        "scheduler": {"prefix": {"kind": "precise"}},
    }
    route = load_model(RouteConfig, cfg, "test")
    router = Router(route, upstream=upstream_for(route.proxy))
    text = render_chat([{"role": "user", "content": " ".join(f"doc{i}" for i in range(300))}])
    tokens = Tokenizer().encode(text)
    hashes = block_hashes(tokens, 16)
    try:
        with ServerThread(router.app) as srv:
            wait_until(lambda: all(e.healthy for e in router.snapshot(set())))
            seq = 0

            def publish() -> bool:  # PUB/SUB joins asynchronously: publish until the router has applied it
                nonlocal seq
                frames = [
                    b"kv@127.0.0.1:1@m",
                    seq.to_bytes(8, "big"),
                    encode_kv_batch([BlockStored(hashes, None, tokens[: len(hashes) * 16], 16)], 1.0),
                ]
                pubs[2].send_multipart(frames)
                seq += 1
                time.sleep(0.05)
                return router.scheduler.precise is not None and router.scheduler.precise.size > 0

            wait_until(publish)
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": " ".join(f"doc{i}" for i in range(300))}],
            }
            served = {
                httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=10).json()["served_by"]
                for _ in range(5)
            }
            assert served == {"c"}
            assert "capstan_route_kv_event_batches_total" in httpx.get(f"{srv.url}/metrics", timeout=10).text
    finally:
        for p in pubs:
            p.close(linger=0)
        ctx.term()


def test_precise_index_keeps_affinity_for_a_request_still_in_flight(
    upstreams: list[tuple[Upstream, ServerThread]],
) -> None:
    """The in-flight overlay over HTTP: while a first request is still unanswered (no KV event has said
    anything), the next turn of the same conversation goes where it went, although that endpoint has the most
    prefill pending (without the overlay the prefill-cost scorer sends it elsewhere); when the client gives up,
    the request leaves the overlay."""
    cfg = {
        "endpoints": [
            {"name": u.name, "url": s.url, "models": ["m"], "kv_events": f"tcp://127.0.0.1:{free_port()}"}
            for u, s in upstreams
        ],
        "proxy": {"poll_interval_s": 0.05},
        "scheduler": recommended_scheduler().model_dump(mode="json"),  # precise; prefix 3 + prefill-cost 1
    }
    route = load_model(RouteConfig, cfg, "test")
    router = Router(route, upstream=upstream_for(route.proxy))
    overlay = router.scheduler.precise.inflight if router.scheduler.precise is not None else None
    assert overlay is not None
    first = " ".join(f"turn{i}" for i in range(400))
    with ServerThread(router.app) as srv:
        wait_until(lambda: all(e.healthy for e in router.snapshot(set())))

        def hang() -> None:  # the upstream never answers; the client gives up after 3 s
            with contextlib.suppress(httpx.TimeoutException):
                httpx.post(
                    f"{srv.url}/v1/chat/completions",
                    json=chat(first),
                    headers={"x-test-mode": "hang"},
                    timeout=3,
                )

        waiting = threading.Thread(target=hang)
        waiting.start()
        try:
            wait_until(lambda: overlay.requests == 1)
            (busy,) = [n for n, count in router.tracker.in_flight.items() if count]
            body = {
                "model": "m",
                "messages": [
                    {"role": "user", "content": first},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": "and then?"},
                ],
            }
            answer = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=10).json()
            assert answer["served_by"] == busy
            assert overlay.requests == 1  # the answered one settled, the hanging one is still there
        finally:
            waiting.join()
        wait_until(lambda: overlay.requests == 0)  # the client left: settled, nothing kept
    assert overlay.size == 0
