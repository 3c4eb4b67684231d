"""Receiver-side accounting of restarts: individually, in digests, missing, duplicated; pod-level patterns."""

from __future__ import annotations

import pytest

from capstan.restarts import AIRWALLEX_PATTERN, ChatMessage, account, messages_from_slack_receiver

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


def test_an_attachments_only_collector_is_read_from_the_receiver_snapshot() -> None:
    """The airwallex collector posts attachments only (pretext, text, footer): its report is found there."""
    snapshot = {
        "messages": [
            {
                "text": None,
                "blocks": None,
                "attachments": [
                    {
                        "pretext": "*Pod restarted!*\n*cluster: `bench`, pod: `web`, namespace: `default`*",
                        "text": "• Reason: `OOMKilled (ExitCode 137)`",
                        "footer": "bench, web, default",
                    }
                ],
                "received_at": 5.0,
            },
            {"text": None, "blocks": None, "attachments": None, "files": [{"id": "F1", "name": ""}]},
        ]
    }
    messages = messages_from_slack_receiver(snapshot)
    assert len(messages) == 1 and messages[0].received_at == 5.0
    result = account([("default", "web", "app", 1)], messages, AIRWALLEX_PATTERN)
    assert (result.accounted, result.first_seen) == (1, {("default", "web", "app", 1): 5.0})


def test_pod_level_counts_a_message_once_per_pod_it_names() -> None:
    injected = [("default", "web", "app", 1), ("default", "web", "app", 2), ("default", "db", "app", 1)]
    one_report = ChatMessage(
        "*cluster: `c`, pod: `web`, namespace: `default`*\nfallback: pod: `web`, namespace: `default`\n"
        "see also pod: `db`, namespace: `default`"
    )
    result = account(injected, [one_report], AIRWALLEX_PATTERN)
    assert result.accounted == 2 and result.duplicates == 0
    assert result.missing == [("default", "web", "app", 2)]


def test_capstan_tokens_inside_attachments_count_too() -> None:
    snapshot = {
        "messages": [{"attachments": [{"title": "Restart digest", "text": "ns/a · app restart #1–#2"}]}]
    }
    messages = messages_from_slack_receiver(snapshot)
    result = account([("ns", "a", "app", 1), ("ns", "a", "app", 2)], messages)
    assert result.accounted == 2
