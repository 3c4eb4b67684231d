"""The engine simulator against hostile clients over real loopback HTTP: bad bodies on one kept-alive connection,
clients that never finish sending, and a client that leaves a non-streaming request (its sequence and KV blocks are
freed at once)."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from capstan.enginesim import LatencyModel, Replica, ReplicaSpec, running_replicas
from tests.integration._slow_clients import unfinished_requests_answers

pytestmark = pytest.mark.integration

LAT = LatencyModel(step_overhead_s=0.002, prefill_s_per_token=0.00001, decode_s_per_seq=0.0001)
MODEL = "sim-model"
CHAT: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hello there"}]}


class ReplicaThread:
    """One replica served by ``running_replicas`` in its own thread and event loop, so that the test can use
    blocking sockets."""

    def __init__(self, spec: ReplicaSpec) -> None:
        self.spec = spec
        self.replica: Replica | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with running_replicas([self.spec]) as (replica,):
            self.replica = replica
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> Replica:
        self._thread.start()
        assert self._ready.wait(30), "replica did not start"
        assert self.replica is not None
        return self.replica

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)


@pytest.fixture
def replica() -> Iterator[Replica]:
    spec = ReplicaSpec(
        model=MODEL,
        latency=LAT,
        num_gpu_blocks=512,
        max_model_len=8192,
        header_timeout_s=0.5,
        body_timeout_s=0.5,
    )
    with ReplicaThread(spec) as r:
        yield r


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


BAD_BODIES: list[tuple[str, str, bytes]] = [
    ("nested 5000 deep", "/v1/chat/completions",
     json.dumps(CHAT).encode()[:-1] + b', "x": ' + deep(5000) + b"}"),
    ("token id -1", "/v1/completions", json.dumps({"model": MODEL, "prompt": [-1] * 20}).encode()),
    ("token id 2**32", "/v1/completions", json.dumps({"model": MODEL, "prompt": [2**32] * 20}).encode()),
    ("token id outside the vocabulary", "/v1/completions",
     json.dumps({"model": MODEL, "prompt": [131072] * 20}).encode()),
    ("stream_options 'x'", "/v1/chat/completions",
     json.dumps(CHAT | {"stream": True, "stream_options": "x"}).encode()),
    ("stream_options.include_usage 'yes'", "/v1/chat/completions",
     json.dumps(CHAT | {"stream": True, "stream_options": {"include_usage": "yes"}}).encode()),
    ("temperature NaN", "/v1/chat/completions", json.dumps(CHAT | {"temperature": float("nan")}).encode()),
    ("stop 3", "/v1/chat/completions", json.dumps(CHAT | {"stop": 3}).encode()),
    ("cache_salt lone surrogate", "/v1/chat/completions", json.dumps(CHAT | {"cache_salt": "\ud800"}).encode()),
    ("tool_calls 'x'", "/v1/chat/completions",
     json.dumps({"model": MODEL, "messages": [{"role": "assistant", "tool_calls": "x"}]}).encode()),
    ("tokenize token id 2**40", "/tokenize", json.dumps({"model": MODEL, "prompt": [2**40]}).encode()),
]  # fmt: skip


def test_bad_bodies_get_400_and_the_kept_alive_connection_stays_usable(replica: Replica) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", replica.bound_port, timeout=30)
    conn.connect()
    sock = conn.sock
    for name, path, body in BAD_BODIES:
        conn.request("POST", path, body=body, headers={"content-type": "application/json"})
        resp = conn.getresponse()
        data = json.loads(resp.read())
        assert resp.status == 400, (name, data)
        err = data["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["code"] == 400, name
        assert not resp.will_close and conn.sock is sock, f"{name}: the connection was closed"
    conn.request("POST", "/v1/chat/completions", body=json.dumps(CHAT | {"max_tokens": 3}))
    resp = conn.getresponse()
    assert resp.status == 200 and json.loads(resp.read())["usage"]["completion_tokens"] == 3
    assert conn.sock is sock
    conn.close()


def test_clients_that_do_not_finish_sending_are_dropped(replica: Replica) -> None:
    addr = ("127.0.0.1", replica.bound_port)
    answer = unfinished_requests_answers(addr, "/v1/completions")
    assert answer.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 0.5 s" in answer


def test_a_client_that_leaves_a_non_streaming_request_frees_its_sequence(replica: Replica) -> None:
    body = json.dumps({"model": MODEL, "prompt": "a long story " * 40, "max_tokens": 5000}).encode()
    with socket.create_connection(("127.0.0.1", replica.bound_port), timeout=10) as s:
        s.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        deadline = time.monotonic() + 10
        while replica.engine.load().running == 0:  # bounded by the deadline
            assert time.monotonic() < deadline, "the request never ran"
            time.sleep(0.02)
        assert replica.engine.load().kv_usage > 0
    deadline = time.monotonic() + 10
    while replica.engine.counters.requests_aborted == 0:  # bounded by the deadline
        assert time.monotonic() < deadline, "the engine kept generating for nobody"
        time.sleep(0.02)
    load = replica.engine.load()
    assert load.running == 0 and load.waiting == 0 and load.kv_usage == 0
    assert replica.engine.counters.requests_finished == 0
