"""The prefix indexes' match against a plain reference: every endpoint's longest held run from the start when
what it holds is prefix-closed (as engines' eviction and the approximate index keep it), and a run that ends at a
real boundary when holes break that; endpoints that come and go (their bits reused), names the index never saw."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capstan.kvcache import BlockRemoved, BlockStored
from capstan.route import PreciseKVIndex

pytestmark = pytest.mark.unit

NAMES = [f"e{i}" for i in range(10)]


def reference(held: dict[str, set[int]], hashes: Sequence[int], names: Sequence[str]) -> dict[str, int]:
    out = {}
    for n in names:
        run = 0
        while run < len(hashes) and hashes[run] in held.get(n, set()):
            run += 1
        out[n] = run
    return out


def _apply(
    index: PreciseKVIndex, held: dict[str, set[int]], ops: list[tuple[str, str, int, int]], *, closed: bool
) -> None:
    """Stores, removals and endpoints leaving; ``closed``: stores are chain prefixes and removals chain tails."""
    for name, op, a, b in ops:
        lo, hi = min(a, b), max(a, b)
        if closed:
            lo, hi = (0, hi) if op == "store" else (lo, 301)
        blocks = list(range(1000 + lo, 1000 + hi))
        if op == "store":
            index.apply(name, [BlockStored(blocks, None, [], 16)])
            held.setdefault(name, set()).update(blocks)
        elif op == "remove":
            index.apply(name, [BlockRemoved(blocks)])
            held.setdefault(name, set()).difference_update(blocks)
        else:
            index.forget(name)  # the endpoint went away: its bit may be reused by the next newcomer
            held.pop(name, None)


_OPS = st.lists(
    st.tuples(
        st.sampled_from(NAMES),
        st.sampled_from(["store", "remove", "clear"]),
        st.integers(0, 300),
        st.integers(0, 300),
    ),
    max_size=40,
)
_ASKED = st.lists(st.sampled_from([*NAMES, "never-seen"]), min_size=1, max_size=6, unique=True)


@settings(max_examples=200, deadline=None)
@given(prompt=st.integers(0, 300), ops=_OPS, asked=_ASKED)
def test_precise_match_equals_the_longest_held_run_on_prefix_closed_holdings(
    prompt: int, ops: list[tuple[str, str, int, int]], asked: list[str]
) -> None:
    hashes = list(range(1000, 1000 + prompt))
    index = PreciseKVIndex()
    held: dict[str, set[int]] = {}
    _apply(index, held, ops, closed=True)
    assert index.match(hashes, asked) == reference(held, hashes, asked)


@settings(max_examples=200, deadline=None)
@given(prompt=st.integers(0, 300), ops=_OPS, asked=_ASKED)
def test_with_holes_the_precise_match_ends_at_a_real_boundary_no_shorter_than_the_held_run(
    prompt: int, ops: list[tuple[str, str, int, int]], asked: list[str]
) -> None:
    """A hole (a lost BlockStored, say) may hide a longer run from the plain walk; bisection then reports some
    run end: a held block followed by one not held (or the prompt's end), never before the first hole."""
    hashes = list(range(1000, 1000 + prompt))
    index = PreciseKVIndex()
    held: dict[str, set[int]] = {}
    _apply(index, held, ops, closed=False)
    got = index.match(hashes, asked)
    exact = reference(held, hashes, asked)
    for name in asked:
        run, mine = got[name], held.get(name, set())
        assert exact[name] <= run <= len(hashes)
        assert run == 0 or hashes[run - 1] in mine
        assert run == len(hashes) or hashes[run] not in mine
        if exact[name] == 0:
            assert run == 0  # nothing held at the start: nothing matched


class _PlainLRU:
    """The approximate index's contract, written plainly: per endpoint an LRU of at most ``capacity`` blocks;
    a request touches its blocks tail first (so its head is the most recent) and then evicts the oldest."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.order: dict[str, list[int]] = {}  # oldest first

    def record(self, name: str, hashes: Sequence[int]) -> None:
        order = self.order.setdefault(name, [])
        for h in reversed(hashes):
            if h in order:
                order.remove(h)
            order.append(h)
        del order[: max(0, len(order) - self.capacity)]


_CHAINS = st.tuples(st.integers(0, 3), st.integers(0, 30))  # (chain, length): a prompt's blocks


def _chain(spec: tuple[int, int]) -> list[int]:
    chain, length = spec
    return [chain * 1000 + i for i in range(length)]


@settings(max_examples=200, deadline=None)
@given(
    requests=st.lists(
        st.tuples(
            st.sampled_from(NAMES[:3]),
            st.lists(st.integers(0, 40), max_size=30),  # any blocks, repeats inside one prompt included
        ),
        max_size=25,
    ),
    capacity=st.integers(1, 30),
)
def test_approximate_record_keeps_the_plain_lru_order(
    requests: list[tuple[str, list[int]]], capacity: int
) -> None:
    from capstan.route import ApproximatePrefixIndex

    index = ApproximatePrefixIndex(capacity_per_endpoint=capacity, stride=1)
    plain = _PlainLRU(capacity)
    for name, hashes in requests:
        index.record(name, hashes)
        plain.record(name, hashes)
        assert list(index._lru[name]) == plain.order[name]


@settings(max_examples=200, deadline=None)
@given(
    requests=st.lists(st.tuples(st.sampled_from(NAMES[:3]), _CHAINS), max_size=25),
    capacity=st.integers(1, 40),
    prompt=_CHAINS,
)
def test_approximate_match_is_the_longest_held_run_of_chained_prompts(
    requests: list[tuple[str, tuple[int, int]]], capacity: int, prompt: tuple[int, int]
) -> None:
    """Prompts are chains (a block's hash covers its whole prefix), so recording tail first and evicting the
    least recent keeps every endpoint's blocks prefix-closed, and the bisecting match is exact."""
    from capstan.route import ApproximatePrefixIndex

    index = ApproximatePrefixIndex(capacity_per_endpoint=capacity, stride=1)
    plain = _PlainLRU(capacity)
    for name, spec in requests:
        index.record(name, _chain(spec))
        plain.record(name, _chain(spec))
    held = {n: set(o) for n, o in plain.order.items()}
    hashes = _chain(prompt)
    assert index.match(hashes, NAMES[:4]) == reference(held, hashes, NAMES[:4])


@pytest.mark.parametrize("kind", ["precise", "approximate"])
def test_the_memory_gauge_is_within_a_quarter_of_what_tracemalloc_measures(kind: str) -> None:
    import random
    import tracemalloc

    from capstan.route import ApproximatePrefixIndex

    rng = random.Random(0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        if kind == "precise":
            precise = PreciseKVIndex()
            for i in range(8 * 40):  # the hashes are new ints, as decoded events bring them
                blocks = [rng.getrandbits(63) for _ in range(500)]
                precise.apply(f"e{i % 8}", [BlockStored(blocks, None, [], 16)])
            index: PreciseKVIndex | ApproximatePrefixIndex = precise
        else:
            index = ApproximatePrefixIndex(capacity_per_endpoint=1_000_000, stride=1)
            for i in range(8 * 40):
                index.record(f"e{i % 8}", [rng.getrandbits(63) for _ in range(500)])
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert index.size == 160_000
    assert 0.75 * used <= index.approx_bytes <= 1.25 * used
