"""The proxy's upstream HTTP client seam: one small interface, an aiohttp and an httpx implementation.

``bench/route_http.py`` measured both at 64 concurrent streams against the simulated replicas (see
docs/benchmarks.md): aiohttp answered about seven times more requests per second at a tenth of the client CPU per
request, so it is the default; httpx stays selectable (``proxy.upstream_client: httpx``). Errors of either library
become :class:`UpstreamError` so the proxy's retry and mid-stream handling do not depend on the choice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

import aiohttp
import httpx


class UpstreamError(Exception):
    """The upstream could not be reached, timed out, or broke the response."""


class UpstreamResponse(Protocol):
    status_code: int
    headers: list[tuple[str, str]]

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None: ...


class UpstreamClient(Protocol):
    async def open(self, url: str, body: bytes, headers: Mapping[str, str]) -> UpstreamResponse:
        """POST ``body`` and return once the status and headers arrived (raises :class:`UpstreamError`)."""
        ...

    async def aclose(self) -> None: ...


class _AiohttpResponse:
    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status_code = resp.status
        self.headers = [(k, v) for k, v in resp.headers.items()]

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.content.iter_any():
                yield chunk
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None

    async def aread(self) -> bytes:
        try:
            return await self._resp.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None

    async def aclose(self) -> None:
        # close(), not release(): an unfinished response must drop the connection so the engine aborts it
        if self._resp.content.at_eof():
            self._resp.release()
        else:
            self._resp.close()


class AiohttpUpstream:
    def __init__(self, connect_timeout_s: float, read_timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s
        )
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # created lazily inside the running loop
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
                timeout=self._timeout,
                auto_decompress=False,
                skip_auto_headers=("Accept-Encoding", "User-Agent"),
            )
        return self._session

    async def open(self, url: str, body: bytes, headers: Mapping[str, str]) -> UpstreamResponse:
        try:
            resp = await self._client().post(url, data=body, headers=dict(headers))
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
        return _AiohttpResponse(resp)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class _HttpxResponse:
    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp
        self.status_code = resp.status_code
        self.headers = list(resp.headers.items())

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None

    async def aread(self) -> bytes:
        try:
            return await self._resp.aread()
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None

    async def aclose(self) -> None:
        await self._resp.aclose()


class HttpxUpstream:
    def __init__(self, connect_timeout_s: float, read_timeout_s: float) -> None:
        timeout = httpx.Timeout(connect=connect_timeout_s, read=read_timeout_s, write=30.0, pool=30.0)
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=512)
        self._client = httpx.AsyncClient(limits=limits, timeout=timeout)

    async def open(self, url: str, body: bytes, headers: Mapping[str, str]) -> UpstreamResponse:
        try:
            resp = await self._client.send(
                self._client.build_request("POST", url, content=body, headers=dict(headers)), stream=True
            )
        except httpx.HTTPError as exc:
            raise UpstreamError(f"{type(exc).__name__}: {exc}") from None
        return _HttpxResponse(resp)

    async def aclose(self) -> None:
        await self._client.aclose()
