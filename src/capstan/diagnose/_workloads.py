"""The workloads analyzer: a controller that cannot create its pods (``FailedCreate``: a ReplicaSet's
``ReplicaFailure`` condition, or the Event a ReplicaSet, StatefulSet, DaemonSet or Job controller writes), with the
controller's message classified (ResourceQuota, LimitRange, PodSecurity, an admission webhook, a missing service
account). The Deployment that owns a failing ReplicaSet is attached as a symptom, not reported as a second root.
A Deployment past its progress deadline (``ProgressDeadlineExceeded``) is a stuck rollout only when nothing else
names why: its new ReplicaSet has no FailedCreate and its new pods fail visibly nowhere (those are the roots)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import labels_of, number, preceding_changes, quote, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source, Symptom
from capstan.diagnose._snapshot import KubeObject, Snapshot, event_message, meta_of
from capstan.kube import event_time

NAME: Final = "workloads"
CONTROLLERS: Final = ("ReplicaSet", "StatefulSet", "DaemonSet", "Job")


def classify_failed_create(message: str) -> tuple[Category, str]:
    """What a controller's ``FailedCreate`` message means."""
    low = message.lower()
    if "exceeded quota" in low or "resourcequota" in low:
        return Category.SCALING, "the namespace's ResourceQuota is used up"
    if "podsecurity" in low or "violates podsecurity" in low:
        return Category.SECURITY, "the pod template violates the namespace's PodSecurity level"
    if "admission webhook" in low and "denied the request" in low:
        return Category.SECURITY, "an admission webhook's policy denied the pod"
    if "admission webhook" in low or "webhook" in low:
        return Category.CONTROL_PLANE, "an admission webhook could not be reached for the pod"
    if "limitrange" in low or ("usage per" in low and ("maximum" in low or "minimum" in low)):
        return Category.CONFIGURATION, "the pod template breaks the namespace's LimitRange"
    if "serviceaccount" in low and "not found" in low:
        return Category.CONFIGURATION, "the pod template's service account does not exist"
    return Category.CONFIGURATION, "the API server refused to create the pods"


def failure_of(snapshot: Snapshot, kind: str, obj: KubeObject) -> tuple[str, Evidence] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if (
            isinstance(cond, Mapping)
            and cond.get("type") == "ReplicaFailure"
            and cond.get("status") == "True"
        ):
            message = str(cond.get("message") or "")
            where = "status.conditions[ReplicaFailure]"
            return message, Evidence("controller failure", Source.OBJECT_FIELD, where, quote(message))
    namespace, name, uid = meta_of(obj)
    events = [
        e for e in snapshot.events_about(kind, namespace, name, uid) if e.get("reason") == "FailedCreate"
    ]
    if events:
        last = events[-1]
        count = int(last.get("count") or 1)
        text = quote(event_message(last)) + (f" (×{count})" if count > 1 else "")
        return event_message(last), Evidence(
            "controller failure", Source.EVENT, "Event FailedCreate", text, event_time(last)
        )
    return None


def _owner(obj: KubeObject) -> ObjectRef | None:
    namespace = meta_of(obj)[0]
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return ObjectRef(str(ref.get("kind")), namespace, str(ref.get("name")))
    return None


def _stalled(snapshot: Snapshot, owner: ObjectRef) -> str | None:
    obj = snapshot.get(owner.kind, owner.namespace, owner.name)
    if obj is None:
        return None
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Progressing" and cond.get("status") == "False":
            return f"rollout stalled ({cond.get('reason')})"
    wanted = (obj.get("spec") or {}).get("replicas", 1)
    available = status.get("availableReplicas", 0)
    if wanted and available < wanted:
        return f"{available}/{wanted} replicas available"
    return None


def analyze_workloads(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    for kind in CONTROLLERS:
        for obj in snapshot.of(kind):
            ref = ref_of(kind, obj)
            with about(ref):
                out.extend(_controller(snapshot, kind, obj, ref))
    for deployment in snapshot.of("Deployment"):
        ref = ref_of("Deployment", deployment)
        with about(ref):
            out.extend(_stuck_rollout(snapshot, deployment, ref))
    return out


_TIMED_OUT: Final = re.compile(r'ReplicaSet "(?P<name>[^"]+)" has timed out progressing')
_STARTING: Final = ("ContainerCreating", "PodInitializing")


def _visibly_failing(pod: KubeObject) -> bool:
    """A pod another analyzer names a fault of: a waiting reason past creation, a failed termination, unscheduled."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return True
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or ():
            state = (cs or {}).get("state") or {}
            reason = str((state.get("waiting") or {}).get("reason") or "")
            if reason and reason not in _STARTING:
                return True
            if int((state.get("terminated") or {}).get("exitCode") or 0) != 0:
                return True
    return False


def _stuck_rollout(snapshot: Snapshot, deployment: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    """A rollout past its progress deadline with no fault another analyzer names: its new ReplicaSet's pods are
    not failing visibly (they would be the root, and the stall their symptom) and it has no FailedCreate."""
    status = deployment.get("status") or {}
    cond = next(
        (
            c
            for c in status.get("conditions") or ()
            if isinstance(c, Mapping)
            and c.get("type") == "Progressing"
            and c.get("status") == "False"
            and c.get("reason") == "ProgressDeadlineExceeded"
        ),
        None,
    )
    if cond is None:
        return
    message = str(cond.get("message") or "")
    match = _TIMED_OUT.search(message)
    new_rs = ObjectRef("ReplicaSet", ref.namespace, match["name"]) if match else None
    pods = [
        p for p in snapshot.in_namespace("Pod", ref.namespace) if new_rs is not None and _owner(p) == new_rs
    ]
    if any(_visibly_failing(p) for p in pods):
        return
    owned = [rs for rs in snapshot.in_namespace("ReplicaSet", ref.namespace) if _owner(rs) == ref]
    if any(failure_of(snapshot, "ReplicaSet", rs) is not None for rs in owned):
        return  # the ReplicaSet's FailedCreate is the root, this Deployment its symptom
    wanted = (deployment.get("spec") or {}).get("replicas", 1)
    updated, available = status.get("updatedReplicas", 0), status.get("availableReplicas", 0)
    deadline = (deployment.get("spec") or {}).get("progressDeadlineSeconds", 600)
    not_ready = sorted(meta_of(p)[1] for p in pods if not _ready(p))
    why = f"; new pods not ready: {', '.join(not_ready[:5])}" if not_ready else ""
    yield Finding.create(
        NAME,
        "rollout-stuck",
        subject=ref,
        related=[new_rs] if new_rs else (),
        severity=Severity.WARNING,
        category=Category.STARTUP,
        root_cause=(
            f"Deployment {ref.namespace}/{ref.name}'s rollout"
            + (f" of ReplicaSet {new_rs.name}" if new_rs else "")
            + f" passed its progress deadline ({deadline} s) with {updated}/{wanted} updated and {available}/{wanted}"
            f" available replicas{why}."
        ),
        evidence=[Evidence("rollout", Source.OBJECT_FIELD, "status.conditions[Progressing]", quote(message))],
        changes=preceding_changes(snapshot, [ref, *([new_rs] if new_rs else [])]),
        confidence=0.7,
        next_check=f"kubectl rollout status -n {ref.namespace} deployment/{ref.name}; kubectl describe pods -n {ref.namespace}",
    )


def _ready(pod: KubeObject) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _controller(snapshot: Snapshot, kind: str, obj: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    failure = failure_of(snapshot, kind, obj)
    if failure is None:
        return
    message, evidence = failure
    category, meaning = classify_failed_create(message)
    owner = _owner(obj)
    symptoms = []
    if owner is not None and (problem := _stalled(snapshot, owner)) is not None:
        symptoms.append(Symptom(owner, problem))
    cited = _cited_objects(snapshot, ref.namespace, message)
    if cited is not None:
        meaning = cited.meaning
    yield Finding.create(
        NAME,
        f"FailedCreate/{category}",
        subject=ref,
        related=[*(cited.objects if cited else ()), *([owner] if owner else [])],
        severity=Severity.CRITICAL,
        category=category,
        root_cause=f"{kind} {ref.namespace}/{ref.name} cannot create its pods: {meaning} — {quote(message, 200)}.",
        evidence=[evidence, *(cited.evidence if cited else ())],
        changes=preceding_changes(
            snapshot, [ref, *(cited.objects if cited else ()), *([owner] if owner else [])]
        ),
        symptoms=symptoms,
        confidence=0.9,
        next_check=f"kubectl describe {kind.lower()} -n {ref.namespace} {ref.name}; kubectl describe quota,limitrange -n {ref.namespace}",
    )


# ---- the objects a FailedCreate message names: the ResourceQuota, the LimitRange, the admission webhook ----------

_QUOTA: Final = re.compile(
    r"exceeded quota: (?P<quota>[^,\s]+), requested: (?P<requested>.+?), used: (?P<used>.+?), limited: (?P<hard>.+?)\s*$"
)
_LIMIT: Final = re.compile(
    r"(?P<bound>maximum|minimum) (?P<resource>[\w.-]+) usage per (?P<type>Container|Pod|PersistentVolumeClaim) is "
    r"(?P<value>\S+?),"
)
_DENIED: Final = re.compile(r'admission webhook "(?P<name>[^"]+)" denied the request:?\s*(?P<why>.*)')
_CALLING: Final = re.compile(r'failed calling webhook "(?P<name>[^"]+)":?\s*(?P<why>.*)')
WEBHOOK_KINDS: Final = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


@dataclass(frozen=True)
class Cited:
    """What a FailedCreate message names, looked up in the snapshot: the meaning to state, the objects, the
    evidence from their fields."""

    meaning: str
    objects: Sequence[ObjectRef]
    evidence: Sequence[Evidence]


def _pairs(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.strip().rstrip(".").split(",") if "=" in p)


def _cannot_read(snapshot: Snapshot, kind: str) -> str:
    note = snapshot.readable(kind)
    return "" if note.readable else f" ({kind}s cannot be read: {quote(note.reason or 'forbidden', 120)})"


def _cited_objects(snapshot: Snapshot, namespace: str, message: str) -> Cited | None:
    if (m := _QUOTA.search(message)) is not None:
        return _quota(snapshot, namespace, m)
    if (m := _LIMIT.search(message)) is not None:
        return _limit_range(snapshot, namespace, m)
    if (m := _DENIED.search(message) or _CALLING.search(message)) is not None:
        return _webhook(snapshot, m, denied=m.re is _DENIED)
    return None


def _quota(snapshot: Snapshot, namespace: str, m: re.Match[str]) -> Cited:
    name = m["quota"]
    requested, used, hard = _pairs(m["requested"]), _pairs(m["used"]), _pairs(m["hard"])
    resource = next((r for r in requested if r in hard), next(iter(requested), "?"))
    quota_ref = ObjectRef("ResourceQuota", namespace, name)
    values = f"used {used.get(resource, '?')} of hard {hard.get(resource, '?')}, a new pod requests {requested.get(resource, '?')}"
    evidence: list[Evidence] = []
    note = _cannot_read(snapshot, "ResourceQuota")
    if not note:
        quota = snapshot.get("ResourceQuota", namespace, name)
        if quota is None:
            note = " (that ResourceQuota is no longer in the namespace)"
        else:
            status = quota.get("status") or {}
            live_hard = (status.get("hard") or (quota.get("spec") or {}).get("hard") or {}).get(resource)
            live_used = (status.get("used") or {}).get(resource)
            evidence.append(
                Evidence(
                    "quota hard",
                    Source.OBJECT_FIELD,
                    f"{quota_ref.key} status.hard[{resource}]",
                    str(live_hard),
                )
            )
            evidence.append(
                Evidence(
                    "quota used",
                    Source.OBJECT_FIELD,
                    f"{quota_ref.key} status.used[{resource}]",
                    str(live_used),
                )
            )
            values = (
                f"used {live_used} of hard {live_hard}, a new pod requests {requested.get(resource, '?')}"
            )
    return Cited(
        f"ResourceQuota {namespace}/{name} is used up for {resource} ({values}){note}", [quota_ref], evidence
    )


def _limit_range(snapshot: Snapshot, namespace: str, m: re.Match[str]) -> Cited | None:
    bound, resource, kind, value = m["bound"], m["resource"], m["type"], m["value"]
    field = "max" if bound == "maximum" else "min"
    note = _cannot_read(snapshot, "LimitRange")
    if note:
        return Cited(f"the pod template breaks the namespace's LimitRange{note}", [], [])
    for lr in snapshot.in_namespace("LimitRange", namespace):
        for i, item in enumerate((lr.get("spec") or {}).get("limits") or ()):
            if not isinstance(item, Mapping) or item.get("type") != kind:
                continue
            got = (item.get(field) or {}).get(resource)
            if got is not None and number(got) == number(value):
                ref = ref_of("LimitRange", lr)
                where = f"{ref.key} spec.limits[{i}].{field}.{resource}"
                return Cited(
                    f"LimitRange {namespace}/{ref.name} sets the {bound} {resource} per {kind} to {got} "
                    f"(spec.limits[{i}].{field}) and the pod template is outside it",
                    [ref],
                    [Evidence("LimitRange bound", Source.OBJECT_FIELD, where, str(got))],
                )
    return None


def _webhook_config(snapshot: Snapshot, name: str) -> tuple[str, KubeObject, Mapping[str, Any]] | None:
    for kind in WEBHOOK_KINDS:
        for config in snapshot.of(kind):
            for hook in config.get("webhooks") or ():
                if isinstance(hook, Mapping) and hook.get("name") == name:
                    return kind, config, hook
    return None


def _webhook(snapshot: Snapshot, m: re.Match[str], *, denied: bool) -> Cited:
    name, why = m["name"], m["why"].strip()
    did = (
        f'admission webhook "{name}" denied the pod'
        if denied
        else f'admission webhook "{name}" could not be called'
    )
    found = _webhook_config(snapshot, name)
    if found is None:
        blind = "".join(_cannot_read(snapshot, k) for k in WEBHOOK_KINDS)
        return Cited(f"{did}{blind or ' (no webhook configuration in the snapshot declares it)'}", [], [])
    kind, config, hook = found
    ref = ObjectRef(kind, "", meta_of(config)[1])
    policy = str(hook.get("failurePolicy") or "Fail")
    service = (hook.get("clientConfig") or {}).get("service") or {}
    evidence = [
        Evidence("failure policy", Source.OBJECT_FIELD, f"{ref.key} webhooks[{name}].failurePolicy", policy)
    ]
    objects = [ref]
    backend = ""
    if isinstance(service, Mapping) and service.get("name"):
        svc_ref = ObjectRef("Service", str(service.get("namespace") or ""), str(service["name"]))
        objects.append(svc_ref)
        evidence.append(
            Evidence(
                "webhook service",
                Source.OBJECT_FIELD,
                f"{ref.key} webhooks[{name}].clientConfig.service",
                svc_ref.key,
            )
        )
        if not denied and snapshot.readable("Service").readable:
            svc = snapshot.get("Service", svc_ref.namespace, svc_ref.name)
            if svc is None:
                backend = f"; its Service {svc_ref.namespace}/{svc_ref.name} does not exist"
            elif snapshot.readable("Pod").readable and not backed(snapshot, svc):
                backend = f"; no running pod is behind its Service {svc_ref.namespace}/{svc_ref.name}"
    tail = f" (failurePolicy {policy}{backend})" if not denied else (f": {quote(why, 160)}" if why else "")
    return Cited(f"{did}, declared in {kind} {ref.name}{tail}", objects, evidence)


def backed(snapshot: Snapshot, service: KubeObject) -> bool:
    selector = (service.get("spec") or {}).get("selector") or {}
    if not selector:
        return True  # endpoints managed by hand: nothing to check
    namespace = meta_of(service)[0]
    return any(
        all(labels_of(p).get(k) == v for k, v in selector.items())
        and (p.get("status") or {}).get("phase") == "Running"
        for p in snapshot.in_namespace("Pod", namespace)
    )
