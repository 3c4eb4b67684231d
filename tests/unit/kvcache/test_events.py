"""The one strict KV-event decoder and the message frames, as every subscriber reads them."""

from __future__ import annotations

import msgpack
import pytest

from capstan.kvcache import (
    BlockRemoved,
    BlockStored,
    KVEventFormatError,
    KVMessage,
    decode_kv_batch,
    encode_kv_batch,
    encode_seq,
    parse_kv_message,
)

pytestmark = pytest.mark.unit


def test_a_message_is_topic_sequence_and_payload() -> None:
    payload = encode_kv_batch([BlockRemoved([7])], 2.0)
    message = parse_kv_message([b"kv@h:1@m", encode_seq(258), payload])
    assert message == KVMessage(b"kv@h:1@m", 258, payload)
    with pytest.raises(KVEventFormatError, match="3 frames"):
        parse_kv_message([b"kv@h:1@m", payload])
    with pytest.raises(KVEventFormatError, match="8 bytes"):
        parse_kv_message([b"kv@h:1@m", b"\x01", payload])


def test_bytes_hashes_are_read_big_endian_lora_name_kept_and_trailing_fields_ignored() -> None:
    raw = msgpack.packb(
        [
            3.5,
            [
                ["BlockStored", [b"\x01\x00", 9], b"\x02", [4, 5], 16, 3, "GPU", "lora-a", [None, None], 0],
                ["BlockRemoved", [b"\x03"]],
            ],
            0,
        ]
    )
    assert decode_kv_batch(raw) == (
        3.5,
        [BlockStored([256, 9], 2, [4, 5], 16, 3, "GPU", "lora-a"), BlockRemoved([3], None)],
    )


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (msgpack.packb(["1.5", []]), "timestamp"),
        (msgpack.packb([True, []]), "timestamp"),
        (msgpack.packb([1.0, [["BlockStored", b"\x01\x02", None, [], 16]]]), "block_hashes"),
        (msgpack.packb([1.0, [["BlockStored", [1], None, [], "16"]]]), "block_size"),
        (msgpack.packb([1.0, [["BlockStored", [1], None, [], 16.0]]]), "block_size"),
        (msgpack.packb([1.0, [["BlockStored", [True], None, [], 16]]]), "block hash"),
        (msgpack.packb([1.0, [["BlockStored", [1], None, "ab", 16]]]), "token_ids"),
        (msgpack.packb([1.0, [["BlockStored", [1], None, [1], 16, "x"]]]), "lora_id"),
        (msgpack.packb([1.0, [["BlockRemoved", 5]]]), "block_hashes"),
        (msgpack.packb([1.0, [["BlockRemoved", [5], 1]]]), "medium"),
        (msgpack.packb([1.0, [["BlockRemoved"]]]), "short"),
        (b"\x81\x91\x01\x02", "msgpack"),  # a map keyed by an array
    ],
)
def test_what_the_decoder_rejects(payload: bytes, problem: str) -> None:
    with pytest.raises(KVEventFormatError, match=problem):
        decode_kv_batch(payload)
