"""The prefix indexes' match against a plain reference: every endpoint's longest held run from the start, on
random holdings with holes, endpoints that come and go (their bits reused), and names the index never saw."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capstan.kvcache import BlockRemoved, BlockStored
from capstan.route._index import PreciseKVIndex

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


@settings(max_examples=200, deadline=None)
@given(
    prompt=st.integers(0, 300),
    ops=st.lists(
        st.tuples(
            st.sampled_from(NAMES),
            st.sampled_from(["store", "remove", "clear"]),
            st.integers(0, 300),
            st.integers(0, 300),
        ),
        max_size=40,
    ),
    asked=st.lists(st.sampled_from([*NAMES, "never-seen"]), min_size=1, max_size=6, unique=True),
)
def test_precise_match_equals_the_longest_held_run(
    prompt: int, ops: list[tuple[str, str, int, int]], asked: list[str]
) -> None:
    hashes = list(range(1000, 1000 + prompt))
    index = PreciseKVIndex()
    held: dict[str, set[int]] = {}
    for name, op, a, b in ops:
        lo, hi = min(a, b), max(a, b)
        if op == "store":
            blocks = list(range(1000 + lo, 1000 + hi))
            index.apply(name, [BlockStored(blocks, None, [], 16)])
            held.setdefault(name, set()).update(blocks)
        elif op == "remove":  # a hole in the middle of a chain, or its tail
            blocks = list(range(1000 + lo, 1000 + hi))
            index.apply(name, [BlockRemoved(blocks)])
            held.setdefault(name, set()).difference_update(blocks)
        else:
            index.forget(name)  # the endpoint went away: its bit may be reused by the next newcomer
            held.pop(name, None)
    assert index.match(hashes, asked) == reference(held, hashes, asked)


@pytest.mark.parametrize("kind", ["precise", "approximate"])
def test_the_memory_gauge_is_within_a_quarter_of_what_tracemalloc_measures(kind: str) -> None:
    import random
    import tracemalloc

    from capstan.route._index import ApproximatePrefixIndex

    rng = random.Random(0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        if kind == "precise":
            index: PreciseKVIndex | ApproximatePrefixIndex = PreciseKVIndex()
            for i in range(8 * 40):  # the hashes are new ints, as decoded events bring them
                blocks = [rng.getrandbits(63) for _ in range(500)]
                index.apply(f"e{i % 8}", [BlockStored(blocks, None, [], 16)])
        else:
            index = ApproximatePrefixIndex(capacity_per_endpoint=1_000_000, stride=1)
            for i in range(8 * 40):
                index.record(f"e{i % 8}", [rng.getrandbits(63) for _ in range(500)])
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert index.size == 160_000
    assert 0.75 * used <= index.approx_bytes <= 1.25 * used
