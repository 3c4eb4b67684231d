"""The workloads analyzer: FailedCreate with the controller's message classified, and the owning Deployment
attached as a symptom."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.diagnose import Category, ObjectRef, Readable, Snapshot, Source, Symptom, diagnose
from capstan.diagnose._quotas import analyze_quotas
from capstan.diagnose._webhooks import analyze_webhooks
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
    assert "ResourceQuota shop/compute is used up for limits.memory" in f.root_cause
    assert "used 8Gi of hard 8Gi, a new pod requests 2Gi" in f.root_cause
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


def quota(used: str = "8Gi", hard: str = "8Gi") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "compute", "namespace": "shop"},
        "spec": {"hard": {"limits.memory": hard}},
        "status": {"hard": {"limits.memory": hard}, "used": {"limits.memory": used}},
    }


def test_quota_failure_cites_the_live_resourcequota_and_its_status() -> None:
    snap = Snapshot(objects={"ReplicaSet": [replicaset(QUOTA)], "ResourceQuota": [quota()]})
    (f,) = analyze_workloads(snap)
    assert ObjectRef("ResourceQuota", "shop", "compute") in f.objects
    assert {(e.where, e.text) for e in f.evidence} >= {
        ("ResourceQuota/shop/compute status.hard[limits.memory]", "8Gi"),
        ("ResourceQuota/shop/compute status.used[limits.memory]", "8Gi"),
    }
    blind = Snapshot(
        objects={"ReplicaSet": [replicaset(QUOTA)]},
        unreadable={"ResourceQuota": Readable("ResourceQuota", False, "resourcequotas is forbidden")},
    )
    (f,) = analyze_workloads(blind)
    assert "ResourceQuotas cannot be read: resourcequotas is forbidden" in f.root_cause


def test_limitrange_failure_names_the_limitrange_and_its_bound() -> None:
    lr = {
        "kind": "LimitRange",
        "metadata": {"name": "per-container", "namespace": "shop"},
        "spec": {"limits": [{"type": "Container", "max": {"memory": "1Gi"}}]},
    }
    message = 'pods "web-1" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi'
    snap = Snapshot(objects={"ReplicaSet": [replicaset(message)], "LimitRange": [lr]})
    (f,) = analyze_workloads(snap)
    assert f.category is Category.CONFIGURATION
    assert "LimitRange shop/per-container sets the maximum memory per Container to 1Gi" in f.root_cause
    assert any(e.where == "LimitRange/shop/per-container spec.limits[0].max.memory" for e in f.evidence)


def webhook_config(failure_policy: str = "Fail") -> dict[str, Any]:
    return {
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "kyverno-resource-validating"},
        "webhooks": [
            {
                "name": "validate.kyverno.svc",
                "failurePolicy": failure_policy,
                "clientConfig": {"service": {"namespace": "kyverno", "name": "kyverno-svc"}},
            }
        ],
    }


def test_an_unreachable_webhook_is_named_with_its_configuration_and_missing_service() -> None:
    message = (
        'Internal error occurred: failed calling webhook "validate.kyverno.svc": failed to call webhook: Post '
        '"https://kyverno-svc.kyverno.svc:443/validate": dial tcp: connection refused'
    )
    snap = Snapshot(
        objects={"ReplicaSet": [replicaset(message)], "ValidatingWebhookConfiguration": [webhook_config()]}
    )
    (f,) = analyze_workloads(snap)
    assert f.category is Category.CONTROL_PLANE
    assert 'admission webhook "validate.kyverno.svc" could not be called' in f.root_cause
    assert "ValidatingWebhookConfiguration kyverno-resource-validating" in f.root_cause
    assert "failurePolicy Fail; its Service kyverno/kyverno-svc does not exist" in f.root_cause
    assert ObjectRef("ValidatingWebhookConfiguration", "", "kyverno-resource-validating") in f.objects
    assert any(e.source is Source.OBJECT_FIELD and e.text == "Fail" for e in f.evidence)


def test_a_denying_webhook_is_a_security_finding_quoting_its_reason() -> None:
    message = (
        'admission webhook "validate.kyverno.svc" denied the request: policy Deployment/shop/web for resource '
        "violation: require-labels: label team is required"
    )
    snap = Snapshot(
        objects={"ReplicaSet": [replicaset(message)], "ValidatingWebhookConfiguration": [webhook_config()]}
    )
    (f,) = analyze_workloads(snap)
    assert f.category is Category.SECURITY and f.cause == "FailedCreate/security"
    assert (
        "denied the pod, declared in ValidatingWebhookConfiguration kyverno-resource-validating"
        in f.root_cause
    )
    assert "label team is required" in f.root_cause
    unread = Snapshot(
        objects={"ReplicaSet": [replicaset(message)]},
        unreadable={
            "ValidatingWebhookConfiguration": Readable("ValidatingWebhookConfiguration", False, "forbidden")
        },
    )
    (f,) = analyze_workloads(unread)
    assert "ValidatingWebhookConfigurations cannot be read: forbidden" in f.root_cause


def test_a_used_up_quota_warns_on_its_own_and_folds_into_the_failedcreate_that_names_it() -> None:
    (f,) = analyze_quotas(Snapshot(objects={"ResourceQuota": [quota()]}))
    assert f.analyzer == "quotas" and f.cause == "used-up/limits.memory" and f.category is Category.SCALING
    assert "ResourceQuota shop/compute is used up (limits.memory 8Gi/8Gi" in f.root_cause
    assert analyze_quotas(Snapshot(objects={"ResourceQuota": [quota(used="6Gi")]})) == []
    snap = Snapshot(objects={"ReplicaSet": [replicaset(QUOTA)], "ResourceQuota": [quota()]})
    assert analyze_quotas(snap) == []
    (root,) = diagnose(snap).findings
    assert root.analyzer == "workloads"


def test_a_webhook_whose_service_is_gone_is_the_root_of_the_failedcreate_naming_it() -> None:
    message = 'Internal error occurred: failed calling webhook "validate.kyverno.svc": connection refused'
    config = webhook_config()
    (f,) = analyze_webhooks(Snapshot(objects={"ValidatingWebhookConfiguration": [config]}))
    assert (
        f.analyzer == "webhooks" and f.category is Category.CONTROL_PLANE and f.severity.value == "critical"
    )
    assert (
        "its Service kyverno/kyverno-svc does not exist" in f.root_cause
        and "failurePolicy Fail" in f.root_cause
    )
    svc = {
        "kind": "Service",
        "metadata": {"name": "kyverno-svc", "namespace": "kyverno"},
        "spec": {"selector": {"app": "kyverno"}},
    }
    (f,) = analyze_webhooks(Snapshot(objects={"ValidatingWebhookConfiguration": [config], "Service": [svc]}))
    assert "no running pod is behind its Service" in f.root_cause
    backing = pod("kyverno-0", "kyverno", labels={"app": "kyverno"})
    healthy = Snapshot(
        objects={"ValidatingWebhookConfiguration": [config], "Service": [svc], "Pod": [backing]}
    )
    assert analyze_webhooks(healthy) == []
    ignored = Snapshot(objects={"ValidatingWebhookConfiguration": [webhook_config("Ignore")]})
    assert analyze_webhooks(ignored)[0].severity.value == "warning"
    snap = Snapshot(objects={"ReplicaSet": [replicaset(message)], "ValidatingWebhookConfiguration": [config]})
    (root,) = diagnose(snap).findings
    assert root.analyzer == "webhooks"
    assert ObjectRef("ReplicaSet", "shop", "web-7d9f8") in {s.object for s in root.symptoms}


def test_a_quota_in_decimal_units_is_compared_as_a_number() -> None:
    q = quota(used="8G", hard="8G")
    assert analyze_quotas(Snapshot(objects={"ResourceQuota": [q]}))[0].cause == "used-up/limits.memory"
    assert analyze_quotas(Snapshot(objects={"ResourceQuota": [quota(used="500M", hard="8G")]})) == []


def test_a_webhook_found_in_one_kind_is_named_though_the_other_kind_is_unreadable() -> None:
    message = 'admission webhook "validate.kyverno.svc" denied the request: label team is required'
    snap = Snapshot(
        objects={"ReplicaSet": [replicaset(message)], "ValidatingWebhookConfiguration": [webhook_config()]},
        unreadable={
            "MutatingWebhookConfiguration": Readable("MutatingWebhookConfiguration", False, "forbidden")
        },
    )
    (f,) = analyze_workloads(snap)
    assert "declared in ValidatingWebhookConfiguration kyverno-resource-validating" in f.root_cause
