"""The ``diagnose`` tool: one call about one object holds its root cause with evidence, its spec and status, its
failing pods' log excerpts, grouped Warning Events, the recorded changes before the failure and its neighbours."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from capstan.diagnose import Snapshot
from capstan.mcp import FixedSource, SnapshotLogs, create_server
from capstan.redact import Redactor
from capstan.restarts import RecordedChange
from tests.unit.mcp.test_planted_secrets import NOW, NS, Plants, planted_world


def world() -> Snapshot:
    snap = planted_world(Plants())
    edit = RecordedChange(
        NOW - 120, "Deployment", NS, "web", "modified", "spec.template.spec.containers[app].args"
    )
    return dataclasses.replace(snap, changes=[edit])


def answer(result: Any) -> dict[str, Any]:
    block = result.content[0]
    assert isinstance(block, TextContent)
    data: dict[str, Any] = json.loads(block.text)
    return data


async def call(arguments: dict[str, Any], snap: Snapshot | None = None) -> tuple[dict[str, Any], bool]:
    snap = snap or world()
    server = create_server(FixedSource(snap), SnapshotLogs(snap.logs), redactor=Redactor())
    refused: MCPError | None = None
    async with Client(server) as client:
        try:
            result = await client.call_tool("diagnose", arguments)
        except MCPError as err:  # raised after the session closes, not inside its task group
            refused = err
    if refused is not None:
        raise refused
    return answer(result), bool(result.is_error)


async def test_a_workload_in_one_call() -> None:
    body, error = await call({"kind": "deploy", "name": "web", "namespace": NS})
    assert not error
    assert body["object"] == {"kind": "Deployment", "namespace": NS, "name": "web"}
    assert body["findings"], "the crash-looping pods' root cause is about the Deployment"
    assert any("crash" in f["root_cause"].lower() for f in body["findings"])
    assert body["pods"]["total"] == 2
    logs = body["logs"]
    assert logs and all(entry["container"] == "app" for entry in logs)
    assert any("ERROR cannot connect" in line for entry in logs for line in entry.get("lines", []))
    assert body["warning_events"][0]["reason"] == "BackOff"
    assert body["warning_events"][0]["count"] == 8  # two pods' Events, four each
    assert body["recent_changes"][0]["object"] == "Deployment/web"
    assert body["related"]["nodes"]
    assert body["tokens"] <= 2500


async def test_a_pod_and_its_previous_log() -> None:
    body, error = await call({"kind": "Pod", "name": "web-5d9c-0", "namespace": NS})
    assert not error
    assert "pods" not in body
    previous = [e for e in body["logs"] if e["previous"]]
    assert previous and any("FATAL" in line for line in previous[0]["lines"])


async def test_missing_objects_and_kinds_are_one_line() -> None:
    body, error = await call({"kind": "Deployment", "name": "nope", "namespace": NS})
    assert error and body["error"].startswith("diagnose: Deployment/") and "not found" in body["error"]
    with pytest.raises(MCPError) as err:
        await call({"kind": "Widget", "name": "x"})
    assert "'kind'" in err.value.message


async def test_a_healthy_object_says_so_and_stays_small() -> None:
    body, error = await call({"kind": "Node", "name": "gpu-1"})
    assert not error
    assert body["object"]["namespace"] == ""
    assert "logs" not in body
    assert body["tokens"] < 1500


async def test_the_answer_fits_a_small_budget() -> None:
    body, error = await call({"kind": "Deployment", "name": "web", "namespace": NS, "budget": 600})
    assert not error
    assert body["tokens"] <= 600
    assert body["findings"] or body.get("truncated")
