"""Small builders of Kubernetes JSON (pods, nodes, events) for the restart tests."""

from __future__ import annotations

from typing import Any


def status(
    name: str,
    count: int,
    *,
    reason: str | None = None,
    exit_code: int | None = None,
    state: dict[str, Any] | None = None,
    signal: int | None = None,
) -> dict[str, Any]:
    cs: dict[str, Any] = {"name": name, "restartCount": count, "state": state or {"running": {}}}
    if reason is not None or exit_code is not None:
        term: dict[str, Any] = {
            "reason": reason,
            "exitCode": exit_code,
            "startedAt": "2026-11-29T10:00:00Z",
            "finishedAt": "2026-11-29T10:05:00Z",
        }
        if signal is not None:
            term["signal"] = signal
        cs["lastState"] = {"terminated": term}
    return cs


def pod(
    name: str = "web-7d9f8-abcde",
    namespace: str = "default",
    uid: str = "uid-1",
    *,
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    sidecars: tuple[str, ...] = (),
    ephemeral: list[dict[str, Any]] | None = None,
    node: str = "node-a",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owner: tuple[str, str] | None = ("ReplicaSet", "web-7d9f8"),
    resources: dict[str, Any] | None = None,
    spec_extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    containers = containers if containers is not None else [status("app", 0)]
    init = init or []
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "labels": labels if labels is not None else {"app": "web", "pod-template-hash": "7d9f8"},
        "annotations": annotations or {},
    }
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True, "uid": "o-1"}]
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [{"name": c["name"], "resources": resources or {}} for c in containers],
        "initContainers": [
            {"name": c["name"], **({"restartPolicy": "Always"} if c["name"] in sidecars else {})}
            for c in init
        ],
        **(spec_extra or {}),
    }
    st: dict[str, Any] = {"containerStatuses": containers, "initContainerStatuses": init}
    if ephemeral:
        st["ephemeralContainerStatuses"] = ephemeral
    return {"metadata": meta, "spec": spec, "status": st}


def node(name: str = "node-a", *, ready: bool = True, memory_pressure: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"},
                {"type": "MemoryPressure", "status": "True" if memory_pressure else "False"},
                {"type": "DiskPressure", "status": "False"},
            ]
        },
    }


def event(
    uid: str,
    reason: str,
    message: str,
    *,
    type_: str = "Warning",
    count: int = 1,
    last: str = "2026-11-29T10:04:00Z",
    field_path: str | None = None,
    name: str = "web-7d9f8-abcde",
) -> dict[str, Any]:
    involved: dict[str, Any] = {"kind": "Pod", "name": name, "uid": uid}
    if field_path:
        involved["fieldPath"] = field_path
    return {
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": type_,
        "count": count,
        "lastTimestamp": last,
    }
