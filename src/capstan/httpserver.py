"""What Capstan's HTTP servers (the gateway, the engine simulator, the history API) add to uvicorn: deadlines for
what clients send, and the checks a command makes before it listens.

uvicorn bounds neither a request's headers nor its body in time (uvicorn#157 lists both as wanted): its keep-alive
timer runs only between requests and any byte cancels it, so a client that opens a connection and sends nothing,
half a header, or headers and never the body, holds a connection (and, past the headers, a task) forever. Here:

* :class:`DeadlineH11Protocol`: uvicorn's h11 protocol where a request's headers must be complete within
  ``header_timeout_s`` of the connection opening (first request) or of the request's first byte (later requests
  on a kept-alive connection), else the connection is closed: hyper's ``header_read_timeout``. It relies on
  uvicorn's ``H11Protocol`` internals (``cycle``, ``handle_events``); ``tests/integration/route`` and
  ``tests/integration/enginesim`` catch a uvicorn release that changes them.
* :func:`read_body`: the body must arrive within ``timeout_s`` (else :class:`BodyTimeout`, which the servers answer
  with 408 and ``connection: close``) and stay within a size limit (else :class:`BodyTooLarge`: 413).
* :func:`await_or_disconnect`: awaits some work unless the client disconnects first, then cancels the work: for
  handlers that answer only at the end (non-streaming completions) and would otherwise not notice that nobody
  waits any more.
* :func:`bind_listener`, :func:`is_loopback`, :func:`load_token` (with :func:`check_token`): what a command that
  serves checks before it starts, each failure one line (:class:`~capstan.errors.UserError`): the socket to hand
  uvicorn, whether ``--host`` keeps the server on this machine, the bearer token from a file or the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import uvicorn
from starlette.requests import ClientDisconnect, Request
from uvicorn.protocols.http.h11_impl import H11Protocol

from capstan.errors import UserError
from capstan.logs import uvicorn_log_config

T = TypeVar("T")

DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_BODY_TIMEOUT_S = 60.0


class DeadlineH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers (see the module docstring)."""

    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._waiting_cycle: object | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._arm()  # the first byte of a new request on a kept-alive connection
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self._header_timer is not None and self.cycle is not self._waiting_cycle:
            self._disarm()  # a new request's headers were parsed: uvicorn made a new cycle for it

    def _arm(self) -> None:
        self._disarm()
        self._waiting_cycle = self.cycle
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def deadline_protocol(header_timeout_s: float) -> type[DeadlineH11Protocol]:
    """A :class:`DeadlineH11Protocol` class with this header deadline (uvicorn instantiates the class itself)."""
    return cast(
        "type[DeadlineH11Protocol]",
        type("DeadlineH11Protocol", (DeadlineH11Protocol,), {"header_timeout_s": header_timeout_s}),
    )


def server_config(
    app: Any, *, header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S, **kwargs: Any
) -> uvicorn.Config:
    """A uvicorn configuration serving ``app`` with the header deadline (other keywords go to ``uvicorn.Config``)."""
    kwargs.setdefault("log_level", "warning")
    kwargs.setdefault("access_log", False)
    kwargs.setdefault("log_config", uvicorn_log_config())
    return uvicorn.Config(app, http=deadline_protocol(header_timeout_s), **kwargs)


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"request body is larger than the limit of {limit} bytes")
        self.limit = limit


class BodyTimeout(Exception):
    def __init__(self, timeout_s: float) -> None:
        super().__init__(f"the request body did not arrive within {timeout_s:g} s")
        self.timeout_s = timeout_s


async def read_body(request: Request, *, limit: int, timeout_s: float) -> bytes:
    """The whole request body, at most ``limit`` bytes (declared or streamed), within ``timeout_s``.

    Raises :class:`BodyTooLarge`, :class:`BodyTimeout`, or Starlette's ``ClientDisconnect``.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(limit)
                chunks.append(chunk)
    except TimeoutError:
        raise BodyTimeout(timeout_s) from None
    return b"".join(chunks)


async def _disconnected(request: Request) -> None:
    while True:  # NOTE: ends at the disconnect, or when the caller cancels it (its work finished first)
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


async def await_or_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` unless the client disconnects first: then cancel it and raise ``ClientDisconnect``.

    Call it once the body has been read (the next ASGI message is then the disconnect).
    """
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise ClientDisconnect()
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


# ---------------------------------------------------------------------- listening and bearer tokens
MIN_TOKEN = 16
MAX_TOKEN = 4096
_TOKEN = re.compile(r"[\x21-\x7e]+", re.ASCII)  # what an Authorization header carries without quoting


def check_token(token: str, where: str) -> str:
    """``token`` if it can be a bearer token (printable ASCII without spaces, 16 to 4096 characters), else a
    one-line UserError naming ``where`` it came from (never the token)."""
    if not _TOKEN.fullmatch(token):
        raise UserError(f"{where}: the bearer token must be printable ASCII without spaces")
    if not MIN_TOKEN <= len(token) <= MAX_TOKEN:
        raise UserError(
            f"{where}: the bearer token has {len(token)} characters; give {MIN_TOKEN} to {MAX_TOKEN} "
            "(e.g. `openssl rand -hex 32`)"
        )
    return token


def load_token(token_file: Path | None, env_token: str | None, *, env_name: str) -> str | None:
    """The bearer token from a file (surrounding whitespace and a final newline dropped) or from the environment
    variable ``env_name`` (its value ``env_token``); None when neither is given. Both given, or a file that
    cannot be read, is empty or is not UTF-8: one-line UserError."""
    if token_file is not None and env_token:
        raise UserError(
            f"give the bearer token once: --token-file {str(token_file)!r} or {env_name}, not both"
        )
    if token_file is not None:
        try:
            raw = token_file.read_bytes()
        except OSError as exc:
            raise UserError(f"--token-file {str(token_file)!r}: {exc.strerror or exc}") from None
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise UserError(f"--token-file {str(token_file)!r}: not UTF-8 text") from None
        if not text:
            raise UserError(f"--token-file {str(token_file)!r}: empty")
        return check_token(text, f"--token-file {str(token_file)!r}")
    if env_token is not None and env_token.strip():
        return check_token(env_token.strip(), env_name)
    return None


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` stands for is a loopback address (an unresolvable name: UserError)."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UserError(f"--host {host!r}: cannot resolve it ({exc})") from None
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos
    )


def bind_listener(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) and listening, or a one-line UserError (address in use, no such
    address, no permission)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise UserError(f"--host {host!r}: cannot resolve it ({exc})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock
