"""Token bucket and the delivery backoff arithmetic."""

from __future__ import annotations

import random

import pytest

from capstan.backoff import Jitter, backoff_delay
from capstan.notify import blocks_problem
from capstan.notify._ratelimit import TokenBucket

pytestmark = pytest.mark.unit


def test_bucket_allows_burst_then_rate() -> None:
    bucket = TokenBucket(rate=1.0, burst=3)
    assert [bucket.try_take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_time(0.0) == pytest.approx(1.0)
    assert not bucket.try_take(0.5)
    assert bucket.try_take(1.0)
    assert not bucket.try_take(1.0)
    assert bucket.try_take(10.0) and bucket.try_take(10.0) and bucket.try_take(10.0)
    assert not bucket.try_take(10.0)


def test_bucket_block_until_defers_the_next_token() -> None:
    bucket = TokenBucket(rate=1.0, burst=5)
    bucket.block_until(0.0, 30.0)
    assert not bucket.try_take(29.5)
    assert bucket.wait_time(29.5) == pytest.approx(0.5)
    assert bucket.try_take(30.0)
    assert not bucket.try_take(30.0)


def test_bucket_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate=0, burst=1)


def test_backoff_is_seeded_bounded_and_growing() -> None:
    def delivery_delay(n: int, rng: random.Random) -> float:
        return backoff_delay(n, base=2.0, cap=60.0, jitter=Jitter.equal(), draw=rng.random())

    first = [delivery_delay(n, random.Random(7)) for n in range(1, 10)]
    again = [delivery_delay(n, random.Random(7)) for n in range(1, 10)]
    assert first == again
    for n, delay in enumerate(first, start=1):
        ceiling = min(60.0, 2.0 * 2 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling


def test_blocks_problem_names_the_block() -> None:
    ok = [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3000}}]
    assert blocks_problem(ok) is None
    long = [*ok, {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}]
    assert blocks_problem(long) == ("invalid_blocks", "blocks[1]: text must be less than 3001 characters")
    assert blocks_problem({"type": "divider"}) == ("invalid_blocks_format", "blocks must be an array")
    assert blocks_problem([{"type": "bogus"}]) == ("invalid_blocks", "blocks[0]: unknown block type 'bogus'")


def test_parse_retry_after() -> None:
    from capstan.notify._sinks import parse_retry_after

    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 2.5 ") == 2.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Sun, 29 Nov 2026 10:00:30 GMT", now=1_795_946_400.0) == 30.0
    assert parse_retry_after("-3") == 0.0
