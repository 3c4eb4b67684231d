"""The I/O shell around :class:`Engine`: one vLLM-like replica (OpenAI HTTP, ``/metrics``, ZMQ KV events).

A :class:`Replica` owns an engine, a Prometheus registry, an optional ZMQ PUB socket and one driver task. The
driver maps wall time to model time (``model = (wall - start) * time_scale``), advances the engine whenever a
step ends or a request arrives, hands token progress to the waiting HTTP handlers, and publishes the engine's
KV-event outbox as one batch per wake-up. Every duration the engine reports (usage, ``/metrics``) is in model
seconds, so a replay at ``time_scale`` 10 shows the figures of the real-speed run, ten times sooner.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import zmq
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from capstan.enginesim._engine import Completion, Engine, EngineConfig, Progress, RequestRejected
from capstan.enginesim._latency import LatencyModel
from capstan.enginesim._request import BadRequest, build_engine_request
from capstan.httpserver import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    BodyTimeout,
    BodyTooLarge,
    await_or_disconnect,
    read_body,
)
from capstan.kvcache import (
    DEFAULT_BLOCK_SIZE,
    VOCAB_SIZE,
    ServedModel,
    ServedTokenizer,
    Tokenizer,
    VllmBlockHasher,
    encode_kv_batch,
    encode_seq,
    kv_topic,
)
from capstan.openai_api import InvalidRequest, check_request, parse_json

log = logging.getLogger(__name__)

_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
_OUTPUT_WORDS = (" The", " sim", " says", " hello", " and", " then", " it", " stops.")
_MAX_WAIT_S = 1.0  # the driver re-checks at least this often (wall seconds)


@dataclass(frozen=True)
class ReplicaSpec:
    """Everything one replica needs. ``port`` 0: any free port. ``kv_events_port`` None: no ZMQ publisher;
    0: any free port (see :attr:`Replica.kv_bound_port`)."""

    model: str
    latency: LatencyModel
    num_gpu_blocks: int
    host: str = "127.0.0.1"
    port: int = 0
    block_size: int = DEFAULT_BLOCK_SIZE
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 131072
    time_scale: float = 1.0
    kv_events_port: int | None = None
    hash_seed: int = 0
    # a real model's tokenization instead of the contract's: its tokenizer.json (and tokenizer_config.json, chat
    # template), hashed with vLLM's --prefix-caching-hash-algo seeded by str(hash_seed), as PYTHONHASHSEED is
    tokenizer: Path | None = None
    tokenizer_config: Path | None = None
    chat_template: Path | None = None
    prefix_caching_hash_algo: str = "sha256"
    max_body_bytes: int = 32 * 1024 * 1024
    request_timeout_s: float = 600.0
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    default_max_tokens: int = 16
    stream_step_tokens: int = 8


@dataclass
class _Pending:
    queue: asyncio.Queue[Progress | Completion] = field(default_factory=asyncio.Queue)


def _error(
    status: int,
    message: str,
    *,
    param: str | None = None,
    kind: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """vLLM's error body: OpenAI's shape, with vLLM's exception names as ``type`` and the status as ``code``."""
    kinds = {
        400: "BadRequestError",
        404: "NotFoundError",
        408: "RequestTimeoutError",
        413: "RequestTooLargeError",
        503: "ServiceUnavailable",
    }
    body = {
        "error": {
            "message": message,
            "type": kind or kinds.get(status, "InternalServerError"),
            "param": param,
            "code": status,
        }
    }
    return JSONResponse(body, status_code=status, headers=headers)


def _output_text(start: int, end: int) -> str:
    return "".join(_OUTPUT_WORDS[i % len(_OUTPUT_WORDS)] for i in range(start, end))


class _EngineCollector(Collector):
    """Reads gauges and counters from the engine at scrape time (no double bookkeeping)."""

    def __init__(self, replica: Replica) -> None:
        self._r = replica

    def collect(self) -> Iterable[Metric]:
        r = self._r
        r.sync()
        labels = ["model_name", "engine"]
        values = [r.spec.model, "0"]
        load = r.engine.load()
        c = r.engine.counters

        def gauge(name: str, doc: str, v: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(values, v)
            return g

        def counter(name: str, doc: str, v: float) -> CounterMetricFamily:
            m = CounterMetricFamily(name, doc, labels=labels)
            m.add_metric(values, v)
            return m

        yield gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", load.running
        )
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", load.waiting)
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", load.kv_usage)
        yield counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
            c.prefix_cache_queries,
        )  # fmt: skip
        yield counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            c.prefix_cache_hits,
        )
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.", c.generation_tokens)
        ok = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*labels, "finished_reason"],
        )
        ok.add_metric([*values, "length"], c.requests_finished)
        ok.add_metric([*values, "abort"], c.requests_aborted)
        yield ok
        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=["block_size", "num_gpu_blocks", "enable_prefix_caching", "prefix_caching_hash_algo",
                    "cache_dtype"],
        )  # fmt: skip
        info.add_metric(
            [str(load.block_size), str(load.num_gpu_blocks), "True", "capstan-blake2b-63", "auto"], 1.0
        )
        yield info
        yield counter(
            "capstan_enginesim_gpu_busy_seconds",
            "Model seconds the simulated GPU spent running engine steps (the basis of GPU-seconds per request).",
            c.busy_seconds,
        )
        yield counter(
            "capstan_enginesim_prefill_tokens_computed",
            "Prompt tokens actually computed (not served from the prefix cache).",
            c.prefill_tokens_computed,
        )
        yield counter("capstan_enginesim_kv_event_batches", "KV event batches published.", r.kv_batches_sent)


class Replica:
    """One emulated vLLM replica. ``clock`` returns wall seconds (monotonic); inject a fake one in unit tests."""

    def __init__(self, spec: ReplicaSpec, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not (math.isfinite(spec.time_scale) and spec.time_scale > 0):
            raise ValueError(f"time_scale must be a positive number, got {spec.time_scale}")
        self.spec = spec
        self.engine = Engine(
            EngineConfig(
                latency=spec.latency,
                num_gpu_blocks=spec.num_gpu_blocks,
                block_size=spec.block_size,
                max_num_seqs=spec.max_num_seqs,
                max_num_batched_tokens=spec.max_num_batched_tokens,
                max_model_len=spec.max_model_len,
                max_decode_jump=spec.stream_step_tokens,
                track_progress=True,
            )
        )
        self.tokenizer = Tokenizer()
        self.served: ServedModel | None = None
        if spec.tokenizer is not None:
            tok = ServedTokenizer.from_files(spec.tokenizer, spec.tokenizer_config, spec.chat_template)
            hasher = VllmBlockHasher(spec.prefix_caching_hash_algo, str(spec.hash_seed), spec.block_size)
            self.served = ServedModel(tok, hasher)
        self.registry = CollectorRegistry()
        self._ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            ["model_name", "engine"], registry=None, buckets=_TTFT_BUCKETS,
        )  # fmt: skip
        self._e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            ["model_name", "engine"], registry=None, buckets=_E2E_BUCKETS,
        )  # fmt: skip
        self._clock = clock
        self._t0 = clock()
        self._pending: dict[str, _Pending] = {}
        self._next_id = 0
        self._wake: asyncio.Event | None = None
        self._driver: asyncio.Task[None] | None = None
        self._zmq: zmq.Context[zmq.Socket[bytes]] | None = None
        self._pub: zmq.Socket[bytes] | None = None
        self._kv_seq = 0
        self.kv_batches_sent = 0
        self.kv_batches_dropped = 0
        self.bound_port = spec.port
        self.kv_bound_port: int | None = None
        self.app = self._build_app()
        # NOTE: the engine collector goes first: it syncs the engine, so the histograms after it are current.
        self.registry.register(_EngineCollector(self))
        self.registry.register(self._ttft)
        self.registry.register(self._e2e)

    # ---- time and driving ----------------------------------------------------------------------------------
    def model_now(self) -> float:
        return (self._clock() - self._t0) * self.spec.time_scale

    def sync(self) -> None:
        """Advance the engine to now; deliver progress and completions; publish KV events. Never blocks."""
        now = self.model_now()
        done = self.engine.advance(now)
        for p in self.engine.drain_progress():
            pending = self._pending.get(p.request_id)
            if pending is not None:
                pending.queue.put_nowait(p)
        labels = (self.spec.model, "0")
        for c in done:
            if not c.aborted and c.ttft is not None:
                self._ttft.labels(*labels).observe(c.ttft)
                self._e2e.labels(*labels).observe(c.e2e)
            pending = self._pending.pop(c.request_id, None)
            if pending is not None:
                pending.queue.put_nowait(c)
        self._publish()

    def _publish(self) -> None:
        events = self.engine.drain_kv_events()
        if not events or self._pub is None:
            return
        topic = kv_topic(self.spec.host, self.bound_port, self.spec.model).encode()
        frames = [topic, encode_seq(self._kv_seq), encode_kv_batch(events, time.time())]
        self._kv_seq += 1
        try:
            self._pub.send_multipart(frames, flags=zmq.NOBLOCK)
            self.kv_batches_sent += 1
        except zmq.Again:
            self.kv_batches_dropped += 1

    async def _drive(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:  # NOTE: ends only by cancellation (stop); each pass waits at most _MAX_WAIT_S
            self.sync()
            nxt = self.engine.next_event_time()
            timeout = _MAX_WAIT_S
            if nxt is not None:
                timeout = min(timeout, max(0.0, (nxt - self.model_now()) / self.spec.time_scale))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout)
            wake.clear()

    async def start(self) -> None:
        """Start the driver (and bind the KV-event PUB socket) inside the running event loop."""
        if self._driver is not None:
            return
        if self.spec.kv_events_port is not None:
            self._zmq = zmq.Context()
            self._pub = self._zmq.socket(zmq.PUB)
            self._pub.setsockopt(zmq.LINGER, 0)
            self._pub.setsockopt(zmq.SNDHWM, 100_000)
            if self.spec.kv_events_port == 0:
                self.kv_bound_port = self._pub.bind_to_random_port(f"tcp://{self.spec.host}")
            else:
                self._pub.bind(f"tcp://{self.spec.host}:{self.spec.kv_events_port}")
                self.kv_bound_port = self.spec.kv_events_port
        self._wake = asyncio.Event()
        self._driver = asyncio.create_task(self._drive(), name=f"enginesim-driver-{self.spec.port}")

    async def stop(self) -> None:
        if self._driver is not None:
            self._driver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._driver
            self._driver = None
        if self._pub is not None:
            self._pub.close(linger=0)
            self._pub = None
        if self._zmq is not None:
            self._zmq.term()
            self._zmq = None

    # ---- HTTP ----------------------------------------------------------------------------------------------
    def _build_app(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            await self.start()
            try:
                yield
            finally:
                await self.stop()

        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/completions", self._completions, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
                Route("/tokenize", self._tokenize, methods=["POST"]),
                Route("/metrics", self._metrics, methods=["GET"]),
                Route("/reset_prefix_cache", self._reset, methods=["POST"]),
            ],
            lifespan=lifespan,
        )

    async def _read_json(
        self, request: Request, kind: Literal["chat", "completions"] | None
    ) -> dict[str, Any] | JSONResponse:
        """The checked body of a ``kind`` request (None: chat if it has ``messages``), or the error answer."""
        try:
            raw = await read_body(request, limit=self.spec.max_body_bytes, timeout_s=self.spec.body_timeout_s)
        except BodyTooLarge as exc:
            return _error(413, str(exc))
        except BodyTimeout as exc:
            return _error(408, str(exc), headers={"connection": "close"})
        except ClientDisconnect:
            return _error(400, "client disconnected while sending the body")
        try:
            body = parse_json(raw)
            if not isinstance(body, dict):
                return _error(400, "the JSON body must be an object")
            check_request(body, kind or ("chat" if "messages" in body else "completions"))
        except InvalidRequest as exc:
            return _error(400, exc.message, param=exc.param)
        model = body["model"]
        if model != self.spec.model:
            return _error(404, f"The model `{model}` does not exist.", param="model")
        return body

    async def _chat(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def _completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def _generate(self, request: Request, *, chat: bool) -> Response:
        body = await self._read_json(request, "chat" if chat else "completions")
        if isinstance(body, JSONResponse):
            return body
        self._next_id += 1
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{self.bound_port}-{self._next_id}"
        try:
            ereq = build_engine_request(
                body,
                rid,
                self.tokenizer,
                block_size=self.spec.block_size,
                seed=self.spec.hash_seed,
                served=self.served,
                vocab_size=self.served.tokenizer.vocab_size if self.served is not None else VOCAB_SIZE,
                chat=chat,
                default_max_tokens=self.spec.default_max_tokens,
            )
        except BadRequest as exc:
            return _error(400, str(exc), param=exc.param)
        pending = _Pending()
        self._pending[rid] = pending
        try:
            self.engine.submit(ereq, self.model_now())
        except RequestRejected as exc:
            self._pending.pop(rid, None)
            return _error(400, str(exc))
        if self._wake is not None:
            self._wake.set()
        created = int(time.time())
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                self._stream(rid, pending, chat=chat, created=created, include_usage=include_usage),
                media_type="text/event-stream",
            )
        try:
            # a client that goes away aborts the request in the engine (its sequence and KV blocks are freed)
            final = await await_or_disconnect(request, self._wait_final(rid, pending))
        except TimeoutError:
            return _error(503, f"request timed out after {self.spec.request_timeout_s} s", kind="Timeout")
        except ClientDisconnect:
            return Response(status_code=499)  # never sent: nobody is listening
        text = _output_text(0, final.output_tokens)
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "length",
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        return JSONResponse(
            {
                "id": rid,
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": self.spec.model,
                "choices": [choice],
                "usage": self._usage(final),
            }
        )

    @staticmethod
    def _usage(c: Completion) -> dict[str, Any]:
        return {
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.output_tokens,
            "total_tokens": c.prompt_tokens + c.output_tokens,
            "prompt_tokens_details": {"cached_tokens": c.cached_tokens},
        }

    async def _wait_final(self, rid: str, pending: _Pending) -> Completion:
        deadline = time.monotonic() + self.spec.request_timeout_s
        try:
            while True:  # NOTE: bounded by the deadline
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                item = await asyncio.wait_for(pending.queue.get(), left)
                if isinstance(item, Completion):
                    return item
        except BaseException:
            self._abort(rid)
            raise

    def _abort(self, rid: str) -> None:
        if self._pending.pop(rid, None) is not None:
            self.engine.abort(rid, self.model_now())
            if self._wake is not None:
                self._wake.set()

    async def _stream(
        self, rid: str, pending: _Pending, *, chat: bool, created: int, include_usage: bool
    ) -> AsyncIterator[str]:
        obj = "chat.completion.chunk" if chat else "text_completion"

        def chunk(text: str | None, finish: str | None, first: bool = False) -> str:
            if chat:
                delta: dict[str, Any] = {}
                if first:
                    delta["role"] = "assistant"
                if text is not None:
                    delta["content"] = text
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": finish,
                }
            else:
                choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            data = {
                "id": rid,
                "object": obj,
                "created": created,
                "model": self.spec.model,
                "choices": [choice],
            }
            if include_usage:
                data["usage"] = None
            return f"data: {json.dumps(data)}\n\n"

        sent = 0
        deadline = time.monotonic() + self.spec.request_timeout_s
        try:
            while True:  # NOTE: bounded by the deadline
                left = deadline - time.monotonic()
                if left <= 0:
                    err = {
                        "error": {
                            "message": "request timed out",
                            "type": "Timeout",
                            "param": None,
                            "code": 503,
                        }
                    }
                    yield f"data: {json.dumps(err)}\n\n"
                    break
                item = await asyncio.wait_for(pending.queue.get(), left)
                total = item.tokens if isinstance(item, Progress) else item.output_tokens
                if total > sent:
                    yield chunk(_output_text(sent, total), None, first=sent == 0)
                    sent = total
                if isinstance(item, Completion):
                    yield chunk(None if chat else "", "length")
                    if include_usage:
                        usage = {
                            "id": rid, "object": obj, "created": created, "model": self.spec.model,
                            "choices": [], "usage": self._usage(item),
                        }  # fmt: skip
                        yield f"data: {json.dumps(usage)}\n\n"
                    break
            yield "data: [DONE]\n\n"
        finally:
            # A client that goes away (generator closed/cancelled) aborts the request in the engine.
            self._abort(rid)

    async def _models(self, _request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.spec.model,
                        "object": "model",
                        "created": 0,
                        "owned_by": "capstan-enginesim",
                        "root": self.spec.model,
                        "parent": None,
                        "max_model_len": self.spec.max_model_len,
                    }
                ],
            }
        )

    async def _health(self, _request: Request) -> Response:
        return Response(status_code=200)

    async def _tokenize(self, request: Request) -> Response:
        body = await self._read_json(request, None)
        if isinstance(body, JSONResponse):
            return body
        try:
            ereq = build_engine_request(
                body,
                "tokenize",
                self.tokenizer,
                block_size=self.spec.block_size,
                served=self.served,
                vocab_size=self.served.tokenizer.vocab_size if self.served is not None else VOCAB_SIZE,
            )
        except BadRequest as exc:
            return _error(400, str(exc), param=exc.param)
        tokens = list(ereq.token_ids or [])
        return JSONResponse(
            {"count": len(tokens), "max_model_len": self.spec.max_model_len, "tokens": tokens}
        )

    async def _metrics(self, _request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def _reset(self, _request: Request) -> Response:
        self.sync()
        if not self.engine.clear_prefix_cache():
            return _error(400, "cannot reset the prefix cache while requests are running")
        self.sync()
        return Response(status_code=200)
