"""Real HTTP servers on loopback for the router's integration tests: uvicorn in a thread, and a small upstream.

The upstream is a real Starlette app speaking enough of vLLM's surface (``/health``, ``/metrics``, OpenAI
completions with SSE) for the proxy's failure paths, which the engine simulator does not produce on demand: it
obeys an ``x-test-mode`` request header (``die``: stream two chunks then drop the connection; ``slow``: stream one
chunk then wait; ``fail=<name>``: answer 503 when this upstream is ``<name>``; ``error=<name>``: answer 500;
``hang=<name>``: send nothing, not even the headers, for 30 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


class ServerThread:
    """Runs an ASGI app with uvicorn on 127.0.0.1 (free port) in its own thread and event loop; ``config``
    instead of ``app``: that exact uvicorn configuration (e.g. ``Router.server_config``, as ``route serve``)."""

    def __init__(self, app: Any = None, *, config: uvicorn.Config | None = None) -> None:
        self.server = uvicorn.Server(
            config
            or uvicorn.Config(
                app, host="127.0.0.1", port=0, log_level="warning", lifespan="on", access_log=False
            )
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    @property
    def port(self) -> int:
        port: int = self.server.servers[0].sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


class Upstream:
    """State of one test upstream, readable from the test thread."""

    def __init__(self, name: str, waiting: int = 0) -> None:
        self.name = name
        self.waiting = waiting
        self.healthy = True
        self.requests: list[dict[str, Any]] = []
        self.cancelled = threading.Event()
        self.app = Starlette(
            routes=[
                Route("/health", self.health),
                Route("/metrics", self.metrics),
                Route("/v1/chat/completions", self.complete, methods=["POST"]),
                Route("/v1/completions", self.complete, methods=["POST"]),
            ]
        )

    async def health(self, request: Request) -> Response:
        return Response(status_code=200 if self.healthy else 503)

    async def metrics(self, request: Request) -> Response:
        text = (
            f'vllm:num_requests_waiting{{model_name="m"}} {self.waiting}\n'
            'vllm:num_requests_running{model_name="m"} 0\n'
            'vllm:kv_cache_usage_perc{model_name="m"} 0.1\n'
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1\n'
        )
        return PlainTextResponse(text)

    async def complete(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        mode = request.headers.get("x-test-mode", "")
        if mode == f"fail={self.name}":
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        if mode == f"error={self.name}":
            return JSONResponse({"error": {"message": "engine failed"}}, status_code=500)
        if mode in (f"hang={self.name}", "hang"):
            await asyncio.sleep(30)
        if not body.get("stream"):
            return JSONResponse({"id": "x", "served_by": self.name, "choices": [{"text": "hi"}]})

        async def events() -> AsyncIterator[bytes]:
            try:
                if mode.startswith("queued="):  # a busy engine: the headers at once, the first token later
                    await asyncio.sleep(float(mode.removeprefix("queued=")))
                for i in range(3):
                    yield f"data: {json.dumps({'served_by': self.name, 'i': i})}\n\n".encode()
                    if mode == "die" and i == 1:
                        raise RuntimeError("engine crashed")
                    if mode == "slow":
                        await asyncio.sleep(30)
                    await asyncio.sleep(0.01)
                yield b"data: [DONE]\n\n"
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            except GeneratorExit:
                self.cancelled.set()
                raise

        return StreamingResponse(events(), media_type="text/event-stream")


class EngineProcess:
    """A real ``capstan enginesim serve`` child (one replica, preset ``tiny-test``) on a free port: a process the
    tests can freeze (SIGSTOP) and thaw (SIGCONT)."""

    def __init__(self, model: str = "m", *extra: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        code = "import sys; from capstan.cli.main import main; main(sys.argv[1:])"
        self.args = [sys.executable, "-c", code, "enginesim", "serve", "--port", str(self.port),
                     "--preset", "tiny-test", "--model", model, *extra]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> EngineProcess:
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while True:  # NOTE: bounded by the deadline
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"enginesim exited: {err[-500:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("enginesim did not start")
            time.sleep(0.2)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def metrics(self) -> str:
        return httpx.get(f"{self.url}/metrics", timeout=5).text

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def serve_gateway(config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """A real ``capstan route serve --config config --port port`` child, once its ``/health`` answers 200 (its
    output in ``log``)."""
    argv = [
        sys.executable,
        "-m",
        "capstan.cli.main",
        "route",
        "serve",
        "--config",
        str(config),
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # bounded by the deadline
        assert proc.poll() is None, log.read_text()[-2000:]
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"gateway on {port} did not start: {log.read_text()[-2000:]}")
