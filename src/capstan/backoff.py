"""Exponential backoff, the one copy: a pure function of the attempt number, and a thin stateful wrapper.

Every retry loop (watches, collectors, the recorder's supervisor, notification deliveries) takes its delay from
:func:`backoff_delay`. A caller that stores an attempt count (the notification outbox) calls it with that count and
one random draw; a loop that only needs "the next delay" holds a :class:`Backoff`, which counts failures and draws
from an injected, seeded RNG so runs are reproducible.
"""

from __future__ import annotations

import dataclasses
import math
import random


@dataclasses.dataclass(frozen=True)
class Jitter:
    """The delay is its ceiling scaled by a factor drawn uniformly from ``[low, high]``.

    ``Jitter()`` is none (the ceiling itself), :meth:`full` draws from ``[0, ceiling]``, :meth:`equal` from
    ``[ceiling / 2, ceiling]`` and :meth:`around` from ``ceiling × [1 - fraction, 1 + fraction]``.
    """

    low: float = 1.0
    high: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.low <= self.high:
            raise ValueError(f"jitter needs 0 <= low <= high, got [{self.low}, {self.high}]")

    @classmethod
    def full(cls) -> Jitter:
        return cls(0.0, 1.0)

    @classmethod
    def equal(cls) -> Jitter:
        return cls(0.5, 1.0)

    @classmethod
    def around(cls, fraction: float) -> Jitter:
        return cls(1.0 - fraction, 1.0 + fraction)

    def scale(self, draw: float) -> float:
        """The factor for a draw in ``[0, 1)``: ``low`` at 0, towards ``high`` as the draw grows."""
        return self.low + (self.high - self.low) * draw


NO_JITTER = Jitter()


def backoff_delay(
    attempt: int,
    *,
    base: float,
    factor: float = 2.0,
    cap: float = math.inf,
    jitter: Jitter = NO_JITTER,
    draw: float = 0.0,
) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1 = the first failure).

    The ceiling is ``min(cap, base * factor ** (attempt - 1))`` (attempts below 1 count as 1); the delay is the
    ceiling scaled by ``jitter`` at ``draw``, a value in ``[0, 1)`` (``rng.random()``), so the same attempt and
    draw always give the same delay.
    """
    try:
        ceiling = min(cap, base * factor ** max(0, attempt - 1))
    except OverflowError:  # an attempt count far past the cap
        ceiling = cap
    return ceiling * jitter.scale(draw)


@dataclasses.dataclass
class Backoff:
    """``next()`` returns the delay before the next attempt; ``reset()`` after a success.

    A thin wrapper over :func:`backoff_delay`: it counts the failures since the last reset and draws one value per
    delay from the injected RNG (always, even without jitter, so the draws do not depend on the settings).
    """

    base: float = 0.2
    cap: float = 30.0
    factor: float = 2.0
    jitter: Jitter = dataclasses.field(default_factory=lambda: Jitter.around(0.2))
    rng: random.Random = dataclasses.field(default_factory=lambda: random.Random(0))
    attempts: int = 0

    def next(self) -> float:
        self.attempts += 1
        draw = self.rng.random()
        return backoff_delay(
            self.attempts, base=self.base, factor=self.factor, cap=self.cap, jitter=self.jitter, draw=draw
        )

    def reset(self) -> None:
        self.attempts = 0
