"""Sink configuration: one strict model per sink type, chosen by ``type``; bad URLs and tokens fail at start
with the setting named (pydantic's location, e.g. ``sinks.0.slack_webhook.url``).

Each sink type is spelled once, as the ``type`` literal of its model, and wired to its implementation once, in
:data:`SINKS`; a model without an entry there fails validation with one line instead of being built as another sink.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from capstan.config import Plugin, StrictModel, plugin_for, plugin_problem, plugin_registry
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

    @model_validator(mode="after")
    def _implemented(self) -> _SinkBase:
        problem = plugin_problem(SINKS, self, "sink")
        if problem is not None:
            raise ValueError(problem)
        return self


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


SinkFactory = Callable[[Any, ThreadIndex | None], Sink]


def _slack_webhook(config: SlackWebhookSinkConfig, threads: ThreadIndex | None) -> Sink:
    return SlackWebhookSink(config.name, config.url, timeout=config.timeout_seconds)


def _slack_bot(config: SlackBotSinkConfig, threads: ThreadIndex | None) -> Sink:
    return SlackBotSink(
        config.name,
        config.token,
        config.channel,
        base_url=config.base_url,
        upload_logs=config.upload_logs,
        timeout=config.timeout_seconds,
        threads=threads,
    )


def _webhook(config: WebhookSinkConfig, threads: ThreadIndex | None) -> Sink:
    return JsonWebhookSink(config.name, config.url, timeout=config.timeout_seconds, headers=config.headers)


def _teams(config: TeamsSinkConfig, threads: ThreadIndex | None) -> Sink:
    return TeamsSink(config.name, config.url, timeout=config.timeout_seconds)


def _google_chat(config: GoogleChatSinkConfig, threads: ThreadIndex | None) -> Sink:
    return GoogleChatSink(config.name, config.url, timeout=config.timeout_seconds)


def _discord(config: DiscordSinkConfig, threads: ThreadIndex | None) -> Sink:
    return DiscordSink(config.name, config.url, timeout=config.timeout_seconds)


# NOTE: one entry per model of SinkConfig, none for anything else (tests/unit/notify pins it)
SINKS: Mapping[str, Plugin[SinkFactory]] = plugin_registry(
    (SlackWebhookSinkConfig, _slack_webhook),
    (SlackBotSinkConfig, _slack_bot),
    (WebhookSinkConfig, _webhook),
    (TeamsSinkConfig, _teams),
    (GoogleChatSinkConfig, _google_chat),
    (DiscordSinkConfig, _discord),
)


def build_sink(config: SinkConfig, *, threads: ThreadIndex | None = None) -> Sink:
    """The sink a validated configuration describes (:class:`UserError` for a type without an implementation)."""
    return plugin_for(SINKS, config, "sink", f"sink {config.name}")(config, threads)
