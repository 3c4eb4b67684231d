"""Sink configuration: one strict model per sink type, chosen by ``type``; bad URLs and tokens fail at start
with the setting named (pydantic's location, e.g. ``sinks.0.slack_webhook.url``)."""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from capstan.config import StrictModel
from capstan.notify._sinks import (
    DiscordSink,
    GoogleChatSink,
    JsonWebhookSink,
    Sink,
    SlackBotSink,
    SlackWebhookSink,
    TeamsSink,
    ThreadIndex,
)

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_SLACK_HOOK = re.compile(r"^/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]+/?$")
_DISCORD_HOOK = re.compile(r"^/api/webhooks/\d+/[\w-]+/?$")
_SLACK_TOKEN = re.compile(r"^xox[bp]-[A-Za-z0-9-]{8,}$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")


def check_url(value: str, *, path: re.Pattern[str] | None = None, what: str = "URL") -> str:
    """An https URL (plain http only to a loopback host), optionally with a path of the service's shape."""
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {value[:60]!r}")
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
        raise ValueError("plain http is only allowed to a loopback host; use https")
    if path is not None and not path.match(parts.path):
        raise ValueError(f"does not look like a {what} (path {parts.path[:60]!r})")
    return value


class _SinkBase(StrictModel):
    name: str = Field(description="Destination key: paces deliveries and names the sink in the outbox.")
    timeout_seconds: float = Field(default=10.0, gt=0, le=120)

    @field_validator("name")
    @classmethod
    def _name_ok(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("use lowercase letters, digits, '-', '_' or '.' (max 63)")
        return value


class SlackWebhookSinkConfig(_SinkBase):
    type: Literal["slack_webhook"]
    url: str

    @field_validator("url")
    @classmethod
    def _url_ok(cls, value: str) -> str:
        return check_url(value, path=_SLACK_HOOK, what="Slack incoming webhook (/services/T…/B…/…)")


class SlackBotSinkConfig(_SinkBase):
    type: Literal["slack_bot"]
    token: str
    channel: str = Field(min_length=1)
    base_url: str = "https://slack.com/api/"
    upload_logs: bool = True

    @field_validator("token")
    @classmethod
    def _token_ok(cls, value: str) -> str:
        if not _SLACK_TOKEN.match(value):
            raise ValueError("not a Slack bot or user token (xoxb-… / xoxp-…)")
        return value

    @field_validator("base_url")
    @classmethod
    def _base_ok(cls, value: str) -> str:
        return check_url(value)


class WebhookSinkConfig(_SinkBase):
    type: Literal["webhook"]
    url: str
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _url_ok(cls, value: str) -> str:
        return check_url(value)


class TeamsSinkConfig(_SinkBase):
    type: Literal["teams"]
    url: str

    @field_validator("url")
    @classmethod
    def _url_ok(cls, value: str) -> str:
        return check_url(value)


class GoogleChatSinkConfig(_SinkBase):
    type: Literal["google_chat"]
    url: str

    @field_validator("url")
    @classmethod
    def _url_ok(cls, value: str) -> str:
        return check_url(value)


class DiscordSinkConfig(_SinkBase):
    type: Literal["discord"]
    url: str

    @field_validator("url")
    @classmethod
    def _url_ok(cls, value: str) -> str:
        return check_url(value, path=_DISCORD_HOOK, what="Discord webhook (/api/webhooks/<id>/<token>)")


SinkConfig = Annotated[
    SlackWebhookSinkConfig
    | SlackBotSinkConfig
    | WebhookSinkConfig
    | TeamsSinkConfig
    | GoogleChatSinkConfig
    | DiscordSinkConfig,
    Field(discriminator="type"),
]


def build_sink(config: SinkConfig, *, threads: ThreadIndex | None = None) -> Sink:
    """The sink a validated configuration describes."""
    timeout = config.timeout_seconds
    if isinstance(config, SlackWebhookSinkConfig):
        return SlackWebhookSink(config.name, config.url, timeout=timeout)
    if isinstance(config, SlackBotSinkConfig):
        return SlackBotSink(
            config.name,
            config.token,
            config.channel,
            base_url=config.base_url,
            upload_logs=config.upload_logs,
            timeout=timeout,
            threads=threads,
        )
    if isinstance(config, WebhookSinkConfig):
        return JsonWebhookSink(config.name, config.url, timeout=timeout, headers=config.headers)
    if isinstance(config, TeamsSinkConfig):
        return TeamsSink(config.name, config.url, timeout=timeout)
    if isinstance(config, GoogleChatSinkConfig):
        return GoogleChatSink(config.name, config.url, timeout=timeout)
    return DiscordSink(config.name, config.url, timeout=timeout)
