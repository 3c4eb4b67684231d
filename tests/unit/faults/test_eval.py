"""The agent evaluation's pure parts: the loop (turn bound, time limit on an injected clock, tool errors handed to
the model), the MCP toolbox over the SDK's in-memory client, the OpenAI response reading and its errors, the
kubectl guard, the answer score and the per-arm summary; and ``capstan faults eval``'s bad input."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from capstan.cli.main import main
from capstan.diagnose import Snapshot
from capstan.faults import (
    Agent,
    EvalResult,
    Expectation,
    McpToolbox,
    ModelError,
    ObjectKey,
    OpenAIChat,
    Refused,
    Reply,
    ToolCall,
    ToolDef,
    kubectl_argv,
    missing_keywords,
    parse_completion,
    score_answer,
    summarize,
)
from capstan.mcp import FixedSource, SnapshotLogs, create_server
from capstan.redact import Redactor


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ScriptedModel:
    """Answers with ``replies`` in order (the last one repeated), advancing ``clock`` by ``step`` per call."""

    def __init__(self, replies: Sequence[Reply | Exception], clock: Clock | None = None, step: float = 0.0):
        self.replies = list(replies)
        self.clock = clock
        self.step = step
        self.seen: list[list[dict[str, Any]]] = []
        self.timeouts: list[float] = []

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolDef], *, timeout_s: float
    ) -> Reply:
        self.seen.append([dict(m) for m in messages])
        self.timeouts.append(timeout_s)
        if self.clock is not None:
            self.clock.now += self.step
        reply = self.replies[min(len(self.seen) - 1, len(self.replies) - 1)]
        if isinstance(reply, Exception):
            raise reply
        return reply


class FakeToolbox:
    def __init__(self, answers: Mapping[str, str | Exception]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def tools(self) -> Sequence[ToolDef]:
        return [ToolDef(n, f"the {n} tool", {"type": "object"}) for n in self.answers]

    async def call(self, name: str, arguments: Mapping[str, Any], *, timeout_s: float) -> str:
        self.calls.append((name, dict(arguments)))
        answer = self.answers[name]
        if isinstance(answer, Exception):
            raise answer
        return answer


def tool_reply(name: str, arguments: str = "{}", call_id: str = "c1") -> Reply:
    return Reply(None, (ToolCall(call_id, name, arguments),))


async def test_a_tool_call_then_an_answer() -> None:
    model = ScriptedModel([tool_reply("problems", '{"namespace": "shop"}'), Reply("Pod/payments: refused")])
    box = FakeToolbox({"problems": "payments: connection refused"})
    run = await Agent(model).run("what is broken in shop?", box)
    assert run.answer == "Pod/payments: refused" and run.error is None
    assert run.turns == 2 and run.tool_calls == ('problems {"namespace": "shop"}',)
    assert box.calls == [("problems", {"namespace": "shop"})]
    second = model.seen[1]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[2]["tool_calls"][0]["function"] == {
        "name": "problems",
        "arguments": '{"namespace": "shop"}',
    }
    assert second[3] == {"role": "tool", "tool_call_id": "c1", "content": "payments: connection refused"}


async def test_the_turn_bound_ends_a_model_that_never_answers() -> None:
    model = ScriptedModel([tool_reply("events")])
    run = await Agent(model, max_turns=3).run("p", FakeToolbox({"events": "none"}))
    assert run.answer is None and run.error == "no answer within 3 turn(s)"
    assert run.turns == 3 and len(model.seen) == 3


async def test_the_time_limit_is_wall_clock_checked_around_every_call() -> None:
    clock = Clock()
    model = ScriptedModel([tool_reply("events")], clock, step=50.0)
    run = await Agent(model, time_limit_s=120, max_turns=10, clock=clock).run(
        "p", FakeToolbox({"events": "x"})
    )
    assert run.error == "time limit of 120s reached before a tool call (after 3 turn(s))"
    assert model.timeouts == [120.0, 70.0, 20.0]  # each model call is given only the time left
    assert run.seconds == 150.0


async def test_the_time_limit_before_a_model_call() -> None:
    clock = Clock()

    class SlowTools(FakeToolbox):
        async def call(self, name: str, arguments: Mapping[str, Any], *, timeout_s: float) -> str:
            clock.now += 200
            return "slow"

    run = await Agent(ScriptedModel([tool_reply("events")]), clock=clock).run("p", SlowTools({"events": ""}))
    assert run.error == "time limit of 120s reached before a model call (after 1 turn(s))"


async def test_tool_errors_and_bad_arguments_are_the_models_to_read() -> None:
    model = ScriptedModel(
        [
            Reply(None, (ToolCall("a", "broken", "{}"), ToolCall("b", "broken", "{not json"))),
            tool_reply("broken", "[1, 2]", "c"),
            Reply("done"),
        ]
    )
    run = await Agent(model).run("p", FakeToolbox({"broken": RuntimeError("API server unreachable")}))
    assert run.answer == "done"
    tool_texts = [m["content"] for m in model.seen[2] if m["role"] == "tool"]
    assert tool_texts[0] == "error: RuntimeError: API server unreachable"
    assert tool_texts[1].startswith("error: the arguments of broken are not JSON")
    assert tool_texts[2] == "error: the arguments of broken must be a JSON object"


async def test_a_model_error_ends_the_run_with_its_line() -> None:
    run = await Agent(ScriptedModel([ModelError("the model answered HTTP 503: busy")])).run(
        "p", FakeToolbox({})
    )
    assert run.answer is None and run.error == "the model answered HTTP 503: busy" and run.turns == 1


async def test_an_empty_answer_is_an_error() -> None:
    run = await Agent(ScriptedModel([Reply("  ")])).run("p", FakeToolbox({}))
    assert run.error == "the model answered with neither text nor a tool call"


async def test_tool_calls_of_one_turn_are_bounded() -> None:
    many = tuple(ToolCall(f"c{i}", "events", "{}") for i in range(20))
    model = ScriptedModel([Reply(None, many), Reply("ok")])
    box = FakeToolbox({"events": "e"})
    run = await Agent(model).run("p", box)
    assert len(box.calls) == 16 and len(run.tool_calls) == 16
    answers = [m for m in model.seen[1] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answers] == [f"c{i}" for i in range(20)]
    assert answers[-1]["content"] == "error: not run: at most 16 tool calls are run per turn"


async def test_a_long_tool_answer_is_cut() -> None:
    model = ScriptedModel([tool_reply("logs"), Reply("ok")])
    await Agent(model, max_tool_chars=100).run("p", FakeToolbox({"logs": "x" * 1000}))
    content = model.seen[1][-1]["content"]
    assert content.startswith("x" * 100) and content.endswith("(900 more characters left off)")


def crashing_pod() -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "payments", "namespace": "shop", "uid": "u1"},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "shop:1"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "app",
                    "restartCount": 4,
                    "ready": False,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"reason": "Error", "exitCode": 3}},
                }
            ],
        },
    }


async def test_the_mcp_toolbox_translates_tools_and_turns_an_mcp_error_into_text() -> None:
    from mcp import Client

    snap = Snapshot(objects={"Pod": [crashing_pod()]}, observed_at=1_764_583_200.0)
    server = create_server(FixedSource(snap), SnapshotLogs(snap.logs), redactor=Redactor())
    async with Client(server) as client:
        box = McpToolbox(client)
        tools = {t.name: t for t in await box.tools()}
        assert "problems" in tools and "overview" in tools
        assert tools["problems"].parameters["type"] == "object"
        assert "namespace" in tools["problems"].parameters["properties"]
        assert tools["problems"].to_openai()["function"]["name"] == "problems"
        model = ScriptedModel(
            [
                tool_reply("problems", '{"namespace": "shop", "colour": "red"}', "bad"),
                tool_reply("problems", '{"namespace": "shop"}', "good"),
                Reply("Pod payments crash-loops"),
            ]
        )
        run = await Agent(model).run("p", box)
    assert run.answer == "Pod payments crash-loops"
    bad, good = (m["content"] for m in model.seen[2] if m["role"] == "tool")
    assert bad.startswith("error: ") and "colour" in bad
    assert json.loads(good)["findings"][0]["objects"][0]["name"] == "payments"


EXPECT = Expectation(
    object=ObjectKey(kind="Pod", name="payments"), category="networking", keywords=["connection refused"]
)


def test_score_answer_right_and_wrong() -> None:
    assert score_answer(EXPECT, "Pod PAYMENTS: the database's Connection Refused").passed
    wrong = score_answer(EXPECT, "Pod payments is out of memory")
    assert not wrong.passed and wrong.missing == ("connection refused",)
    other = score_answer(EXPECT, "Pod orders: connection refused")
    assert not other.passed and other.missing == ("payments",)
    assert score_answer(EXPECT, None).missing == ("payments", "connection refused")
    generated = Expectation(
        object=ObjectKey(kind="Pod", name="web-*"), category="runtime", keywords=["OOMKilled"]
    )
    assert score_answer(generated, "pod web-7d9c8-x12 was OOMKilled").passed


def test_missing_keywords_is_the_scores_rule() -> None:
    assert missing_keywords(["Exit 137", "oom"], "exit 137 after OOM") == ()
    assert missing_keywords(["b", "a", "c"], "c only") == ("b", "a")


def test_parse_completion_reads_text_and_tool_calls() -> None:
    body = {
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "x",
                            "type": "function",
                            "function": {"name": "logs", "arguments": '{"a": 1}'},
                        },
                        {"type": "function", "function": {"name": "events", "arguments": {"n": "s"}}},
                    ],
                }
            }
        ]
    }
    reply = parse_completion(body)
    assert reply.text is None
    assert reply.tool_calls == (ToolCall("x", "logs", '{"a": 1}'), ToolCall("call_1", "events", '{"n": "s"}'))
    assert parse_completion({"choices": [{"message": {"content": "hi"}}]}) == Reply("hi")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1, 2], "not an OpenAI chat completion: the answer is not a JSON object"),
        ({"object": "list"}, "not an OpenAI chat completion: no choices"),
        ({"error": {"message": "model  not\nfound"}}, "the model answered an error: model not found"),
        ({"choices": [{"text": "x"}]}, "not an OpenAI chat completion: choices[0] has no message"),
        (
            {"choices": [{"message": {"content": 3}}]},
            "not an OpenAI chat completion: message.content is not text",
        ),
        (
            {"choices": [{"message": {"tool_calls": [{"function": {}}]}}]},
            "not an OpenAI chat completion: tool_calls[0] has no function name",
        ),
    ],
)
def test_parse_completion_refuses_what_is_not_a_chat_completion(body: Any, message: str) -> None:
    with pytest.raises(ModelError) as err:
        parse_completion(body)
    assert str(err.value) == message


async def ask(handler: Any, url: str = "http://model.test", api_key: str | None = None) -> Reply:
    async with OpenAIChat(url, "m", api_key=api_key, transport=httpx.MockTransport(handler)) as chat:
        return await chat.complete([{"role": "user", "content": "hi"}], [], timeout_s=5)


async def test_openai_chat_posts_the_conversation_with_the_key() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"choices": [{"message": {"content": "fine"}}]})

    assert await ask(handler, "http://model.test/v1/", api_key="sk-test-123") == Reply("fine")
    assert str(seen[0].url) == "http://model.test/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sk-test-123"
    assert json.loads(seen[0].content) == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.0,
    }


@pytest.mark.parametrize(
    ("response", "message"),
    [
        (httpx.Response(500, text="boom\nsk-test-123"), "the model answered HTTP 500: boom [key]"),
        (httpx.Response(404, json={"error": "no"}), 'the model answered HTTP 404: {"error":"no"}'),
        (
            httpx.Response(200, text="<html>"),
            "the model answered HTTP 200 with a body that is not JSON: '<html>'",
        ),
    ],
)
async def test_openai_chat_errors_are_one_line(response: httpx.Response, message: str) -> None:
    with pytest.raises(ModelError) as err:
        await ask(lambda request: response, api_key="sk-test-123")
    assert str(err.value) == message


async def test_openai_chat_unreachable_is_one_line() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    with pytest.raises(ModelError) as err:
        await ask(handler)
    assert (
        str(err.value)
        == "the model at http://model.test/v1/chat/completions is unreachable: connection refused"
    )


@pytest.mark.parametrize(
    "args",
    [
        "get pods -n shop",
        "kubectl describe pod payments -n shop",
        "logs payments -c app -p -n shop --tail=50",
        "get pods -A -owide",
        "events -n shop --for pod/payments",
        "auth can-i list pods -n shop",
        "get deploy,svc,cm -n shop -o yaml",
        "top pods -n shop",
    ],
)
def test_kubectl_read_commands_run(args: str) -> None:
    argv = kubectl_argv(args)
    assert argv[0] != "kubectl" and argv


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ("delete pod payments", "only read commands run"),
        ("apply -f x.yaml", "only read commands run"),
        ("auth whoami", "only `auth can-i`"),
        ("get secret db -o yaml", "Secrets are not shown"),
        ("get pods,secrets -n shop", "Secrets are not shown"),
        ("describe secrets/db", "Secrets are not shown"),
        ("get secret.v1 -n shop", "Secrets are not shown"),
        ("get --raw /api/v1/namespaces/shop/secrets", "--raw is not allowed"),
        ("get pods --kubeconfig=/etc/other", "--kubeconfig is not allowed"),
        ("get pods --as=system:admin", "--as is not allowed"),
        ("get pods -w", "-w is not allowed"),
        ("get pods -Aw", "-w is not allowed"),
        ("logs payments -f", "-f is not allowed"),
        ("get pods -s https://elsewhere", "-s is not allowed"),
        ("get pods --v=9", "--v is not allowed"),
        ("get pods -o go-template-file=/etc/passwd", "reading local files"),
        ("get pods -ojsonpath-file=/etc/passwd", "reading local files"),
        ("", "no command"),
        ("get 'pods", "do not parse"),
    ],
)
def test_kubectl_anything_else_is_refused(args: str, why: str) -> None:
    with pytest.raises(Refused) as err:
        kubectl_argv(args)
    assert why in str(err.value)


def test_summarize_per_arm() -> None:
    results = [
        EvalResult("a", "shell", "ns-a", True, seconds=3.0),
        EvalResult("a", "mcp", "ns-a", True, seconds=1.0),
        EvalResult("b", "mcp", "ns-b", False, error="the model answered HTTP 500: x", seconds=2.0),
        EvalResult("c", "mcp", "ns-c", False, missing=("payments",), seconds=4.0),
    ]
    s = summarize(results)
    assert list(s) == ["mcp", "shell"]
    assert s["mcp"] == {
        "scenarios": 3,
        "passed": 1,
        "accuracy": 0.3333,
        "errors": 1,
        "seconds_total": 7.0,
        "seconds_median": 2.0,
    }
    assert s["shell"]["accuracy"] == 1.0
    assert results[3].reason == "the answer lacks 'payments'"
    assert results[2].to_json()["reason"] == "the model answered HTTP 500: x"


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def test_eval_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAPSTAN_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    base = ("faults", "eval", "--model", "m", "crashloop-connection-refused")
    code, err = run_cli(capsys, *base, "--model-url", "ftp://x")
    assert (
        code == 2
        and err.strip() == "capstan: error: --model-url must be an http:// or https:// URL, not 'ftp://x'"
    )
    code, err = run_cli(
        capsys, *base, "--model-url", "http://127.0.0.1:9", "--api-key-env", "NO_SUCH_KEY_VAR"
    )
    assert code == 2
    assert (
        err.strip() == "capstan: error: the environment variable NO_SUCH_KEY_VAR (--api-key-env) is not set"
    )
    code, err = run_cli(capsys, "faults", "eval", "--model", "m", "--model-url", "http://x", "nope")
    assert code == 2 and err.strip() == "capstan: error: unknown scenario 'nope' (see `capstan faults list`)"
    code, err = run_cli(capsys, *base, "--model-url", "http://127.0.0.1:9")
    assert code == 2 and "no sandbox is running" in err and len(err.strip().splitlines()) == 1
    code, err = run_cli(capsys, *base, "--model-url", "http://x", "--tools", "bash")
    assert code == 2 and "'bash' is not one of" in err
    code, err = run_cli(capsys, *base, "--model-url", "http://x", "--time-limit", "0")
    assert code == 2 and "--time-limit" in err
