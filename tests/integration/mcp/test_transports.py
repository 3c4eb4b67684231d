"""``capstan mcp serve`` end to end against the real control plane: the official SDK's client over stdio and
over streamable HTTP calls every tool over a crash-looping Deployment (history tools say there is no store, and
answer with one), the MCP Inspector CLI from npm lists and calls tools over both transports, and stdout carries
nothing but JSON-RPC."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters

from capstan.faults import Kubelet
from capstan.kube import KubeClient
from capstan.mcp import TOOLS
from capstan.sandbox import Sandbox
from capstan.store import open_store
from tests.integration.mcp.calls import (
    SAMPLES,
    Scene,
    call_every_tool,
    crashing_deployment,
    http_server,
    samples_for,
    server_command,
    server_env,
)

pytestmark = pytest.mark.integration


def _cache_root() -> Path:
    """Where scripts/bootstrap.sh caches tools, as capstan.sandbox's builds do."""
    if os.environ.get("CAPSTAN_CACHE_DIR"):
        return Path(os.environ["CAPSTAN_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "capstan"


INSPECTOR = _cache_root() / "npm/node_modules/.bin/inspector"  # scripts/bootstrap.sh installs it


def stdio_params(*args: str) -> StdioServerParameters:
    command = server_command("--transport", "stdio", *args)
    return StdioServerParameters(command=command[0], args=command[1:], env=server_env())


def empty_store(path: Path) -> str:
    store = open_store(str(path))
    store.close()
    return str(path)


@pytest.fixture
async def scene(kube: KubeClient, namespace: str, sandbox: Sandbox) -> Scene:
    return await crashing_deployment(kube, Kubelet(kube, sandbox.directory / "pod-logs"), namespace)


def test_every_tool_has_a_sample_call_that_its_arguments_accept() -> None:
    scene = Scene("shop", "web", "web-1")
    for spec, arguments in samples_for(scene):
        spec.args.model_validate(arguments)  # a sample the tool rejects would test nothing
    assert set(SAMPLES) >= {spec.name for spec in TOOLS}


def test_the_docs_table_names_every_tool() -> None:
    docs = (Path(__file__).resolve().parents[3] / "docs" / "mcp.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", docs, flags=re.MULTILINE))
    missing = [spec.name for spec in TOOLS if spec.name not in documented]
    assert not missing, f"docs/mcp.md: add {', '.join(missing)} to the tools table"


async def test_stdio_every_tool_answers_and_history_tools_name_the_missing_store(
    scene: Scene, kubeconfig: Path
) -> None:
    async with Client(stdio_params("--kubeconfig", str(kubeconfig))) as client:
        answers = await call_every_tool(client, scene, store=False)
        # the crash loop is what the first calls show
        assert scene.pod in json.dumps(answers["problems"])
        assert scene.pod in json.dumps(answers["overview"])
        assert "BackOff" in json.dumps(answers["events"])


async def test_stdio_with_a_store_the_history_tools_answer(
    scene: Scene, kubeconfig: Path, tmp_path: Path
) -> None:
    store = empty_store(tmp_path / "history.db")
    async with Client(stdio_params("--kubeconfig", str(kubeconfig), "--store", store)) as client:
        await call_every_tool(client, scene, store=True)


async def test_http_every_tool_answers_with_and_without_a_store(
    scene: Scene, kubeconfig: Path, tmp_path: Path
) -> None:
    with http_server("--kubeconfig", str(kubeconfig)) as server:
        assert server.url.startswith("http://127.0.0.1:")
        async with Client(server.url) as client:
            answers = await call_every_tool(client, scene, store=False)
            assert scene.pod in json.dumps(answers["problems"])
    store = empty_store(tmp_path / "history.db")
    with socket.socket() as s:  # a free port for the probes
        s.bind(("127.0.0.1", 0))
        probe = s.getsockname()[1]
    with http_server("--kubeconfig", str(kubeconfig), "--store", store, "--probe-port", str(probe)) as server:
        async with Client(server.url) as client:
            await call_every_tool(client, scene, store=True)
        # the probes answer on their own port, without the bearer token or the Host checks of /mcp
        async with httpx.AsyncClient(timeout=10) as http:
            ready = await http.get(f"http://127.0.0.1:{probe}/readyz")
            assert (await http.get(f"http://127.0.0.1:{probe}/healthz")).text == "ok\n"
        assert ready.status_code == 200 and ready.text == "[+]cluster ok\n[+]store ok\nreadyz check passed\n"


def _jsonrpc(method: str, params: dict[str, Any], id_: int | None) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if id_ is not None:
        message["id"] = id_
    return json.dumps(message) + "\n"


async def test_stdio_stdout_holds_nothing_but_json_rpc(scene: Scene, kubeconfig: Path) -> None:
    """Raw framing: every line the server writes on stdout is one JSON-RPC 2.0 message; logs go to stderr."""
    lines = [
        _jsonrpc(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
            1,
        ),
        _jsonrpc("notifications/initialized", {}, None),
        _jsonrpc("tools/list", {}, 2),
        *(
            _jsonrpc("tools/call", {"name": spec.name, "arguments": arguments}, 10 + i)
            for i, (spec, arguments) in enumerate(samples_for(scene))
        ),
        _jsonrpc("tools/call", {"name": "overview", "arguments": {"nope": 1}}, 99),  # a JSON-RPC error
    ]
    wanted = {1, 2, 99, *(10 + i for i in range(len(TOOLS)))}

    def run() -> subprocess.CompletedProcess[str]:
        proc = subprocess.Popen(
            server_command("--kubeconfig", str(kubeconfig)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=server_env(),
        )
        assert proc.stdin is not None and proc.stdout is not None
        out: list[str] = []
        for line in lines:  # one request at a time: the answer before the next, then stdin closes
            proc.stdin.write(line)
            proc.stdin.flush()
            id_ = json.loads(line).get("id")
            while id_ is not None:
                got = proc.stdout.readline()
                if not got:
                    break
                out.append(got)
                if json.loads(got).get("id") == id_:
                    break
        rest, err = proc.communicate(timeout=30)  # closes stdin: the server ends
        return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(out) + rest, err)

    done = await asyncio.to_thread(run)
    assert done.returncode == 0, done.stderr[-2000:]
    messages = [json.loads(line) for line in done.stdout.splitlines()]  # a non-JSON line fails here
    assert all(m.get("jsonrpc") == "2.0" for m in messages)
    assert {m["id"] for m in messages if "id" in m} == wanted
    error = next(m for m in messages if m.get("id") == 99)
    assert error["error"]["code"] == -32602 and "nope" in error["error"]["message"]


# ---- the MCP Inspector CLI (npm), an external client ------------------------------------------------------------
def inspector(*args: str, tmp_path: Path) -> Any:
    if not INSPECTOR.exists():
        pytest.fail(f"{INSPECTOR} is missing: run scripts/bootstrap.sh (it installs the MCP Inspector)")
    env = server_env(MCP_CATALOG_PATH=str(tmp_path / "inspector-catalog.json"))
    # the Inspector starts a stdio server with a minimal environment: hand it this checkout's PYTHONPATH, or the
    # server would run whatever capstan the interpreter finds installed
    passed = [f"PYTHONPATH={env['PYTHONPATH']}"] if env.get("PYTHONPATH") else []
    proc = subprocess.run(
        [str(INSPECTOR), "--cli", *(arg for kv in passed for arg in ("-e", kv)), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, f"inspector {' '.join(args[-4:])}: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def _check_inspector_answers(listed: Any, called: Any, scene: Scene) -> None:
    assert [t["name"] for t in listed["tools"]] == [spec.name for spec in TOOLS]
    assert all(t["annotations"]["readOnlyHint"] is True for t in listed["tools"])
    assert called.get("isError") is not True
    (block,) = called["content"]
    overview = json.loads(block["text"])
    assert overview["tokens"] > 0 and scene.pod in block["text"]


async def test_inspector_cli_over_stdio(scene: Scene, kubeconfig: Path, tmp_path: Path) -> None:
    assert shutil.which("node"), "the MCP Inspector needs Node.js on PATH"
    command = server_command("--kubeconfig", str(kubeconfig))
    listed = await asyncio.to_thread(inspector, *command, "--method", "tools/list", tmp_path=tmp_path)
    called = await asyncio.to_thread(
        inspector,
        *command,
        "--method",
        "tools/call",
        "--tool-name",
        "overview",
        "--tool-arg",
        f"namespace={scene.namespace}",
        tmp_path=tmp_path,
    )
    _check_inspector_answers(listed, called, scene)


async def test_inspector_cli_over_http_with_a_bearer_token(
    scene: Scene, kubeconfig: Path, tmp_path: Path
) -> None:
    token = secrets.token_hex(32)
    (tmp_path / "token").write_text(token)
    with http_server("--kubeconfig", str(kubeconfig), "--token-file", str(tmp_path / "token")) as server:
        base = (server.url, "--transport", "http", "--header", f"Authorization: Bearer {token}")
        listed = await asyncio.to_thread(inspector, *base, "--method", "tools/list", tmp_path=tmp_path)
        called = await asyncio.to_thread(
            inspector,
            *base,
            "--method",
            "tools/call",
            "--tool-name",
            "overview",
            "--tool-arg",
            f"namespace={scene.namespace}",
            tmp_path=tmp_path,
        )
    _check_inspector_answers(listed, called, scene)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--store", "{tmp}/none.db"), "capstan: error: history store '{tmp}/none.db': no such file"),
        (
            ("--kubeconfig", "{tmp}/none.kubeconfig"),
            "capstan: error: kubeconfig {tmp}/none.kubeconfig: file not found",
        ),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_nothing_on_stdout(
    args: tuple[str, ...], message: str, kubeconfig: Path, tmp_path: Path
) -> None:
    argv = ["--kubeconfig", str(kubeconfig), *(a.format(tmp=tmp_path) for a in args)]
    proc = subprocess.run(
        server_command(*argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(),
    )
    assert proc.returncode == 2 and proc.stdout == ""  # a stdio client reads no stray bytes
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(message.format(tmp=tmp_path))
