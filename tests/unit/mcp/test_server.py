"""The MCP server over one fixed snapshot, through the official SDK's in-memory client: tools are read-only,
arguments strict, answers within budget and counted, cursors bound to their query, errors answers."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent
from rich.console import Console
from rich.logging import RichHandler

from capstan.diagnose import Snapshot
from capstan.mcp import TOOLS, FixedSource, SnapshotLogs, create_server
from capstan.mcp._shape import Budget, decode_cursor, encode_cursor, finish, fit, tokens
from capstan.mcp._tool import ToolArgs, ToolSpec
from capstan.redact import Redactor
from capstan.tokens import count_tokens


def crashing_pod(name: str, namespace: str = "shop") -> dict[str, Any]:
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {
            "nodeName": "n1",
            "containers": [
                {"name": "app", "image": "shop:1", "env": [{"name": "DB_PASSWORD", "value": "hunter2x"}]}
            ],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "app",
                    "restartCount": 4,
                    "ready": False,
                    "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
                    "lastState": {"terminated": {"reason": "Error", "exitCode": 3}},
                }
            ],
        },
    }


def warning(i: int, pod: str) -> dict[str, Any]:
    return {
        "kind": "Event",
        "metadata": {"name": f"e{i}", "namespace": "shop"},
        "type": "Warning",
        "reason": "BackOff",
        "message": f"Back-off restarting failed container app in pod {pod}",
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": pod},
        "count": 3,
        "lastTimestamp": "2026-12-01T10:00:00Z",
    }


def snapshot(pods: int = 3) -> Snapshot:
    names = [f"web-7d9c8b6f5d-{i:05d}"[-20:] for i in range(pods)]
    return Snapshot(
        objects={"Pod": [crashing_pod(n) for n in names]},
        events=[warning(i, n) for i, n in enumerate(names)],
        observed_at=1_764_583_200.0,
    )


def server_for(snap: Snapshot) -> Any:
    return create_server(FixedSource(snap), SnapshotLogs(snap.logs), redactor=Redactor())


def text_of(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def payload(result: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text_of(result))
    assert result.structured_content == data
    return data


async def test_every_tool_is_annotated_read_only_and_none_writes() -> None:
    async with Client(server_for(snapshot())) as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == [s.name for s in TOOLS]
    for tool in listed:
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.destructive_hint is False
        assert tool.input_schema["type"] == "object"
        assert "budget" in tool.input_schema["properties"]


async def test_answers_report_their_own_token_count() -> None:
    async with Client(server_for(snapshot())) as client:
        for name in ("overview", "problems", "events"):
            result = await client.call_tool(name, {})
            assert not result.is_error
            data = payload(result)
            assert abs(data["tokens"] - count_tokens(text_of(result))) <= 2


@pytest.mark.parametrize(
    ("arguments", "named"),
    [({"bogus": 1}, "bogus"), ({"budget": "600"}, "budget"), ({"severity": "fatal"}, "severity")],
)
async def test_bad_arguments_are_json_rpc_errors_naming_them(arguments: dict[str, Any], named: str) -> None:
    async with Client(server_for(snapshot())) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("problems", arguments)
    assert err.value.code == -32602
    assert f"'{named}'" in err.value.message


async def test_unknown_tool_is_an_error_listing_the_tools() -> None:
    async with Client(server_for(snapshot())) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("delete_pod", {})
    assert "unknown tool" in err.value.message and "overview" in err.value.message


async def test_pages_follow_cursors_and_a_cursor_is_bound_to_its_query() -> None:
    snap = snapshot(pods=40)
    async with Client(server_for(snap)) as client:
        first = payload(await client.call_tool("problems", {"budget": 400}))
        assert first["tokens"] <= 400
        assert first["next_cursor"] and len(first["findings"]) < first["total"]
        seen = [f["id"] for f in first["findings"]]
        cursor = first["next_cursor"]
        for _ in range(first["total"]):
            page = payload(await client.call_tool("problems", {"budget": 400, "cursor": cursor}))
            seen += [f["id"] for f in page["findings"]]
            cursor = page.get("next_cursor")
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) == first["total"]
        with pytest.raises(MCPError) as err:
            await client.call_tool("problems", {"cursor": first["next_cursor"], "severity": "critical"})
        assert "cursor" in err.value.message
        with pytest.raises(MCPError):
            await client.call_tool("events", {"cursor": first["next_cursor"]})


async def test_secrets_in_objects_never_reach_an_answer() -> None:
    async with Client(server_for(snapshot())) as client:
        for name in ("overview", "problems", "events"):
            text = text_of(await client.call_tool(name, {}))
            assert "hunter2x" not in text


def test_fit_cuts_lists_then_strings_and_marks_what_it_cut() -> None:
    answer = {"items": [{"text": "x" * 400} for _ in range(50)], "note": "y" * 5000}
    cut = fit(answer, 300)
    assert tokens(cut) <= 300
    assert cut["truncated"] is True and cut["omitted"]["items"] > 0
    assert fit({"a": 1}, 300) == {"a": 1}


def test_finish_counts_the_answer_with_its_count() -> None:
    out = finish({"x": "hello " * 50})
    assert out["tokens"] == tokens(out)


def test_cursors_round_trip_and_refuse_other_queries() -> None:
    query = {"namespace": "a"}
    cursor = encode_cursor("events", 7, query)
    assert decode_cursor("events", cursor, query) == 7
    assert decode_cursor("events", None, query) == 0
    for tool, q, bad in (
        ("problems", query, cursor),
        ("events", {"namespace": "b"}, cursor),
        ("events", query, "!"),
    ):
        with pytest.raises(ValueError):
            decode_cursor(tool, bad, q)


def test_budget_pick_is_bounded() -> None:
    budget = Budget(1000, 4000)
    assert budget.pick(None) == 1000
    assert budget.pick(10_000) == 4000
    assert budget.pick(200) == 200


async def test_prompts_steer_through_the_tools_and_resources_are_tool_answers() -> None:
    async with Client(server_for(snapshot())) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert set(prompts) == {"troubleshoot_workload", "gpu_pod_pending", "what_changed"}
        got = await client.get_prompt(
            "troubleshoot_workload", {"kind": "Deployment", "name": "web", "namespace": "shop"}
        )
        text = "".join(getattr(m.content, "text", "") for m in got.messages)
        assert "Deployment/web" in text and "`diagnose`" in text
        pending = await client.get_prompt("gpu_pod_pending", {"name": "train-0"})
        assert "`gpu_capacity`" in "".join(getattr(m.content, "text", "") for m in pending.messages)
        uris = sorted(str(r.uri) for r in (await client.list_resources()).resources)
        assert uris == ["capstan://cluster/health", "capstan://cluster/problems"]
        health = await client.read_resource("capstan://cluster/health")
        body = json.loads(getattr(health.contents[0], "text", "{}"))
        assert body["counts"]["pods"]["total"] == 3 and body["tokens"] > 0


async def test_a_namespace_s_problems_hold_the_nodes_its_pods_run_on() -> None:
    node = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": "n1"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {
                    "type": "DiskPressure",
                    "status": "True",
                    "reason": "KubeletHasDiskPressure",
                    "message": "imagefs 4%",
                },
            ]
        },
    }
    pod = crashing_pod("logs-0")
    pod["status"] = {
        "phase": "Running",
        "containerStatuses": [{"name": "app", "ready": True, "restartCount": 0}],
    }
    elsewhere = {"kind": "Pod", "metadata": {"name": "x", "namespace": "other"}, "spec": {"nodeName": "n2"}}
    snap = Snapshot(objects={"Node": [node], "Pod": [pod, elsewhere]}, observed_at=1.0)
    async with Client(server_for(snap)) as client:
        shop = payload(await client.call_tool("problems", {"namespace": "shop"}))
        other = payload(await client.call_tool("problems", {"namespace": "other"}))
        overview = payload(await client.call_tool("overview", {"namespace": "shop"}))
    assert [f["objects"][0] for f in shop["findings"]] == [{"kind": "Node", "namespace": "", "name": "n1"}]
    assert other["findings"] == []
    assert overview["top_problems"][0]["subject"] == "Node/n1"


async def test_log_lines_of_a_failing_tool_carry_no_secret_on_any_root_handler() -> None:
    """A tool that raises is logged with its exception; the SDK puts its own Rich handler on the root logger, and
    both it and any other root handler must print the line without the secret the exception held."""
    secret = "Pl4ntedL0gSecret99"

    async def boom(call: Any, args: Any) -> dict[str, Any]:
        raise RuntimeError(f"upstream said Authorization: Bearer {secret}")

    spec = ToolSpec("boom", "Boom", "Always fails.", ToolArgs, boom, Budget(200, 400))
    plain, rich_out = io.StringIO(), io.StringIO()
    handlers: list[logging.Handler] = [
        logging.StreamHandler(plain),
        RichHandler(console=Console(file=rich_out, width=200), rich_tracebacks=True),
    ]
    root, ours = logging.getLogger(), logging.getLogger("capstan")
    # an earlier test in this process may have run the CLI's logging set-up, which stops the capstan loggers
    # propagating to the root logger; this test is about the root logger's handlers
    saved = (root.level, ours.propagate, ours.handlers[:], ours.level)
    root.setLevel(logging.WARNING)
    ours.propagate, ours.handlers[:] = True, []
    ours.setLevel(logging.NOTSET)
    root.handlers.extend(handlers)
    try:
        server = create_server(FixedSource(snapshot()), SnapshotLogs({}), redactor=Redactor(), tools=[spec])
        async with Client(server) as client:
            result = await client.call_tool("boom", {})
        assert result.is_error and secret not in text_of(result)
    finally:
        for h in handlers:
            root.removeHandler(h)
        root.setLevel(saved[0])
        ours.propagate, ours.handlers[:] = saved[1], saved[2]
        ours.setLevel(saved[3])
    for out in (plain.getvalue(), rich_out.getvalue()):
        assert "mcp tool boom failed" in out and "RuntimeError" in out
        assert secret not in out and "[REDACTED" in out
