"""The storage analyzer: a PersistentVolumeClaim that stays Pending (its StorageClass does not exist, there is no
default StorageClass, or the provisioner's ``ProvisioningFailed`` message) or is Lost. The pods that mount the claim
are attached as symptoms."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import is_terminal, preceding_changes, quote, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source, Symptom
from capstan.diagnose._snapshot import KubeObject, Snapshot, event_message, meta_of
from capstan.kube import event_time

NAME: Final = "storage"
DEFAULT_CLASS: Final = "storageclass.kubernetes.io/is-default-class"
MAX_SYMPTOMS: Final = 5


def _claimants(snapshot: Snapshot, namespace: str, claim: str) -> list[Symptom]:
    out = []
    for pod in snapshot.in_namespace("Pod", namespace):
        if is_terminal(pod):
            continue
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            pvc = volume.get("persistentVolumeClaim") if isinstance(volume, Mapping) else None
            if isinstance(pvc, Mapping) and pvc.get("claimName") == claim:
                out.append(Symptom(ref_of("Pod", pod), f"waits for PersistentVolumeClaim {claim}"))
    return sorted(out, key=lambda s: s.object)[:MAX_SYMPTOMS]


def analyze_storage(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    for claim in snapshot.of("PersistentVolumeClaim"):
        ref = ref_of("PersistentVolumeClaim", claim)
        with about(ref):
            out.extend(_claim(snapshot, claim, ref))
    return out


def _claim(snapshot: Snapshot, claim: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    phase = str((claim.get("status") or {}).get("phase") or "Pending")
    if phase not in ("Pending", "Lost"):
        return
    spec = claim.get("spec") or {}
    class_name = spec.get("storageClassName")
    evidence = [Evidence("phase", Source.OBJECT_FIELD, "status.phase", phase)]
    related: list[ObjectRef] = []
    namespace, name, uid = meta_of(claim)
    failed = [
        e
        for e in snapshot.events_about("PersistentVolumeClaim", namespace, name, uid)
        if e.get("reason") in ("ProvisioningFailed", "FailedBinding")
    ]
    classes_readable = snapshot.readable("StorageClass").readable and "StorageClass" in snapshot.objects
    if phase == "Lost":
        problem = f"its PersistentVolume {spec.get('volumeName') or '(unknown)'} is gone (Lost)"
        cause = "Lost"
    elif class_name and classes_readable and snapshot.get("StorageClass", "", str(class_name)) is None:
        problem = f"its StorageClass {class_name} does not exist"
        evidence.append(
            Evidence("storage class", Source.OBJECT_FIELD, "spec.storageClassName", str(class_name))
        )
        related.append(ObjectRef("StorageClass", "", str(class_name)))
        cause = "missing-StorageClass"
    elif (
        class_name is None
        and classes_readable
        and not any(
            ((c.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS) == "true"
            for c in snapshot.of("StorageClass")
        )
    ):
        problem = "it names no StorageClass and the cluster has no default StorageClass"
        cause = "no-default-StorageClass"
    elif failed:
        problem = f"provisioning fails: {quote(event_message(failed[-1]), 200)}"
        cause = f"{failed[-1].get('reason')}"
    else:
        return  # Pending without a known fault: WaitForFirstConsumer, or a provisioner still working
    for e in failed[-2:]:
        evidence.append(
            Evidence(
                "provisioner",
                Source.EVENT,
                f"Event {e.get('reason')}",
                quote(event_message(e)),
                event_time(e),
            )
        )
    yield Finding.create(
        NAME,
        cause,
        subject=ref,
        related=related,
        severity=Severity.CRITICAL,
        category=Category.STORAGE,
        root_cause=f"PersistentVolumeClaim {namespace}/{name} stays {phase}: {problem}.",
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref, *related]),
        symptoms=_claimants(snapshot, namespace, name),
        confidence=0.9,
        next_check=f"kubectl describe pvc -n {namespace} {name}; kubectl get storageclass",
    )
