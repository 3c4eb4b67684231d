"""Exponential backoff with seeded jitter, shared by every retry loop (watches, collectors, deliveries)."""

from __future__ import annotations

import dataclasses
import random


@dataclasses.dataclass
class Backoff:
    """``next()`` returns the delay before the next attempt; ``reset()`` after a success.

    Delays grow ``initial * factor**n`` up to ``maximum``, each scaled by a factor drawn from
    ``[1 - jitter, 1 + jitter]`` with the injected RNG so runs are reproducible.
    """

    initial: float = 0.2
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    rng: random.Random = dataclasses.field(default_factory=lambda: random.Random(0))
    attempts: int = 0

    def next(self) -> float:
        base = min(self.maximum, self.initial * self.factor**self.attempts)
        self.attempts += 1
        return base * (1.0 + self.jitter * (2.0 * self.rng.random() - 1.0))

    def reset(self) -> None:
        self.attempts = 0
