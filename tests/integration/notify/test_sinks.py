"""Every sink against a real loopback receiver: the payloads pass strict validation at the services' limits."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from capstan.notify import (
    DiscordSink,
    GoogleChatSink,
    JsonWebhookSink,
    Notice,
    Section,
    SlackBotSink,
    SlackWebhookSink,
    TeamsSink,
    combine_notices,
    serve_in_thread,
)
from tests.integration.notify.conftest import Slack
from tests.integration.notify.receivers import (
    StrictReceiver,
    discord_problem,
    google_chat_problem,
    json_problem,
    teams_problem,
)

pytestmark = pytest.mark.integration

LOG = "\n".join(f"2026-11-29T10:00:{i % 60:02d}Z line {i} " + "x" * (i % 90) for i in range(2000))
LOG += "\n```\nFATAL: out of memory <token=abc> & done"


def big_notice(**over: object) -> Notice:
    base = Notice(
        title="Container restarted: " + "very-long-deployment-name-" * 10,
        summary="web-0/app restarted (OOMKilled, exit 137) on node-a",
        fields=tuple((f"field {i}", "value " * 50) for i in range(30)),
        sections=(
            Section("Last state", "Terminated: OOMKilled\nExit code: 137 (SIGKILL)\n" * 40),
            Section("Events", "\n".join(f"Warning BackOff {i}" for i in range(300))),
            Section("Previous log", LOG, code=True),
            *(Section(f"extra {i}", "y" * 500) for i in range(60)),
        ),
        log=LOG,
        log_name="web-0-app.log",
        thread_key="default/Deployment/web",
        footer="cluster dev · capstan",
    )
    return Notice(**{**base.__dict__, **over})


@pytest.fixture
def strict() -> Iterator[dict[str, tuple[StrictReceiver, str]]]:
    receivers = {
        "teams": StrictReceiver(teams_problem, "/webhook/teams", ok_status=202),
        "gchat": StrictReceiver(google_chat_problem, "/v1/spaces/AAA/messages"),
        "discord": StrictReceiver(discord_problem, "/api/webhooks/{id}/{token}", ok_status=204),
        "json": StrictReceiver(json_problem, "/hook"),
    }
    servers = {name: serve_in_thread(r.app()) for name, r in receivers.items()}
    paths = {
        "teams": "/webhook/teams",
        "gchat": "/v1/spaces/AAA/messages",
        "discord": "/api/webhooks/123/tok-en",
        "json": "/hook",
    }
    try:
        yield {name: (receivers[name], servers[name].url + paths[name]) for name in receivers}
    finally:
        for server in servers.values():
            server.stop()


async def test_slack_webhook_sink_fits_limits(slack: Slack) -> None:
    sink = SlackWebhookSink("slack", slack.webhook_url, timeout=5)
    result = await sink.send(big_notice())
    assert result.ok, result.error
    [message] = slack.receiver.snapshot()["messages"]
    texts = [b["text"]["text"] for b in message["blocks"] if b["type"] == "section" and "text" in b]
    log_block = next(t for t in texts if t.startswith("*Previous log*"))
    assert log_block.rstrip("`").endswith("&lt;token=abc&gt; &amp; done")  # the tail survives, escaped
    assert "```\nFATAL" not in log_block  # a fence inside the log cannot close the block
    assert "earlier lines cut" in log_block
    assert message["blocks"][-1]["type"] == "context"


async def test_slack_webhook_sink_reports_429_and_errors(slack: Slack) -> None:
    sink = SlackWebhookSink("slack", slack.webhook_url, timeout=5)
    slack.receiver.arm_429(1, retry_after=9)
    limited = await sink.send(big_notice())
    assert not limited.ok and limited.retry_after == 9
    bad = SlackWebhookSink("slack", slack.url + "/services/nope", timeout=5)
    failed = await bad.send(big_notice())
    assert failed.error == "HTTP 404: no_service" and failed.retry_after is None


async def test_slack_bot_sink_threads_digests_and_uploads_log(slack: Slack) -> None:
    sink = SlackBotSink("slack-bot", slack.token, "alerts", base_url=slack.api_url, timeout=5)
    first = await sink.send(big_notice())
    digest = await sink.send(
        Notice(title="Digest", summary="3 more restarts", thread_key="default/Deployment/web")
    )
    other = await sink.send(Notice(title="Other", summary="x", thread_key="default/Deployment/api"))
    assert first.ok and digest.ok and other.ok and first.warning is None
    messages = slack.receiver.snapshot()["messages"]
    report, upload, threaded, unrelated = messages
    assert report["channel"] == "C0ALERTS" and report["thread_ts"] is None
    assert upload["files"][0]["content"] == LOG and upload["thread_ts"] == report["ts"]
    assert threaded["text"].startswith("Digest") and threaded["thread_ts"] == report["ts"]
    assert unrelated["thread_ts"] is None


async def test_threads_kept_in_the_store_survive_a_restart(slack: Slack, tmp_path: Path) -> None:
    from capstan.store import open_store

    db = str(tmp_path / "h.db")
    store = open_store(db)
    before = SlackBotSink(
        "bot", slack.token, "alerts", base_url=slack.api_url, timeout=5, threads=store.threads
    )
    web = Notice(title="Container restarted: web-0", summary="s", thread_key="default/Deployment/web")
    api = Notice(title="Container restarted: api-0", summary="s", thread_key="default/Deployment/api")
    combined = combine_notices([web, api])  # one message that starts both workloads' threads
    assert (await before.send(combined)).ok
    store.close()
    reopened = open_store(db)  # "Capstan restarted"
    after = SlackBotSink(
        "bot", slack.token, "alerts", base_url=slack.api_url, timeout=5, threads=reopened.threads
    )
    assert (
        await after.send(
            Notice(title="Restart digest: api", summary="4", thread_key="default/Deployment/api")
        )
    ).ok
    first, digest = slack.receiver.snapshot()["messages"]
    assert first["thread_ts"] is None and digest["thread_ts"] == first["ts"]
    reopened.close()


async def test_slack_bot_sink_keeps_slack_error_strings(slack: Slack) -> None:
    wrong_channel = SlackBotSink("b", slack.token, "nowhere", base_url=slack.api_url, timeout=5)
    assert (await wrong_channel.send(big_notice())).error == "slack: channel_not_found"
    wrong_token = SlackBotSink("b", "xoxb-not-valid", "alerts", base_url=slack.api_url, timeout=5)
    assert (await wrong_token.send(big_notice())).error == "slack: invalid_auth"
    slack.receiver.arm_429(1, retry_after=5)
    limited = await SlackBotSink("b", slack.token, "alerts", base_url=slack.api_url, timeout=5).send(
        big_notice()
    )
    assert limited.error == "slack: ratelimited" and limited.retry_after == 5


async def test_slack_bot_sink_channel_override(slack: Slack) -> None:
    sink = SlackBotSink("b", slack.token, "alerts", base_url=slack.api_url, upload_logs=False, timeout=5)
    assert (await sink.send(big_notice(channel="#ops", log=None))).ok
    assert slack.receiver.snapshot()["messages"][0]["channel"] == "C0OPS"


async def test_teams_google_chat_discord_json_accept_big_notice(
    strict: dict[str, tuple[StrictReceiver, str]],
) -> None:
    sinks = {
        "teams": TeamsSink("teams", strict["teams"][1], timeout=5),
        "gchat": GoogleChatSink("gchat", strict["gchat"][1], timeout=5),
        "discord": DiscordSink("discord", strict["discord"][1], timeout=5),
        "json": JsonWebhookSink("json", strict["json"][1], timeout=5, headers={"Authorization": "Bearer s3"}),
    }
    for name, sink in sinks.items():
        result = await sink.send(big_notice())
        receiver = strict[name][0]
        assert result.ok, (name, result.error, receiver.rejected)
        assert len(receiver.received) == 1
        await sink.aclose()
    assert strict["gchat"][0].queries[0] == {"messageReplyOption": "REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD"}
    assert strict["gchat"][0].received[0]["thread"] == {"threadKey": "default/Deployment/web"}
    assert strict["json"][0].headers[0]["authorization"] == "Bearer s3"
    assert strict["json"][0].received[0]["log"] == LOG
    description = strict["discord"][0].received[0]["embeds"][0]["description"]
    assert "<token=abc> & done" in description and "earlier lines cut" in description
    teams_body = strict["teams"][0].received[0]["attachments"][0]["content"]["body"]
    teams_texts = [b["text"] for b in teams_body if b["type"] == "TextBlock"]
    assert any(t.endswith("<token=abc> & done") for t in teams_texts)


async def test_http_sinks_report_429_and_errors(strict: dict[str, tuple[StrictReceiver, str]]) -> None:
    discord, url = strict["discord"]
    discord.armed_429 = 1
    discord.retry_after_body = True
    sink = DiscordSink("discord", url, timeout=5)
    assert (await sink.send(big_notice())).retry_after == 2.5
    teams, turl = strict["teams"]
    teams.armed_429 = 1
    tsink = TeamsSink("teams", turl, timeout=5)
    assert (await tsink.send(big_notice())).retry_after == 4
    teams.fail_status = 500
    failed = await tsink.send(big_notice())
    assert failed.error == "HTTP 500: boom" and failed.retry_after is None
    gone = JsonWebhookSink("json", "http://127.0.0.1:9/none", timeout=2)
    assert (await gone.send(big_notice())).error.startswith("transport: ConnectError")  # type: ignore[union-attr]
    for s in (sink, tsink, gone):
        await s.aclose()
