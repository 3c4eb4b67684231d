"""Token buckets: the pacing arithmetic of delivery, kept pure (time is passed in) so the drainer and the local
Slack receiver share it and tests can drive it step by step. Retry delays are :func:`capstan.backoff.backoff_delay`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; starts full."""

    rate: float
    burst: float
    tokens: float = field(default=-1.0)
    updated: float | None = None

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.burst < 1:
            raise ValueError("token bucket needs rate > 0 and burst >= 1")
        if self.tokens < 0:
            self.tokens = self.burst

    def _refill(self, now: float) -> None:
        if self.updated is not None and now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        if self.updated is None or now > self.updated:
            self.updated = now

    def try_take(self, now: float) -> bool:
        """Take one token if there is one."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def available(self, now: float) -> float:
        """Tokens available at ``now`` (fractional)."""
        self._refill(now)
        return self.tokens

    def wait_time(self, now: float) -> float:
        """Seconds until a token is available (0 if one is)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate

    def block_until(self, now: float, until: float) -> None:
        """Empty the bucket so nothing is taken before ``until`` (used when a server says Retry-After)."""
        self._refill(now)
        # exactly one token is available at ``until``
        self.tokens = min(self.tokens, 1.0 - max(0.0, until - now) * self.rate)
