"""The built-in analyzers, keyed by name, and :func:`diagnose` over them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from capstan.diagnose._analyzer import Analyzer, Diagnosis, FunctionAnalyzer, analyzer_registry, run_analyzers
from capstan.diagnose._batch import analyze_batch
from capstan.diagnose._gpu import analyze_gpu
from capstan.diagnose._ingress import analyze_ingress
from capstan.diagnose._lifecycle import analyze_lifecycle
from capstan.diagnose._netpol import analyze_network_policies
from capstan.diagnose._nodes import analyze_nodes
from capstan.diagnose._pods import analyze_pods
from capstan.diagnose._quotas import analyze_quotas
from capstan.diagnose._rbac import analyze_rbac
from capstan.diagnose._references import analyze_references
from capstan.diagnose._scaling import analyze_scaling
from capstan.diagnose._scheduling import analyze_scheduling
from capstan.diagnose._services import analyze_services
from capstan.diagnose._snapshot import Snapshot
from capstan.diagnose._storage import analyze_storage
from capstan.diagnose._webhooks import analyze_webhooks
from capstan.diagnose._workloads import analyze_workloads
from capstan.redact import Redactor

# NOTE: one entry per analyzer; a name given twice fails at import (tests/unit/diagnose pins the names)
ANALYZERS: Final[Mapping[str, Analyzer]] = analyzer_registry(
    FunctionAnalyzer("pods", ("Pod", "Event"), analyze_pods),
    FunctionAnalyzer("scheduling", ("Pod", "Node", "Event"), analyze_scheduling),
    FunctionAnalyzer("services", ("Service", "Pod", "Ingress", "HTTPRoute"), analyze_services),
    FunctionAnalyzer("nodes", ("Node", "DaemonSet"), analyze_nodes),
    FunctionAnalyzer("references", ("Pod", "ConfigMap", "Secret"), analyze_references),
    FunctionAnalyzer("storage", ("PersistentVolumeClaim", "StorageClass", "Pod", "Event"), analyze_storage),
    FunctionAnalyzer(
        "workloads",
        (
            "ReplicaSet",
            "StatefulSet",
            "DaemonSet",
            "Job",
            "Deployment",
            "Event",
            "ResourceQuota",
            "LimitRange",
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
        ),
        analyze_workloads,
    ),
    FunctionAnalyzer("batch", ("Job", "CronJob", "Pod"), analyze_batch),
    FunctionAnalyzer(
        "scaling",
        ("HorizontalPodAutoscaler", "PodDisruptionBudget", "Deployment", "StatefulSet"),
        analyze_scaling,
    ),
    FunctionAnalyzer("lifecycle", ("Pod", "Namespace", "Node", "Event"), analyze_lifecycle),
    FunctionAnalyzer("network-policies", ("NetworkPolicy", "Pod", "Service"), analyze_network_policies),
    FunctionAnalyzer("gpu", ("Node", "DaemonSet", "Pod"), analyze_gpu),
    FunctionAnalyzer(
        "quotas", ("ResourceQuota", "ReplicaSet", "StatefulSet", "DaemonSet", "Job"), analyze_quotas
    ),
    FunctionAnalyzer("ingress", ("Ingress", "HTTPRoute", "Service", "IngressClass"), analyze_ingress),
    FunctionAnalyzer("rbac", ("RoleBinding", "ClusterRoleBinding", "Role", "ClusterRole"), analyze_rbac),
    FunctionAnalyzer(
        "webhooks",
        ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "Service", "Pod"),
        analyze_webhooks,
    ),
)


def diagnose(
    snapshot: Snapshot,
    analyzers: Mapping[str, Analyzer] | Sequence[Analyzer] | None = None,
    *,
    redactor: Redactor | None = None,
) -> Diagnosis:
    """Every registered analyzer (or ``analyzers``) over ``snapshot``: findings redacted by ``redactor`` (a keyless
    default), ordered by severity then id, with the analyzers that raised and the kinds that could not be read."""
    return run_analyzers(snapshot, ANALYZERS if analyzers is None else analyzers, redactor)
