"""Planted secrets never leave the MCP server: every tool, called with every argument shape its schema allows,
over objects, Events, logs and a real SQLite history holding known secrets, answers without one of them.

Distinct secrets are planted under sensitive names (env values, args flags, ConfigMap keys, annotations, Secret
data, the last-applied annotation) and by shape (URLs with a password, bearer headers, GitHub and AWS keys,
``password=`` pairs) in a Deployment and its pods, a ConfigMap, a Secret, Warning Events, previous-container logs,
and the store's recorded changes, Events, engine entries and restart records. Argument shapes come from each
tool's own schema (every ``Literal`` choice, both booleans, optional fields set and unset, the planted objects as
targets), so a tool added later is covered without editing this test. The test also checks that the planted
objects reached the answers (their names appear), so it cannot pass by answering nothing.
"""

from __future__ import annotations

import itertools
import json
import secrets
import time
import typing
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from capstan.diagnose import Snapshot
from capstan.mcp import TOOLS, FixedSource, SnapshotLogs, ToolSpec, create_server
from capstan.store import Batch, EngineEntry, KubeEvent, ObjectChange, Restart, open_store

NS = "shop"
NOW = float(int(time.time()))  # the history tools read windows back from the real clock


class Plants:
    def __init__(self) -> None:
        self.where: dict[str, str] = {}

    def core(self, where: str) -> str:
        value = f"PLNT{len(self.where):03d}{secrets.token_hex(8).upper()}"[:16]
        self.where[value] = where
        return value

    def url(self, where: str) -> str:
        return f"postgres://app:{self.core(where)}@db.internal:5432/app"

    def kv(self, where: str) -> str:
        return f"connecting with password={self.core(where)} to db"

    def bearer(self, where: str) -> str:
        return f"Authorization: Bearer {self.core(where)}"

    def github(self, where: str) -> str:
        return "ghp_" + self.core(where) + "abcdefghijklmnopqrst"

    def aws(self, where: str) -> str:
        return f"AKIA{self.core(where)}"


def planted_world(p: Plants) -> Snapshot:
    template_spec = {
        "containers": [
            {
                "name": "app",
                "image": "shop:1",
                "command": ["sh", "-c", f"curl -H '{p.bearer('pod command')}' http://api"],
                "args": [f"--db-password={p.core('pod args flag')}", p.url("pod args url")],
                "env": [
                    {"name": "DB_PASSWORD", "value": p.core("pod env by name")},
                    {"name": "NOTES", "value": p.kv("pod env by shape")},
                ],
                "envFrom": [{"configMapRef": {"name": "shop-config"}}],
            }
        ]
    }
    last_applied = json.dumps({"kind": "Deployment", "data": {"token": p.core("last-applied")}})
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": NS,
            "uid": "dep-1",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": last_applied,
                "example.com/api-token": p.core("annotation by name"),
                "example.com/ci": p.github("annotation by shape"),
            },
        },
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"spec": template_spec},
        },
        "status": {"replicas": 2, "readyReplicas": 0},
    }
    replicaset = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-5d9c",
            "namespace": NS,
            "uid": "rs-1",
            "ownerReferences": [{"kind": "Deployment", "name": "web", "uid": "dep-1"}],
        },
        "spec": {"replicas": 2, "template": {"spec": template_spec}},
        "status": {"replicas": 2},
    }
    pods = []
    for i in range(2):
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"web-5d9c-{i}",
                    "namespace": NS,
                    "uid": f"pod-{i}",
                    "labels": {"app": "web"},
                    "ownerReferences": [{"kind": "ReplicaSet", "name": "web-5d9c", "uid": "rs-1"}],
                },
                "spec": {**template_spec, "nodeName": "gpu-1"},
                "status": {
                    "phase": "Running",
                    "containerStatuses": [
                        {
                            "name": "app",
                            "ready": False,
                            "restartCount": 6,
                            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                            "lastState": {
                                "terminated": {
                                    "reason": "Error",
                                    "exitCode": 1,
                                    "message": p.url(f"termination message {i}"),
                                }
                            },
                        }
                    ],
                },
            }
        )
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "shop-config", "namespace": NS},
        "data": {"password": p.core("configmap key by name"), "dsn": p.url("configmap value by shape")},
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "shop-db", "namespace": NS},
        "data": {"password": p.core("secret data")},
        "stringData": {"token": p.core("secret stringData")},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "capacity": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    events = [
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"web.{i}", "namespace": NS},
            "type": "Warning",
            "reason": "BackOff",
            "message": f"Back-off restarting failed container app ({p.kv(f'event message {i}')})",
            "involvedObject": {"kind": "Pod", "namespace": NS, "name": f"web-5d9c-{i}", "uid": f"pod-{i}"},
            "count": 4,
            "lastTimestamp": "2026-12-01T10:00:00Z",
        }
        for i in range(2)
    ]
    logs = {
        (NS, f"web-5d9c-{i}", "app"): "\n".join(
            [
                "starting",
                f"ERROR cannot connect: {p.url(f'log url {i}')}",
                f"ERROR request failed with {p.bearer(f'log bearer {i}')}",
                f"FATAL {p.kv(f'log kv {i}')}",
                f"WARN token {p.github(f'log github {i}')}",
            ]
        )
        for i in range(2)
    }
    return Snapshot(
        objects={
            "Deployment": [deployment],
            "ReplicaSet": [replicaset],
            "Pod": pods,
            "ConfigMap": [configmap],
            "Secret": [secret],
            "Service": [service],
            "Node": [node],
        },
        events=events,
        logs=logs,
        observed_at=NOW,
    )


def planted_history(p: Plants, path: Path) -> Any:
    store = open_store(str(path))
    patch = [
        {
            "op": "replace",
            "path": "/spec/template/spec/containers/0/args/1",
            "value": p.url("recorded patch url"),
        },
        {
            "op": "add",
            "path": "/metadata/annotations/example.com~1ci",
            "value": p.github("recorded patch token"),
        },
    ]
    change = ObjectChange(
        source="default",
        observed_at=NOW - 60,
        kind="Deployment",
        api_version="apps/v1",
        namespace=NS,
        name="web",
        uid="dep-1",
        resource_version="7",
        change_type="modified",
        observed_via="watch",
        version_seq=2,
        patch=patch,
        snapshot=None,
    )
    event = KubeEvent(
        source="default",
        uid="ev-1",
        resource_version="9",
        observed_at=NOW - 30,
        event_time=NOW - 30,
        namespace=NS,
        name="web.rec",
        reason="Failed",
        type="Warning",
        message=p.kv("recorded event message"),
        count=1,
        involved_uid="pod-0",
        involved_kind="Pod",
        involved_namespace=NS,
        involved_name="web-5d9c-0",
        payload={"message": p.bearer("recorded event payload"), "reason": "Failed", "type": "Warning"},
    )
    entry = EngineEntry(
        target="redis://cache:6379",
        log="slowlog",
        run_id="run-1",
        native_id="1",
        happened_at=NOW - 20,
        observed_at=NOW - 19,
        payload={
            "args": ["AUTH", p.core("engine AUTH argument")],
            "duration_us": 12000,
            "client_name": "app",
        },
    )
    restart = Restart(
        pod_uid="pod-0",
        namespace=NS,
        pod="web-5d9c-0",
        container="app",
        container_type="app",
        restart_count=6,
        observed_at=NOW - 10,
        reason="Error",
        exit_code=1,
        reported_state={"message": p.url("restart record message")},
    )
    store.history.write(Batch(object_changes=[change], kube_events=[event], engine_entries=[entry]))
    store.restart_records.write(Batch(restarts=[restart]))
    return store


_TARGETS: dict[str, Any] = {
    "kind": ["Pod", "Deployment", "ConfigMap", "Secret"],
    "name": None,  # chosen with the kind
    "namespace": [None, NS],
    "query": ["web", "kind:Pod web", "ns:shop shop-db", "kind:ConfigMap", "kind:Secret"],
    "label_selector": [None, "app=web"],
    "pod": [None, "web-5d9c-0"],
    "container": [None, "app"],
    "grep": [None, "ERROR|token"],
    "model": [None, "NVIDIA-H100-80GB-HBM3"],
}
_NAMES = {"Pod": "web-5d9c-0", "Deployment": "web", "ConfigMap": "shop-config", "Secret": "shop-db"}
_SKIP = {
    "budget",
    "cursor",
    "since_seconds",
    "until",
    "limit",
    "hops",
    "max_nodes",
    "tail_lines",
    "field_selector",
}


def _choices(name: str, annotation: Any, required: bool) -> list[Any]:
    if name in _TARGETS and _TARGETS[name] is not None:
        values = list(_TARGETS[name])
        return [v for v in values if v is not None] if required else values
    args = typing.get_args(annotation)
    literals = [a for a in args if typing.get_origin(a) is typing.Literal]
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    if literals:
        return [None, *typing.get_args(literals[0])]
    if annotation is bool or bool in args:
        return [False, True]
    return [] if required else [None]


def argument_shapes(spec: ToolSpec) -> list[dict[str, Any]]:
    """Every combination of the tool's argument choices (bounded), ``name`` following ``kind``."""
    fields = spec.args.model_fields
    axes: list[tuple[str, list[Any]]] = []
    for name, info in fields.items():
        if name in _SKIP or name == "name":
            continue
        axes.append((name, _choices(name, info.annotation, info.is_required())))
    shapes = []
    for combo in itertools.islice(itertools.product(*(values for _, values in axes)), 400):
        args = {k: v for (k, _), v in zip(axes, combo, strict=True) if v is not None}
        if "name" in fields:
            kind = args.get("kind", "Pod")
            args["name"] = _NAMES.get(kind, "web")
            if "namespace" in fields:
                args.setdefault("namespace", NS)
        shapes.append(args)
    return shapes or [{}]


def text_of(result: Any) -> str:
    return "".join(b.text for b in result.content if isinstance(b, TextContent))


@pytest.mark.parametrize("spec", TOOLS, ids=lambda s: s.name)
async def test_no_planted_secret_in_any_answer(spec: ToolSpec, tmp_path: Path) -> None:
    p = Plants()
    snapshot = planted_world(p)
    store = planted_history(p, tmp_path / "history.db")
    try:
        redactor = store.history.redactor(create_key=True)
        server = create_server(
            FixedSource(snapshot, redactor=redactor, history=store.history),
            SnapshotLogs(snapshot.logs),
            redactor=redactor,
        )
        answers: dict[str, str] = {}
        async with Client(server) as client:
            for args in argument_shapes(spec):
                try:
                    result = await client.call_tool(spec.name, args)
                except MCPError as err:  # a shape the tool refuses is an error naming it, never a leak
                    answers[f"{spec.name}({args}) error"] = err.message
                    continue
                answers[f"{spec.name}({args})"] = text_of(result)
        leaks = {
            where: [call for call, text in answers.items() if core in text] for core, where in p.where.items()
        }
        assert {w: calls for w, calls in leaks.items() if calls} == {}
        assert any(
            name in text
            for text in answers.values()
            for name in ("web", "shop-config", "shop-db", "gpu-1", "AUTH")
        ), "no answer named a planted object: the test would pass by answering nothing"
    finally:
        store.close()


async def test_no_planted_secret_in_resources_or_prompts(tmp_path: Path) -> None:
    p = Plants()
    snapshot = planted_world(p)
    store = planted_history(p, tmp_path / "history.db")
    try:
        redactor = store.history.redactor(create_key=True)
        server = create_server(
            FixedSource(snapshot, redactor=redactor, history=store.history),
            SnapshotLogs(snapshot.logs),
            redactor=redactor,
        )
        async with Client(server) as client:
            texts = []
            for resource in (await client.list_resources()).resources:
                read = await client.read_resource(str(resource.uri))
                texts += [getattr(c, "text", "") for c in read.contents]
        assert texts and any("web" in t for t in texts)
        assert not [core for core in p.where if any(core in t for t in texts)]
    finally:
        store.close()
