"""Chat services behind one ``Sink`` protocol: render a Notice, deliver it, and say what happened.

A sink never raises for delivery problems: it returns a :class:`Delivery` that the drainer turns into sent, retry
(after ``Retry-After`` or backoff) or dead. Slack goes through slack_sdk (incoming webhook, or a bot token with
``chat.postMessage`` and ``files_upload_v2``); the others are plain JSON POSTs with httpx. Every call has a timeout.

Slack's calls use slack_sdk's standard-library clients in a worker thread rather than its aiohttp ones: at
Slack's pace of about one message per second per channel a thread costs nothing, and a watcher that never
loads aiohttp stays ~10 MB smaller. httpx is imported when the first JSON sink is built.
"""

from __future__ import annotations

import abc
import asyncio
import email.utils
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

from slack_sdk.errors import SlackApiError
from slack_sdk.web import WebClient
from slack_sdk.webhook import WebhookClient

from capstan.notify._notice import MessageCapacity, Notice
from capstan.notify._render import (
    render_discord,
    render_google_chat,
    render_json,
    render_slack,
    render_teams,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

# below render_slack's total text budget and block limit, so a combined message is never cut
SLACK_CAPACITY: Final = MessageCapacity(text_chars=8_000, sections=40)


@dataclass(frozen=True)
class Delivery:
    """The outcome of one send: ``ok``, or an ``error`` (the service's own error string where it gives one),
    with ``retry_after`` seconds when the service asked for a pause (HTTP 429)."""

    ok: bool
    error: str | None = None
    retry_after: float | None = None
    ref: str | None = None
    warning: str | None = None

    @classmethod
    def sent(cls, ref: str | None = None, warning: str | None = None) -> Delivery:
        return cls(ok=True, ref=ref, warning=warning)

    @classmethod
    def failed(cls, error: str, retry_after: float | None = None) -> Delivery:
        return cls(ok=False, error=error, retry_after=retry_after)


class Sink(Protocol):
    """A chat destination. ``name`` is the destination key the drainer paces and the outbox stores;
    ``capacity`` is how many notices' briefs one of its messages carries when the drainer combines them."""

    @property
    def name(self) -> str: ...

    @property
    def capacity(self) -> MessageCapacity: ...

    async def send(self, notice: Notice) -> Delivery: ...

    async def aclose(self) -> None: ...


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date); None if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _header(headers: Mapping[str, Any], name: str) -> str | None:
    """slack_sdk hands headers over as ``{name: [values]}`` or ``{name: value}``, in any case."""
    for key, value in headers.items():
        if key.lower() == name.lower():
            if isinstance(value, list | tuple):
                return str(value[0]) if value else None
            return str(value)
    return None


class ThreadIndex(Protocol):
    """Where the first message of a thread key was posted (channel, ts), so digests can reply under it."""

    def get(self, key: str) -> tuple[str, str] | None: ...

    def put(self, key: str, channel: str, ts: str) -> None: ...


@dataclass
class MemoryThreadIndex:
    """Thread index kept in memory (lost on restart: a later digest then starts a new thread)."""

    threads: dict[str, tuple[str, str]] = field(default_factory=dict)

    def get(self, key: str) -> tuple[str, str] | None:
        return self.threads.get(key)

    def put(self, key: str, channel: str, ts: str) -> None:
        self.threads.setdefault(key, (channel, ts))


class SlackWebhookSink:
    """Slack incoming webhook: Block Kit within Slack's limits; no threads, no files (webhooks cannot upload)."""

    def __init__(self, name: str, url: str, *, timeout: float = 10.0) -> None:
        self._name = name
        self._client = WebhookClient(url, timeout=max(1, int(timeout)))

    @property
    def name(self) -> str:
        return self._name

    @property
    def capacity(self) -> MessageCapacity:
        return SLACK_CAPACITY

    async def send(self, notice: Notice) -> Delivery:
        payload = render_slack(notice)
        try:
            response = await asyncio.to_thread(
                self._client.send, text=payload["text"], blocks=payload["blocks"]
            )
        except Exception as exc:  # network errors: slack_sdk raises aiohttp/asyncio errors
            return Delivery.failed(f"transport: {type(exc).__name__}: {exc}")
        if response.status_code == 200:
            return Delivery.sent()
        retry = parse_retry_after(_header(response.headers, "Retry-After"))
        error = f"HTTP {response.status_code}: {response.body or '(no body)'}"
        return Delivery.failed(error, retry if response.status_code == 429 else None)

    async def aclose(self) -> None:
        return None


class SlackBotSink:
    """Slack bot token: ``chat.postMessage`` (digests threaded under the first message of their thread key) and
    the full log uploaded as a file with ``files_upload_v2`` in the message's thread.

    A failed log upload after the message was posted is reported as a warning, not a failure: retrying would post
    the message twice. The inline tail is always in the message itself.
    """

    def __init__(
        self,
        name: str,
        token: str,
        channel: str,
        *,
        base_url: str = "https://slack.com/api/",
        upload_logs: bool = True,
        timeout: float = 10.0,
        threads: ThreadIndex | None = None,
    ) -> None:
        self._name = name
        self._channel = channel
        self._upload_logs = upload_logs
        self._threads: ThreadIndex = threads if threads is not None else MemoryThreadIndex()
        # channel names resolve to IDs in responses; remembered so thread lookups match either form
        self._aliases: dict[str, str] = {}
        self._client = WebClient(token=token, base_url=base_url, timeout=max(1, int(timeout)))

    @property
    def name(self) -> str:
        return self._name

    @property
    def capacity(self) -> MessageCapacity:
        return SLACK_CAPACITY

    async def send(self, notice: Notice) -> Delivery:
        payload = render_slack(notice)
        channel = notice.channel or self._channel
        parent = self._threads.get(notice.thread_key) if notice.thread_key else None
        thread_ts = None
        # a reply goes under the parent when it is in the channel this message is for: the same name or ID, or a
        # name this process has not resolved yet (after a restart) — then the reply is posted to the parent's
        # channel ID, which is where that name pointed when the thread started
        if parent is not None and (
            parent[0] in (channel, self._resolved(channel)) or channel not in self._aliases
        ):
            channel, thread_ts = parent
        try:
            response = await asyncio.to_thread(
                self._client.chat_postMessage,
                channel=channel,
                text=payload["text"],
                blocks=payload["blocks"],
                thread_ts=thread_ts,
            )
        except SlackApiError as exc:
            status = exc.response.status_code
            error = str(exc.response.get("error") or f"HTTP {status}")
            retry = parse_retry_after(_header(exc.response.headers, "Retry-After")) if status == 429 else None
            log.warning("slack chat.postMessage to %s failed: %s", channel, error)
            return Delivery.failed(f"slack: {error}", retry)
        except Exception as exc:
            return Delivery.failed(f"transport: {type(exc).__name__}: {exc}")
        posted_channel, ts = str(response["channel"]), str(response["ts"])
        self._remember(channel, posted_channel)
        if notice.thread_key and parent is None:
            self._threads.put(notice.thread_key, posted_channel, ts)
        for key in notice.meta.get("thread_keys") or []:  # a combined message starts the threads of its parts
            if self._threads.get(str(key)) is None:
                self._threads.put(str(key), posted_channel, ts)
        warning = None
        if self._upload_logs and notice.log:
            try:
                await asyncio.to_thread(
                    self._client.files_upload_v2,
                    channel=posted_channel,
                    thread_ts=thread_ts or ts,
                    content=notice.log,
                    filename=notice.log_name,
                    title=notice.log_name,
                )
            except SlackApiError as exc:
                warning = f"log upload failed: {exc.response.get('error')}"
            except Exception as exc:
                warning = f"log upload failed: {type(exc).__name__}: {exc}"
            if warning:
                log.warning("slack %s for message %s: %s", notice.log_name, ts, warning)
        return Delivery.sent(ref=ts, warning=warning)

    def _remember(self, requested: str, posted: str) -> None:
        self._aliases[requested] = posted

    def _resolved(self, channel: str) -> str:
        return self._aliases.get(channel, channel)

    async def aclose(self) -> None:
        return None


class _HttpJsonSink(abc.ABC):
    """POST a rendered JSON body; 2xx is sent, 429 carries Retry-After, anything else is an error to retry."""

    CAPACITY = MessageCapacity(text_chars=12_000, sections=40)

    def __init__(
        self, name: str, url: str, *, timeout: float = 10.0, headers: Mapping[str, str] | None = None
    ) -> None:
        import httpx

        self._name = name
        self._url = url
        self._client = httpx.AsyncClient(timeout=timeout, headers=dict(headers or {}))

    @property
    def name(self) -> str:
        return self._name

    @property
    def capacity(self) -> MessageCapacity:
        return self.CAPACITY

    @abc.abstractmethod
    def render(self, notice: Notice) -> tuple[dict[str, Any], dict[str, str]]:
        """The JSON body and query parameters for ``notice`` in this service's format."""

    def _retry_after(self, response: httpx.Response) -> float | None:
        return parse_retry_after(response.headers.get("Retry-After"))

    async def send(self, notice: Notice) -> Delivery:
        import httpx

        body, params = self.render(notice)
        try:
            response = await self._client.post(self._url, json=body, params=params or None)
        except httpx.HTTPError as exc:
            return Delivery.failed(f"transport: {type(exc).__name__}: {exc}")
        if response.is_success:
            return Delivery.sent()
        error = f"HTTP {response.status_code}: {response.text[:300]}"
        return Delivery.failed(error, self._retry_after(response) if response.status_code == 429 else None)

    async def aclose(self) -> None:
        await self._client.aclose()


class JsonWebhookSink(_HttpJsonSink):
    """Generic webhook: the Notice as JSON (``render_json``), with optional extra headers (e.g. auth)."""

    CAPACITY = MessageCapacity(text_chars=100_000, sections=200)

    def render(self, notice: Notice) -> tuple[dict[str, Any], dict[str, str]]:
        return render_json(notice), {}


class TeamsSink(_HttpJsonSink):
    """Microsoft Teams incoming webhook or Workflows URL: an Adaptive Card."""

    def render(self, notice: Notice) -> tuple[dict[str, Any], dict[str, str]]:
        return render_teams(notice), {}


class GoogleChatSink(_HttpJsonSink):
    """Google Chat space webhook: cardsV2, replies threaded by key (``REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD``)."""

    def render(self, notice: Notice) -> tuple[dict[str, Any], dict[str, str]]:
        params = {"messageReplyOption": "REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD"} if notice.thread_key else {}
        return render_google_chat(notice), params


class DiscordSink(_HttpJsonSink):
    """Discord webhook: one embed; a 429 carries ``retry_after`` (seconds) in its JSON body as well."""

    # briefs render as embed fields: at most 25 of 1,024 characters, 6,000 characters in all
    CAPACITY = MessageCapacity(text_chars=4_500, sections=20)

    def render(self, notice: Notice) -> tuple[dict[str, Any], dict[str, str]]:
        return render_discord(notice), {}

    def _retry_after(self, response: httpx.Response) -> float | None:
        header = super()._retry_after(response)
        if header is not None:
            return header
        try:
            value = response.json().get("retry_after")
        except ValueError:
            return None
        return float(value) if isinstance(value, int | float) else None
