"""The prompt of an OpenAI request body: the fixed chat template and the completions prompt."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def content_text(content: Any, separator: str = " ") -> str:
    """A message's content as text: a string as it is, a list of parts as their ``text`` parts joined by
    ``separator`` (the contract's template: a space; vLLM's "string" content format: a newline), None as ""."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text"
        ]
        return separator.join(parts)
    raise ValueError(f"message content must be a string or a list of parts, got {type(content).__name__}")


def message_role(msg: Any, i: int) -> str:
    """The role of ``messages[i]``, checked: an object with a non-empty string role, else ValueError naming it."""
    if not isinstance(msg, Mapping):
        raise ValueError(f"messages[{i}] must be an object")
    role = msg.get("role")
    if not isinstance(role, str) or not role:
        raise ValueError(f"messages[{i}].role must be a non-empty string")
    return role


def render_chat(
    messages: Sequence[Mapping[str, Any]],
    add_generation_prompt: bool = True,
    tools: Sequence[Any] | None = None,
) -> str:
    """Render chat messages (and tool definitions, first) with the fixed, prefix-stable template of the contract."""
    out: list[str] = []
    if tools:
        out.append(f" <|tools|> {json.dumps(list(tools), sort_keys=True, separators=(',', ':'))} <|end|>")
    for i, msg in enumerate(messages):
        role = message_role(msg, i)
        text = content_text(msg.get("content"))
        calls = msg.get("tool_calls")
        if calls:
            text = f"{text} {json.dumps(calls, sort_keys=True, separators=(',', ':'))}"
        out.append(f" <|{role}|> {text} <|end|>")
    if add_generation_prompt:
        out.append(" <|assistant|>")
    return "".join(out)


def body_prompt(body: Mapping[str, Any]) -> tuple[list[Any], list[Any] | None] | str:
    """What a chat or completions body asks to complete: ``(messages, tools)`` of a chat, or the text of a
    completions prompt (a list of strings joined); ValueError naming what is missing or malformed (a prompt of
    token ids: :func:`prompt_token_ids`)."""
    if "messages" in body:
        messages = body["messages"]
        if not isinstance(messages, list) or not messages:
            raise ValueError("'messages' must be a non-empty array")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise ValueError("'tools' must be an array")
        return messages, tools
    if "prompt" in body:
        prompt = body["prompt"]
        if isinstance(prompt, str):
            return prompt
        if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
            return "".join(prompt)
        raise ValueError(
            "'prompt' must be a string or an array of strings here (token ids: prompt_token_ids)"
        )
    raise ValueError("the body has neither 'messages' nor 'prompt'")


def prompt_text(body: Mapping[str, Any]) -> str:
    """The prompt text of a chat (``messages``) or completions (``prompt``) body. Raises ValueError if neither."""
    asked = body_prompt(body)
    if isinstance(asked, str):
        return asked
    messages, tools = asked
    return render_chat(messages, tools=tools)


def prompt_token_ids(body: Mapping[str, Any]) -> list[int] | None:
    """Token ids given directly as ``prompt: [int, ...]`` (OpenAI completions allows it), else None."""
    prompt = body.get("prompt")
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(p, int) and not isinstance(p, bool) for p in prompt)
    ):
        return list(prompt)
    return None
