"""The proxy's upstream HTTP client seam: one small interface, an aiohttp and an httpx implementation.

``bench/route_http.py`` measured both at 64 concurrent streams against the simulated replicas (see
docs/benchmarks.md): aiohttp answered four to five times more requests per second (591–867 against 155–172) at
about a ninth of the client CPU per request, so it is the default; httpx stays selectable (``proxy.upstream_client: httpx``). Errors of either library
become :class:`UpstreamError` so the proxy's retry and mid-stream handling do not depend on the choice.

The router is given its client (:class:`capstan.route.Router`'s ``upstream``); :func:`upstream_for` is how
the composition root (``capstan route serve``) builds the configured one.

Each request carries its own read timeout: the longest wait for the next bytes of the answer, headers included
(both libraries restart it at every read). The proxy passes its stall timeout for streams, whose headers come at
once and whose chunks follow each other, and its read timeout for buffered answers, which come whole at the end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

import aiohttp
import httpx

from capstan.route._config import ProxyConfig


class UpstreamError(Exception):
    """The upstream could not be reached, timed out (``timeout``: nothing arrived within the read timeout), or
    broke the response."""

    def __init__(self, cause: BaseException, *, timeout: bool = False, silence: str | None = None) -> None:
        super().__init__(f"{type(cause).__name__}: {cause}")
        self.cause = type(cause).__name__  # what a client may be told (the message names hosts and ports)
        self.timeout = timeout
        # a timed-out stream: which silence ended it, said to the client and logged ("sent nothing for 15 s
        # mid-stream", "sent no first token within the read timeout (300 s)"); set by the relay
        self.silence = silence


def _aiohttp_error(exc: BaseException) -> UpstreamError:
    # NOTE: a connect timeout is a failure to connect, not a silent upstream
    timeout = isinstance(exc, TimeoutError) and not isinstance(exc, aiohttp.ConnectionTimeoutError)
    return UpstreamError(exc, timeout=timeout)


def _httpx_error(exc: httpx.HTTPError) -> UpstreamError:
    return UpstreamError(exc, timeout=isinstance(exc, httpx.ReadTimeout))


class UpstreamResponse(Protocol):
    status_code: int
    headers: list[tuple[str, str]]

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None: ...


class UpstreamClient(Protocol):
    async def open(
        self, url: str, body: bytes, headers: Mapping[str, str], *, read_timeout_s: float
    ) -> UpstreamResponse:
        """POST ``body`` and return once the status and headers arrived (raises :class:`UpstreamError`);
        ``read_timeout_s`` bounds every wait for bytes of this answer."""
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
            raise _aiohttp_error(exc) from None

    async def aread(self) -> bytes:
        try:
            return await self._resp.read()
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _aiohttp_error(exc) from None

    async def aclose(self) -> None:
        # close(), not release(): an unfinished response must drop the connection so the engine aborts it
        if self._resp.content.at_eof():
            self._resp.release()
        else:
            self._resp.close()


class AiohttpUpstream:
    def __init__(self, connect_timeout_s: float) -> None:
        self._connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:  # created lazily inside the running loop
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=0),
                auto_decompress=False,
                skip_auto_headers=("Accept-Encoding", "User-Agent"),
            )
        return self._session

    async def open(
        self, url: str, body: bytes, headers: Mapping[str, str], *, read_timeout_s: float
    ) -> UpstreamResponse:
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._connect_timeout_s, sock_read=read_timeout_s
        )
        try:
            resp = await self._client().post(url, data=body, headers=dict(headers), timeout=timeout)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _aiohttp_error(exc) from None
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
            raise _httpx_error(exc) from None

    async def aread(self) -> bytes:
        try:
            return await self._resp.aread()
        except httpx.HTTPError as exc:
            raise _httpx_error(exc) from None

    async def aclose(self) -> None:
        await self._resp.aclose()


class HttpxUpstream:
    def __init__(self, connect_timeout_s: float) -> None:
        self._connect_timeout_s = connect_timeout_s
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=512)
        self._client = httpx.AsyncClient(limits=limits)

    async def open(
        self, url: str, body: bytes, headers: Mapping[str, str], *, read_timeout_s: float
    ) -> UpstreamResponse:
        timeout = httpx.Timeout(connect=self._connect_timeout_s, read=read_timeout_s, write=30.0, pool=30.0)
        try:
            request = self._client.build_request(
                "POST", url, content=body, headers=dict(headers), timeout=timeout
            )
            resp = await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _httpx_error(exc) from None
        return _HttpxResponse(resp)

    async def aclose(self) -> None:
        await self._client.aclose()


def upstream_for(proxy: ProxyConfig) -> UpstreamClient:
    """The upstream client ``proxy.upstream_client`` names, with its connect timeout; nothing is connected yet (the
    aiohttp session is created on the first request, inside the running loop)."""
    if proxy.upstream_client == "aiohttp":
        return AiohttpUpstream(proxy.connect_timeout_s)
    return HttpxUpstream(proxy.connect_timeout_s)
