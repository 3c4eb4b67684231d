"""The drainer over the in-memory outbox with scripted sinks and a fake clock."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry

from capstan.backoff import Jitter, backoff_delay
from capstan.notify import (
    Delivery,
    DeliveryPolicy,
    Drainer,
    MemoryOutbox,
    MessageCapacity,
    Notice,
    NotifyMetrics,
    Section,
)

pytestmark = pytest.mark.unit


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        target = self.now + seconds
        await asyncio.sleep(0)
        self.now = max(self.now, target)


@dataclass
class ScriptedSink:
    """Answers from ``script`` in order (then ``default``); records (time, title) of every send."""

    name: str
    clock: FakeClock
    script: list[Delivery] = field(default_factory=list)
    default: Delivery = field(default_factory=Delivery.sent)
    sends: list[tuple[float, str]] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    capacity: MessageCapacity = field(default_factory=lambda: MessageCapacity(text_chars=8000, sections=40))

    async def send(self, notice: Notice) -> Delivery:
        self.sends.append((self.clock.now, notice.title))
        self.notices.append(notice)
        return self.script.pop(0) if self.script else self.default

    async def aclose(self) -> None:
        return None


def _drainer(
    outbox: MemoryOutbox, sinks: list[ScriptedSink], clock: FakeClock, seed: int = 1, **policy: object
) -> Drainer:
    return Drainer(
        outbox,
        {s.name: s for s in sinks},
        clock=clock,
        rng=random.Random(seed),
        policy=DeliveryPolicy(**policy),
        metrics=NotifyMetrics(CollectorRegistry()),
        sleep=clock.sleep,
    )


def _fill(drainer: Drainer, destination: str, count: int, kind: str = "restart", start: int = 0) -> None:
    for i in range(start, start + count):
        notice = Notice(title=f"m{i}", summary="s", meta={"kind": kind, "ids": [i]})
        assert drainer.enqueue(destination, notice, f"{destination}-{i}")


async def _drain_until_empty(drainer: Drainer, outbox: MemoryOutbox, clock: FakeClock) -> None:
    """Run passes on the fake clock, jumping to the next due message, until nothing is pending."""
    for _ in range(100):  # bounded
        await drainer.drain_once()
        pending = outbox.items(state="pending")
        if not pending:
            return
        clock.now = max(clock.now, min(i.next_attempt_at for i in pending))
    raise AssertionError("the outbox did not drain")


async def test_paces_each_destination_with_bursts_one_message_per_notice() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    sink = ScriptedSink("slack", clock)
    drainer = _drainer(outbox, [sink], clock, rate_per_second=1.0, burst=3, coalesce=False)
    _fill(drainer, "slack", 8)
    first = await drainer.drain_once()
    assert (first.sent, first.released) == (3, 5) and first.next_due == pytest.approx(1001.0)
    assert [i.attempts for i in outbox.items(state="pending")] == [0] * 5  # a release is not an attempt
    await _drain_until_empty(drainer, outbox, clock)
    offsets = [t - 1000.0 for t, _ in sink.sends]
    assert offsets == pytest.approx([0, 0, 0, 1, 2, 3, 4, 5])
    assert [title for _, title in sink.sends] == [f"m{i}" for i in range(8)]  # order kept
    assert {i.state for i in outbox.items()} == {"sent"}
    assert {i.attempts for i in outbox.items()} == {1}


async def test_a_backlog_is_combined_into_one_message_per_token() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    sink = ScriptedSink("slack", clock)
    drainer = _drainer(outbox, [sink], clock, rate_per_second=1.0, burst=3)
    _fill(drainer, "slack", 3)  # no more than the tokens in hand: one message each
    assert (await drainer.drain_once()).combined == 0
    assert [t for _, t in sink.sends] == ["m0", "m1", "m2"]
    _fill(drainer, "slack", 12, start=3)
    clock.now += 1.0  # one token
    report = await drainer.drain_once()
    assert (report.sent, report.combined, report.released) == (12, 12, 0)
    combined = sink.notices[-1]
    assert combined.title == "m3 (+11 more)"
    assert [s.heading for s in combined.sections] == [f"m{i}" for i in range(3, 15)]
    assert combined.meta["ids"] == list(range(3, 15)) and combined.meta["combined"] == 12
    assert {i.state for i in outbox.items()} == {"sent"}
    assert drainer.metrics.combined.labels("slack")._value.get() == 12


async def test_combining_keeps_groups_apart_and_respects_the_sinks_capacity() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    sink = ScriptedSink("slack", clock, capacity=MessageCapacity(text_chars=10_000, sections=4))
    drainer = _drainer(outbox, [sink], clock, rate_per_second=1.0, burst=2)
    _fill(drainer, "slack", 6, kind="restart")
    _fill(drainer, "slack", 3, kind="digest", start=6)
    report = await drainer.drain_once()  # two tokens: two messages of at most four notices, rest released
    assert [len(n.sections) for n in sink.notices] == [4, 2]
    assert (report.sent, report.released) == (6, 3)
    clock.now = report.next_due or clock.now
    await _drain_until_empty(drainer, outbox, clock)
    assert [n.title for n in sink.notices] == ["m0 (+3 more)", "m4 (+1 more)", "m6 (+2 more)"]
    assert all(n.meta["kind"] == "digest" for n in sink.notices[2:])


async def test_a_brief_is_never_cut_and_an_oversized_one_goes_alone() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    sink = ScriptedSink("slack", clock, capacity=MessageCapacity(text_chars=1000, sections=40))
    drainer = _drainer(outbox, [sink], clock, rate_per_second=1.0, burst=1)
    big = Notice(title="big", summary="s", brief=(Section("big", "x" * 1500),), meta={"kind": "r"})
    small = [
        Notice(title=f"s{i}", summary="s", brief=(Section(f"s{i}", "y" * 400),), meta={"kind": "r"})
        for i in range(3)
    ]
    drainer.enqueue("slack", big, "big")
    for i, n in enumerate(small):
        drainer.enqueue("slack", n, f"s{i}")
    await _drain_until_empty(drainer, outbox, clock)
    assert [[s.body for s in n.sections] if n.meta.get("combined") else n.title for n in sink.notices] == [
        "big",
        ["y" * 400, "y" * 400],
        "s2",
    ]


async def test_enqueue_is_idempotent() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    drainer = _drainer(outbox, [], clock)
    assert drainer.enqueue("slack", Notice(title="a", summary="s"), "k")
    assert not drainer.enqueue("slack", Notice(title="a", summary="s"), "k")
    assert len(outbox.items()) == 1


async def test_retry_after_defers_the_whole_destination_and_loses_nothing() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    slack = ScriptedSink(
        "slack", clock, script=[Delivery.sent(), Delivery.failed("HTTP 429: rate_limited", 30.0)]
    )
    other = ScriptedSink("teams", clock)
    drainer = _drainer(outbox, [slack, other], clock, burst=10, coalesce=False)
    _fill(drainer, "slack", 5)
    _fill(drainer, "teams", 2)
    first = await drainer.drain_once()
    assert (first.sent, first.rate_limited) == (3, 1)  # 1 slack + 2 teams; then slack said 429
    pending = outbox.items(state="pending")
    assert len(pending) == 4 and {i.next_attempt_at for i in pending} == {1030.0}
    assert pending[0].last_error == "HTTP 429: rate_limited"
    clock.now = 1029.0
    assert (await drainer.drain_once()).claimed == 0
    clock.now = 1030.0
    await _drain_until_empty(drainer, outbox, clock)
    assert [t for t, _ in slack.sends][2:] == pytest.approx([1030, 1031, 1032, 1033])  # bucket emptied by 429
    assert outbox.items(state="dead") == [] and len(outbox.items(state="sent")) == 7


async def test_errors_back_off_then_dead_letter_keeping_slacks_error() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    sink = ScriptedSink("slack", clock, default=Delivery.failed("slack: channel_not_found"))
    drainer = _drainer(outbox, [sink], clock, max_attempts=4, backoff_base_seconds=2.0)
    _fill(drainer, "slack", 1)
    delays = []
    for _ in range(4):  # bounded: one attempt per pass
        report = await drainer.drain_once()
        assert report.claimed == 1
        [item] = outbox.items()
        if item.state == "dead":
            break
        delays.append(item.next_attempt_at - clock.now)
        clock.now = item.next_attempt_at
    [item] = outbox.items()
    assert item.state == "dead" and item.last_error == "slack: channel_not_found" and item.attempts == 4
    assert len(delays) == 3
    for attempt, delay in enumerate(delays, start=1):
        ceiling = 2.0 * 2 ** (attempt - 1)
        assert ceiling / 2 <= delay <= ceiling
    metrics = drainer.metrics
    assert metrics.dead.labels("slack")._value.get() == 1
    assert metrics.retried.labels("slack", "error")._value.get() == 3


async def test_the_retry_delay_is_the_backoff_function_of_the_stored_attempt_count() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    sink = ScriptedSink("slack", clock, default=Delivery.failed("HTTP 500: boom"))
    drainer = _drainer(outbox, [sink], clock, seed=5, max_attempts=6, backoff_base_seconds=3.0)
    _fill(drainer, "slack", 1)
    draws = random.Random(5)
    for _ in range(5):  # bounded: one failed attempt per pass
        await drainer.drain_once()
        [item] = outbox.items()
        expected = backoff_delay(
            item.attempts, base=3.0, cap=600.0, jitter=Jitter.equal(), draw=draws.random()
        )
        assert item.next_attempt_at - clock.now == pytest.approx(expected)
        assert drainer.retry_delay(item.attempts, 0.0) == pytest.approx(
            min(600.0, 3.0 * 2 ** (item.attempts - 1)) / 2
        )
        clock.now = item.next_attempt_at


def test_backoff_is_reproducible_with_the_same_seed() -> None:
    def run(seed: int) -> list[float]:
        clock, outbox = FakeClock(), MemoryOutbox()
        sink = ScriptedSink("slack", clock, default=Delivery.failed("HTTP 500: boom"))
        drainer = _drainer(outbox, [sink], clock, seed=seed, max_attempts=6)
        _fill(drainer, "slack", 1)
        times = []
        for _ in range(5):
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(drainer.drain_once())
            finally:
                loop.close()
            clock.now = outbox.items()[0].next_attempt_at
            times.append(clock.now)
        return times

    assert run(3) == run(3)
    assert run(3) != run(4)


async def test_unknown_destination_and_bad_payload_are_kept_as_dead() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    sink = ScriptedSink("slack", clock)
    drainer = _drainer(outbox, [sink], clock, max_attempts=1)
    _fill(drainer, "gone", 1)
    outbox.enqueue("slack", {"not": "a notice"}, "bad", now=clock.now)
    report = await drainer.drain_once()
    assert report.dead == 2
    errors = sorted(i.last_error or "" for i in outbox.items(state="dead"))
    assert errors[0] == "no sink named 'gone' is configured"
    assert errors[1].startswith("unreadable payload")
    assert sink.sends == []


async def test_latency_and_sent_metrics() -> None:
    registry = CollectorRegistry()
    clock, outbox = FakeClock(), MemoryOutbox()
    sink = ScriptedSink("slack", clock)
    drainer = Drainer(
        outbox,
        {"slack": sink},
        clock=clock,
        rng=random.Random(1),
        metrics=NotifyMetrics(registry),
        sleep=clock.sleep,
    )
    _fill(drainer, "slack", 2)
    clock.now += 5
    await drainer.drain_once()
    labels = {"destination": "slack"}
    assert registry.get_sample_value("capstan_notify_sent_total", labels) == 2
    assert registry.get_sample_value("capstan_notify_enqueued_total", labels) == 2
    assert registry.get_sample_value("capstan_notify_delivery_latency_seconds_sum", labels) == pytest.approx(
        10.0
    )


async def test_hung_sink_times_out() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()

    class Hung(ScriptedSink):
        async def send(self, notice: Notice) -> Delivery:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

    drainer = _drainer(outbox, [Hung("slack", clock)], clock, send_timeout_seconds=0.05)
    _fill(drainer, "slack", 1)
    report = await drainer.drain_once()
    assert report.errors == ["timed out after 0.05s"]
    assert outbox.items()[0].state == "pending"


async def test_run_is_bounded() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    drainer = _drainer(outbox, [ScriptedSink("slack", clock)], clock)
    assert await drainer.run(asyncio.Event(), max_passes=3) == 3
    stop = asyncio.Event()
    stop.set()
    assert await drainer.run(stop) == 0


async def test_higher_priority_goes_first_when_backed_up() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    sink = ScriptedSink("slack", clock)
    drainer = _drainer(outbox, [sink], clock, rate_per_second=1.0, burst=1)
    _fill(drainer, "slack", 4, kind="digest")
    drainer.enqueue(
        "slack", Notice(title="first report", summary="s", meta={"kind": "restart"}, priority=1), "r"
    )
    await _drain_until_empty(drainer, outbox, clock)
    assert [t for _, t in sink.sends] == ["first report", "m0 (+3 more)"]


async def test_an_enqueue_wakes_an_idle_drainer() -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    sink = ScriptedSink("slack", clock)

    async def never(seconds: float) -> None:  # an idle sleep that only an enqueue can cut short
        await asyncio.Event().wait()

    drainer = Drainer(outbox, {"slack": sink}, clock=clock, rng=random.Random(1), sleep=never)
    stop = asyncio.Event()
    task = asyncio.create_task(drainer.run(stop, max_passes=2))
    await asyncio.sleep(0.01)
    assert not task.done() and sink.sends == []  # idle after an empty pass
    _fill(drainer, "slack", 1)
    await asyncio.wait_for(task, timeout=5)
    assert [t for _, t in sink.sends] == ["m0"]


async def test_notices_and_delivery_errors_are_redacted_before_the_outbox_and_the_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, outbox = FakeClock(), MemoryOutbox()
    hook = "https://hooks.slack.com/services/T0/B0/Pl4ntedHookSecret"
    sink = ScriptedSink(
        "slack", clock, default=Delivery.failed(f"Client error '404 Not Found' for url '{hook}'")
    )
    drainer = _drainer(outbox, [sink], clock, max_attempts=2)
    notice = Notice(
        title="crash", summary="token ghp_Pl4ntedGithubToken0123456789abcdef", sections=(Section("log", "x"),)
    )
    assert drainer.enqueue("slack", notice, "k")
    with caplog.at_level("WARNING", logger="capstan.notify"):
        await _drain_until_empty(drainer, outbox, clock)
    [item] = outbox.items()
    assert item.state == "dead"
    assert "Pl4nted" not in repr(item.payload) + str(item.last_error) + caplog.text
    assert "[REDACTED]" in str(item.last_error) and "[REDACTED]" in item.payload["summary"]
    assert all("Pl4nted" not in n.summary for n in sink.notices)  # what was sent, too
