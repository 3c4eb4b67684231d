"""The rbac analyzer: a 403 quoted in a previous log names the ServiceAccount, the verb and the resource, and the
bindings that exist for it; the crash loop it causes folds into it."""

from __future__ import annotations

from typing import Any

from capstan.diagnose import Category, ObjectRef, Readable, Snapshot, diagnose
from capstan.diagnose._rbac import analyze_rbac

from .kit import pod, terminated, waiting

LINE = (
    "E1201 10:00:01 reflector.go:147] failed to list *v1.Pod: pods is forbidden: User "
    '"system:serviceaccount:shop:runner" cannot list resource "pods" in API group "" in the namespace "shop"'
)


def binding() -> dict[str, Any]:
    return {
        "kind": "RoleBinding",
        "metadata": {"name": "runner-read", "namespace": "shop"},
        "subjects": [{"kind": "ServiceAccount", "name": "runner", "namespace": "shop"}],
        "roleRef": {"kind": "Role", "name": "pod-getter", "apiGroup": "rbac.authorization.k8s.io"},
    }


def role() -> dict[str, Any]:
    return {
        "kind": "Role",
        "metadata": {"name": "pod-getter", "namespace": "shop"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
    }


def crashing() -> dict[str, Any]:
    return pod(statuses=[waiting("app", "CrashLoopBackOff", restarts=3, last=terminated("Error", 1))])


def test_a_403_in_the_log_names_the_service_account_and_its_bindings() -> None:
    snap = Snapshot(
        objects={"Pod": [crashing()], "RoleBinding": [binding()], "Role": [role()]},
        logs={("shop", "web-7d9f8-abcde", "app"): f"starting\n{LINE}\n"},
    )
    (f,) = analyze_rbac(snap)
    assert f.subject == ObjectRef("ServiceAccount", "shop", "runner") and f.category is Category.SECURITY
    assert f.cause == "forbidden/list//pods/shop"
    assert "may not list pods in the core API group in namespace shop" in f.root_cause
    assert "RoleBinding runner-read → Role pod-getter (verbs get on pods)" in f.root_cause
    assert ObjectRef("Role", "shop", "pod-getter") in f.objects
    assert f.next_check == "kubectl auth can-i list pods --as=system:serviceaccount:shop:runner -n shop"
    (root,) = diagnose(snap).findings  # the crash loop is its symptom
    assert root.id == f.id and [s.object for s in root.symptoms] == [
        ObjectRef("Pod", "shop", "web-7d9f8-abcde")
    ]


def test_no_binding_and_unreadable_bindings_are_told_apart() -> None:
    logs = {("shop", "web-7d9f8-abcde", "app"): LINE}
    (f,) = analyze_rbac(Snapshot(logs=logs))
    assert "no RoleBinding or ClusterRoleBinding binds it" in f.root_cause
    blind = Snapshot(
        logs=logs,
        unreadable={
            "ClusterRoleBinding": Readable("ClusterRoleBinding", False, "clusterrolebindings is forbidden")
        },
    )
    (f,) = analyze_rbac(blind)
    assert "no binding of it was found (ClusterRoleBindings cannot be read" in f.root_cause


def test_cluster_scope_and_other_lines() -> None:
    line = (
        'nodes is forbidden: User "system:serviceaccount:ops:agent" cannot watch resource "nodes" in API group "" '
        "at the cluster scope"
    )
    (f,) = analyze_rbac(Snapshot(logs={("ops", "agent-0", "agent"): line, ("ops", "x", "y"): "all fine"}))
    assert "may not watch nodes in the core API group at the cluster scope" in f.root_cause


def test_a_job_failed_by_a_403_is_one_root_with_the_job_and_its_pod_as_symptoms() -> None:
    from .test_batch import failed_pod, job

    p = failed_pod("migrate-aaaaa", "2026-12-01T09:00:00Z")
    snap = Snapshot(objects={"Job": [job()], "Pod": [p]}, logs={("shop", "migrate-aaaaa", "app"): LINE})
    (root,) = diagnose(snap).findings
    assert root.analyzer == "rbac"
    assert {s.object for s in root.symptoms} >= {
        ObjectRef("Job", "shop", "migrate"),
        ObjectRef("Pod", "shop", "migrate-aaaaa"),
    }
