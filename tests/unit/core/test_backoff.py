"""The one backoff contract: a pure function of the attempt number, and the stateful wrapper over it."""

from __future__ import annotations

import math
import random

import pytest

from capstan.backoff import NO_JITTER, Backoff, Jitter, backoff_delay

pytestmark = pytest.mark.unit


def test_the_ceiling_grows_by_the_factor_from_the_first_failure_up_to_the_cap() -> None:
    delays = [backoff_delay(n, base=0.5, factor=3.0, cap=10.0) for n in range(0, 6)]
    assert delays == [0.5, 0.5, 1.5, 4.5, 10.0, 10.0]  # attempts below 1 count as the first
    assert backoff_delay(60, base=1.0) == 2.0**59  # no cap by default
    assert (
        backoff_delay(10_000, base=1.0, cap=5.0) == 5.0
    )  # a huge attempt count cannot overflow past the cap


@pytest.mark.parametrize(
    ("jitter", "low", "high"),
    [
        (NO_JITTER, 8.0, 8.0),
        (Jitter.full(), 0.0, 8.0),
        (Jitter.equal(), 4.0, 8.0),
        (Jitter.around(0.25), 6.0, 10.0),
    ],
)
def test_the_draw_spans_the_jitter_range(jitter: Jitter, low: float, high: float) -> None:
    assert backoff_delay(4, base=1.0, jitter=jitter, draw=0.0) == low
    assert math.isclose(backoff_delay(4, base=1.0, jitter=jitter, draw=1.0), high)
    mid = backoff_delay(4, base=1.0, jitter=jitter, draw=0.5)
    assert math.isclose(mid, (low + high) / 2)


def test_jitter_rejects_a_negative_or_inverted_range() -> None:
    with pytest.raises(ValueError, match="low <= high"):
        Jitter(1.0, 0.5)
    with pytest.raises(ValueError, match="low <= high"):
        Jitter.around(1.5)


def test_the_wrapper_is_the_function_of_its_failure_count_and_draws() -> None:
    wrapper = Backoff(base=1.0, cap=8.0, jitter=Jitter.around(0.1), rng=random.Random(3))
    draws = random.Random(3)
    for attempt in range(1, 7):
        expected = backoff_delay(attempt, base=1.0, cap=8.0, jitter=Jitter.around(0.1), draw=draws.random())
        assert wrapper.next() == expected
    wrapper.reset()
    assert wrapper.attempts == 0
    assert wrapper.next() == backoff_delay(
        1, base=1.0, cap=8.0, jitter=Jitter.around(0.1), draw=draws.random()
    )
