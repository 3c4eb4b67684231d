"""The object tools (get_resource, list_resources, search, neighborhood) through the official SDK's in-memory client
over one fixed snapshot: arguments, not-found lines, selectors, pagination, the neighbourhood graph (also at 10k
pods), planted secrets and budgets."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import TextContent

from capstan.diagnose import ObjectRef, Snapshot
from capstan.mcp import FixedSource, SnapshotLogs, create_server
from capstan.mcp._objects import neighborhood_of, parse_field_selector, parse_query
from capstan.redact import Redactor

ENV_SECRET = "hunter2-env-value"
CONFIGMAP_SECRET = "cm-pass-value-9876"
SECRET_VALUE = "s3cr3t-secret-data"
PLANTED = (
    ENV_SECRET,
    CONFIGMAP_SECRET,
    SECRET_VALUE,
    base64.b64encode(SECRET_VALUE.encode()).decode(),
)


def meta(name: str, namespace: str | None = "shop", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", **extra}
    if namespace:
        out["namespace"] = namespace
    return out


def owner(kind: str, name: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}]


def pod_spec(node: str = "node-1") -> dict[str, Any]:
    return {
        "nodeName": node,
        "containers": [
            {
                "name": "app",
                "image": "nginx:1.27",
                "env": [
                    {"name": "DB_PASSWORD", "value": ENV_SECRET},
                    {"name": "DB_URL", "valueFrom": {"secretKeyRef": {"name": "db", "key": "url"}}},
                ],
                "envFrom": [{"configMapRef": {"name": "web-config"}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "web-data"}},
            {"name": "tls", "secret": {"secretName": "web-tls"}},
        ],
    }


def pod(
    name: str, *, crashing: bool = False, namespace: str = "shop", rs: str = "web-7d9c"
) -> dict[str, Any]:
    state = (
        {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}} if crashing else {"running": {}}
    )
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": meta(name, namespace, labels={"app": "web"}, ownerReferences=owner("ReplicaSet", rs)),
        "spec": pod_spec(),
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.9",
            "containerStatuses": [
                {
                    "name": "app",
                    "ready": not crashing,
                    "restartCount": 5 if crashing else 0,
                    "state": state,
                    "lastState": {"terminated": {"reason": "Error", "exitCode": 1}} if crashing else {},
                }
            ],
        },
    }


def objects(pods: int = 2) -> dict[str, list[dict[str, Any]]]:
    template = {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec()}
    return {
        "Namespace": [{"kind": "Namespace", "metadata": meta("shop", None)}],
        "Deployment": [
            {
                "kind": "Deployment",
                "metadata": meta("web"),
                "spec": {"replicas": pods, "selector": {"matchLabels": {"app": "web"}}, "template": template},
                "status": {"readyReplicas": pods - 1, "updatedReplicas": pods},
            },
            {
                "kind": "Deployment",
                "metadata": meta("webshop"),
                "spec": {
                    "replicas": 0,
                    "template": {"spec": {"containers": [{"name": "a", "image": "redis:7"}]}},
                },
            },
        ],
        "ReplicaSet": [
            {
                "kind": "ReplicaSet",
                "metadata": meta(
                    "web-7d9c", ownerReferences=owner("Deployment", "web"), labels={"app": "web"}
                ),
                "spec": {"replicas": pods, "template": template},
                "status": {"readyReplicas": pods - 1},
            }
        ],
        "Pod": [pod("web-7d9c-a0", crashing=True)] + [pod(f"web-7d9c-b{i:03d}") for i in range(1, pods)],
        "Service": [
            {
                "kind": "Service",
                "metadata": meta("web"),
                "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
            }
        ],
        "Ingress": [
            {
                "kind": "Ingress",
                "metadata": meta("shop"),
                "spec": {
                    "rules": [
                        {
                            "host": "shop.example.com",
                            "http": {
                                "paths": [
                                    {
                                        "path": "/",
                                        "backend": {"service": {"name": "web", "port": {"number": 80}}},
                                    }
                                ]
                            },
                        }
                    ]
                },
            }
        ],
        "HTTPRoute": [
            {
                "kind": "HTTPRoute",
                "metadata": meta("web-route"),
                "spec": {"rules": [{"backendRefs": [{"name": "web"}]}]},
            }
        ],
        "PersistentVolumeClaim": [
            {
                "kind": "PersistentVolumeClaim",
                "metadata": meta("web-data"),
                "spec": {"volumeName": "pv-1", "storageClassName": "standard"},
                "status": {"phase": "Bound"},
            }
        ],
        "PersistentVolume": [
            {
                "kind": "PersistentVolume",
                "metadata": meta("pv-1", None),
                "spec": {
                    "claimRef": {"namespace": "shop", "name": "web-data"},
                    "storageClassName": "standard",
                },
                "status": {"phase": "Bound"},
            }
        ],
        "StorageClass": [{"kind": "StorageClass", "metadata": meta("standard", None), "provisioner": "x"}],
        "ConfigMap": [
            {
                "kind": "ConfigMap",
                "metadata": meta("web-config"),
                "data": {"app.properties": f"log=info\npassword={CONFIGMAP_SECRET}\n", "mode": "fast"},
            }
        ],
        "Secret": [
            {
                "kind": "Secret",
                "metadata": meta("db"),
                "type": "Opaque",
                "data": {
                    "password": base64.b64encode(SECRET_VALUE.encode()).decode(),
                    "url": base64.b64encode(b"postgres://app@db/shop").decode(),
                },
                "stringData": {"extra": SECRET_VALUE},
            }
        ],
        "HorizontalPodAutoscaler": [
            {
                "kind": "HorizontalPodAutoscaler",
                "metadata": meta("web"),
                "spec": {
                    "scaleTargetRef": {"kind": "Deployment", "name": "web"},
                    "minReplicas": 1,
                    "maxReplicas": 5,
                },
            }
        ],
        "PodDisruptionBudget": [
            {
                "kind": "PodDisruptionBudget",
                "metadata": meta("web"),
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
            }
        ],
        "Node": [
            {
                "kind": "Node",
                "metadata": meta("node-1", None),
                "status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "allocatable": {"nvidia.com/gpu": "2"},
                },
            }
        ],
    }


def snapshot(pods: int = 2) -> Snapshot:
    return Snapshot(objects=objects(pods), observed_at=1_764_583_200.0)


def server_for(snap: Snapshot) -> Any:
    return create_server(FixedSource(snap), SnapshotLogs(snap.logs), redactor=Redactor())


def text_of(result: Any) -> str:
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


def payload(result: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text_of(result))
    return data


async def call(arguments: dict[str, Any], tool: str, snap: Snapshot | None = None) -> dict[str, Any]:
    async with Client(server_for(snap or snapshot())) as client:
        result = await client.call_tool(tool, arguments)
    data = payload(result)
    data["_error"] = result.is_error
    return data


async def test_get_resource_by_short_kind_at_each_level() -> None:
    async with Client(server_for(snapshot())) as client:
        summary = payload(
            await client.call_tool("get_resource", {"kind": "deploy", "name": "web", "level": "summary"})
        )
        compact = payload(await client.call_tool("get_resource", {"kind": "Deployment", "name": "web"}))
        detail = payload(
            await client.call_tool(
                "get_resource", {"kind": "deployments", "name": "web", "namespace": "shop", "level": "detail"}
            )
        )
        crashing = payload(await client.call_tool("get_resource", {"kind": "po", "name": "web-7d9c-a0"}))
        node = payload(
            await client.call_tool("get_resource", {"kind": "no", "name": "node-1", "level": "summary"})
        )
    assert summary["object"] == {
        "kind": "Deployment",
        "namespace": "shop",
        "name": "web",
        "desired": 2,
        "ready": 1,
        "updated": 2,
        "images": ["nginx:1.27"],
    }
    assert compact["object"]["spec"]["template"]["spec"]["containers"][0]["env"] == [
        "DB_PASSWORD",
        "DB_URL<-Secret/db[url]",
    ]
    assert "uid" not in json.dumps(detail["object"].get("metadata", {}))
    assert (
        detail["object"]["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]
        == "web-data"
    )
    assert (
        crashing["object"]["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
        == "CrashLoopBackOff"
    )
    assert crashing["problems"] and all(
        {"id", "severity", "root_cause"} <= set(p) for p in crashing["problems"]
    )
    assert node["object"]["gpu_allocatable"] == {"nvidia.com/gpu": "2"}


async def test_get_resource_of_a_secret_shows_key_names_only() -> None:
    for level in ("summary", "compact", "detail"):
        data = await call({"kind": "secret", "name": "db", "level": level}, "get_resource")
        assert data["object"]["keys"] == ["extra", "password", "url"]
        assert "REDACTED" not in json.dumps(data)


async def test_a_missing_object_is_one_line_naming_similar_names() -> None:
    data = await call({"kind": "deploy", "name": "webb", "namespace": "shop"}, "get_resource")
    assert data["_error"] is True
    assert data["error"].startswith("get_resource: Deployment/shop/webb: not found (namespace shop has: web")
    assert "webshop" in data["error"] and "\n" not in data["error"]
    empty = await call({"kind": "sts", "name": "db", "namespace": "shop"}, "get_resource")
    assert (
        empty["error"] == "get_resource: StatefulSet/shop/db: not found (namespace shop has no StatefulSet)"
    )


@pytest.mark.parametrize(
    ("tool", "arguments", "named"),
    [
        ("get_resource", {"kind": "widget", "name": "x"}, "kind"),
        ("get_resource", {"kind": "Pod", "name": "x", "level": "full"}, "level"),
        ("list_resources", {"kind": "Pod", "label_selector": "app in (web"}, "label_selector"),
        ("list_resources", {"kind": "Pod", "label_selector": "app=we b"}, "label_selector"),
        ("list_resources", {"kind": "Pod", "field_selector": "spec.hostname=x"}, "field_selector"),
        ("list_resources", {"kind": "Pod", "field_selector": "status.phase"}, "field_selector"),
        ("search", {"query": "colour:red"}, "query"),
        ("search", {"query": "kind:widget"}, "query"),
        ("search", {"query": "label:a=b=c"}, "query"),
        ("neighborhood", {"kind": "Pod", "name": "x", "hops": 3}, "hops"),
        ("neighborhood", {"kind": "Pod", "name": "x", "max_nodes": 101}, "max_nodes"),
    ],
)
async def test_bad_arguments_are_json_rpc_errors_naming_them(
    tool: str, arguments: dict[str, Any], named: str
) -> None:
    async with Client(server_for(snapshot())) as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool(tool, arguments)
    assert err.value.code == -32602
    assert f"'{named}'" in err.value.message
    assert err.value.message.startswith(f"{tool}: ")


async def test_list_resources_with_label_and_field_selectors() -> None:
    async with Client(server_for(snapshot(pods=4))) as client:
        by_label = payload(
            await client.call_tool("list_resources", {"kind": "pods", "label_selector": "app=web"})
        )
        none = payload(
            await client.call_tool("list_resources", {"kind": "Pod", "label_selector": "app notin (web)"})
        )
        by_field = payload(
            await client.call_tool(
                "list_resources",
                {"kind": "Pod", "field_selector": "spec.nodeName=node-1,metadata.name!=web-7d9c-a0"},
            )
        )
        named = payload(
            await client.call_tool(
                "list_resources", {"kind": "Pod", "field_selector": "metadata.name==web-7d9c-a0"}
            )
        )
        other_ns = payload(await client.call_tool("list_resources", {"kind": "Pod", "namespace": "ops"}))
        nodes = payload(await client.call_tool("list_resources", {"kind": "no", "level": "compact"}))
    assert by_label["kind"] == "Pod" and by_label["total"] == 4
    assert [p["name"] for p in by_label["items"]] == [
        "web-7d9c-a0",
        "web-7d9c-b001",
        "web-7d9c-b002",
        "web-7d9c-b003",
    ]
    assert none["total"] == 0 and none["items"] == []
    assert [p["name"] for p in by_field["items"]] == ["web-7d9c-b001", "web-7d9c-b002", "web-7d9c-b003"]
    assert [p["reasons"] for p in named["items"]] == [["CrashLoopBackOff", "Error"]]
    assert other_ns["total"] == 0
    assert nodes["items"][0]["status"]["allocatable"] == {"nvidia.com/gpu": "2"}


def test_field_selector_parses_like_the_api_server() -> None:
    reqs = parse_field_selector("status.phase!=Running, spec.nodeName==n1,metadata.namespace=shop")
    assert [(r.field, r.equal, r.value) for r in reqs] == [
        ("status.phase", False, "Running"),
        ("spec.nodeName", True, "n1"),
        ("metadata.namespace", True, "shop"),
    ]
    assert parse_field_selector("") == ()


async def test_list_pages_follow_cursors_with_nothing_lost_or_repeated() -> None:
    snap = snapshot(pods=60)
    async with Client(server_for(snap)) as client:
        first = payload(await client.call_tool("list_resources", {"kind": "Pod", "budget": 500}))
        assert (
            first["tokens"] <= 500 and "next_cursor" in first and len(first["items"]) < first["total"] == 60
        )
        seen = [p["name"] for p in first["items"]]
        cursor = first["next_cursor"]
        for _ in range(60):
            page = payload(
                await client.call_tool("list_resources", {"kind": "Pod", "budget": 500, "cursor": cursor})
            )
            assert page["tokens"] <= 500
            seen += [p["name"] for p in page["items"]]
            cursor = page.get("next_cursor")
            if cursor is None:
                break
        with pytest.raises(MCPError) as err:
            await client.call_tool("list_resources", {"kind": "Service", "cursor": first["next_cursor"]})
    assert err.value.code == -32602
    assert len(seen) == len(set(seen)) == 60
    assert seen == sorted(seen)


async def test_search_terms_are_anded() -> None:
    async with Client(server_for(snapshot(pods=3))) as client:

        async def names(query: str, **extra: Any) -> list[str]:
            data = payload(await client.call_tool("search", {"query": query, **extra}))
            return [f"{r['kind']}/{r['name']}" for r in data["results"]]

        assert await names("kind:po status:CrashLoopBackOff") == ["Pod/web-7d9c-a0"]
        assert await names("status:oomkilled") == []
        assert await names("image:redis") == ["Deployment/webshop"]
        assert await names("image:nginx kind:deploy") == ["Deployment/web"]
        assert await names("node:node-1 kind:Pod") == [
            "Pod/web-7d9c-a0",
            "Pod/web-7d9c-b001",
            "Pod/web-7d9c-b002",
        ]
        assert await names("label:app=web ns:shop kind:rs") == ["ReplicaSet/web-7d9c"]
        assert await names("SHOP") == ["Deployment/webshop", "Ingress/shop", "Namespace/shop"]
        assert await names("web b002") == ["Pod/web-7d9c-b002"]
        assert await names("status:bound") == ["PersistentVolume/pv-1", "PersistentVolumeClaim/web-data"]
        assert await names("db kind:secret") == ["Secret/db"]
        assert await names(SECRET_VALUE) == []
        assert await names("web", limit=2, namespace="shop") == ["ConfigMap/web-config", "Deployment/web"]
        rows = payload(await client.call_tool("search", {"query": "kind:Pod status:crashloopbackoff"}))[
            "results"
        ]
    assert rows == [
        {
            "kind": "Pod",
            "namespace": "shop",
            "name": "web-7d9c-a0",
            "health": "phase=Running, ready=0/1, restarts=5, reasons=[CrashLoopBackOff Error], node=node-1, "
            "images=[nginx:1.27]",
        }
    ]


def test_parse_query_splits_terms() -> None:
    q = parse_query("kind:deploy ns:shop label:app=web image:NGINX node:gpu-1 status:Pending Web")
    assert q.kinds == {"Deployment"} and q.namespaces == {"shop"} and q.images == ("nginx",)
    assert q.nodes == ("gpu-1",) and q.statuses == ("pending",) and q.words == ("web",)
    assert [r.key for r in q.labels] == ["app"]


def edges_of(graph: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(e["from"], e["to"], e["relation"]) for e in graph["edges"]}


async def test_neighborhood_of_a_pod_one_and_two_hops() -> None:
    async with Client(server_for(snapshot())) as client:
        one = payload(await client.call_tool("neighborhood", {"kind": "po", "name": "web-7d9c-a0"}))
        two = payload(
            await client.call_tool("neighborhood", {"kind": "Pod", "name": "web-7d9c-a0", "hops": 2})
        )
    pod_key = "Pod/shop/web-7d9c-a0"
    assert one["object"] == pod_key and one["nodes"][0]["name"] == "web-7d9c-a0"
    assert edges_of(one) == {
        (pod_key, "ReplicaSet/shop/web-7d9c", "owned_by"),
        ("Service/shop/web", pod_key, "selects"),
        ("PodDisruptionBudget/shop/web", pod_key, "protects"),
        (pod_key, "Node/node-1", "runs_on"),
        (pod_key, "PersistentVolumeClaim/shop/web-data", "mounts"),
        (pod_key, "Secret/shop/db", "uses"),
        (pod_key, "ConfigMap/shop/web-config", "uses"),
        (pod_key, "Secret/shop/web-tls", "uses"),
    }
    rows = {f"{n['kind']}/{n['name']}": n for n in one["nodes"]}
    assert rows["Secret/db"]["exists"] is True and rows["Secret/web-tls"]["exists"] is False
    assert rows["ConfigMap/web-config"] == {
        "kind": "ConfigMap",
        "namespace": "shop",
        "name": "web-config",
        "exists": True,
    }
    assert "health" in rows["Service/web"]
    reached = {f"{n['kind']}/{n['name']}" for n in two["nodes"]}
    assert {
        "Deployment/web",
        "Ingress/shop",
        "HTTPRoute/web-route",
        "PersistentVolume/pv-1",
        "StorageClass/standard",
        "Pod/web-7d9c-b001",
    } <= reached
    assert ("HorizontalPodAutoscaler/shop/web", "Deployment/shop/web", "scales") not in edges_of(
        two
    )  # three hops
    assert ("Ingress/shop/shop", "Service/shop/web", "routes_to") in edges_of(two)


async def test_neighborhood_of_a_deployment_and_truncation() -> None:
    async with Client(server_for(snapshot(pods=30))) as client:
        deploy = payload(await client.call_tool("neighborhood", {"kind": "deploy", "name": "web"}))
        small = payload(
            await client.call_tool("neighborhood", {"kind": "svc", "name": "web", "max_nodes": 5})
        )
        missing = payload(
            await client.call_tool("neighborhood", {"kind": "svc", "name": "nope", "namespace": "shop"})
        )
    assert {
        ("ReplicaSet/shop/web-7d9c", "Deployment/shop/web", "owned_by"),
        ("HorizontalPodAutoscaler/shop/web", "Deployment/shop/web", "scales"),
        ("Service/shop/web", "Deployment/shop/web", "selects"),
        ("PodDisruptionBudget/shop/web", "Deployment/shop/web", "protects"),
        ("Deployment/shop/web", "PersistentVolumeClaim/shop/web-data", "mounts"),
    } <= edges_of(deploy)
    assert (
        len(small["nodes"]) == 5 and small["nodes_left_out"] == 33 - 5
    )  # 30 pods, Deployment, Ingress, route, Service
    assert all(e["from"] != e["to"] for e in small["edges"])
    assert missing["error"].startswith("neighborhood: Service/shop/nope: not found")


def big_snapshot(pods: int = 10_000, deployments: int = 100) -> Snapshot:
    """``pods`` pods in one namespace under ``deployments`` Deployments (one ReplicaSet and one Service each)."""
    objs: dict[str, list[dict[str, Any]]] = {"Deployment": [], "ReplicaSet": [], "Service": [], "Pod": []}
    per = pods // deployments
    for d in range(deployments):
        app = f"app-{d:03d}"
        objs["Deployment"].append(
            {"kind": "Deployment", "metadata": meta(app, "big"), "spec": {"replicas": per}}
        )
        objs["ReplicaSet"].append(
            {
                "kind": "ReplicaSet",
                "metadata": meta(f"{app}-rs", "big", ownerReferences=owner("Deployment", app)),
            }
        )
        objs["Service"].append(
            {
                "kind": "Service",
                "metadata": meta(app, "big"),
                "spec": {"selector": {"app": app, "tier": "web"}},
            }
        )
        for i in range(per):
            objs["Pod"].append(
                {
                    "kind": "Pod",
                    "metadata": meta(
                        f"{app}-rs-{i:04d}",
                        "big",
                        labels={"app": app, "tier": "web"},
                        ownerReferences=owner("ReplicaSet", f"{app}-rs"),
                    ),
                    "spec": {"nodeName": f"node-{i % 50}", "containers": [{"name": "c", "image": "x"}]},
                    "status": {"phase": "Running"},
                }
            )
    return Snapshot(objects=objs)


def test_neighborhood_at_10k_pods_is_exact() -> None:
    snap = big_snapshot()
    assert len(snap.of("Pod")) == 10_000
    graph = neighborhood_of(snap, ObjectRef("Pod", "big", "app-042-rs-0007"), hops=2, max_nodes=100)
    assert edges_of(graph) >= {
        ("Pod/big/app-042-rs-0007", "ReplicaSet/big/app-042-rs", "owned_by"),
        ("Service/big/app-042", "Pod/big/app-042-rs-0007", "selects"),
        ("ReplicaSet/big/app-042-rs", "Deployment/big/app-042", "owned_by"),
    }
    services = {n["name"] for n in graph["nodes"] if n["kind"] == "Service"}
    assert services == {"app-042"}
    pods = [n["name"] for n in graph["nodes"] if n["kind"] == "Pod"]
    assert len(pods) == len(set(pods)) == 96  # 100 less the ReplicaSet, Service, Node and Deployment
    assert all(p.startswith("app-042-rs-") for p in pods)  # the ReplicaSet's pods come before the node's
    assert len(graph["nodes"]) == 100 and graph["nodes_left_out"] > 0
    service = neighborhood_of(snap, ObjectRef("Service", "big", "app-007"), hops=1, max_nodes=100)
    assert len(service["nodes"]) == 100
    assert {n["name"] for n in service["nodes"][1:]} == {f"app-007-rs-{i:04d}" for i in range(99)}
    assert service["nodes_left_out"] == 1
    assert all(e["relation"] == "selects" for e in service["edges"])


async def every_answer(snap: Snapshot) -> list[tuple[str, dict[str, Any], str, int]]:
    """(tool, arguments, answer text, tokens) of every object tool over every object, at every level."""
    calls: list[tuple[str, dict[str, Any]]] = []
    for kind, objs in objects().items():
        for obj in objs:
            name = obj["metadata"]["name"]
            ns = {"namespace": obj["metadata"]["namespace"]} if "namespace" in obj["metadata"] else {}
            for level in ("summary", "compact", "detail"):
                calls.append(("get_resource", {"kind": kind, "name": name, "level": level, **ns}))
                calls.append(("list_resources", {"kind": kind, "level": level}))
            calls.append(("neighborhood", {"kind": kind, "name": name, "hops": 2, **ns}))
            calls.append(("search", {"query": name}))
    calls += [
        ("search", {"query": q}) for q in ("kind:Secret", "kind:ConfigMap", "password", "label:app=web")
    ]
    out = []
    async with Client(server_for(snap)) as client:
        for tool, arguments in calls:
            for budget in (None, 120):
                args = arguments if budget is None else {**arguments, "budget": budget}
                result = await client.call_tool(tool, args)
                data = payload(result)
                out.append((tool, args, text_of(result), int(data["tokens"])))
    return out


async def test_planted_secrets_never_appear_and_answers_stay_within_budget() -> None:
    answers = await every_answer(snapshot())
    assert len(answers) > 200
    for tool, arguments, text, tokens in answers:
        for secret in PLANTED:
            assert secret not in text, (tool, arguments, secret)
        limit = arguments.get("budget")
        if limit is not None:
            assert tokens <= limit, (tool, arguments, tokens)
        default = {"get_resource": 2000, "list_resources": 1500, "search": 1500, "neighborhood": 1500}[tool]
        assert tokens <= default


def test_a_static_pods_owner_is_its_node() -> None:
    static = {
        "kind": "Pod",
        "metadata": meta("etcd-node-1", "kube-system", ownerReferences=[{"kind": "Node", "name": "node-1"}]),
        "spec": {"nodeName": "node-1"},
    }
    snap = Snapshot(objects={"Pod": [static], "Node": objects()["Node"]})
    graph = neighborhood_of(snap, ObjectRef("Pod", "kube-system", "etcd-node-1"))
    assert edges_of(graph) == {
        ("Pod/kube-system/etcd-node-1", "Node/node-1", "owned_by"),
        ("Pod/kube-system/etcd-node-1", "Node/node-1", "runs_on"),
    }
    assert [n["kind"] for n in graph["nodes"]] == ["Pod", "Node"] and "exists" not in graph["nodes"][1]
    from_node = neighborhood_of(snap, ObjectRef("Node", "", "node-1"))
    assert ("Pod/kube-system/etcd-node-1", "Node/node-1", "owned_by") in edges_of(from_node)


async def test_a_level_over_the_budget_steps_down_and_says_so() -> None:
    data = await call(
        {"kind": "deploy", "name": "web", "namespace": "shop", "level": "detail", "budget": 150},
        "get_resource",
    )
    assert data["tokens"] <= 150
    assert data["level"].startswith("summary (detail is over the budget of 150 tokens)")
    assert data["object"]["desired"] == 2 and "more_problems" in data
    rows = await call({"kind": "deploy", "level": "detail", "budget": 120}, "list_resources")
    assert rows["tokens"] <= 120 and rows["items"][0]["level"] in ("summary", "compact")
