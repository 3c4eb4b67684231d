"""An inference gateway's request rate as demand announced ahead: the replicas the rate asks for beyond those a
Deployment already has, given to the planner through :class:`~capstan.capacity.QueuedDemand` so nodes for them
are launched while the HorizontalPodAutoscaler is still deciding to add them.

The gateway (``capstan route``) counts its answers to client requests (``capstan_route_responses_total``). The
controller scrapes it (:func:`follow_gateway`), :func:`requests_total` keeps the requests that were served or
refused for want of a replica, :class:`GatewayDemand` turns the count's rise over the last
window into requests per second, the rate into replicas at ``replica_rps`` each, and the replicas beyond the
Deployment's ``spec.replicas`` into pods shaped like its pod template. A rate that stops coming (the gateway
unreachable) soon announces nothing: a stale rate must not hold nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from capstan.backoff import Backoff
from capstan.capacity.live._objects import template_pods
from capstan.capacity.model import Pod

log = logging.getLogger("capstan.capacity.gateway")

RESPONSES_METRIC = "capstan_route_responses_total"
"""The gateway's counter of answers to client requests, per status: one per request, however many endpoints it was
tried on, relayed or the gateway's own (:func:`requests_total` adds the statuses up)."""
REJECTED_METRIC = "capstan_route_rejected_total"
"""The gateway's counter of requests it answered itself, per status and reason."""
UNSERVED_REASONS = frozenset({"no_healthy_endpoint", "no_endpoint", "upstream_error", "upstream_timeout"})
"""The gateway's own answers that are demand: refusals for want of a replica (a Deployment scaled to zero sees only
these) and requests every endpoint tried failed or timed out on (replicas too few or too busy). Its other own
answers (a bad request, an unknown model, a body too large or too slow, its own failure) are not, and
:func:`requests_total` takes them out."""
MAX_GATEWAY_REPLICAS = 64
"""At most this many replicas are announced from the rate: a rate is a hint, not a promise."""
MAX_METRICS_BYTES = 8 << 20
"""A metrics page longer than this is refused rather than read whole."""


class GatewayError(Exception):
    """A scrape that gave no request count: the gateway's answer, or its absence, in one line."""


def requests_total(text: str) -> float:
    """The requests a gateway was asked to serve, from a Prometheus text page: its answers
    (:data:`RESPONSES_METRIC`, each client request once, retries on other endpoints included) less those it gave
    itself for any reason but want of a replica (:data:`REJECTED_METRIC` outside :data:`UNSERVED_REASONS`). Both
    rise together at such an answer, so the difference is a counter too. :class:`GatewayError` if the page does
    not parse or has no answer counter."""
    answered, not_demand, found = 0.0, 0.0, False
    family_name = RESPONSES_METRIC.removesuffix("_total")  # how the parser names a counter's family
    try:
        for family in text_string_to_metric_families(text):
            # a counter with labels and no answer yet has no sample, only its HELP and TYPE lines: still zero
            found = found or family.name == family_name
            for sample in family.samples:
                if sample.name == RESPONSES_METRIC:
                    answered += float(sample.value)
                    found = True
                elif sample.name == REJECTED_METRIC and sample.labels.get("reason") not in UNSERVED_REASONS:
                    not_demand += float(sample.value)
    except ValueError as exc:
        raise GatewayError(f"not a Prometheus metrics page ({exc})") from None
    if not found:
        raise GatewayError(f"no {RESPONSES_METRIC} in the metrics page (is it a capstan route gateway?)")
    return max(answered - not_demand, 0.0)


class GatewayDemand:
    """:class:`~capstan.capacity.Announcements` from a gateway's request rate for the replicas of one Deployment.

    ``deployment``: ``namespace/name`` of the Deployment whose replicas serve the gateway's traffic;
    ``replica_rps``: requests per second one replica absorbs (the HorizontalPodAutoscaler's target, or the rate
    at which a replica's time to first token stays within its objective). :meth:`observe` takes each scrape of
    the counter; the rate is its rise over the last ``window_s`` (a counter that falls was restarted: its new
    value is the rise); no scrape within ``stale_after_s`` means no rate. The answer is read again every
    ``refresh_s``."""

    def __init__(
        self,
        deployment: str,
        replica_rps: float,
        *,
        window_s: float = 60.0,
        refresh_s: float = 5.0,
        stale_after_s: float | None = None,
    ) -> None:
        namespace, _, name = deployment.partition("/")
        if not namespace or not name or "/" in name:
            raise ValueError(f"deployment {deployment!r}: expected namespace/name")
        if not replica_rps > 0 or not math.isfinite(replica_rps):
            raise ValueError(f"replica_rps {replica_rps}: it must be more than 0")
        if not window_s > 0 or not refresh_s > 0:
            raise ValueError(f"window_s {window_s}, refresh_s {refresh_s}: both must be more than 0")
        self.namespace, self.name = namespace, name
        self.replica_rps = replica_rps
        self.window_s = window_s
        self.refresh_s = refresh_s
        self.stale_after_s = stale_after_s if stale_after_s is not None else max(3 * refresh_s, window_s)
        self._samples: deque[tuple[float, float]] = deque()  # (when, counter), oldest first, over one window
        self._deployments: Mapping[str, Mapping[str, Any]] = {}
        self.last_error: str | None = None
        self.missing = False
        """The rate asked for replicas and there was no such Deployment (a wrong name, not created yet, or a watch
        refused): nothing is announced, and the controller says so once."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def follow(self, deployments: Mapping[str, Mapping[str, Any]]) -> None:
        """Read the Deployment from ``deployments`` (an informer's state by ``namespace/name``, kept up to date)."""
        self._deployments = deployments

    def observe(self, total: float, at: float) -> None:
        """One scrape: the counter's value ``total`` at ``at`` (seconds; scrapes come in time order)."""
        if self._samples and at <= self._samples[-1][0]:
            return
        self._samples.append((at, total))
        # keep one sample at or before the window's start, so the rate spans the whole window once it has run
        while len(self._samples) > 2 and self._samples[1][0] <= at - self.window_s:
            self._samples.popleft()
        self.last_error = None

    def failed(self, why: str) -> None:
        """A scrape gave nothing (kept for the controller to report)."""
        self.last_error = why

    def rate(self, now: float) -> float | None:
        """Requests per second over the last window, or None: fewer than two scrapes, or none recent."""
        if len(self._samples) < 2 or now - self._samples[-1][0] > self.stale_after_s:
            return None
        rise = 0.0
        for (_, prev), (_, value) in itertools.pairwise(self._samples):
            rise += value - prev if value >= prev else value  # a fall: the gateway restarted from 0
        span = self._samples[-1][0] - self._samples[0][0]
        return rise / span if span > 0 else None

    def wanted(self, now: float) -> int | None:
        """Replicas the rate asks for (None without a rate)."""
        rate = self.rate(now)
        return None if rate is None else math.ceil(rate / self.replica_rps - 1e-9)

    def announced(self, now: float) -> tuple[tuple[Pod, ...], float | None]:
        deployment = self._deployments.get(self.key)
        wanted = self.wanted(now)
        self.missing = deployment is None and bool(wanted)
        if deployment is None or wanted is None:
            return (), now + self.refresh_s
        spec = deployment.get("spec") or {}
        try:
            have = int(spec.get("replicas", 1))
        except (TypeError, ValueError):
            have = 1
        count = max(0, min(wanted - have, MAX_GATEWAY_REPLICAS))
        pods = template_pods(spec.get("template") or {}, f"{self.name}-gateway", self.namespace, count, now,
                             service=self.key)  # fmt: skip
        return pods, now + self.refresh_s


async def follow_gateway(
    url: str,
    demand: GatewayDemand,
    stop: asyncio.Event,
    *,
    clock: Callable[[], float],
    timeout_s: float = 5.0,
    on_error: Callable[[str], None] | None = None,
) -> None:
    """Scrape ``url`` (the gateway's /metrics) into ``demand`` every ``demand.refresh_s`` until ``stop`` is set. A
    scrape that fails is logged once per failure, reported to ``on_error``, and retried with backoff; it never
    ends the loop (a gateway down leaves the controller running, with no rate)."""
    backoff = Backoff(base=demand.refresh_s, cap=max(60.0, demand.refresh_s))
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not stop.is_set():
            try:
                async with session.get(url, headers={"Accept": "text/plain"}) as resp:
                    if resp.status != 200:
                        raise GatewayError(f"the gateway answered HTTP {resp.status}")
                    body = await resp.content.read(MAX_METRICS_BYTES + 1)
                if len(body) > MAX_METRICS_BYTES:
                    raise GatewayError(f"the metrics page is longer than {MAX_METRICS_BYTES} bytes")
                demand.observe(requests_total(body.decode("utf-8", "replace")), clock())
                backoff.reset()
                wait = demand.refresh_s
            except (GatewayError, aiohttp.ClientError, TimeoutError, OSError) as exc:
                why = str(exc) or type(exc).__name__
                demand.failed(why)
                wait = backoff.next()
                log.warning(
                    "gateway scrape failed; retrying",
                    extra={"url": url, "error": why, "retry_in": round(wait, 2)},
                )
                if on_error is not None:
                    on_error(why)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=wait)
