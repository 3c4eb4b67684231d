"""The workloads analyzer: FailedCreate with the controller's message classified, and the owning Deployment
attached as a symptom."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.diagnose import Category, ObjectRef, Snapshot, Symptom, diagnose
from capstan.diagnose._workloads import analyze_workloads, classify_failed_create

from .kit import event, pod, running, terminated, waiting

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
    healthy = deployment()
    healthy["status"] = {
        "availableReplicas": 3,
        "conditions": [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}],
    }
    assert analyze_workloads(Snapshot(objects={"ReplicaSet": [replicaset()], "Deployment": [healthy]})) == []


def _stuck(new_pods: list[dict[str, Any]]) -> Snapshot:
    d = deployment()
    d["spec"]["progressDeadlineSeconds"] = 120
    d["status"]["updatedReplicas"] = 1
    d["status"]["conditions"][0]["message"] = 'ReplicaSet "web-6b7c9" has timed out progressing.'
    return Snapshot(objects={"Deployment": [d], "Pod": new_pods})


def test_a_stuck_rollout_whose_new_pods_do_not_fail_visibly_is_named() -> None:
    unready = pod("web-6b7c9-aaaaa", owner=("ReplicaSet", "web-6b7c9"), statuses=[running(ready=False)])
    unready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    (f,) = analyze_workloads(_stuck([unready]))
    assert f.cause == "rollout-stuck" and f.subject == ObjectRef("Deployment", "shop", "web")
    assert (
        "ReplicaSet web-6b7c9" in f.root_cause
        and "120 s" in f.root_cause
        and "web-6b7c9-aaaaa" in f.root_cause
    )


def test_a_stuck_rollout_whose_new_pods_crash_is_left_to_the_pods() -> None:
    crashing = pod(
        "web-6b7c9-aaaaa",
        owner=("ReplicaSet", "web-6b7c9"),
        statuses=[waiting("app", "CrashLoopBackOff", restarts=3, last=terminated("Error", 1))],
    )
    assert analyze_workloads(_stuck([crashing])) == []
    (root,) = diagnose(_stuck([crashing])).findings
    assert root.subject == ObjectRef("Pod", "shop", "web-6b7c9-aaaaa")
