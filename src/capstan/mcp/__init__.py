"""Read-only, secret-safe, token-efficient cluster context for AI agents over MCP (issue 26; ``capstan mcp``).

:func:`create_server` builds the server on the official SDK's ``MCPServer`` from the tool catalog (:data:`TOOLS`):
every tool reads a redacted :class:`State` from a :class:`StateSource` (:class:`LiveSource` over the cluster and
the history store, :class:`FixedSource` over one snapshot) and container logs from a :class:`LogReader`
(:class:`ClusterLogs`, :class:`SnapshotLogs`), answers within its :class:`Budget` (token counts by ``cl100k_base``,
cursor pagination) and passes the redactor on its way out. :func:`http_app` serves it over streamable HTTP
(stateless, JSON responses) with Host/Origin checks, a bearer token off loopback, and bounded requests. No tool
writes (docs/mcp.md).
"""

from typing import TYPE_CHECKING

from capstan.lazy import lazy_attributes

_LAZY = {
    "TOOLS": "capstan.mcp._catalog",
    "tool_names": "capstan.mcp._catalog",
    "Budget": "capstan.mcp._shape",
    "BadCursor": "capstan.mcp._shape",
    "State": "capstan.mcp._state",
    "StateSource": "capstan.mcp._state",
    "LiveSource": "capstan.mcp._state",
    "FixedSource": "capstan.mcp._state",
    "LogReader": "capstan.mcp._state",
    "ClusterLogs": "capstan.mcp._state",
    "SnapshotLogs": "capstan.mcp._state",
    "ToolSpec": "capstan.mcp._tool",
    "create_server": "capstan.mcp._server",
    "http_app": "capstan.mcp._http",
    "HttpSettings": "capstan.mcp._http",
}

__getattr__ = lazy_attributes("capstan.mcp", _LAZY)

if TYPE_CHECKING:
    from capstan.mcp._catalog import TOOLS, tool_names
    from capstan.mcp._http import HttpSettings, http_app
    from capstan.mcp._server import create_server
    from capstan.mcp._shape import BadCursor, Budget
    from capstan.mcp._state import (
        ClusterLogs,
        FixedSource,
        LiveSource,
        LogReader,
        SnapshotLogs,
        State,
        StateSource,
    )
    from capstan.mcp._tool import ToolSpec

__all__ = [
    "TOOLS",
    "BadCursor",
    "Budget",
    "ClusterLogs",
    "FixedSource",
    "HttpSettings",
    "LiveSource",
    "LogReader",
    "SnapshotLogs",
    "State",
    "StateSource",
    "ToolSpec",
    "create_server",
    "http_app",
    "tool_names",
]
