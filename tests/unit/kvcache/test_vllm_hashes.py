"""vLLM's prefix-cache block hashes (capstan.kvcache.VllmBlockHasher) checked against vLLM's definition
(``vllm/v1/core/kv_cache_utils.py``: ``hash_block_tokens`` over ``(parent, tuple(token_ids), extra_keys)``, the
first block's parent ``NONE_HASH = H(PYTHONHASHSEED)``; ``vllm/utils/hashing.py``: the serialisation and digest of
each ``--prefix-caching-hash-algo``), with the serialised bytes written out by hand from the formats' own
specifications (pickle protocol 5, canonical CBOR, MessagePack) so the vectors do not come from the code they test."""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable

import pytest
import xxhash

from capstan.kvcache import HASH_ALGOS, VllmBlockHasher, external_key, vllm_hash_function

pytestmark = pytest.mark.unit

BLOCK = tuple(range(1, 17))  # 16 token ids, each small enough for a one-byte integer in all three formats


def pickled(parent: bytes, extra: bytes = b"N") -> bytes:
    """pickle protocol 5 of ``(parent, BLOCK, extra)``: PROTO, FRAME, SHORT_BINBYTES, MARK + 16 BININT1 + TUPLE,
    ``extra`` (NONE by default), TUPLE3, with MEMOIZE after each container, STOP."""
    body = (
        b"C"
        + bytes([len(parent)])
        + parent
        + b"\x94("
        + b"".join(b"K" + bytes([t]) for t in BLOCK)
        + b"t\x94"
        + extra
    )
    body += b"\x87\x94."
    return b"\x80\x05\x95" + struct.pack("<Q", len(body)) + body


def cbor(parent: bytes) -> bytes:
    """canonical CBOR of ``(parent, BLOCK, None)``: array(3), bytes(32 or 16), array(16) of small ints, null."""
    return (
        b"\x83" + (b"\x58\x20" if len(parent) == 32 else b"\x50") + parent + b"\x90" + bytes(BLOCK) + b"\xf6"
    )


def msgpack_(parent: bytes) -> bytes:
    """MessagePack of ``(parent, BLOCK, None)``: fixarray(3), bin8, array16(16) of fixints, nil."""
    return b"\x93\xc4" + bytes([len(parent)]) + parent + b"\xdc\x00\x10" + bytes(BLOCK) + b"\xc0"


SEED = {  # the seed string "0" serialised by each format
    "": b"\x80\x05\x95\x05\x00\x00\x00\x00\x00\x00\x00\x8c\x010\x94.",
    "cbor": b"\x610",
    "msgpack": b"\xa10",
}
BLOCKS: dict[str, Callable[[bytes], bytes]] = {"": pickled, "cbor": cbor, "msgpack": msgpack_}
DIGESTS: dict[str, Callable[[bytes], bytes]] = {
    "sha256": lambda b: hashlib.sha256(b).digest(),
    "xxhash": xxhash.xxh3_128_digest,
}


@pytest.mark.parametrize("algo", HASH_ALGOS)
def test_the_first_two_blocks_are_vllm_s_chain_for_every_algorithm(algo: str) -> None:
    digest_name, _, serialisation = algo.partition("_")
    digest = DIGESTS[digest_name]
    none_hash = digest(SEED[serialisation])
    first = digest(BLOCKS[serialisation](none_hash))
    second = digest(BLOCKS[serialisation](first))
    hasher = VllmBlockHasher(algo, hash_seed="0", block_size=16)
    assert hasher.none_hash == none_hash
    assert hasher.digests(list(BLOCK) * 2 + [7] * 15) == [first, second]  # the partial block is not hashed
    assert hasher.block_hashes(list(BLOCK) * 2) == [external_key(first), external_key(second)]


def test_a_published_vector_of_the_default_algorithm() -> None:
    """sha256 (pickle), PYTHONHASHSEED=0, block size 16, the block 1..16: the digest written down once, so a
    change of Python's pickle output or of this code shows here."""
    hasher = VllmBlockHasher("sha256", hash_seed="0")
    (digest,) = hasher.digests(list(BLOCK))
    assert digest == hashlib.sha256(pickled(hashlib.sha256(SEED[""]).digest())).digest()
    assert digest.hex() == VECTOR


def test_extra_keys_follow_vllm_lora_on_every_block_then_the_salt_on_the_first() -> None:
    hasher = VllmBlockHasher("sha256")
    ids = list(BLOCK) * 2
    plain = hasher.digests(ids)
    fn = vllm_hash_function("sha256")
    salted = hasher.digests(ids, cache_salt="tenant-a")
    assert salted[0] == fn((hasher.none_hash, BLOCK, ("tenant-a",)))
    assert salted[1] == fn((salted[0], BLOCK, None))  # the salt enters the first block only
    both = hasher.digests(ids, cache_salt="tenant-a", lora_name="sql")
    assert both[0] == fn((hasher.none_hash, BLOCK, ("sql", "tenant-a")))
    assert both[1] == fn((both[0], BLOCK, ("sql",)))
    assert len({plain[0], salted[0], both[0]}) == 3
    # the hand-built pickle of the LoRA+salt first block agrees too
    extra = b"\x8c\x03sql\x94\x8c\x08tenant-a\x94\x86\x94"
    assert both[0] == hashlib.sha256(pickled(hasher.none_hash, extra)).digest()


def test_the_seed_and_the_block_size_change_every_key() -> None:
    ids = list(range(64))
    a = VllmBlockHasher("sha256", hash_seed="0").block_hashes(ids)
    assert VllmBlockHasher("sha256", hash_seed="1").block_hashes(ids)[0] != a[0]
    assert len(VllmBlockHasher("sha256", block_size=32).block_hashes(ids)) == 2 and len(a) == 4


def test_the_external_key_is_the_int_vllm_sends_the_low_64_bits() -> None:
    digest = bytes(range(32))
    assert external_key(digest) == int.from_bytes(digest[24:], "big") == 0x18191A1B1C1D1E1F


def test_a_memoised_chain_equals_a_fresh_one_and_the_memo_is_bounded() -> None:
    hasher = VllmBlockHasher("sha256_cbor", max_memo=10)
    ids = list(range(16 * 8))
    first = hasher.digests(ids)
    assert hasher.digests(ids) == first == VllmBlockHasher("sha256_cbor").digests(ids)
    hasher.digests(list(range(1000, 1000 + 16 * 8)))
    assert len(hasher._memo) <= 10


def test_an_unknown_algorithm_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="sha256_cbor"):
        VllmBlockHasher("builtin")


VECTOR = "bea72b7d33de03c1aa715efbb492d0e0d3801f00c1f985756896072ae8b31325"
