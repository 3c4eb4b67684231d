"""Chained hashes over full token blocks (see the package docstring for the contract)."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from hashlib import blake2b

DEFAULT_BLOCK_SIZE = 16
"""Tokens per KV block, the one default of the router, the engine simulator and their hashers (vLLM's default too)."""
_MASK63 = (1 << 63) - 1


def _tokens_bytes(tokens: Sequence[int]) -> bytes:
    arr = array("I", tokens)
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes()


def root_hash(seed: int = 0) -> int:
    """The parent of the first block (vLLM's ``NONE_HASH``), fixed by ``seed``."""
    digest = blake2b(b"capstan-kv-root:" + str(seed).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & _MASK63


def hash_block(parent: int, tokens: Sequence[int], extra: bytes = b"") -> int:
    """Hash of one block given its parent hash, its token ids and optional extra key bytes."""
    digest = blake2b(parent.to_bytes(8, "little") + _tokens_bytes(tokens) + extra, digest_size=8).digest()
    return int.from_bytes(digest, "little") & _MASK63


def block_hashes(
    token_ids: Sequence[int],
    block_size: int = DEFAULT_BLOCK_SIZE,
    *,
    seed: int = 0,
    salt: str | None = None,
    parent: int | None = None,
) -> list[int]:
    """Chained hashes of the full blocks of ``token_ids`` (a trailing partial block is not hashed).

    ``parent`` continues an existing chain (the hash of the block before ``token_ids[0]``); by default the chain
    starts at :func:`root_hash` of ``seed`` and the first block carries ``salt`` (vLLM's ``cache_salt``).
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    if parent is None:
        start = root_hash(seed)
        extra = salt.encode("utf-8") if salt else b""
    else:
        start = parent
        extra = b""
    full = len(token_ids) // block_size
    return chain_hashes(start, _tokens_bytes(token_ids[: full * block_size]), block_size, extra)


def chain_hashes(parent: int, token_bytes: bytes, block_size: int, first_extra: bytes = b"") -> list[int]:
    """The chain over ``token_bytes`` (uint32 little-endian token ids, whole blocks only) from ``parent``."""
    step = 4 * block_size
    n = len(token_bytes) // step
    out: list[int] = []
    prev = parent.to_bytes(8, "little")
    for i in range(n):
        data = prev + token_bytes[i * step : (i + 1) * step]
        if i == 0 and first_extra:
            data += first_extra
        h = int.from_bytes(blake2b(data, digest_size=8).digest(), "little") & _MASK63
        out.append(h)
        prev = h.to_bytes(8, "little")
    return out
