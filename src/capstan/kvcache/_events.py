"""vLLM's KV-cache events and their wire format (msgpack over ZMQ PUB), shared by publisher and subscribers.

The layout follows vLLM's ``vllm/distributed/kv_events.py`` (msgspec structs with ``array_like=True``,
``omit_defaults=True``; events are ``tag=True`` so the class name comes first):

* batch: ``[ts, [event, ...]]`` (``data_parallel_rank`` is omitted when None, as msgspec omits defaults);
* ``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name]`` (vLLM
  then adds ``extra_keys``, ``group_idx`` and cache-spec fields, read past here);
* ``["BlockRemoved", block_hashes, medium]``;
* ``["AllBlocksCleared"]``.

A ZMQ message has three frames: topic (``kv@<host>:<port>@<model>``), the batch sequence number as 8 bytes
big-endian, and the payload (:func:`parse_kv_message`). Hashes are the 63-bit ints of
:func:`capstan.kvcache.block_hashes` (vLLM sends ints when ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` is on, and its
``ExternalBlockHash`` bytes otherwise, which are read as the int vLLM would have sent: the low 64 bits of their
big-endian value). With a served model's tokenizer the hashes are vLLM's own (``_vllm.py``).

The decoder is strict, because a subscriber of *real* engines must count and skip a bad batch instead of
corrupting its index: every field is type-checked and anything else raises :class:`KVEventFormatError` (a
``ValueError``). vLLM's newer trailing fields (of a batch and of an event) are accepted and ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

MEDIUM_GPU = "GPU"
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class BlockStored:
    """Blocks that became cached, in chain order; ``parent_block_hash`` precedes the first (None at the root)."""

    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = MEDIUM_GPU
    lora_name: str | None = None


@dataclass(frozen=True)
class BlockRemoved:
    """Blocks evicted from the cache."""

    block_hashes: list[int]
    medium: str | None = MEDIUM_GPU


@dataclass(frozen=True)
class AllBlocksCleared:
    """The whole prefix cache was reset."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


def kv_topic(host: str, port: int, model: str) -> str:
    """The topic vLLM deployments use for one replica: ``kv@<host>:<port>@<model>``."""
    return f"kv@{host}:{port}@{model}"


def _event_list(ev: KVEvent) -> list[Any]:
    if isinstance(ev, BlockStored):
        return [
            "BlockStored",
            ev.block_hashes,
            ev.parent_block_hash,
            ev.token_ids,
            ev.block_size,
            ev.lora_id,
            ev.medium,
            ev.lora_name,
        ]
    if isinstance(ev, BlockRemoved):
        return ["BlockRemoved", ev.block_hashes, ev.medium]
    return ["AllBlocksCleared"]


def encode_kv_batch(events: list[KVEvent], ts: float) -> bytes:
    """msgpack payload of one ``KVEventBatch``."""
    packed: bytes = msgpack.packb([ts, [_event_list(e) for e in events]], use_bin_type=True)
    return packed


def encode_seq(seq: int) -> bytes:
    """The second frame: the batch sequence number, 8 bytes big-endian."""
    return seq.to_bytes(8, "big", signed=False)


class KVEventFormatError(ValueError):
    """A payload or a message that is not a vLLM KV-event batch."""


@dataclass(frozen=True)
class KVMessage:
    """One ZMQ message of a publisher, split into its frames (the payload is not decoded yet)."""

    topic: bytes
    seq: int
    payload: bytes


def parse_kv_message(frames: Sequence[bytes]) -> KVMessage:
    """Split the three frames of one message; raises :class:`KVEventFormatError`."""
    if len(frames) != 3:
        raise KVEventFormatError(f"a KV-event message has 3 frames, got {len(frames)}")
    topic, seq, payload = frames
    if len(seq) != 8:
        raise KVEventFormatError(f"the sequence frame has 8 bytes, got {len(seq)}")
    return KVMessage(bytes(topic), int.from_bytes(seq, "big"), bytes(payload))


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KVEventFormatError(f"{what} must be an int, got {value!r:.40}")
    return value


def _hash(value: Any) -> int:
    if isinstance(value, bytes | bytearray):
        # the int vLLM itself sends for these bytes with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (its default): the low
        # 64 bits, so both forms of one digest name one block (capstan.kvcache.external_key)
        return int.from_bytes(value, "big") & _MASK64
    if isinstance(value, bool) or not isinstance(value, int):
        raise KVEventFormatError(f"block hash must be int or bytes, got {value!r:.40}")
    return value


def _hashes(value: Any, what: str) -> list[int]:
    if not isinstance(value, list):
        raise KVEventFormatError(f"{what} must be an array, got {type(value).__name__}")
    return [_hash(h) for h in value]


def _optional(value: Any, kind: type, what: str) -> Any:
    if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
        raise KVEventFormatError(f"{what} must be {kind.__name__} or nil, got {value!r:.40}")
    return value


def _decode_event(raw: Any) -> KVEvent:
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], str):
        raise KVEventFormatError(f"malformed KV event: {raw!r:.80}")
    tag = raw[0]
    if tag == "BlockStored" and len(raw) >= 5:
        token_ids = raw[3]
        if not isinstance(token_ids, list):
            raise KVEventFormatError("BlockStored.token_ids must be an array")
        block_size = _int(raw[4], "BlockStored.block_size")
        if block_size < 1:
            raise KVEventFormatError("BlockStored.block_size must be a positive int")
        return BlockStored(
            _hashes(raw[1], "BlockStored.block_hashes"),
            None if raw[2] is None else _hash(raw[2]),
            [_int(t, "BlockStored.token_ids[]") for t in token_ids],
            block_size,
            _optional(raw[5] if len(raw) > 5 else None, int, "BlockStored.lora_id"),
            _optional(raw[6] if len(raw) > 6 else None, str, "BlockStored.medium"),
            _optional(raw[7] if len(raw) > 7 else None, str, "BlockStored.lora_name"),
        )
    if tag == "BlockRemoved" and len(raw) >= 2:
        medium = _optional(raw[2] if len(raw) > 2 else None, str, "BlockRemoved.medium")
        return BlockRemoved(_hashes(raw[1], "BlockRemoved.block_hashes"), medium)
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    raise KVEventFormatError(f"unknown or short KV event {tag!r}")


def decode_kv_batch(payload: bytes) -> tuple[float, list[KVEvent]]:
    """Decode and check one ``KVEventBatch`` payload into ``(timestamp, events)``; raises KVEventFormatError."""
    try:
        data = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (msgpack.UnpackException, ValueError, TypeError) as exc:  # TypeError: an unhashable map key
        raise KVEventFormatError(f"not a msgpack KV event batch: {exc}") from None
    if not isinstance(data, list) or len(data) < 2 or not isinstance(data[1], list):
        raise KVEventFormatError("KV event batch must be an array [ts, events, ...]")
    ts = data[0]
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        raise KVEventFormatError(f"KV event batch timestamp must be a number, got {ts!r:.40}")
    return float(ts), [_decode_event(raw) for raw in data[1]]
