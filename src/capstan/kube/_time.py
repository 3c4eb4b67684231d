"""Kubernetes timestamps, read once for every consumer (recorder, restart reports, exec credentials)."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def parse_timestamp(value: Any) -> float | None:
    """Seconds since the epoch from a Kubernetes RFC 3339 timestamp (``metav1.Time``/``MicroTime``: ``Z`` or an
    offset, optional fraction); None when absent, not a string or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
