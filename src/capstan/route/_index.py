"""Prefix indexes: which endpoint probably (approximate) or certainly (precise) holds which KV blocks.

Both answer the same question for the scorers: for a request's chained block hashes, how many leading
blocks does
each endpoint hold? Because block hashes are chained, holding block ``i`` implies holding the whole prefix
up to
``i``; the match is still computed as the longest *consecutive* run from the start, like llm-d and vLLM do.

* :class:`ApproximatePrefixIndex` learns only from the router's own decisions (llm-d's approximate prefix
cache
  scorer): after a pick, the chosen endpoint is assumed to hold the request's blocks. Each endpoint has its
  own LRU of
  bounded size, so memory is bounded and stale guesses age out. ``stride`` indexes only every k-th block hash
  (the hash of block ``i`` identifies the whole prefix up to it), which is llm-d's answer to its memory
  issue #1158.
* :class:`PreciseKVIndex` is fed by the engines' KV events
(``BlockStored``/``BlockRemoved``/``AllBlocksCleared``).
  When the engine's block hashes differ from the router's (a real vLLM with its own seed), a ``rekey``
  function
  turns the token ids carried by ``BlockStored`` into router keys and an engine→router key map lets
  ``BlockRemoved`` evict, the dual-key scheme of llm-d-kv-cache. Its :class:`InFlightOverlay` adds what the
  events cannot know yet: the blocks of requests the router has sent and not seen confirmed (queued behind a
  busy engine), so that affinity holds while queues build (issue 28).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from capstan.kvcache import MEDIUM_GPU, AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

# Bytes per index entry for the index-memory gauge, as tracemalloc measured them (distinct blocks, 8 endpoints;
# tests/unit/route/test_index_match.py checks them): the precise index keeps an engine-hash dict per endpoint
# plus the key -> mask dict; the approximate one an OrderedDict per endpoint plus the same masks.
_PRECISE_BYTES_PER_ENTRY = 120
_APPROX_BYTES_PER_ENTRY = 170


class PrefixLookup(Protocol):
    """What the prefix scorer needs from an index."""

    def match(self, hashes: Sequence[int], names: Iterable[str]) -> dict[str, int]:
        """Number of leading blocks of ``hashes`` each endpoint in ``names`` holds (in indexed-block
        units)."""
        ...

    def indexed(self, hashes: Sequence[int]) -> Sequence[int]:
        """The subset of ``hashes`` the index keys on (all of them, or every ``stride``-th)."""
        ...


class _Holders:
    """Router key -> bitmask of the endpoints holding that block; each endpoint gets a bit on first sight, and
    the bit is reused once a forgotten endpoint holds nothing.

    NOTE: masks rather than sets of names make a match cheap: the per-block work is a C-level ``map`` of
    ``dict.get`` and a ``groupby`` over small ints (equal masks are mostly the same object), and Python code runs
    only where the holders change. A prompt of 100k tokens is ~6,000 blocks; a Python loop over them was most of
    a decision's time.
    """

    def __init__(self) -> None:
        self.masks: dict[int, int] = {}
        self._bits: dict[str, int] = {}
        self._free: list[int] = []

    def bit(self, name: str) -> int:
        b = self._bits.get(name)
        if b is None:
            b = self._free.pop() if self._free else 1 << len(self._bits)
            self._bits[name] = b
        return b

    def add(self, key: int, name: str) -> None:
        self.masks[key] = self.masks.get(key, 0) | self.bit(name)

    def discard(self, key: int, name: str) -> None:
        mask = self.masks.get(key)
        b = self._bits.get(name)
        if mask is None or b is None:
            return
        mask &= ~b
        if mask:
            self.masks[key] = mask
        else:
            del self.masks[key]

    def release(self, name: str) -> None:
        """``name`` holds no key any more (its entries were all discarded): free its bit."""
        b = self._bits.pop(name, None)
        if b is not None:
            self._free.append(b)

    def longest_runs(self, hashes: Sequence[int], names: Iterable[str]) -> dict[str, int]:
        """Per endpoint, the length of the run of ``hashes`` from the start that it holds.

        NOTE: found by bisection over positions, not by a walk: what an endpoint holds is prefix-closed (it
        holds a block's parent whenever it holds the block), because a request touches a chain tail first, so a
        parent is always used more recently than its children and LRU eviction takes children first; vLLM frees
        a request's blocks in that order and the approximate index records them so. On prefix-closed holdings
        the answer is exactly the longest held prefix, with about (endpoints × log2 of the prompt's blocks)
        lookups instead of one per block: a 5,000-block prompt against millions of entries cost ~1-2 ms in
        cache misses. Where a hole breaks the rule (a lost KV event), the run returned still ends at a block
        the endpoint holds followed by one it does not, but not necessarily the first such block.
        """
        matched = dict.fromkeys(names, 0)
        bits = {n: self._bits[n] for n in matched if n in self._bits}
        alive = 0
        for b in bits.values():
            alive |= b
        if not alive or not hashes:
            return matched
        get = self.masks.get
        first = get(hashes[0], 0) & alive
        if not first:  # a cold prompt: one lookup
            return matched
        ended = alive & ~first  # endpoints whose run has been placed (these end at 0)
        # intervals (lo, hi, mask at lo, mask at hi) of probed positions, leftmost popped first, so a run's end
        # is placed at the leftmost boundary found for it; position len(hashes) holds nothing
        stack = [(0, len(hashes), first, 0)]
        # bounded: every split halves an interval whose end masks differ, about 2 × bits × log2(n) splits
        while stack:
            lo, hi, m_lo, m_hi = stack.pop()
            m_lo &= ~ended
            m_hi &= ~ended
            if m_lo == m_hi:
                continue
            if hi - lo == 1:
                gone = m_lo & ~m_hi
                if gone:
                    for n, b in bits.items():
                        if b & gone:
                            matched[n] = hi
                    ended |= gone
                    if ended == alive:
                        break
                continue
            mid = (lo + hi) // 2
            m_mid = get(hashes[mid], 0) & m_lo
            stack.append((mid, hi, m_mid, m_hi))
            stack.append((lo, mid, m_lo, m_mid))
        return matched

    def __len__(self) -> int:
        return len(self.masks)


class ApproximatePrefixIndex:
    """Blocks each endpoint was sent, learned from routing decisions, one LRU of ``capacity`` entries per
    endpoint."""

    def __init__(self, capacity_per_endpoint: int = 31250, stride: int = 4) -> None:
        if capacity_per_endpoint < 1 or stride < 1:
            raise ValueError("capacity_per_endpoint and stride must be >= 1")
        self.capacity = capacity_per_endpoint
        self.stride = stride
        self._lru: dict[str, OrderedDict[int, None]] = {}
        self._holders = _Holders()

    def indexed(self, hashes: Sequence[int]) -> Sequence[int]:
        if self.stride == 1:
            return hashes
        return hashes[self.stride - 1 :: self.stride]

    def match(self, hashes: Sequence[int], names: Iterable[str]) -> dict[str, int]:
        return self._holders.longest_runs(self.indexed(hashes), names)

    def record(self, name: str, hashes: Sequence[int]) -> None:
        """The router sent a request with ``hashes`` to ``name``: assume it now holds them (most recent)."""
        lru = self._lru.setdefault(name, OrderedDict())
        # NOTE: tail first, so the head of the prompt is the most recently used and evicted last (the engine
        # releases blocks in the same order); a prefix then stays matchable as long as possible.
        for h in reversed(self.indexed(hashes)):
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            self._holders.add(h, name)
        while len(lru) > self.capacity:  # bounded: at most len(hashes) evictions
            old, _ = lru.popitem(last=False)
            self._holders.discard(old, name)

    def endpoints(self) -> list[str]:
        """Endpoints the index holds entries for."""
        return sorted(self._lru)

    def forget(self, name: str) -> None:
        """The endpoint went away (or restarted): drop everything learnt about it."""
        for h in self._lru.pop(name, OrderedDict()):
            self._holders.discard(h, name)
        self._holders.release(name)

    @property
    def size(self) -> int:
        return sum(len(lru) for lru in self._lru.values())

    @property
    def approx_bytes(self) -> int:
        return self.size * _APPROX_BYTES_PER_ENTRY


# rekey(parent_router_key, token_ids, block_size) -> one router key per full block of token_ids
Rekey = Callable[[int | None, Sequence[int], int], list[int]]


class _Sent:
    """One request the router sent and has not seen answered: where, its blocks, and when (the shell's clock)."""

    __slots__ = ("at", "endpoint", "hashes")

    def __init__(self, endpoint: str, hashes: Sequence[int], at: float) -> None:
        self.endpoint = endpoint
        self.hashes = hashes
        self.at = at


class InFlightOverlay:
    """The blocks of requests sent to each endpoint and not yet confirmed: what the engines will hold once
    they reach them.

    The KV events say only what an engine has stored; a request queued behind a busy replica is invisible to
    them, so without this the next request of the same conversation goes wherever the events point, and
    affinity is lost exactly when queues build. :class:`PreciseKVIndex` matches against the union of the two.

    A request's blocks leave the overlay when (a) the engine's events confirm them (:meth:`stored`: a
    ``BlockStored`` of the request's last block on its endpoint; the chain before it is stored by then, and
    from then on the confirmed set, with its removals, is the truth), (b) the shell settles the request
    (:meth:`settle`: the answer finished or failed, or the engine refused it), (c) the engine cleared its cache
    or the endpoint left (:meth:`forget`), or (d) it is older than ``ttl_s`` on the shell's clock
    (:meth:`expire`, run at each :meth:`add`). A ``BlockRemoved`` before (a) does not touch the overlay: a
    request still waiting will compute and store those blocks again when it runs.

    NOTE: memory is bounded by ``max_requests`` tickets (the oldest go first); a ticket keeps a reference to the
    request's own hash sequence, not a copy. Per endpoint, ``_refs`` counts the tickets holding each key, and
    ``_holders`` has the endpoint's bit exactly where the count is positive; ``_tails`` finds the tickets a
    stored block confirms. Time is whatever the shell passes, non-decreasing (``time.perf_counter`` in the proxy,
    the virtual clock in the harness), so the oldest ticket is always the first one.
    """

    def __init__(self, ttl_s: float = 600.0, max_requests: int = 65_536) -> None:
        if not ttl_s > 0 or max_requests < 1:
            raise ValueError("ttl_s must be > 0 and max_requests >= 1")
        self.ttl_s = ttl_s
        self.max_requests = max_requests
        self._sent: dict[int, _Sent] = {}  # ticket -> request, in the order sent
        self._refs: dict[str, dict[int, int]] = {}
        self._tails: dict[str, dict[int, list[int]]] = {}  # endpoint -> last key -> tickets
        self._holders = _Holders()
        self.expired = 0
        """Tickets dropped by the timeout or the request bound rather than confirmed or settled."""
        self.confirmed = 0
        """Tickets the engines' events confirmed."""

    def add(self, ticket: int, endpoint: str, hashes: Sequence[int], now: float) -> None:
        """Ticket ``ticket`` (unique per shell) with ``hashes`` went to ``endpoint`` at ``now``."""
        self.expire(now)
        self.settle(ticket)  # a reused ticket replaces its old request
        if not hashes:
            return
        while len(self._sent) >= self.max_requests:  # bounded: one pass per ticket held
            self._drop(next(iter(self._sent)))
            self.expired += 1
        self._sent[ticket] = _Sent(endpoint, hashes, now)
        self._tails.setdefault(endpoint, {}).setdefault(hashes[-1], []).append(ticket)
        refs = self._refs.setdefault(endpoint, {})
        for h in hashes:
            c = refs.get(h, 0)
            if not c:
                self._holders.add(h, endpoint)
            refs[h] = c + 1

    def settle(self, ticket: int) -> None:
        """The request is answered, failed or refused: its blocks are no longer in flight (unknown: no-op)."""
        if ticket in self._sent:
            self._drop(ticket)

    def expire(self, now: float) -> None:
        """Drop the tickets sent ``ttl_s`` or more before ``now``."""
        # bounded: each pass removes the oldest ticket or stops
        while self._sent:
            ticket, sent = next(iter(self._sent.items()))
            if now - sent.at < self.ttl_s:
                break
            self._drop(ticket)
            self.expired += 1

    def stored(self, endpoint: str, keys: Iterable[int]) -> None:
        """``endpoint`` reported storing ``keys``: the requests whose last block is among them are confirmed."""
        tails = self._tails.get(endpoint)
        if not tails:
            return
        for k in keys:
            tickets = tails.get(k)
            if tickets:
                for ticket in list(tickets):
                    self._drop(ticket)
                    self.confirmed += 1
                if not tails:
                    return

    def forget(self, endpoint: str) -> None:
        """The engine cleared its cache or the endpoint went away: nothing in flight there counts any more."""
        for ticket in [t for t, s in self._sent.items() if s.endpoint == endpoint]:
            self._drop(ticket)

    def _drop(self, ticket: int) -> None:
        sent = self._sent.pop(ticket)
        name = sent.endpoint
        tails = self._tails[name]
        waiting = tails[sent.hashes[-1]]
        waiting.remove(ticket)
        if not waiting:
            del tails[sent.hashes[-1]]
        refs = self._refs[name]
        for h in sent.hashes:
            c = refs[h]
            if c > 1:
                refs[h] = c - 1
            else:
                del refs[h]
                self._holders.discard(h, name)
        if not refs:
            del self._refs[name], self._tails[name]
            self._holders.release(name)

    def match(self, hashes: Sequence[int], names: Iterable[str]) -> dict[str, int]:
        """Per endpoint, the leading blocks of ``hashes`` that requests in flight there carry."""
        return self._holders.longest_runs(hashes, names)

    def __contains__(self, ticket: int) -> bool:
        return ticket in self._sent

    @property
    def requests(self) -> int:
        return len(self._sent)

    @property
    def size(self) -> int:
        """(endpoint, block) entries held."""
        return sum(len(r) for r in self._refs.values())


class PreciseKVIndex:
    """Blocks each endpoint reported holding through its KV events, and (``inflight``) the blocks of the
    requests sent to it and not yet answered.

    NOTE: per endpoint, ``_blocks`` maps engine hash → router key in insertion order; ``_holders`` maps
    router key → endpoints. Both are kept consistent by :meth:`apply`; ``max_blocks_per_endpoint`` bounds
    memory if an engine never sends its removals (the oldest entries go first). A match is the longer of the
    confirmed run and the in-flight run: both holdings are prefix-closed (a request's hashes are a whole chain
    from the root), so the longest run of their union is the longer of the two.
    """

    def __init__(
        self,
        rekey: Rekey | None = None,
        max_blocks_per_endpoint: int = 4_000_000,
        inflight: InFlightOverlay | None = None,
    ) -> None:
        self._rekey = rekey
        self.max_blocks = max_blocks_per_endpoint
        self._blocks: dict[str, dict[int, int]] = {}
        self._holders = _Holders()
        self.inflight = inflight
        self.events_applied = 0
        self.other_medium_events = 0

    def indexed(self, hashes: Sequence[int]) -> Sequence[int]:
        return hashes

    def match(self, hashes: Sequence[int], names: Iterable[str]) -> dict[str, int]:
        confirmed = self._holders.longest_runs(hashes, names)
        if self.inflight is None or not self.inflight.requests:
            return confirmed
        sent = self.inflight.match(hashes, confirmed)
        return {n: max(run, sent[n]) for n, run in confirmed.items()}

    def sent(self, ticket: int, name: str, hashes: Sequence[int], now: float) -> None:
        """The router sent ``hashes`` to ``name`` as ``ticket`` at ``now`` (no overlay: nothing to do)."""
        if self.inflight is not None:
            self.inflight.add(ticket, name, hashes, now)

    def settle(self, ticket: int) -> None:
        """``ticket``'s request was answered, failed or refused."""
        if self.inflight is not None:
            self.inflight.settle(ticket)

    def apply(self, name: str, events: Iterable[KVEvent]) -> None:
        """Apply one endpoint's events, in the order the engine published them."""
        blocks = self._blocks.setdefault(name, {})
        for ev in events:
            self.events_applied += 1
            # NOTE: the index holds what is in the engine's GPU cache, what its scheduler counts as a prefix hit.
            # vLLM with KV offloading also reports the blocks it stores to and drops from CPU (or storage): those
            # must neither add a block nor, above all, remove one the GPU still holds. Older engines send no medium.
            if isinstance(ev, BlockStored | BlockRemoved) and ev.medium not in (None, MEDIUM_GPU):
                self.other_medium_events += 1
                continue
            if isinstance(ev, BlockStored):
                keys = self._router_keys(blocks, ev)
                for eh, rk in zip(ev.block_hashes, keys, strict=False):  # keys may be shorter
                    if eh in blocks:
                        continue
                    blocks[eh] = rk
                    self._holders.add(rk, name)
                while len(blocks) > self.max_blocks:
                    eh = next(iter(blocks))
                    self._holders.discard(blocks.pop(eh), name)
                if self.inflight is not None:
                    self.inflight.stored(name, keys)
            elif isinstance(ev, BlockRemoved):
                for eh in ev.block_hashes:
                    removed = blocks.pop(eh, None)
                    if removed is not None:
                        self._holders.discard(removed, name)
            elif isinstance(ev, AllBlocksCleared):
                self.forget(name)
                blocks = self._blocks.setdefault(name, {})

    def _router_keys(self, blocks: dict[int, int], ev: BlockStored) -> Sequence[int]:
        if self._rekey is None:
            return ev.block_hashes
        parent = None if ev.parent_block_hash is None else blocks.get(ev.parent_block_hash)
        if ev.parent_block_hash is not None and parent is None:
            return ()  # parent unknown (its event was lost): the chain cannot be rebuilt, skip
        return self._rekey(parent, ev.token_ids, ev.block_size)

    def forget(self, name: str) -> None:
        for rk in self._blocks.pop(name, {}).values():
            self._holders.discard(rk, name)
        self._holders.release(name)
        if self.inflight is not None:
            self.inflight.forget(name)

    @property
    def size(self) -> int:
        return sum(len(b) for b in self._blocks.values())

    @property
    def approx_bytes(self) -> int:
        return self.size * _PRECISE_BYTES_PER_ENTRY
