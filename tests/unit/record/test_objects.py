"""The object/event core: what a watch event or a relist turns into, without a store."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.record import DiffPolicy, ObjectHistory, event_record, kind_key

pytestmark = pytest.mark.unit


def node(rv: int, heartbeat: str, ready: str = "True") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "uid": "n1", "resourceVersion": str(rv)},
        "status": {"conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}]},
    }


def test_heartbeat_only_updates_write_no_change_but_move_the_cursor() -> None:
    history = ObjectHistory("c", policy=DiffPolicy(snapshot_every=2))
    first = history.observe("ADDED", node(1, "t1"), observed_at=1.0)
    assert [c.version_seq for c in first.object_changes] == [1]
    quiet = history.observe("MODIFIED", node(2, "t2"), observed_at=2.0)
    assert quiet.object_changes == []
    assert [c.resource_version for c in quiet.kind_cursors] == ["2"]
    real = history.observe("MODIFIED", node(3, "t3", ready="False"), observed_at=3.0)
    change = real.object_changes[0]
    assert change.version_seq == 2 and change.snapshot is not None  # every 2nd version is a snapshot
    assert change.patch == [{"op": "replace", "path": "/status/conditions/0/status", "value": "False"}]


def test_a_noise_only_update_moves_the_kept_version_and_keeps_the_object() -> None:
    """A heartbeat writes nothing, but the state kept for the next diff (and for a relist) is at its version."""
    history = ObjectHistory("c")
    history.observe("ADDED", node(1, "t1"), observed_at=1.0)
    history.observe("MODIFIED", node(2, "t2"), observed_at=2.0)
    state = history.state("n1")
    assert state is not None and state.resource_version == "2" and state.version_seq == 1
    assert state.object["status"]["conditions"][0] == {"type": "Ready", "status": "True"}
    # a relist that finds it unchanged writes nothing either
    relisted = history.relist("v1", "Node", [node(2, "t9")], resource_version="5", observed_at=3.0)
    assert relisted.object_changes == [] and [c.resource_version for c in relisted.kind_cursors] == ["5"]


def test_a_state_put_carries_its_object_as_text_only() -> None:
    """The batch's last state holds the normalized object as JSON text (what the store writes), not the decoded
    object: a pending batch must not keep every version's containers alive."""
    history = ObjectHistory("c")
    history.observe("ADDED", node(1, "t1"), observed_at=1.0)
    batch = history.observe("MODIFIED", node(2, "t2", ready="False"), observed_at=2.0)
    (put,) = batch.state_puts
    assert put.object == {} and put.encoded is not None
    kept = history.state("n1")
    assert kept is not None
    assert put.full_object() == kept.object
    assert put.full_object()["status"]["conditions"][0] == {"type": "Ready", "status": "False"}


def test_kind_keys_name_group_version_and_kind() -> None:
    assert kind_key("v1", "Pod") == "/v1/Pod"
    assert kind_key("apps/v1", "Deployment") == "apps/v1/Deployment"


def test_events_k8s_io_series_bumps_are_occurrences() -> None:
    obj = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "web.1", "namespace": "ml", "uid": "e1", "resourceVersion": "12"},
        "regarding": {"kind": "Pod", "namespace": "ml", "name": "web", "uid": "p1"},
        "reason": "BackOff",
        "type": "Warning",
        "note": "Back-off restarting failed container",
        "series": {"count": 7, "lastObservedTime": "2026-11-29T10:00:00.000000Z"},
        "eventTime": "2026-11-29T09:50:00.000000Z",
    }
    rec = event_record("c", obj, observed_at=5.0)
    assert (rec.count, rec.involved_uid, rec.message) == (7, "p1", "Back-off restarting failed container")
    assert rec.event_time is not None and rec.event_time > 1.7e9
