"""The streamable HTTP transport's guard, on the real uvicorn server (``capstan mcp serve --transport http`` on
loopback): Host and Origin checks against DNS rebinding (421, 403), a body over the limit (413), a bearer token
when one is configured (401 with a JSON body otherwise) and required off loopback (the command refuses to start),
and a request that does not finish in time (504 or closed)."""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from capstan.mcp import TOOLS
from tests.integration.mcp.calls import http_server, server_command, server_env, text_of

pytestmark = pytest.mark.integration

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def post(url: str, content: bytes | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
    """POST ``content`` (default: an initialize request) with the MCP headers and ``headers``."""
    data = content if content is not None else json.dumps(INITIALIZE).encode()
    return httpx.post(url, content=data, headers=HEADERS | (headers or {}), timeout=30)


def test_host_and_origin_are_checked_against_dns_rebinding(kubeconfig: Path) -> None:
    with http_server("--kubeconfig", str(kubeconfig), "--allowed-origin", "https://agent.example") as server:
        port = urlsplit(server.url).port
        assert post(server.url).status_code == 200  # loopback Host, no Origin (a local agent)
        assert post(server.url, headers={"Host": f"localhost:{port}"}).status_code == 200
        # a name the attacker's DNS points at 127.0.0.1
        rebound = post(server.url, headers={"Host": f"evil.example:{port}"})
        assert rebound.status_code == 421, rebound.text
        assert post(server.url, headers={"Origin": "http://evil.example"}).status_code == 403
        assert post(server.url, headers={"Origin": f"http://evil.example:{port}"}).status_code == 403
        assert post(server.url, headers={"Origin": f"http://127.0.0.1:{port}"}).status_code == 200
        assert (
            post(server.url, headers={"Origin": "https://agent.example"}).status_code == 200
        )  # --allowed-origin


def test_a_body_over_the_limit_is_413_declared_or_streamed(kubeconfig: Path) -> None:
    big = json.dumps(INITIALIZE | {"pad": "x" * (1024 * 1024 + 1)}).encode()
    with http_server("--kubeconfig", str(kubeconfig)) as server:
        declared = post(server.url, content=big)
        assert declared.status_code == 413, declared.text
        streamed = httpx.post(server.url, content=iter([big[:1000], big[1000:]]), headers=HEADERS, timeout=30)
        assert streamed.status_code == 413, streamed.text  # chunked, no Content-Length: cut while it is read
        assert post(server.url).status_code == 200  # and the server goes on


def test_off_loopback_without_a_token_the_command_exits_2_with_one_line(kubeconfig: Path) -> None:
    proc = subprocess.run(
        server_command(
            "--transport", "http", "--host", "0.0.0.0", "--port", "0", "--kubeconfig", str(kubeconfig)
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=server_env(),
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("capstan: error: mcp serve: --host '0.0.0.0' is not a loopback address")
    assert "--token-file" in line and proc.stdout == ""


async def test_with_a_token_file_no_or_wrong_token_is_401_and_the_right_one_works(
    kubeconfig: Path, tmp_path: Path
) -> None:
    token = secrets.token_hex(32)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    with http_server("--kubeconfig", str(kubeconfig), "--token-file", str(token_file)) as server:
        assert any("bearer token required" in line for line in server.stderr)
        for headers in ({}, {"Authorization": f"Bearer {secrets.token_hex(32)}"}, {"Authorization": token}):
            refused = await asyncio.to_thread(post, server.url, None, headers)
            assert refused.status_code == 401
            assert refused.headers["content-type"] == "application/json"
            assert refused.headers["www-authenticate"] == "Bearer"
            assert "bearer token" in refused.json()["error"] and token not in refused.text
        right = await asyncio.to_thread(post, server.url, None, {"Authorization": f"Bearer {token}"})
        assert right.status_code == 200
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with http, Client(streamable_http_client(server.url, http_client=http)) as client:
            assert [t.name for t in (await client.list_tools()).tools] == [s.name for s in TOOLS]
            overview = await client.call_tool("overview", {})
            assert not overview.is_error and json.loads(text_of(overview))["tokens"] > 0


def test_a_request_that_does_not_finish_in_time_is_504_or_closed(kubeconfig: Path) -> None:
    with http_server("--kubeconfig", str(kubeconfig), "--request-timeout", "0.5") as server:
        parts = urlsplit(server.url)
        assert parts.hostname is not None and parts.port is not None
        with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
            head = (
                f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
                "Content-Length: 1000\r\n\r\n"
            )
            sock.sendall(head.encode() + b'{"jsonrpc": "2.0", ')  # and never the rest of the body
            started = time.monotonic()
            answer = b""
            while not answer.endswith(b"}") and time.monotonic() - started < 10:
                chunk = sock.recv(4096)
                if not chunk:
                    break  # closed
                answer += chunk
            waited = time.monotonic() - started
        assert waited < 5, f"the server held the stalled request {waited:.1f} s"
        if answer:
            status_line = answer.split(b"\r\n", 1)[0]
            assert status_line == b"HTTP/1.1 504 Gateway Timeout", answer[:300]
            assert b"longer than 0.5 s" in answer
        assert post(server.url).status_code == 200  # the server goes on
