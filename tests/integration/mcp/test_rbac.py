"""The chart's read-only identity for the MCP server (deploy/helm/capstan, rules in files/rbac/mcp.yaml) against
the real API server: its ClusterRole grants get/list/watch on what the tools read and nothing else (no Secrets);
with that ServiceAccount's token every tool works (in process, as ``capstan mcp serve``, and in-cluster),
Secrets are a blind spot, and the API server answers 403 to every write and to every Secret read."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client, StdioServerParameters

from capstan.diagnose import ANALYZERS, read_snapshot
from capstan.faults import Kubelet
from capstan.kube import ApiError, KubeClient, resources
from capstan.mcp import ClusterLogs, LiveSource, create_server
from capstan.sandbox import Sandbox, mount_service_account
from capstan.store import open_store
from tests.fixtures.identity import in_cluster_identity, manifest
from tests.integration.mcp.calls import (
    CRASH_LOG,
    Scene,
    call_every_tool,
    crashing_deployment,
    kubeconfig_with_token,
    server_command,
    server_env,
)

pytestmark = pytest.mark.integration

NAMESPACE, ACCOUNT = "capstan", "capstan-mcp"
USER = f"system:serviceaccount:{NAMESPACE}:{ACCOUNT}"
READ_VERBS = {"get", "list", "watch"}
# granted to every authenticated identity by the default system:basic-user role: they ask the API server what the
# caller itself may do, and write nothing
SELF_REVIEWS = {
    "selfsubjectaccessreviews.authorization.k8s.io",
    "selfsubjectrulesreviews.authorization.k8s.io",
    "selfsubjectreviews.authentication.k8s.io",
}


def granted_rules() -> list[dict[str, Any]]:
    (role,) = [d for d in manifest("mcp") if d["kind"] == "ClusterRole"]
    rules: list[dict[str, Any]] = role["rules"]
    return rules


def needed() -> set[tuple[str, str]]:
    """(API group, resource) of every kind the analyzers read (Secret aside), Events in both APIs, and logs."""
    by_kind = {r.kind: r for r in (*resources.WELL_KNOWN, *resources.READ_ONLY)}
    kinds = {k for a in ANALYZERS.values() for k in a.reads if k not in ("Event", "Secret")}
    unknown = kinds - set(by_kind)
    assert not unknown, f"kinds the reader cannot name: {unknown}"
    return {(by_kind[k].group, by_kind[k].plural) for k in kinds} | {
        ("", "events"),
        ("events.k8s.io", "events"),
        ("", "pods/log"),
    }


def test_the_cluster_role_reads_what_the_tools_read_and_nothing_else() -> None:
    granted: set[tuple[str, str]] = set()
    for rule in granted_rules():
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames, no nonResourceURLs
        assert set(rule["verbs"]) == READ_VERBS, rule
        granted |= {(g, r) for g in rule["apiGroups"] for r in rule["resources"]}
    assert not any("*" in g or "*" in r for g, r in granted)
    assert ("", "secrets") not in granted
    assert needed() <= granted, needed() - granted
    (binding,) = [d for d in manifest("mcp") if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]
    assert (
        binding["roleRef"]["name"]
        == next(d for d in manifest("mcp") if d["kind"] == "ClusterRole")["metadata"]["name"]
    )


@pytest.fixture
async def identity(
    sandbox: Sandbox, kube: KubeClient, kubeconfig: Path, tmp_path: Path
) -> AsyncIterator[Path]:
    """The chart's identity for the MCP server applied (server-side) and a kubeconfig holding a fresh token of its
    ServiceAccount; its objects deleted afterwards."""
    async with in_cluster_identity("mcp", sandbox, kube, kubeconfig, tmp_path / "serviceaccount") as env:
        token = await asyncio.to_thread((Path(env["CAPSTAN_SERVICE_ACCOUNT_DIR"]) / "token").read_text)
        yield await asyncio.to_thread(kubeconfig_with_token, kubeconfig, token, tmp_path / "mcp.kubeconfig")


async def assert_forbidden(what: str, call: Any) -> None:
    try:
        await call
    except ApiError as err:
        assert err.status == 403, f"{what}: {err}"
        return
    pytest.fail(f"{what}: the API server allowed it")


async def test_with_the_service_account_every_tool_works_and_writes_and_secrets_are_403(
    sandbox: Sandbox, kube: KubeClient, namespace: str, identity: Path, kubeconfig: Path, tmp_path: Path
) -> None:
    scene: Scene = await crashing_deployment(kube, Kubelet(kube, sandbox.directory / "pod-logs"), namespace)
    await kube.create(resources.SECRETS, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-creds", "namespace": namespace},
        "stringData": {"password": "not-for-the-mcp-server"},
    })  # fmt: skip

    async with await KubeClient.from_kubeconfig(identity) as reader:
        # what the tools read: everything but Secrets, which are a blind spot, and the crashed container's log
        snapshot = await read_snapshot(reader)
        assert set(snapshot.unreadable) == {"Secret"}, snapshot.unreadable
        assert "forbidden" in snapshot.unreadable["Secret"].reason
        assert CRASH_LOG[-1] in snapshot.logs[(namespace, scene.pod, scene.container)]

        # every tool, in process over that identity, with a history store
        store = open_store(str(tmp_path / "history.db"))
        try:
            redactor = store.history.redactor()
            live = LiveSource(reader, redactor=redactor, history=store.history)
            server = create_server(live, ClusterLogs(reader), redactor=redactor)
            async with Client(server) as client:
                answers = await call_every_tool(client, scene, store=True)
        finally:
            store.close()
        assert scene.pod in json.dumps(answers["problems"])
        assert "not-for-the-mcp-server" not in json.dumps(answers)

        # every write and every Secret read: 403
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "intruder", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "example.com/x:1"}]},
        }
        deployments, pods, secrets = resources.DEPLOYMENTS, resources.PODS, resources.SECRETS
        await assert_forbidden("create a pod", reader.create(pods, pod))
        await assert_forbidden("delete a pod", reader.delete(pods, scene.pod, namespace))
        await assert_forbidden(
            "patch a pod",
            reader.patch(pods, scene.pod, {"metadata": {"labels": {"x": "y"}}}, namespace=namespace),
        )
        await assert_forbidden(
            "patch a pod's status",
            reader.patch(
                pods, scene.pod, {"status": {"phase": "Failed"}}, namespace=namespace, subresource="status"
            ),
        )
        await assert_forbidden(
            "apply a Deployment",
            reader.apply(deployments, {"apiVersion": "apps/v1", "kind": "Deployment",
                                       "metadata": {"name": scene.workload, "namespace": namespace},
                                       "spec": {"replicas": 0}}),
        )  # fmt: skip
        await assert_forbidden(
            "scale a Deployment",
            reader.patch(deployments, scene.workload, {"spec": {"replicas": 5}}, namespace=namespace,
                         subresource="scale"),
        )  # fmt: skip
        await assert_forbidden("delete a Deployment", reader.delete(deployments, scene.workload, namespace))
        await assert_forbidden(
            "create a ConfigMap",
            reader.create(resources.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": "x", "namespace": namespace}}),
        )  # fmt: skip
        await assert_forbidden(
            "evict a pod",
            reader.request("POST", pods.item_path(scene.pod, namespace, "eviction"), body={
                "apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": scene.pod, "namespace": namespace}}),
        )  # fmt: skip
        await assert_forbidden(
            "cordon a node", reader.patch(resources.NODES, "x", {"spec": {"unschedulable": True}})
        )
        await assert_forbidden("delete a namespace", reader.delete(resources.NAMESPACES, namespace))
        await assert_forbidden("get a Secret", reader.get(secrets, "db-creds", namespace))
        await assert_forbidden("list a namespace's Secrets", reader.list(secrets, namespace=namespace))
        await assert_forbidden("list every Secret", reader.list(secrets))
    # nothing was written: the pod is there, unlabelled, and the Deployment keeps its one replica
    still = await kube.get(resources.PODS, scene.pod, namespace)
    assert "x" not in (still["metadata"].get("labels") or {})
    assert (await kube.get(resources.DEPLOYMENTS, scene.workload, namespace))["spec"]["replicas"] == 1

    # the same identity through the command, over stdio
    command = server_command("--transport", "stdio", "--kubeconfig", str(identity))
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env())
    async with Client(params) as client:
        await call_every_tool(client, scene, store=False)

    # and in a pod: no kubeconfig, the account's token, CA and namespace mounted (KubeClient.in_cluster)
    token = str(yaml.safe_load(await asyncio.to_thread(identity.read_text))["users"][0]["user"]["token"])
    pod_env = await asyncio.to_thread(
        mount_service_account, tmp_path / "pod-account", token, kubeconfig, NAMESPACE
    )
    command = server_command("--transport", "stdio")
    params = StdioServerParameters(command=command[0], args=command[1:], env=server_env(**pod_env))
    async with Client(params) as client:
        await call_every_tool(client, scene, store=False)

    # and what the API server says that identity may do: read, never write
    listing = await asyncio.to_thread(
        sandbox.kubectl, ["auth", "can-i", "--list", "--as", USER, "-n", namespace]
    )
    rows = [line for line in listing.splitlines()[1:] if line.strip()]
    assert rows and any(line.split()[0] == "pods/log" for line in rows if not line.startswith(" "))
    for line in rows:
        verbs = set(re.findall(r"\[([^\]]*)\]\s*$", line)[0].split())
        name = line.split()[0] if not line.startswith(" ") else ""
        assert not name.startswith("secrets"), line
        if name in SELF_REVIEWS:
            assert verbs == {"create"}, line
        else:
            assert verbs <= READ_VERBS, line
