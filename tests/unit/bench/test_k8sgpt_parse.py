"""k8sgpt's JSON as the sandbox produced it (commit 05247a8), parsed and scored by bench/_k8sgpt.py."""

from __future__ import annotations

import json

import pytest
from bench._k8sgpt import K8sgptError, k8sgpt_top1, parse_results

pytestmark = pytest.mark.unit

# a crash-looping Deployment's pod (capstan.faults restarted it), `--filter` with ALL_FILTERS, order as printed
CRASHLOOP = {
    "provider": "", "errors": None, "status": "ProblemDetected", "problems": 3,
    "results": [
        {"kind": "Security/ServiceAccount", "name": "kg3/default",
         "error": [{"Text": "Default service account is being used by pods: [worker-74c4494cdf-x67wj]",
                    "KubernetesDoc": "", "Sensitive": []}], "details": "", "parentObject": ""},
        {"kind": "Deployment", "name": "kg3/worker",
         "error": [{"Text": "Deployment kg3/worker has 1 replicas but 0 are available with status running",
                    "KubernetesDoc": "", "Sensitive": [{"Unmasked": "kg3", "Masked": "NyNn"}]}],
         "details": "", "parentObject": ""},
        {"kind": "Pod", "name": "kg3/worker-74c4494cdf-x67wj",
         "error": [{"Text": "the last termination reason is Error container=app pod=worker-74c4494cdf-x67wj",
                    "KubernetesDoc": "", "Sensitive": []}], "details": "", "parentObject": "Deployment/worker"},
        {"kind": "Pod", "name": "kg3/cfg/app",
         "error": [{"Text": "Error the server rejected our request", "KubernetesDoc": "", "Sensitive": []}],
         "details": "", "parentObject": ""},
    ],
}  # fmt: skip


def test_parses_names_parents_containers_and_errors() -> None:
    raw = 'no matches for kind "Gateway" in version "gateway.networking.k8s.io/v1"\n' + json.dumps(
        {**CRASHLOOP, "errors": ['[Gateway] no matches for kind "Gateway"']}
    )
    results, errors = parse_results(raw)
    assert errors == ('[Gateway] no matches for kind "Gateway"',)
    sa, deployment, pod, log = results
    assert (sa.kind, sa.namespace, sa.name) == ("Security/ServiceAccount", "kg3", "default")
    assert (deployment.namespace, deployment.name, deployment.parent) == ("kg3", "worker", "")
    assert pod.parent == "Deployment/worker" and pod.text.startswith("the last termination reason is Error")
    assert (log.name, log.container) == ("cfg", "app")
    assert parse_results(json.dumps({"results": None, "errors": None})) == ((), ())
    with pytest.raises(K8sgptError):
        parse_results("Error: initialising kubernetes client")


def test_top1_reads_the_expected_objects_own_results_else_its_childrens() -> None:
    results, _ = parse_results(json.dumps(CRASHLOOP))
    assert k8sgpt_top1(results, "Deployment", "worker", ["0 are available"])
    assert not k8sgpt_top1(results, "Deployment", "worker", ["connection refused"])
    # the Deployment has a result of its own, so its pod's (parentObject Deployment/worker) is not consulted
    assert not k8sgpt_top1(results, "Deployment", "worker", ["termination reason is Error"])
    # without it, the pod's result answers for its Deployment; the order of results does not matter
    without = [r for r in results if r.kind != "Deployment"]
    assert k8sgpt_top1(without, "Deployment", "worker", ["termination reason is Error"])
    assert k8sgpt_top1(list(reversed(results)), "Deployment", "worker", ["0 are available"])
    assert k8sgpt_top1(results, "Pod", "worker-74c4494cdf-x67wj", ["ERROR", "container=app"])
    assert k8sgpt_top1(results, "ServiceAccount", "default", ["default service account"])
    assert not k8sgpt_top1(results, "Service", "worker", [])
    # strict: only the first entry of results counts, as for Capstan's first finding
    assert not k8sgpt_top1(results, "Deployment", "worker", ["0 are available"], strict=True)
    assert k8sgpt_top1(results, "ServiceAccount", "default", [], strict=True)
