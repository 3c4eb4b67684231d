"""The local Slack receiver driven by the real slack_sdk clients over loopback."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook import WebhookClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from tests.integration.notify.conftest import Slack

pytestmark = pytest.mark.integration


def _section(text: str) -> dict[str, object]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def test_webhook_accepts_text_and_blocks(slack: Slack) -> None:
    client = WebhookClient(slack.webhook_url, timeout=5)
    response = client.send(text="pod restarted", blocks=[_section("*web-0* OOMKilled")])
    assert (response.status_code, response.body) == (200, "ok")
    [message] = slack.receiver.snapshot()["messages"]
    assert message["via"] == "webhook"
    assert message["text"] == "pod restarted"
    assert message["blocks"][0]["text"]["text"] == "*web-0* OOMKilled"


@pytest.mark.parametrize(
    ("kwargs", "status", "error"),
    [
        ({"text": ""}, 400, "no_text"),
        ({"text": "x", "blocks": [_section("a" * 3001)]}, 400, "invalid_blocks"),
        ({"text": "x", "blocks": [_section("ok")] * 51}, 400, "invalid_blocks"),
        (
            {"text": "x", "blocks": [{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}]},
            400,
            "invalid_blocks",
        ),
        (
            {"text": "x", "blocks": [{"type": "header", "text": {"type": "mrkdwn", "text": "*bold*"}}]},
            400,
            "invalid_blocks",
        ),
    ],
)
def test_webhook_rejects_what_slack_rejects(
    slack: Slack, kwargs: dict[str, object], status: int, error: str
) -> None:
    response = WebhookClient(slack.webhook_url, timeout=5).send(**kwargs)  # type: ignore[arg-type]
    assert (response.status_code, response.body) == (status, error)
    assert slack.receiver.snapshot()["messages"] == []


def test_webhook_limits_are_inclusive(slack: Slack) -> None:
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": "h" * 150}}]
    blocks += [_section("a" * 3000)] * 49
    response = WebhookClient(slack.webhook_url, timeout=5).send(text="x", blocks=blocks)
    assert response.status_code == 200


def test_webhook_invalid_payload_and_unknown_hook(slack: Slack) -> None:
    bad = httpx.post(slack.webhook_url, content=b"not json", timeout=5)
    assert (bad.status_code, bad.text) == (400, "invalid_payload")
    unknown = httpx.post(f"{slack.url}/services/nope", json={"text": "x"}, timeout=5)
    assert (unknown.status_code, unknown.text) == (404, "no_service")


def test_armed_429_carries_retry_after(slack: Slack) -> None:
    slack.receiver.arm_429(2, retry_after=7)
    client = WebhookClient(slack.webhook_url, timeout=5)
    first = client.send(text="a")
    assert first.status_code == 429
    assert first.headers["Retry-After"] in (["7"], "7")
    assert client.send(text="b").status_code == 429
    assert client.send(text="c").status_code == 200
    assert [m["text"] for m in slack.receiver.snapshot()["messages"]] == ["c"]


def test_admin_endpoint_arms_rate_limit(slack: Slack) -> None:
    assert httpx.post(f"{slack.url}/_admin/ratelimit", json={"rate": 0.001, "burst": 2}, timeout=5).is_success
    client = WebhookClient(slack.webhook_url, timeout=5)
    assert [client.send(text=str(i)).status_code for i in range(3)] == [200, 200, 429]
    assert httpx.post(f"{slack.url}/_admin/ratelimit", json={"rate": None}, timeout=5).is_success
    assert client.send(text="after").status_code == 200


def test_web_api_auth(slack: Slack) -> None:
    ok = WebClient(token=slack.token, base_url=slack.api_url, timeout=5).auth_test()
    assert ok["ok"] and ok["team_id"] == "T0CAPSTAN"
    with pytest.raises(SlackApiError) as bad:
        WebClient(token="xoxb-wrong", base_url=slack.api_url, timeout=5).auth_test()
    assert bad.value.response["error"] == "invalid_auth"
    with pytest.raises(SlackApiError) as missing:
        WebClient(base_url=slack.api_url, timeout=5).chat_postMessage(channel="alerts", text="x")
    assert missing.value.response["error"] == "not_authed"


def test_post_message_threads_and_channels(slack: Slack) -> None:
    client = WebClient(token=slack.token, base_url=slack.api_url, timeout=5)
    parent = client.chat_postMessage(channel="#alerts", text="first", blocks=[_section("first")])
    assert parent["channel"] == "C0ALERTS"
    reply = client.chat_postMessage(channel=parent["channel"], text="digest", thread_ts=parent["ts"])
    assert reply["ts"] != parent["ts"]
    messages = slack.receiver.snapshot()["messages"]
    assert [(m["text"], m["thread_ts"]) for m in messages] == [("first", None), ("digest", parent["ts"])]
    with pytest.raises(SlackApiError) as unknown:
        client.chat_postMessage(channel="nowhere", text="x")
    assert unknown.value.response["error"] == "channel_not_found"
    with pytest.raises(SlackApiError) as too_many:
        client.chat_postMessage(channel="alerts", text="x", blocks=[_section("b")] * 51)
    assert too_many.value.response["error"] == "invalid_blocks"


def test_post_message_429_raises_with_retry_after(slack: Slack) -> None:
    slack.receiver.arm_429(1, retry_after=3)
    client = WebClient(token=slack.token, base_url=slack.api_url, timeout=5)
    with pytest.raises(SlackApiError) as limited:
        client.chat_postMessage(channel="alerts", text="x")
    assert limited.value.response.status_code == 429
    assert limited.value.response.headers["Retry-After"] in (["3"], "3")


def test_files_upload_v2_full_flow(slack: Slack) -> None:
    client = WebClient(token=slack.token, base_url=slack.api_url, timeout=5)
    parent = client.chat_postMessage(channel="alerts", text="restart")
    log = "line 1\nline 2\n" * 100
    done = client.files_upload_v2(
        channel=parent["channel"],
        thread_ts=parent["ts"],
        content=log,
        filename="web-0.log",
        title="previous log",
        initial_comment="full log",
    )
    assert done["ok"] and done["file"]["name"] == "web-0.log"
    upload = slack.receiver.snapshot()["messages"][-1]
    assert upload["thread_ts"] == parent["ts"]
    assert upload["files"][0]["content"] == log
    assert upload["files"][0]["title"] == "previous log"


async def test_async_clients(slack: Slack) -> None:
    webhook = AsyncWebhookClient(slack.webhook_url, timeout=5)
    assert (await webhook.send(text="async hook")).status_code == 200
    client = AsyncWebClient(token=slack.token, base_url=slack.api_url, timeout=5)
    sent = await client.chat_postMessage(channel="ops", text="async api")
    assert sent["channel"] == "C0OPS"
    done = await client.files_upload_v2(channel="C0OPS", content="abc", filename="a.log")
    assert done["ok"]
    texts = [m["text"] for m in slack.receiver.snapshot()["messages"]]
    assert texts[:2] == ["async hook", "async api"]


def test_page_lists_messages(slack: Slack) -> None:
    WebhookClient(slack.webhook_url, timeout=5).send(text="<visible on page>")
    page = httpx.get(slack.url + "/", timeout=5)
    assert page.status_code == 200
    assert "&lt;visible on page&gt;" in page.text
    cleared = httpx.delete(slack.url + "/_admin/messages", timeout=5)
    assert cleared.is_success and slack.receiver.snapshot()["messages"] == []
