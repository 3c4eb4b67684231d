"""vLLM KV events: decoding the msgpack batches (pure) and a ZMQ SUB loop feeding a :class:`PreciseKVIndex`.

vLLM publishes each batch as three frames: topic (``kv@<host>:<port>@<model>``), an 8-byte big-endian sequence
number and a msgpack payload ``[ts, [event, ...], data_parallel_rank?]``. Each event is a msgspec tagged
array:
``["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, ...]``,
``["BlockRemoved", block_hashes, medium, ...]`` or ``["AllBlocksCleared"]``. Hashes are ints or bytes (vLLM's
``ExternalBlockHash``); bytes are read as big-endian unsigned ints. Trailing fields newer vLLM versions add
are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import zmq
import zmq.asyncio

from capstan.route._index import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent, PreciseKVIndex

log = logging.getLogger(__name__)


class KVEventFormatError(ValueError):
    """A payload that is not a vLLM KV-event batch."""


def _hash(value: Any) -> int:
    if isinstance(value, bool):
        raise KVEventFormatError(f"block hash must be int or bytes, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, bytes | bytearray):
        return int.from_bytes(value, "big")
    raise KVEventFormatError(f"block hash must be int or bytes, got {type(value).__name__}")


def _hashes(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise KVEventFormatError("block_hashes must be a list")
    return tuple(_hash(v) for v in value)


def decode_event(raw: Any) -> KVEvent:
    if not isinstance(raw, list | tuple) or not raw or not isinstance(raw[0], str):
        raise KVEventFormatError("event must be a tagged array")
    tag = raw[0]
    if tag == "BlockStored":
        if len(raw) < 5:
            raise KVEventFormatError(
                "BlockStored needs block_hashes, parent_block_hash, token_ids, block_size"
            )
        parent = None if raw[2] is None else _hash(raw[2])
        tokens = raw[3]
        if not isinstance(tokens, list | tuple) or not all(isinstance(t, int) for t in tokens):
            raise KVEventFormatError("token_ids must be a list of ints")
        if not isinstance(raw[4], int) or raw[4] < 1:
            raise KVEventFormatError("block_size must be a positive int")
        return BlockStored(_hashes(raw[1]), parent, tuple(tokens), raw[4])
    if tag == "BlockRemoved":
        if len(raw) < 2:
            raise KVEventFormatError("BlockRemoved needs block_hashes")
        return BlockRemoved(_hashes(raw[1]))
    if tag == "AllBlocksCleared":
        return AllBlocksCleared()
    raise KVEventFormatError(f"unknown event type {tag!r}")


def decode_batch(payload: bytes) -> tuple[float, list[KVEvent]]:
    """Decode one msgpack payload into ``(timestamp, events)``; raises :class:`KVEventFormatError`."""
    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types
        raise KVEventFormatError(f"not msgpack: {exc}") from None
    if not isinstance(raw, list | tuple) or len(raw) < 2 or not isinstance(raw[1], list | tuple):
        raise KVEventFormatError("batch must be [ts, [events...], ...]")
    ts = raw[0]
    if not isinstance(ts, int | float):
        raise KVEventFormatError("batch timestamp must be a number")
    return float(ts), [decode_event(e) for e in raw[1]]


def encode_batch(ts: float, events: Sequence[KVEvent]) -> bytes:
    """The inverse of :func:`decode_batch` (used by tests and the harness; the engine simulator has its
    own)."""
    out: list[list[Any]] = []
    for ev in events:
        if isinstance(ev, BlockStored):
            out.append(
                [
                    "BlockStored",
                    list(ev.block_hashes),
                    ev.parent_block_hash,
                    list(ev.token_ids),
                    ev.block_size,
                    None,
                    "GPU",
                ]
            )
        elif isinstance(ev, BlockRemoved):
            out.append(["BlockRemoved", list(ev.block_hashes), "GPU"])
        else:
            out.append(["AllBlocksCleared"])
    packed: bytes = msgpack.packb([ts, out, 0], use_bin_type=True)
    return packed


@dataclass
class SubscriberStats:
    batches: int = 0
    bad_batches: int = 0
    gaps: int = 0


class KVEventSubscriber:
    """Subscribes to each endpoint's publisher and applies its events to the index, in order, per endpoint.

    One SUB socket per endpoint (the "pod discovery" mode of llm-d): the endpoint a batch belongs to is the
    socket
    it came from, so the topic need not carry a routable address. A sequence gap (lost batches) makes the
    endpoint's
    entries untrustworthy, so they are dropped and rebuilt from later events.
    """

    def __init__(
        self,
        index: PreciseKVIndex,
        publishers: dict[str, str],
        on_batch: Callable[[str, int], None] | None = None,
        ctx: zmq.asyncio.Context | None = None,
    ) -> None:
        self.index = index
        self.publishers = dict(publishers)
        self.stats = SubscriberStats()
        self._on_batch = on_batch
        self._ctx = ctx or zmq.asyncio.Context()
        self._own_ctx = ctx is None
        self._last_seq: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._sockets: list[zmq.asyncio.Socket] = []

    async def start(self) -> None:
        for name, address in sorted(self.publishers.items()):
            sock = self._ctx.socket(zmq.SUB)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SUBSCRIBE, b"kv@")
            sock.connect(address)
            self._sockets.append(sock)
            self._tasks.append(asyncio.create_task(self._run(name, sock), name=f"kv-events-{name}"))

    async def _run(self, name: str, sock: zmq.asyncio.Socket) -> None:
        while True:  # runs until cancelled by stop(); each recv is bounded by the poll timeout
            if not await sock.poll(timeout=1000):
                continue
            frames = await sock.recv_multipart()
            self.handle(name, frames)

    def handle(self, name: str, frames: Sequence[bytes]) -> None:
        """Apply one received message (three frames) from endpoint ``name``."""
        if len(frames) != 3 or len(frames[1]) != 8:
            self.stats.bad_batches += 1
            return
        seq = int.from_bytes(frames[1], "big")
        last = self._last_seq.get(name)
        if last is not None and seq != last + 1:
            self.stats.gaps += 1
            self.index.forget(name)
        self._last_seq[name] = seq
        try:
            _, events = decode_batch(frames[2])
        except KVEventFormatError as exc:
            self.stats.bad_batches += 1
            log.warning("bad KV-event batch from %s: %s", name, exc)
            return
        self.index.apply(name, events)
        self.stats.batches += 1
        if self._on_batch is not None:
            self._on_batch(name, len(events))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for s in self._sockets:
            s.close(linger=0)
        self._tasks.clear()
        self._sockets.clear()
        if self._own_ctx:
            self._ctx.term()
