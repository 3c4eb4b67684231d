"""The agent evaluation harness (issue 26 §5): a model, given read-only tools, diagnoses each fault scenario while
its broken state is live, and its final answer is scored against the scenario's expectation.

- :class:`Agent` is the loop, pure but for the clock it is given: it sends the conversation and the tool
  definitions to a :class:`ChatModel`, runs each tool call the model asks for through a :class:`Toolbox`, and stops
  at the first answer without a tool call, at ``max_turns`` model calls, or at the wall-clock ``time_limit_s``
  (checked before every model and tool call, and each call is given only the time that is left).
- :class:`OpenAIChat` is the :class:`ChatModel` of any OpenAI-compatible ``/v1/chat/completions`` endpoint with
  function calling; every failure (unreachable, timeout, HTTP 4xx/5xx, a body that is not JSON or not a chat
  completion) is a :class:`ModelError` of one line, which ends that scenario's run as failed with that reason.
- Two toolboxes, the two arms of the comparison: :class:`McpToolbox` (Capstan's MCP tools, served in-process and
  reached through the SDK's in-memory client; an MCP error becomes the tool message ``error: …`` so the model can
  recover) and :class:`KubectlToolbox` (one read-only ``kubectl`` tool: a few read verbs, never Secrets, never a
  flag that changes the cluster or identity, its output redacted and cut to a bound).
- :func:`score_answer` is the score: the answer names the expected object and contains every expected keyword
  (:func:`capstan.faults.missing_keywords`, the same rule as :func:`capstan.faults.score`).
- :class:`Evaluation` plays the scenarios with :class:`capstan.faults.Runner` and runs every arm in the runner's
  ``on_state`` hook, so all arms see the same live state; :func:`summarize` gives accuracy and time per arm.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import statistics
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from capstan.faults._scenario import Expectation, Scenario
from capstan.faults._score import missing_keywords
from capstan.redact import Redactor

if TYPE_CHECKING:
    import httpx
    from mcp import Client

    from capstan.kube import KubeClient
    from capstan.store import HistoryReader

Arm = Literal["mcp", "shell"]
ARMS: tuple[Arm, ...] = ("mcp", "shell")
DEFAULT_TIME_LIMIT_S = 120.0
"""Per scenario and arm, as in the published experiment (two minutes of wall clock)."""
DEFAULT_MAX_TURNS = 20
MAX_TOOL_CHARS = 16_000
"""The most of one tool result the model is shown (the rest is replaced by an omission note)."""
MAX_CALLS_PER_TURN = 16
"""Tool calls run per model turn; any more are answered with an error without running."""
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
SYSTEM_PROMPT = (
    "You are diagnosing a Kubernetes cluster with read-only tools. Use the tools to look, then answer in plain "
    "text without a tool call."
)


def task_prompt(namespace: str) -> str:
    """What the model is asked about one scenario."""
    return (
        f"Something is broken in the Kubernetes namespace {namespace}. Find the root cause of what is broken; "
        "answer with the object (kind and name) and the cause."
    )


class ModelError(Exception):
    """The model could not be asked or its answer could not be read (one line)."""


# ---- the conversation's parts -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolDef:
    """One tool as the model sees it: ``parameters`` is its JSON schema (an object)."""

    name: str
    description: str
    parameters: Mapping[str, Any]

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True)
class ToolCall:
    """One call the model asks for; ``arguments`` is the JSON text it sent."""

    id: str
    name: str
    arguments: str

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Reply:
    """One model turn: text, tool calls, or both."""

    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()


class ChatModel(Protocol):
    """A chat model with function calling. Raises :class:`ModelError` (one line) when it cannot answer."""

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolDef], *, timeout_s: float
    ) -> Reply: ...


class Toolbox(Protocol):
    """The tools of one arm. ``call`` answers with the text the model is shown (an error as ``error: …``)."""

    async def tools(self) -> Sequence[ToolDef]: ...

    async def call(self, name: str, arguments: Mapping[str, Any], *, timeout_s: float) -> str: ...


# ---- the loop ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgentRun:
    """How one run ended: the final ``answer`` (None when there is none), or the ``error`` that ended it."""

    answer: str | None
    error: str | None
    turns: int
    tool_calls: tuple[str, ...]
    """Each call as ``name args`` (args cut to 200 characters), in order."""
    seconds: float


def cut(text: str, limit: int) -> str:
    """``text`` of at most about ``limit`` characters: the head, and a note of how much was left off."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text) - limit} more characters left off)"


def _one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


class Agent:
    """The tool-calling loop over ``model``, bounded by ``max_turns`` model calls and ``time_limit_s`` of
    ``clock`` (wall clock; tests give their own)."""

    def __init__(
        self,
        model: ChatModel,
        *,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        max_turns: int = DEFAULT_MAX_TURNS,
        max_tool_chars: int = MAX_TOOL_CHARS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = model
        self.time_limit_s = time_limit_s
        self.max_turns = max_turns
        self.max_tool_chars = max_tool_chars
        self.clock = clock

    async def run(self, prompt: str, toolbox: Toolbox) -> AgentRun:
        started = self.clock()
        deadline = started + self.time_limit_s
        calls: list[str] = []
        turns = 0

        def end(answer: str | None, error: str | None) -> AgentRun:
            return AgentRun(answer, error, turns, tuple(calls), self.clock() - started)

        def out_of_time(during: str) -> AgentRun:
            return end(None, f"time limit of {self.time_limit_s:g}s reached {during} (after {turns} turn(s))")

        try:
            tools = list(await toolbox.tools())
        except Exception as exc:  # a toolbox that cannot list its tools ends the run, with the reason
            return end(None, f"the tools could not be listed: {_one_line(f'{type(exc).__name__}: {exc}')}")
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": prompt},
        ]
        while turns < self.max_turns:  # bounded by max_turns (and the deadline)
            left = deadline - self.clock()
            if left <= 0:
                return out_of_time("before a model call")
            turns += 1
            try:
                reply = await asyncio.wait_for(self.model.complete(messages, tools, timeout_s=left), left)
            except TimeoutError:
                return out_of_time("during a model call")
            except ModelError as exc:
                return end(None, str(exc))
            if not reply.tool_calls:
                if reply.text is None or not reply.text.strip():
                    return end(None, "the model answered with neither text nor a tool call")
                return end(reply.text, None)
            messages.append(
                {
                    "role": "assistant",
                    "content": reply.text,
                    "tool_calls": [c.to_openai() for c in reply.tool_calls],
                }
            )
            for i, call in enumerate(reply.tool_calls):
                if i >= MAX_CALLS_PER_TURN:  # every call needs its answer, but these are not run
                    text = f"error: not run: at most {MAX_CALLS_PER_TURN} tool calls are run per turn"
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
                    continue
                calls.append(f"{call.name} {call.arguments[:200]}".strip())
                left = deadline - self.clock()
                if left <= 0:
                    return out_of_time("before a tool call")
                try:
                    text = await asyncio.wait_for(self._call(toolbox, call, left), left)
                except TimeoutError:
                    return out_of_time(f"during the tool call {call.name}")
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": cut(text, self.max_tool_chars)}
                )
        return end(None, f"no answer within {self.max_turns} turn(s)")

    @staticmethod
    async def _call(toolbox: Toolbox, call: ToolCall, timeout_s: float) -> str:
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except ValueError as exc:
            return f"error: the arguments of {call.name} are not JSON: {exc}"
        if not isinstance(arguments, dict):
            return f"error: the arguments of {call.name} must be a JSON object"
        try:
            return await toolbox.call(call.name, arguments, timeout_s=timeout_s)
        except Exception as exc:  # a tool's failure is the model's to read and recover from, not a crash
            return f"error: {_one_line(f'{type(exc).__name__}: {exc}')}"


# ---- the OpenAI-compatible model --------------------------------------------------------------------------------
def chat_completions_url(base: str) -> str:
    """The chat-completions endpoint of ``base`` (a server root, its ``/v1`` or the endpoint itself)."""
    url = base.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return f"{url}/chat/completions"
    return f"{url}/v1/chat/completions"


def parse_completion(body: Any) -> Reply:
    """The first choice's message of a chat-completion response body, or a :class:`ModelError` saying why not."""
    if not isinstance(body, dict):
        raise ModelError("not an OpenAI chat completion: the answer is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            raise ModelError(f"the model answered an error: {_one_line(err['message'])}")
        raise ModelError("not an OpenAI chat completion: no choices")
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise ModelError("not an OpenAI chat completion: choices[0] has no message")
    content = message.get("content")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    if content is not None and not isinstance(content, str):
        raise ModelError("not an OpenAI chat completion: message.content is not text")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise ModelError("not an OpenAI chat completion: message.tool_calls is not a list")
    calls = []
    for i, raw in enumerate(raw_calls):
        fn = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ModelError(f"not an OpenAI chat completion: tool_calls[{i}] has no function name")
        args = fn.get("arguments", "")
        if not isinstance(args, str):
            args = json.dumps(args)
        call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else f"call_{i}"
        calls.append(ToolCall(str(call_id), fn["name"], args))
    return Reply(content, tuple(calls))


class OpenAIChat:
    """An OpenAI-compatible chat-completions endpoint (``url``: the server root, its ``/v1`` or the endpoint),
    ``model`` by name, with ``api_key`` as a bearer token when given. Use it as an async context manager."""

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = chat_completions_url(url)
        self.model = model
        self._api_key = api_key
        self._temperature = temperature
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._redactor = Redactor()

    async def __aenter__(self) -> OpenAIChat:
        import httpx

        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._client = httpx.AsyncClient(headers=headers, transport=self._transport, follow_redirects=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _error(self, text: str) -> ModelError:
        # the server's words may echo what it was sent: redacted, and never the key
        line = self._redactor.text(_one_line(text, 400))
        if self._api_key:
            line = line.replace(self._api_key, "[key]")
        return ModelError(line)

    async def complete(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[ToolDef], *, timeout_s: float
    ) -> Reply:
        import httpx

        if self._client is None:
            raise RuntimeError("OpenAIChat is used outside its `async with`")
        body: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "temperature": self._temperature,
        }
        if tools:
            body["tools"] = [t.to_openai() for t in tools]
        try:
            response = await self._client.post(self.url, json=body, timeout=max(timeout_s, 0.001))
        except httpx.TimeoutException:
            raise self._error(f"the model at {self.url} did not answer within {timeout_s:.0f}s") from None
        except httpx.ConnectError as exc:
            raise self._error(
                f"the model at {self.url} is unreachable: {exc or type(exc).__name__}"
            ) from None
        except httpx.HTTPError as exc:
            raise self._error(f"the request to {self.url} failed: {type(exc).__name__}: {exc}") from None
        raw = response.content[:MAX_RESPONSE_BYTES]
        if response.status_code >= 400:
            text = raw[:300].decode("utf-8", "replace")
            raise self._error(f"the model answered HTTP {response.status_code}: {text}")
        try:
            data = json.loads(raw)
        except ValueError:
            text = raw[:80].decode("utf-8", "replace")
            raise self._error(
                f"the model answered HTTP {response.status_code} with a body that is not JSON: {text!r}"
            ) from None
        return parse_completion(data)


# ---- the MCP arm ------------------------------------------------------------------------------------------------
class McpToolbox:
    """Capstan's MCP tools through a connected SDK ``client``."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def tools(self) -> Sequence[ToolDef]:
        listed = await self._client.list_tools()
        return [ToolDef(t.name, t.description or t.title or t.name, t.input_schema) for t in listed.tools]

    async def call(self, name: str, arguments: Mapping[str, Any], *, timeout_s: float) -> str:
        from mcp.shared.exceptions import MCPError

        try:
            result = await self._client.call_tool(name, dict(arguments), read_timeout_seconds=timeout_s)
        except MCPError as exc:
            return f"error: {exc.message}"
        text = "\n".join(str(getattr(block, "text", "")) for block in result.content)
        return f"error: {text}" if result.is_error else text


@contextlib.asynccontextmanager
async def mcp_toolbox(
    kube: KubeClient, namespace: str, history: HistoryReader | None = None
) -> AsyncIterator[McpToolbox]:
    """The MCP server over the live cluster behind ``kube``, scoped to ``namespace`` (and the scenario's recorded
    ``history`` when given), built in-process and connected through the SDK's in-memory client."""
    from mcp import Client

    from capstan.mcp import ClusterLogs, LiveSource, create_server

    server = create_server(
        LiveSource(kube, redactor=Redactor(), namespace=namespace, history=history),
        ClusterLogs(kube),
        redactor=Redactor(),
    )
    async with Client(server) as client:
        yield McpToolbox(client)


# ---- the shell arm ----------------------------------------------------------------------------------------------
KUBECTL_VERBS = ("get", "describe", "logs", "top", "explain", "api-resources", "events", "auth")
_DENIED_LONG = frozenset(
    {
        # another cluster, identity or credentials
        "kubeconfig", "server", "token", "context", "cluster", "user", "as", "as-group", "as-uid", "username",
        "password", "certificate-authority", "client-certificate", "client-key", "insecure-skip-tls-verify",
        "tls-server-name", "disable-compression",
        # arbitrary API paths, local files, commands that never end
        "raw", "filename", "kustomize", "watch", "watch-only", "follow", "output-watch-events",
        # verbose logging prints requests and responses; logs and caches written elsewhere
        "v", "vmodule", "log-file", "log-dir", "log-backtrace-at", "cache-dir", "profile", "profile-output",
    }
)  # fmt: skip
_SHORT_BOOL = frozenset("ARph")
"""Short flags without a value: --all-namespaces, --recursive, --previous, --help."""
_SHORT_VALUE = frozenset("nolLc")
"""Short flags that take a value (the rest of the token, or the next one): namespace, output, selector,
label-columns, container."""


class Refused(Exception):
    """A kubectl command the shell arm does not run (one line)."""


def _is_secret(token: str) -> bool:
    """``token`` names the Secret resource (``secret``, ``secrets/x``, ``pods,secrets``, ``secret.v1``, …)."""
    for part in token.lower().replace("/", ",").split(","):
        if part.split(".", 1)[0] in ("secret", "secrets"):
            return True
    return False


def kubectl_argv(args: str) -> list[str]:
    """The argument list of one read-only kubectl command line, or :class:`Refused` saying why not: the verb is
    one of :data:`KUBECTL_VERBS` (``auth`` only as ``auth can-i``), nothing names Secrets, and no flag points
    kubectl at another cluster or identity, reads local files (``-f``, ``-o go-template-file=…``), watches or
    follows, or logs requests."""
    try:
        argv = shlex.split(args)
    except ValueError as exc:
        raise Refused(f"the arguments do not parse: {exc}") from None
    if argv and argv[0] == "kubectl":
        argv = argv[1:]
    if not argv:
        raise Refused("no command: give the arguments after `kubectl`, e.g. `get pods -n NAMESPACE`")
    if len(argv) > 64 or len(args) > 2000:
        raise Refused("too many arguments")
    words = [a for a in argv if not a.startswith("-")]
    verb = words[0] if words else ""
    if verb not in KUBECTL_VERBS:
        raise Refused(
            f"only read commands run: {', '.join(KUBECTL_VERBS[:-1])} and auth can-i (not {verb!r})"
        )
    if verb == "auth" and (len(words) < 2 or words[1] != "can-i"):
        raise Refused("only `auth can-i` runs of the auth commands")
    for a in argv:
        if a.startswith("--"):
            name = a[2:].split("=", 1)[0]
            if name in _DENIED_LONG:
                raise Refused(f"--{name} is not allowed")
        elif a.startswith("-") and len(a) > 1:
            for ch in a[1:]:
                if ch in _SHORT_VALUE:
                    break  # the rest of the token is its value
                if ch not in _SHORT_BOOL:
                    raise Refused(f"-{ch} is not allowed")
        if _is_secret(a) or _is_secret(a.split("=", 1)[-1]):
            raise Refused("Secrets are not shown")
        if "-file" in a.lower() or "templatefile" in a.lower():  # -o go-template-file=PATH reads a local file
            raise Refused("reading local files is not allowed")
    return argv


KUBECTL_TOOL = ToolDef(
    "kubectl",
    "Run one read-only kubectl command on the cluster and read its output (redacted, cut when long). Verbs: get, "
    "describe, logs, top, explain, api-resources, events, auth can-i. Secrets are not shown; --watch, --follow "
    "and other clusters are refused.",
    {
        "type": "object",
        "properties": {
            "args": {
                "type": "string",
                "description": "The arguments after `kubectl`, e.g. `get pods -n shop -o wide`.",
            }
        },
        "required": ["args"],
        "additionalProperties": False,
    },
)


class KubectlToolbox:
    """The shell arm: one tool, ``kubectl``, running the binary ``kubectl`` against ``kubeconfig``."""

    def __init__(
        self,
        kubectl: Path,
        kubeconfig: Path,
        *,
        redactor: Redactor | None = None,
        max_chars: int = 12_000,
        timeout_s: float = 30.0,
    ) -> None:
        self.kubectl = kubectl
        self.kubeconfig = kubeconfig
        self._redactor = redactor or Redactor()
        self._max_chars = max_chars
        self._timeout_s = timeout_s

    async def tools(self) -> Sequence[ToolDef]:
        return [KUBECTL_TOOL]

    async def call(self, name: str, arguments: Mapping[str, Any], *, timeout_s: float) -> str:
        if name != "kubectl":
            return f"error: no tool {name!r}; the one tool is kubectl"
        args = arguments.get("args")
        if not isinstance(args, str) or set(arguments) != {"args"}:
            return "error: kubectl takes one argument, args (a string)"
        try:
            argv = kubectl_argv(args)
        except Refused as exc:
            return f"error: refused: {exc}"
        timeout = min(timeout_s, self._timeout_s)
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        proc = await asyncio.create_subprocess_exec(
            str(self.kubectl),
            f"--kubeconfig={self.kubeconfig}",
            f"--request-timeout={max(int(timeout), 1)}s",
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return f"error: kubectl did not finish within {timeout:.0f}s"
        text = out.decode("utf-8", "replace")
        if proc.returncode:
            text = f"error (exit {proc.returncode}): {err.decode('utf-8', 'replace').strip()}\n{text}".strip()
        return cut(self._redactor.text(text), self._max_chars) or "(no output)"


# ---- the score --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AnswerScore:
    passed: bool
    missing: tuple[str, ...] = ()
    """The expected object's name and the keywords the answer lacks."""


def score_answer(expectation: Expectation, answer: str | None) -> AnswerScore:
    """The answer names the expected object (its name; a generated name by its prefix; a Node by its scenario
    name, which its cluster name contains) and contains every expected keyword, all case-insensitive."""
    text = answer or ""
    name = expectation.object.name.rstrip("*")
    missing = tuple(missing_keywords([name], text)) + missing_keywords(expectation.keywords, text)
    return AnswerScore(answer is not None and not missing, missing)


# ---- the evaluation ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EvalResult:
    """One scenario played by one arm."""

    scenario: str
    arm: str
    namespace: str
    passed: bool
    answer: str | None = None
    missing: tuple[str, ...] = ()
    error: str | None = None
    seconds: float = 0.0
    turns: int = 0
    tool_calls: tuple[str, ...] = field(default=())

    @property
    def reason(self) -> str:
        """Why it failed, in one line (empty when it passed)."""
        if self.error is not None:
            return self.error
        if self.missing:
            return "the answer lacks " + ", ".join(repr(m) for m in self.missing)
        return ""

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "arm": self.arm,
            "namespace": self.namespace,
            "passed": self.passed,
            "reason": self.reason or None,
            "answer": self.answer,
            "missing": list(self.missing),
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "turns": self.turns,
            "tool_calls": list(self.tool_calls),
        }


def summarize(results: Sequence[EvalResult]) -> dict[str, dict[str, Any]]:
    """Per arm (in :data:`ARMS` order, then any other by name): scenarios, passed, accuracy, errors, total and
    median seconds."""
    arms = sorted({r.arm for r in results}, key=lambda a: (ARMS.index(a) if a in ARMS else len(ARMS), a))
    out = {}
    for arm in arms:
        rows = [r for r in results if r.arm == arm]
        passed = sum(1 for r in rows if r.passed)
        seconds = [r.seconds for r in rows]
        out[arm] = {
            "scenarios": len(rows),
            "passed": passed,
            "accuracy": round(passed / len(rows), 4),
            "errors": sum(1 for r in rows if r.error is not None),
            "seconds_total": round(sum(seconds), 3),
            "seconds_median": round(statistics.median(seconds), 3),
        }
    return out


def _exc_line(exc: BaseException) -> str:
    return Redactor().text(_one_line(f"{type(exc).__name__}: {exc}", 400))


class Evaluation:
    """Plays ``scenarios`` on the cluster of ``kubeconfig`` (kwok serving pod logs from ``log_dir``) and, while
    each one's state is live, runs :class:`Agent` over ``model`` once per arm of ``arms``. ``kubectl`` is the
    binary of the shell arm (needed only with it)."""

    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        model: ChatModel,
        *,
        arms: Sequence[Arm] = ARMS,
        kubectl: Path | None = None,
        time_limit_s: float = DEFAULT_TIME_LIMIT_S,
        max_turns: int = DEFAULT_MAX_TURNS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if "shell" in arms and kubectl is None:
            raise ValueError("the shell arm needs the kubectl binary")
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.arms = tuple(arms)
        self.kubectl = kubectl
        self.agent = Agent(model, time_limit_s=time_limit_s, max_turns=max_turns, clock=clock)

    async def run_all(
        self, scenarios: Sequence[Scenario], *, progress: Callable[[EvalResult], None] | None = None
    ) -> list[EvalResult]:
        from capstan.faults._runner import Runner

        results: list[EvalResult] = []

        async def on_state(scenario: Scenario, namespace: str, kubeconfig: Path) -> None:
            for arm in self.arms:
                result = await self._arm(arm, scenario, namespace, kubeconfig, runner.history)
                results.append(result)
                if progress is not None:
                    progress(result)

        runner = Runner(self.kubeconfig, self.log_dir, on_state=on_state)
        for scenario in scenarios:
            done = len(results)
            outcome = await runner.run(scenario)
            if outcome.setup_error is not None and len(results) == done:
                for arm in self.arms:
                    failed = EvalResult(
                        scenario.name,
                        arm,
                        outcome.namespace,
                        False,
                        error=f"setup failed: {outcome.setup_error}",
                    )
                    results.append(failed)
                    if progress is not None:
                        progress(failed)
        return results

    async def _arm(
        self,
        arm: Arm,
        scenario: Scenario,
        namespace: str,
        kubeconfig: Path,
        history: HistoryReader | None = None,
    ) -> EvalResult:
        prompt = task_prompt(namespace)
        try:
            if arm == "mcp":
                from capstan.kube import KubeClient

                kube = await KubeClient.from_kubeconfig(kubeconfig)
                try:
                    async with mcp_toolbox(kube, namespace, history) as toolbox:
                        run = await self.agent.run(prompt, toolbox)
                finally:
                    await kube.close()
            else:
                assert self.kubectl is not None
                run = await self.agent.run(prompt, KubectlToolbox(self.kubectl, kubeconfig))
        except Exception as exc:  # the arm's tools could not be set up: this scenario fails with the reason
            return EvalResult(
                scenario.name, arm, namespace, False, error=f"the {arm} tools failed: {_exc_line(exc)}"
            )
        scored = score_answer(scenario.expect, run.answer)
        return EvalResult(
            scenario.name,
            arm,
            namespace,
            passed=run.error is None and scored.passed,
            answer=run.answer,
            missing=scored.missing if run.error is None else (),
            error=run.error,
            seconds=run.seconds,
            turns=run.turns,
            tool_calls=run.tool_calls,
        )
