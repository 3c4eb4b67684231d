"""Renderers stay within each service's limits for any notice; config refuses bad URLs and tokens by name."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capstan.config import StrictModel, load_model
from capstan.errors import UserError
from capstan.notify import (
    MessageCapacity,
    Notice,
    Section,
    SinkConfig,
    SlackWebhookSink,
    blocks_problem,
    combine_notices,
    render_discord,
    render_slack,
)
from capstan.notify._notice import escape_fences, tail_lines
from capstan.notify._render import render_google_chat, render_teams
from tests.integration.notify.receivers import discord_problem, google_chat_problem, teams_problem

pytestmark = pytest.mark.unit

_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=5000)
_sections = st.lists(st.builds(Section, _text, _text, st.booleans()), max_size=70)
_notices = st.builds(
    Notice,
    title=_text,
    summary=_text,
    fields=st.lists(st.tuples(_text, _text), max_size=40).map(tuple),
    sections=_sections.map(tuple),
    footer=st.text(max_size=3000),
)


@settings(max_examples=60, deadline=None)
@given(_notices)
def test_every_renderer_fits_its_service(notice: Notice) -> None:
    slack = render_slack(notice)
    assert blocks_problem(slack["blocks"]) is None
    assert sum(len(json.dumps(b)) for b in slack["blocks"]) < 40_000
    assert teams_problem(render_teams(notice)) is None
    assert google_chat_problem(render_google_chat(notice)) is None
    assert discord_problem(render_discord(notice)) is None


def test_notice_json_round_trip() -> None:
    notice = Notice(
        title="t",
        summary="s",
        fields=(("a", "b"),),
        sections=(Section("h", "b", True),),
        log="L",
        thread_key="k",
    )
    assert Notice.from_json(json.loads(json.dumps(notice.to_json()))) == notice


def test_brief_survives_the_json_round_trip() -> None:
    notice = Notice(title="t", summary="s", brief=(Section("b", "body"),))
    assert Notice.from_json(json.loads(json.dumps(notice.to_json()))).brief == (Section("b", "body"),)
    assert Notice(title="t", summary="s").brief_sections() == (Section("t", "s"),)


def test_combine_notices_merges_meta_threads_and_severity() -> None:
    a = Notice(
        title="A",
        summary="a",
        severity="warning",
        thread_key="ns/a",
        meta={"kind": "restart", "restarts": [1]},
    )
    b = Notice(
        title="B",
        summary="b",
        severity="critical",
        thread_key="ns/b",
        meta={"kind": "restart", "restarts": [2]},
    )
    combined = combine_notices([a, b])
    assert combined.title == "A (+1 more)" and combined.severity == "critical"
    assert combined.meta == {
        "kind": "restart",
        "restarts": [1, 2],
        "combined": 2,
        "thread_keys": ["ns/a", "ns/b"],
    }
    assert combined.sections == (Section("A", "a"), Section("B", "b"))
    assert combine_notices([a]) is a
    with pytest.raises(ValueError):
        combine_notices([])


@pytest.mark.parametrize("per_section", [100, 380, 1500])
def test_a_combined_message_within_slack_capacity_is_rendered_uncut(per_section: int) -> None:
    capacity: MessageCapacity = SlackWebhookSink("s", "https://hooks.slack.com/services/T/B/x").capacity
    notices: list[Notice] = []
    used = 0
    for i in range(60):  # as many as the capacity takes
        brief = (Section(f"ns/pod-{i} · app", f"line {i} " + "x" * per_section),)
        size = sum(len(s.heading) + len(s.body) for s in brief)
        if used + size > capacity.text_chars or len(notices) + 1 > capacity.sections:
            break
        used += size
        notices.append(Notice(title=f"t{i}", summary="s", brief=brief))
    rendered = render_slack(combine_notices(notices))
    assert blocks_problem(rendered["blocks"]) is None
    text = "\n".join(str(b.get("text", {}).get("text", "")) for b in rendered["blocks"])
    for notice in notices:
        assert notice.brief[0].body in text


def test_tail_lines_keeps_whole_last_lines() -> None:
    text = "\n".join(f"line {i:04d}" for i in range(1000))
    out = tail_lines(text, 500)
    assert len(out) <= 500
    first, *rest = out.splitlines()
    assert first.startswith("[") and "earlier lines cut" in first
    assert rest[-1] == "line 0999"
    assert all(line.startswith("line ") and len(line) == 9 for line in rest)
    assert int(first.strip("[").split()[0]) + len(rest) == 1000


def test_tail_lines_cuts_one_huge_line_from_the_front() -> None:
    out = tail_lines("a\n" + "b" * 10_000 + "END", 300)
    assert len(out) <= 300 and out.endswith("END")


def test_escape_fences() -> None:
    assert "```" not in escape_fences("a```b``````c")


class _Conf(StrictModel):
    sinks: list[SinkConfig]


@pytest.mark.parametrize(
    ("sink", "problem"),
    [
        (
            {"type": "slack_webhook", "name": "s", "url": "https://hooks.slack.com/nope"},
            "sinks.0.slack_webhook.url",
        ),
        (
            {"type": "slack_webhook", "name": "s", "url": "http://example.com/services/T1/B1/abc"},
            "plain http",
        ),
        ({"type": "slack_bot", "name": "s", "token": "hunter2", "channel": "x"}, "sinks.0.slack_bot.token"),
        ({"type": "discord", "name": "d", "url": "https://discord.com/api/x"}, "sinks.0.discord.url"),
        ({"type": "teams", "name": "Bad Name", "url": "https://x.example/y"}, "sinks.0.teams.name"),
        ({"type": "carrier_pigeon", "name": "p"}, "sinks.0"),
        ({"type": "webhook", "name": "w", "url": "https://x.example/y", "colour": "red"}, "colour"),
    ],
)
def test_sink_config_names_the_bad_setting(sink: dict[str, object], problem: str) -> None:
    with pytest.raises(UserError) as err:
        load_model(_Conf, {"sinks": [sink]}, "capstan.yaml")
    message = str(err.value)
    assert message.startswith("capstan.yaml: ") and problem in message and "\n" not in message


def test_sink_config_accepts_good_settings() -> None:
    conf = load_model(
        _Conf,
        {
            "sinks": [
                {
                    "type": "slack_webhook",
                    "name": "s",
                    "url": "https://hooks.slack.com/services/T1/B2/abcdef",
                },
                {"type": "slack_bot", "name": "b", "token": "xoxb-1234-5678-abcd", "channel": "#alerts"},
                {"type": "discord", "name": "d", "url": "https://discord.com/api/webhooks/1/tok"},
                {"type": "webhook", "name": "w", "url": "http://127.0.0.1:9000/hook"},
            ]
        },
        "capstan.yaml",
    )
    assert [s.type for s in conf.sinks] == ["slack_webhook", "slack_bot", "discord", "webhook"]
