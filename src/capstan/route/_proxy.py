"""The OpenAI-compatible reverse proxy: the thin I/O shell around :class:`Scheduler`.

For each request it reads the body (bounded in size and time), checks it as OpenAI does (``capstan.openai_api``:
400/404 with an OpenAI-style error body), turns the prompt into block hashes with the shared ``capstan.kvcache``
contract, asks the scheduler for an endpoint over a snapshot of the monitor's load signals plus the router's own
in-flight counts, and relays the answer as it arrives.

Failures, and what the client gets (docs/route.md has the table and why these statuses):

* an endpoint that fails before the first byte (connection refused or reset, 502/503/504, or a stream whose
  headers do not come within the stall timeout) is excluded and the request goes to the next pick; when every
  attempt failed the client gets 502, or 504 when every attempt timed out;
* a stream that breaks, or sends nothing for ``proxy.stall_timeout_s``, ends with an SSE ``data: {"error": ...}``
  event and the connection closes; a stalled endpoint is marked unhealthy until its health check answers again.
  Before its first token a stream is queued, not stalled, while its endpoint answers its health checks: a busy
  engine sends nothing until it has prefilled the prompt, and waits up to ``proxy.read_timeout_s`` (under load a
  long prompt's time to first token exceeds the stall timeout, and cutting it would also mark a busy engine
  unhealthy and pile its load onto the others);
* a client that disconnects cancels the upstream request (the upstream connection is closed, so the engine
  aborts it), streaming or not.

Every answer is counted by status (``capstan_route_responses_total``), the router's own by status and reason
(``capstan_route_rejected_total``), every upstream failure by endpoint and kind (``capstan_route_errors_total``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from capstan.httpserver import BodyTimeout, BodyTooLarge, await_or_disconnect, read_body, server_config
from capstan.kvcache import PromptHasher, PromptKeys, ServedModel, ServedTokenizer, VllmBlockHasher
from capstan.openai_api import InvalidRequest, RequestKind, parse_request
from capstan.route._config import RouteConfig
from capstan.route._endpoints import EndpointMonitor, EndpointSource, StaticEndpointSource
from capstan.route._index import PreciseKVIndex
from capstan.route._inflight import InFlightTracker
from capstan.route._kvevents import KVEventSubscriber
from capstan.route._metrics import RouterMetrics
from capstan.route._model import Endpoint, EndpointState, RouteRequest
from capstan.route._scheduler import NoEndpointError, Scheduler
from capstan.route._upstream import UpstreamClient, UpstreamError, UpstreamResponse

log = logging.getLogger(__name__)

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
_CLIENT_GONE = 499  # nginx's status for a client that closed the connection before the answer (never sent)
# A served model's prompt of this many body bytes or more is tokenized and hashed on a worker thread, not on the
# event loop: the whole path costs about 1.9 µs a token (bench/route_served_model.py), so a 142k-token prompt held
# every other request for 304 ms; the tokenizer releases the GIL while it runs (encode_batch).
_OFF_LOOP_BODY_BYTES = 16 * 1024


class _Reject(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})


def error_body(
    message: str, *, kind: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error shape."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _error_response(rej: _Reject) -> JSONResponse:
    kind = "invalid_request_error" if rej.status < 500 else "server_error"
    return JSONResponse(
        error_body(rej.message, kind=kind, param=rej.param, code=rej.code),
        status_code=rej.status,
        headers=rej.headers,
    )


async def _within(opening: Awaitable[UpstreamResponse], seconds: float) -> UpstreamResponse:
    """``opening``, or an :class:`UpstreamError` (a timeout) when it takes longer than ``seconds``."""
    try:
        with anyio.fail_after(seconds):
            return await opening
    except TimeoutError as exc:
        raise UpstreamError(exc, timeout=True) from None


def validate_body(raw: bytes, kind: RequestKind) -> dict[str, Any]:
    """Parse and check an OpenAI request body; raise :class:`_Reject` (400) naming the problem."""
    try:
        return parse_request(raw, kind)
    except InvalidRequest as exc:
        raise _Reject(400, exc.message, param=exc.param, code=exc.code or "invalid_request") from None


@dataclass
class _Upstream:
    endpoint: Endpoint
    response: UpstreamResponse
    ticket: int


class _RelayResponse(Response):
    """Streams an upstream response and cancels it when the client goes away (listening for
    http.disconnect)."""

    def __init__(self, upstream: _Upstream, router: Router) -> None:
        headers = {k: v for k, v in upstream.response.headers if k.lower() not in _HOP_BY_HOP}
        super().__init__(status_code=upstream.response.status_code)
        # NOTE: set by hand: Response.__init__ would declare "content-length: 0" for the empty initial body.
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self.upstream = upstream
        self.router = router
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "")
        self.sse = content_type.startswith("text/event-stream")
        # NOTE: set just before the last body message: from then on a disconnect is the end of a complete answer
        # (uvicorn reports the finished response as http.disconnect too), not a client that went away.
        self.finishing = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                while True:  # ends at the client's disconnect or when the relay cancels it
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        if not self.finishing:
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

    async def _watch_stall(self, progress: _StreamProgress, reading: anyio.CancelScope) -> None:
        """End the relay (``reading``) when the upstream sent nothing for the stall timeout: after the first chunk
        always; before it only once the endpoint stops answering its health checks (a queued request on a busy
        engine is not a stall) or the read timeout passed. Wakes once per stall timeout; ends with the relay."""
        router = self.router
        p = router.cfg.proxy
        name = self.upstream.endpoint.name
        while True:  # bounded: cancelled when the relay ends, or returns once it cancels the relay
            idle = router.clock() - progress.last_at
            await anyio.sleep(max(p.stall_timeout_s - idle, 0.0) or p.stall_timeout_s)
            idle = router.clock() - progress.last_at
            if idle < p.stall_timeout_s or progress.sending:
                continue
            signals = router.monitor.signals.get(name)
            queued = not progress.first and signals is not None and signals.healthy
            if queued and idle < p.read_timeout_s:
                continue
            if progress.first:
                progress.stalled = f"sent nothing for {p.stall_timeout_s:g} s mid-stream"
            elif queued:
                progress.stalled = f"sent no first token within the read timeout ({p.read_timeout_s:g} s)"
            else:
                progress.stalled = (
                    f"sent no first token for {p.stall_timeout_s:g} s and stopped answering its health checks"
                )
            reading.cancel()
            return

    async def _relay(self, send: Send) -> None:
        up = self.upstream
        router = self.router
        tracker = router.tracker
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            last = b"\n\n"
            try:
                failed: UpstreamError | None = None
                with anyio.CancelScope() as reading:
                    progress = _StreamProgress(router.clock())
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._watch_stall, progress, reading)
                        try:  # NOTE: caught here, not through the task group (which would wrap it in a group)
                            async for chunk in up.response.aiter_raw():
                                tracker.first_token(up.ticket)
                                progress.sending = (
                                    True  # a slow client holds the relay here, not the upstream
                                )
                                if chunk:
                                    last = chunk
                                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                                progress.chunk(router.clock())
                        except UpstreamError as exc:
                            failed = exc
                            if exc.timeout and exc.silence is None:  # the socket's read timeout, a backstop
                                exc.silence = (
                                    f"sent nothing for {router.cfg.proxy.read_timeout_s:g} s mid-stream"
                                    if progress.first
                                    else "sent no first token within the read timeout "
                                    f"({router.cfg.proxy.read_timeout_s:g} s)"
                                )
                        tg.cancel_scope.cancel()  # the answer is complete (or broke): the watchdog goes
                if progress.stalled:
                    failed = UpstreamError(
                        TimeoutError("no chunk within the stall timeout"),
                        timeout=True,
                        silence=progress.stalled,
                    )
                if failed is not None:
                    raise failed
            except UpstreamError as exc:
                if self.sse:
                    event = router.stream_failed(up.endpoint, exc)
                    # an event cut in the middle is closed first, so that the error event parses on its own
                    data = (b"" if last.endswith(b"\n\n") else b"\n\n") + event
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                else:
                    router.stream_failed(up.endpoint, exc)
            self.finishing = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            with anyio.CancelScope(shield=True):
                await up.response.aclose()
            router.request_done(up.ticket)


class _StreamProgress:
    """When a relayed stream last sent something, and whether the watchdog gave up on it."""

    __slots__ = ("first", "last_at", "sending", "stalled")

    def __init__(self, now: float) -> None:
        self.last_at = now
        self.first = False
        self.sending = (
            False  # a chunk is being written to the client: waiting on it is not the upstream's stall
        )
        self.stalled: str | None = None  # why the watchdog gave up, once it did

    def chunk(self, now: float) -> None:
        """A chunk was relayed to the client at ``now``."""
        self.last_at = now
        self.first = True
        self.sending = False


class Router:
    """The proxy application: scheduler, endpoint monitor, KV-event subscriber and metrics, owned per
    instance.

    Upstream requests go through ``upstream`` (``capstan route serve`` passes :func:`upstream_for` of
    ``cfg.proxy``); the router closes it in :meth:`stop`, because it is used, and must be closed, inside the
    server's event loop. ``transport`` is the httpx transport of the endpoint monitor's polling.
    """

    def __init__(
        self,
        cfg: RouteConfig,
        source: EndpointSource | None = None,
        *,
        upstream: UpstreamClient,
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
        # models served by real vLLM engines: their own tokenizer and vLLM's hash chain (a LoRA adapter's name
        # maps to its base model's keys and the adapter, which vLLM hashes into every block)
        self.served: dict[str, tuple[PromptKeys, str | None]] = served_models(cfg)
        p = cfg.proxy
        self.upstream = upstream
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
                Route("/healthz", self._healthz, methods=["GET"]),
                Route("/metrics", self._metrics, methods=["GET"]),
            ],
            lifespan=self._lifespan,
        )

    def server_config(self, host: str, port: int, **kwargs: Any) -> uvicorn.Config:
        """How ``capstan route serve`` runs this app: uvicorn with the header deadline of ``proxy``."""
        return server_config(
            self.app, host=host, port=port, header_timeout_s=self.cfg.proxy.header_timeout_s, **kwargs
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

    def request_done(self, ticket: int) -> None:
        """A request sent as ``ticket`` is answered or failed, or never left: no longer in flight."""
        self.tracker.finish(ticket)
        self.scheduler.settle(ticket)

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
        """The request's token count and block keys (a 400 for a body its model's template refuses). A served
        model's large prompt is computed on a worker thread: its tokenizer and hasher are safe to share."""
        keys, lora_name = self.served.get(str(body.get("model")), (self.hasher, None))
        try:
            tokens = keys.token_ids(body)
        except ValueError as exc:
            raise _Reject(400, str(exc)) from None
        bs = self.cfg.scheduler.block_size
        salt = body.get("cache_salt")
        hashes = keys.block_hashes(tokens, salt if isinstance(salt, str) else None, lora_name)
        return RouteRequest(
            model=str(body["model"]),
            block_hashes=tuple(hashes),
            prompt_tokens=len(tokens),
            block_size=bs,
            session_id=headers.get("x-session-id"),
            headers=headers,
        )

    # -- handlers ------------------------------------------------------------------------------------------
    async def _chat(self, request: Request) -> Response:
        return await self._handle(request, "chat", "/v1/chat/completions")

    async def _completions(self, request: Request) -> Response:
        return await self._handle(request, "completions", "/v1/completions")

    async def _handle(self, request: Request, kind: RequestKind, path: str) -> Response:
        try:
            response = await self._forward(request, kind, path)
        except _Reject as rej:
            self.metrics.rejected.labels(str(rej.status), rej.code or "invalid_request").inc()
            response = _error_response(rej)
        except ClientDisconnect:
            response = Response(status_code=_CLIENT_GONE)
        except Exception:  # a bug of the router's own, never the client's input (the fuzz tests hold it)
            log.exception("the router failed on a request")
            self.metrics.rejected.labels("500", "internal_error").inc()
            response = _error_response(
                _Reject(500, "the router failed on this request", code="internal_error")
            )
        self.metrics.responses.labels(str(response.status_code)).inc()
        return response

    async def _read_body(self, request: Request) -> bytes:
        p = self.cfg.proxy
        try:
            return await read_body(request, limit=p.max_body_bytes, timeout_s=p.body_timeout_s)
        except BodyTooLarge as exc:
            raise _Reject(413, str(exc), code="body_too_large") from None
        except BodyTimeout as exc:
            raise _Reject(408, str(exc), code="body_timeout", headers={"connection": "close"}) from None

    async def _forward(self, request: Request, kind: RequestKind, path: str) -> Response:
        raw = await self._read_body(request)
        body = validate_body(raw, kind)
        known = self.known_models()
        if known is not None and body["model"] not in known:
            raise _Reject(
                404, f"The model '{body['model']}' does not exist", param="model", code="model_not_found"
            )
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        t0 = self.clock()
        if len(raw) >= _OFF_LOOP_BODY_BYTES and str(body.get("model")) in self.served:
            rreq = await anyio.to_thread.run_sync(self.route_request, body, headers)
        else:
            rreq = self.route_request(body, headers)
        self.metrics.prompt_hash_seconds.observe(self.clock() - t0)
        stream = bool(body.get("stream"))
        p = self.cfg.proxy
        # a stream's reads are bounded by the relay's stall watchdog; the socket's timeout is only the backstop
        read_timeout_s = p.read_timeout_s
        tried: set[str] = set()
        failures: list[str] = []
        timeouts = 0
        for attempt in range(p.max_attempts):
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
            self.scheduler.sending(decision, tid, self.clock())
            self.metrics.requests.labels(ep.name).inc()
            opening = self.upstream.open(f"{ep.url}{path}", raw, headers, read_timeout_s=read_timeout_s)
            if stream:  # the headers of a stream come at once from a live engine
                opening = _within(opening, p.stall_timeout_s)
            try:
                upstream = await await_or_disconnect(request, opening)
            except UpstreamError as exc:
                self.request_done(tid)
                self.metrics.errors.labels(ep.name, "timeout" if exc.timeout else "connect").inc()
                log.warning("upstream %s failed before answering: %s", ep.name, exc)
                self.monitor.mark_failed(ep.name)
                tried.add(ep.name)
                failures.append(f"{ep.name}: {'no answer in time' if exc.timeout else exc.cause}")
                if exc.timeout:
                    timeouts += 1
                    if not stream:  # it may have run the whole time: another engine would start over
                        break
                continue
            except ClientDisconnect:
                self.request_done(tid)
                self.metrics.errors.labels(ep.name, "client_disconnect").inc()
                raise
            except BaseException:
                self.request_done(tid)
                raise
            if upstream.status_code >= 500:
                self.metrics.errors.labels(ep.name, "status").inc()
            if upstream.status_code in _RETRY_STATUSES:
                await upstream.aclose()
                self.request_done(tid)
                tried.add(ep.name)
                failures.append(f"{ep.name}: HTTP {upstream.status_code}")
                continue
            t0 = self.clock()  # accepted: only now do the index and session affinity learn from the pick
            self.scheduler.learn(decision)
            self.metrics.learn_seconds.observe(self.clock() - t0)
            up = _Upstream(ep, upstream, tid)
            if stream:
                return _RelayResponse(up, self)
            return await self._buffered(request, up)
        why = "; ".join(failures) or "no endpoint was tried"
        if failures and timeouts == len(failures):
            raise _Reject(504, f"every endpoint tried timed out ({why})", code="upstream_timeout")
        raise _Reject(502, f"every endpoint tried failed before answering ({why})", code="upstream_error")

    def stream_failed(self, endpoint: Endpoint, exc: UpstreamError) -> bytes:
        """Count a stream that broke or stalled (a stalled endpoint is marked unhealthy); the SSE error event."""
        if exc.timeout:
            self.metrics.errors.labels(endpoint.name, "stall").inc()
            self.monitor.mark_failed(endpoint.name)
            silence = exc.silence or f"sent nothing for {self.cfg.proxy.stall_timeout_s:g} s mid-stream"
            log.warning("upstream %s %s: marked unhealthy", endpoint.name, silence)
            event = error_body(
                f"upstream endpoint {endpoint.name} {silence}",
                kind="server_error",
                code="upstream_timeout",
            )
        else:
            self.metrics.errors.labels(endpoint.name, "stream").inc()
            log.warning("upstream %s failed mid-stream: %s", endpoint.name, exc)
            event = error_body(
                f"upstream endpoint {endpoint.name} failed mid-stream",
                kind="server_error",
                code="upstream_error",
            )
        return f"data: {json.dumps(event)}\n\n".encode()

    async def _buffered(self, request: Request, up: _Upstream) -> Response:
        try:
            content = await await_or_disconnect(request, up.response.aread())
        except UpstreamError as exc:
            kind = "timeout" if exc.timeout else "stream"
            self.metrics.errors.labels(up.endpoint.name, kind).inc()
            status, code = (504, "upstream_timeout") if exc.timeout else (502, "upstream_error")
            raise _Reject(
                status,
                f"upstream endpoint {up.endpoint.name} failed while answering: {exc.cause}",
                code=code,
            ) from None
        except ClientDisconnect:
            self.metrics.errors.labels(up.endpoint.name, "client_disconnect").inc()
            raise
        finally:
            await up.response.aclose()
            self.request_done(up.ticket)
        headers = {k: v for k, v in up.response.headers if k.lower() not in _HOP_BY_HOP}
        headers.pop("content-encoding", None)
        return Response(content, status_code=up.response.status_code, headers=headers)

    async def _models(self, request: Request) -> Response:
        models = sorted({m for e in self.monitor.endpoints for m in e.models})
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "capstan"} for m in models]
        return JSONResponse({"object": "list", "data": data})

    async def _health(self, request: Request) -> Response:
        healthy = [e.name for e in self.snapshot(set()) if e.healthy]
        return JSONResponse({"healthy_endpoints": healthy}, status_code=200 if healthy else 503)

    async def _healthz(self, request: Request) -> Response:
        """The gateway itself answers (its probes): 200 while its event loop runs, whatever its endpoints' health,
        which ``/health`` reports (a gateway with no healthy endpoint answers 503 with a body, better than no
        gateway at all)."""
        return PlainTextResponse("ok\n")

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


def served_models(cfg: RouteConfig) -> dict[str, tuple[PromptKeys, str | None]]:
    """The prompt keys of each model of ``cfg.models`` (and of its LoRA adapters) by the name requests give; a
    tokenizer file that cannot be read is a :class:`~capstan.errors.UserError` naming it."""
    out: dict[str, tuple[PromptKeys, str | None]] = {}
    for m in cfg.models:
        tokenizer = ServedTokenizer.from_files(m.tokenizer, m.tokenizer_config, m.chat_template)
        keys = ServedModel(tokenizer, VllmBlockHasher(m.hash_algo, m.hash_seed, cfg.scheduler.block_size))
        out[m.name] = (keys, None)
        for adapter in m.lora_adapters:
            out[adapter] = (keys, adapter)
    return out
