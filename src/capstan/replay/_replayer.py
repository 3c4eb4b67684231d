"""Sending a request file to an OpenAI-compatible server on schedule and measuring what came back.

The replayer honours each request's planned time divided by the time scale (sessions with ``think`` wait for
their previous turn), bounds the requests in flight, streams every response to time the first token, and
records per request: TTFT, end-to-end latency, prompt/cached/completion tokens from ``usage`` and errors. All
durations are reported in model seconds (wall seconds × time scale), the unit the simulated engines use. At the
end it reads the backends' Prometheus counters (vLLM names, plus the simulator's GPU-busy seconds).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from capstan.kvcache import MooncakeText
from capstan.percentile import percentile
from capstan.replay._format import ReplayRequest, expand_body, iter_sessions


@dataclass
class RequestResult:
    id: str
    session: str | None
    planned: float
    closed_loop: bool = False  # sent `think` seconds after its session's previous turn, not at `planned`
    sent: float = 0.0
    status: int = 0
    ttft: float | None = None
    e2e: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200


@dataclass(frozen=True)
class BackendCounters:
    """Counters read from one backend's ``/metrics`` (missing metrics read as 0; ``error`` if unreadable)."""

    url: str
    prefix_cache_queries: float = 0.0
    prefix_cache_hits: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    gpu_busy_seconds: float = 0.0
    prefill_tokens_computed: float = 0.0
    ttft_sum: float = 0.0
    ttft_count: float = 0.0
    e2e_sum: float = 0.0
    e2e_count: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class ReplayConfig:
    target: str
    time_scale: float = 1.0
    max_concurrency: int = 256
    model: str | None = None
    stream: bool = True
    request_timeout_s: float = 600.0
    max_duration_s: float | None = None
    backends: Sequence[str] = ()


@dataclass
class ReplayReport:
    results: list[RequestResult]
    backends: list[BackendCounters]
    wall_seconds: float
    time_scale: float
    summary: dict[str, float] = field(default_factory=dict)


def summarize(report: ReplayReport) -> dict[str, float]:
    ok = [r for r in report.results if r.ok]
    ttft = [r.ttft for r in ok if r.ttft is not None]
    e2e = [r.e2e for r in ok if r.e2e is not None]
    prompt = sum(r.prompt_tokens for r in ok)
    cached = sum(r.cached_tokens for r in ok)
    model_span = report.wall_seconds * report.time_scale
    s: dict[str, float] = {
        "requests": len(report.results),
        "ok": len(ok),
        "errors": len(report.results) - len(ok),
        "ttft_p50": percentile(ttft, 50),
        "ttft_p90": percentile(ttft, 90),
        "ttft_p99": percentile(ttft, 99),
        "ttft_mean": sum(ttft) / len(ttft) if ttft else math.nan,
        "e2e_p50": percentile(e2e, 50),
        "e2e_p90": percentile(e2e, 90),
        "e2e_p99": percentile(e2e, 99),
        "usage_hit_ratio": cached / prompt if prompt else math.nan,
        "throughput_rps": len(ok) / model_span if model_span > 0 else math.nan,
        "output_tokens_per_s": sum(r.completion_tokens for r in ok) / model_span
        if model_span > 0
        else math.nan,
        # How late open-loop requests left versus their schedule: large values mean the replayer (or its
        # concurrency bound) could not keep up, and the run did not replay the trace faithfully.
        "send_lateness_p99": percentile(
            [r.sent - r.planned for r in report.results if not r.closed_loop], 99
        ),
    }
    readable = [b for b in report.backends if b.error is None]
    if readable:
        q = sum(b.prefix_cache_queries for b in readable)
        h = sum(b.prefix_cache_hits for b in readable)
        busy = sum(b.gpu_busy_seconds for b in readable)
        prefill = [b.prefill_tokens_computed for b in readable]
        mean_prefill = sum(prefill) / len(prefill)
        s["backend_hit_ratio"] = h / q if q else math.nan
        s["gpu_seconds_per_request"] = busy / len(ok) if ok else math.nan
        s["busiest_prefill_over_mean"] = max(prefill) / mean_prefill if mean_prefill else math.nan
        # The backends' own view (their /metrics histograms): free of client-side and network overhead.
        n_ttft = sum(b.ttft_count for b in readable)
        n_e2e = sum(b.e2e_count for b in readable)
        s["backend_ttft_mean"] = sum(b.ttft_sum for b in readable) / n_ttft if n_ttft else math.nan
        s["backend_e2e_mean"] = sum(b.e2e_sum for b in readable) / n_e2e if n_e2e else math.nan
    return s


async def read_counters(client: httpx.AsyncClient, base_url: str) -> BackendCounters:
    """Read one backend's ``/metrics``; failures are recorded, not raised."""
    names = {
        "vllm:prefix_cache_queries": "prefix_cache_queries",
        "vllm:prefix_cache_hits": "prefix_cache_hits",
        "vllm:prompt_tokens": "prompt_tokens",
        "vllm:generation_tokens": "generation_tokens",
        "capstan_enginesim_gpu_busy_seconds": "gpu_busy_seconds",
        "capstan_enginesim_prefill_tokens_computed": "prefill_tokens_computed",
    }
    try:
        resp = await client.get(base_url.rstrip("/") + "/metrics", timeout=10.0)
        resp.raise_for_status()
        values: dict[str, float] = {}
        histograms = {"vllm:time_to_first_token_seconds": "ttft", "vllm:e2e_request_latency_seconds": "e2e"}
        for fam in text_string_to_metric_families(resp.text):
            hist = histograms.get(fam.name)
            if hist is not None:
                for suffix in ("sum", "count"):
                    values[f"{hist}_{suffix}"] = sum(
                        s.value for s in fam.samples if s.name.endswith("_" + suffix)
                    )
                continue
            key = names.get(fam.name)
            if key is None:
                continue
            values[key] = sum(s.value for s in fam.samples if s.name.endswith("_total"))
        g = values.get
        return BackendCounters(
            url=base_url,
            prefix_cache_queries=g("prefix_cache_queries", 0.0),
            prefix_cache_hits=g("prefix_cache_hits", 0.0),
            prompt_tokens=g("prompt_tokens", 0.0),
            generation_tokens=g("generation_tokens", 0.0),
            gpu_busy_seconds=g("gpu_busy_seconds", 0.0),
            prefill_tokens_computed=g("prefill_tokens_computed", 0.0),
            ttft_sum=g("ttft_sum", 0.0),
            ttft_count=g("ttft_count", 0.0),
            e2e_sum=g("e2e_sum", 0.0),
            e2e_count=g("e2e_count", 0.0),
        )
    except (httpx.HTTPError, ValueError) as exc:
        return BackendCounters(url=base_url, error=f"{type(exc).__name__}: {exc}")


class _Sender:
    def __init__(self, cfg: ReplayConfig, client: httpx.AsyncClient, clock: Callable[[], float]) -> None:
        self.cfg = cfg
        self.client = client
        self.clock = clock
        self.t0 = clock()
        self.sem = asyncio.Semaphore(cfg.max_concurrency)
        self.mooncake = MooncakeText()

    def model_now(self) -> float:
        return (self.clock() - self.t0) * self.cfg.time_scale

    async def sleep_until_model(self, t: float) -> None:
        delay = (t - self.model_now()) / self.cfg.time_scale
        if delay > 0:
            await asyncio.sleep(delay)

    async def session(self, reqs: list[ReplayRequest], out: list[RequestResult]) -> None:
        prev_done: float | None = None
        for req in reqs:
            if req.think is not None and prev_done is not None:
                await self.sleep_until_model(prev_done + req.think)
            else:
                await self.sleep_until_model(req.t)
            closed = req.think is not None and prev_done is not None
            res = RequestResult(id=req.id, session=req.session, planned=req.t, closed_loop=closed)
            out.append(res)
            async with self.sem:
                await self.send(req, res)
            prev_done = self.model_now()

    async def send(self, req: ReplayRequest, res: RequestResult) -> None:
        cfg = self.cfg
        res.sent = self.model_now()
        body = expand_body(req, self.mooncake, cfg.model)
        headers = {"x-session-id": req.session} if req.session else {}
        if cfg.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        url = cfg.target.rstrip("/") + req.path
        start = self.model_now()
        try:
            if cfg.stream:
                await self._stream(url, body, headers, res, start)
            else:
                resp = await self.client.post(url, json=body, headers=headers)
                res.status = resp.status_code
                if resp.status_code != 200:
                    res.error = _error_text(resp.text, resp.status_code)
                else:
                    data = resp.json()
                    res.ttft = self.model_now() - start
                    _take_usage(data.get("usage"), res)
        except httpx.HTTPError as exc:
            res.error = f"{type(exc).__name__}: {exc}"[:300]
        except (json.JSONDecodeError, ValueError) as exc:
            res.error = f"bad response: {exc}"[:300]
        res.e2e = self.model_now() - start if res.error is None else None

    async def _stream(
        self, url: str, body: dict[str, Any], headers: dict[str, str], res: RequestResult, start: float
    ) -> None:
        async with self.client.stream("POST", url, json=body, headers=headers) as resp:
            res.status = resp.status_code
            if resp.status_code != 200:
                res.error = _error_text((await resp.aread()).decode("utf-8", "replace"), resp.status_code)
                return
            done = False
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if chunk.get("error"):
                    err = chunk["error"]
                    res.error = str(err.get("message", err) if isinstance(err, dict) else err)[:300]
                    return
                if res.ttft is None and _has_content(chunk):
                    res.ttft = self.model_now() - start
                _take_usage(chunk.get("usage"), res)
            if not done:
                res.error = "stream ended without [DONE]"


def _has_content(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta")
        if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls")):
            return True
        if choice.get("text"):
            return True
    return False


def _take_usage(usage: Any, res: RequestResult) -> None:
    if not isinstance(usage, dict):
        return
    res.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    res.completion_tokens = int(usage.get("completion_tokens") or 0)
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        res.cached_tokens = int(details.get("cached_tokens") or 0)


def _error_text(text: str, status: int) -> str:
    try:
        err = json.loads(text).get("error")
        if isinstance(err, dict):
            return f"HTTP {status}: {err.get('message')}"[:300]
        if err:
            return f"HTTP {status}: {err}"[:300]
    except (json.JSONDecodeError, AttributeError):
        pass
    return f"HTTP {status}: {text[:200]}"


async def replay(
    requests: Sequence[ReplayRequest], cfg: ReplayConfig, *, clock: Callable[[], float] = time.monotonic
) -> ReplayReport:
    """Replay ``requests`` against ``cfg.target``; then read the counters of ``cfg.backends``."""
    if cfg.time_scale <= 0 or cfg.max_concurrency < 1:
        raise ValueError("time_scale must be positive and max_concurrency at least 1")
    # keepalive_expiry below the common 5 s server idle timeout: never reuse a connection the server may be closing.
    limits = httpx.Limits(
        max_connections=cfg.max_concurrency,
        max_keepalive_connections=cfg.max_concurrency,
        keepalive_expiry=4.0,
    )
    timeout = httpx.Timeout(cfg.request_timeout_s, connect=10.0)
    results: list[RequestResult] = []
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        sender = _Sender(cfg, client, clock)
        tasks = [asyncio.create_task(sender.session(group, results)) for _, group in iter_sessions(requests)]
        try:
            if cfg.max_duration_s is not None:
                _, pending = await asyncio.wait(tasks, timeout=cfg.max_duration_s)
            else:
                await asyncio.gather(*tasks)
                pending = set()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            if r.status == 0 and r.error is None and pending:
                r.error = "not finished within --max-duration"
        wall = clock() - sender.t0
        backends = [await read_counters(client, url) for url in cfg.backends]
    results.sort(key=lambda r: (r.planned, r.id))
    report = ReplayReport(results=results, backends=backends, wall_seconds=wall, time_scale=cfg.time_scale)
    report.summary = summarize(report)
    return report


def result_rows(report: ReplayReport) -> list[dict[str, Any]]:
    return [asdict(r) for r in report.results]
