"""k8sgpt beside Capstan on one live state (bench/_k8sgpt.py): a Service whose selector matches no pod, on the
session sandbox. k8sgpt is built outside the repository (the Go module proxy refuses it: ../shared/research/peers.md),
so this test is skipped, with that reason, when no binary is given by CAPSTAN_K8SGPT or found at ../peers/k8sgpt."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench._k8sgpt import ALL_FILTERS, find_k8sgpt, k8sgpt_top1, run_k8sgpt, run_k8sgpt_full

from capstan.diagnose import diagnose, read_snapshot
from capstan.kube import KubeClient, resources

pytestmark = pytest.mark.integration


def _command() -> list[str]:
    command = find_k8sgpt()
    if command is None:
        pytest.skip(
            "no k8sgpt binary: set CAPSTAN_K8SGPT to its command line or build it at ../peers/k8sgpt "
            "(GOTOOLCHAIN=local CGO_ENABLED=0 go build in the fetched k8sgpt-ai/k8sgpt source)"
        )
    return command


async def test_k8sgpt_and_capstan_name_the_service_without_endpoints(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path
) -> None:
    command = _command()
    await kube.create(resources.SERVICES, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": namespace},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    })  # fmt: skip

    results = await run_k8sgpt(command, kubeconfig, namespace, tmp_path / "k8sgpt")
    service = [r for r in results if r.kind == "Service"]
    assert len(service) == 1, results
    (web,) = service
    assert (web.namespace, web.name) == (namespace, "web")
    assert web.errors == ("Service has no endpoints, expected label app=web",)
    assert k8sgpt_top1(results, "Service", "web", ["no endpoints", "app=web"])
    assert not k8sgpt_top1(results, "Service", "web", ["targetPort"])
    assert not k8sgpt_top1(results, "Service", "api", ["no endpoints"])
    # k8sgpt also reports the namespace's unused kube-root-ca.crt ConfigMap; its order is not a ranking
    assert {r.kind for r in results} <= {"Service", "ConfigMap"}
    # nothing was written outside the scratch directory given: k8sgpt's config is under it
    assert (tmp_path / "k8sgpt/home/.config/k8sgpt/k8sgpt.yaml").is_file()

    wide = await run_k8sgpt_full(command, kubeconfig, namespace, tmp_path / "k8sgpt", filters=ALL_FILTERS)
    assert wide.raw.startswith("{") and '"results"' in wide.raw
    assert k8sgpt_top1(wide.results, "Service", "web", ["no endpoints"])

    diagnosis = diagnose(await read_snapshot(kube, namespace=namespace))
    first = diagnosis.findings[0]
    assert (first.subject.kind, first.subject.name, first.cause) == (
        "Service",
        "web",
        "selector-matches-no-pod",
    )
