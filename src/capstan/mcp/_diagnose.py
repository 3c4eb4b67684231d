"""``diagnose``: everything an agent needs about one object in one answer.

The object's findings (those it is the subject of, an object of, or a symptom of: :meth:`Diagnosis.about`), the
object itself at the ``compact`` level, its pods when it is a workload (the failing ones first, at most
:data:`PODS_SHOWN`), for each failing container the previous and current log excerpts (error lines, repeats
collapsed), the Warning Events about it and its pods grouped, the recorded changes of it and its owners and pods,
and its neighbourhood (owners, Services, volumes, node) as summary rows. Parts are added in that order of value and
each is bounded, so the answer fits its budget with the findings whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from pydantic import Field

from capstan.diagnose import Snapshot
from capstan.kube import ApiError
from capstan.kube.resources import lookup_kind
from capstan.mcp._events import group_events
from capstan.mcp._logs import excerpt, pods_of
from capstan.mcp._minify import minify
from capstan.mcp._objects import find_object, neighborhood_of
from capstan.mcp._shape import Budget, tokens
from capstan.mcp._tool import MAX_TEXT, BadArgument, Call, ToolArgs, ToolSpec

PODS_SHOWN: Final = 3
CONTAINERS_LOGGED: Final = 3
LOG_TAIL: Final = 200
LOG_LINES: Final = 12
CHANGES_SHOWN: Final = 8
WARNING_GROUPS: Final = 8
NEIGHBOURS: Final = 12
_RESERVE: Final = 40
"""Tokens kept for what the server adds (the token count, a cut's notes)."""


def _meta(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or "")


def _failing_containers(pod: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(container, has a previous instance) of the containers that are not running ready, init containers
    first."""
    status = pod.get("status") or {}
    out = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            state = cs.get("state") or {}
            ended = "terminated" in state and (state["terminated"] or {}).get("exitCode") not in (0, None)
            if cs.get("ready") and not ended:
                continue
            if key == "initContainerStatuses" and "terminated" in state and not ended:
                continue
            out.append((str(cs.get("name") or ""), bool((cs.get("lastState") or {}).get("terminated"))))
    return out


def _pod_rank(pod: Mapping[str, Any]) -> tuple[int, str]:
    return (
        0 if _failing_containers(pod) or (pod.get("status") or {}).get("phase") == "Pending" else 1,
        _meta(pod)[1],
    )


async def _log_excerpts(call: Call, pods: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    wanted: list[tuple[str, str, str, bool]] = []
    for pod in pods:
        namespace, name, _ = _meta(pod)
        for container, has_previous in _failing_containers(pod):
            if has_previous:
                wanted.append((namespace, name, container, True))
            wanted.append((namespace, name, container, False))
    wanted = wanted[: CONTAINERS_LOGGED * 2]

    async def one(namespace: str, pod: str, container: str, previous: bool) -> dict[str, Any]:
        row: dict[str, Any] = {"pod": pod, "container": container, "previous": previous}
        try:
            text = await call.logs.read(namespace, pod, container, previous=previous, tail_lines=LOG_TAIL)
        except ApiError as err:
            row["unreadable"] = err.message[:200]
            return row
        cut = excerpt(
            call.state.redactor.text(text),
            grep=None,
            errors_only=True,
            head=LOG_LINES // 2,
            tail=LOG_LINES // 2,
        )
        row.update(cut)
        return row

    rows = await asyncio.gather(*(one(*w) for w in wanted))
    # a previous log that is not there (the container never restarted) says nothing: leave it out
    return [r for r in rows if not (r.get("previous") and "unreadable" in r)]


def _changes(snapshot: Snapshot, keys: Sequence[tuple[str, str, str]]) -> list[dict[str, Any]]:
    changes = snapshot.changes_about(keys)
    return [
        {"at": round(c.at, 3), "object": f"{c.kind}/{c.name}", "change": c.change, "summary": c.summary}
        for c in changes[-CHANGES_SHOWN:]
    ][::-1]


class DiagnoseArgs(ToolArgs):
    kind: str = Field(
        max_length=64, description="The object's kind: Pod, Deployment, StatefulSet, Node, Service…"
    )
    name: str = Field(max_length=MAX_TEXT, description="The object's name.")
    namespace: str | None = Field(
        None,
        max_length=MAX_TEXT,
        description="Its namespace (default: default; ignored for cluster-scoped kinds).",
    )
    logs: Literal["errors", "none"] = Field(
        "errors", description="Include log excerpts of failing containers."
    )


async def _diagnose(call: Call, args: DiagnoseArgs) -> dict[str, Any]:
    resource = lookup_kind(args.kind)
    if resource is None:
        raise BadArgument(
            "kind", f"unknown kind {args.kind!r} (e.g. Pod, Deployment, StatefulSet, Node, Service)"
        )
    snapshot = call.state.snapshot
    ref, obj = find_object(snapshot, "diagnose", resource, args.name, args.namespace, call.state.namespace)
    namespace = ref.namespace
    findings = [f.to_json() for f in call.state.diagnosis.about(ref)]
    pods = sorted(pods_of(snapshot, ref.kind, namespace, ref.name), key=_pod_rank)
    shown_pods = pods[:PODS_SHOWN]
    keys = [(ref.kind, namespace, ref.name)]
    keys += [("Pod", *_meta(p)[:2]) for p in pods]
    for o in (obj, *shown_pods):
        for owner in (o.get("metadata") or {}).get("ownerReferences") or []:
            keys.append((str(owner.get("kind")), namespace, str(owner.get("name"))))
    events = []
    for kind, ns, name in keys:
        events += [e for e in snapshot.events_about(kind, ns, name) if str(e.get("type")) == "Warning"]
    parts: list[tuple[str, Any]] = [("spec_status", minify(obj, "compact"))]
    if args.logs == "errors" and shown_pods:
        parts.append(("logs", await _log_excerpts(call, shown_pods)))
    groups = group_events(events)
    parts.append(("warning_events", [g.to_json() for g in groups[:WARNING_GROUPS]]))
    parts.append(("recent_changes", _changes(snapshot, keys)))
    if ref.kind != "Pod" and pods:
        parts.append(("pods", {"total": len(pods), "shown": [minify(p, "summary") for p in shown_pods]}))
    parts.append(("related", neighborhood_of(snapshot, ref, hops=1, max_nodes=NEIGHBOURS)))
    return assemble(
        ref.to_json(), findings, parts, budget=call.budget, more_groups=len(groups) - WARNING_GROUPS
    )


def assemble(
    subject: dict[str, Any],
    findings: list[dict[str, Any]],
    parts: Sequence[tuple[str, Any]],
    *,
    budget: int,
    more_groups: int = 0,
) -> dict[str, Any]:
    """The answer: the subject, as many findings as fit (at least the first: the server cuts its evidence if it
    alone is over), then each part in order of value while it fits; parts that did not fit are named in
    ``left_out`` (their own tool reads them: get_resource, logs, events, changes, neighborhood)."""
    room = budget - _RESERVE
    out: dict[str, Any] = {"object": subject, "findings": []}
    for i, finding in enumerate(findings):
        if i and tokens(out) + tokens(finding) > room:
            out["more_findings"] = len(findings) - i
            break
        out["findings"].append(finding)
    if not findings:
        out["note"] = "no analyzer found a problem with this object or the objects it depends on"
    left_out = []
    for name, value in parts:
        if value in ([], {}, None):
            continue
        if tokens(out) + tokens({name: value}) > room:
            left_out.append(name)
            continue
        out[name] = value
        if name == "warning_events" and more_groups > 0:
            out["more_warning_groups"] = more_groups
    if left_out:
        out["left_out"] = left_out
    return out


DIAGNOSE = ToolSpec(
    name="diagnose",
    title="Diagnose one object",
    description=(
        "One call about one object (Pod, Deployment, StatefulSet, DaemonSet, Job, Node, Service, PVC…): the root "
        "causes found for it with their evidence, its spec and status (compact), its pods, previous and current log "
        "excerpts of failing containers, its Warning Events grouped, the recorded changes before the failure, and "
        "related objects (owners, Services, volumes, node)."
    ),
    args=DiagnoseArgs,
    run=_diagnose,
    budget=Budget(2500, 8000),
    reads=("Pod", "Event"),
)
