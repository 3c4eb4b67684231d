"""Hand-written Kubernetes JSON for the diagnosis tests: pods, containers, nodes, Services, Events."""

from __future__ import annotations

from typing import Any

T0 = "2026-12-01T10:00:00Z"


def container(name: str = "app", image: str = "registry.example/app:1.0", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **extra}


def running(name: str = "app", *, ready: bool = True, restarts: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "ready": ready,
        "restartCount": restarts,
        "state": {"running": {"startedAt": T0}},
        **extra,
    }


def waiting(
    name: str, reason: str, message: str = "", *, restarts: int = 0, last: dict[str, Any] | None = None
) -> dict[str, Any]:
    cs: dict[str, Any] = {
        "name": name,
        "ready": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": reason, "message": message}},
    }
    if last is not None:
        cs["lastState"] = {"terminated": last}
    return cs


def terminated(
    reason: str, exit_code: int, *, signal: int | None = None, message: str = ""
) -> dict[str, Any]:
    term: dict[str, Any] = {"reason": reason, "exitCode": exit_code, "startedAt": T0, "finishedAt": T0}
    if signal is not None:
        term["signal"] = signal
    if message:
        term["message"] = message
    return term


def pod(
    name: str = "web-7d9f8-abcde",
    namespace: str = "shop",
    *,
    containers: list[dict[str, Any]] | None = None,
    statuses: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    init_statuses: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    node: str | None = "node-a",
    phase: str = "Running",
    owner: tuple[str, str] | None = ("ReplicaSet", "web-7d9f8"),
    **spec_extra: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "labels": labels if labels is not None else {"app": "web", "pod-template-hash": "7d9f8"},
    }
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    spec: dict[str, Any] = {"containers": containers or [container()], **spec_extra}
    if node:
        spec["nodeName"] = node
    if init:
        spec["initContainers"] = init
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": statuses if statuses is not None else [running()],
    }
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def event(
    obj: dict[str, Any],
    reason: str,
    message: str,
    *,
    type: str = "Warning",
    at: str = T0,
    count: int = 1,
    field_path: str | None = None,
) -> dict[str, Any]:
    meta = obj["metadata"]
    subject: dict[str, Any] = {
        "kind": obj.get("kind", "Pod"),
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "uid": meta.get("uid", ""),
    }
    if field_path:
        subject["fieldPath"] = field_path
    return {
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{reason}", "namespace": meta.get("namespace", "")},
        "involvedObject": subject,
        "type": type,
        "reason": reason,
        "message": message,
        "count": count,
        "lastTimestamp": at,
    }


def node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    gpus: int = 0,
    allocatable_gpus: int | None = None,
    resource: str = "nvidia.com/gpu",
    ready: str = "True",
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    capacity: dict[str, Any] = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    allocatable = dict(capacity)
    if gpus:
        capacity[resource] = str(gpus)
        allocatable[resource] = str(gpus if allocatable_gpus is None else allocatable_gpus)
    conds = [
        {"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "KubeletNotReady"}
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels or {}},
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conds + (conditions or []),
        },
    }


def service(
    name: str = "web",
    namespace: str = "shop",
    *,
    selector: dict[str, str] | None = None,
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-svc-{name}"},
        "spec": {
            "selector": selector if selector is not None else {"app": "web"},
            "ports": ports if ports is not None else [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }


def configmap(name: str, namespace: str = "shop", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }
