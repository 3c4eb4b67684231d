"""What the local Slack receiver keeps of a message and what it refuses (pure code; the receiver itself is
driven over loopback in tests/integration/notify/test_receiver.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capstan.notify import blocks_problem
from capstan.notify._receiver_page import render_page
from capstan.notify._slack_message import slack_message_problem, slack_message_texts, stored_slack_message

pytestmark = pytest.mark.unit


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


# What the airwallex collector posts (slack-go's WebhookMessage): attachments only, blocks null inside.
AIRWALLEX = {
    "username": "k8s-pod-restart-info-collector",
    "channel": "restart-info-nonprod",
    "icon_emoji": ":kubernetes:",
    "attachments": [
        {
            "color": "#4599DF",
            "pretext": "*Pod restarted!*\n*cluster: `bench`, pod: `web-1`, namespace: `storm`*",
            "text": "```NAME  READY```\n• Reason: `OOMKilled (ExitCode 137)`",
            "footer": "bench, web-1, storm",
            "mrkdwn_in": ["text", "pretext"],
            "ts": 1700000000,
            "blocks": None,
        }
    ],
}

EVERY_BLOCK: list[dict[str, Any]] = [
    {"type": "header", "text": {"type": "plain_text", "text": "header text"}},
    {
        "type": "section",
        "text": {"type": "mrkdwn", "text": "section text"},
        "fields": [{"type": "mrkdwn", "text": "field text"}],
        "accessory": {"type": "image", "image_url": "https://example.com/a.png", "alt_text": "accessory"},
    },
    {"type": "divider"},
    {
        "type": "context",
        "elements": [
            {"type": "mrkdwn", "text": "context text"},
            {"type": "image", "image_url": "https://example.com/i.png", "alt_text": "context image"},
        ],
    },
    {"type": "image", "image_url": "https://example.com/b.png", "alt_text": "image alt"},
    {
        "type": "rich_text",
        "elements": [
            {
                "type": "rich_text_section",
                "elements": [
                    {"type": "text", "text": "rich text"},
                    {"type": "link", "url": "https://example.com", "text": "rich link"},
                    {"type": "emoji", "name": "fire"},
                ],
            },
            {
                "type": "rich_text_list",
                "style": "bullet",
                "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": "item"}]}],
            },
        ],
    },
    {"type": "markdown", "text": "**markdown text**"},
    {
        "type": "actions",
        "elements": [{"type": "button", "text": {"type": "plain_text", "text": "Ack"}, "action_id": "ack"}],
    },
    {"type": "context_actions", "elements": [{"type": "feedback_buttons", "action_id": "fb"}]},
    {"type": "file", "external_id": "ABCD", "source": "remote"},
    {
        "type": "video",
        "alt_text": "video alt",
        "title": {"type": "plain_text", "text": "video title"},
        "thumbnail_url": "https://example.com/t.png",
        "video_url": "https://example.com/v",
    },
    {
        "type": "input",
        "label": {"type": "plain_text", "text": "input label"},
        "element": {"type": "plain_text_input", "action_id": "in"},
    },
    {
        "type": "table",
        "rows": [[{"type": "raw_text", "text": "cell a"}, {"type": "raw_text", "text": "cell b"}]],
    },
]


def test_every_documented_block_type_is_accepted_and_read() -> None:
    assert blocks_problem(EVERY_BLOCK) is None
    texts = slack_message_texts({"blocks": EVERY_BLOCK})
    for expected in (
        "header text", "section text", "field text", "context text", "image alt", "rich text", "rich link",
        ":fire:", "item", "**markdown text**", "Ack", "video title", "input label", "cell a", "cell b",
    ):  # fmt: skip
        assert expected in texts


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        ({}, "no_text"),
        ({"text": "  "}, "no_text"),
        ({"attachments": []}, "no_text"),
        ({"text": ["a"]}, "invalid_array_arg"),
        ({"text": {"a": 1}}, "invalid_arguments"),
        ({"attachments": [{"text": "a"}] * 101}, "too_many_attachments"),
        ({"attachments": "x"}, "invalid_arguments"),
        ({"attachments": ["x"]}, "invalid_arguments"),
        ({"attachments": [{"text": {"nested": 1}}]}, "invalid_arguments"),
        ({"attachments": [{"fields": "x"}]}, "invalid_arguments"),
        ({"attachments": [{"blocks": [{"type": "bogus"}]}]}, "invalid_blocks"),
        ({"attachments": [{"blocks": {"type": "divider"}}]}, "invalid_blocks_format"),
        ({"blocks": [{"type": "image", "image_url": "https://e/x.png"}]}, "invalid_blocks"),
        ({"blocks": [{"type": "actions", "elements": [{"type": "button"}] * 26}]}, "invalid_blocks"),
        ({"blocks": [{"type": "rich_text"}]}, "invalid_blocks"),
        ({"blocks": [{"type": "rich_text", "elements": [{"type": "text", "text": "x"}]}]}, "invalid_blocks"),
        ({"blocks": [{"type": "markdown", "text": "m" * 12001}]}, "invalid_blocks"),
        ({"blocks": [{"type": "markdown", "text": "m" * 6001}] * 2}, "invalid_blocks"),
        ({"blocks": [{**_section("a"), "block_id": "b" * 256}]}, "invalid_blocks"),
        ({"blocks": [EVERY_BLOCK[-1], EVERY_BLOCK[-1]]}, "invalid_blocks"),
        (
            {"blocks": [{"type": "table", "rows": [[{"type": "raw_text", "text": "a"}] * 21]}]},
            "invalid_blocks",
        ),
        (
            {"blocks": [{"type": "video", "alt_text": "a", "thumbnail_url": "u", "video_url": "u"}]},
            "invalid_blocks",
        ),
        ({"blocks": [{"type": "input", "label": {"type": "plain_text", "text": "l"}}]}, "invalid_blocks"),
        ({"blocks": [{"type": "file", "external_id": "x"}]}, "invalid_blocks"),
        ({"blocks": [{"type": "context_actions", "elements": [{"type": "button"}]}]}, "invalid_blocks"),
        ({"markdown_text": "**a**", "text": "a"}, "markdown_text_conflict"),
        ({"markdown_text": "**a**", "blocks": [_section("a")]}, "markdown_text_conflict"),
        ({"markdown_text": "m" * 12001}, "msg_too_long"),
        ({"markdown_text": 5}, "invalid_arguments"),
    ],
)
def test_what_slack_refuses(payload: dict[str, Any], error: str) -> None:
    refusal = slack_message_problem(payload)
    assert refusal is not None and refusal.error == error, refusal


def test_webhooks_answer_invalid_payload_where_the_web_api_names_the_argument() -> None:
    refusal = slack_message_problem({"attachments": "x"})
    assert refusal is not None and (refusal.error, refusal.for_webhook) == (
        "invalid_arguments",
        "invalid_payload",
    )
    refusal = slack_message_problem({"attachments": [{"blocks": [{"type": "bogus"}]}]})
    assert refusal is not None and refusal.for_webhook == "invalid_blocks"
    assert refusal.detail == "attachments[0].blocks[0]: unknown block type 'bogus'"


@pytest.mark.parametrize(
    "payload",
    [
        AIRWALLEX,
        {"text": "x"},
        {"blocks": EVERY_BLOCK},
        {"markdown_text": "**only markdown**"},
        {"attachments": [{"text": "a"}] * 100},
        {"text": 42},
    ],
)
def test_what_slack_accepts(payload: dict[str, Any]) -> None:
    assert slack_message_problem(payload) is None


def test_stored_message_keeps_every_part_slack_keeps() -> None:
    stored = stored_slack_message({**AIRWALLEX, "thread_ts": 1700000000.5, "unknown_key": "dropped"})
    assert stored["text"] is None and stored["blocks"] is None
    [attachment] = stored["attachments"]
    assert attachment == {k: v for k, v in AIRWALLEX["attachments"][0].items() if v is not None}  # type: ignore[attr-defined]
    assert stored["username"] == "k8s-pod-restart-info-collector" and stored["icon_emoji"] == ":kubernetes:"
    assert stored["requested_channel"] == "restart-info-nonprod" and stored["thread_ts"] == "1700000000.5"
    assert "unknown_key" not in stored
    full = {
        "fallback": "fb", "color": "good", "pretext": "pre", "author_name": "au", "author_link": "https://a",
        "author_icon": "https://i", "title": "ti", "title_link": "https://t", "text": "tx",
        "fields": [{"title": "f", "value": "v", "short": True}], "image_url": "https://img", "thumb_url": "https://th",
        "footer": "fo", "footer_icon": "https://fi", "ts": 1, "mrkdwn_in": ["text"], "blocks": [_section("in")],
    }  # fmt: skip
    assert stored_slack_message({"attachments": [full]})["attachments"] == [full]


def test_text_over_40000_characters_is_truncated_as_slack_does() -> None:
    stored = stored_slack_message({"text": "a" * 40_001})
    assert stored["truncated"] and len(stored["text"]) == 40_000
    assert not stored_slack_message({"text": "a" * 40_000})["truncated"]


def test_readable_text_of_an_attachments_only_message_in_display_order() -> None:
    message = {
        "attachments": [
            {
                "author_name": "author", "pretext": "pretext", "title": "title", "text": "body",
                "fields": [{"title": "field", "value": "value"}], "blocks": [_section("inner")],
                "footer": "footer", "fallback": "fallback",
            }
        ],
        "files": [{"id": "F1", "name": "web-0.log", "title": "previous log"}],
    }  # fmt: skip
    assert slack_message_texts(message) == [
        "author", "pretext", "title", "body", "field", "value", "inner", "footer", "fallback", "previous log",
    ]  # fmt: skip
    assert "pod: `web-1`, namespace: `storm`" in "\n".join(
        slack_message_texts(stored_slack_message(AIRWALLEX))
    )


def test_deeply_nested_payloads_neither_crash_nor_recurse_without_bound() -> None:
    nested: Any = {"type": "text", "text": "deep"}
    for _ in range(5000):
        nested = {"elements": [nested]}
    assert slack_message_texts({"blocks": [nested]}) == []
    assert slack_message_problem({"blocks": [nested]}) is not None


def test_page_renders_every_part_escaped() -> None:
    stored = stored_slack_message(
        {
            "attachments": [
                {
                    "pretext": "<b>pre</b>", "text": "a & b", "footer": "foot", "color": "javascript:x",
                    "title": "T", "title_link": "javascript:alert(1)", "fields": [{"title": "k", "value": "<v>"}],
                    "image_url": "https://example.com/i.png",
                }
            ],
            "username": "<bot>",
        }
    )  # fmt: skip
    snapshot = {
        "messages": [
            {**stored, "seq": 1, "via": "webhook", "channel": "C0ALERTS", "ts": "1.000001", "files": []},
        ],
        "rejected": [],
        "count_429": 0,
    }
    page = render_page(snapshot)
    for expected in (
        "&lt;b&gt;pre&lt;/b&gt;",
        "a &amp; b",
        "foot",
        "&lt;v&gt;",
        "&lt;bot&gt;",
        "https://example.com/i.png",
    ):
        assert expected in page
    assert "<b>pre</b>" not in page and "href='javascript" not in page  # only http(s) URLs become links
    assert "border-left-color:#ddd" in page  # a colour that is not one is not styled


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30,
)
_keys = st.sampled_from(
    ["text", "blocks", "attachments", "markdown_text", "thread_ts", "username", "channel"]
)


@settings(max_examples=300, deadline=None)
@given(payload=st.dictionaries(_keys | st.text(max_size=8), _json, max_size=6))
def test_any_json_payload_is_judged_without_raising(payload: dict[str, Any]) -> None:
    refusal = slack_message_problem(payload)
    if refusal is None:
        stored = stored_slack_message(payload)
        json.dumps(slack_message_texts(stored))
    else:
        assert refusal.error and refusal.detail
