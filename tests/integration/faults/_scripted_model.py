"""A scripted OpenAI-compatible chat-completions server for the agent evaluation's tests: deterministic, it follows a
fixed tool-call plan and builds its answer from what the tools returned; it checks the plumbing, it is not a model.

- Offered the MCP tools (``problems`` among them): call ``problems`` with the prompt's namespace, then answer with
  the top finding's object and root cause.
- Offered the one ``kubectl`` tool: ``get pods -n NS``, ``describe pod POD -n NS`` (the first pod listed), ``logs
  POD -n NS --previous``, then answer with the pod and the previous log's last line.

Every request body is kept in :attr:`ScriptedModel.requests`. Paths for the failure tests: ``/status/<code>/…``
answers that HTTP status, ``/text/…`` a body that is not JSON, ``/other/…`` JSON that is not a chat completion.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from capstan.sandbox import free_port

_NAMESPACE = re.compile(r"namespace ([a-z0-9][-a-z0-9]*)")


def _call(name: str, arguments: dict[str, Any], index: int) -> dict[str, Any]:
    return {
        "id": f"call_{index}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _completion(content: str | None, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "scripted",
        "object": "chat.completion",
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
    }


def _mcp_plan(namespace: str, results: list[str]) -> dict[str, Any]:
    if not results:
        return _completion(None, [_call("problems", {"namespace": namespace}, 0)])
    try:
        first = json.loads(results[-1])["findings"][0]
        obj = first["objects"][0]
        return _completion(f"{obj['kind']}/{obj['name']}: {first['root_cause']}")
    except (ValueError, KeyError, IndexError, TypeError):
        return _completion(f"no finding: {results[-1][:200]}")


def _shell_plan(namespace: str, results: list[str]) -> dict[str, Any]:
    if not results:
        return _completion(None, [_call("kubectl", {"args": f"get pods -n {namespace}"}, 0)])
    lines = results[0].splitlines()
    pod = lines[1].split()[0] if len(lines) > 1 and lines[1].split() else "unknown"
    if len(results) == 1:
        return _completion(None, [_call("kubectl", {"args": f"describe pod {pod} -n {namespace}"}, 1)])
    if len(results) == 2:
        return _completion(None, [_call("kubectl", {"args": f"logs {pod} -n {namespace} --previous"}, 2)])
    log = [line for line in results[2].splitlines() if line.strip()]
    return _completion(f"Pod {pod} crash-loops; its previous log ends: {log[-1] if log else '(empty)'}")


class ScriptedModel:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/status/{code:int}/v1/chat/completions", self._status, methods=["POST"]),
                Route("/text/v1/chat/completions", self._text, methods=["POST"]),
                Route("/other/v1/chat/completions", self._other, methods=["POST"]),
            ]
        )

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        tools = {t["function"]["name"] for t in body.get("tools") or []}
        messages = body["messages"]
        prompt = next(m["content"] for m in messages if m["role"] == "user")
        match = _NAMESPACE.search(prompt)
        namespace = match.group(1) if match else "default"
        results = [str(m["content"]) for m in messages if m["role"] == "tool"]
        plan = _mcp_plan if "problems" in tools else _shell_plan
        return JSONResponse(plan(namespace, results))

    async def _status(self, request: Request) -> Response:
        return PlainTextResponse("scripted failure", status_code=int(request.path_params["code"]))

    async def _text(self, request: Request) -> Response:
        return PlainTextResponse("<html>not json</html>")

    async def _other(self, request: Request) -> Response:
        return JSONResponse({"data": []})


@contextmanager
def serve(model: ScriptedModel) -> Iterator[str]:
    """``model``'s app on 127.0.0.1 in a thread for the ``with`` block; yields its root URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(model.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(500):  # bounded wait for start-up
        if server.started:
            break
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
