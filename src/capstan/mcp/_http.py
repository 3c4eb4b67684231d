"""The MCP server over streamable HTTP (stateless, JSON responses), bounded and guarded.

- **DNS rebinding**: the SDK's transport security checks ``Host`` (only the addresses the server was started for,
  any port on loopback) and ``Origin`` (only loopback origins and the ones configured); a page in a browser cannot
  reach a loopback server through a name it controls.
- **Who may call**: on loopback no token is needed; on any other address :func:`http_app` refuses to start without a
  bearer token, and every request must carry ``Authorization: Bearer <token>`` (compared in constant time): 401
  with a JSON body otherwise.
- **Bounded requests**: bodies over ``max_body_bytes`` are answered 413 before they are read whole; a request that
  takes longer than ``request_timeout_s`` is answered 504 (or its connection closed when the answer had begun);
  uvicorn's headers deadline comes from :func:`capstan.httpserver.server_config`.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from capstan.httpserver import is_loopback
from capstan.jsontext import dumpb

PATH: Final = "/mcp"
_LOOPBACK_HOSTS: Final = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True)
class HttpSettings:
    """Where and how the HTTP transport listens. ``allowed_hosts``/``allowed_origins`` add to the defaults (the
    bound address, and loopback names on loopback)."""

    host: str = "127.0.0.1"
    port: int = 8765
    token: str | None = None
    allowed_hosts: Sequence[str] = field(default=())
    allowed_origins: Sequence[str] = field(default=())
    max_body_bytes: int = 1024 * 1024
    request_timeout_s: float = 30.0

    def security(self) -> TransportSecuritySettings:
        hosts = [f"{self.host}:*", self.host]
        origins = [f"http://{self.host}:*"]
        if is_loopback(self.host):
            hosts += [f"{h}:*" for h in _LOOPBACK_HOSTS] + list(_LOOPBACK_HOSTS)
            origins += [f"http://{h}:*" for h in _LOOPBACK_HOSTS]
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=sorted({*hosts, *self.allowed_hosts}),
            allowed_origins=sorted({*origins, *self.allowed_origins}),
        )


async def _json(
    send: Send, status: int, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    payload = dumpb(body)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class _Guard:
    """Bearer token (when set) and the request deadline around the SDK's app; lifespan passes through."""

    def __init__(self, app: ASGIApp, *, token: str | None, timeout_s: float) -> None:
        self._app = app
        self._token = token.encode() if token else None
        self._timeout = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if self._token is not None and not self._authorized(scope):
            await _json(
                send,
                401,
                {"error": "missing or wrong bearer token (send Authorization: Bearer <token>)"},
                [(b"www-authenticate", b"Bearer")],
            )
            return
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            async with asyncio.timeout(self._timeout):
                await self._app(scope, receive, tracked)
        except TimeoutError:
            if not started:
                await _json(send, 504, {"error": f"the request took longer than {self._timeout:g} s"})

    def _authorized(self, scope: Scope) -> bool:
        assert self._token is not None
        for name, value in scope.get("headers") or ():
            if name == b"authorization":
                scheme, _, given = bytes(value).partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token)
        return False


def http_app(server: MCPServer[Any], settings: HttpSettings) -> ASGIApp:
    """The ASGI app serving ``server`` at ``/mcp`` (stateless streamable HTTP, JSON responses) with the checks of
    the module docstring. A non-loopback ``settings.host`` without a token is a ValueError (the command turns it
    into one line)."""
    if settings.token is None and not is_loopback(settings.host):
        raise ValueError(
            f"--host {settings.host}: serving beyond loopback needs a bearer token (--token-file)"
        )
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        json_response=True,
        stateless_http=True,
        max_request_body_size=settings.max_body_bytes,
        transport_security=settings.security(),
        host=settings.host,
    )
    return _Guard(app, token=settings.token, timeout_s=settings.request_timeout_s)
