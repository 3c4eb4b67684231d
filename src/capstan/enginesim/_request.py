"""Turning an OpenAI request body into an :class:`EngineRequest` with the shared block-hash contract."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capstan.enginesim._engine import EngineRequest
from capstan.kvcache import (
    DEFAULT_BLOCK_SIZE,
    VOCAB_SIZE,
    PromptKeys,
    Tokenizer,
    block_hashes,
    prompt_text,
    prompt_token_ids,
)

DEFAULT_MAX_TOKENS = 16


class BadRequest(ValueError):
    """The body is not a valid request; the message names the field (an OpenAI 400)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _int_field(body: Mapping[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(f"'{name}' must be a positive integer", name)
    return value


def max_tokens_of(body: Mapping[str, Any], default: int = DEFAULT_MAX_TOKENS) -> int:
    """Output tokens to generate: ``max_completion_tokens`` or ``max_tokens`` (the simulator always generates
    exactly that many, as if ``ignore_eos`` were set), else ``default``."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = _int_field(body, name)
        if value is not None:
            return value
    return default


def build_engine_request(
    body: Mapping[str, Any],
    request_id: str,
    tokenizer: Tokenizer,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    seed: int = 0,
    chat: bool | None = None,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    served: PromptKeys | None = None,
    vocab_size: int = VOCAB_SIZE,
) -> EngineRequest:
    """Validate ``body`` (chat when ``chat`` is True, completions when False, either when None) and build the
    engine request: tokens, full-block hashes (``cache_salt`` honoured) and output length. ``served``: a real
    model's tokenizer and vLLM's hashes (:class:`capstan.kvcache.ServedModel`, of ``vocab_size`` tokens) instead of
    the contract's."""
    if chat is True and "messages" not in body:
        raise BadRequest("'messages' is required", "messages")
    if chat is False and "prompt" not in body:
        raise BadRequest("'prompt' is required", "prompt")
    salt = body.get("cache_salt")
    if salt is not None and not isinstance(salt, str):
        raise BadRequest("'cache_salt' must be a string", "cache_salt")
    if body.get("stream") not in (None, True, False):
        raise BadRequest("'stream' must be a boolean", "stream")
    tokens = prompt_token_ids(body)
    if tokens is not None:
        # vLLM's check: an id the model's vocabulary does not have cannot be embedded
        bad = next((t for t in tokens if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise BadRequest(
                f"Token id {bad} is out of vocabulary (the vocabulary has {vocab_size} tokens)", "prompt"
            )
    elif served is not None:
        try:
            tokens = served.token_ids(body)
        except ValueError as exc:
            raise BadRequest(str(exc), "messages" if "messages" in body else "prompt") from None
    else:
        try:
            text = prompt_text(body)
        except ValueError as exc:
            raise BadRequest(str(exc), "messages" if "messages" in body else "prompt") from None
        tokens = tokenizer.encode(text)
    if not tokens:
        raise BadRequest("the prompt is empty", "messages" if "messages" in body else "prompt")
    return EngineRequest(
        request_id=request_id,
        prompt_len=len(tokens),
        block_hashes=(
            served.block_hashes(tokens, salt)
            if served is not None
            else block_hashes(tokens, block_size, seed=seed, salt=salt)
        ),
        max_tokens=max_tokens_of(body, default_max_tokens),
        token_ids=tokens,
    )
