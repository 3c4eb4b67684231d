"""The tools the server registers, in the order ``tools/list`` shows them. Every one reads; none writes."""

from __future__ import annotations

from typing import Final

from capstan.mcp._diagnose import DIAGNOSE
from capstan.mcp._events import EVENTS
from capstan.mcp._gpu import GPU_CAPACITY
from capstan.mcp._history import CHANGES, ENGINE_EVENTS, RESTARTS, TIMELINE
from capstan.mcp._logs import LOGS
from capstan.mcp._objects import GET_RESOURCE, LIST_RESOURCES, NEIGHBORHOOD, SEARCH
from capstan.mcp._overview import OVERVIEW, PROBLEMS
from capstan.mcp._tool import ToolSpec

TOOLS: Final[tuple[ToolSpec, ...]] = (
    OVERVIEW,
    PROBLEMS,
    DIAGNOSE,
    EVENTS,
    LOGS,
    GET_RESOURCE,
    LIST_RESOURCES,
    SEARCH,
    NEIGHBORHOOD,
    CHANGES,
    TIMELINE,
    RESTARTS,
    ENGINE_EVENTS,
    GPU_CAPACITY,
)


def tool_names() -> list[str]:
    return [spec.name for spec in TOOLS]
