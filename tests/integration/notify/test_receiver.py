"""The local Slack receiver driven by the real slack_sdk clients over loopback."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook import WebhookClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from capstan.notify import DEV_TOKEN, DEV_WEBHOOK_PATH, ReceiverConfig, SlackReceiver, serve_in_thread
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


# ---- every part Slack keeps, and what Slack refuses (issue 23 §6) ------------------------------------------
AIRWALLEX_ATTACHMENT: dict[str, Any] = {
    "color": "#4599DF",
    "pretext": "*Pod restarted!*\n*cluster: `bench`, pod: `web-1`, namespace: `storm`*",
    "text": "```NAME  READY  STATUS```\n• Reason: `OOMKilled (ExitCode 137)`",
    "footer": "bench, web-1, storm",
    "mrkdwn_in": ["text", "pretext"],
    "ts": 1700000000,
    "blocks": None,  # slack-go sends null blocks inside attachments; Slack accepts it
}


def test_webhook_keeps_an_attachments_only_message_and_it_is_accounted(slack: Slack) -> None:
    """What the airwallex collector sends; before, the receiver answered 200 and kept nothing of it."""
    from capstan.restarts import AIRWALLEX_PATTERN, account, messages_from_slack_receiver

    body = {
        "username": "k8s-pod-restart-info-collector",
        "channel": "restart-info-nonprod",
        "icon_emoji": ":kubernetes:",
        "attachments": [AIRWALLEX_ATTACHMENT],
    }
    response = httpx.post(slack.webhook_url, json=body, timeout=5)
    assert (response.status_code, response.text) == (200, "ok")
    [message] = slack.receiver.snapshot()["messages"]
    assert message["attachments"] == [{k: v for k, v in AIRWALLEX_ATTACHMENT.items() if v is not None}]
    assert (message["username"], message["icon_emoji"]) == ("k8s-pod-restart-info-collector", ":kubernetes:")
    assert (message["channel"], message["requested_channel"]) == ("C0ALERTS", "restart-info-nonprod")
    assert "OOMKilled (ExitCode 137)" in message["plain_text"]
    result = account(
        [("storm", "web-1", "main", 1)],
        messages_from_slack_receiver(slack.receiver.snapshot()),
        AIRWALLEX_PATTERN,
    )
    assert result.accounted == 1


def test_slack_sdk_attachments_and_every_block_type_round_trip(slack: Slack) -> None:
    from tests.unit.notify.test_slack_message import EVERY_BLOCK

    attachment = {
        "fallback": "fb", "color": "good", "pretext": "pre", "author_name": "author", "title": "title",
        "title_link": "https://example.com/t", "text": "body", "fields": [{"title": "k", "value": "v", "short": True}],
        "image_url": "https://example.com/i.png", "thumb_url": "https://example.com/th.png", "footer": "foot",
        "ts": 1700000000, "blocks": [_section("inside an attachment")],
    }  # fmt: skip
    sent = WebhookClient(slack.webhook_url, timeout=5).send(
        text="fallback text", blocks=EVERY_BLOCK, attachments=[attachment]
    )
    assert sent.status_code == 200, sent.body
    client = WebClient(token=slack.token, base_url=slack.api_url, timeout=5)
    posted = client.chat_postMessage(
        channel="alerts", attachments=[attachment], username="bot", icon_url="https://example.com/icon.png"
    )
    assert posted["message"]["attachments"] == [attachment]
    reply = client.chat_postMessage(
        channel="alerts", markdown_text="**markdown only**", thread_ts=posted["ts"]
    )
    hook, api, thread = slack.receiver.snapshot()["messages"]
    assert hook["blocks"] == EVERY_BLOCK and hook["attachments"] == [attachment]
    assert api["attachments"] == [attachment] and api["icon_url"] == "https://example.com/icon.png"
    assert (thread["markdown_text"], thread["thread_ts"]) == ("**markdown only**", posted["ts"])
    assert reply["ok"]
    for text in ("video title", "cell a", "inside an attachment", "pre", "foot", "k", "v"):
        assert text in hook["plain_text"].split("\n")


def test_form_encoded_calls_carry_json_arguments(slack: Slack) -> None:
    hook = httpx.post(
        slack.webhook_url, data={"payload": json.dumps({"attachments": [AIRWALLEX_ATTACHMENT]})}, timeout=5
    )
    assert (hook.status_code, hook.text) == (200, "ok")
    multipart = httpx.post(
        slack.webhook_url, files={"payload": (None, json.dumps({"text": "multipart"}))}, timeout=5
    )
    assert multipart.status_code == 200
    api = httpx.post(
        slack.api_url + "chat.postMessage",
        data={
            "token": slack.token,
            "channel": "alerts",
            "attachments": json.dumps([{"text": "form attachment"}]),
        },
        timeout=5,
    )
    assert api.json()["ok"]
    messages = slack.receiver.snapshot()["messages"]
    assert [m["plain_text"].split("\n")[0] for m in messages] == [
        AIRWALLEX_ATTACHMENT["pretext"].split("\n")[0], "multipart", "form attachment",
    ]  # fmt: skip


def _nested(depth: int) -> str:
    return '{"text": "x", "blocks": ' + "[" * depth + "]" * depth + "}"


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"attachments": [{"text": "a"}] * 101}, 400, "too_many_attachments"),
        ({"attachments": "not an array"}, 400, "invalid_payload"),
        ({"attachments": [{"blocks": [{"type": "bogus"}]}]}, 400, "invalid_blocks"),
        (
            {"text": "x", "blocks": [{"type": "image", "image_url": "https://example.com/x.png"}]},
            400,
            "invalid_blocks",
        ),
        ({"text": "x", "blocks": [{"type": "rich_text"}]}, 400, "invalid_blocks"),
        ({"blocks": [{"type": "markdown", "text": "m" * 12_001}]}, 400, "invalid_blocks"),
        ({"blocks": [{**_section("a"), "block_id": "b" * 256}]}, 400, "invalid_blocks"),
        ({"attachments": []}, 400, "no_text"),
        ("not json at all", 400, "invalid_payload"),
        (_nested(100_000), 400, "invalid_payload"),
    ],
)
def test_webhook_refuses_what_slack_refuses(slack: Slack, body: Any, status: int, error: str) -> None:
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    response = httpx.post(
        slack.webhook_url, content=content, headers={"Content-Type": "application/json"}, timeout=10
    )
    assert (response.status_code, response.text) == (status, error)
    assert slack.receiver.snapshot()["messages"] == []
    assert slack.receiver.snapshot()["rejected"][-1]["error"] == error


@pytest.mark.parametrize(
    ("content_type", "body", "auth", "error"),
    [
        ("text/html", b"<p>x</p>", True, "invalid_post_type"),
        (None, b"channel=alerts&text=x", True, "missing_post_type"),
        ("application/json", b"[1, 2]", True, "json_not_object"),
        ("application/json", b"{not json", True, "invalid_json"),
        ("application/json; charset=ebcdic", b'{"channel": "alerts", "text": "x"}', True, "invalid_charset"),
        ("application/json", b'{"channel": "alerts", "text": "x", "token": "xoxb-capstan-dev-token"}', False,
         "not_authed"),
        ("application/x-www-form-urlencoded", b"channel=alerts&text=%FF%FE", True, "invalid_form_data"),
        ("application/x-www-form-urlencoded", b"channel=alerts&text=\xff\xfe", True, "invalid_form_data"),
        ("multipart/form-data; boundary=zz", b"--zz\r\nnot a part", True, "invalid_form_data"),
        ("application/x-www-form-urlencoded", b"channel=alerts&attachments=%5B%7B", True, "invalid_arguments"),
        ("application/x-www-form-urlencoded", b"channel=alerts&blocks=%5B%7B", True, "invalid_blocks_format"),
        ("application/x-www-form-urlencoded", b"channel=alerts&text=x&metadata=%5B%5D", True,
         "invalid_metadata_format"),
        ("application/json", json.dumps({"channel": "alerts", "attachments": [{"text": "a"}] * 101}).encode(), True,
         "too_many_attachments"),
        ("application/json", json.dumps({"channel": "alerts", "text": ["a"]}).encode(), True, "invalid_array_arg"),
        ("application/json", json.dumps({"channel": "alerts", "text": "x", "markdown_text": "y"}).encode(), True,
         "markdown_text_conflict"),
        ("application/json", json.dumps({"channel": "alerts", "markdown_text": "m" * 12_001}).encode(), True,
         "msg_too_long"),
        ("application/json", json.dumps({"channel": "alerts", "attachments": [{"blocks": [{"type": "x"}]}]}).encode(),
         True, "invalid_blocks"),
    ],
)  # fmt: skip
def test_post_message_refuses_what_slack_refuses(
    slack: Slack, content_type: str | None, body: bytes, auth: bool, error: str
) -> None:
    headers = {"Authorization": f"Bearer {slack.token}"} if auth else {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    request = httpx.Request("POST", slack.api_url + "chat.postMessage", content=body, headers=headers)
    assert content_type is not None or "content-type" not in request.headers
    with httpx.Client(timeout=5) as client:
        response = client.send(request)
    assert (response.status_code, response.json()["ok"], response.json()["error"]) == (200, False, error)
    assert slack.receiver.snapshot()["messages"] == []


def test_long_text_is_truncated_and_flagged(slack: Slack) -> None:
    assert WebhookClient(slack.webhook_url, timeout=5).send(text="a" * 40_001).status_code == 200
    [message] = slack.receiver.snapshot()["messages"]
    assert message["truncated"] and len(message["text"]) == 40_000


def test_configured_webhooks_answer_no_team_no_service_invalid_token() -> None:
    receiver = SlackReceiver(ReceiverConfig(webhook_paths=frozenset({"T0TEAM/B0HOOK/secretsecret01"})))
    with serve_in_thread(receiver.app) as server:
        url = server.url + "/services/"
        answers = [
            httpx.post(url + path, json={"text": "x"}, timeout=5)
            for path in (
                "T0TEAM/B0HOOK/secretsecret01",
                "T0OTHER/B0HOOK/secretsecret01",
                "T0TEAM/B0OTHER/secretsecret01",
                "T0TEAM/B0HOOK/wrongwrongwrong",
            )
        ]
    assert [(a.status_code, a.text) for a in answers] == [
        (200, "ok"), (404, "no_team"), (404, "no_service"), (403, "invalid_token"),
    ]  # fmt: skip


def test_receiver_stays_bounded() -> None:
    receiver = SlackReceiver(ReceiverConfig(max_messages=3, max_body_bytes=10_000))
    with serve_in_thread(receiver.app) as server:
        url = f"{server.url}/services/{DEV_WEBHOOK_PATH}"
        for i in range(5):
            assert httpx.post(url, json={"text": f"m{i}"}, timeout=5).status_code == 200
        big = httpx.post(url, json={"text": "x" * 20_000}, timeout=5)
        api = httpx.post(
            server.url + "/api/chat.postMessage",
            json={"channel": "alerts", "text": "x" * 20_000},
            headers={"Authorization": f"Bearer {DEV_TOKEN}"},
            timeout=5,
        )
    snapshot = receiver.snapshot()
    assert [m["text"] for m in snapshot["messages"]] == ["m2", "m3", "m4"] and snapshot["dropped"] == 2
    assert (big.status_code, big.text) == (413, "request_too_large")
    assert (api.status_code, api.json()["error"]) == (413, "request_too_large")


def test_page_renders_attachments_and_files(slack: Slack) -> None:
    httpx.post(
        slack.webhook_url,
        json={"attachments": [{**AIRWALLEX_ATTACHMENT, "fields": [{"title": "<k>", "value": "v"}]}]},
        timeout=5,
    )
    client = WebClient(token=slack.token, base_url=slack.api_url, timeout=5)
    done = client.files_upload_v2(
        channel="C0ALERTS", content="log line\n", filename="web-1.log", title="previous log"
    )
    page = httpx.get(slack.url + "/", timeout=5).text
    for expected in ("*Pod restarted!*", "OOMKilled (ExitCode 137)", "bench, web-1, storm", "&lt;k&gt;", "#4599DF",
                     "web-1.log", "previous log"):  # fmt: skip
        assert expected in page
    file_id = done["file"]["id"]
    assert httpx.get(f"{slack.url}/_admin/files/{file_id}", timeout=5).text == "log line\n"
