"""The cached hasher: a request body into block hashes fast, with results identical to the contract.

Tokenizing a 7k-token prompt and hashing its 400+ blocks takes milliseconds in Python, but multi-turn and agentic
traffic resends almost the same prompt again and again. Two caches make the repeat cheap without changing a single
hash (a unit test checks equality with :func:`capstan.kvcache.block_hashes` over
:func:`capstan.kvcache.prompt_text`):

* token ids per rendered chat message: the contract's template renders messages one after another, each piece
  starting with a space and ending with a non-space, so the tokens of the whole prompt are the concatenation of the
  tokens of each piece (the tokenizer's documented concatenation property);
* block hash per ``(parent hash, block token bytes)``: the chain is recomputed only from the first new block.

Both caches are bounded in memory (cleared when full, like the tokenizer's memo): the pieces by the tokens they
hold (``max_piece_tokens``, ids kept as uint32 arrays: a count alone let a cache of 100,000 long messages hold
gigabytes), the blocks by count (entries are all the same size, about 290 bytes each).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Mapping
from typing import Any, Protocol

from capstan.kvcache._hashes import DEFAULT_BLOCK_SIZE, hash_block, root_hash
from capstan.kvcache._prompt import prompt_text, prompt_token_ids, render_chat
from capstan.kvcache._tokenizer import Tokenizer


class PromptKeys(Protocol):
    """How a router turns a request body into the keys of the blocks an engine would cache for it: the contract's
    :class:`PromptHasher` for Capstan's engine simulator, :class:`~capstan.kvcache.ServedModel` for a model served
    by real vLLM engines (its tokenizer, chat template and vLLM's hash chain)."""

    block_size: int

    def token_ids(self, body: Mapping[str, Any]) -> list[int]:
        """The prompt's token ids; ValueError for a body that has no prompt (a 400)."""
        ...

    def block_hashes(
        self, token_ids: list[int], salt: str | None = None, lora_name: str | None = None
    ) -> list[int]:
        """The keys of the full blocks, as the engine's KV events name them."""
        ...


class PromptHasher:
    """Token ids and block hashes of request bodies, memoised (see the module docstring); one per router."""

    def __init__(
        self,
        block_size: int = DEFAULT_BLOCK_SIZE,
        seed: int = 0,
        max_pieces: int = 100_000,
        max_blocks: int = 500_000,
        max_piece_tokens: int = 2_000_000,
    ) -> None:
        self.block_size = block_size
        self.seed = seed
        self.tokenizer = Tokenizer()
        self.max_pieces = max_pieces
        self.max_blocks = max_blocks
        self.max_piece_tokens = max_piece_tokens
        self._pieces: dict[str, array[int]] = {}
        self._piece_tokens_held = 0
        self._blocks: dict[tuple[int, bytes], int] = {}
        self._root = root_hash(seed)
        self._generation_prompt = render_chat([], add_generation_prompt=True)

    def _piece_tokens(self, piece: str) -> array[int] | list[int]:
        cached = self._pieces.get(piece)
        if cached is not None:
            return cached
        ids = self.tokenizer.encode(piece)
        if len(ids) > self.max_piece_tokens // 4:
            return ids  # too big to be worth a quarter of the cache
        if len(self._pieces) >= self.max_pieces or self._piece_tokens_held + len(ids) > self.max_piece_tokens:
            self._pieces.clear()
            self._piece_tokens_held = 0
        self._pieces[piece] = array("I", ids)
        self._piece_tokens_held += len(ids)
        return ids

    def token_ids(self, body: Mapping[str, Any]) -> list[int]:
        """Token ids of the request's prompt (raises ValueError like :func:`capstan.kvcache.prompt_text`)."""
        direct = prompt_token_ids(body)
        if direct is not None:
            return direct
        messages = body.get("messages") if "messages" in body else None
        if isinstance(messages, list) and messages:
            out: list[int] = []
            for m in messages:
                out.extend(self._piece_tokens(render_chat([m], add_generation_prompt=False)))
            out.extend(self._piece_tokens(self._generation_prompt))
            return out
        return self.tokenizer.encode(prompt_text(body))

    def block_hashes(
        self, token_ids: list[int], salt: str | None = None, lora_name: str | None = None
    ) -> list[int]:
        """Chained hashes of the full blocks, equal to ``capstan.kvcache.block_hashes(ids, bs, seed, salt)``.
        ``lora_name`` is not part of the contract (the engine simulator serves no adapters) and changes nothing."""
        bs = self.block_size
        full = len(token_ids) // bs
        if full == 0:
            return []
        raw = array("I", token_ids[: full * bs])
        if sys.byteorder != "little":
            raw.byteswap()
        data = raw.tobytes()
        width = 4 * bs
        cache = self._blocks
        if len(cache) + full > self.max_blocks:
            cache.clear()
        out: list[int] = []
        prev = self._root
        salt_bytes = salt.encode("utf-8") if salt else b""
        for i in range(full):
            chunk = data[i * width : (i + 1) * width]
            key = (prev, chunk + salt_bytes if i == 0 and salt_bytes else chunk)
            h = cache.get(key)
            if h is None:
                h = hash_block(prev, token_ids[i * bs : (i + 1) * bs], salt_bytes if i == 0 else b"")
                cache[key] = h
            out.append(h)
            prev = h
        return out
