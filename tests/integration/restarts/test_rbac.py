"""The shipped restart-notifier identity (the chart's: files/rbac/restarts.yaml) on a real API server: `capstan restarts run`
in-cluster (no kubeconfig: the service variables and the account's mounted token and CA) with a token of that
account sends a complete report — owner chain, node, Events, previous log, nothing unavailable — and every
write, and every Secret or ConfigMap read, is answered 403."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capstan.faults import Kubelet, Termination
from capstan.kube import KubeClient, resources
from capstan.notify import DEV_TOKEN, SlackReceiver, serve_in_thread
from capstan.sandbox import Sandbox
from tests.fixtures.identity import assert_forbidden, in_cluster_identity, manifest

pytestmark = pytest.mark.integration

READS = {
    ("", "pods"): {"list", "watch"},
    ("", "events"): {"list", "watch"},
    ("", "pods/log"): {"get"},
    ("", "nodes"): {"get"},
    **{("apps", r): {"get"} for r in ("replicasets", "deployments", "statefulsets", "daemonsets")},
    **{("batch", r): {"get"} for r in ("jobs", "cronjobs")},
}


def test_the_cluster_role_grants_what_a_report_reads_and_nothing_else() -> None:
    (role,) = [d for d in manifest("restarts") if d["kind"] == "ClusterRole"]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == READS


@pytest.fixture
def slack() -> Iterator[tuple[SlackReceiver, str]]:
    receiver = SlackReceiver()
    with serve_in_thread(receiver.app) as server:
        receiver.base_url = server.url
        yield receiver, server.url


@pytest.fixture
async def pod_env(
    sandbox: Sandbox, kube: KubeClient, kubeconfig: Path, tmp_path: Path
) -> AsyncIterator[dict[str, str]]:
    async with in_cluster_identity("restarts", sandbox, kube, kubeconfig, tmp_path / "serviceaccount") as env:
        yield env


async def deployment_pod(kube: KubeClient, namespace: str, name: str) -> str:
    """A one-replica Deployment whose pod kwok runs; returns the pod's name."""
    labels = {"app": name}
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "main", "image": "example.com/web:1"}]},
            },
        },
    }
    await kube.create(resources.DEPLOYMENTS, body)
    for _ in range(600):  # bounded: 120 s
        pods, _ = await kube.list(resources.PODS, namespace=namespace, label_selector=f"app={name}")
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
        if running:
            return str(running[0]["metadata"]["name"])
        await asyncio.sleep(0.2)
    pytest.fail(f"the pod of Deployment {name} never ran")


async def test_in_cluster_with_the_service_account_reports_are_complete_and_writes_are_403(
    kube: KubeClient,
    namespace: str,
    sandbox: Sandbox,
    slack: tuple[SlackReceiver, str],
    pod_env: dict[str, str],
    tmp_path: Path,
) -> None:
    receiver, url = slack
    pod = await deployment_pod(kube, namespace, "web")
    config = {
        "cluster_name": "sandbox",
        "sinks": [{"name": "slack", "type": "slack_bot", "token": DEV_TOKEN, "channel": "C0ALERTS",
                   "base_url": f"{url}/api/"}],
        "mute_seconds": 0,
        "delivery": {"rate_per_second": 50, "burst": 50, "idle_interval_seconds": 0.05},
    }  # fmt: skip
    (tmp_path / "restarts.yaml").write_text(yaml.safe_dump(config))
    db = tmp_path / "history.db"
    argv = [sys.executable, "-m", "capstan.cli.main", "restarts", "run", "--config", str(tmp_path / "restarts.yaml"),
            "--store", str(db), "--namespace", namespace, "--leader-elect", "--lease-namespace", "capstan",
            "--lease-name", "capstan-restarts-rbac-test"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | pod_env
    log = tmp_path / "restarts.log"
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
    loop = asyncio.get_running_loop()
    try:
        from capstan.store import open_store

        def baseline() -> bool:
            store = open_store(str(db))
            try:
                return bool(store.restart_records.restart_counts())
            finally:
                store.close()

        end = loop.time() + 90
        while not (db.exists() and await asyncio.to_thread(baseline)):
            assert proc.poll() is None and loop.time() < end, log.read_text()[-2000:]
            await asyncio.sleep(0.2)
        kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
        await kubelet.restart_container(
            namespace,
            pod,
            "main",
            Termination.error(3, "boom"),
            previous_log=["starting", "web failed: boom"],
        )
        messages: list[Any] = []
        end = loop.time() + 90
        while not messages:
            assert proc.poll() is None and loop.time() < end, log.read_text()[-2000:]
            messages = [m for m in list(receiver.messages) if pod in json.dumps({"t": m.text, "b": m.blocks})]
            await asyncio.sleep(0.1)
        text = json.dumps({"text": messages[0].text, "blocks": messages[0].blocks})
        assert "web failed: boom" in text  # the previous log (pods/log)
        # the owner chain (ReplicaSet, Deployment), the node, the pod's Events
        assert f"Workload*\\nDeployment {namespace}/web" in text, text
        assert ": Ready; no pressure" in text, text
        # at least one of the kubelet's Events for the pod, read through the Events watch (which ones arrived before
        # the report is a race; an Events read refused would say "unavailable")
        assert re.search(r"Pod events\*\\n```\d{4}-\d\d-\d\d ", text), text
        assert not re.search(r"\bunavailable|forbidden", text, re.I), text  # no part of the report failed

        async with await KubeClient.in_cluster(environ=pod_env) as account:
            await assert_forbidden("get a Secret", account.get(resources.SECRETS, "x", namespace))
            await assert_forbidden("list ConfigMaps", account.list(resources.CONFIGMAPS, namespace=namespace))
            await assert_forbidden("delete the pod", account.delete(resources.PODS, pod, namespace))
            await assert_forbidden(
                "scale the Deployment",
                account.patch(resources.DEPLOYMENTS, "web", {"spec": {"replicas": 3}}, namespace=namespace),
            )
            await assert_forbidden(
                "create an Event",
                account.create(resources.EVENTS, {"apiVersion": "v1", "kind": "Event",
                                                  "metadata": {"name": "x", "namespace": namespace},
                                                  "involvedObject": {"kind": "Pod", "name": pod}}),
            )  # fmt: skip
            await assert_forbidden("list nodes", account.list(resources.NODES))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(proc.wait, 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, log.read_text()[-2000:]
