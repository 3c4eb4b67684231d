"""``capstan faults eval`` on the session sandbox with the scripted model server (tests/integration/faults/
_scripted_model.py): one quick scenario (a crash loop) played by both arms, through the CLI, checks the plumbing
(the tools offered, the calls made against the live state, the redacted answers handed back) and the score; a
model that answers HTTP 503 fails the scenario with one line; the other bad answers are one line each."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from capstan.cli.main import main
from capstan.faults import ModelError, OpenAIChat
from capstan.sandbox import Sandbox, free_port
from tests.integration.faults._scripted_model import ScriptedModel, serve

pytestmark = pytest.mark.integration

SCENARIO = "crashloop-connection-refused"


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def eval_args(url: str, kubeconfig: Path, sandbox: Sandbox, *more: str) -> list[str]:
    return [
        "faults",
        "eval",
        SCENARIO,
        "--model-url",
        url,
        "--model",
        "scripted",
        "--kubeconfig",
        str(kubeconfig),
        "--log-dir",
        str(sandbox.directory / "pod-logs"),
        "-o",
        "json",
        *more,
    ]


def test_both_arms_diagnose_a_crash_loop_with_the_scripted_model(
    capsys: pytest.CaptureFixture[str], kubeconfig: Path, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedModel()
    monkeypatch.setenv("SCRIPTED_MODEL_KEY", "sk-scripted-0042")
    with serve(model) as url:
        code, out, err = run_cli(
            capsys,
            *eval_args(url, kubeconfig, sandbox, "--api-key-env", "SCRIPTED_MODEL_KEY", "--time-limit", "60"),
        )
    assert code == 0, out + err
    doc = json.loads(out)
    mcp, shell = doc["results"]
    ns = mcp["namespace"]
    assert ns.startswith(f"fault-{SCENARIO}-") and shell["namespace"] == ns
    assert (mcp["arm"], mcp["passed"], mcp["turns"]) == ("mcp", True, 2), mcp
    assert mcp["tool_calls"] == [f'problems {{"namespace": "{ns}"}}']
    assert mcp["answer"].startswith("Pod/payments: ") and "connection refused" in mcp["answer"]
    assert (shell["arm"], shell["passed"], shell["turns"]) == ("shell", True, 4), shell
    assert shell["tool_calls"] == [
        f'kubectl {{"args": "get pods -n {ns}"}}',
        f'kubectl {{"args": "describe pod payments -n {ns}"}}',
        f'kubectl {{"args": "logs payments -n {ns} --previous"}}',
    ]
    assert "connection refused" in shell["answer"]
    assert doc["arms"]["mcp"]["accuracy"] == 1.0 and doc["arms"]["shell"]["accuracy"] == 1.0
    assert doc["model"] == "scripted" and doc["time_limit_s"] == 60.0

    # what the model was offered and shown
    offered = [sorted(t["function"]["name"] for t in r["tools"]) for r in model.requests]
    assert "problems" in offered[0] and len(offered[0]) > 1
    assert offered[2:] == [["kubectl"]] * 4
    assert all(h["authorization"] == "Bearer sk-scripted-0042" for h in model.headers)
    problems = json.loads(model.requests[1]["messages"][-1]["content"])
    assert problems["findings"][0]["objects"][0] == {"kind": "Pod", "namespace": ns, "name": "payments"}
    listing = model.requests[3]["messages"][-1]["content"]
    assert listing.splitlines()[0].split()[:2] == ["NAME", "READY"] and "payments" in listing
    described = model.requests[4]["messages"][-1]["content"]
    assert "Name:" in described and "Last State:" in described and "Restart Count:" in described


def test_a_failing_model_fails_the_scenario_with_one_line(
    capsys: pytest.CaptureFixture[str], kubeconfig: Path, sandbox: Sandbox
) -> None:
    model = ScriptedModel()
    with serve(model) as url:
        args = eval_args(f"{url}/status/503", kubeconfig, sandbox, "--tools", "mcp")
        args[args.index("json")] = "text"
        code, out, err = run_cli(capsys, *args)
    text = " ".join(out.split())  # the tables wrap at the terminal's width
    assert code == 1 and "Traceback" not in out + err
    assert f"{SCENARIO} [mcp]: failed" in text
    assert "the model answered HTTP 503: scripted failure" in text
    assert "Per arm" in text and "0/1" in text


async def ask(url: str) -> str:
    async with OpenAIChat(url, "scripted") as chat:
        with pytest.raises(ModelError) as err:
            await chat.complete([{"role": "user", "content": "hi"}], [], timeout_s=5)
    return str(err.value)


async def test_bad_answers_and_no_server_are_one_line_each() -> None:
    with serve(ScriptedModel()) as url:
        assert await ask(f"{url}/text") == (
            "the model answered HTTP 200 with a body that is not JSON: '<html>not json</html>'"
        )
        assert await ask(f"{url}/other/v1") == "not an OpenAI chat completion: no choices"
        assert await ask(f"{url}/status/404") == "the model answered HTTP 404: scripted failure"
    port = free_port()
    with socket.socket() as s:  # the port is free and nothing listens on it
        s.bind(("127.0.0.1", port))
        message = await ask(f"http://127.0.0.1:{port}")
    assert message.startswith(f"the model at http://127.0.0.1:{port}/v1/chat/completions is unreachable")
    assert "\n" not in message
