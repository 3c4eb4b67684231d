"""A scripted upstream behind the router's client seam (``capstan.route._upstream.UpstreamClient``), for fast unit
tests of the proxy's retry and mid-stream handling without sockets.

Each endpoint base URL has a queue of :class:`Answer`: a failure before the headers (``connect``: refused or reset;
``timeout``: nothing within the read timeout), or a status, headers and body chunks, optionally followed by a
failure mid-body (``broken``, ``stall``). Errors are the seam's own :class:`UpstreamError`, as both real clients
raise them. An endpoint with no answer left fails the test (AssertionError). Every request opened and every response
closed is logged. The real clients (aiohttp, httpx) against real servers are tested in tests/integration/route.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import AsyncIterator, Mapping
from typing import Literal

import httpx

from capstan.route import UpstreamError, UpstreamResponse


@dataclasses.dataclass(frozen=True)
class Answer:
    status: int = 200
    chunks: tuple[bytes, ...] = (b'{"ok": true}',)
    content_type: str = "application/json"
    before: Literal["connect", "timeout"] | None = None
    """a failure instead of any answer"""
    after: Literal["broken", "stall"] | None = None
    """a failure after the chunks"""


def sse(*events: str, after: Literal["broken", "stall"] | None = None) -> Answer:
    """A streamed answer: one ``data:`` event per string, then ``after``."""
    chunks = tuple(f"data: {e}\n\n".encode() for e in events)
    return Answer(chunks=chunks, content_type="text/event-stream", after=after)


def _failure(kind: str) -> UpstreamError:
    if kind in ("timeout", "stall"):
        return UpstreamError(TimeoutError("no data within the read timeout"), timeout=True)
    return UpstreamError(ConnectionResetError("connection reset by peer"))


class _Response:
    def __init__(self, answer: Answer, on_close: list[str], url: str) -> None:
        self._answer = answer
        self._closed = on_close
        self._url = url
        self.status_code = answer.status
        self.headers = [("content-type", answer.content_type)]

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for chunk in self._answer.chunks:
            await asyncio.sleep(0)
            yield chunk
        if self._answer.after is not None:
            raise _failure(self._answer.after)

    async def aread(self) -> bytes:
        if self._answer.after is not None:
            raise _failure(self._answer.after)
        return b"".join(self._answer.chunks)

    async def aclose(self) -> None:
        self._closed.append(self._url)


class FakeUpstream:
    """Scripted answers per endpoint base URL (see the module docstring)."""

    def __init__(self, answers: Mapping[str, list[Answer]]) -> None:
        self.answers = {base: deque(items) for base, items in answers.items()}
        self.opened: list[str] = []
        self.closed: list[str] = []
        self.read_timeouts: list[float] = []
        self.shut = False

    async def open(
        self, url: str, body: bytes, headers: Mapping[str, str], *, read_timeout_s: float
    ) -> UpstreamResponse:
        base = next((b for b in self.answers if url.startswith(b)), None)
        if base is None or not self.answers[base]:
            raise AssertionError(f"FakeUpstream: unscripted request to {url}")
        self.opened.append(base)
        self.read_timeouts.append(read_timeout_s)
        answer = self.answers[base].popleft()
        await asyncio.sleep(0)
        if answer.before is not None:
            raise _failure(answer.before)
        return _Response(answer, self.closed, base)

    async def aclose(self) -> None:
        self.shut = True


def healthy_endpoints(waiting: Mapping[str, int] | None = None) -> httpx.MockTransport:
    """The endpoint monitor's transport: every endpoint answers its health check, and its metrics page says how many
    requests wait there (``waiting`` by host; none by default)."""
    queues = dict(waiting or {})

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            n = queues.get(request.url.host, 0)
            return httpx.Response(
                200, text=f"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting {n}\n"
            )
        return httpx.Response(200, text="")

    return httpx.MockTransport(answer)
