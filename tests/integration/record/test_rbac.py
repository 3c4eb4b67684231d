"""The shipped recorder identity (the chart's, deploy/helm/capstan: files/rbac/record.yaml) on a real API server: its ClusterRole reads exactly
the kinds the recorder records by default and Events; `capstan record` run in-cluster (the service host and port
variables, the account's token and CA files; no kubeconfig) with a token of that account records every kind,
holds its leader Lease, and every write outside the Lease is answered 403."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from capstan.kube import KubeClient, resource_for, resources
from capstan.record import DEFAULT_KINDS, KubernetesConfig
from capstan.sandbox import Sandbox
from tests.fixtures.identity import assert_forbidden, in_cluster_identity, manifest
from tests.integration.record._changes import cursors_stored, wait_for
from tests.integration.record._process import start_record

pytestmark = pytest.mark.integration

NAMESPACE, ACCOUNT = "capstan", "capstan-record"
READ_VERBS = {"get", "list", "watch"}


def one(kind: str) -> dict[str, Any]:
    (doc,) = [d for d in manifest("record") if d["kind"] == kind]
    return doc


def test_the_cluster_role_reads_the_recorded_kinds_and_nothing_else() -> None:
    granted: set[tuple[str, str]] = set()
    for rule in one("ClusterRole")["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"} and set(rule["verbs"]) == READ_VERBS, rule
        granted |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
    kinds = [resource_for(k) for k in (*DEFAULT_KINDS, "Event", "events.k8s.io/v1/Event")]
    assert granted == {(r.group, r.plural) for r in kinds}
    (leases,) = one("Role")["rules"]
    assert leases == {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update"],
    }
    for binding in (one("ClusterRoleBinding"), one("RoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]
    assert one("ClusterRoleBinding")["roleRef"]["name"] == one("ClusterRole")["metadata"]["name"]
    assert one("RoleBinding")["roleRef"]["name"] == one("Role")["metadata"]["name"]


@pytest.fixture
async def service_account_dir(
    sandbox: Sandbox, kube: KubeClient, kubeconfig: Path, tmp_path: Path
) -> AsyncIterator[dict[str, str]]:
    async with in_cluster_identity("record", sandbox, kube, kubeconfig, tmp_path / "serviceaccount") as env:
        yield env


async def test_in_cluster_with_the_service_account_it_records_leads_and_may_write_nothing_else(
    kube: KubeClient, namespace: str, service_account_dir: dict[str, str], tmp_path: Path
) -> None:
    env = service_account_dir
    db = tmp_path / "h.db"
    config = {"store": str(db), "kubernetes": {"flush_interval_s": 0.1}}  # no kubeconfig: in-cluster
    lease = "capstan-record-rbac-test"
    log = tmp_path / "record.log"
    args = ("--leader-elect", "--lease-namespace", NAMESPACE, "--lease-name", lease)
    proc = start_record(config, tmp_path / "record.yaml", None, *args, log=log, env={**os.environ, **env})
    try:
        watches = KubernetesConfig().watches()
        await wait_for(
            lambda: proc.poll() is None and cursors_stored(str(db), [("default", w.key) for w in watches]),
            f"a first list of every kind ({len(watches)} watches); log: {log}",
        )
        assert proc.poll() is None, log.read_text()[-2000:]
        holder = (await kube.get(resources.LEASES, lease, NAMESPACE))["spec"]["holderIdentity"]
        assert holder.endswith(f"_{proc.pid}")

        async with await KubeClient.in_cluster(environ=env) as reader:
            assert reader.source.startswith("in-cluster ")
            await reader.list(resources.SECRETS, namespace=namespace)  # read: granted
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": namespace}}
            await assert_forbidden("create a ConfigMap", reader.create(resources.CONFIGMAPS, cm))
            await assert_forbidden("delete a namespace", reader.delete(resources.NAMESPACES, namespace))
            await assert_forbidden(
                "cordon a node", reader.patch(resources.NODES, "x", {"spec": {"unschedulable": True}})
            )
            await assert_forbidden(
                "patch a pod's labels",
                reader.patch(resources.PODS, "x", {"metadata": {"labels": {"a": "b"}}}, namespace=namespace),
            )
            other = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": lease, "namespace": namespace}, "spec": {}}  # fmt: skip
            await assert_forbidden(
                "create a Lease in another namespace", reader.create(resources.LEASES, other)
            )
            await assert_forbidden("delete its own Lease", reader.delete(resources.LEASES, lease, NAMESPACE))
            await assert_forbidden(
                "read pod logs", reader.request("GET", resources.PODS.item_path("x", namespace, "log"))
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(proc.wait, 60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, log.read_text()[-2000:]


def test_in_cluster_without_the_mounted_files_is_one_line(tmp_path: Path) -> None:
    config = {"store": str(tmp_path / "h.db"), "kubernetes": {}}
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1",
           "CAPSTAN_SERVICE_ACCOUNT_DIR": str(tmp_path / "nothing")}  # fmt: skip
    log = tmp_path / "record.log"
    proc = start_record(config, tmp_path / "record.yaml", None, log=log, env=env)
    assert proc.wait(60) == 2
    lines = log.read_text().strip().splitlines()
    assert lines == [
        f"capstan: error: in-cluster: {tmp_path / 'nothing' / 'token'}: no such file (is a service account token mounted?)"
    ]
    assert not (tmp_path / "h.db").exists()
