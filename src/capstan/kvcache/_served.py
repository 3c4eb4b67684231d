"""The served model's own tokenization, for routing in front of real vLLM engines.

The contract's tokenizer (``_tokenizer.py``) is shared by Capstan's router and engine simulator only; a real engine
tokenizes with the model's tokenizer and chat template, so a gateway that hashes the contract's token ids never
names a block the engine stored. :class:`ServedTokenizer` does what vLLM's OpenAI server does before its engine sees
a request:

* ``/v1/chat/completions``: the chat template (Jinja, from ``tokenizer_config.json``'s ``chat_template`` or a file
  of its own) rendered the way Hugging Face ``transformers`` renders it (a sandboxed environment with
  ``trim_blocks`` and ``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson`` filter, ``raise_exception``
  and ``strftime_now``), with ``messages``, ``tools``, ``add_generation_prompt=True`` and the special tokens of the
  configuration (``bos_token``, ``eos_token``…); a message whose content is a list of text parts is one string of
  the parts joined by newlines (vLLM's "string" content format); the text is then encoded without adding special
  tokens (the template wrote them);
* ``/v1/completions``: the prompt string encoded *with* the tokenizer's special tokens (its post-processor: a BOS,
  for most models); token ids given as the prompt are used as they are.

:class:`ServedModel` adds vLLM's block hashes (:class:`~capstan.kvcache.VllmBlockHasher`) and offers the same two
calls as :class:`~capstan.kvcache.PromptHasher`, so the router holds either per model.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from capstan.errors import UserError
from capstan.kvcache._prompt import body_prompt, content_text, message_role, prompt_token_ids
from capstan.kvcache._vllm import VllmBlockHasher

_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: the {what} is not JSON: {exc}") from None


def _token_text(value: Any) -> str | None:
    """A special token of tokenizer_config.json: a string, or an AddedToken object with its ``content``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


class ServedTokenizer:
    """A model's tokenizer and chat template (module docstring). Build it with :meth:`from_files`."""

    def __init__(
        self,
        tokenizer: Any,
        chat_template: str | None,
        special_tokens: Mapping[str, str],
        *,
        source: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self._tokenizer = tokenizer
        self.source = source
        self.special_tokens = dict(special_tokens)
        self.vocab_size: int = tokenizer.get_vocab_size(with_added_tokens=True)
        self._template: jinja2.Template | None = None
        if chat_template is not None:

            def raise_exception(message: str) -> None:
                raise jinja2.exceptions.TemplateError(message)

            def tojson(
                value: Any, indent: int | None = None, ensure_ascii: bool = False, sort_keys: bool = False
            ) -> str:
                return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys)

            def strftime_now(fmt: str) -> str:
                return time.strftime(fmt, time.localtime(clock()))

            env = ImmutableSandboxedEnvironment(
                trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
            )
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = strftime_now
            try:
                self._template = env.from_string(chat_template)
            except jinja2.exceptions.TemplateSyntaxError as exc:
                raise UserError(f"{source}: the chat template does not parse: {exc}") from None

    @classmethod
    def from_files(
        cls,
        tokenizer: Path,
        config: Path | None = None,
        chat_template: Path | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> ServedTokenizer:
        """``tokenizer.json`` (the ``tokenizers`` library's format), optionally ``tokenizer_config.json`` (its
        ``chat_template`` and special tokens) and a chat template file (which wins over the configuration's).
        A file that cannot be read or is not what it should be: a :class:`~capstan.errors.UserError` naming it."""
        from tokenizers import Tokenizer

        try:
            loaded = Tokenizer.from_file(str(tokenizer))
        except Exception as exc:  # the library raises plain Exceptions of its own for any bad file
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserError(
                f"{tokenizer}: not a tokenizer.json the tokenizers library reads: {first}"
            ) from None
        specials: dict[str, str] = {}
        template: str | None = None
        if config is not None:
            data = _read_json(config, "tokenizer configuration")
            if not isinstance(data, Mapping):
                raise UserError(f"{config}: the tokenizer configuration must be a JSON object")
            for name in _SPECIAL_TOKENS:
                text = _token_text(data.get(name))
                if text is not None:
                    specials[name] = text
            raw = data.get("chat_template")
            if isinstance(raw, list):  # several named templates: the "default" one, as transformers picks
                named = {t.get("name"): t.get("template") for t in raw if isinstance(t, Mapping)}
                raw = named.get("default")
            if raw is not None and not isinstance(raw, str):
                raise UserError(f"{config}: chat_template must be a string or a list of named templates")
            template = raw
        if chat_template is not None:
            try:
                template = chat_template.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UserError(f"{chat_template}: cannot read the chat template: {exc}") from None
        return cls(loaded, template, specials, source=str(config or chat_template or tokenizer), clock=clock)

    @property
    def has_chat_template(self) -> bool:
        return self._template is not None

    def render_chat(
        self, messages: Sequence[Any], tools: Sequence[Any] | None = None, add_generation_prompt: bool = True
    ) -> str:
        """The prompt text of chat ``messages`` through the model's template; ValueError for a request the
        template or the body's shape refuses (a 400 at the gateway)."""
        import jinja2

        if self._template is None:
            raise ValueError(f"the model has no chat template ({self.source}): use /v1/completions")
        rendered: list[dict[str, Any]] = []
        for i, msg in enumerate(messages):
            message_role(msg, i)
            content = msg.get("content")
            try:  # a template may test for a missing content (a tool call): None stays None
                text = None if content is None else content_text(content, "\n")
            except ValueError as exc:
                raise ValueError(f"messages[{i}]: {exc}") from None
            rendered.append({**msg, "content": text})
        try:
            return self._template.render(
                messages=rendered,
                tools=list(tools) if tools else None,
                add_generation_prompt=add_generation_prompt,
                **self.special_tokens,
            )
        except jinja2.exceptions.TemplateError as exc:
            raise ValueError(f"the chat template refused the messages: {exc}") from None
        except (
            Exception
        ) as exc:  # the model's template failing on this request's messages is the request's 400
            # (e.g. ChatML's `'\n' + message['content']` on a message without content: a TypeError)
            raise ValueError(
                f"the chat template could not render the messages: {type(exc).__name__}: {exc}"
            ) from None

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        # NOTE: encode_batch, not encode: the library releases the GIL only in its batch call (bench/route_served_model.py:
        # a thread beside encode ran at 4 % of its speed, beside encode_batch at 93 %), so a gateway that
        # tokenizes a long prompt off its event loop keeps serving the others.
        ids: list[int] = self._tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids
        return ids

    def token_ids(self, body: Mapping[str, Any]) -> list[int]:
        """The token ids vLLM's engine gets for this chat or completions body; ValueError when neither."""
        direct = prompt_token_ids(body)
        if direct is not None:
            return direct
        asked = body_prompt(body)
        if isinstance(asked, str):
            return self.encode(asked, add_special_tokens=True)
        messages, tools = asked
        return self.encode(self.render_chat(messages, tools), add_special_tokens=False)


class ServedModel:
    """What a router needs of one model served by vLLM engines: its token ids and vLLM's block keys for them,
    behind the same two calls as :class:`~capstan.kvcache.PromptHasher`. ``lora_name`` names the LoRA adapter a
    request is served by (vLLM hashes it into every block)."""

    def __init__(self, tokenizer: ServedTokenizer, hasher: VllmBlockHasher) -> None:
        self.tokenizer = tokenizer
        self.hasher = hasher
        self.block_size = hasher.block_size

    def token_ids(self, body: Mapping[str, Any]) -> list[int]:
        return self.tokenizer.token_ids(body)

    def block_hashes(
        self, token_ids: list[int], salt: str | None = None, lora_name: str | None = None
    ) -> list[int]:
        return self.hasher.block_hashes(token_ids, salt, lora_name)
