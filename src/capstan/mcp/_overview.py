"""The first two calls an agent makes: ``overview`` (what the cluster holds and what is unhealthy) and ``problems``
(the analyzers' ranked findings, filtered and paged).

Both read only the :class:`~capstan.mcp._state.State`: the overview counts objects, lists workloads with fewer
ready replicas than desired, groups Warning Events (:func:`~capstan.mcp._events.group_events`) and sums GPUs by
model; ``problems`` serves :class:`capstan.diagnose.Finding` JSON in the diagnosis' rank order (severity, symptoms
explained, confidence, id).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import Field

from capstan.diagnose import Finding, Snapshot
from capstan.mcp._events import group_events
from capstan.mcp._gpu import gpu_summary
from capstan.mcp._shape import Budget
from capstan.mcp._tool import MAX_TEXT, Call, ListArgs, ToolArgs, ToolSpec

WARNING_GROUPS: Final = 10
UNHEALTHY_LISTED: Final = 15
_WORKLOADS: Final = ("Deployment", "StatefulSet", "DaemonSet")
_SEVERITIES: Final = ("critical", "warning", "info")


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _in(namespace: str | None, obj: Mapping[str, Any]) -> bool:
    return namespace is None or _meta(obj)[0] == namespace


def _replicas(kind: str, obj: Mapping[str, Any]) -> tuple[int, int]:
    """(desired, ready) of a workload."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    if kind == "DaemonSet":
        return int(status.get("desiredNumberScheduled") or 0), int(status.get("numberReady") or 0)
    desired = spec.get("replicas")
    return (1 if desired is None else int(desired)), int(status.get("readyReplicas") or 0)


def _node_ready(node: Mapping[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


def unhealthy_workloads(snapshot: Snapshot, namespace: str | None) -> list[dict[str, Any]]:
    """Deployments, StatefulSets and DaemonSets with fewer ready replicas than desired, by namespace and name."""
    out = []
    for kind in _WORKLOADS:
        for obj in snapshot.of(kind):
            if not _in(namespace, obj):
                continue
            desired, ready = _replicas(kind, obj)
            if ready < desired:
                ns, name = _meta(obj)
                out.append({"kind": kind, "namespace": ns, "name": name, "ready": ready, "desired": desired})
    return sorted(out, key=lambda w: (w["namespace"], w["kind"], w["name"]))


def counts(snapshot: Snapshot, namespace: str | None) -> dict[str, Any]:
    pods = [p for p in snapshot.of("Pod") if _in(namespace, p)]
    phases = Counter(str((p.get("status") or {}).get("phase") or "Unknown") for p in pods)
    nodes = snapshot.of("Node")
    out: dict[str, Any] = {
        "nodes": {"total": len(nodes), "ready": sum(_node_ready(n) for n in nodes)},
        "pods": {"total": len(pods), **dict(sorted(phases.items()))},
    }
    for kind in (*_WORKLOADS, "Job", "Service", "PersistentVolumeClaim"):
        n = sum(1 for o in snapshot.of(kind) if _in(namespace, o))
        if n:
            out[kind] = n
    if namespace is None:
        out["namespaces"] = len(snapshot.of("Namespace")) or len({_meta(p)[0] for p in pods})
    return out


class OverviewArgs(ToolArgs):
    namespace: str | None = Field(
        None, max_length=MAX_TEXT, description="One namespace (default: the cluster)."
    )


async def _overview(call: Call, args: OverviewArgs) -> dict[str, Any]:
    snapshot = call.state.snapshot
    ns = args.namespace
    hosts = nodes_hosting(snapshot, ns)
    findings = [f for f in call.state.diagnosis.findings if _finding_in(f, ns, hosts)]
    unhealthy = unhealthy_workloads(snapshot, ns)
    warnings = group_events(
        e
        for e in snapshot.events
        if str(e.get("type")) == "Warning"
        and (ns is None or str((e.get("metadata") or {}).get("namespace") or "") == ns)
    )
    out: dict[str, Any] = {
        "observed_at": round(snapshot.observed_at, 3),
        "scope": ns or "cluster",
        "counts": counts(snapshot, ns),
        "problems": dict(Counter(str(f.severity) for f in findings)),
        "top_problems": [
            {"id": f.id, "severity": str(f.severity), "subject": f.subject.key, "root_cause": f.root_cause}
            for f in findings[:5]
        ],
        "unhealthy_workloads": unhealthy[:UNHEALTHY_LISTED],
        "warning_groups": [g.to_json() for g in warnings[:WARNING_GROUPS]],
        "gpu": gpu_summary(snapshot, ns),
    }
    if len(unhealthy) > UNHEALTHY_LISTED:
        out["more_unhealthy_workloads"] = len(unhealthy) - UNHEALTHY_LISTED
    if len(warnings) > WARNING_GROUPS:
        out["more_warning_groups"] = len(warnings) - WARNING_GROUPS
    return out


OVERVIEW = ToolSpec(
    name="overview",
    title="Cluster overview",
    description=(
        "Start here. Counts of nodes, pods and workloads; the top problems the analyzers found; workloads with "
        "fewer ready replicas than desired; Warning Event groups; GPUs by model (allocatable, allocated, idle) "
        "and pending GPU pods. For the whole cluster or one namespace."
    ),
    args=OverviewArgs,
    run=_overview,
    budget=Budget(1500, 4000),
    reads=("Node", "Pod", "Deployment", "StatefulSet", "DaemonSet", "Event"),
)


def nodes_hosting(snapshot: Snapshot, namespace: str | None) -> frozenset[str]:
    """The nodes that run (or were assigned) a pod of ``namespace``."""
    if namespace is None:
        return frozenset()
    return frozenset(
        str((p.get("spec") or {}).get("nodeName") or "") for p in snapshot.in_namespace("Pod", namespace)
    ) - {""}


def _finding_in(finding: Finding, namespace: str | None, nodes: frozenset[str] = frozenset()) -> bool:
    """Whether a finding concerns ``namespace``: one of its objects or symptoms is in it, or it is about a Node that
    runs one of its pods (``nodes``: a node's pressure or lost GPUs is the namespace's problem too)."""
    if namespace is None:
        return True
    return (
        any(o.namespace == namespace for o in finding.objects)
        or any(s.object.namespace == namespace for s in finding.symptoms)
        or any(o.kind == "Node" and o.name in nodes for o in finding.objects)
    )


class ProblemsArgs(ListArgs):
    namespace: str | None = Field(
        None, max_length=MAX_TEXT, description="Only problems about objects in this namespace."
    )
    severity: Literal["critical", "warning", "info"] | None = Field(
        None, description="Only this severity and worse (critical < warning < info)."
    )
    category: (
        Literal[
            "startup",
            "runtime",
            "scheduling",
            "configuration",
            "networking",
            "storage",
            "scaling",
            "security",
            "node",
            "gpu",
            "control-plane",
        ]
        | None
    ) = Field(None, description="Only this category.")


async def _problems(call: Call, args: ProblemsArgs) -> dict[str, Any]:
    diagnosis = call.state.diagnosis
    hosts = nodes_hosting(call.state.snapshot, args.namespace)
    worst = _SEVERITIES.index(args.severity) if args.severity else len(_SEVERITIES) - 1
    chosen = [
        f
        for f in diagnosis.findings
        if _finding_in(f, args.namespace, hosts)
        and _SEVERITIES.index(str(f.severity)) <= worst
        and (args.category is None or str(f.category) == args.category)
    ]
    page = call.page(chosen, args, render=Finding.to_json)
    out: dict[str, Any] = {
        "observed_at": round(call.state.snapshot.observed_at, 3),
        **page.to_json("findings"),
    }
    if diagnosis.blind:
        out["blind"] = sorted({f"{b.kind}: {b.reason}" for b in diagnosis.blind})
    if diagnosis.failures:
        out["analyzer_failures"] = [f.to_json() for f in diagnosis.failures]
    return out


PROBLEMS = ToolSpec(
    name="problems",
    title="Ranked problems",
    description=(
        "The root causes Capstan's analyzers found, ranked (severity, symptoms explained, confidence): each with "
        "its evidence and where it was seen, the symptoms it explains, the recorded changes before it and what to "
        "check next. Filter by namespace, severity and category; page with cursor."
    ),
    args=ProblemsArgs,
    run=_problems,
    budget=Budget(1500, 8000),
)
