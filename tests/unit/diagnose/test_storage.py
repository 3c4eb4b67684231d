"""The storage analyzer: Pending claims (missing StorageClass, no default, ProvisioningFailed) and Lost claims,
with the pods that mount them as symptoms."""

from __future__ import annotations

from typing import Any

from capstan.diagnose import Category, ObjectRef, Readable, Snapshot, Symptom
from capstan.diagnose._storage import analyze_storage

from .kit import event, pod


def claim(
    name: str = "data", *, class_name: str | None = "fast-ssd", phase: str = "Pending"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    if class_name is not None:
        spec["storageClassName"] = class_name
    return {
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "shop", "uid": f"uid-pvc-{name}"},
        "spec": spec,
        "status": {"phase": phase},
    }


def storage_class(name: str, default: bool = False) -> dict[str, Any]:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {
        "kind": "StorageClass",
        "metadata": {"name": name, "annotations": annotations},
        "provisioner": "x",
    }


def mounting_pod() -> dict[str, Any]:
    return pod(
        "db-0",
        phase="Pending",
        node=None,
        statuses=[],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
    )


def test_missing_storage_class_with_the_waiting_pod_as_symptom() -> None:
    snap = Snapshot(
        objects={
            "PersistentVolumeClaim": [claim()],
            "StorageClass": [storage_class("standard", True)],
            "Pod": [mounting_pod()],
        }
    )
    (f,) = analyze_storage(snap)
    assert f.category is Category.STORAGE and f.cause == "missing-StorageClass"
    assert "StorageClass fast-ssd does not exist" in f.root_cause
    assert ObjectRef("StorageClass", "", "fast-ssd") in f.objects
    assert f.symptoms == (Symptom(ObjectRef("Pod", "shop", "db-0"), "waits for PersistentVolumeClaim data"),)


def test_no_default_storage_class() -> None:
    snap = Snapshot(
        objects={"PersistentVolumeClaim": [claim(class_name=None)], "StorageClass": [storage_class("a")]}
    )
    (f,) = analyze_storage(snap)
    assert "no default StorageClass" in f.root_cause


def test_provisioning_failed_event_is_quoted() -> None:
    c = claim()
    msg = 'failed to provision volume with StorageClass "fast-ssd": rpc error: code = ResourceExhausted desc = quota'
    snap = Snapshot(
        objects={"PersistentVolumeClaim": [c], "StorageClass": [storage_class("fast-ssd")]},
        events=[event(c, "ProvisioningFailed", msg)],
    )
    (f,) = analyze_storage(snap)
    assert f.cause == "ProvisioningFailed" and "ResourceExhausted" in f.root_cause


def test_lost_claim() -> None:
    c = claim(phase="Lost")
    c["spec"]["volumeName"] = "pv-123"
    (f,) = analyze_storage(Snapshot(objects={"PersistentVolumeClaim": [c]}))
    assert "pv-123 is gone (Lost)" in f.root_cause


def test_unreadable_storage_classes_and_bound_claims_say_nothing() -> None:
    bound = claim("ok", phase="Bound")
    pending = claim()
    snap = Snapshot(
        objects={"PersistentVolumeClaim": [bound, pending]},
        unreadable={"StorageClass": Readable("StorageClass", False, "forbidden")},
    )
    assert analyze_storage(snap) == []
