"""The fault-scenario suite on the session sandbox: a fast subset of the shipped scenarios is diagnosed top-1
correct (one with a recorded edit, one with a decoy, one on a scenario-owned GPU node), and a scenario whose
manifest the API server rejects is a setup failure that is cleaned up while the next one still runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from capstan.faults import Runner, Scenario, load_scenarios, parse_scenario
from capstan.kube import ApiError, KubeClient, resources
from capstan.sandbox import Sandbox

pytestmark = pytest.mark.integration

FAST = (
    "crashloop-connection-refused",  # a crash loop classified by its previous log
    "service-selector-after-relabel",  # a recorded edit (the Deployment relabelled) cited in the evidence
    "secret-key-renamed-with-dns-decoy",  # a recorded Secret edit and a decoy Event on the same pod
    "unschedulable-gpu-with-disk-pressure-decoy",  # scenario GPU and CPU nodes, a decoy on the CPU node
)

REJECTED = """\
name: rejected-manifest
description: The API server refuses the Pod (a container without an image).
category: startup
manifests:
  - apiVersion: v1
    kind: ConfigMap
    metadata: {name: first}
    data: {a: "1"}
  - apiVersion: v1
    kind: Pod
    metadata: {name: broken}
    spec:
      containers: [{name: app}]
expect:
  object: {kind: Pod, name: broken}
  category: startup
"""


@pytest.fixture
def runner(kubeconfig: Path, sandbox: Sandbox) -> Runner:
    return Runner(kubeconfig, sandbox.directory / "pod-logs")


def shipped(*names: str) -> list[Scenario]:
    by_name = {s.name: s for s in load_scenarios()}
    return [by_name[n] for n in names]


async def gone(kube: KubeClient, namespace: str) -> bool:
    try:
        await kube.get(resources.NAMESPACES, namespace)
    except ApiError as exc:
        return exc.not_found
    return False


async def test_a_fast_subset_is_diagnosed_top1_correct(runner: Runner, kube: KubeClient) -> None:
    seen: list[tuple[str, str]] = []

    async def on_state(scenario: Scenario, namespace: str, kubeconfig: Path) -> None:
        # the live state is still there for another tool to read
        pods, _ = await kube.list(resources.PODS, namespace=namespace)
        assert pods
        seen.append((scenario.name, namespace))

    runner.on_state = on_state
    outcomes = await runner.run_all(shipped(*FAST))
    for o in outcomes:
        assert o.setup_error is None, (o.scenario.name, o.setup_error)
        assert o.score is not None and o.score.top1, (o.scenario.name, o.score)
        assert o.score.evidence_recall == 1.0, (o.scenario.name, o.score.missing_evidence)
        assert not o.score.false_roots, (o.scenario.name, o.score.false_roots)
        assert o.cleanup_error is None, o.cleanup_error
        assert await gone(kube, o.namespace)
    assert [name for name, _ in seen] == list(FAST)
    relabel = outcomes[1]
    assert relabel.diagnosis is not None
    assert any(
        c.kind == "Deployment" for c in relabel.diagnosis.findings[0].changes
    )  # the recorded edit, cited
    nodes, _ = await kube.list(resources.NODES)
    names = {n["metadata"]["name"] for n in nodes}
    assert not any(o.namespace in n for o in outcomes for n in names)  # the scenario's nodes are deleted


async def test_a_rejected_manifest_is_a_setup_failure_and_the_run_goes_on(
    runner: Runner, kube: KubeClient
) -> None:
    rejected = parse_scenario(REJECTED, "rejected.yaml")
    first, second = await runner.run_all([rejected, *shipped("missing-secret")])
    assert first.score is None and first.setup_error is not None
    assert first.setup_error.startswith("API server: 422") and "image" in first.setup_error
    assert "\n" not in first.setup_error
    assert await gone(kube, first.namespace)
    assert second.setup_error is None and second.score is not None and second.score.top1
