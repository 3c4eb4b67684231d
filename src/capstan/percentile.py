"""The one percentile of Capstan: nearest rank, so every figure it reports is a value that was observed.

Definition (nearest-rank, also "inverted CDF", numpy's ``method="inverted_cdf"``): sort the ``n`` values and take
the one at rank ``ceil(q / 100 × n)`` (1-based; ranks below 1 count as 1), i.e. the smallest value with at least
``q`` % of the values at or below it. p50 of an even count is the lower middle value, p99 of fewer than 100 values
is the largest, p0 the smallest.

Why not linear interpolation (numpy's default): a latency or wait reported as p99 should be one that a request or
pod actually had, and between two far-apart samples an interpolated figure is neither; nearest rank is also what
the capacity report, the router's harness and the replayer reported before they shared this module, so their
published figures hold. The rank is computed as ``ceil(q × n / 100)``, exact for whole-number ``q`` (``q / 100 ×
n`` in floating point puts p99.9 of 1,000 values one rank too high).
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float, *, empty: float = math.nan) -> float:
    """The nearest-rank ``q``-th percentile (``q`` in 0..100) of ``values``; ``empty`` (NaN) when there are none."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in 0..100, got {q}")
    ordered = sorted(values)
    if not ordered:
        return empty
    rank = math.ceil(q * len(ordered) / 100.0)
    return ordered[min(len(ordered), max(1, rank)) - 1]
