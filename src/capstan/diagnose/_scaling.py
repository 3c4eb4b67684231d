"""The scaling analyzer: HorizontalPodAutoscalers that cannot scale and PodDisruptionBudgets that block every eviction.

HPA (autoscaling/v2): a ``scaleTargetRef`` that does not exist; a Resource metric with a ``Utilization`` target
while a container of the target's pod template has no request for that resource (the controller cannot compute a
utilization: k8sgpt's and HolmesGPT's "HPA without requests"); else ``ScalingActive``/``AbleToScale`` False with the
controller's message. PDB: a budget whose selector matches no pod, and a budget that allows no disruption while
all its pods are healthy (``minAvailable`` equal to the replicas, or ``maxUnavailable: 0``), which blocks every
drain. A budget short of healthy pods is left to the analyzers of those pods.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import preceding_changes, quote, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source
from capstan.diagnose._snapshot import KubeObject, Snapshot

NAME: Final = "scaling"
SCALABLE: Final = ("Deployment", "StatefulSet", "ReplicaSet")


def analyze_scaling(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    for hpa in snapshot.of("HorizontalPodAutoscaler"):
        ref = ref_of("HorizontalPodAutoscaler", hpa)
        with about(ref):
            out.extend(_hpa(snapshot, hpa, ref))
    for pdb in snapshot.of("PodDisruptionBudget"):
        ref = ref_of("PodDisruptionBudget", pdb)
        with about(ref):
            out.extend(_pdb(snapshot, pdb, ref))
    return out


def _hpa(snapshot: Snapshot, hpa: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    spec = hpa.get("spec") or {}
    target = spec.get("scaleTargetRef") or {}
    kind, name = str(target.get("kind") or ""), str(target.get("name") or "")
    target_ref = ObjectRef(kind, ref.namespace, name)
    where = "spec.scaleTargetRef"
    if kind in SCALABLE and snapshot.readable(kind).readable:
        workload = snapshot.get(kind, ref.namespace, name)
        if workload is None:
            yield _finding(
                snapshot,
                ref,
                f"missing-target/{kind}/{name}",
                [target_ref],
                Category.CONFIGURATION,
                f"HorizontalPodAutoscaler {ref.namespace}/{ref.name} scales {kind} {name}, which does not exist.",
                [Evidence("scale target", Source.OBJECT_FIELD, where, f"{kind}/{name}")],
                f"kubectl get {kind.lower()} -n {ref.namespace}",
            )
            return
        missing = _missing_requests(spec, workload)
        if missing:
            resource, container = missing
            yield _finding(
                snapshot,
                ref,
                f"no-request/{resource}",
                [target_ref],
                Category.SCALING,
                f"HorizontalPodAutoscaler {ref.namespace}/{ref.name} cannot compute {resource} utilization: container "
                f"{container} of {kind} {name} has no resources.requests.{resource}.",
                [
                    Evidence(
                        "utilization target", Source.OBJECT_FIELD, "spec.metrics", f"Resource {resource}"
                    ),
                    Evidence(
                        "no request",
                        Source.OBJECT_FIELD,
                        f"{kind} {name} spec.template.spec.containers[{container}].resources.requests",
                        f"no {resource}",
                    ),
                ],
                f"kubectl set resources -n {ref.namespace} {kind.lower()}/{name} --requests={resource}=…",
            )
            return
    for cond in (hpa.get("status") or {}).get("conditions") or ():
        if (
            isinstance(cond, Mapping)
            and cond.get("type") in ("ScalingActive", "AbleToScale")
            and cond.get("status") == "False"
        ):
            reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
            yield _finding(
                snapshot,
                ref,
                f"{cond.get('type')}/{reason}",
                [target_ref] if name else [],
                Category.SCALING,
                f"HorizontalPodAutoscaler {ref.namespace}/{ref.name} cannot scale ({reason}): {quote(message, 160)}",
                [
                    Evidence(
                        "condition",
                        Source.OBJECT_FIELD,
                        f"status.conditions[{cond.get('type')}]",
                        quote(message),
                    )
                ],
                f"kubectl describe hpa -n {ref.namespace} {ref.name}",
                confidence=0.8,
            )
            return


def _missing_requests(spec: Mapping[str, Any], workload: KubeObject) -> tuple[str, str] | None:
    wanted = []
    for metric in spec.get("metrics") or ():
        if isinstance(metric, Mapping) and metric.get("type") == "Resource":
            resource = metric.get("resource") or {}
            if (resource.get("target") or {}).get("type") == "Utilization":
                wanted.append(str(resource.get("name") or ""))
    pod_spec = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    for resource in wanted:
        for c in pod_spec.get("containers") or ():
            if isinstance(c, Mapping) and resource not in ((c.get("resources") or {}).get("requests") or {}):
                return resource, str(c.get("name") or "")
    return None


def _pdb(snapshot: Snapshot, pdb: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
    if "expectedPods" not in status:  # the disruption controller has not looked at it yet
        return
    expected = int(status.get("expectedPods") or 0)
    allowed = int(status.get("disruptionsAllowed") or 0)
    healthy, desired = int(status.get("currentHealthy") or 0), int(status.get("desiredHealthy") or 0)
    selector = (spec.get("selector") or {}).get("matchLabels") or {}
    selector_text = ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "(expression)"
    counts = f"expectedPods={expected} currentHealthy={healthy} desiredHealthy={desired} disruptionsAllowed={allowed}"
    evidence = [Evidence("budget status", Source.OBJECT_FIELD, "status", counts)]
    if expected == 0:
        yield _finding(
            snapshot,
            ref,
            "selects-no-pod",
            [],
            Category.CONFIGURATION,
            f"PodDisruptionBudget {ref.namespace}/{ref.name} selects no pod (selector {selector_text}): it protects "
            "nothing.",
            evidence,
            f"kubectl get pods -n {ref.namespace} -l {selector_text}",
            severity=Severity.INFO,
        )
    elif allowed == 0 and healthy >= desired:
        bound = (
            f"minAvailable {spec['minAvailable']}"
            if "minAvailable" in spec
            else f"maxUnavailable {spec.get('maxUnavailable')}"
        )
        yield _finding(
            snapshot,
            ref,
            "blocks-eviction",
            [],
            Category.SCALING,
            f"PodDisruptionBudget {ref.namespace}/{ref.name} allows no disruption although all {healthy} of its pods are "
            f"healthy ({bound}): every drain and voluntary eviction of its pods is blocked.",
            evidence,
            f"kubectl get pdb -n {ref.namespace} {ref.name} -o yaml",
        )


def _finding(
    snapshot: Snapshot,
    ref: ObjectRef,
    cause: str,
    related: list[ObjectRef],
    category: Category,
    sentence: str,
    evidence: list[Evidence],
    next_check: str,
    *,
    severity: Severity = Severity.WARNING,
    confidence: float = 0.9,
) -> Finding:
    return Finding.create(
        NAME,
        cause,
        subject=ref,
        related=related,
        severity=severity,
        category=category,
        root_cause=sentence,
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref, *related]),
        confidence=confidence,
        next_check=next_check,
    )
