"""vLLM's own prefix-cache block hashes, so a gateway in front of a real vLLM computes the keys its KV events carry.

vLLM (``vllm/v1/core/kv_cache_utils.py``, ``vllm/utils/hashing.py``) hashes each FULL block of ``block_size``
tokens as ``H((parent, tuple(token_ids), extra_keys))``, where

* ``H`` is the engine's ``--prefix-caching-hash-algo``: ``sha256`` (the default: the tuple serialised by ``pickle``
  at its highest protocol, then SHA-256), ``sha256_cbor`` (canonical CBOR, then SHA-256), ``xxhash`` / ``xxhash_cbor``
  (the same serialisations, then the 128-bit XXH3 digest) and ``sha256_msgpack`` / ``xxhash_msgpack`` (MessagePack;
  the token ids as an array either way, which MessagePack does not tell from a tuple);
* ``parent`` is the previous block's digest, and for the first block ``NONE_HASH = H(seed)``, where ``seed`` is the
  engine's ``PYTHONHASHSEED`` string (unset, vLLM draws 32 random bytes at start, and no one outside the engine
  can compute its keys: a deployment routed by KV events sets ``PYTHONHASHSEED`` on its engines and gives the same
  value here);
* ``extra_keys`` is ``None`` or a tuple of, in this order, the LoRA adapter's name (every block), multimodal
  identifiers (not produced here: text only), and ``cache_salt`` (the first block only).

KV events carry a digest either as its bytes or, with ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`` (vLLM's default), as
the low 64 bits of its big-endian value. :func:`external_key` is that int; the decoder turns byte digests into the
same int, so a precise index keys both forms alike and never holds the 32-byte digests.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args

import cbor2
import msgpack
import xxhash

HashAlgo = Literal["sha256", "sha256_cbor", "sha256_msgpack", "xxhash", "xxhash_cbor", "xxhash_msgpack"]
HASH_ALGOS: tuple[str, ...] = get_args(HashAlgo)
_MASK64 = (1 << 64) - 1


def _pickled(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def _cbor(value: Any) -> bytes:
    return cbor2.dumps(value, canonical=True)


def _msgpack(value: Any) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _xxh3_128(data: bytes) -> bytes:
    return xxhash.xxh3_128_digest(data)


_SERIALISE: dict[str, Callable[[Any], bytes]] = {"": _pickled, "cbor": _cbor, "msgpack": _msgpack}
_DIGEST: dict[str, Callable[[bytes], bytes]] = {"sha256": _sha256, "xxhash": _xxh3_128}


def vllm_hash_function(algo: str) -> Callable[[Any], bytes]:
    """vLLM's hash function of that ``--prefix-caching-hash-algo`` name; ValueError naming the known ones."""
    if algo not in HASH_ALGOS:
        raise ValueError(f"unknown prefix-caching hash algorithm {algo!r} (vLLM's: {', '.join(HASH_ALGOS)})")
    digest_name, _, serialisation = algo.partition("_")
    serialise, digest = _SERIALISE[serialisation], _DIGEST[digest_name]
    return lambda value: digest(serialise(value))


def external_key(digest: bytes) -> int:
    """The int a KV event carries for ``digest`` when vLLM sends ints: the low 64 bits of its big-endian value."""
    return int.from_bytes(digest, "big") & _MASK64


class VllmBlockHasher:
    """Block digests of token ids exactly as a vLLM engine with these settings computes them (module docstring),
    and their :func:`external_key` ints. A bounded memo of ``(parent, block, extra) → digest`` makes a resent
    conversation cost one hash per new block (cleared when full)."""

    def __init__(
        self, algo: str = "sha256", hash_seed: str = "0", block_size: int = 16, max_memo: int = 500_000
    ) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.algo = algo
        self.hash_seed = hash_seed
        self.block_size = block_size
        self._hash = vllm_hash_function(algo)
        self.none_hash = self._hash(hash_seed)
        self._max_memo = max_memo
        self._memo: dict[tuple[bytes, tuple[int, ...], tuple[Any, ...] | None], bytes] = {}

    def digests(
        self, token_ids: Sequence[int], *, cache_salt: str | None = None, lora_name: str | None = None
    ) -> list[bytes]:
        """Digests of the full blocks of ``token_ids`` (a trailing partial block is not hashed)."""
        bs = self.block_size
        full = len(token_ids) // bs
        memo = self._memo
        if len(memo) + full > self._max_memo:
            memo.clear()
        out: list[bytes] = []
        parent = self.none_hash
        for i in range(full):
            block = tuple(token_ids[i * bs : (i + 1) * bs])
            keys: list[Any] = [lora_name] if lora_name else []
            if i == 0 and cache_salt:
                keys.append(cache_salt)
            extra = tuple(keys) if keys else None
            key = (parent, block, extra)
            digest = memo.get(key)
            if digest is None:
                digest = self._hash((parent, block, extra))
                memo[key] = digest
            out.append(digest)
            parent = digest
        return out

    def block_hashes(
        self, token_ids: Sequence[int], salt: str | None = None, lora_name: str | None = None
    ) -> list[int]:
        """The :func:`external_key` of each full block: what the engine's KV events name them by."""
        return [external_key(d) for d in self.digests(token_ids, cache_salt=salt, lora_name=lora_name)]
