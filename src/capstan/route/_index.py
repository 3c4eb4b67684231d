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
  ``BlockRemoved`` evict, the dual-key scheme of llm-d-kv-cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from capstan.kvcache import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

# Rough per-entry cost of the Python structures used below (dict slot + set membership + int object), used
# for the
# index-memory gauge. bench/route_*.py measures the real figure with tracemalloc.
_BYTES_PER_ENTRY = 160


class PrefixLookup(Protocol):
    """What the prefix scorer needs from an index."""

    def match(self, hashes: Sequence[int], names: Iterable[str]) -> dict[str, int]:
        """Number of leading blocks of ``hashes`` each endpoint in ``names`` holds (in indexed-block
        units)."""
        ...

    def indexed(self, hashes: Sequence[int]) -> Sequence[int]:
        """The subset of ``hashes`` the index keys on (all of them, or every ``stride``-th)."""
        ...


def _longest_runs(
    hashes: Sequence[int], names: Iterable[str], holders_of: Callable[[int], set[str] | None]
) -> dict[str, int]:
    alive = set(names)
    matched = dict.fromkeys(alive, 0)
    end = len(hashes)
    for i, h in enumerate(hashes):  # bounded by len(hashes)
        holders = holders_of(h)
        if not holders:
            end = i
            break
        if alive <= holders:  # the common case: nobody drops out at this block
            continue
        still = alive & holders
        for name in alive - still:
            matched[name] = i
        alive = still
        if not alive:
            break
    for name in alive:
        matched[name] = end
    return matched


class ApproximatePrefixIndex:
    """Blocks each endpoint was sent, learned from routing decisions, one LRU of ``capacity`` entries per
    endpoint."""

    def __init__(self, capacity_per_endpoint: int = 31250, stride: int = 4) -> None:
        if capacity_per_endpoint < 1 or stride < 1:
            raise ValueError("capacity_per_endpoint and stride must be >= 1")
        self.capacity = capacity_per_endpoint
        self.stride = stride
        self._lru: dict[str, OrderedDict[int, None]] = {}
        self._holders: dict[int, set[str]] = {}

    def indexed(self, hashes: Sequence[int]) -> Sequence[int]:
        if self.stride == 1:
            return hashes
        return hashes[self.stride - 1 :: self.stride]

    def match(self, hashes: Sequence[int], names: Iterable[str]) -> dict[str, int]:
        return _longest_runs(self.indexed(hashes), names, self._holders.get)

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
            self._holders.setdefault(h, set()).add(name)
        while len(lru) > self.capacity:  # bounded: at most len(hashes) evictions
            old, _ = lru.popitem(last=False)
            self._drop(old, name)

    def endpoints(self) -> list[str]:
        """Endpoints the index holds entries for."""
        return sorted(self._lru)

    def forget(self, name: str) -> None:
        """The endpoint went away (or restarted): drop everything learnt about it."""
        for h in self._lru.pop(name, OrderedDict()):
            self._drop(h, name)

    def _drop(self, h: int, name: str) -> None:
        holders = self._holders.get(h)
        if holders is not None:
            holders.discard(name)
            if not holders:
                del self._holders[h]

    @property
    def size(self) -> int:
        return sum(len(lru) for lru in self._lru.values())

    @property
    def approx_bytes(self) -> int:
        return self.size * _BYTES_PER_ENTRY


# rekey(parent_router_key, token_ids, block_size) -> one router key per full block of token_ids
Rekey = Callable[[int | None, Sequence[int], int], list[int]]


class PreciseKVIndex:
    """Blocks each endpoint reported holding through its KV events.

    NOTE: per endpoint, ``_blocks`` maps engine hash → router key in insertion order; ``_holders`` maps
    router key →
    endpoints. Both are kept consistent by :meth:`apply`; ``max_blocks_per_endpoint`` bounds memory if an
    engine
    never sends its removals (the oldest entries go first).
    """

    def __init__(self, rekey: Rekey | None = None, max_blocks_per_endpoint: int = 4_000_000) -> None:
        self._rekey = rekey
        self.max_blocks = max_blocks_per_endpoint
        self._blocks: dict[str, dict[int, int]] = {}
        self._holders: dict[int, set[str]] = {}
        self.events_applied = 0

    def indexed(self, hashes: Sequence[int]) -> Sequence[int]:
        return hashes

    def match(self, hashes: Sequence[int], names: Iterable[str]) -> dict[str, int]:
        return _longest_runs(hashes, names, self._holders.get)

    def apply(self, name: str, events: Iterable[KVEvent]) -> None:
        """Apply one endpoint's events, in the order the engine published them."""
        blocks = self._blocks.setdefault(name, {})
        for ev in events:
            self.events_applied += 1
            if isinstance(ev, BlockStored):
                keys = self._router_keys(blocks, ev)
                for eh, rk in zip(ev.block_hashes, keys, strict=False):  # keys may be shorter
                    if eh in blocks:
                        continue
                    blocks[eh] = rk
                    self._holders.setdefault(rk, set()).add(name)
                while len(blocks) > self.max_blocks:
                    eh = next(iter(blocks))
                    self._drop(name, blocks.pop(eh))
            elif isinstance(ev, BlockRemoved):
                for eh in ev.block_hashes:
                    removed = blocks.pop(eh, None)
                    if removed is not None:
                        self._drop(name, removed)
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
            self._drop(name, rk)

    def _drop(self, name: str, rk: int) -> None:
        holders = self._holders.get(rk)
        if holders is not None:
            holders.discard(name)
            if not holders:
                del self._holders[rk]

    @property
    def size(self) -> int:
        return sum(len(b) for b in self._blocks.values())

    @property
    def approx_bytes(self) -> int:
        return self.size * _BYTES_PER_ENTRY
