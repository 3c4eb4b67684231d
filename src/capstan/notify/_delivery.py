"""Empty the outbox into the sinks: paced per destination, 429-aware, retried with seeded backoff, dead-lettered
after repeated failures, never dropping a message.

One ``Drainer.drain_once`` pass claims the due messages (each claim is leased, so a crash mid-pass leaves them to
be claimed again after the lease), groups them by destination and sends each group in order, one destination per
task, taking a token from that destination's bucket before every send (default 1 message/s, bursts of 3, Slack's
documented pace). Outcomes:

- sent → ``mark_sent``; the delivery latency (now − enqueue time) is observed.
- HTTP 429 → the destination's bucket is blocked until ``Retry-After`` and the message (and the rest of that
  destination's batch) goes back as pending at that time. Rate limiting never dead-letters a message, except as a
  last bound after ``max_attempts × 10`` claims.
- any other error (Slack's error string, HTTP status, transport error) is logged and the message is retried after
  exponential backoff with full jitter from a seeded RNG; after ``max_attempts`` claims it becomes ``dead``: kept in
  the outbox, listed by ``capstan restarts outbox``, counted in metrics.

The outbox's ``attempts`` counts claims, so a message deferred by its destination's pacing also spends one; the
rate-limit exemption above keeps that from dead-lettering messages during a storm.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import Field

from capstan.config import StrictModel
from capstan.notify._notice import Notice
from capstan.notify._outbox import Outbox
from capstan.notify._ratelimit import Backoff, TokenBucket
from capstan.notify._sinks import Delivery, Sink

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class DeliveryPolicy(StrictModel):
    """Pacing and retry settings of the drainer (the ``delivery`` section of the restarts configuration)."""

    rate_per_second: float = Field(default=1.0, gt=0)
    burst: int = Field(default=3, ge=1)
    max_attempts: int = Field(default=8, ge=1)
    backoff_base_seconds: float = Field(default=2.0, gt=0)
    backoff_cap_seconds: float = Field(default=600.0, gt=0)
    batch_size: int = Field(default=50, ge=1, le=10_000)
    send_timeout_seconds: float = Field(default=30.0, gt=0)
    idle_interval_seconds: float = Field(default=0.5, gt=0)

    # How many seconds of sending one pass claims at most. A claim is leased: after a crash, what the dead process had
    # claimed waits for its lease to expire, so passes stay short (a slow destination is served over several passes).
    pass_seconds: float = Field(default=10.0, gt=0, le=600)

    @property
    def claim_size(self) -> int:
        """Messages one pass claims: what the rate allows in ``pass_seconds`` plus the burst, at most a batch."""
        return max(1, min(self.batch_size, self.burst + int(self.rate_per_second * self.pass_seconds)))

    @property
    def lease_seconds(self) -> float:
        # a pass may wait for tokens for up to claim_size/rate seconds on one destination; the lease outlives it
        return 2.0 * self.claim_size / self.rate_per_second + self.send_timeout_seconds


class NotifyMetrics:
    """Delivery metrics on a registry the application owns (never the global default registry)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.enqueued = Counter(
            "capstan_notify_enqueued", "Notifications put in the outbox.", ["destination"], registry=registry
        )
        self.sent = Counter(
            "capstan_notify_sent", "Notifications delivered.", ["destination"], registry=registry
        )
        self.retried = Counter(
            "capstan_notify_retried",
            "Deliveries put back for a later attempt.",
            ["destination", "reason"],
            registry=registry,
        )
        self.dead = Counter(
            "capstan_notify_dead",
            "Notifications moved to the dead state.",
            ["destination"],
            registry=registry,
        )
        self.latency = Histogram(
            "capstan_notify_delivery_latency_seconds",
            "From enqueue to successful delivery.",
            ["destination"],
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600),
            registry=registry,
        )


@dataclass
class DrainReport:
    """What one pass did (counts per outcome); ``next_due`` is when the caller should look again, if known."""

    claimed: int = 0
    sent: int = 0
    rate_limited: int = 0
    failed: int = 0
    dead: int = 0
    errors: list[str] = field(default_factory=list)


class Drainer:
    """Moves messages from an :class:`Outbox` to the :class:`Sink` named by each message's destination."""

    def __init__(
        self,
        outbox: Outbox,
        sinks: Mapping[str, Sink],
        *,
        clock: Clock,
        rng: random.Random,
        policy: DeliveryPolicy | None = None,
        metrics: NotifyMetrics | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._outbox = outbox
        self._sinks = dict(sinks)
        self._clock = clock
        self._rng = rng
        self._policy = policy or DeliveryPolicy()
        self._metrics = metrics or NotifyMetrics(CollectorRegistry())
        self._sleep = sleep
        self._buckets: dict[str, TokenBucket] = {}
        self._backoff = Backoff(self._policy.backoff_base_seconds, self._policy.backoff_cap_seconds)

    @property
    def metrics(self) -> NotifyMetrics:
        return self._metrics

    def enqueue(self, destination: str, notice: Notice, dedupe_key: str) -> bool:
        """Put ``notice`` in the outbox for ``destination``; False if ``dedupe_key`` was already there."""
        item = self._outbox.enqueue(destination, notice.to_json(), dedupe_key, now=self._clock())
        if item is None:
            return False
        self._metrics.enqueued.labels(destination).inc()
        return True

    def _bucket(self, destination: str) -> TokenBucket:
        bucket = self._buckets.get(destination)
        if bucket is None:
            bucket = self._buckets[destination] = TokenBucket(
                self._policy.rate_per_second, self._policy.burst
            )
        return bucket

    async def drain_once(self) -> DrainReport:
        """One bounded pass over the messages due now."""
        report = DrainReport()
        now = self._clock()
        items = self._outbox.claim_due(now, self._policy.claim_size, lease_seconds=self._policy.lease_seconds)
        report.claimed = len(items)
        groups: dict[str, list[Any]] = {}
        for item in items:
            groups.setdefault(item.destination, []).append(item)
        # destinations are independent: one slow or throttled chat service does not hold up the others
        await asyncio.gather(
            *(self._drain_destination(dest, batch, report) for dest, batch in sorted(groups.items()))
        )
        return report

    async def _drain_destination(self, destination: str, batch: list[Any], report: DrainReport) -> None:
        bucket = self._bucket(destination)
        sink = self._sinks.get(destination)
        for index, item in enumerate(batch):  # bounded by the batch
            if sink is None:
                self._fail(item, f"no sink named {destination!r} is configured", report)
                continue
            try:
                notice = Notice.from_json(item.payload)
            except (KeyError, TypeError, ValueError) as exc:
                self._dead(item, f"unreadable payload: {exc}", report)
                continue
            for _ in range(100):  # bounded: each wait is the time until the next token
                if bucket.try_take(self._clock()):
                    break
                await self._sleep(max(0.001, bucket.wait_time(self._clock())))
            result = await self._send(sink, notice)
            now = self._clock()
            if result.ok:
                self._outbox.mark_sent(item.id, now=now)
                self._metrics.sent.labels(destination).inc()
                self._metrics.latency.labels(destination).observe(max(0.0, now - item.created_at))
                report.sent += 1
                if result.warning:
                    log.warning("notification %s to %s: %s", item.id, destination, result.warning)
                continue
            if result.retry_after is not None:
                until = now + result.retry_after
                bucket.block_until(now, until)
                report.rate_limited += 1
                log.info(
                    "%s asked to wait %.1fs (429); deferring %d message(s)",
                    destination,
                    result.retry_after,
                    len(batch) - index,
                )
                for rest in batch[index:]:
                    if rest.attempts >= self._policy.max_attempts * 10:
                        self._dead(rest, f"still rate limited after {rest.attempts} attempts", report)
                        continue
                    if rest is item:
                        error = result.error or "rate limited"
                    else:
                        error = rest.last_error or "deferred: destination rate limited"
                    self._outbox.mark_retry(rest.id, until, error, now=now)
                    self._metrics.retried.labels(destination, "rate_limited").inc()
                return
            self._fail(item, result.error or "unknown error", report)

    async def _send(self, sink: Sink, notice: Notice) -> Delivery:
        try:
            return await asyncio.wait_for(sink.send(notice), self._policy.send_timeout_seconds)
        except TimeoutError:
            return Delivery.failed(f"timed out after {self._policy.send_timeout_seconds:g}s")

    def _fail(self, item: Any, error: str, report: DrainReport) -> None:
        report.failed += 1
        report.errors.append(error)
        log.warning(
            "notification %s to %s failed (attempt %d): %s", item.id, item.destination, item.attempts, error
        )
        if item.attempts >= self._policy.max_attempts:
            self._dead(item, error, report)
            return
        now = self._clock()
        at = now + self._backoff.delay(item.attempts, self._rng)
        self._outbox.mark_retry(item.id, at, error, now=now)
        self._metrics.retried.labels(item.destination, "error").inc()

    def _dead(self, item: Any, error: str, report: DrainReport) -> None:
        report.dead += 1
        log.error(
            "notification %s to %s is dead after %d attempts: %s",
            item.id,
            item.destination,
            item.attempts,
            error,
        )
        self._outbox.mark_dead(item.id, error, now=self._clock())
        self._metrics.dead.labels(item.destination).inc()

    async def run(self, stop: asyncio.Event, *, max_passes: int | None = None) -> int:
        """Drain until ``stop`` is set (or ``max_passes`` passes ran); returns the number of passes."""
        passes = 0
        while not stop.is_set() and (max_passes is None or passes < max_passes):
            report = await self.drain_once()
            passes += 1
            if report.claimed == 0 and not stop.is_set():
                await self._sleep(self._policy.idle_interval_seconds)
        return passes
