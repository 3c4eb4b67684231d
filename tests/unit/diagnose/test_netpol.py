"""The network-policy analyzer: a policy that denies all ingress to a Service's pods, one whose rules do not admit
the Service's port, and one that selects no pod."""

from __future__ import annotations

from typing import Any

from capstan.diagnose import Category, Severity, Snapshot, diagnose
from capstan.restarts import RecordedChange

from .kit import container, pod, service

WEB = {"app": "web", "pod-template-hash": "7d9f8"}


def policy(
    name: str, selector: dict[str, Any], ingress: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"podSelector": selector, "policyTypes": ["Ingress"], **spec}
    if ingress is not None:
        body["ingress"] = ingress
    return {"kind": "NetworkPolicy", "metadata": {"name": name, "namespace": "shop"}, "spec": body}


def web_pods() -> list[dict[str, Any]]:
    c = container(ports=[{"name": "http", "containerPort": 8080}])
    return [pod(f"web-7d9f8-{i}", labels=WEB, containers=[c]) for i in "ab"]


def test_a_deny_all_policy_over_a_services_pods_is_named_with_its_recorded_creation() -> None:
    snap = Snapshot(
        objects={"Pod": web_pods(), "Service": [service()], "NetworkPolicy": [policy("deny-all", {})]},
        changes=[RecordedChange(90.0, "NetworkPolicy", "shop", "deny-all", "added")],
        observed_at=100.0,
    )
    (f,) = diagnose(snap).findings
    assert (f.analyzer, f.cause, f.severity, f.category) == (
        "network-policies", "deny-all/deny-all", Severity.WARNING, Category.NETWORKING,
    )  # fmt: skip
    assert "denies every connection to the Service" in f.root_cause and "web-7d9f8-a" in f.root_cause
    assert [(o.kind, o.name) for o in f.objects] == [("Service", "web"), ("NetworkPolicy", "deny-all")]
    assert [c.name for c in f.changes] == ["deny-all"]


def test_another_policy_admitting_the_port_makes_it_fine_policies_add_up() -> None:
    allow = policy("allow-http", {"matchLabels": {"app": "web"}}, [{"ports": [{"port": 8080}]}])
    snap = Snapshot(
        objects={"Pod": web_pods(), "Service": [service()], "NetworkPolicy": [policy("deny-all", {}), allow]}
    )
    assert diagnose(snap).findings == ()


def test_rules_that_do_not_admit_the_target_port() -> None:
    only_metrics = policy("metrics", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
                          [{"ports": [{"port": 9090}, {"port": "metrics"}]}])  # fmt: skip
    snap = Snapshot(objects={"Pod": web_pods(), "Service": [service()], "NetworkPolicy": [only_metrics]})
    (f,) = diagnose(snap).findings
    assert f.cause == "port-not-admitted/http"
    assert any(e.what == "admitted ports" and e.text == "9090, metrics" for e in f.evidence)
    ranged = policy("range", {}, [{"ports": [{"port": 8000, "endPort": 8100}]}])
    assert (
        diagnose(
            Snapshot(objects={"Pod": web_pods(), "Service": [service()], "NetworkPolicy": [ranged]})
        ).findings
        == ()
    )


def test_egress_only_policies_and_policies_over_other_pods_are_not_blamed() -> None:
    egress = policy("egress", {}, policyTypes=["Egress"])
    other = policy("db-only", {"matchLabels": {"app": "db"}})
    db = pod("db-0", labels={"app": "db"}, owner=None)
    snap = Snapshot(
        objects={"Pod": [*web_pods(), db], "Service": [service()], "NetworkPolicy": [egress, other]}
    )
    assert diagnose(snap).findings == ()


def test_a_policy_selecting_no_pod_is_info() -> None:
    snap = Snapshot(
        objects={"Pod": web_pods(), "NetworkPolicy": [policy("typo", {"matchLabels": {"app": "wbe"}})]}
    )
    (f,) = diagnose(snap).findings
    assert (f.cause, f.severity) == ("selects-no-pod", Severity.INFO) and "app=wbe" in f.root_cause
