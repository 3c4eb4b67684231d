"""The pod Event index: compact entries by pod UID, rebuilt by a relist, bounded per pod, read as Event objects."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from capstan.restarts._events import PodEventIndex
from capstan.restarts._report import pod_events, probe_failures

pytestmark = pytest.mark.unit


def event(
    uid: str, pod: str, reason: str, message: str, at: str, count: int = 1, **extra: Any
) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": f"{pod}.{uid}", "namespace": "ml"},
        "involvedObject": {"kind": "Pod", "uid": pod, "fieldPath": "spec.containers{app}"},
        "type": extra.get("type", "Warning"),
        "reason": reason,
        "message": message,
        "count": count,
        "lastTimestamp": at,
    }


def index() -> PodEventIndex:
    return PodEventIndex(client=None, per_pod=3)  # type: ignore[arg-type]


def test_events_read_back_as_the_report_reads_them() -> None:
    idx = index()
    idx.observe("added", event("e1", "p1", "Unhealthy", "Liveness probe failed: 500", "2026-11-30T01:00:00Z"))
    idx.observe("added", event("e2", "p1", "BackOff", "Back-off restarting", "2026-11-30T01:00:05Z"))
    idx.observe(
        "modified", event("e2", "p1", "BackOff", "Back-off restarting", "2026-11-30T01:00:09Z", count=4)
    )
    idx.observe("added", event("e3", "p2", "Killing", "other pod", "2026-11-30T01:00:01Z"))
    got = idx.events_for("p1")
    lines = pod_events(got, "p1", limit=10)
    assert [(e.reason, e.count) for e in lines] == [("Unhealthy", 1), ("BackOff", 4)]
    assert probe_failures(got, "p1", "app") == ("Liveness probe failed: 500",)
    idx.observe("deleted", event("e1", "p1", "Unhealthy", "", "2026-11-30T01:00:00Z"))
    assert [e["reason"] for e in idx.events_for("p1")] == ["BackOff"]
    assert idx.events_for("nobody") == []


def test_per_pod_bound_keeps_the_newest() -> None:
    idx = index()
    for i in range(6):
        idx.observe("added", event(f"e{i}", "p1", f"R{i}", "m", f"2026-11-30T01:00:0{i}Z"))
    assert [e["reason"] for e in idx.events_for("p1")] == ["R3", "R4", "R5"]


def test_a_relist_rebuilds_the_index() -> None:
    idx = index()
    idx.observe("added", event("gone", "p1", "Old", "m", "2026-11-30T01:00:00Z"))
    idx.start_listing()
    idx.observe("added", event("new", "p2", "New", "m", "2026-11-30T01:00:01Z"), listing=True)
    assert idx.events_for("p1") and not idx.events_for("p2")  # the old view serves until the list completes
    idx.finish_listing()
    assert idx.events_for("p1") == [] and [e["reason"] for e in idx.events_for("p2")] == ["New"]
    assert idx.synced.is_set()


async def test_caught_up_waits_for_the_watch_to_pass_a_version() -> None:
    idx = index()
    idx.saw("100")
    assert await idx.caught_up("90", timeout=0.01)
    waiter = asyncio.create_task(idx.caught_up("120", timeout=5))
    await asyncio.sleep(0)
    idx.saw("110")
    await asyncio.sleep(0)
    assert not waiter.done()
    idx.saw("125")
    assert await waiter
    assert not await idx.caught_up("200", timeout=0.01)  # nothing newer arrives: gives up
    assert await idx.caught_up("not-a-number", timeout=0.01)
