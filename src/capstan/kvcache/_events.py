"""vLLM's KV-cache events and their wire format (msgpack over ZMQ PUB), shared by publisher and subscribers.

The layout follows vLLM's ``vllm/distributed/kv_events.py`` (msgspec structs with ``array_like=True``,
``omit_defaults=True``; events are ``tag=True`` so the class name comes first):

* batch: ``[ts, [event, ...]]`` (``data_parallel_rank`` is omitted when None, as msgspec omits defaults);
* ``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium]``;
* ``["BlockRemoved", block_hashes, medium]``;
* ``["AllBlocksCleared"]``.

A ZMQ message has three frames: topic (``kv@<host>:<port>@<model>``), the batch sequence number as 8 bytes
big-endian, and the payload. Hashes are the 63-bit ints of :func:`capstan.kvcache.block_hashes` (vLLM sends ints
when ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES`` is on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

MEDIUM_GPU = "GPU"


@dataclass(frozen=True)
class BlockStored:
    """Blocks that became cached, in chain order; ``parent_block_hash`` precedes the first (None at the root)."""

    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = MEDIUM_GPU


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


def decode_kv_batch(payload: bytes) -> tuple[float, list[KVEvent]]:
    """Decode a ``KVEventBatch`` payload (also accepts vLLM's newer trailing fields). Raises ValueError."""
    try:
        data = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (msgpack.UnpackException, ValueError) as exc:
        raise ValueError(f"not a msgpack KV event batch: {exc}") from None
    if not isinstance(data, list) or len(data) < 2 or not isinstance(data[1], list):
        raise ValueError("KV event batch must be an array [ts, events, ...]")
    out: list[KVEvent] = []
    for raw in data[1]:
        if not isinstance(raw, list) or not raw or not isinstance(raw[0], str):
            raise ValueError(f"malformed KV event: {raw!r:.80}")
        tag = raw[0]
        if tag == "BlockStored" and len(raw) >= 5:
            lora = raw[5] if len(raw) > 5 else None
            medium = raw[6] if len(raw) > 6 else None
            out.append(BlockStored(list(raw[1]), raw[2], list(raw[3]), int(raw[4]), lora, medium))
        elif tag == "BlockRemoved" and len(raw) >= 2:
            out.append(BlockRemoved(list(raw[1]), raw[2] if len(raw) > 2 else None))
        elif tag == "AllBlocksCleared":
            out.append(AllBlocksCleared())
        else:
            raise ValueError(f"unknown or short KV event {tag!r}")
    return float(data[0]), out
