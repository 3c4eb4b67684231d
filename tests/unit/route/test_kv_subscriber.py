"""The KV-event subscriber's per-endpoint bookkeeping (issue 28 §3): a replica that restarts (its sequence numbers
start over) or clears its cache loses exactly its own entries, and events about other media never touch the GPU
blocks the index holds. Frames are built with the wire format's own encoders; no sockets are opened."""

from __future__ import annotations

import zmq.asyncio

from capstan.kvcache import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVEvent,
    encode_kv_batch,
    encode_seq,
    kv_topic,
)
from capstan.route import PreciseKVIndex
from capstan.route._kvevents import KVEventSubscriber


def frames(port: int, seq: int, events: list[KVEvent]) -> list[bytes]:
    return [kv_topic("10.0.0.1", port, "m").encode(), encode_seq(seq), encode_kv_batch(events, 1.0)]


def stored(*hashes: int, medium: str | None = "GPU") -> BlockStored:
    return BlockStored(list(hashes), None, list(range(16 * len(hashes))), 16, medium=medium)


def test_a_restarted_or_cleared_replica_loses_only_its_own_entries() -> None:
    ctx = zmq.asyncio.Context()
    try:
        index = PreciseKVIndex()
        sub = KVEventSubscriber(index, {"a": "tcp://a", "b": "tcp://b"}, ctx=ctx)
        sub.handle("a", frames(1, 0, [stored(1, 2, 3)]))
        sub.handle("b", frames(2, 0, [stored(1, 2)]))
        assert index.match([1, 2, 3], ["a", "b"]) == {"a": 3, "b": 2}
        # a restarts: its publisher counts from 0 again; what it held before is gone with its process
        sub.handle("a", frames(1, 0, [stored(7)]))
        assert sub.stats.gaps == 1
        assert index.match([1, 2, 3], ["a", "b"]) == {"a": 0, "b": 2}
        assert index.match([7], ["a", "b"]) == {"a": 1, "b": 0}
        sub.handle("a", frames(1, 1, [stored(8)]))  # in sequence again: no gap, nothing dropped
        assert sub.stats.gaps == 1 and index.match([7], ["a"]) == {"a": 1}
        # b resets its prefix cache: only b's entries go
        sub.handle("b", frames(2, 1, [AllBlocksCleared()]))
        assert index.match([1, 2], ["a", "b"]) == {"a": 0, "b": 0} and index.match([7], ["a"]) == {"a": 1}
        # an offloading engine reports its CPU tier: that never removes (or adds) a GPU block
        sub.handle("a", frames(1, 2, [BlockRemoved([7], medium="CPU"), stored(9, medium="CPU")]))
        assert index.match([7], ["a"]) == {"a": 1} and index.match([9], ["a"]) == {"a": 0}
        assert sub.stats.batches == 6 and sub.stats.bad_batches == 0
        sub.handle("a", [b"kv@x", b"\x00", b"junk"])  # a malformed message is counted, never applied
        assert sub.stats.bad_batches == 1 and index.match([7], ["a"]) == {"a": 1}
    finally:
        ctx.term()
