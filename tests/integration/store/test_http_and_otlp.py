"""The HTTP JSON query API on a real loopback server, and OTLP/HTTP export to a real loopback receiver."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from capstan.record import ObjectHistory
from capstan.store import (
    Batch,
    EngineEntry,
    Gap,
    HistoryMetrics,
    create_history_app,
    open_store,
    otlp_http_exporter,
)
from tests.integration.store._loopback import serve

pytestmark = pytest.mark.integration


def _deploy(rv: int, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "ml", "uid": "d1", "resourceVersion": str(rv)},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
    }


def test_http_api_serves_timeline_object_diff_engine_and_gaps(history_store_url: str) -> None:
    registry = CollectorRegistry()
    store = open_store(history_store_url, metrics=HistoryMetrics(registry), clock=lambda: 2000.0)
    history = ObjectHistory("c1")
    store.history.write(history.observe("ADDED", _deploy(1, "api:1"), observed_at=1000.0))
    store.history.write(history.observe("MODIFIED", _deploy(2, "api:2"), observed_at=1100.0))
    store.history.write(
        Batch(
            engine_entries=[
                EngineEntry("cache", "slowlog", "r", "1", 1050.0, 1060.0, {"args": ["KEYS", "*"]})
            ],
            gaps=[
                Gap("cache", "slowlog", "r:2-4", 1060.0, 3, "ring overwrote entries before they were read")
            ],
        )
    )
    app = create_history_app(store.history, registry=registry, clock=lambda: 2000.0)
    with serve(app) as base, httpx.Client(base_url=base, timeout=10) as http:
        page = http.get("/v1/timeline", params={"kind": "Deployment", "namespace": "ml"}).json()
        assert page["next_cursor"] is None
        timeline = page["items"]
        assert [c["change_type"] for c in timeline] == ["added", "modified"]
        assert timeline[0]["observed_at"] == "1970-01-01T00:16:40.000000Z"
        version = http.get(
            "/v1/object", params={"kind": "Deployment", "namespace": "ml", "name": "api", "at": "1050"}
        )
        assert (
            version.json()["version"]["object"]["spec"]["template"]["spec"]["containers"][0]["image"]
            == "api:1"
        )
        diff = http.get(
            "/v1/diff", params={"kind": "Deployment", "namespace": "ml", "name": "api", "since": "1050"}
        ).json()
        assert diff["patch"] == [
            {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "api:2"}
        ]
        engine = http.get("/v1/engine", params={"target": "cache"}).json()["items"]
        assert engine[0]["payload"]["args"] == ["KEYS", "*"]
        assert http.get("/v1/gaps").json()["items"][0]["lost"] == 3
        bad = http.get("/v1/timeline", params={"since": "yesterday"})
        assert bad.status_code == 400 and "since" in bad.json()["error"]
        missing = http.get("/v1/object", params={"name": "api"})
        assert missing.status_code == 400 and "kind" in missing.json()["error"]
        metrics = http.get("/metrics").text
        assert 'capstan_history_records_written_total{source="c1",table="object_changes"} 2.0' in metrics
    store.close()


def test_records_reach_a_real_otlp_http_receiver_as_log_records(tmp_path: Any) -> None:
    received: list[ExportLogsServiceRequest] = []

    async def logs(request: Request) -> Response:
        msg = ExportLogsServiceRequest()
        msg.ParseFromString(await request.body())
        received.append(msg)
        return Response(b"", media_type="application/x-protobuf")

    receiver = Starlette(routes=[Route("/v1/logs", logs, methods=["POST"])])
    with serve(receiver) as base:
        exporter = otlp_http_exporter(f"{base}/v1/logs", timeout_s=10)
        store = open_store(str(tmp_path / "h.db"))
        store.history.add_commit_listener(exporter)
        store.history.write(ObjectHistory("prod").observe("ADDED", _deploy(1, "api:1"), observed_at=1000.0))
        store.history.write(
            Batch(
                engine_entries=[
                    EngineEntry("cache", "slowlog", "r", "9", 990.0, 1000.0, {"args": ["GET", "k"]})
                ]
            )
        )
        exporter.flush()
        exporter.shutdown()
        store.close()
    records = []
    for msg in received:
        for rl in msg.resource_logs:
            resource = {a.key: a.value.string_value for a in rl.resource.attributes}
            for sl in rl.scope_logs:
                for lr in sl.log_records:
                    records.append((resource, lr))
    by_name = {lr.event_name: (res, lr) for res, lr in records}
    assert set(by_name) == {"k8s.object.added", "valkey.slowlog.entry"}
    res, added = by_name["k8s.object.added"]
    assert res["k8s.cluster.name"] == "prod"
    assert res["service.name"] == "capstan"
    attrs = {a.key: a.value for a in added.attributes}
    assert attrs["k8s.deployment.name"].string_value == "api"
    assert attrs["k8s.namespace.name"].string_value == "ml"
    assert added.time_unix_nano == 1000 * 10**9
    _, slow = by_name["valkey.slowlog.entry"]
    assert slow.time_unix_nano == 990 * 10**9
    assert slow.observed_time_unix_nano == 1000 * 10**9
    body = {kv.key: kv.value for kv in slow.body.kvlist_value.values}
    assert [v.string_value for v in body["args"].array_value.values] == ["GET", "k"]
