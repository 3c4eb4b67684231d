"""The one percentile: nearest rank, an observed value, exact ranks."""

from __future__ import annotations

import math

import pytest

from capstan.percentile import percentile

pytestmark = pytest.mark.unit


def test_nearest_rank_picks_an_observed_value() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 6.0]
    assert percentile(values, 50) == 3.0  # the lower middle of an even count, not 3.5
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 6.0
    assert percentile(values, 99) == 6.0  # fewer than 100 values: p99 is the largest
    assert percentile(iter(values), 34) == 3.0  # any iterable; rank ceil(0.34 * 6) = 3


def test_the_rank_is_exact_where_q_over_100_is_not() -> None:
    ordered = [float(i) for i in range(1, 1001)]
    assert percentile(ordered, 99.9) == 999.0  # 0.999 * 1000 in floating point would give rank 1000
    hundred = [float(i) for i in range(1, 101)]
    assert percentile(hundred, 99) == 99.0 and percentile(hundred, 50) == 50.0


def test_no_values_give_the_empty_value_and_bad_q_is_refused() -> None:
    assert math.isnan(percentile([], 50))
    assert percentile([], 99, empty=0.0) == 0.0
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)
