"""The history tools over a real SQLite store, through the official SDK's in-memory client: each tool's answer,
keyset paging without duplicates or losses (also while rows are written between pages), the no-store answer,
planted secrets in recorded values and engine commands never served, budgets kept, bad arguments as JSON-RPC
errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from capstan.diagnose import Snapshot
from capstan.mcp import FixedSource, SnapshotLogs, create_server
from capstan.mcp._history import is_status_churn, patch_lines, redact_patch_value
from capstan.redact import Redactor
from capstan.store import Batch, EngineEntry, Gap, HistoryStore, ObjectChange, Restart, Store, open_store

NOW = 1_764_583_200.0
SECRETS = ("hunter2", "s3cretpw", "c2VjcmV0dmFsdWU=", "s3cret-requirepass", "topsecret-cm", "hunter2acl")
HISTORY_TOOLS = ("changes", "timeline", "restarts", "engine_events")


def change(
    uid: str,
    seq: int,
    at: float,
    patch: list[dict[str, Any]] | None,
    *,
    kind: str = "Deployment",
    namespace: str = "shop",
    name: str = "web",
    change_type: str = "modified",
) -> ObjectChange:
    snapshot = (
        {"kind": kind, "metadata": {"name": name, "namespace": namespace, "uid": uid}} if seq == 1 else None
    )
    return ObjectChange(
        source="c1",
        observed_at=at,
        kind=kind,
        api_version="v1",
        namespace=namespace,
        name=name,
        uid=uid,
        resource_version=str(seq),
        change_type="added" if seq == 1 else change_type,  # type: ignore[arg-type]
        observed_via="watch",
        version_seq=seq,
        patch=None if seq == 1 else patch,
        snapshot=snapshot,
    )


def env_path(i: int = 0) -> str:
    return f"/spec/template/spec/containers/0/env/{i}"


def deployment_changes(start: float) -> list[ObjectChange]:
    """web's history: added, 30 replica changes, then the changes holding secrets."""
    out = [change("u-web", 1, start, None)]
    for i in range(2, 32):
        out.append(change("u-web", i, start + i, [{"op": "replace", "path": "/spec/replicas", "value": i}]))
    planted: list[list[dict[str, Any]]] = [
        [{"op": "replace", "path": f"{env_path()}/value", "value": "hunter2"}],
        [{"op": "add", "path": f"{env_path(1)}", "value": {"name": "DB_PASSWORD", "value": "s3cretpw"}}],
        [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "shop:" + "9" * 400}],
    ]
    for j, patch in enumerate(planted):
        out.append(change("u-web", 32 + j, start + 32 + j, patch))
    return out


def other_changes(start: float) -> list[ObjectChange]:
    return [
        change("u-sec", 1, start, None, kind="Secret", name="db"),
        change(
            "u-sec",
            2,
            start + 1,
            [{"op": "replace", "path": "/data/password", "value": "c2VjcmV0dmFsdWU="}],
            kind="Secret",
            name="db",
        ),
        change("u-cm", 1, start, None, kind="ConfigMap", name="cfg"),
        change(
            "u-cm",
            2,
            start + 2,
            [{"op": "add", "path": "/data/DB_PASSWORD", "value": "topsecret-cm"}],
            kind="ConfigMap",
            name="cfg",
        ),
        change("u-node", 1, start, None, kind="Node", namespace="", name="n1"),
        *(
            change(
                "u-node",
                2 + i,
                start + 3 + i,
                [{"op": "replace", "path": "/status/conditions/0/lastHeartbeatTime", "value": f"t{i}"}],
                kind="Node",
                namespace="",
                name="n1",
            )
            for i in range(10)
        ),
        change("u-node", 12, start + 20, [], kind="Node", namespace="", name="n1"),
        change(
            "u-node",
            13,
            start + 21,
            [{"op": "replace", "path": "/status/conditions/0/status", "value": "False"}],
            kind="Node",
            namespace="",
            name="n1",
        ),
    ]


def restart(i: int, at: float) -> Restart:
    return Restart(
        pod_uid="u-pod",
        namespace="shop",
        pod="web-1",
        container="app",
        container_type="container",
        restart_count=i,
        observed_at=at,
        reason="OOMKilled" if i % 2 else "Error",
        exit_code=137 if i % 2 else 1,
        reported_state={"while_down": i == 3, "previous_count": i - 1, "notify": "reported"},
    )


def engine_entries(start: float) -> list[EngineEntry]:
    commands = [
        ["AUTH", "hunter2"],
        ["CONFIG", "SET", "requirepass", "s3cret-requirepass"],
        ["HSET", "user:1", "password", "hunter2"],
        *(["GET", f"key:{i}"] for i in range(20)),
    ]
    out = [
        EngineEntry(
            "redis-a",
            "slowlog",
            "run1",
            str(i),
            start + i,
            start + i + 1,
            {"id": i, "value": 1200 + i, "args": c},
        )
        for i, c in enumerate(commands)
    ]
    out.append(
        EngineEntry(
            "redis-a",
            "config",
            "run1",
            "1",
            start + 30,
            start + 30,
            {
                "parameter": "requirepass",
                "old": "hunter2",
                "new": "s3cret-requirepass",
                "server_restarted": False,
            },
        )
    )
    out.append(
        EngineEntry(
            "redis-a",
            "acllog",
            "run1",
            "a1",
            start + 31,
            start + 31,
            {"entry_id": 1, "count": 3, "reason": "auth", "context": "toplevel", "object": "AUTH", "username": "app",
             "client_info": "id=3 addr=10.0.0.9:5000 password=hunter2acl"},
            mutable=True,
        )
    )  # fmt: skip
    out.append(
        EngineEntry("redis-b", "commandlog-large-request", "run9", "0", start + 5, start + 6, {"value": 90000, "args": ["SET", "big", "x" * 500], "server": "valkey", "server_version": "8.1.8"})
    )  # fmt: skip
    return out


def gaps(start: float) -> list[Gap]:
    return [
        Gap(
            "redis-a", "slowlog", "run1:0-4", start + 10.5, 5, "ring overwrote entries before they were read"
        ),
        Gap("redis-a", "acllog", "restart:run0->run1", start + 2.5, None, "server restarted"),
        Gap("c1", "kubernetes", "apps/v1/Deployment@9", start + 3, None, "watch could not resume (410 Gone)"),
    ]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = open_store(str(tmp_path / "history.db"))
    base = NOW - 600
    st.history.write(
        Batch(
            object_changes=[*deployment_changes(base), *other_changes(base)],
            restarts=[restart(i, base + 10 * i) for i in range(1, 13)],
            engine_entries=engine_entries(base),
            gaps=gaps(base),
        )
    )
    yield st
    st.close()


def server_for(history: HistoryStore | None) -> Any:
    snap = Snapshot(observed_at=NOW)
    return create_server(
        FixedSource(snap, history=history), SnapshotLogs(snap.logs), redactor=Redactor(), clock=lambda: NOW
    )


def text_of(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    data: dict[str, Any] = json.loads(text_of(result))
    return data


async def all_pages(client: Client, tool: str, args: dict[str, Any], key: str) -> list[list[Any]]:
    pages = []
    cursor = None
    for _ in range(200):
        answer = payload(await client.call_tool(tool, {**args, **({"cursor": cursor} if cursor else {})}))
        assert answer["tokens"] <= args.get("budget", 100_000)
        pages.append(answer[key])
        cursor = answer.get("next_cursor")
        if cursor is None:
            return pages
    raise AssertionError("paging did not end")


async def test_without_a_store_history_tools_say_so_and_live_tools_work() -> None:
    async with Client(server_for(None)) as client:
        for tool in HISTORY_TOOLS:
            args = {"kind": "Deployment", "name": "web"} if tool == "changes" else {}
            result = await client.call_tool(tool, args)
            assert result.is_error
            answer = json.loads(text_of(result))
            assert "no history store is configured" in answer["error"] and "\n" not in answer["error"]
        assert not (await client.call_tool("overview", {})).is_error


async def test_changes_are_newest_first_with_readable_diffs(store: Store) -> None:
    async with Client(server_for(store.history)) as client:
        answer = payload(
            await client.call_tool("changes", {"kind": "Deployment", "name": "web", "namespace": "shop"})
        )
    items = answer["changes"]
    times = [c["at"] for c in items]
    assert times == sorted(times, reverse=True)
    assert items[0]["at"] == "2025-12-01T09:50:34.000Z"  # the newest: the image change
    replicas = next(c for c in items if c["diff"] == ["replace /spec/replicas = 31"])
    assert replicas["change"] == "modified"
    image = items[0]["diff"][0]
    assert image.startswith("replace /spec/template/spec/containers/0/image = shop:999") and "chars)" in image
    assert len(image) < 260


async def test_changes_page_without_duplicates_or_losses(store: Store) -> None:
    args = {"kind": "Deployment", "name": "web", "namespace": "shop", "budget": 300}
    async with Client(server_for(store.history)) as client:
        pages = await all_pages(client, "changes", args, "changes")
    seen = [c["at"] for page in pages for c in page]
    assert len(pages) > 2
    assert len(seen) == len(set(seen)) == 34  # added + 30 replica changes + 3 planted
    assert seen == sorted(seen, reverse=True)


async def test_timeline_leaves_status_churn_out_and_counts_it(store: Store) -> None:
    async with Client(server_for(store.history)) as client:
        answer = payload(await client.call_tool("timeline", {"budget": 100_000, "since_seconds": 3600}))
        cluster_scoped = payload(await client.call_tool("timeline", {"namespace": "", "budget": 8000}))
    objects = [c["object"] for c in answer["changes"]]
    assert answer["status_churn_left_out"] == 11  # ten heartbeats and one empty patch
    assert "Node/n1" in objects and "Deployment/shop/web" in objects
    assert [c["diff"] for c in cluster_scoped["changes"] if c["change"] == "modified"] == [
        ["replace /status/conditions/0/status = False"]
    ]
    times = [c["at"] for c in answer["changes"]]
    assert times == sorted(times)


async def test_timeline_pages_exactly_once_while_rows_are_written(store: Store) -> None:
    args = {"namespace": "shop", "budget": 300}
    seen: list[tuple[str, str]] = []
    async with Client(server_for(store.history)) as client:
        first = payload(await client.call_tool("timeline", args))
        seen += [(c["at"], c["object"]) for c in first["changes"]]
        # rows written after the first page: later ones must show up once, none repeat
        store.history.write(Batch(object_changes=[change("u-late", 1, NOW - 5, None, name="late")]))
        cursor = first["next_cursor"]
        for _ in range(100):
            page = payload(await client.call_tool("timeline", {**args, "cursor": cursor}))
            assert page["tokens"] <= 300
            seen += [(c["at"], c["object"]) for c in page["changes"]]
            cursor = page.get("next_cursor")
            if cursor is None:
                break
    assert len(seen) == len(set(seen))
    assert (
        len(seen) == 34 + 2 + 2 + 1
    )  # web, the Secret and the ConfigMap (added + modified each), the late one
    assert [at for at, _ in seen] == sorted(at for at, _ in seen)


async def test_restarts_carry_count_reason_exit_code_and_summary(store: Store) -> None:
    async with Client(server_for(store.history)) as client:
        answer = payload(await client.call_tool("restarts", {"namespace": "shop", "pod": "web-1"}))
        pages = await all_pages(client, "restarts", {"budget": 200}, "restarts")
    first = answer["restarts"][0]
    assert first["pod"] == "shop/web-1" and first["container"] == "app"
    assert first["restart_count"] == 1 and first["reason"] == "OOMKilled" and first["exit_code"] == 137
    assert "OOM" in first["summary"] and "notification: reported" in first["summary"]
    assert "Capstan was down" in answer["restarts"][2]["summary"]
    counts = [r["restart_count"] for page in pages for r in page]
    assert counts == list(range(1, 13))
    assert len(pages) > 1


async def test_engine_events_interleave_gaps_in_time_order(store: Store) -> None:
    async with Client(server_for(store.history)) as client:
        everything = payload(await client.call_tool("engine_events", {"budget": 8000}))
        acl = payload(await client.call_tool("engine_events", {"type": "acl", "instance": "redis-a"}))
        commandlog = payload(await client.call_tool("engine_events", {"type": "commandlog"}))
    events = everything["events"]
    assert [e["at"] for e in events] == sorted(e["at"] for e in events)
    gaps_seen = [e for e in events if e.get("gap")]
    assert [(g["log"], g["lost"]) for g in gaps_seen] == [("acllog", "unknown"), ("slowlog", 5)]
    assert all(g["why"] for g in gaps_seen) and everything["gaps"] == 2
    assert not any(e.get("log") == "kubernetes" for e in events)
    slow = next(e for e in events if e["log"] == "slowlog" and e["command"][0] == "GET")
    assert slow["duration_us"] >= 1200
    config = next(e for e in events if e["log"] == "config")
    assert config["parameter"] == "requirepass"
    assert [e["log"] for e in acl["events"]] == ["acllog", "acllog"]
    assert acl["events"][0]["gap"] is True and acl["events"][1]["reason"] == "auth"
    big = commandlog["events"][0]
    assert big["instance"] == "redis-b" and big["bytes"] == 90000 and "chars)" in big["command"][2]
    # the server each entry came from, when the recorder stamped it
    assert big["server"] == "valkey 8.1.8" and "server" not in slow


async def test_engine_events_page_without_duplicates_or_losses(store: Store) -> None:
    async with Client(server_for(store.history)) as client:
        pages = await all_pages(client, "engine_events", {"budget": 250}, "events")
    seen = [json.dumps(e, sort_keys=True) for page in pages for e in page]
    assert len(pages) > 3
    assert len(seen) == len(set(seen)) == 23 + 2 + 1 + 2  # slowlog, config + acl, commandlog, two engine gaps


async def test_planted_secrets_never_reach_an_answer(store: Store) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("changes", {"kind": "Deployment", "name": "web", "budget": 8000}),
        ("changes", {"kind": "Secret", "name": "db", "namespace": "shop"}),
        ("changes", {"kind": "ConfigMap", "name": "cfg"}),
        ("timeline", {"budget": 8000}),
        ("timeline", {"namespace": "shop", "kind": "Secret"}),
        ("timeline", {"budget": 200}),
        ("engine_events", {"budget": 8000}),
        ("engine_events", {"type": "slowlog", "budget": 120}),
        ("engine_events", {"type": "config"}),
        ("engine_events", {"type": "acl"}),
        ("restarts", {}),
    ]
    async with Client(server_for(store.history)) as client:
        for tool, args in calls:
            cursor = None
            for _ in range(100):
                result = await client.call_tool(tool, {**args, **({"cursor": cursor} if cursor else {})})
                text = text_of(result)
                assert not result.is_error, text
                for secret in SECRETS:
                    assert secret not in text, (tool, args, secret)
                cursor = json.loads(text).get("next_cursor")
                if cursor is None:
                    break
        secret_change = payload(await client.call_tool("changes", {"kind": "Secret", "name": "db"}))
    assert any(
        line.startswith("replace /data/password = [REDACTED")
        for c in secret_change["changes"]
        for line in c.get("diff", [])
    )


@pytest.mark.parametrize("budget", [200, 400, 2000])
async def test_every_history_answer_keeps_its_budget(store: Store, budget: int) -> None:
    async with Client(server_for(store.history)) as client:
        for tool in HISTORY_TOOLS:
            args: dict[str, Any] = {"budget": budget}
            if tool == "changes":
                args |= {"kind": "Deployment", "name": "web"}
            answer = payload(await client.call_tool(tool, args))
            assert answer["tokens"] <= budget


async def test_bad_time_and_foreign_cursor_are_json_rpc_errors(store: Store) -> None:
    async with Client(server_for(store.history)) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("changes", {"kind": "Deployment", "name": "web", "until": "yesterday-ish"})
        assert err.value.code == -32602 and "'until'" in err.value.message
        first = payload(await client.call_tool("timeline", {"budget": 200}))
        with pytest.raises(MCPError) as err:
            await client.call_tool("restarts", {"cursor": first["next_cursor"]})
        assert err.value.code == -32602 and "cursor" in err.value.message
        with pytest.raises(MCPError):
            await client.call_tool("timeline", {"budget": 200, "kind": "Pod", "cursor": first["next_cursor"]})
        with pytest.raises(MCPError) as err:
            await client.call_tool("timeline", {"since_seconds": 31 * 86400})
        assert "'since_seconds'" in err.value.message
        with pytest.raises(MCPError):
            await client.call_tool("engine_events", {"type": "keyspace"})


async def test_changes_until_bounds_the_window(store: Store) -> None:
    async with Client(server_for(store.history)) as client:
        answer = payload(
            await client.call_tool(
                "changes",
                {"kind": "Deployment", "name": "web", "until": str(NOW - 600 + 5), "since_seconds": 60},
            )
        )
    assert [c["change"] for c in answer["changes"]] == ["modified"] * 4 + ["added"]


def test_patch_values_are_redacted_where_they_sit() -> None:
    r = Redactor()
    assert redact_patch_value(r, "Deployment", f"{env_path()}/value", "debug") == "[REDACTED]"
    assert redact_patch_value(r, "ConfigMap", "/data/LOG_LEVEL", "debug") == "debug"
    assert redact_patch_value(r, "ConfigMap", "/data/API_TOKEN", "abc12345") == "[REDACTED]"
    assert redact_patch_value(r, "Secret", "/data/x", "dmFsdWU=") == "[REDACTED]"
    assert redact_patch_value(r, "Secret", "/spec/odd", "value") == "[REDACTED]"
    assert redact_patch_value(r, "Deployment", "/spec/replicas", 3) == 3
    annotation = "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration"
    applied = json.dumps({"kind": "ConfigMap", "metadata": {}, "data": {"PASSWORD": "hunter2"}})
    assert "hunter2" not in str(redact_patch_value(r, "ConfigMap", annotation, applied))
    lines = patch_lines(
        r, "Pod", [{"op": "remove", "path": "/metadata/labels/a"}, {"op": "move", "from": "/a", "path": "/b"}]
    )
    assert lines == ["remove /metadata/labels/a", "move /b from /a"]


def test_status_churn_is_only_heartbeats_and_timestamps() -> None:
    beat = change(
        "u", 2, NOW, [{"op": "replace", "path": "/status/conditions/0/lastHeartbeatTime", "value": "t"}]
    )
    real = change("u", 2, NOW, [{"op": "replace", "path": "/status/conditions/0/status", "value": "False"}])
    lease = change("u", 2, NOW, [{"op": "replace", "path": "/spec/renewTime", "value": "t"}], kind="Lease")
    assert is_status_churn(beat) and is_status_churn(lease)
    assert is_status_churn(change("u", 2, NOW, []))
    assert not is_status_churn(real)
    assert not is_status_churn(change("u", 1, NOW, None))


async def test_a_page_that_reaches_the_scan_bound_goes_on_with_a_cursor(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import capstan.mcp._history as history_tools

    monkeypatch.setattr(history_tools, "MAX_SCAN", 3)
    async with Client(server_for(store.history)) as client:
        pages = []
        churn = 0
        cursor = None
        for _ in range(100):
            answer = payload(
                await client.call_tool(
                    "timeline", {"namespace": "", **({"cursor": cursor} if cursor else {})}
                )
            )
            pages.append(answer["changes"])
            churn += answer["status_churn_left_out"]
            cursor = answer.get("next_cursor")
            if cursor is None:
                break
    assert [] in pages  # a page of heartbeats only: nothing shown, the cursor goes on
    assert churn == 11 and sum(len(p) for p in pages) == 2  # the Node's added and its Ready change


async def test_changes_say_when_the_window_held_more_than_they_read(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    import capstan.mcp._history as history_tools

    monkeypatch.setattr(history_tools, "MAX_OBJECT_SCAN", 10)
    async with Client(server_for(store.history)) as client:
        answer = payload(await client.call_tool("changes", {"kind": "Deployment", "name": "web"}))
    assert len(answer["changes"]) == 10
    assert "more than 10 changes in the window" in answer["window_cut"]
