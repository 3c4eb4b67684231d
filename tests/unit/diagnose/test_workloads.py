"""The workloads analyzer: FailedCreate with the controller's message classified, and the owning Deployment
attached as a symptom."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.diagnose import Category, ObjectRef, Snapshot, Symptom, diagnose
from capstan.diagnose._workloads import analyze_workloads, classify_failed_create

from .kit import event

QUOTA = (
    'pods "web-7d9f8-x2" is forbidden: exceeded quota: compute, requested: limits.memory=2Gi, '
    "used: limits.memory=8Gi, limited: limits.memory=8Gi"
)


def replicaset(condition_message: str | None = None) -> dict[str, Any]:
    rs: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": "web-7d9f8",
            "namespace": "shop",
            "uid": "uid-rs",
            "ownerReferences": [{"kind": "Deployment", "name": "web", "controller": True}],
        },
        "spec": {"replicas": 3},
        "status": {"replicas": 0},
    }
    if condition_message is not None:
        rs["status"]["conditions"] = [
            {
                "type": "ReplicaFailure",
                "status": "True",
                "reason": "FailedCreate",
                "message": condition_message,
            }
        ]
    return rs


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": 3},
        "status": {
            "availableReplicas": 0,
            "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}],
        },
    }


def test_quota_failure_from_the_replicaset_condition_with_the_deployment_as_symptom() -> None:
    snap = Snapshot(objects={"ReplicaSet": [replicaset(QUOTA)], "Deployment": [deployment()]})
    d = diagnose(snap)
    (f,) = d.findings
    assert f.category is Category.SCALING and f.subject == ObjectRef("ReplicaSet", "shop", "web-7d9f8")
    assert "ResourceQuota is used up" in f.root_cause and "limits.memory=8Gi" in f.root_cause
    assert f.symptoms == (
        Symptom(ObjectRef("Deployment", "shop", "web"), "rollout stalled (ProgressDeadlineExceeded)"),
    )


@pytest.mark.parametrize(
    ("message", "category"),
    [
        (
            'pods "web-0" is forbidden: violates PodSecurity "restricted:latest": privileged (container "app" must '
            "not set securityContext.privileged=true)",
            Category.SECURITY,
        ),
        (
            'Internal error occurred: failed calling webhook "validate.kyverno.svc": failed to call webhook: '
            "connection refused",
            Category.CONTROL_PLANE,
        ),
        (
            'pods "x" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi',
            Category.CONFIGURATION,
        ),
        (
            'pods "x" is forbidden: error looking up service account shop/runner: serviceaccount "runner" not found',
            Category.CONFIGURATION,
        ),
    ],
)
def test_failed_create_events_are_classified(message: str, category: Category) -> None:
    sts = {
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "shop", "uid": "uid-db"},
        "spec": {},
    }
    snap = Snapshot(objects={"StatefulSet": [sts]}, events=[event(sts, "FailedCreate", message, count=4)])
    (f,) = analyze_workloads(snap)
    assert f.category is category
    assert f.evidence[0].text.endswith("(×4)")
    assert classify_failed_create(message)[0] is category


def test_controllers_without_failures_say_nothing() -> None:
    assert (
        analyze_workloads(Snapshot(objects={"ReplicaSet": [replicaset()], "Deployment": [deployment()]}))
        == []
    )
