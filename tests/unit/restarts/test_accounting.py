"""Receiver-side accounting of restarts: individually, in digests, missing, duplicated; pod-level patterns."""

from __future__ import annotations

import pytest

from capstan.restarts import AIRWALLEX_PATTERN, ChatMessage, account

pytestmark = pytest.mark.unit


def test_counts_individual_digest_missing_and_duplicates() -> None:
    injected = [
        ("ns", "a-1", "app", 1),
        ("ns", "a-1", "app", 2),
        ("ns", "a-1", "app", 3),
        ("ns", "b", "init", 1),
    ]
    messages = [
        ChatMessage("Container restarted\nns/a-1 · app restart #1 — restarted, OOMKilled", received_at=10.0),
        ChatMessage("Restart digest\nns/a-1 · app restart #2–#3\nns/x · app restart #1", digest=True),
        ChatMessage("again ns/a-1 · app restart #1"),
    ]
    result = account(injected, messages)
    assert (result.individually, result.in_digest, result.duplicates) == (1, 2, 1)
    assert result.missing == [("ns", "b", "init", 1)]
    assert result.unexpected == [("ns", "x", "app", 1)]
    assert result.first_seen == {("ns", "a-1", "app", 1): 10.0}
    assert result.ratio == pytest.approx(0.75)


def test_pod_level_pattern_for_other_collectors() -> None:
    injected = [("default", "web", "app", 1), ("default", "web", "sidecar", 1), ("default", "db", "app", 1)]
    messages = [
        ChatMessage("*Pod restarted!*\n*cluster: `c`, pod: `web`, namespace: `default`*"),
        ChatMessage("*Pod restarted!*\n*cluster: `c`, pod: `db`, namespace: `default`*"),
    ]
    result = account(injected, messages, AIRWALLEX_PATTERN)
    assert result.accounted == 2 and len(result.missing) == 1 and result.missing[0][1] == "web"
