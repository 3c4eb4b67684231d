"""The one parser of Kubernetes timestamps."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.kube import parse_timestamp

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-29T10:00:00Z", 1_795_946_400.0),  # metav1.Time
        ("2026-11-29T10:00:00.250000Z", 1_795_946_400.25),  # metav1.MicroTime (Events' eventTime)
        ("2026-11-29T12:00:00+02:00", 1_795_946_400.0),
    ],
)
def test_rfc3339_times_in_utc_or_with_an_offset(text: str, expected: float) -> None:
    assert parse_timestamp(text) == pytest.approx(expected)


@pytest.mark.parametrize("value", [None, "", "yesterday", "2026-13-01T00:00:00Z", 1_795_946_400, ["2026"]])
def test_absent_or_unreadable_is_none(value: Any) -> None:
    assert parse_timestamp(value) is None
