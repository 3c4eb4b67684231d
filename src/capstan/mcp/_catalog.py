"""The tools the server registers, in the order ``tools/list`` shows them. Every one reads; none writes."""

from __future__ import annotations

from typing import Final

from capstan.mcp._events import EVENTS
from capstan.mcp._logs import LOGS
from capstan.mcp._overview import OVERVIEW, PROBLEMS
from capstan.mcp._tool import ToolSpec

TOOLS: Final[tuple[ToolSpec, ...]] = (OVERVIEW, PROBLEMS, EVENTS, LOGS)


def tool_names() -> list[str]:
    return [spec.name for spec in TOOLS]
