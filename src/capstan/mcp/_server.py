"""The MCP server: every :class:`~capstan.mcp._tool.ToolSpec` of the catalog registered on the official SDK's
``MCPServer``, read-only by construction.

- **No write tool exists**: the catalog holds only readers, and each is annotated ``readOnlyHint``, not destructive,
  idempotent and closed-world. (Annotations are hints; the guarantee is that nothing here can write, and the
  shipped ServiceAccount cannot either: deploy/helm/capstan/files/rbac/mcp.yaml.)
- **Strict arguments**: a middleware validates ``tools/call`` arguments against the tool's own model before the SDK
  does, so an unknown argument, a wrong type or an out-of-range value is a JSON-RPC ``Invalid params`` error naming
  the argument, as is a cursor of another query.
- **Every answer leaves one way**: the tool's JSON is cut to its budget (:func:`~capstan.mcp._shape.fit`), passed
  through the redactor (``served``: Kubernetes objects, Events and every string by shape), stamped with its own
  token count and served both as compact JSON text (what the model reads) and as structured content.
- **Failure is an answer**: a tool whose data is missing (no store, an unknown object) answers one line marked as
  an error; one that raises answers ``internal error`` with the exception's one line and is logged; the server
  goes on.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Final

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from capstan.jsontext import dumps
from capstan.logs import redact_root_handlers
from capstan.mcp._shape import BadCursor, finish, fit
from capstan.mcp._state import LogReader, StateSource
from capstan.mcp._tool import BadArgument, Call, ToolSpec, Unavailable
from capstan.redact import Redactor

log = logging.getLogger(__name__)

SERVER_NAME: Final = "capstan"
INSTRUCTIONS: Final = (
    "Read-only Kubernetes context from Capstan: live state, the analyzers' ranked findings, recorded history, "
    "restart records, GPU capacity and Redis/Valkey engine events. Start with `overview` or `problems`; "
    "`diagnose` gives one object's findings, spec, logs, events and recent changes in one call. Every answer "
    "states its own token count; lists page with `cursor`. Secret values are never served."
)
_READ_ONLY: Final = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe_arguments_error(tool: str, err: ValidationError) -> tuple[str, list[str]]:
    """One line naming each rejected argument (``get_resource: argument 'levl': unknown argument``), and their
    names."""
    parts, names = [], []
    for e in err.errors():
        name = ".".join(str(p) for p in e["loc"]) or "(arguments)"
        names.append(name)
        problem = "unknown argument" if e["type"] == "extra_forbidden" else e["msg"].lower()
        parts.append(f"argument {name!r}: {problem}")
    return f"{tool}: {'; '.join(parts)}", sorted(set(names))


class StrictArguments:
    """Server middleware: ``tools/call`` arguments validated against the tool's model before anything else, so a
    bad argument is a JSON-RPC error naming it (the SDK would otherwise ignore unknown names)."""

    def __init__(self, specs: Mapping[str, ToolSpec]) -> None:
        self._specs = specs

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and isinstance(ctx.params, Mapping):
            name = ctx.params.get("name")
            spec = self._specs.get(name) if isinstance(name, str) else None
            if spec is None:
                raise MCPError(
                    INVALID_PARAMS,
                    f"unknown tool {name!r}; the tools are: {', '.join(sorted(self._specs))}",
                    {"tool": name},
                )
            arguments = ctx.params.get("arguments") or {}
            if not isinstance(arguments, Mapping):
                raise MCPError(INVALID_PARAMS, f"{name}: arguments must be an object", {"tool": name})
            try:
                spec.args.model_validate(dict(arguments))
            except ValidationError as err:
                message, names = describe_arguments_error(spec.name, err)
                raise MCPError(INVALID_PARAMS, message, {"tool": name, "arguments": names}) from None
        return await call_next(ctx)


class ToolRunner:
    """Runs one tool call end to end: state, the pure ``run``, budget, redaction, token count."""

    def __init__(
        self,
        source: StateSource,
        logs: LogReader,
        redactor: Redactor,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._source = source
        self._logs = logs
        self._redactor = redactor
        self._clock = clock

    async def answer(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """The tool's answer as served (redacted, within budget, with its token count) and whether it is an
        error answer. Raises :class:`MCPError` for bad arguments (including a cursor of another query)."""
        try:
            args = spec.args.model_validate(dict(arguments))
        except ValidationError as err:
            message, names = describe_arguments_error(spec.name, err)
            raise MCPError(INVALID_PARAMS, message, {"tool": spec.name, "arguments": names}) from None
        budget = spec.budget.pick(args.budget)
        error = False
        try:
            state = await self._source.state()
            call = Call(spec.name, state, self._logs, budget, self._clock())
            body: dict[str, Any] = dict(await spec.run(call, args))
            blind = [
                f"{k}: {state.snapshot.unreadable[k].reason}"
                for k in spec.reads
                if k in state.snapshot.unreadable
            ]
            if blind:
                body["cannot_read"] = blind
        except BadCursor as err:
            raise MCPError(
                INVALID_PARAMS, f"{spec.name}: {err}", {"tool": spec.name, "arguments": ["cursor"]}
            ) from None
        except BadArgument as err:
            raise MCPError(
                INVALID_PARAMS,
                f"{spec.name}: argument {err.argument!r}: {err.message}",
                {"tool": spec.name, "arguments": [err.argument]},
            ) from None
        except Unavailable as err:
            body, error = {"error": str(err)}, True
        except Exception as err:  # a tool's bug must not take the server down: one line, logged
            log.exception("mcp tool %s failed", spec.name)
            body, error = {"error": f"{spec.name}: internal error: {_one_line(err)}"}, True
        served = self._redactor.served(body)
        return finish(fit(served, budget - 8)), error

    def result(self, answer: dict[str, Any], error: bool) -> CallToolResult:
        text = dumps(answer)
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=answer, is_error=error
        )


def _entry(spec: ToolSpec, runner: ToolRunner) -> Callable[..., Any]:
    """A function with ``spec.args``' fields as its keyword parameters (so the SDK publishes their schema) that
    runs the tool."""

    async def entry(**kwargs: Any) -> CallToolResult:
        answer, error = await runner.answer(spec, kwargs)
        return runner.result(answer, error)

    params = []
    for name, info in spec.args.model_fields.items():
        default = inspect.Parameter.empty if info.is_required() else info.default
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=Annotated[info.annotation, info],
            )
        )
    entry.__signature__ = inspect.Signature(params, return_annotation=CallToolResult)  # type: ignore[attr-defined]
    entry.__annotations__ = {p.name: p.annotation for p in params} | {"return": CallToolResult}
    entry.__name__ = spec.name
    entry.__doc__ = spec.description
    return entry


def create_server(
    source: StateSource,
    logs: LogReader,
    *,
    redactor: Redactor,
    tools: Sequence[ToolSpec] | None = None,
    clock: Callable[[], float] = time.time,
) -> MCPServer[Any]:
    """The read-only MCP server over ``source`` (the cluster state) and ``logs``: every tool of ``tools`` (default:
    :data:`~capstan.mcp._catalog.TOOLS`), the resources and the prompts."""
    from capstan.mcp._catalog import TOOLS
    from capstan.mcp._prompts import register_prompts, register_resources

    specs = {spec.name: spec for spec in (TOOLS if tools is None else tools)}
    server: MCPServer[Any] = MCPServer(
        SERVER_NAME,
        title="Capstan",
        instructions=INSTRUCTIONS,
        version=_version(),
        middleware=[StrictArguments(specs)],
        log_level="WARNING",
    )
    # the SDK has just put its own (unredacted) handler on the root logger; nothing it logs may carry a secret
    redact_root_handlers()
    runner = ToolRunner(source, logs, redactor, clock)
    for spec in specs.values():
        server.tool(name=spec.name, title=spec.title, description=spec.description, annotations=_READ_ONLY)(
            _entry(spec, runner)
        )
    register_resources(server, runner, specs)
    register_prompts(server)
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("capstan")
    except PackageNotFoundError:
        return "0"
