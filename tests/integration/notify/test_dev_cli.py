"""`capstan dev slack` as a real child process, driven with slack_sdk."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest
from slack_sdk.webhook import WebhookClient

from capstan.notify import DEV_WEBHOOK_PATH

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_dev_slack_command_serves_webhooks() -> None:
    port = _free_port()
    code = "import sys; from capstan.cli.dev import app; app(sys.argv[1:])"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "slack", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):  # up to ~20 s for the child to listen
            try:
                httpx.get(base + "/_admin/messages", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        response = WebhookClient(f"{base}/services/{DEV_WEBHOOK_PATH}", timeout=5).send(text="from cli")
        assert response.status_code == 200
        assert httpx.get(base + "/_admin/messages", timeout=5).json()["messages"][0]["text"] == "from cli"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert f"{base}/services/{DEV_WEBHOOK_PATH}" in out


def test_dev_slack_command_keeps_attachments_and_checks_configured_hooks() -> None:
    port = _free_port()
    hook = "T0TEAM/B0HOOK/secretsecret01"
    code = "import sys; from capstan.cli.dev import app; app(sys.argv[1:])"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "slack", "--port", str(port), "--webhook", hook, "--max-messages", "10"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):  # up to ~20 s for the child to listen
            try:
                httpx.get(base + "/_admin/messages", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        sent = httpx.post(
            f"{base}/services/{hook}", json={"attachments": [{"pretext": "p", "footer": "f"}]}, timeout=5
        )
        wrong = httpx.post(f"{base}/services/T0TEAM/B0HOOK/wrongwrongwrong", json={"text": "x"}, timeout=5)
        [message] = httpx.get(base + "/_admin/messages", timeout=5).json()["messages"]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert (sent.status_code, wrong.status_code, wrong.text) == (200, 403, "invalid_token")
    assert message["attachments"] == [{"pretext": "p", "footer": "f"}]
    assert f"{base}/services/{hook}" in out


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--webhook", "nope"], "--webhook: 'nope' is not a path T…/B…/secret"),
        (["--max-messages", "0"], "--max-messages: 0 must be at least 1"),
        (["--channel", "C1"], "--channel: 'C1' is not ID=name"),
    ],
)
def test_dev_slack_bad_options_are_one_line(args: list[str], line: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "capstan.cli.main", "dev", "slack", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert line in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
