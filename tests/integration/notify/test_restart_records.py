"""Restarts in the SQLite store: records per restart number, last-seen counts, restarts while Capstan was down."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.restarts import detect_restarts, detect_while_down, last_seen, restart_batch
from tests.integration.notify.conftest import Slack
from tests.unit.restarts.podkit import pod, status

pytestmark = pytest.mark.integration


def test_records_counts_and_restarts_while_down(tmp_path: Path) -> None:
    store_mod = pytest.importorskip("capstan.store")
    path = str(tmp_path / "capstan.db")
    store = store_mod.open_store(path)
    old = pod(containers=[status("app", 3), status("proxy", 0)])
    new = pod(containers=[status("app", 5, reason="OOMKilled", exit_code=137), status("proxy", 0)])
    restarts = detect_restarts(old, new)
    batch = restart_batch(new, restarts, observed_at=1000.0)
    store.history.write(batch)
    assert store.history.write(batch).inserted.get("restarts", 0) == 0  # idempotent
    rows = sorted(store.history.restarts(namespace="default"), key=lambda r: r.restart_count)
    assert [(r.container, r.restart_count, r.reason, r.exit_code) for r in rows] == [
        ("app", 4, "unobserved", None),
        ("app", 5, "OOMKilled", 137),
    ]
    assert rows[1].reported_state["termination"]["finished_at"] == "2026-11-29T10:05:00Z"
    store.close()

    # Capstan stops; meanwhile app restarts twice more and proxy once; then Capstan starts and lists the pod
    reopened = store_mod.open_store(path)
    listed = pod(containers=[status("app", 7, reason="Error", exit_code=1), status("proxy", 1)])
    found = detect_while_down(listed, last_seen(reopened.restart_records.restart_counts()))
    assert [(r.container, r.previous_count, r.restart_count, r.while_down) for r in found] == [
        ("app", 5, 7, True),
        ("proxy", 0, 1, True),
    ]
    reopened.close()


async def test_digest_lost_in_a_crash_is_recovered_from_the_store(tmp_path: Path, slack: Slack) -> None:
    import random

    from prometheus_client import CollectorRegistry

    from capstan.config import load_model
    from capstan.notify import DeliveryPolicy, Drainer, NotifyMetrics, SlackWebhookSink
    from capstan.restarts import (
        RestartNotifier,
        RestartsConfig,
        RestartSnapshot,
        account,
        messages_from_slack_receiver,
        recovered_digest_notices,
        unsent_digested,
    )

    store_mod = pytest.importorskip("capstan.store")
    path = str(tmp_path / "crash.db")
    store = store_mod.open_store(path)
    config = load_model(
        RestartsConfig,
        {
            "mute_seconds": 600,
            "sinks": [{"type": "slack_webhook", "name": "slack", "url": slack.webhook_url}],
        },
        "test",
    )

    def drainer_for(outbox: object) -> Drainer:
        return Drainer(
            outbox,  # type: ignore[arg-type]
            {"slack": SlackWebhookSink("slack", slack.webhook_url, timeout=5)},
            clock=lambda: 1000.0,
            rng=random.Random(1),
            policy=DeliveryPolicy(rate_per_second=100, burst=10),
            metrics=NotifyMetrics(CollectorRegistry()),
        )

    first = drainer_for(store.outbox)
    notifier = RestartNotifier(config, first.enqueue)
    injected = []
    for name, before, after in (("web-7d9f8-a", 0, 1), ("web-7d9f8-b", 0, 1), ("web-7d9f8-a", 1, 2)):
        old = pod(name=name, uid=f"uid-{name}", containers=[status("app", before)])
        new = pod(
            name=name, uid=f"uid-{name}", containers=[status("app", after, reason="Error", exit_code=1)]
        )
        [restart] = detect_restarts(old, new)
        outcome = notifier.on_restart(RestartSnapshot(restart=restart, pod=new, observed_at=1000.0), 1000.0)
        store.restart_records.write(restart_batch(new, [restart], 1000.0, notify={"app": outcome.action}))
        injected.append(("default", name, "app", after))
    await first.drain_once()
    store.close()  # Capstan is killed inside the mute window: the digest of two restarts was never enqueued

    reopened = store_mod.open_store(path)
    lost = unsent_digested(
        reopened.history.restarts(namespace="default"), [i.payload for i in reopened.outbox.items()]
    )
    assert [(r.pod, r.restart_count) for r in lost] == [("web-7d9f8-a", 2), ("web-7d9f8-b", 1)]
    second = drainer_for(reopened.outbox)
    for index, notice in enumerate(recovered_digest_notices(lost, "dev", since=1000.0, until=1001.0)):
        second.enqueue("slack", notice, f"recovered/{index}")
    await second.drain_once()
    result = account(injected, messages_from_slack_receiver(slack.receiver.snapshot()))
    assert (result.individually, result.in_digest, result.missing) == (1, 2, [])
    assert (
        unsent_digested(
            reopened.history.restarts(namespace="default"), [i.payload for i in reopened.outbox.items()]
        )
        == []
    )
    reopened.close()
