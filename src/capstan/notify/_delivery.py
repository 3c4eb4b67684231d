"""Empty the outbox into the sinks: paced per destination, 429-aware, retried with seeded backoff, dead-lettered
after repeated failures, never dropping a message.

One ``Drainer.drain_once`` pass claims the due messages (each claim is leased, so a crash mid-pass leaves them to
be claimed again after the lease) in enqueue order, groups them by destination and serves each destination in its
own task, taking a token from that destination's bucket before every send (default 1 message/s, bursts of 3,
Slack's documented pace). A pass never waits for a token: what has no send slot now is released (not counted as an
attempt) and due when the next token is, so each pass sees everything that queued meanwhile.

Within a destination, messages go by ``Notice.priority`` (higher first), then in enqueue order. When more messages
wait than the tokens in hand can carry one by one, the drainer **combines** the first ones of
the same group (``meta["kind"]`` and channel) into one message (:func:`~capstan.notify.combine_notices`: each
notice's brief, up to the sink's :class:`~capstan.notify.MessageCapacity`), so a storm costs one message per token
instead of one queue slot per notice, and the newest notice waits about one token interval instead of the whole
backlog. ``coalesce: false`` turns this off (strict one message per notice). Every notice in a combined message is
marked sent; its full payload stays in the outbox (``capstan restarts outbox --show ID``).

Outcomes:

- sent → ``mark_sent``; the delivery latency (now − enqueue time) is observed per notice.
- HTTP 429 → the destination's bucket is blocked until ``Retry-After`` and the messages (and the rest of that
  destination's batch) go back as pending at that time. Rate limiting never dead-letters a message, except as a
  last bound after ``max_attempts × 10`` claims.
- any other error (Slack's error string, HTTP status, transport error) is logged and each message is retried after
  exponential backoff: a pure function of the outbox's stored attempt count (:func:`capstan.backoff.backoff_delay`,
  ceiling ``base × 2^(attempts - 1)`` up to the cap, jittered over its upper half with one draw of a seeded RNG);
  after ``max_attempts`` claims it becomes ``dead``: kept in the outbox, listed by ``capstan restarts outbox``,
  counted in metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import Field

from capstan.backoff import Jitter, backoff_delay
from capstan.config import StrictModel
from capstan.notify._notice import Notice, combine_notices
from capstan.notify._outbox import Outbox
from capstan.notify._ratelimit import TokenBucket
from capstan.notify._sinks import Delivery, Sink
from capstan.redact import Redactor

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

    # combine waiting messages of one group into one when the destination is at its pace (see the module text)
    coalesce: bool = True
    max_combined: int = Field(default=20, ge=2, le=200)

    @property
    def claim_size(self) -> int:
        """Messages one pass claims: a batch (what has no send slot is released again, uncounted)."""
        return self.batch_size

    @property
    def lease_seconds(self) -> float:
        # a pass sends at most ``burst`` messages per destination without waiting; the lease outlives them
        return (self.burst + 1) * self.send_timeout_seconds + 5.0


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
        self.combined = Counter(
            "capstan_notify_combined",
            "Notifications delivered inside a combined message (the destination was at its pace).",
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
    combined: int = 0
    released: int = 0
    errors: list[str] = field(default_factory=list)
    next_due: float | None = None

    def due_at(self, at: float) -> None:
        self.next_due = at if self.next_due is None else min(self.next_due, at)


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
        redactor: Redactor | None = None,
    ) -> None:
        self._outbox = outbox
        self._sinks = dict(sinks)
        self._clock = clock
        self._rng = rng
        self._policy = policy or DeliveryPolicy()
        self._metrics = metrics or NotifyMetrics(CollectorRegistry())
        self._sleep = sleep
        # every notice is redacted before it enters the outbox, and every delivery error before it is stored or
        # logged (a webhook URL in an HTTP error is a credential)
        self._redactor = redactor or Redactor()
        self._buckets: dict[str, TokenBucket] = {}
        self._wake = asyncio.Event()

    @property
    def metrics(self) -> NotifyMetrics:
        return self._metrics

    def enqueue(self, destination: str, notice: Notice, dedupe_key: str) -> bool:
        """Put ``notice`` in the outbox for ``destination``; False if ``dedupe_key`` was already there."""
        payload = self._redactor.strings(notice.to_json())
        item = self._outbox.enqueue(destination, payload, dedupe_key, now=self._clock())
        if item is None:
            return False
        self._metrics.enqueued.labels(destination).inc()
        self._wake.set()
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
        ready: list[tuple[Any, Notice]] = []
        for item in batch:
            if sink is None:
                self._fail(item, f"no sink named {destination!r} is configured", report)
                continue
            try:
                ready.append((item, Notice.from_json(item.payload)))
            except (KeyError, TypeError, ValueError) as exc:
                self._dead(item, f"unreadable payload: {exc}", report)
        if sink is None:
            return
        ready.sort(key=lambda entry: -entry[1].priority)  # stable: enqueue order within a priority
        for _ in range(len(ready)):  # bounded: every round sends at least one message or stops
            if not ready:
                return
            if not bucket.try_take(self._clock()):
                break
            chunk = self._next_chunk(ready, bucket.available(self._clock()), sink)
            taken = {id(entry[0]) for entry in chunk}
            ready = [entry for entry in ready if id(entry[0]) not in taken]
            notice = chunk[0][1] if len(chunk) == 1 else combine_notices([n for _, n in chunk])
            result = await self._send(sink, notice)
            now = self._clock()
            if result.ok:
                for item, _ in chunk:
                    self._outbox.mark_sent(item.id, now=now)
                    self._metrics.sent.labels(destination).inc()
                    self._metrics.latency.labels(destination).observe(max(0.0, now - item.created_at))
                report.sent += len(chunk)
                if len(chunk) > 1:
                    report.combined += len(chunk)
                    self._metrics.combined.labels(destination).inc(len(chunk))
                if result.warning:
                    log.warning("notification to %s: %s", destination, self._redactor.text(result.warning))
                continue
            if result.retry_after is not None:
                until = now + result.retry_after
                bucket.block_until(now, until)
                report.rate_limited += 1
                rest = [item for item, _ in chunk + ready]
                log.info(
                    "%s asked to wait %.1fs (429); deferring %d message(s)",
                    destination,
                    result.retry_after,
                    len(rest),
                )
                for item in rest:
                    if item.attempts >= self._policy.max_attempts * 10:
                        self._dead(item, f"still rate limited after {item.attempts} attempts", report)
                        continue
                    error = self._redactor.text(
                        (result.error or "rate limited")
                        if any(item is c for c, _ in chunk)
                        else (item.last_error or "deferred: destination rate limited")
                    )
                    self._outbox.mark_retry(item.id, until, error, now=now)
                    self._metrics.retried.labels(destination, "rate_limited").inc()
                report.due_at(until)
                return
            for item, _ in chunk:
                self._fail(item, result.error or "unknown error", report)
        if ready:  # no send slot now: back in the outbox, due with the next token, not counted as an attempt
            now = self._clock()
            at = now + max(0.001, bucket.wait_time(now))
            self._outbox.release([item.id for item, _ in ready], at, now=now)
            report.released += len(ready)
            report.due_at(at)

    def _next_chunk(
        self, ready: list[tuple[Any, Notice]], spare_tokens: float, sink: Sink
    ) -> list[tuple[Any, Notice]]:
        """The next message's notices: the oldest alone while the tokens in hand can carry the queue one by one,
        otherwise the oldest and the following ones of its group, as many as the sink's capacity holds."""
        if not self._policy.coalesce or len(ready) <= int(spare_tokens) + 1:
            return ready[:1]
        group = ready[0][1].group
        capacity = sink.capacity
        chunk: list[tuple[Any, Notice]] = []
        chars = sections = 0
        for entry in ready:  # bounded by the batch
            notice = entry[1]
            if notice.group != group:
                continue
            size, count = notice.brief_size(), len(notice.brief_sections())
            if chunk and (
                len(chunk) >= self._policy.max_combined
                or chars + size > capacity.text_chars
                or sections + count > capacity.sections
            ):
                break
            chunk.append(entry)
            chars += size
            sections += count
        return chunk

    async def _send(self, sink: Sink, notice: Notice) -> Delivery:
        try:
            return await asyncio.wait_for(sink.send(notice), self._policy.send_timeout_seconds)
        except TimeoutError:
            return Delivery.failed(f"timed out after {self._policy.send_timeout_seconds:g}s")

    def retry_delay(self, attempts: int, draw: float) -> float:
        """Seconds before a message that failed ``attempts`` times is tried again (``draw`` in [0, 1))."""
        return backoff_delay(
            attempts,
            base=self._policy.backoff_base_seconds,
            cap=self._policy.backoff_cap_seconds,
            jitter=Jitter.equal(),
            draw=draw,
        )

    def _fail(self, item: Any, error: str, report: DrainReport) -> None:
        error = self._redactor.text(error)
        report.failed += 1
        report.errors.append(error)
        log.warning(
            "notification %s to %s failed (attempt %d): %s", item.id, item.destination, item.attempts, error
        )
        if item.attempts >= self._policy.max_attempts:
            self._dead(item, error, report)
            return
        now = self._clock()
        at = now + self.retry_delay(item.attempts, self._rng.random())
        self._outbox.mark_retry(item.id, at, error, now=now)
        self._metrics.retried.labels(item.destination, "error").inc()

    def _dead(self, item: Any, error: str, report: DrainReport) -> None:
        error = self._redactor.text(error)
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

    async def _idle(self, seconds: float) -> None:
        """Sleep ``seconds`` on the injected clock, or less if a message is enqueued meanwhile."""
        sleeper = asyncio.ensure_future(self._sleep(seconds))
        waker = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, waker}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeper, waker):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(sleeper, waker, return_exceptions=True)

    async def run(self, stop: asyncio.Event, *, max_passes: int | None = None) -> int:
        """Drain until ``stop`` is set (or ``max_passes`` passes ran); returns the number of passes.

        Between passes it sleeps until the earliest released message is due, at most ``idle_interval_seconds``,
        and wakes early when a message is enqueued in this process."""
        passes = 0
        while not stop.is_set() and (max_passes is None or passes < max_passes):
            self._wake.clear()
            report = await self.drain_once()
            passes += 1
            if stop.is_set():
                break
            wait = self._policy.idle_interval_seconds
            if report.next_due is not None:
                wait = min(wait, max(0.0, report.next_due - self._clock()))
            elif report.claimed:
                wait = 0.0
            if wait > 0:
                await self._idle(wait)
        return passes
