"""Notify sinks by registry: every sink type has exactly one implementation, built from its own configuration, and
an unknown or unwired type fails at start with one line."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import Field

from capstan.cli.main import main
from capstan.config import StrictModel, load_model, plugin_type, union_models
from capstan.errors import UserError
from capstan.notify import (
    SINKS,
    DiscordSink,
    GoogleChatSink,
    JsonWebhookSink,
    SinkConfig,
    SlackBotSink,
    SlackWebhookSink,
    TeamsSink,
    build_sink,
)
from capstan.notify._config import TeamsSinkConfig

pytestmark = pytest.mark.unit

_CONFIGS: dict[str, dict[str, object]] = {
    "slack_webhook": {"url": "https://hooks.slack.com/services/T1/B1/abc"},
    "slack_bot": {"token": "xoxb-0123456789", "channel": "#alerts"},
    "webhook": {"url": "https://hooks.example.com/capstan", "headers": {"Authorization": "Bearer x"}},
    "teams": {"url": "https://example.webhook.office.com/x"},
    "google_chat": {"url": "https://chat.googleapis.com/v1/spaces/x/messages"},
    "discord": {"url": "https://discord.com/api/webhooks/1/tok"},
}
_BUILT = {
    "slack_webhook": SlackWebhookSink,
    "slack_bot": SlackBotSink,
    "webhook": JsonWebhookSink,
    "teams": TeamsSink,
    "google_chat": GoogleChatSink,
    "discord": DiscordSink,
}


class _Sinks(StrictModel):
    sinks: list[SinkConfig]


def test_every_sink_type_has_exactly_one_implementation_taking_its_own_config() -> None:
    models = union_models(SinkConfig)
    assert sorted(plugin_type(m) for m in models) == sorted(SINKS) == sorted(_CONFIGS)
    for model in models:
        plugin = SINKS[plugin_type(model)]
        assert plugin.config is model
        assert typing.get_type_hints(plugin.build)["config"] is model


async def test_each_sink_config_builds_its_own_sink() -> None:
    data = [{"type": t, "name": t.replace("_", "-"), **extra} for t, extra in _CONFIGS.items()]
    for config in load_model(_Sinks, {"sinks": data}, "restarts.yaml").sinks:
        sink = build_sink(config)
        assert type(sink) is _BUILT[config.type] and sink.name == config.name
        await sink.aclose()


def test_an_unknown_sink_type_fails_at_load_with_one_line() -> None:
    with pytest.raises(UserError) as err:
        load_model(_Sinks, {"sinks": [{"type": "pager", "name": "p", "url": "https://x.example"}]}, "r.yaml")
    assert str(err.value).startswith("r.yaml: sinks.0: Input tag 'pager' found using 'type'")
    assert "\n" not in str(err.value)


class _PagerSinkConfig(TeamsSinkConfig):
    """A sink type added to the union without an implementation."""

    type: Literal["pager"]  # type: ignore[assignment]


class _WithPager(StrictModel):
    sinks: list[Annotated[TeamsSinkConfig | _PagerSinkConfig, Field(discriminator="type")]]


def test_a_sink_type_without_an_implementation_fails_at_load_and_at_build_with_one_line() -> None:
    data = {"sinks": [{"type": "pager", "name": "p", "url": "https://x.example"}]}
    with pytest.raises(UserError) as err:
        load_model(_WithPager, data, "r.yaml")
    assert str(err.value).startswith(
        "r.yaml: sinks.0.pager: Value error, sink type 'pager' has no implementation (implemented: slack_webhook,"
    )
    unvalidated = _PagerSinkConfig.model_construct(type="pager", name="p", url="https://x.example")
    with pytest.raises(UserError, match=r"^sink p: sink type 'pager' has no implementation"):
        build_sink(unvalidated)


def test_restarts_check_config_rejects_an_unknown_sink_type_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "restarts.yaml"
    bad.write_text("sinks:\n  - {type: pager, name: p, url: 'https://x.example'}\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["restarts", "check-config", str(bad)])
    assert exit_info.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"{bad}: sinks.0: Input tag 'pager'" in line
