"""The drainer end to end: outbox → Slack sinks → the local receiver answering 429s; nothing is lost, and a
drainer restarted on a persistent outbox picks up what the previous one left."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from capstan.notify import (
    DeliveryPolicy,
    Drainer,
    MemoryOutbox,
    Notice,
    NotifyMetrics,
    Outbox,
    SlackBotSink,
    SlackWebhookSink,
)
from tests.integration.notify.conftest import Slack

pytestmark = pytest.mark.integration


@pytest.fixture(params=["memory", "sqlite-store"])
def outbox(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Outbox]:
    if request.param == "memory":
        yield MemoryOutbox()
        return
    store_mod = pytest.importorskip("capstan.store")
    store = store_mod.open_store(str(tmp_path / "capstan.db"))
    try:
        yield store.outbox
    finally:
        store.close()


def _drainer(
    outbox: Outbox, sinks: dict[str, Any], registry: CollectorRegistry, *, coalesce: bool = False
) -> Drainer:
    policy = DeliveryPolicy(
        rate_per_second=50, burst=5, max_attempts=5, backoff_base_seconds=0.05, coalesce=coalesce
    )
    return Drainer(
        outbox, sinks, clock=time.time, rng=random.Random(7), policy=policy, metrics=NotifyMetrics(registry)
    )


async def _drain_until_empty(drainer: Drainer, outbox: Outbox, passes: int = 400) -> None:
    for _ in range(passes):  # bounded
        await drainer.drain_once()
        if not outbox.items(state="pending", limit=1):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("outbox did not drain")


async def test_storm_with_429s_delivers_everything_in_order(slack: Slack, outbox: Outbox) -> None:
    registry = CollectorRegistry()
    sink = SlackWebhookSink("slack", slack.webhook_url, timeout=5)
    drainer = _drainer(outbox, {"slack": sink}, registry)
    for i in range(30):
        drainer.enqueue("slack", Notice(title=f"restart {i}", summary=f"pod-{i}"), f"r-{i}")
    slack.receiver.arm_429(3, retry_after=1)
    await _drain_until_empty(drainer, outbox)
    received = [m["text"] for m in slack.receiver.snapshot()["messages"]]
    assert received == [f"restart {i}: pod-{i}" for i in range(30)]
    assert slack.receiver.snapshot()["count_429"] == 3
    assert outbox.items(state="dead") == []
    assert registry.get_sample_value("capstan_notify_sent_total", {"destination": "slack"}) == 30
    assert (
        registry.get_sample_value(
            "capstan_notify_retried_total", {"destination": "slack", "reason": "rate_limited"}
        )
        or 0
    ) > 0


async def test_a_combined_storm_names_every_notice_in_fewer_messages(slack: Slack, outbox: Outbox) -> None:
    registry = CollectorRegistry()
    sink = SlackWebhookSink("slack", slack.webhook_url, timeout=5)
    drainer = _drainer(outbox, {"slack": sink}, registry, coalesce=True)
    for i in range(60):
        notice = Notice(title=f"restart {i}", summary=f"pod-{i}", meta={"kind": "restart"})
        drainer.enqueue("slack", notice, f"r-{i}")
    slack.receiver.arm_429(1, retry_after=1)
    await _drain_until_empty(drainer, outbox)
    messages = slack.receiver.snapshot()["messages"]
    text = "\n".join(json.dumps(m["blocks"]) for m in messages)
    assert all(f'pod-{i}"' in text for i in range(60))  # every notice's brief reached Slack
    assert len(messages) < 60 and slack.receiver.snapshot()["count_429"] == 1
    assert registry.get_sample_value("capstan_notify_sent_total", {"destination": "slack"}) == 60
    assert (registry.get_sample_value("capstan_notify_combined_total", {"destination": "slack"}) or 0) > 0
    assert outbox.items(state="pending") == [] and outbox.items(state="dead") == []


async def test_slack_errors_are_kept_then_dead_with_slacks_string(slack: Slack, outbox: Outbox) -> None:
    registry = CollectorRegistry()
    bad = SlackBotSink("bot", slack.token, "no-such-channel", base_url=slack.api_url, timeout=5)
    drainer = _drainer(outbox, {"bot": bad}, registry)
    drainer.enqueue("bot", Notice(title="t", summary="s"), "only")
    await _drain_until_empty(drainer, outbox)
    [item] = outbox.items()
    assert (item.state, item.last_error, item.attempts) == ("dead", "slack: channel_not_found", 5)
    assert registry.get_sample_value("capstan_notify_dead_total", {"destination": "bot"}) == 1


async def test_a_new_drainer_delivers_what_the_old_one_left(slack: Slack, outbox: Outbox) -> None:
    sink = SlackWebhookSink("slack", slack.webhook_url, timeout=5)
    first = _drainer(outbox, {"slack": sink}, CollectorRegistry())
    for i in range(6):
        first.enqueue("slack", Notice(title=f"m{i}", summary="s"), f"k{i}")
    slack.receiver.arm_429(1, retry_after=1)
    await first.drain_once()  # 429 on the first: all six go back as pending
    assert len(outbox.items(state="pending")) == 6
    second = _drainer(outbox, {"slack": sink}, CollectorRegistry())  # "Capstan restarted"
    await _drain_until_empty(second, outbox)
    assert [m["text"] for m in slack.receiver.snapshot()["messages"]] == [f"m{i}: s" for i in range(6)]


async def test_reopened_store_keeps_queued_messages(slack: Slack, tmp_path: Path) -> None:
    store_mod = pytest.importorskip("capstan.store")
    path = str(tmp_path / "restart.db")
    before = store_mod.open_store(path)
    sink = SlackWebhookSink("slack", slack.webhook_url, timeout=5)
    first = _drainer(before.outbox, {"slack": sink}, CollectorRegistry())
    for i in range(4):
        first.enqueue("slack", Notice(title=f"q{i}", summary="s"), f"q{i}")
    del first, before  # the process that queued them is gone
    after = store_mod.open_store(path)
    await _drain_until_empty(_drainer(after.outbox, {"slack": sink}, CollectorRegistry()), after.outbox)
    assert [m["text"] for m in slack.receiver.snapshot()["messages"]] == [f"q{i}: s" for i in range(4)]
