"""Liveness and readiness over HTTP for Capstan's long-running components, the way the kubelet probes them.

``/healthz`` answers 200 while the component's event loop runs (a wedged loop answers nothing, and the kubelet
restarts the container). ``/readyz`` runs the component's checks concurrently, each bounded by ``timeout_s``, and
answers 200 when every one passes, 503 otherwise, with one line per check in the API server's verbose format
(``[+]store ok``, ``[-]cluster failed: …``), each reason passed through the component's redactor. ``/metrics``
serves the component's Prometheus registry when it has one, so one port carries probes and metrics.

A check is an async callable returning None (passed) or the reason it did not; :func:`store_check` (a store's
``database``) and :class:`ClusterCheck` are the two every component has. A standby of a leader election is ready: it is healthy
and waiting, and a Deployment rolling out must not wait for it to lead.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from capstan.kube import KubeClient, KubeConnect

Check = Callable[[], Awaitable[str | None]]
DEFAULT_TIMEOUT_S = 2.0


async def _run_check(check: Check, timeout_s: float) -> str | None:
    try:
        async with asyncio.timeout(timeout_s):
            return await check()
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except Exception as exc:  # a failing check is a failed probe, never a 500
        return f"{type(exc).__name__}: {exc}"


def probe_app(
    ready: Mapping[str, Check],
    *,
    registry: CollectorRegistry | None = None,
    redact: Callable[[str], str] = lambda text: text,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Any:
    """The Starlette app serving ``/healthz``, ``/readyz`` (``ready``'s checks, in their order) and, with a
    ``registry``, ``/metrics``. ``ready`` is read on every request, so a component may replace a check while it
    serves (:mod:`capstan.startup`'s while it waits for its store, then the store's own)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        names = list(ready)
        results = await asyncio.gather(*(_run_check(ready[n], timeout_s) for n in names))
        lines = [
            f"[+]{n} ok" if r is None else f"[-]{n} failed: {redact(' '.join(r.split()))}"
            for n, r in zip(names, results, strict=True)
        ]
        failed = any(r is not None for r in results)
        body = "\n".join([*lines, "readyz check failed" if failed else "readyz check passed"]) + "\n"
        return PlainTextResponse(body, status_code=503 if failed else 200)

    routes: list[Any] = [Route("/healthz", healthz), Route("/livez", healthz), Route("/readyz", readyz)]
    if registry is not None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        metrics_registry = registry

        async def metrics(request: Request) -> Response:
            body = await asyncio.to_thread(generate_latest, metrics_registry)
            return Response(body, media_type=CONTENT_TYPE_LATEST)

        routes.append(Route("/metrics", metrics))
    return Starlette(routes=routes)


async def serve_probes(app: Any, sock: socket.socket, stop: asyncio.Event) -> None:
    """Serve ``app`` on the listening ``sock`` (:func:`capstan.httpserver.bind_listener`) until ``stop``."""
    import uvicorn

    from capstan.httpserver import server_config

    server = uvicorn.Server(server_config(app, lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await asyncio.wait({task, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Pingable(Protocol):
    def ping(self) -> str | None: ...


@contextlib.asynccontextmanager
async def serving_probes(
    sock: socket.socket | None,
    checks: Mapping[str, Check],
    *,
    registry: CollectorRegistry | None = None,
    redact: Callable[[str], str] = lambda text: text,
) -> AsyncIterator[None]:
    """Serve :func:`probe_app` of ``checks`` on ``sock`` (None: serve nothing) while the block runs; on leaving it,
    stop the server and close the checks that hold a client (:class:`ClusterCheck`)."""
    stop = asyncio.Event()
    task = None
    if sock is not None:
        task = asyncio.create_task(
            serve_probes(probe_app(checks, registry=registry, redact=redact), sock, stop)
        )
    try:
        yield
    finally:
        stop.set()
        if task is not None:
            await task
        for check in checks.values():
            if isinstance(check, ClusterCheck):
                await check.close()


def store_check(database: Pingable) -> Check:
    """The store answers a trivial query (run in a thread: the drivers block)."""

    async def check() -> str | None:
        return await asyncio.to_thread(database.ping)

    return check


class ClusterCheck:
    """The API server answers ``GET /version`` through a client of its own, opened on first use (so a probe never
    waits behind the component's watches) and closed by :meth:`close`."""

    def __init__(self, connect: KubeConnect) -> None:
        self._connect = connect
        self._client: KubeClient | None = None

    async def __call__(self) -> str | None:
        from capstan.kube import ApiError

        try:
            if self._client is None:
                self._client = await self._connect()
            await self._client.request("GET", "/version")
        except ApiError as exc:
            return str(exc)
        return None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
