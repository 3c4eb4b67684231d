"""The restart report: everything an engineer would collect by hand, built purely from a snapshot.

The shell gathers a :class:`RestartSnapshot` (the pod, the owner objects it could read, the node or the error
reading it, the namespace's events, the previous container log or the error reading it, and the recorded changes
around the time) and :func:`build_report` turns it into a :class:`RestartReport`. Nothing here calls the cluster,
so missing pieces (a deleted node, no previous log) only make the report say "unavailable"; they never stop it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from capstan.kube import event_time, parse_timestamp
from capstan.redact import Redactor
from capstan.restarts._detect import ContainerRestart, Pod
from capstan.restarts._meaning import explain, signal_of

_NODE_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


@dataclass(frozen=True, order=True)
class WorkloadRef:
    """The controller that owns a pod, resolved upward (ReplicaSet → Deployment, Job → CronJob)."""

    kind: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


@dataclass(frozen=True)
class RecordedChange:
    """A change the history recorder saw (given to the builder; Secrets appear by name only)."""

    at: float
    kind: str
    namespace: str
    name: str
    change: str
    summary: str = ""


def summarize_patch(kind: str, patch: list[dict[str, Any]] | None, change: str) -> str:
    """A short description of what changed (paths only for Secrets: a value is never shown)."""
    if change != "modified" or not patch:
        return change
    paths = []
    for op in patch:
        path = str(op.get("path", ""))
        if kind == "Secret" and path.startswith("/data"):
            path = "/data"
        paths.append(f"{op.get('op')} {path}")
    unique = list(dict.fromkeys(paths))
    more = f" (+{len(unique) - 5} more)" if len(unique) > 5 else ""
    return "; ".join(unique[:5]) + more


@dataclass(frozen=True)
class Termination:
    reason: str | None
    exit_code: int | None
    signal: int | None
    started_at: str | None
    finished_at: str | None
    message: str | None


@dataclass(frozen=True)
class EventLine:
    type: str
    reason: str
    message: str
    count: int
    last_seen: float | None


@dataclass(frozen=True)
class NodeInfo:
    name: str
    found: bool
    ready: str
    unschedulable: bool
    pressure: tuple[str, ...]
    conditions: tuple[tuple[str, str, str], ...]
    error: str | None = None


@dataclass(frozen=True)
class RestartSnapshot:
    """Everything the builder needs about one restart, gathered by the shell."""

    restart: ContainerRestart
    pod: Pod
    observed_at: float
    owners: Mapping[tuple[str, str, str], Mapping[str, Any]] = field(default_factory=dict)
    node: Mapping[str, Any] | None = None
    node_error: str | None = None
    events: Sequence[Mapping[str, Any]] = ()
    previous_log: str | None = None
    log_error: str | None = None
    changes: Sequence[RecordedChange] = ()


@dataclass(frozen=True)
class ReportSettings:
    """How much of the log goes in a report and what is hidden: ``redactor`` is applied to every piece of evidence
    that holds free text (the termination message, Event and probe messages, the previous log, read errors)."""

    cluster: str = "cluster"
    log_lines: int = 50
    max_line_chars: int = 400
    redactor: Redactor = field(default_factory=Redactor)
    change_window_seconds: float = 3600.0
    max_events: int = 20


@dataclass(frozen=True)
class RestartReport:
    cluster: str
    restart: ContainerRestart
    owner: WorkloadRef
    node: NodeInfo
    termination: Termination | None
    signal: str | None
    meaning: str
    current_state: str
    requests: Mapping[str, str]
    limits: Mapping[str, str]
    probe_failures: tuple[str, ...]
    events: tuple[EventLine, ...]
    log_tail: str | None
    log_unavailable: str | None
    full_log: str | None
    changes: tuple[RecordedChange, ...]
    observed_at: float
    channel: str | None = None


# ---- owner resolution ------------------------------------------------------------------------------------


def _controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    for ref in refs:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ref
    return refs[0] if refs and isinstance(refs[0], Mapping) else None


def resolve_owner(pod: Pod, owners: Mapping[tuple[str, str, str], Mapping[str, Any]]) -> WorkloadRef:
    """Walk controller references upward through the owner objects the shell could read (at most 5 levels).

    When a ReplicaSet object is not available, a Deployment name is inferred from the pod's
    ``pod-template-hash`` label (the ReplicaSet is named ``<deployment>-<hash>``)."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    current = WorkloadRef("Pod", namespace, str(meta.get("name") or ""))
    obj: Mapping[str, Any] | None = pod
    for _ in range(5):  # bounded walk up the ownership chain
        ref = _controller_ref(obj) if obj is not None else None
        if ref is None:
            break
        current = WorkloadRef(str(ref.get("kind") or "?"), namespace, str(ref.get("name") or "?"))
        obj = owners.get((current.kind, namespace, current.name))
        if obj is None:
            break
    if current.kind == "ReplicaSet" and obj is None:
        template_hash = str((meta.get("labels") or {}).get("pod-template-hash") or "")
        if template_hash and current.name.endswith("-" + template_hash):
            current = WorkloadRef("Deployment", namespace, current.name[: -len(template_hash) - 1])
    return current


# ---- containers, events, node ----------------------------------------------------------------------------


def container_spec(pod: Pod, name: str) -> Mapping[str, Any]:
    spec = pod.get("spec") or {}
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            if isinstance(c, Mapping) and c.get("name") == name:
                return c
    return {}


def container_status(pod: Pod, name: str) -> Mapping[str, Any]:
    status = pod.get("status") or {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or []:
            if isinstance(cs, Mapping) and cs.get("name") == name:
                return cs
    return {}


def last_termination(pod: Pod, name: str) -> Termination | None:
    """The container's last termination: ``lastState.terminated``, else a current ``state.terminated``."""
    cs = container_status(pod, name)
    term = (cs.get("lastState") or {}).get("terminated") or (cs.get("state") or {}).get("terminated")
    if not isinstance(term, Mapping):
        return None

    def as_int(value: Any) -> int | None:
        try:
            return None if value is None else int(value)
        except (TypeError, ValueError):
            return None

    return Termination(
        reason=term.get("reason"),
        exit_code=as_int(term.get("exitCode")),
        signal=as_int(term.get("signal")),
        started_at=term.get("startedAt"),
        finished_at=term.get("finishedAt"),
        message=term.get("message"),
    )


def _current_state(pod: Pod, name: str) -> str:
    state = container_status(pod, name).get("state") or {}
    for kind in ("waiting", "running", "terminated"):
        if kind in state:
            detail = state[kind] or {}
            reason = detail.get("reason") if isinstance(detail, Mapping) else None
            return kind.capitalize() + (f": {reason}" if reason else "")
    return "unknown"


def _event_subject(event: Mapping[str, Any]) -> Mapping[str, Any]:
    subject = event.get("involvedObject") or event.get("regarding") or {}
    return subject if isinstance(subject, Mapping) else {}


def pod_events(events: Sequence[Mapping[str, Any]], uid: str, limit: int) -> tuple[EventLine, ...]:
    """Events about this pod (matched by UID, never by name), duplicates merged with their counts summed,
    the most recent ``limit`` kept, oldest first."""
    merged: dict[tuple[str, str, str], EventLine] = {}
    for event in events:
        if not uid or _event_subject(event).get("uid") != uid:
            continue
        message = str(event.get("message") or event.get("note") or "").strip()
        key = (str(event.get("type") or "Normal"), str(event.get("reason") or ""), message)
        series = event.get("series") or {}
        count = int(
            (series.get("count") if isinstance(series, Mapping) else None)
            or event.get("count")
            or event.get("deprecatedCount")
            or 1
        )
        at = event_time(event)
        if key in merged:
            old = merged[key]
            last = max((t for t in (old.last_seen, at) if t is not None), default=None)
            merged[key] = EventLine(*key, count=old.count + count, last_seen=last)
        else:
            merged[key] = EventLine(*key, count=count, last_seen=at)
    ordered = sorted(merged.values(), key=lambda e: (e.last_seen or 0.0, e.reason, e.message))
    return tuple(ordered[-limit:]) if limit > 0 else ()


def is_probe_failure(event: Mapping[str, Any], container: str) -> bool:
    """Whether an Event reports a failed probe of ``container`` (an ``Unhealthy`` probe Event, or the kubelet's
    ``Killing`` for a failed probe); an Event with no ``fieldPath`` counts for every container of its pod."""
    subject = _event_subject(event)
    path = str(subject.get("fieldPath") or "")
    if path and not path.endswith("{" + container + "}"):
        return False
    message = str(event.get("message") or event.get("note") or "").lower()
    return event.get("reason") in ("Unhealthy", "Killing") and "probe" in message


def probe_failures(events: Sequence[Mapping[str, Any]], uid: str, container: str) -> tuple[str, ...]:
    """Probe failure messages for this container (``Unhealthy`` events, and kubelet kills for failed probes)."""
    out: list[str] = []
    for event in events:
        subject = _event_subject(event)
        if subject.get("uid") != uid:
            continue
        if not is_probe_failure(event, container):
            continue
        message = str(event.get("message") or event.get("note") or "").strip()
        count = event.get("count") or 1
        line = f"{message} (×{count})" if int(count) > 1 else message
        if line not in out:
            out.append(line)
    return tuple(out)


def node_info(name: str, node: Mapping[str, Any] | None, error: str | None) -> NodeInfo:
    if node is None:
        why = error or "not found (deleted?)"
        return NodeInfo(name or "(not scheduled)", False, "unknown", False, (), (), error=why)
    conditions = []
    ready = "Unknown"
    pressure = []
    for cond in (node.get("status") or {}).get("conditions") or []:
        ctype, status = str(cond.get("type")), str(cond.get("status"))
        if ctype not in _NODE_CONDITIONS:
            continue
        conditions.append((ctype, status, str(cond.get("reason") or "")))
        if ctype == "Ready":
            ready = "Ready" if status == "True" else "NotReady"
        elif ctype.endswith("Pressure") and status == "True":
            pressure.append(ctype)
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    return NodeInfo(name, True, ready, unschedulable, tuple(pressure), tuple(conditions))


# ---- logs ------------------------------------------------------------------------------------------------


def log_tail(text: str, lines: int, max_line_chars: int) -> str:
    """The last ``lines`` lines, each cut to ``max_line_chars`` with a note of how much was cut."""
    kept = text.splitlines()[-lines:] if lines > 0 else []
    out = []
    for line in kept:
        if len(line) > max_line_chars:
            line = line[:max_line_chars] + f"… [{len(line) - max_line_chars} chars cut]"
        out.append(line)
    return "\n".join(out)


# ---- the builder -----------------------------------------------------------------------------------------


def _references(pod: Pod) -> set[tuple[str, str]]:
    """ConfigMaps and Secrets the pod mounts or reads (kind, name)."""
    spec = pod.get("spec") or {}
    refs: set[tuple[str, str]] = set()
    for vol in spec.get("volumes") or []:
        if (cm := vol.get("configMap")) and cm.get("name"):
            refs.add(("ConfigMap", cm["name"]))
        if (sec := vol.get("secret")) and sec.get("secretName"):
            refs.add(("Secret", sec["secretName"]))
        for src in (vol.get("projected") or {}).get("sources") or []:
            if (cm := src.get("configMap")) and cm.get("name"):
                refs.add(("ConfigMap", cm["name"]))
            if (sec := src.get("secret")) and sec.get("name"):
                refs.add(("Secret", sec["name"]))
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or []:
            for env_from in c.get("envFrom") or []:
                if (cm := env_from.get("configMapRef")) and cm.get("name"):
                    refs.add(("ConfigMap", cm["name"]))
                if (sec := env_from.get("secretRef")) and sec.get("name"):
                    refs.add(("Secret", sec["name"]))
            for env in c.get("env") or []:
                source = env.get("valueFrom") or {}
                if (cm := source.get("configMapKeyRef")) and cm.get("name"):
                    refs.add(("ConfigMap", cm["name"]))
                if (sec := source.get("secretKeyRef")) and sec.get("name"):
                    refs.add(("Secret", sec["name"]))
    return refs


def related_changes(
    snapshot: RestartSnapshot, owner: WorkloadRef, until: float, window: float
) -> tuple[RecordedChange, ...]:
    """Recorded changes in ``[until - window, until]`` to the pod's workload (and the objects between it and the
    pod), its ConfigMaps and Secrets (names only) and its node, oldest first."""
    pod = snapshot.pod
    namespace = owner.namespace
    workloads = {(owner.kind, owner.name)}
    ref = _controller_ref(pod)
    if ref is not None:
        workloads.add((str(ref.get("kind")), str(ref.get("name"))))
    refs = _references(pod)
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    picked = []
    for change in snapshot.changes:
        if not until - window <= change.at <= until:
            continue
        in_ns = change.namespace == namespace
        if (
            (in_ns and (change.kind, change.name) in workloads)
            or (in_ns and (change.kind, change.name) in refs)
            or (change.kind == "Node" and change.name == node_name and node_name)
        ):
            if change.kind == "Secret":  # names only, never values
                change = RecordedChange(
                    change.at, change.kind, change.namespace, change.name, change.change, ""
                )
            picked.append(change)
    return tuple(sorted(picked, key=lambda c: (c.at, c.kind, c.name)))


def build_report(
    snapshot: RestartSnapshot, settings: ReportSettings, *, channel_annotation: str | None = None
) -> RestartReport:
    """Turn a snapshot into a report; never fails for missing node, log or events."""
    restart = snapshot.restart
    pod = snapshot.pod
    uid = restart.pod_uid
    r = settings.redactor
    owner = resolve_owner(pod, snapshot.owners)
    node_name = str((pod.get("spec") or {}).get("nodeName") or "")
    node = node_info(
        node_name, snapshot.node, None if snapshot.node_error is None else r.text(snapshot.node_error)
    )
    termination = last_termination(pod, restart.container)
    if termination is not None and termination.message:
        termination = dataclasses.replace(termination, message=r.text(termination.message))
    events = [r.json(e) for e in snapshot.events]
    spec = container_spec(pod, restart.container)
    resources = spec.get("resources") or {}
    requests = {str(k): str(v) for k, v in sorted((resources.get("requests") or {}).items())}
    limits = {str(k): str(v) for k, v in sorted((resources.get("limits") or {}).items())}
    probes = probe_failures(events, uid, restart.container)
    liveness = any("liveness" in p.lower() for p in probes)
    meaning = explain(
        termination.reason if termination else None,
        termination.exit_code if termination else None,
        termination.signal if termination else None,
        node_memory_pressure="MemoryPressure" in node.pressure,
        liveness_failed=liveness,
        memory_limit=limits.get("memory"),
    )
    if snapshot.previous_log is None:
        tail, full = None, None
        unavailable = r.text(snapshot.log_error or "no previous container log")
    else:
        full = r.text(snapshot.previous_log)
        tail = log_tail(full, settings.log_lines, settings.max_line_chars)
        unavailable = None
        if not tail.strip():
            tail, unavailable = None, "the previous container wrote no log"
    finished = parse_timestamp(termination.finished_at) if termination else None
    until = finished if finished is not None else snapshot.observed_at
    channel = None
    if channel_annotation:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        value = annotations.get(channel_annotation)
        channel = str(value) if value else None
    return RestartReport(
        cluster=settings.cluster,
        restart=restart,
        owner=owner,
        node=node,
        termination=termination,
        signal=signal_of(termination.exit_code, termination.signal) if termination else None,
        meaning=meaning,
        current_state=_current_state(pod, restart.container),
        requests=requests,
        limits=limits,
        probe_failures=probes,
        events=pod_events(events, uid, settings.max_events),
        log_tail=tail,
        log_unavailable=unavailable,
        full_log=full,
        changes=related_changes(snapshot, owner, until, settings.change_window_seconds),
        observed_at=snapshot.observed_at,
        channel=channel,
    )
