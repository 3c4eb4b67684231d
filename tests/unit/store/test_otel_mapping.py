"""OTel log record mapping, checked with the SDK's in-memory exporter."""

from __future__ import annotations

import pytest
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter

from capstan.store import Batch, EngineEntry, Gap, KubeEvent, ObjectChange, OtlpExporter

pytestmark = pytest.mark.unit


def test_each_record_kind_maps_to_one_log_record_with_event_name_and_times() -> None:
    memory = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    exporter = OtlpExporter(memory, batch=False)
    exporter.export(
        Batch(
            object_changes=[
                ObjectChange(
                    "prod",
                    10.0,
                    "Pod",
                    "v1",
                    "ml",
                    "web",
                    "u1",
                    "5",
                    "modified",
                    "relist",
                    2,
                    [{"op": "replace", "path": "/a", "value": None}],
                    None,
                )
            ],
            kube_events=[
                KubeEvent(
                    "prod",
                    "e1",
                    "7",
                    12.0,
                    11.0,
                    "ml",
                    "web.1",
                    "BackOff",
                    "Warning",
                    "boom",
                    3,
                    "u1",
                    "Pod",
                    "ml",
                    "web",
                    {},
                )
            ],
            engine_entries=[
                EngineEntry("cache", "acllog", "r", "4", 8.0, 12.0, {"count": 2}),
                EngineEntry("cache", "commandlog-large-reply", "r", "1", 8.0, 12.0, {}),
                EngineEntry("cache", "config", "r", "1", 8.0, 12.0, {"parameter": "maxmemory"}),
            ],
            gaps=[Gap("cache", "slowlog", "k", 12.0, 5, "ring overwrote entries before they were read")],
        )
    )
    logs = [d.log_record for d in memory.get_finished_logs()]
    names = [r.event_name for r in logs]
    assert names == [
        "k8s.object.modified",
        "k8s.event",
        "valkey.acllog.entry",
        "valkey.commandlog.large-reply.entry",
        "valkey.config.change",
        "capstan.history.gap",
    ]
    change, event, acl = logs[0], logs[1], logs[2]
    assert change.attributes is not None and change.attributes["k8s.pod.name"] == "web"
    assert change.attributes["capstan.observed_via"] == "relist"
    assert (event.timestamp, event.observed_timestamp) == (11 * 10**9, 12 * 10**9)
    assert event.severity_text == "WARN"
    assert (acl.timestamp, acl.observed_timestamp) == (8 * 10**9, 12 * 10**9)
    assert logs[5].attributes is not None and logs[5].attributes["gap.lost_count"] == 5
    exporter.shutdown()
