"""What an OpenAI chat/completions request body may hold, checked once for the gateway and the engine simulator.

Both servers turn a raw body into a dict with :func:`parse_request`, so a client gets the same 400 from either:

* **Strict JSON** (jiter, through pydantic-core): no ``NaN``/``Infinity`` literals, no lone surrogate escapes, valid
  UTF-8, at most :data:`MAX_DEPTH` levels of nesting (Python's own parser raises ``RecursionError`` a little deeper,
  which is how a nested body used to become a 500), integers of any size.
* **Strict types** for every documented field of OpenAI's Chat Completions and Completions request bodies, and for
  the sampling parameters vLLM adds (``top_k``, ``min_tokens``, ``cache_salt``, …): a string is not a number, a
  number is not a boolean, numbers are finite, token ids are uint32 (the block-hash contract packs them as such;
  the simulator also checks its vocabulary, as vLLM does). Unknown fields are accepted and left untouched, as vLLM
  accepts them: an engine may know more parameters than this list.

The first problem becomes :class:`InvalidRequest`, whose ``param`` is the field's path (``messages[2].content``)
and whose message says what was expected and what came (``Invalid type for 'stream_options': expected an object,
but got a string.``); each server renders it as its OpenAI-style 400 body. The schemas are pydantic TypedDicts in
strict mode; the validated copy is thrown away and the parsed dict returned, so the caller sees exactly what the
client sent.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, Required

import pydantic_core
from pydantic import ConfigDict, Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

MAX_DEPTH = 200
"""Deepest nesting of arrays and objects a body may have (jiter's recursion limit)."""
MAX_TOKEN_ID = 2**32 - 1
"""Largest token id the block-hash contract can encode (uint32)."""

RequestKind = Literal["chat", "completions"]


class InvalidRequest(ValueError):
    """A request body that is not a valid OpenAI request: the message names the field (``param``)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


_STRICT = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)

NonEmptyStr = Annotated[str, Field(min_length=1)]
NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]
Number = float  # strict and finite by the config: ints are accepted, booleans and strings are not


class StreamOptions(TypedDict, total=False):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    include_usage: bool | None
    continuous_usage_stats: bool | None


class ContentPart(TypedDict, total=False):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    type: Required[NonEmptyStr]
    text: str
    image_url: dict[str, Any] | str
    input_audio: dict[str, Any]
    file: dict[str, Any]
    refusal: str


class FunctionCall(TypedDict, total=False):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    name: str
    arguments: str


class ToolCall(TypedDict, total=False):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    id: str
    type: str
    function: FunctionCall


class Message(TypedDict, total=False):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    role: Required[NonEmptyStr]
    content: str | list[ContentPart] | None
    name: str | None
    tool_calls: list[ToolCall] | None
    tool_call_id: str | None
    function_call: FunctionCall | None
    refusal: str | None
    reasoning_content: str | None


class FunctionDefinition(TypedDict, total=False):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    name: Required[NonEmptyStr]
    description: str | None
    parameters: dict[str, Any] | None
    strict: bool | None


class Tool(TypedDict, total=False):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    type: Required[NonEmptyStr]
    function: FunctionDefinition


class ResponseFormat(TypedDict, total=False):
    __pydantic_config__ = _STRICT  # type: ignore[misc]
    type: Required[NonEmptyStr]
    json_schema: dict[str, Any] | None


class _Common(TypedDict, total=False):
    """Fields both endpoints take (OpenAI's and vLLM's sampling parameters)."""

    __pydantic_config__ = _STRICT  # type: ignore[misc]
    model: Required[NonEmptyStr]
    stream: bool | None
    stream_options: StreamOptions | None
    max_tokens: NonNegInt | None
    n: PosInt | None
    temperature: Number | None
    top_p: Number | None
    frequency_penalty: Number | None
    presence_penalty: Number | None
    stop: str | list[str] | None
    seed: Int64 | None
    logit_bias: dict[str, Number] | None
    user: str | None
    echo: bool | None
    # vLLM's extra parameters
    cache_salt: str | None
    top_k: int | None
    min_p: Number | None
    repetition_penalty: Number | None
    length_penalty: Number | None
    min_tokens: NonNegInt | None
    ignore_eos: bool | None
    use_beam_search: bool | None
    stop_token_ids: list[TokenId] | None
    include_stop_str_in_output: bool | None
    skip_special_tokens: bool | None
    spaces_between_special_tokens: bool | None
    prompt_logprobs: int | None
    truncate_prompt_tokens: int | None
    priority: int | None
    request_id: str | None
    add_special_tokens: bool | None
    return_tokens_as_token_ids: bool | None
    guided_json: str | dict[str, Any] | None
    guided_regex: str | None
    guided_choice: list[str] | None
    guided_grammar: str | None
    structured_outputs: dict[str, Any] | None


class ChatBody(_Common, total=False):
    messages: Required[Annotated[list[Message], Field(min_length=1)]]
    max_completion_tokens: NonNegInt | None
    logprobs: bool | None
    top_logprobs: NonNegInt | None
    response_format: ResponseFormat | None
    tools: list[Tool] | None
    tool_choice: str | dict[str, Any] | None
    parallel_tool_calls: bool | None
    functions: list[dict[str, Any]] | None
    function_call: str | dict[str, Any] | None
    metadata: dict[str, str] | None
    store: bool | None
    reasoning_effort: str | None
    service_tier: str | None
    modalities: list[str] | None
    audio: dict[str, Any] | None
    prediction: dict[str, Any] | None
    web_search_options: dict[str, Any] | None
    chat_template: str | None
    chat_template_kwargs: dict[str, Any] | None
    add_generation_prompt: bool | None
    continue_final_message: bool | None
    documents: list[dict[str, Any]] | None


class CompletionsBody(_Common, total=False):
    prompt: Required[
        str | Annotated[list[str], Field(min_length=1)] | Annotated[list[TokenId], Field(min_length=1)]
    ]
    best_of: PosInt | None
    logprobs: NonNegInt | None
    suffix: str | None


@functools.cache
def _adapter(kind: RequestKind) -> TypeAdapter[Any]:
    # NOTE: built on first use (about 10 ms), then shared: a schema is immutable.
    return TypeAdapter(ChatBody if kind == "chat" else CompletionsBody)


def parse_json(raw: bytes) -> Any:
    """Parse a body as strict JSON (see the module docstring); raise :class:`InvalidRequest` naming the problem."""
    try:
        return pydantic_core.from_json(raw, allow_inf_nan=False, cache_strings="keys")
    except ValueError as exc:
        text = str(exc)
        if "recursion limit" in text:
            raise InvalidRequest(
                f"the JSON body is nested more than {MAX_DEPTH} levels deep", code="invalid_json"
            ) from None
        raise InvalidRequest(f"invalid JSON body: {text}", code="invalid_json") from None


def parse_request(raw: bytes, kind: RequestKind) -> dict[str, Any]:
    """The body of a ``/v1/chat/completions`` (``chat``) or ``/v1/completions`` request, checked; raises
    :class:`InvalidRequest` for the first problem."""
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise InvalidRequest(f"the request body must be a JSON object, got {_json_type(body)}")
    check_request(body, kind)
    return body


def check_request(body: Mapping[str, Any], kind: RequestKind) -> None:
    """Check an already parsed body against the schema of ``kind``."""
    try:
        _adapter(kind).validate_python(body)
    except ValidationError as exc:
        raise _explain(exc.errors(include_url=False), body) from None


_EXPECTED = {
    "string_type": "a string",
    "list_type": "an array",
    "dict_type": "an object",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "none_required": "null",
    "finite_number": "a finite number",
}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return (
            "a non-finite number" if value != value or value in (float("inf"), float("-inf")) else "a number"
        )
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _real_path(loc: Sequence[int | str], body: Any, missing: bool) -> tuple[list[int | str], Any]:
    """The part of a pydantic error location that names places in the body (pydantic adds the names of union
    members, e.g. ``('stop', 'list[str]', 0)``) and the value found there; for a ``missing`` error the last part
    is the missing key."""
    path: list[int | str] = []
    value = body
    for i, part in enumerate(loc):
        in_object = isinstance(value, dict) and isinstance(part, str) and part in value
        in_array = isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value)
        if in_object or in_array:
            value = value[part]
            path.append(part)
        elif missing and i == len(loc) - 1:
            path.append(part)
            value = None
    return path, value


def _dotted(path: Sequence[int | str]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _progress(path: Sequence[int | str]) -> tuple[int, tuple[int, ...]]:
    return len(path), tuple(p if isinstance(p, int) else -1 for p in path)


def _explain(errors: Sequence[Mapping[str, Any]], body: Any) -> InvalidRequest:
    located = [(*_real_path(e["loc"], body, e["type"] == "missing"), e) for e in errors]
    # NOTE: of a union's members, the one that got furthest into the value explains it best (``prompt: [1, -1]``
    # fails as an array of strings at [0] and as token ids at [1]: the token-id error is the one to report).
    furthest = max(_progress(path) for path, _, _ in located)
    deepest = [(p, v, e) for p, v, e in located if _progress(p) == furthest]
    path, value, _ = deepest[0]
    name = _dotted(path) or "body"
    same = [e for p, _, e in deepest if p == path]
    if any(e["type"] == "missing" for e in same):
        return InvalidRequest(f"Missing required parameter: '{name}'.", name)
    if all(e["type"] in _EXPECTED for e in same):
        got = _json_type(value)
        if got == "a non-finite number":
            return InvalidRequest(f"Invalid value for '{name}': expected a finite number.", name)
        wanted: list[str] = []
        for e in same:
            phrase = _EXPECTED[e["type"]]
            if phrase not in wanted:
                wanted.append(phrase)
        return InvalidRequest(
            f"Invalid type for '{name}': expected {' or '.join(wanted)}, but got {got}.", name
        )
    problem = next(e for e in same if e["type"] not in _EXPECTED)
    return InvalidRequest(f"Invalid value for '{name}': {problem['msg']}.", name)
