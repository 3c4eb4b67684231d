"""The router's side of vLLM KV events: a ZMQ SUB loop feeding a PreciseKVIndex.

The wire format (three frames: topic, 8-byte sequence number, msgpack batch) and its one strict decoder are
defined in :mod:`capstan.kvcache` (:func:`~capstan.kvcache.parse_kv_message`,
:func:`~capstan.kvcache.decode_kv_batch`); a batch they reject is counted and skipped instead of corrupting the
index.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import zmq
import zmq.asyncio

from capstan.kvcache import KVEventFormatError, decode_kv_batch, parse_kv_message
from capstan.route._index import PreciseKVIndex

log = logging.getLogger(__name__)


@dataclass
class SubscriberStats:
    batches: int = 0
    bad_batches: int = 0
    gaps: int = 0


class KVEventSubscriber:
    """Subscribes to each endpoint's publisher and applies its events to the index, in order, per endpoint.

    One SUB socket per endpoint (the "pod discovery" mode of llm-d): the endpoint a batch belongs to is the socket
    it came from, so the topic need not carry a routable address. A sequence gap (lost batches) makes the
    endpoint's entries untrustworthy, so they are dropped and rebuilt from later events. :meth:`sync` follows a
    changing set of endpoints: a publisher that appears is subscribed to, one that leaves is closed and its
    entries are dropped.
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
        self._subs: dict[str, tuple[str, zmq.asyncio.Socket, asyncio.Task[None]]] = {}
        self._dropped: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self.sync(self.publishers)

    def sync(self, publishers: Mapping[str, str]) -> None:
        """Subscribe to exactly ``publishers`` (endpoint name → address); needs a running event loop."""
        for name in sorted(self._subs):
            if publishers.get(name) != self._subs[name][0]:
                self._drop(name)
        for name, address in sorted(publishers.items()):
            if name in self._subs:
                continue
            sock = self._ctx.socket(zmq.SUB)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SUBSCRIBE, b"kv@")
            sock.connect(address)
            task = asyncio.create_task(self._run(name, sock), name=f"kv-events-{name}")
            self._subs[name] = (address, sock, task)
        self.publishers = dict(publishers)

    def _drop(self, name: str) -> None:
        _, sock, task = self._subs.pop(name)
        task.cancel()
        # the socket is closed once the task has left its poll, never under it
        task.add_done_callback(lambda _t: sock.close(linger=0))
        self._dropped = [t for t in self._dropped if not t.done()] + [task]
        self._last_seq.pop(name, None)
        self.index.forget(name)

    async def _run(self, name: str, sock: zmq.asyncio.Socket) -> None:
        while True:  # runs until cancelled by sync() or stop(); each recv is bounded by the poll timeout
            if not await sock.poll(timeout=1000):
                continue
            frames = await sock.recv_multipart()
            self.handle(name, frames)

    def handle(self, name: str, frames: Sequence[bytes]) -> None:
        """Apply one received message (three frames) from endpoint ``name``."""
        try:
            message = parse_kv_message(frames)
        except KVEventFormatError:
            self.stats.bad_batches += 1
            return
        seq = message.seq
        last = self._last_seq.get(name)
        if last is not None and seq != last + 1:
            self.stats.gaps += 1
            self.index.forget(name)
        self._last_seq[name] = seq
        try:
            _, events = decode_kv_batch(message.payload)
        except KVEventFormatError as exc:
            self.stats.bad_batches += 1
            log.warning("bad KV-event batch from %s: %s", name, exc)
            return
        self.index.apply(name, events)
        self.stats.batches += 1
        if self._on_batch is not None:
            self._on_batch(name, len(events))

    async def stop(self) -> None:
        subs = list(self._subs.values())
        self._subs.clear()
        for _, _, t in subs:
            t.cancel()
        for _, sock, t in subs:
            with contextlib.suppress(asyncio.CancelledError):
                await t
            sock.close(linger=0)
        for t in self._dropped:  # their sockets close as they finish
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._dropped.clear()
        if self._own_ctx:
            self._ctx.term()
