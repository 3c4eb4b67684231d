"""Notice → each chat service's payload, within that service's size limits.

Slack gets Block Kit (limits in :mod:`capstan.notify._blockkit`, plus a total text budget below Slack's
``msg_blocks_too_long`` threshold), Microsoft Teams an Adaptive Card 1.4 in a message attachment (Teams refuses
messages above about 28 KB), Google Chat a cardsV2 card with a fallback text (threaded by ``threadKey``), Discord
one embed (title 256, description 4,096, 25 fields of 1,024, 6,000 characters in total, content 2,000), and the
generic webhook the Notice itself as JSON.
"""

from __future__ import annotations

import html
import json
from typing import Any, Final

from capstan.notify._blockkit import (
    MAX_BLOCKS,
    MAX_FIELD_TEXT,
    MAX_HEADER_TEXT,
    MAX_SECTION_FIELDS,
    MAX_SECTION_TEXT,
)
from capstan.notify._notice import Notice, Section, cut, escape_fences, tail_lines

SLACK_TOTAL_TEXT: Final = (
    11_000  # Slack answers msg_blocks_too_long at roughly 12–13k characters of block text
)
TEAMS_MAX_BYTES: Final = 27_000
GCHAT_MAX_SECTION: Final = 4_000
GCHAT_TOTAL_TEXT: Final = 16_000  # escaped text grows; Google Chat refuses messages above 32,000 bytes
DISCORD_CONTENT: Final = 2000
DISCORD_TITLE: Final = 256
DISCORD_DESCRIPTION: Final = 4096
DISCORD_FIELDS: Final = 25
DISCORD_FIELD_NAME: Final = 256
DISCORD_FIELD_VALUE: Final = 1024
DISCORD_FOOTER: Final = 2048
DISCORD_TOTAL: Final = 6000

_COLORS: Final = {"info": 0x4599DF, "warning": 0xE8A317, "critical": 0xD0312D}


def slack_escape(text: str) -> str:
    """Escape the three characters Slack's mrkdwn treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_section_text(section: Section, budget: int) -> str:
    heading = f"*{slack_escape(cut(section.heading, 200))}*\n"
    room = max(0, min(MAX_SECTION_TEXT, budget) - len(heading))
    if section.code:
        body = escape_fences(slack_escape(section.body))
        inner = tail_lines(body, max(0, room - 8))
        return heading + "```" + inner + "```"
    return heading + cut(slack_escape(section.body), room)


def render_slack(notice: Notice) -> dict[str, Any]:
    """``{"text", "blocks"}`` for chat.postMessage or an incoming webhook, always within Slack's limits."""
    blocks: list[dict[str, Any]] = [
        {
            "type": "header",
            "text": {"type": "plain_text", "text": cut(notice.title or "Capstan", MAX_HEADER_TEXT)},
        },
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": cut(slack_escape(notice.summary) or "-", 1000)},
        },
    ]
    used = len(blocks[0]["text"]["text"]) + len(blocks[1]["text"]["text"])
    fields = list(notice.fields)
    for start in range(0, len(fields), MAX_SECTION_FIELDS):
        chunk = fields[start : start + MAX_SECTION_FIELDS]
        items = [
            {
                "type": "mrkdwn",
                "text": cut(f"*{slack_escape(k)}*\n{slack_escape(v)}", min(MAX_FIELD_TEXT, 300)),
            }
            for k, v in chunk
        ]
        used += sum(len(i["text"]) for i in items)
        blocks.append({"type": "section", "fields": items})
    reserve_footer = 1 if notice.footer else 0
    omitted = 0
    sections = list(notice.sections)
    for index, section in enumerate(sections):
        remaining_sections = len(sections) - index
        room_blocks = MAX_BLOCKS - len(blocks) - reserve_footer - 1
        budget = SLACK_TOTAL_TEXT - used
        if room_blocks <= 0 or budget < 200:
            omitted = remaining_sections
            break
        # when everything still to come fits, nothing is cut; otherwise share what is left fairly between the
        # sections still to come (code sections may use what others leave)
        need = sum(len(s.heading) + len(s.body) + 16 for s in sections[index:])
        fits = need <= budget
        share = budget if section.code or fits else max(200, budget // remaining_sections)
        text = _slack_section_text(section, share)
        used += len(text)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    context: list[str] = []
    if omitted:
        context.append(f"{omitted} more section(s) did not fit in one Slack message")
    if notice.footer:
        context.append(slack_escape(cut(notice.footer, 500)))
    if context:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": t} for t in context]})
    return {"text": cut(f"{notice.title}: {notice.summary}", 3000), "blocks": blocks}


def render_teams(notice: Notice) -> dict[str, Any]:
    """An Adaptive Card message for a Teams incoming webhook or Workflows ("post to a channel") URL."""
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": notice.title, "weight": "Bolder", "size": "Medium", "wrap": True},
        {"type": "TextBlock", "text": notice.summary, "wrap": True},
    ]
    if notice.fields:
        facts = [{"title": cut(k, 200), "value": cut(v, 500)} for k, v in notice.fields]
        body.append({"type": "FactSet", "facts": facts})
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
    }
    sections = list(notice.sections)
    for section in sections:
        body.append({"type": "TextBlock", "text": section.heading, "weight": "Bolder", "wrap": True})
        block: dict[str, Any] = {"type": "TextBlock", "text": section.body, "wrap": True}
        if section.code:
            block["fontType"] = "Monospace"
        body.append(block)
    if notice.footer:
        body.append({"type": "TextBlock", "text": notice.footer, "isSubtle": True, "wrap": True})
    message = {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
        ],
    }
    # shrink the longest bodies (tails kept for code) until the message fits; then drop trailing sections
    omitted = 0
    for _ in range(8 * len(body) + 8):  # bounded: each pass halves one body or drops one element
        if len(json.dumps(message).encode()) <= TEAMS_MAX_BYTES:
            break
        candidates = [b for b in body if b["type"] == "TextBlock" and len(b["text"]) > 300]
        if candidates:
            largest = max(candidates, key=lambda b: len(b["text"]))
            half = len(largest["text"]) // 2
            is_code = largest.get("fontType") == "Monospace"
            largest["text"] = tail_lines(largest["text"], half) if is_code else cut(largest["text"], half)
        elif len(body) > 3:
            body.pop(-2 if notice.footer else -1)
            omitted += 1
        else:
            break
    if omitted:
        note = f"{omitted} more element(s) did not fit in one Teams message"
        body.append({"type": "TextBlock", "text": note, "isSubtle": True, "wrap": True})
    return message


def render_google_chat(notice: Notice) -> dict[str, Any]:
    """A cardsV2 message with a plain fallback ``text``; ``thread.threadKey`` groups digests under a report."""

    def para(text: str) -> dict[str, Any]:
        return {"textParagraph": {"text": html.escape(text).replace("\n", "<br>")}}

    sections: list[dict[str, Any]] = []
    if notice.fields:
        sections.append(
            {
                "widgets": [
                    {"decoratedText": {"topLabel": cut(k, 100), "text": html.escape(cut(v, 300))}}
                    for k, v in notice.fields
                ]
            }
        )
    budget = GCHAT_TOTAL_TEXT - sum(min(len(k), 100) + min(len(v), 300) for k, v in notice.fields)
    omitted = 0
    for index, section in enumerate(notice.sections):
        remaining = len(notice.sections) - index
        if budget < 300:
            omitted = remaining
            break
        need = sum(len(s.heading) + len(s.body) for s in notice.sections[index:])
        fair = budget if section.code or need <= budget else max(300, budget // remaining)
        room = min(GCHAT_MAX_SECTION, fair)
        body = tail_lines(section.body, room) if section.code else cut(section.body, room)
        budget -= len(body) + len(section.heading)
        sections.append({"header": html.escape(cut(section.heading, 200)), "widgets": [para(body)]})
    if omitted:
        sections.append({"widgets": [para(f"{omitted} more section(s) did not fit in one message")]})
    if notice.footer:
        sections.append({"widgets": [para(notice.footer)]})
    message: dict[str, Any] = {
        "text": cut(f"{notice.title}: {notice.summary}", 4000),
        "cardsV2": [
            {
                "cardId": "capstan-notice",
                "card": {
                    "header": {"title": cut(notice.title, 200), "subtitle": cut(notice.summary, 200)},
                    "sections": sections or [{"widgets": [para(notice.summary)]}],
                },
            }
        ],
    }
    if notice.thread_key:
        message["thread"] = {"threadKey": notice.thread_key}
    return message


def render_discord(notice: Notice) -> dict[str, Any]:
    """One embed within Discord's per-field and 6,000-character total limits."""
    title = cut(notice.title, DISCORD_TITLE)
    footer = cut(notice.footer, DISCORD_FOOTER) if notice.footer else ""
    fields: list[dict[str, Any]] = [
        {"name": cut(k, DISCORD_FIELD_NAME), "value": cut(v or "-", DISCORD_FIELD_VALUE), "inline": True}
        for k, v in notice.fields
    ]
    code = [s for s in notice.sections if s.code]
    for section in (s for s in notice.sections if not s.code):
        fields.append(
            {
                "name": cut(section.heading, DISCORD_FIELD_NAME),
                "value": cut(section.body or "-", DISCORD_FIELD_VALUE),
            }
        )
    fields = fields[:DISCORD_FIELDS]
    used = len(title) + len(footer) + sum(len(f["name"]) + len(f["value"]) for f in fields)
    while used > DISCORD_TOTAL - 200 and fields:  # bounded by the number of fields
        dropped = fields.pop()
        used -= len(dropped["name"]) + len(dropped["value"])
    description = cut(notice.summary, 500)
    budget = min(DISCORD_DESCRIPTION, DISCORD_TOTAL - used) - len(description) - 2
    for section in code:
        room = budget - len(section.heading) - 12
        if room < 100:
            break
        body = tail_lines(escape_fences(section.body), room)
        part = f"\n**{section.heading}**\n```\n{body}\n```"
        description += part
        budget -= len(part)
    embed: dict[str, Any] = {
        "title": title,
        "description": description,
        "color": _COLORS.get(notice.severity, _COLORS["warning"]),
    }
    if fields:
        embed["fields"] = fields
    if footer:
        embed["footer"] = {"text": footer}
    return {"content": cut(notice.summary, DISCORD_CONTENT), "embeds": [embed]}


def render_json(notice: Notice) -> dict[str, Any]:
    """The generic webhook body: the Notice itself, tagged with its source and schema version."""
    return {"source": "capstan", "schema": 1, **notice.to_json()}
