"""The leader-election decision (pure): who may take, renew or must wait for a Lease."""

from __future__ import annotations

import pytest

from capstan.kube import lease_verdict
from capstan.kube.lease import micro_time

pytestmark = pytest.mark.unit


def spec(holder: str, renewed: float, duration: int = 15) -> dict[str, object]:
    return {"holderIdentity": holder, "renewTime": micro_time(renewed), "leaseDurationSeconds": duration}


def test_no_lease_or_no_holder_is_taken() -> None:
    assert lease_verdict(None, "me", 100.0, 15.0) == "take"
    assert lease_verdict(spec("", 99.0), "me", 100.0, 15.0) == "take"


def test_the_holder_renews_and_others_wait_until_it_has_expired() -> None:
    assert lease_verdict(spec("me", 50.0), "me", 100.0, 15.0) == "renew"
    assert lease_verdict(spec("other", 90.0), "me", 100.0, 15.0) == "wait"
    assert lease_verdict(spec("other", 90.0), "me", 105.0, 15.0) == "wait"  # exactly at expiry: still held
    assert lease_verdict(spec("other", 90.0), "me", 105.5, 15.0) == "take"


def test_micro_time_is_rfc3339_with_microseconds_in_utc() -> None:
    assert micro_time(0.25) == "1970-01-01T00:00:00.250000Z"
