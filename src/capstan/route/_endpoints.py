"""Where endpoints come from and what they report: the :class:`EndpointSource` seam and the health/metrics poller.

:class:`StaticEndpointSource` serves the list from the configuration. Discovery in Kubernetes (pods selected by
labels, through ``capstan.kube``) is another implementation of the same interface (``capstan.route._discovery``).

:class:`EndpointMonitor` polls each endpoint's ``/health`` and ``/metrics`` every 50–100 ms (with a timeout per
call) and keeps the last :class:`LoadSignals`; :func:`parse_vllm_metrics` is the pure part, reading vLLM's metric
names (and the deprecated ``vllm:gpu_cache_usage_perc``, which older vLLM versions export instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families

from capstan.route._model import Endpoint

log = logging.getLogger(__name__)


class EndpointSource(Protocol):
    """Supplies the current set of endpoints; called on every polling round, so it may change over time.
    ``start``/``stop`` bracket the router's life (a discovering source runs its watch in between)."""

    async def endpoints(self) -> Sequence[Endpoint]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class StaticEndpointSource:
    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self._endpoints = tuple(endpoints)

    async def endpoints(self) -> Sequence[Endpoint]:
        return self._endpoints

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None


@dataclass(frozen=True, slots=True)
class LoadSignals:
    """What one scrape of an endpoint said. ``healthy`` is False until a health check succeeded."""

    healthy: bool = False
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    prefix_hits: float = 0.0
    prefix_queries: float = 0.0
    failures: int = 0


def parse_vllm_metrics(text: str) -> LoadSignals:
    """Read the load signals out of a vLLM ``/metrics`` page (sums over label sets, e.g. several engines)."""
    waiting = running = kv = hits = queries = 0.0
    kv_seen = 0
    block_size = num_blocks = None
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            n = s.name
            if n == "vllm:num_requests_waiting":
                waiting += s.value
            elif n == "vllm:num_requests_running":
                running += s.value
            elif n in ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
                kv = max(kv, s.value)
                kv_seen += 1
            elif n == "vllm:prefix_cache_hits_total":
                hits += s.value
            elif n == "vllm:prefix_cache_queries_total":
                queries += s.value
            elif n == "vllm:cache_config_info":
                with contextlib.suppress(KeyError, ValueError):
                    block_size = int(s.labels["block_size"])
                with contextlib.suppress(KeyError, ValueError):
                    num_blocks = int(s.labels["num_gpu_blocks"])
    return LoadSignals(
        healthy=True,
        waiting=waiting,
        running=running,
        kv_usage=kv if kv_seen else 0.0,
        block_size=block_size,
        num_gpu_blocks=num_blocks,
        prefix_hits=hits,
        prefix_queries=queries,
    )


class EndpointMonitor:
    """Keeps :attr:`signals` fresh for every endpoint of the source. One asyncio task; stop() ends it."""

    def __init__(
        self,
        source: EndpointSource,
        client: httpx.AsyncClient,
        *,
        interval_s: float = 0.075,
        timeout_s: float = 0.5,
        unhealthy_after: int = 2,
        on_change: Callable[[Sequence[Endpoint]], None] | None = None,
    ) -> None:
        self.source = source
        self.client = client
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.unhealthy_after = unhealthy_after
        self.endpoints: tuple[Endpoint, ...] = ()
        self.signals: dict[str, LoadSignals] = {}
        self._on_change = on_change
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0

    async def refresh(self) -> None:
        """One polling round over every endpoint, concurrently, each call bounded by the timeout."""
        current = tuple(await self.source.endpoints())
        if current != self.endpoints:
            gone = {e.name for e in self.endpoints} - {e.name for e in current}
            for name in gone:
                self.signals.pop(name, None)
            self.endpoints = current
            if self._on_change is not None:
                self._on_change(current)
        await asyncio.gather(*(self._poll(e) for e in current))
        self.rounds += 1

    async def _poll(self, ep: Endpoint) -> None:
        prev = self.signals.get(ep.name, LoadSignals())
        try:
            health = await self.client.get(f"{ep.url}/health", timeout=self.timeout_s)
            if health.status_code != 200:
                raise httpx.HTTPStatusError("unhealthy", request=health.request, response=health)
            page = await self.client.get(f"{ep.url}/metrics", timeout=self.timeout_s)
            signals = (
                parse_vllm_metrics(page.text) if page.status_code == 200 else replace(prev, healthy=True)
            )
            self.signals[ep.name] = replace(signals, failures=0)
        except (httpx.HTTPError, ValueError) as exc:
            failures = prev.failures + 1
            healthy = prev.healthy and failures < self.unhealthy_after
            if prev.healthy and not healthy:
                log.warning("endpoint %s marked unhealthy: %s", ep.name, exc)
            self.signals[ep.name] = replace(prev, healthy=healthy, failures=failures)

    def mark_failed(self, name: str) -> None:
        """The proxy saw a connection failure: stop sending there until the next successful health check."""
        prev = self.signals.get(name, LoadSignals())
        self.signals[name] = replace(prev, healthy=False, failures=max(prev.failures, self.unhealthy_after))

    async def _loop(self) -> None:
        while True:  # until stop(); each round is bounded by the per-call timeout
            try:
                await self.refresh()
            except Exception:  # a source failing must not kill the monitor
                log.exception("endpoint refresh failed")
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="endpoint-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
