"""A restart report from the pure core to the local Slack receiver through the store's outbox: the report with
its log file, the digest threaded under it, restarts accounted for by pod, container and restart number."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from capstan.config import load_model
from capstan.notify import DeliveryPolicy, Drainer, NotifyMetrics, SlackBotSink
from capstan.restarts import (
    RestartNotifier,
    RestartsConfig,
    RestartSnapshot,
    account,
    detect_restarts,
    messages_from_slack_receiver,
)
from tests.integration.notify.conftest import Slack
from tests.unit.restarts.podkit import node, pod, status

pytestmark = pytest.mark.integration


def _snap(name: str, before: int, after: int, log: str | None) -> RestartSnapshot:
    res = {"limits": {"memory": "1Gi"}}
    old = pod(name=name, uid=f"uid-{name}", containers=[status("app", before)], resources=res)
    new = pod(
        name=name,
        uid=f"uid-{name}",
        containers=[status("app", after, reason="OOMKilled", exit_code=137)],
        resources=res,
        annotations={"capstan.io/restart-channel": "#ops"},
    )
    [restart] = detect_restarts(old, new)
    return RestartSnapshot(restart=restart, pod=new, observed_at=time.time(), node=node(), previous_log=log)


async def test_report_digest_and_log_reach_slack_through_the_store(slack: Slack, tmp_path: Path) -> None:
    store_mod = pytest.importorskip("capstan.store")
    store = store_mod.open_store(str(tmp_path / "capstan.db"))
    config = load_model(
        RestartsConfig,
        {
            "cluster_name": "dev",
            "mute_seconds": 60,
            "sinks": [
                {
                    "type": "slack_bot",
                    "name": "slack",
                    "token": slack.token,
                    "channel": "#alerts",
                    "base_url": slack.api_url,
                }
            ],
        },
        "test",
    )
    sink = SlackBotSink("slack", slack.token, "#alerts", base_url=slack.api_url, timeout=5)
    clock = [1000.0]
    drainer = Drainer(
        store.outbox,
        {"slack": sink},
        clock=lambda: clock[0],
        rng=random.Random(1),
        policy=DeliveryPolicy(rate_per_second=100, burst=10),
        metrics=NotifyMetrics(CollectorRegistry()),
    )
    notifier = RestartNotifier(config, drainer.enqueue)
    log = "starting\n" + "token=supersecretvalue\n" + "\n".join(f"step {i}" for i in range(200))
    assert notifier.on_restart(_snap("web-7d9f8-aaaaa", 0, 1, log), 1000.0).action == "reported"
    assert notifier.on_restart(_snap("web-7d9f8-bbbbb", 0, 2, None), 1001.0).action == "digested"
    assert notifier.on_restart(_snap("web-7d9f8-aaaaa", 1, 2, log), 1002.0).action == "digested"
    await drainer.drain_once()
    clock[0] = 1061.0
    assert notifier.tick(1061.0) == 1
    await drainer.drain_once()

    messages = slack.receiver.snapshot()["messages"]
    report, upload, digest = messages
    assert report["channel"] == "C0OPS"  # per-workload channel annotation
    assert "default/web-7d9f8-aaaaa · app restart #1" in report["text"]
    assert upload["thread_ts"] == report["ts"] and "supersecretvalue" not in upload["files"][0]["content"]
    assert upload["files"][0]["content"].endswith("step 199")
    assert digest["thread_ts"] == report["ts"]
    assert [i.state for i in store.outbox.items()] == ["sent", "sent"]

    injected = [
        ("default", "web-7d9f8-aaaaa", "app", 1),
        ("default", "web-7d9f8-bbbbb", "app", 1),
        ("default", "web-7d9f8-bbbbb", "app", 2),
        ("default", "web-7d9f8-aaaaa", "app", 2),
        ("default", "web-7d9f8-ccccc", "app", 1),  # never happened: must show as missing
    ]
    result = account(injected, messages_from_slack_receiver(slack.receiver.snapshot()))
    assert result.individually == 1 and result.in_digest == 3
    assert result.missing == [("default", "web-7d9f8-ccccc", "app", 1)]
