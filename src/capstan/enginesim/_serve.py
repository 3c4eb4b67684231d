"""Running several replicas in one process: one uvicorn server per replica, all in the same event loop."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace

import uvicorn
import zmq

from capstan.enginesim._server import Replica, ReplicaSpec
from capstan.httpserver import server_config

_START_TIMEOUT_S = 30.0


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to its owner (several servers share one loop)."""

    def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
        return contextlib.nullcontext()


def _bind(host: str, port: int) -> socket.socket:
    # NOTE: proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on accepted sockets whose proto says TCP,
    # and without it Nagle + delayed ACK add ~40 ms to every response on a kept-alive connection.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def port_conflict(specs: Sequence[ReplicaSpec]) -> str | None:
    """Why these replicas cannot all listen (two of them, or a replica's HTTP and KV-event sockets, given the same
    host and port), or None. Port 0 (any free port) never conflicts."""
    seen: dict[tuple[str, int], str] = {}
    for i, spec in enumerate(specs):
        for what, port in (("HTTP", spec.port), ("KV-event", spec.kv_events_port)):
            if not port:
                continue
            key = (spec.host, port)
            here = f"replica {i}'s {what} port"
            if key in seen:
                return f"{here} {port} is also {seen[key]}"
            seen[key] = here
    return None


@asynccontextmanager
async def running_replicas(specs: Sequence[ReplicaSpec]) -> AsyncIterator[list[Replica]]:
    """Serve every spec on its port (0: a free one; ``Replica.bound_port`` tells which) until the block exits.

    Raises ValueError when two sockets are given the same port, OSError when a port is taken. The replicas'
    drivers and ZMQ sockets start before the servers.
    """
    conflict = port_conflict(specs)
    if conflict is not None:
        raise ValueError(conflict)
    socks: list[socket.socket] = []
    try:
        for spec in specs:
            socks.append(_bind(spec.host, spec.port))
    except OSError:
        for sock in socks:
            sock.close()
        raise
    replicas: list[Replica] = []
    servers: list[_Server] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for spec, sock in zip(specs, socks, strict=True):
            port = sock.getsockname()[1]
            replica = Replica(replace(spec, port=port))
            replica.bound_port = port
            replicas.append(replica)
            try:  # binds the KV-event socket now, so that a taken port is an OSError here (the lifespan's
                await replica.start()  # start() is then a no-op)
            except zmq.ZMQError as exc:
                raise OSError(exc.errno, f"KV-event port {spec.kv_events_port}: {exc.strerror}") from None
            config = server_config(
                replica.app,
                header_timeout_s=spec.header_timeout_s,
                lifespan="on",
                timeout_graceful_shutdown=2,
                # Longer than clients' idle keep-alive (httpx: 5 s) so a pooled connection is never closed by the
                # server just as a client reuses it (a reset, not an answer).
                timeout_keep_alive=65,
            )
            server = _Server(config)
            servers.append(server)
            tasks.append(asyncio.create_task(server.serve(sockets=[sock]), name=f"enginesim-http-{port}"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _START_TIMEOUT_S
        while not all(srv.started for srv in servers):  # NOTE: bounded by the deadline
            if any(t.done() for t in tasks):
                for t in tasks:
                    if t.done() and t.exception() is not None:
                        raise RuntimeError(f"a replica failed to start: {t.exception()}")
                raise RuntimeError("a replica stopped while starting")
            if loop.time() > deadline:
                raise TimeoutError("replicas did not start within 30 s")
            await asyncio.sleep(0.01)
        yield replicas
    finally:
        for server in servers:
            server.should_exit = True
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(t, 10)
        for replica in replicas:  # those whose server never ran its lifespan's stop()
            await replica.stop()
        for sock in socks:
            sock.close()


async def serve_forever(specs: Sequence[ReplicaSpec], stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set."""
    async with running_replicas(specs):
        await stop.wait()
