"""Slack Block Kit limits, written once and used by both sides: the sinks cut their output to fit, and the
local receiver (`capstan dev slack`) rejects what real Slack rejects.

The figures come from Slack's Block Kit reference (docs.slack.dev/reference/block-kit): 50 blocks per message,
3,000 characters in a section's text, 150 in a header's plain text, 10 section fields of 2,000 characters each,
10 context elements, 25 actions elements, 5 context_actions elements, 255 characters of ``block_id``; an image's
``alt_text`` and ``title`` 2,000 and its ``image_url`` 3,000; a video's title under 200; an input's label and
hint 2,000; a table of at most 100 rows of 20 cells (one table per message); all ``markdown`` blocks of a
payload 12,000 characters together. Message ``text`` is truncated by Slack at 40,000 characters (not refused).

Newer block types (alert, card, carousel, container, data_table, plan, task_card) are accepted as objects whose
text objects are checked like any other; their own schemas are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

MAX_BLOCKS: Final = 50
MAX_SECTION_TEXT: Final = 3000
MAX_HEADER_TEXT: Final = 150
MAX_SECTION_FIELDS: Final = 10
MAX_FIELD_TEXT: Final = 2000
MAX_CONTEXT_ELEMENTS: Final = 10
MAX_ACTIONS_ELEMENTS: Final = 25
MAX_CONTEXT_ACTIONS_ELEMENTS: Final = 5
MAX_BLOCK_ID: Final = 255
MAX_ALT_TEXT: Final = 2000
MAX_IMAGE_URL: Final = 3000
MAX_IMAGE_TITLE: Final = 2000
MAX_VIDEO_TITLE: Final = 199
MAX_INPUT_LABEL: Final = 2000
MAX_TABLE_ROWS: Final = 100
MAX_TABLE_CELLS: Final = 20
MAX_MARKDOWN_TOTAL: Final = 12000
MAX_MESSAGE_TEXT: Final = 40000

_TEXT_TYPES: Final = frozenset({"plain_text", "mrkdwn"})
_RICH_TEXT_ELEMENTS: Final = frozenset(
    {"rich_text_section", "rich_text_list", "rich_text_preformatted", "rich_text_quote"}
)
_TABLE_CELLS: Final = frozenset({"raw_text", "rich_text"})
_NEWER_BLOCKS: Final = frozenset(
    {"alert", "card", "carousel", "container", "data_table", "plan", "task_card"}
)
_KNOWN_BLOCKS: Final = frozenset(
    {
        "actions",
        "context",
        "context_actions",
        "divider",
        "file",
        "header",
        "image",
        "input",
        "markdown",
        "rich_text",
        "section",
        "table",
        "video",
    }
    | _NEWER_BLOCKS
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


def _string_problem(value: Any, name: str, limit: int, *, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        return f"{name} must be a non-empty string"
    if len(value) > limit:
        return f"{name} must be less than {limit + 1} characters"
    return None


def _elements_problem(
    elements: Any, name: str, most: int, *, allowed: frozenset[str] | None = None
) -> str | None:
    if not isinstance(elements, list) or not elements or len(elements) > most:
        return f"{name} must be a list of 1..{most} items"
    for element in elements:
        if not isinstance(element, dict) or not isinstance(element.get("type"), str):
            return f"{name}: every element must be an object with a type"
        if allowed is not None and element["type"] not in allowed:
            return f"{name}: element type {element['type']!r} not allowed"
    return None


def _image_problem(block: Mapping[str, Any]) -> str | None:
    url, slack_file = block.get("image_url"), block.get("slack_file")
    if url is None and slack_file is None:
        return "image needs image_url or slack_file"
    if url is not None and (problem := _string_problem(url, "image_url", MAX_IMAGE_URL)):
        return problem
    if slack_file is not None and not isinstance(slack_file, dict):
        return "slack_file must be an object"
    if problem := _string_problem(block.get("alt_text"), "alt_text", MAX_ALT_TEXT):
        return problem
    if block.get("title") is not None:
        return _text_problem(block["title"], MAX_IMAGE_TITLE, plain_only=True)
    return None


def _section_problem(block: Mapping[str, Any]) -> str | None:
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
    accessory = block.get("accessory")
    if accessory is not None and not (isinstance(accessory, dict) and isinstance(accessory.get("type"), str)):
        return "accessory must be an object with a type"
    return None


def _context_problem(block: Mapping[str, Any]) -> str | None:
    if problem := _elements_problem(
        block.get("elements"), "context elements", MAX_CONTEXT_ELEMENTS, allowed=_TEXT_TYPES | {"image"}
    ):
        return problem
    for element in block["elements"]:
        if element["type"] in _TEXT_TYPES and (problem := _text_problem(element, MAX_SECTION_TEXT)):
            return problem
        if element["type"] == "image" and not (element.get("image_url") or element.get("slack_file")):
            return "context image needs image_url or slack_file"
    return None


def _table_problem(block: Mapping[str, Any]) -> str | None:
    rows = block.get("rows")
    if not isinstance(rows, list) or not rows or len(rows) > MAX_TABLE_ROWS:
        return f"rows must be a list of 1..{MAX_TABLE_ROWS} rows"
    for row in rows:
        if not isinstance(row, list) or not row or len(row) > MAX_TABLE_CELLS:
            return f"a table row must be a list of 1..{MAX_TABLE_CELLS} cells"
        for cell in row:
            if not isinstance(cell, dict) or cell.get("type") not in _TABLE_CELLS:
                return "a table cell must be a raw_text or rich_text object"
            if cell["type"] == "raw_text" and not isinstance(cell.get("text"), str):
                return "a raw_text cell needs text"
    return None


def block_problem(block: Any) -> str | None:
    """Why Slack would refuse ``block`` (a human-readable reason), or None if it is acceptable."""
    if not isinstance(block, dict):
        return "block is not an object"
    kind = block.get("type")
    if kind not in _KNOWN_BLOCKS:
        return f"unknown block type {kind!r}"
    block_id = block.get("block_id")
    if block_id is not None and (problem := _string_problem(block_id, "block_id", MAX_BLOCK_ID)):
        return problem
    if kind == "header":
        return _text_problem(block.get("text"), MAX_HEADER_TEXT, plain_only=True)
    if kind == "section":
        return _section_problem(block)
    if kind == "context":
        return _context_problem(block)
    if kind == "image":
        return _image_problem(block)
    if kind == "actions":
        return _elements_problem(block.get("elements"), "actions elements", MAX_ACTIONS_ELEMENTS)
    if kind == "context_actions":
        return _elements_problem(
            block.get("elements"),
            "context_actions elements",
            MAX_CONTEXT_ACTIONS_ELEMENTS,
            allowed=frozenset({"feedback_buttons", "icon_button"}),
        )
    if kind == "rich_text":
        return _elements_problem(
            block.get("elements"), "rich_text elements", 10_000, allowed=_RICH_TEXT_ELEMENTS
        )
    if kind == "markdown":
        return _string_problem(block.get("text"), "markdown text", MAX_MARKDOWN_TOTAL)
    if kind == "input":
        if problem := _text_problem(block.get("label"), MAX_INPUT_LABEL, plain_only=True):
            return "label: " + problem
        element = block.get("element")
        if not (isinstance(element, dict) and isinstance(element.get("type"), str)):
            return "input needs an element object with a type"
        if block.get("hint") is not None and (
            problem := _text_problem(block["hint"], MAX_INPUT_LABEL, plain_only=True)
        ):
            return "hint: " + problem
        return None
    if kind == "file":
        if block.get("source") != "remote" or not isinstance(block.get("external_id"), str):
            return "file needs external_id and source 'remote'"
        return None
    if kind == "video":
        for name in ("alt_text", "thumbnail_url", "video_url"):
            if problem := _string_problem(block.get(name), name, MAX_IMAGE_URL):
                return problem
        if problem := _text_problem(block.get("title"), MAX_VIDEO_TITLE, plain_only=True):
            return "title: " + problem
        return None
    if kind == "table":
        return _table_problem(block)
    return None


def blocks_problem(blocks: Any) -> tuple[str, str] | None:
    """``(slack_error, detail)`` for a ``blocks`` value Slack would refuse, else None."""
    if not isinstance(blocks, list):
        return ("invalid_blocks_format", "blocks must be an array")
    if len(blocks) > MAX_BLOCKS:
        return ("invalid_blocks", f"no more than {MAX_BLOCKS} items allowed, got {len(blocks)}")
    markdown = tables = 0
    for index, block in enumerate(blocks):
        if problem := block_problem(block):
            return ("invalid_blocks", f"blocks[{index}]: {problem}")
        if block["type"] == "markdown":
            markdown += len(block["text"])
            if markdown > MAX_MARKDOWN_TOTAL:
                return (
                    "invalid_blocks",
                    f"blocks[{index}]: markdown blocks must be less than {MAX_MARKDOWN_TOTAL + 1} characters together",
                )
        if block["type"] == "table":
            tables += 1
            if tables > 1:
                return ("invalid_blocks", f"blocks[{index}]: only one table is allowed per message")
    return None
