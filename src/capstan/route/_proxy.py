"""The OpenAI-compatible reverse proxy: the thin I/O shell around :class:`Scheduler`.

For each request it reads the body (bounded), validates it the way OpenAI does (400/404 with an
OpenAI-style error
body), turns the prompt into block hashes with the shared ``capstan.kvcache`` contract, asks the scheduler
for an
endpoint over a snapshot of the monitor's load signals plus the router's own in-flight counts, and relays the
answer as it arrives. An endpoint that fails before the first byte (connection refused, 502/503/504) is
excluded
and the request goes to the next pick; one that dies mid-stream ends the client's stream with an SSE ``error``
event. A client that disconnects cancels the upstream request (the upstream connection is closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from capstan.route._config import RouteConfig
from capstan.route._endpoints import EndpointMonitor, EndpointSource, StaticEndpointSource
from capstan.route._hasher import PromptHasher
from capstan.route._index import PreciseKVIndex
from capstan.route._inflight import InFlightTracker
from capstan.route._kvevents import KVEventSubscriber
from capstan.route._metrics import RouterMetrics
from capstan.route._model import Endpoint, EndpointState, RouteRequest
from capstan.route._scheduler import NoEndpointError, Scheduler
from capstan.route._upstream import (
    AiohttpUpstream,
    HttpxUpstream,
    UpstreamClient,
    UpstreamError,
    UpstreamResponse,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_RETRY_STATUSES = frozenset({502, 503, 504})


class _Reject(Exception):
    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


def error_body(
    message: str, *, kind: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _error_response(rej: _Reject) -> JSONResponse:
    kind = "invalid_request_error" if rej.status < 500 else "server_error"
    return JSONResponse(
        error_body(rej.message, kind=kind, param=rej.param, code=rej.code), status_code=rej.status
    )


def validate_body(raw: bytes, kind: str) -> dict[str, Any]:
    """Parse and check an OpenAI request body; raise :class:`_Reject` (400) naming the problem."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _Reject(400, f"invalid JSON body: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise _Reject(400, "the request body must be a JSON object")
    model = body.get("model")
    if model is None:
        raise _Reject(400, "missing required parameter: 'model'", param="model")
    if not isinstance(model, str) or not model:
        raise _Reject(400, "'model' must be a non-empty string", param="model")
    if kind == "chat":
        messages = body.get("messages")
        if messages is None:
            raise _Reject(400, "missing required parameter: 'messages'", param="messages")
        if not isinstance(messages, list) or not messages:
            raise _Reject(400, "'messages' must be a non-empty array", param="messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise _Reject(
                    400, f"'messages[{i}]' must be an object with a string 'role'", param="messages"
                )
            content = m.get("content")
            if content is not None and not isinstance(content, str | list):
                raise _Reject(400, f"'messages[{i}].content' must be a string or an array", param="messages")
            if isinstance(content, list) and not all(isinstance(p, dict) for p in content):
                raise _Reject(400, f"'messages[{i}].content' parts must be objects", param="messages")
    else:
        prompt = body.get("prompt")
        if prompt is None:
            raise _Reject(400, "missing required parameter: 'prompt'", param="prompt")
        ok = isinstance(prompt, str) or (
            isinstance(prompt, list)
            and bool(prompt)
            and (
                all(isinstance(p, str) for p in prompt)
                or all(isinstance(p, int) and not isinstance(p, bool) for p in prompt)
            )
        )
        if not ok:
            raise _Reject(
                400, "'prompt' must be a string, an array of strings or of token ids", param="prompt"
            )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _Reject(400, "'stream' must be a boolean", param="stream")
    for key in ("max_tokens", "max_completion_tokens", "n"):
        v = body.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise _Reject(400, f"'{key}' must be a non-negative integer", param=key)
    salt = body.get("cache_salt")
    if salt is not None and not isinstance(salt, str):
        raise _Reject(400, "'cache_salt' must be a string", param="cache_salt")
    return body


@dataclass
class _Upstream:
    endpoint: Endpoint
    response: UpstreamResponse
    ticket: int


class _RelayResponse(Response):
    """Streams an upstream response and cancels it when the client goes away (listening for
    http.disconnect)."""

    def __init__(self, upstream: _Upstream, router: Router, sse: bool) -> None:
        headers = {k: v for k, v in upstream.response.headers if k.lower() not in _HOP_BY_HOP}
        super().__init__(status_code=upstream.response.status_code)
        # NOTE: set by hand: Response.__init__ would declare "content-length: 0" for the empty initial body.
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self.upstream = upstream
        self.router = router
        self.sse = sse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while True:  # ends at the client's disconnect or when the relay cancels it
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        self.router.metrics.errors.labels(
                            self.upstream.endpoint.name, "client_disconnect"
                        ).inc()
                        tg.cancel_scope.cancel()
                        return

            async def relay() -> None:
                try:
                    await self._relay(send)
                finally:
                    tg.cancel_scope.cancel()

            tg.start_soon(watch)
            tg.start_soon(relay)

    async def _relay(self, send: Send) -> None:
        up = self.upstream
        tracker = self.router.tracker
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            try:
                async for chunk in up.response.aiter_raw():
                    tracker.first_token(up.ticket)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except UpstreamError as exc:
                self.router.metrics.errors.labels(up.endpoint.name, "stream").inc()
                log.warning("upstream %s failed mid-stream: %s", up.endpoint.name, exc)
                if self.sse:
                    event = error_body(
                        f"upstream endpoint {up.endpoint.name} failed mid-stream",
                        kind="server_error",
                        code="upstream_error",
                    )
                    data = f"data: {json.dumps(event)}\n\n".encode()
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            with anyio.CancelScope(shield=True):
                await up.response.aclose()
            tracker.finish(up.ticket)


class Router:
    """The proxy application: scheduler, endpoint monitor, KV-event subscriber and metrics, owned per
    instance."""

    def __init__(
        self,
        cfg: RouteConfig,
        source: EndpointSource | None = None,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.source = source or StaticEndpointSource(
            [Endpoint(e.name, e.url.rstrip("/"), tuple(e.models), e.role, e.kv_events) for e in cfg.endpoints]
        )
        self.scheduler = Scheduler(cfg.scheduler)
        self.tracker = InFlightTracker()
        self.metrics = RouterMetrics()
        self.hasher = PromptHasher(cfg.scheduler.block_size)
        p = cfg.proxy
        self.upstream: UpstreamClient = (
            AiohttpUpstream(p.connect_timeout_s, p.read_timeout_s)
            if p.upstream_client == "aiohttp"
            else HttpxUpstream(p.connect_timeout_s, p.read_timeout_s)
        )
        # the monitor's low-rate polling keeps httpx
        self.client = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(p.poll_timeout_s))
        self.monitor = EndpointMonitor(
            self.source,
            self.client,
            interval_s=p.poll_interval_s,
            timeout_s=p.poll_timeout_s,
            unhealthy_after=p.unhealthy_after_failures,
            on_change=self._endpoints_changed,
        )
        self.subscriber: KVEventSubscriber | None = None
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
            ],
            lifespan=self._lifespan,
        )

    # -- lifecycle ---------------------------------------------------------------------------------------
    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.start()
        try:
            yield
        finally:
            await self.stop()

    async def start(self) -> None:
        await self.source.start()
        await self.monitor.refresh()
        self.monitor.start()
        if isinstance(self.scheduler.index, PreciseKVIndex):
            # endpoints come and go (discovery): the subscriber follows the publishers of the current set
            self.subscriber = KVEventSubscriber(
                self.scheduler.index,
                {},
                on_batch=lambda name, _n: self.metrics.kv_event_batches.labels(name).inc(),
            )
            self.subscriber.sync(_publishers(self.monitor.endpoints))

    async def stop(self) -> None:
        await self.monitor.stop()
        await self.source.stop()
        if self.subscriber is not None:
            await self.subscriber.stop()
        await self.client.aclose()
        await self.upstream.aclose()

    def _endpoints_changed(self, current: tuple[Endpoint, ...] | Any) -> None:
        if self.subscriber is not None:
            self.subscriber.sync(_publishers(current))
        names = {e.name for e in current}
        index = self.scheduler.approximate
        if index is not None:
            for name in index.endpoints():
                if name not in names:
                    index.forget(name)

    # -- state ---------------------------------------------------------------------------------------------
    def known_models(self) -> set[str] | None:
        """Models some endpoint serves; None when an endpoint lists none (it serves any model)."""
        models: set[str] = set()
        for e in self.monitor.endpoints:
            if not e.models:
                return None
            models.update(e.models)
        return models

    def snapshot(self, exclude: set[str]) -> list[EndpointState]:
        out = []
        for e in self.monitor.endpoints:
            s = self.monitor.signals.get(e.name)
            out.append(
                EndpointState(
                    e,
                    healthy=bool(s and s.healthy) and e.name not in exclude,
                    waiting=s.waiting if s else 0.0,
                    running=s.running if s else 0.0,
                    kv_usage=s.kv_usage if s else 0.0,
                    in_flight=self.tracker.in_flight.get(e.name, 0),
                    pending_prefill_tokens=self.tracker.pending_prefill.get(e.name, 0),
                )
            )
        return out

    def route_request(self, body: Mapping[str, Any], headers: Mapping[str, str]) -> RouteRequest:
        try:
            tokens = self.hasher.token_ids(body)
        except ValueError as exc:
            raise _Reject(400, str(exc)) from None
        bs = self.cfg.scheduler.block_size
        salt = body.get("cache_salt")
        hashes = self.hasher.block_hashes(tokens, salt if isinstance(salt, str) else None)
        return RouteRequest(
            model=str(body["model"]),
            block_hashes=tuple(hashes),
            prompt_tokens=len(tokens),
            block_size=bs,
            session_id=headers.get("x-session-id"),
            headers=headers,
        )

    # -- handlers ------------------------------------------------------------------------------------------
    async def _read_body(self, request: Request) -> bytes:
        limit = self.cfg.proxy.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _Reject(
                413, f"request body is larger than the limit of {limit} bytes", code="body_too_large"
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _Reject(
                    413, f"request body is larger than the limit of {limit} bytes", code="body_too_large"
                )
            chunks.append(chunk)
        return b"".join(chunks)

    async def _chat(self, request: Request) -> Response:
        return await self._handle(request, "chat", "/v1/chat/completions")

    async def _completions(self, request: Request) -> Response:
        return await self._handle(request, "completions", "/v1/completions")

    async def _handle(self, request: Request, kind: str, path: str) -> Response:
        try:
            return await self._forward(request, kind, path)
        except _Reject as rej:
            self.metrics.rejected.labels(str(rej.status)).inc()
            return _error_response(rej)
        except ClientDisconnect:
            return Response(status_code=499)

    async def _forward(self, request: Request, kind: str, path: str) -> Response:
        raw = await self._read_body(request)
        body = validate_body(raw, kind)
        known = self.known_models()
        if known is not None and body["model"] not in known:
            raise _Reject(
                404, f"The model '{body['model']}' does not exist", param="model", code="model_not_found"
            )
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        t0 = self.clock()
        rreq = self.route_request(body, headers)
        self.metrics.prompt_hash_seconds.observe(self.clock() - t0)
        tried: set[str] = set()
        last_error = "no endpoint was tried"
        for attempt in range(self.cfg.proxy.max_attempts):
            t0 = self.clock()
            try:
                decision = self.scheduler.schedule(rreq, self.snapshot(tried))
            except NoEndpointError as exc:
                if attempt == 0:
                    if exc.rejected_by == "health":
                        raise _Reject(
                            503, f"no healthy endpoint for model '{rreq.model}'", code="no_healthy_endpoint"
                        ) from None
                    raise _Reject(
                        503, f"no endpoint for model '{rreq.model}': {exc}", code="no_endpoint"
                    ) from None
                break
            if attempt == 0:
                self.metrics.decision_seconds.observe(self.clock() - t0)
                self.metrics.prompt_tokens.inc(rreq.prompt_tokens)
                self.metrics.predicted_cached_tokens.inc(decision.predicted_cached_tokens)
            ep = decision.endpoint.endpoint
            tid = self.tracker.start(ep.name, rreq.prompt_tokens - decision.predicted_cached_tokens)
            self.metrics.requests.labels(ep.name).inc()
            try:
                upstream = await self._await_or_disconnect(
                    request, self.upstream.open(f"{ep.url}{path}", raw, headers)
                )
            except UpstreamError as exc:
                self.tracker.finish(tid)
                self.metrics.errors.labels(ep.name, "connect").inc()
                self.monitor.mark_failed(ep.name)
                tried.add(ep.name)
                last_error = f"{ep.name}: {type(exc).__name__}"
                continue
            except BaseException:
                self.tracker.finish(tid)
                raise
            if upstream.status_code in _RETRY_STATUSES:
                await upstream.aclose()
                self.tracker.finish(tid)
                self.metrics.errors.labels(ep.name, "status").inc()
                tried.add(ep.name)
                last_error = f"{ep.name}: HTTP {upstream.status_code}"
                continue
            t0 = self.clock()  # accepted: only now do the index and session affinity learn from the pick
            self.scheduler.learn(decision)
            self.metrics.learn_seconds.observe(self.clock() - t0)
            up = _Upstream(ep, upstream, tid)
            if body.get("stream", False):
                return _RelayResponse(up, self, sse=True)
            return await self._buffered(request, up)
        raise _Reject(
            502, f"every endpoint tried failed before answering ({last_error})", code="upstream_error"
        )

    async def _buffered(self, request: Request, up: _Upstream) -> Response:
        try:
            content = await self._await_or_disconnect(request, up.response.aread())
        except UpstreamError as exc:
            self.metrics.errors.labels(up.endpoint.name, "stream").inc()
            raise _Reject(
                502,
                f"upstream endpoint {up.endpoint.name} failed while answering: {type(exc).__name__}",
                code="upstream_error",
            ) from None
        finally:
            await up.response.aclose()
            self.tracker.finish(up.ticket)
        headers = {k: v for k, v in up.response.headers if k.lower() not in _HOP_BY_HOP}
        headers.pop("content-encoding", None)
        return Response(content, status_code=up.response.status_code, headers=headers)

    async def _await_or_disconnect(self, request: Request, aw: Awaitable[T]) -> T:
        """Await ``aw`` unless the client disconnects first (then cancel it and raise ClientDisconnect)."""
        work = asyncio.ensure_future(aw)
        watch = asyncio.ensure_future(self._disconnected(request))
        try:
            done, _ = await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
            if work in done:
                return work.result()
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, UpstreamError):
                await work
            raise ClientDisconnect()
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
            if not work.done():
                work.cancel()

    @staticmethod
    async def _disconnected(request: Request) -> None:
        while True:  # the body has been read: the next message is the disconnect
            msg = await request.receive()
            if msg["type"] == "http.disconnect":
                return

    async def _models(self, request: Request) -> Response:
        models = sorted({m for e in self.monitor.endpoints for m in e.models})
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "capstan"} for m in models]
        return JSONResponse({"object": "list", "data": data})

    async def _health(self, request: Request) -> Response:
        healthy = [e.name for e in self.snapshot(set()) if e.healthy]
        return JSONResponse({"healthy_endpoints": healthy}, status_code=200 if healthy else 503)

    async def _metrics(self, request: Request) -> Response:
        index = self.scheduler.index
        if index is not None:
            self.metrics.index_entries.set(index.size)
            self.metrics.index_bytes.set(index.approx_bytes)
        for e in self.snapshot(set()):
            self.metrics.endpoint_healthy.labels(e.name).set(1 if e.healthy else 0)
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _publishers(endpoints: Sequence[Endpoint]) -> dict[str, str]:
    return {e.name: e.kv_events for e in endpoints if e.kv_events}
