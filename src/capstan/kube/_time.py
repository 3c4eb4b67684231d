"""Kubernetes timestamps, read once for every consumer (recorder, restart reports, diagnosis, exec credentials)."""

from __future__ import annotations

from collections.abc import Mapping
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


def event_time(event: Mapping[str, Any], *, or_created: bool = True) -> float | None:
    """When an Event last happened, for ``core/v1`` and ``events.k8s.io/v1`` Events alike: ``series``' last
    observation, ``lastTimestamp``, ``eventTime``, ``deprecatedLastTimestamp``, ``firstTimestamp``, then (unless
    ``or_created`` is false) the object's creation; None when it carries no readable time."""
    series = event.get("series") or {}
    candidates = [
        series.get("lastObservedTime") if isinstance(series, Mapping) else None,
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("deprecatedLastTimestamp"),
        event.get("firstTimestamp"),
    ]
    if or_created:
        candidates.append((event.get("metadata") or {}).get("creationTimestamp"))
    for value in candidates:
        if (at := parse_timestamp(value)) is not None:
            return at
    return None
