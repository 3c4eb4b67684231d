"""The scaling analyzer: HPAs that cannot scale, PDBs that block every eviction or select nothing."""

from __future__ import annotations

from typing import Any

from capstan.diagnose import Category, ObjectRef, Readable, Severity, Snapshot
from capstan.diagnose._scaling import analyze_scaling


def deployment(name: str = "web", requests: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {"requests": requests} if requests is not None else {}
    return {
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"template": {"spec": {"containers": [{"name": "app", "resources": resources}]}}},
    }


def hpa(target: str = "web", conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 1,
            "maxReplicas": 5,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
                }
            ],
        },
        "status": {"conditions": conditions or []},
    }


def pdb(status: dict[str, int] | None, **spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }
    if status is not None:
        out["status"] = status
    return out


def test_hpa_whose_target_pods_have_no_cpu_request() -> None:
    (f,) = analyze_scaling(
        Snapshot(objects={"HorizontalPodAutoscaler": [hpa()], "Deployment": [deployment()]})
    )
    assert f.cause == "no-request/cpu" and f.category is Category.SCALING
    assert "container app of Deployment web has no resources.requests.cpu" in f.root_cause
    assert ObjectRef("Deployment", "shop", "web") in f.objects


def test_hpa_with_requests_and_active_scaling_says_nothing_and_a_failing_condition_is_quoted() -> None:
    ok = Snapshot(
        objects={"HorizontalPodAutoscaler": [hpa()], "Deployment": [deployment(requests={"cpu": "100m"})]}
    )
    assert analyze_scaling(ok) == []
    message = "the HPA was unable to compute the replica count: unable to get metrics for resource cpu"
    failing = hpa(
        conditions=[
            {
                "type": "ScalingActive",
                "status": "False",
                "reason": "FailedGetResourceMetric",
                "message": message,
            }
        ]
    )
    (f,) = analyze_scaling(
        Snapshot(
            objects={"HorizontalPodAutoscaler": [failing], "Deployment": [deployment(requests={"cpu": "1"})]}
        )
    )
    assert f.cause == "ScalingActive/FailedGetResourceMetric" and "unable to get metrics" in f.root_cause


def test_hpa_scaling_a_missing_deployment_unless_deployments_cannot_be_read() -> None:
    (f,) = analyze_scaling(Snapshot(objects={"HorizontalPodAutoscaler": [hpa("gone")]}))
    assert f.cause == "missing-target/Deployment/gone" and "does not exist" in f.root_cause
    blind = Snapshot(
        objects={"HorizontalPodAutoscaler": [hpa("gone")]},
        unreadable={"Deployment": Readable("Deployment", False, "forbidden")},
    )
    assert analyze_scaling(blind) == []


def test_pdb_that_blocks_every_drain() -> None:
    status = {"expectedPods": 3, "currentHealthy": 3, "desiredHealthy": 3, "disruptionsAllowed": 0}
    (f,) = analyze_scaling(Snapshot(objects={"PodDisruptionBudget": [pdb(status, minAvailable=3)]}))
    assert (
        f.cause == "blocks-eviction" and "minAvailable 3" in f.root_cause and f.severity is Severity.WARNING
    )


def test_pdb_short_of_healthy_pods_or_not_yet_observed_is_left_alone_and_an_empty_one_is_info() -> None:
    short = {"expectedPods": 3, "currentHealthy": 1, "desiredHealthy": 2, "disruptionsAllowed": 0}
    assert analyze_scaling(Snapshot(objects={"PodDisruptionBudget": [pdb(short, minAvailable=2)]})) == []
    assert analyze_scaling(Snapshot(objects={"PodDisruptionBudget": [pdb(None, minAvailable=2)]})) == []
    allowed = {"expectedPods": 3, "currentHealthy": 3, "desiredHealthy": 2, "disruptionsAllowed": 1}
    assert analyze_scaling(Snapshot(objects={"PodDisruptionBudget": [pdb(allowed, minAvailable=2)]})) == []
    empty = {"expectedPods": 0, "currentHealthy": 0, "desiredHealthy": 1, "disruptionsAllowed": 0}
    (f,) = analyze_scaling(Snapshot(objects={"PodDisruptionBudget": [pdb(empty, minAvailable=1)]}))
    assert f.cause == "selects-no-pod" and f.severity is Severity.INFO and "app=web" in f.root_cause
