"""What a Slack message is made of, as the local receiver keeps it: the pure half of `capstan dev slack`.

Three things live here so that the receiver, its web page and the storm harness's accounting share one
definition:

- :func:`slack_message_problem`: why Slack would refuse a message payload (incoming webhook or ``chat.postMessage``),
  as Slack's own error string plus a detail naming the part (``attachments[3].blocks[0]: …``);
- :func:`stored_slack_message`: the parts Slack keeps of an accepted payload (top-level text, blocks, legacy
  attachments with every documented field, ``markdown_text``, ``thread_ts``, ``username``, ``icon_emoji``,
  ``icon_url``, the requested ``channel`` and the formatting flags), text truncated where Slack truncates;
- :func:`slack_message_text`: every human-readable string of a stored message in the order Slack shows them (text,
  blocks, then each attachment's author, pretext, title, text, fields, blocks, footer and fallback, then files'
  titles), which the accounting matches its patterns against and the page renders.

Limits: at most 100 attachments (``too_many_attachments``); blocks, also inside attachments, as in
:mod:`capstan.notify._blockkit`; ``markdown_text`` at most 12,000 characters and never together with ``text``
or ``blocks`` (``markdown_text_conflict``); neither text, blocks, attachments nor markdown text is ``no_text``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from capstan.notify._blockkit import MAX_MARKDOWN_TOTAL, MAX_MESSAGE_TEXT, blocks_problem

MAX_ATTACHMENTS: Final = 100

ATTACHMENT_FIELDS: Final = (
    "fallback",
    "color",
    "pretext",
    "author_name",
    "author_link",
    "author_icon",
    "author_subname",
    "title",
    "title_link",
    "text",
    "fields",
    "image_url",
    "thumb_url",
    "footer",
    "footer_icon",
    "ts",
    "mrkdwn_in",
    "blocks",
    "actions",
    "callback_id",
    "service_name",
    "service_icon",
    "from_url",
    "original_url",
    "id",
)
_STRING_ATTACHMENT_FIELDS: Final = frozenset(ATTACHMENT_FIELDS) - {
    "fields",
    "blocks",
    "actions",
    "mrkdwn_in",
    "ts",
    "id",
}
MESSAGE_OPTIONS: Final = (
    "username",
    "icon_emoji",
    "icon_url",
    "mrkdwn",
    "parse",
    "link_names",
    "reply_broadcast",
    "unfurl_links",
    "unfurl_media",
    "metadata",
)


@dataclass(frozen=True)
class SlackRefusal:
    """Why Slack refuses a payload: its Web API error string, the incoming webhook's (same unless the webhook
    has a more general one) and a detail naming the part."""

    error: str
    detail: str
    webhook_error: str | None = None

    @property
    def for_webhook(self) -> str:
        return self.webhook_error or self.error


def decode_json_argument(value: Any) -> tuple[Any, bool]:
    """Form-encoded Web API calls send ``blocks``/``attachments``/``metadata`` as JSON strings: ``(value,
    ok)`` with the string decoded (``ok`` is False when it is not JSON)."""
    if not isinstance(value, str):
        return value, True
    try:
        return json.loads(value), True
    except ValueError:
        return value, False


def _nonempty_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _attachments_problem(attachments: Any) -> SlackRefusal | None:
    if not isinstance(attachments, list):
        return SlackRefusal("invalid_arguments", "attachments must be an array", "invalid_payload")
    if len(attachments) > MAX_ATTACHMENTS:
        return SlackRefusal(
            "too_many_attachments",
            f"a maximum of {MAX_ATTACHMENTS} attachments are allowed on a message, got {len(attachments)}",
        )
    for index, item in enumerate(attachments):
        where = f"attachments[{index}]"
        if not isinstance(item, dict):
            return SlackRefusal("invalid_arguments", f"{where} is not an object", "invalid_payload")
        for name in _STRING_ATTACHMENT_FIELDS:
            value = item.get(name)
            if value is not None and not isinstance(value, str | int | float):
                return SlackRefusal(
                    "invalid_arguments", f"{where}.{name} must be a string", "invalid_payload"
                )
        fields = item.get("fields")
        if fields is not None and (
            not isinstance(fields, list) or not all(isinstance(f, dict) for f in fields)
        ):
            return SlackRefusal(
                "invalid_arguments", f"{where}.fields must be an array of objects", "invalid_payload"
            )
        blocks = item.get("blocks")
        if blocks is not None and (refused := blocks_problem(blocks)):
            return SlackRefusal(refused[0], f"{where}.{refused[1]}")
    return None


def slack_message_problem(payload: Mapping[str, Any]) -> SlackRefusal | None:
    """Why Slack would refuse this message payload (``blocks``/``attachments`` already decoded), else None."""
    text, blocks = payload.get("text"), payload.get("blocks")
    attachments, markdown = payload.get("attachments"), payload.get("markdown_text")
    if text is not None and not isinstance(text, str | int | float):
        error = "invalid_array_arg" if isinstance(text, list) else "invalid_arguments"
        return SlackRefusal(error, "text must be a string", "invalid_payload")
    if blocks is not None and (refused := blocks_problem(blocks)):
        return SlackRefusal(*refused)
    if attachments is not None and (problem := _attachments_problem(attachments)):
        return problem
    if markdown is not None:
        if not isinstance(markdown, str):
            return SlackRefusal("invalid_arguments", "markdown_text must be a string", "invalid_payload")
        if text is not None or blocks:
            return SlackRefusal("markdown_text_conflict", "markdown_text cannot be used with text or blocks")
        if len(markdown) > MAX_MARKDOWN_TOTAL:
            return SlackRefusal(
                "msg_too_long", f"markdown_text must be less than {MAX_MARKDOWN_TOTAL + 1} characters"
            )
    has_text = _nonempty_text(text) or isinstance(text, int | float) or _nonempty_text(markdown)
    if not has_text and not blocks and not attachments:
        return SlackRefusal("no_text", "text, blocks, attachments or markdown_text are required")
    return None


def _truncated(text: Any) -> tuple[str | None, bool]:
    if text is None:
        return None, False
    value = text if isinstance(text, str) else str(text)
    if len(value) > MAX_MESSAGE_TEXT:
        return value[:MAX_MESSAGE_TEXT], True  # Slack truncates, it does not refuse
    return value, False


def stored_slack_message(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The parts Slack keeps of an accepted payload (``slack_message_problem`` returned None for it)."""
    text, truncated = _truncated(payload.get("text"))
    attachments = []
    for item in payload.get("attachments") or []:
        kept = {name: item[name] for name in ATTACHMENT_FIELDS if item.get(name) is not None}
        attachments.append(kept)
    thread_ts = payload.get("thread_ts")
    channel = payload.get("channel")
    stored: dict[str, Any] = {
        "text": text,
        "blocks": payload.get("blocks") or None,
        "attachments": attachments or None,
        "markdown_text": payload.get("markdown_text"),
        "thread_ts": str(thread_ts) if thread_ts not in (None, "") else None,
        "requested_channel": str(channel) if channel not in (None, "") else None,
        "truncated": truncated,
    }
    for name in MESSAGE_OPTIONS:
        if payload.get(name) is not None:
            stored[name] = payload[name]
    return stored


_MAX_DEPTH: Final = 24  # deeper than any Block Kit structure; a hostile payload cannot exhaust the stack


def _object_texts(value: Any, depth: int = 0) -> Iterator[str]:
    """Every readable string under a block or element: text objects, rich text, fields, table cells, alt texts,
    titles; ``url``/``image_url`` and identifiers are not text."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(value, str):
        if value:
            yield value
    elif isinstance(value, list):
        for item in value:
            yield from _object_texts(item, depth + 1)
    elif isinstance(value, Mapping):
        kind = value.get("type")
        if kind in ("user", "channel", "usergroup"):
            for key in ("user_id", "channel_id", "usergroup_id"):
                if isinstance(value.get(key), str):
                    yield value[key]
            return
        if kind == "emoji" and isinstance(value.get("name"), str):
            yield f":{value['name']}:"
            return
        if kind == "link":
            label = value.get("text")
            yield from _object_texts(label if label else value.get("url"), depth + 1)
            return
        for key in (
            "text",
            "title",
            "subtitle",
            "body",
            "label",
            "hint",
            "alt_text",
            "description",
            "caption",
        ):
            if key in value:
                yield from _object_texts(value[key], depth + 1)
        for key in ("fields", "elements", "rows", "cells", "cards", "blocks", "tasks", "items"):
            if key in value:
                yield from _object_texts(value[key], depth + 1)


def _attachment_texts(item: Mapping[str, Any]) -> Iterator[str]:
    for name in ("author_name", "pretext", "title", "text"):
        if item.get(name) not in (None, ""):
            yield str(item[name])
    for field in item.get("fields") or []:
        if isinstance(field, Mapping):
            for name in ("title", "value"):
                if field.get(name) not in (None, ""):
                    yield str(field[name])
    yield from _object_texts(item.get("blocks") or [])
    for name in ("footer", "fallback"):
        if item.get(name) not in (None, ""):
            yield str(item[name])


def slack_message_texts(message: Mapping[str, Any]) -> list[str]:
    """Every human-readable string of a stored message (or a raw payload), in the order Slack shows them."""
    parts: list[str] = []
    for name in ("text", "markdown_text"):
        if message.get(name) not in (None, ""):
            parts.append(str(message[name]))
    parts.extend(_object_texts(message.get("blocks") or []))
    for item in message.get("attachments") or []:
        if isinstance(item, Mapping):
            parts.extend(_attachment_texts(item))
    for shared in message.get("files") or []:
        if isinstance(shared, Mapping):
            title = shared.get("title") or shared.get("name")
            if title:
                parts.append(str(title))
    return parts


def slack_message_text(message: Mapping[str, Any]) -> str:
    """:func:`slack_message_texts` joined by newlines."""
    return "\n".join(slack_message_texts(message))
