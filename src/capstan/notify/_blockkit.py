"""Slack Block Kit limits, written once and used by both sides: the sinks cut their output to fit, and the
local receiver (`capstan dev slack`) rejects what real Slack rejects.

The figures come from Slack's Block Kit reference: 50 blocks per message, 3,000 characters in a
section's text, 150 in a header's plain text, 10 section fields of 2,000 characters each, 10 context
elements; message ``text`` is truncated by Slack at 40,000 characters (not rejected).
"""

from __future__ import annotations

from typing import Any, Final

MAX_BLOCKS: Final = 50
MAX_SECTION_TEXT: Final = 3000
MAX_HEADER_TEXT: Final = 150
MAX_SECTION_FIELDS: Final = 10
MAX_FIELD_TEXT: Final = 2000
MAX_CONTEXT_ELEMENTS: Final = 10
MAX_MESSAGE_TEXT: Final = 40000

_TEXT_TYPES: Final = frozenset({"plain_text", "mrkdwn"})
_KNOWN_BLOCKS: Final = frozenset(
    {"section", "header", "context", "divider", "rich_text", "image", "actions", "markdown", "file", "input"}
)


def _text_problem(obj: Any, limit: int, *, plain_only: bool = False) -> str | None:
    if not isinstance(obj, dict):
        return "text object is not an object"
    kind = obj.get("type")
    if kind not in _TEXT_TYPES or (plain_only and kind != "plain_text"):
        return f"text type {kind!r} not allowed"
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return "text must be a non-empty string"
    if len(text) > limit:
        return f"text must be less than {limit + 1} characters"
    return None


def block_problem(block: Any) -> str | None:
    """Why Slack would refuse ``block`` (a human-readable reason), or None if it is acceptable."""
    if not isinstance(block, dict):
        return "block is not an object"
    kind = block.get("type")
    if kind not in _KNOWN_BLOCKS:
        return f"unknown block type {kind!r}"
    if kind == "header":
        return _text_problem(block.get("text"), MAX_HEADER_TEXT, plain_only=True)
    if kind == "section":
        text, fields = block.get("text"), block.get("fields")
        if text is None and fields is None:
            return "section needs text or fields"
        if text is not None and (problem := _text_problem(text, MAX_SECTION_TEXT)):
            return problem
        if fields is not None:
            if not isinstance(fields, list) or not fields or len(fields) > MAX_SECTION_FIELDS:
                return f"section fields must be a list of 1..{MAX_SECTION_FIELDS} items"
            for field in fields:
                if problem := _text_problem(field, MAX_FIELD_TEXT):
                    return problem
        return None
    if kind == "context":
        elements = block.get("elements")
        if not isinstance(elements, list) or not elements or len(elements) > MAX_CONTEXT_ELEMENTS:
            return f"context elements must be a list of 1..{MAX_CONTEXT_ELEMENTS} items"
        for element in elements:
            is_text = isinstance(element, dict) and element.get("type") in _TEXT_TYPES
            if is_text and (problem := _text_problem(element, MAX_SECTION_TEXT)):
                return problem
        return None
    return None


def blocks_problem(blocks: Any) -> tuple[str, str] | None:
    """``(slack_error, detail)`` for a ``blocks`` value Slack would refuse, else None."""
    if not isinstance(blocks, list):
        return ("invalid_blocks_format", "blocks must be an array")
    if len(blocks) > MAX_BLOCKS:
        return ("invalid_blocks", f"no more than {MAX_BLOCKS} items allowed, got {len(blocks)}")
    for index, block in enumerate(blocks):
        if problem := block_problem(block):
            return ("invalid_blocks", f"blocks[{index}]: {problem}")
    return None
