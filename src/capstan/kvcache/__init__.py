"""The block-hash contract shared by the router and the engine simulator: text → tokens → chained block hashes.

Both sides of cache-aware routing must agree on what a "block" of a prompt is, or a precise prefix index learns
nothing from the engine's KV events (vLLM's several rounds of hash fixes are the cautionary tale). This package
defines that contract once; ``capstan.route`` and ``capstan.enginesim`` both import it and never re-implement it.

The contract, in order:

1. **Prompt text of a request** (:func:`prompt_text`). ``/v1/completions``: the ``prompt`` string (a list of strings
   is joined with no separator; a list of token ids bypasses text, see :func:`prompt_token_ids`). ``/v1/chat/
   completions``: :func:`render_chat`, a fixed chat template: for each message ``" <|{role}|> {content} <|end|>"``
   (content parts of type ``text`` are joined with ``" "``; ``tool_calls`` are appended as compact, key-sorted
   JSON), then the generation prompt ``" <|assistant|>"``. A request's ``tools`` (OpenAI function definitions)
   come first, as ``" <|tools|> {compact key-sorted JSON array} <|end|>"``. The template is prefix-stable: the
   prompt of turn *k* is a prefix of the prompt of turn *k+1* when the client resends the conversation.
2. **Tokenization** (:class:`Tokenizer`). A token is a run of whitespace followed by 1–8 non-whitespace characters
   (regex ``\\s*\\S{1,8}``), or trailing whitespace. Its id is ``crc32(utf8 bytes) mod VOCAB_SIZE`` (131072): a
   fixed vocabulary, so the same text always gives the same ids in every process and language, and encoding is a
   regex scan plus a dict lookup. Texts that start with a space and end with a non-space concatenate token-wise:
   ``encode(a + b) == encode(a) + encode(b)``; the chat template and the synthetic texts rely on it.
3. **Block hashes** (:func:`block_hashes`), in the spirit of vLLM's prefix-caching hash: only FULL blocks of
   ``block_size`` tokens (default 16) are hashed; ``h_0 = H(root(seed), tokens_0, salt)``,
   ``h_i = H(h_{i-1}, tokens_i)``, where ``H`` is BLAKE2b with an 8-byte digest over
   ``parent (8 bytes LE) || token ids (uint32 LE each) || extra``, truncated to 63 bits so that every consumer
   (msgpack ints, Go ``int64``/``uint64``, Rust ``i64``/``u64``) reads it without overflow. ``root(seed)`` plays
   vLLM's ``NONE_HASH`` (``PYTHONHASHSEED``) role; ``salt`` is ``cache_salt`` and only enters the first block, as
   in vLLM. These are the hashes the engine simulator publishes in ``BlockStored``/``BlockRemoved`` events.
4. **Mooncake traces** (:class:`MooncakeText`): a trace's ``hash_ids`` name 512-token blocks where equal ids mean
   equal prefixes. Each id becomes a fixed chunk of 512 words drawn from a fixed 4096-word list (each word is one
   token), so requests share text — and therefore 16-token block hashes — exactly as the trace says.
   :meth:`MooncakeText.block_hashes` computes the 16-token hashes straight from ``hash_ids`` (cached per id) for
   in-process simulation; it equals ``block_hashes(tokenizer.encode(prompt))``.
5. **KV events** (:func:`encode_kv_batch` / :func:`decode_kv_batch`): vLLM's ``BlockStored``/``BlockRemoved``/
   ``AllBlocksCleared`` msgpack batches, three ZMQ frames (topic ``kv@<host>:<port>@<model>``, 8-byte big-endian
   sequence number, payload: :func:`parse_kv_message`); see ``_events.py`` for the exact layout. The decoder is the
   one strict decoder of every subscriber: a malformed batch raises :class:`KVEventFormatError`.
6. **The cached hasher** (:class:`PromptHasher`): steps 1–3 for a request body, memoised per rendered chat message
   and per ``(parent, block)``, with bounded caches; its results equal ``block_hashes(tokenizer.encode(
   prompt_text(body)))`` exactly (a unit test checks it), so the router hashes resent conversations cheaply
   without a second copy of the chain.
"""

from typing import TYPE_CHECKING

from capstan.kvcache._events import (
    MEDIUM_GPU,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
    KVEventFormatError,
    KVMessage,
    decode_kv_batch,
    encode_kv_batch,
    encode_seq,
    kv_topic,
    parse_kv_message,
)
from capstan.kvcache._hasher import PromptHasher, PromptKeys
from capstan.kvcache._hashes import DEFAULT_BLOCK_SIZE, block_hashes, hash_block, root_hash
from capstan.kvcache._prompt import prompt_text, prompt_token_ids, render_chat
from capstan.kvcache._tokenizer import VOCAB_SIZE, Tokenizer
from capstan.lazy import lazy_attributes

# MooncakeText computes with numpy; the constants and the hash chain do not, so the CLI can read the block size
# for its option defaults without loading numpy (tests/unit/core/test_cli_startup.py).
# The served model's tokenizer (the tokenizers library, Jinja) and vLLM's hashes (cbor2, xxhash) load on first use.
__getattr__ = lazy_attributes(
    "capstan.kvcache",
    {
        "MooncakeText": "capstan.kvcache._mooncake",
        "HASH_ALGOS": "capstan.kvcache._vllm",
        "ServedModel": "capstan.kvcache._served",
        "ServedTokenizer": "capstan.kvcache._served",
        "VllmBlockHasher": "capstan.kvcache._vllm",
        "external_key": "capstan.kvcache._vllm",
        "vllm_hash_function": "capstan.kvcache._vllm",
    },
)

if TYPE_CHECKING:
    from capstan.kvcache._mooncake import MooncakeText
    from capstan.kvcache._served import ServedModel, ServedTokenizer
    from capstan.kvcache._vllm import HASH_ALGOS, VllmBlockHasher, external_key, vllm_hash_function

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "HASH_ALGOS",
    "MEDIUM_GPU",
    "VOCAB_SIZE",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "KVEvent",
    "KVEventFormatError",
    "KVMessage",
    "MooncakeText",
    "PromptHasher",
    "PromptKeys",
    "ServedModel",
    "ServedTokenizer",
    "Tokenizer",
    "VllmBlockHasher",
    "block_hashes",
    "decode_kv_batch",
    "encode_kv_batch",
    "encode_seq",
    "external_key",
    "hash_block",
    "kv_topic",
    "parse_kv_message",
    "prompt_text",
    "prompt_token_ids",
    "render_chat",
    "root_hash",
    "vllm_hash_function",
]
