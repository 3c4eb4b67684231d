"""Configuration refuses bad settings by name; the notifier enqueues reports and digests once per sink."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capstan.config import load_model
from capstan.errors import UserError
from capstan.notify import Notice
from capstan.restarts import (
    RestartNotifier,
    RestartsConfig,
    RestartSnapshot,
    detect_restarts,
    load_restarts_config,
)
from tests.unit.restarts.podkit import pod, status

pytestmark = pytest.mark.unit

SINKS = [
    {"type": "slack_webhook", "name": "slack", "url": "https://hooks.slack.com/services/T1/B1/abcdefgh"},
    {"type": "webhook", "name": "audit", "url": "http://127.0.0.1:9/hook"},
]


@pytest.mark.parametrize(
    ("settings", "where"),
    [
        (
            {"filters": {"exclude_pods": ["ok", "(unclosed"]}},
            "filters.exclude_pods: Value error, pattern[1] '(unclosed'",
        ),
        ({"filters": {"label_selector": "app in (a,"}}, "filters.label_selector: Value error, unbalanced"),
        ({"report": {"extra_redact_patterns": ["[z-a]"]}}, "report.extra_redact_patterns"),
        ({"mute_seconds": -1}, "mute_seconds"),
        ({"sinks": []}, "sinks: List should have at least 1 item"),
        ({"sinks": [SINKS[0], SINKS[0]]}, "sink names must be unique, repeated: slack"),
        ({"sinks": [{**SINKS[0], "url": "https://hooks.slack.com/x"}]}, "sinks.0.slack_webhook.url"),
        ({"mute_secs": 5}, "mute_secs: Extra inputs are not permitted"),
    ],
)
def test_bad_settings_are_named(settings: dict[str, object], where: str) -> None:
    with pytest.raises(UserError) as err:
        load_model(RestartsConfig, {"sinks": SINKS, **settings}, "restarts.yaml")
    assert where in str(err.value) and "\n" not in str(err.value)


def test_loads_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "restarts.yaml"
    path.write_text(
        "cluster_name: dev\nsinks:\n  - {type: webhook, name: audit, url: 'http://127.0.0.1:9/hook'}\n"
        "filters:\n  exclude_namespaces: [kube-system]\n  label_selector: 'app in (web)'\n"
    )
    config = load_restarts_config(path)
    assert config.cluster_name == "dev" and config.filters.build().selector[0].key == "app"
    path.write_text("sinks: [\n")
    with pytest.raises(UserError, match=r"restarts.yaml:.*line"):
        load_restarts_config(path)


def _snapshot(name: str, before: int, after: int, **pod_kw: Any) -> RestartSnapshot:
    old = pod(name=name, uid=f"uid-{name}", containers=[status("app", before)], **pod_kw)
    new = pod(
        name=name, uid=f"uid-{name}", containers=[status("app", after, reason="Error", exit_code=1)], **pod_kw
    )
    [restart] = detect_restarts(old, new)
    return RestartSnapshot(restart=restart, pod=new, observed_at=0.0)


def test_notifier_reports_digests_filters_and_dedupes() -> None:
    queued: list[tuple[str, Notice, str]] = []
    keys: set[str] = set()

    def enqueue(dest: str, notice: Notice, key: str) -> bool:
        if key in keys:
            return False
        keys.add(key)
        queued.append((dest, notice, key))
        return True

    config = load_model(
        RestartsConfig,
        {"sinks": SINKS, "mute_seconds": 60, "filters": {"exclude_namespaces": ["kube-system"]}},
        "x",
    )
    notifier = RestartNotifier(config, enqueue)
    first = notifier.on_restart(_snapshot("web-1", 0, 1), now=0)
    assert (first.action, first.enqueued) == ("reported", 2)
    assert notifier.on_restart(_snapshot("web-1", 0, 1), now=1).action == "digested"
    assert notifier.on_restart(_snapshot("web-2", 0, 1), now=2).action == "digested"
    assert notifier.on_restart(_snapshot("dns", 0, 1, namespace="kube-system"), now=3).action == "filtered"
    assert notifier.tick(30) == 0
    assert notifier.tick(60) == 2
    digest = queued[-1][1]
    assert digest.meta["kind"] == "digest" and len(digest.meta["restarts"]) == 2
    assert [d for d, _, _ in queued] == ["slack", "audit", "slack", "audit"]
    assert len(keys) == 4


def test_decide_before_evidence_then_report_only_what_is_reported() -> None:
    queued: list[Notice] = []
    config = load_model(RestartsConfig, {"sinks": SINKS[:1], "mute_seconds": 60}, "x")

    def enqueue(dest: str, notice: Notice, key: str) -> bool:
        queued.append(notice)
        return True

    notifier = RestartNotifier(config, enqueue)
    first, second = _snapshot("web-1", 0, 1), _snapshot("web-1", 1, 2)
    assert notifier.decide(first.pod, first.restart, {}, now=0) == "reported"
    assert queued == []  # deciding enqueues nothing; the caller gathers evidence, then reports
    assert notifier.report(first, now=0).enqueued == 1 and len(queued) == 1
    assert notifier.decide(second.pod, second.restart, {}, now=5) == "digested"  # muted: no evidence needed
    assert notifier.tick(60) == 1 and queued[-1].meta["kind"] == "digest"
