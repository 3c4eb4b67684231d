"""The diagnosis against the real control plane: the live reader, the recorded history it cites, a 403 it reports
as a blind spot, and the ``capstan diagnose`` command, with planted secrets that must not come out."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from capstan.diagnose import Snapshot, diagnose, read_snapshot
from capstan.faults import Kubelet, Termination
from capstan.kube import KubeClient, resources
from capstan.record import KubeCollector, KubernetesConfig
from capstan.sandbox import Sandbox
from capstan.store import Store, open_store

pytestmark = pytest.mark.integration

PLANTED_PASSWORD = "Pl4nted-pw-7Qx9"
PLANTED_SECRET_VALUE = "planted-secret-value-Zk31"


@contextlib.asynccontextmanager
async def recording(store: Store, kubeconfig: Path, namespace: str) -> AsyncIterator[KubeCollector]:
    collector = KubeCollector(
        KubernetesConfig(kinds=["ConfigMap", "Secret", "Pod", "Service"], namespaces=[namespace],
                         flush_interval_s=0.05),
        store.history, source="test", connect=functools.partial(KubeClient.from_kubeconfig, kubeconfig),
    )  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(collector.run(stop))
    try:
        for _ in range(600):
            if len(collector.synced) >= 4 and all(e.is_set() for e in collector.synced.values()):
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the recorder never synced")
        yield collector
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)


async def running(kube: KubeClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    await kube.create(resources.PODS, body)
    name = body["metadata"]["name"]
    for _ in range(400):
        pod = await kube.get(resources.PODS, name, namespace)
        if (pod.get("status") or {}).get("phase") == "Running":
            return pod
        await asyncio.sleep(0.05)
    pytest.fail(f"pod {name} never ran on a kwok node")


def pod(namespace: str, name: str, labels: dict[str, str], env: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "app", "image": "example.com/app:1", "env": env}]},
    }


async def broken_namespace(kube: KubeClient, kubelet: Kubelet, namespace: str) -> None:
    """A crash-looping pod with a password in its log, a pod whose ConfigMap key was renamed, a Secret with a
    planted value, and a Service whose selector matches no pod."""
    await kube.create(resources.CONFIGMAPS, {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config", "namespace": namespace},
        "data": {"DB_HOST": "db.shop.svc"},
    })  # fmt: skip
    await kube.create(resources.SECRETS, {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db-creds", "namespace": namespace},
        "stringData": {"password": PLANTED_SECRET_VALUE},
    })  # fmt: skip
    env = [
        {"name": "DB_HOST", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "DB_HOST"}}},
        {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "password"}}},
    ]
    await running(kube, namespace, pod(namespace, "api", {"app": "api"}, env))
    await running(kube, namespace, pod(namespace, "worker", {"app": "worker"}, []))
    await kube.create(resources.SERVICES, {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": namespace},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    })  # fmt: skip
    # someone renames the key the api pod reads (recorded), and the worker crash-loops, logging a password
    await kube.replace(
        resources.CONFIGMAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config", "namespace": namespace},
         "data": {"DATABASE_HOST": "db.shop.svc"}},
        namespace=namespace,
    )  # fmt: skip
    for _ in range(3):
        await kubelet.restart_container(
            namespace,
            "worker",
            "app",
            Termination.error(1),
            previous_log=[
                "starting worker",
                f"connecting to postgres://admin:{PLANTED_PASSWORD}@db:5432/shop",
                f"FATAL: password authentication failed for user admin (password={PLANTED_PASSWORD})",
            ],
        )


def assert_no_planted_secret(text: str) -> None:
    for planted in (PLANTED_PASSWORD, PLANTED_SECRET_VALUE):
        assert planted not in text
        assert base64.b64encode(planted.encode()).decode() not in text


async def test_live_snapshot_names_root_causes_and_cites_the_recorded_change(
    kube: KubeClient, namespace: str, kubeconfig: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
    store = open_store(str(tmp_path / "history.db"))
    try:
        async with recording(store, kubeconfig, namespace):
            await broken_namespace(kube, kubelet, namespace)
            for _ in range(200):  # the rename has reached the store
                if any(c.change_type == "modified" for c in store.history.timeline(kind="ConfigMap")):
                    break
                await asyncio.sleep(0.05)
        # the API server drops Events after an hour: here, all of them at once; the store still has them
        live_events, _ = await kube.list(resources.EVENTS, namespace=namespace)
        for e in live_events:
            await kube.delete(resources.EVENTS, e["metadata"]["name"], namespace)
        without_history = await read_snapshot(kube, namespace=namespace)
        snapshot = await read_snapshot(kube, namespace=namespace, history=store.history, source="test")
    finally:
        store.close()

    def backoffs(snap: Snapshot) -> list[str]:
        # a recorded Event may be the events.k8s.io view of it (``regarding``), as the recorder watched it
        return [
            str((e.get("involvedObject") or e.get("regarding") or {}).get("name"))
            for e in snap.events
            if e.get("reason") == "BackOff"
        ]

    assert live_events and backoffs(without_history) == []
    assert backoffs(snapshot) == ["worker"]  # one Event (its count bumped three times), from the store

    # the Secret reached the analyzers with its keys and without its value
    (secret,) = snapshot.of("Secret")
    assert set(secret["data"]) == {"password"} and set(secret["data"].values()) == {""}
    assert ("ConfigMap", namespace, "app-config") in {(c.kind, c.namespace, c.name) for c in snapshot.changes}
    assert (
        snapshot.logs[(namespace, "worker", "app")].count("\n") >= 2
    )  # the previous container's log, read live

    diagnosis = diagnose(snapshot)
    by_cause = {f.cause: f for f in diagnosis.findings}
    missing_key = by_cause["ConfigMap/app-config/DB_HOST"]
    assert missing_key.subject.name == "api"
    renamed = [c for c in missing_key.changes if c.kind == "ConfigMap" and c.change == "modified"]
    assert renamed and "/data" in renamed[0].summary  # the recorded rename is cited
    crash = next(f for f in diagnosis.findings if f.subject.name == "worker")
    assert any(e.source == "log-line" and "password authentication failed" in e.text for e in crash.evidence)
    assert any(f.subject.kind == "Service" and f.subject.name == "web" for f in diagnosis.findings)
    assert not diagnosis.failures and not diagnosis.blind
    assert_no_planted_secret(json.dumps(diagnosis.to_json()))


async def token_kubeconfig(kube: KubeClient, kubeconfig: Path, namespace: str, out: Path) -> Path:
    """A kubeconfig for a ServiceAccount that may read pods and Events in ``namespace`` and nothing else."""
    await kube.create(resources.SERVICE_ACCOUNTS, {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": namespace},
    })  # fmt: skip
    await kube.create(resources.ROLES, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pods-only", "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log", "events"], "verbs": ["get", "list"]}],
    })  # fmt: skip
    await kube.create(resources.ROLE_BINDINGS, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "reader", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods-only"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
    })  # fmt: skip
    answer = await kube.request(
        "POST",
        resources.SERVICE_ACCOUNTS.item_path("reader", namespace, "token"),
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    config = yaml.safe_load(await asyncio.to_thread(kubeconfig.read_text))
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])["context"]
    config["users"] = [{"name": "reader", "user": {"token": answer["status"]["token"]}}]
    context["user"] = "reader"
    await asyncio.to_thread(out.write_text, yaml.safe_dump(config))
    return out


async def test_a_kind_it_may_not_read_is_a_blind_spot_not_a_guess(
    kube: KubeClient, namespace: str, kubeconfig: Path, sandbox: Sandbox, tmp_path: Path
) -> None:
    kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
    await broken_namespace(kube, kubelet, namespace)
    reader_config = await token_kubeconfig(kube, kubeconfig, namespace, tmp_path / "reader.kubeconfig")
    async with await KubeClient.from_kubeconfig(reader_config) as reader:
        snapshot = await read_snapshot(reader, namespace=namespace)
    assert {"ConfigMap", "Secret", "Service", "Node"} <= set(snapshot.unreadable)
    assert "forbidden" in snapshot.unreadable["Secret"].reason
    diagnosis = diagnose(snapshot)
    # what it could read still diagnoses: the crash loop; what it could not is said, and never blamed
    assert any(f.subject.name == "worker" for f in diagnosis.findings)
    assert not any(
        f.cause.startswith("ConfigMap/") or f.cause.startswith("Secret/") for f in diagnosis.findings
    )
    blind = {(b.analyzer, b.kind) for b in diagnosis.blind}
    assert ("references", "ConfigMap") in blind and ("services", "Service") in blind


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from capstan.cli.main import main; main(sys.argv[1:])"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=False
    )


async def test_the_command_prints_findings_json_and_one_line_for_an_unknown_object(
    kube: KubeClient, namespace: str, kubeconfig: Path, sandbox: Sandbox
) -> None:
    kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
    await broken_namespace(kube, kubelet, namespace)
    base = ("diagnose", "-n", namespace, "--kubeconfig", str(kubeconfig))

    as_json = await asyncio.to_thread(run_cli, *base, "--output", "json")
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert {f["objects"][0]["name"] for f in body["findings"]} >= {"api", "worker", "web"}
    assert_no_planted_secret(as_json.stdout)

    about = await asyncio.to_thread(run_cli, *base, "--output", "json", "pod/api")
    assert about.returncode == 0, about.stderr
    about_api = json.loads(about.stdout)["findings"]
    assert "ConfigMap/app-config/DB_HOST" in {f["cause"] for f in about_api}
    assert all(
        "api" in {o["name"] for o in f["objects"]} for f in about_api
    )  # the worker's crash is left out

    text = await asyncio.to_thread(run_cli, *base)
    assert text.returncode == 0, text.stderr
    assert "worker" in text.stdout and "next:" in text.stdout
    assert_no_planted_secret(text.stdout)

    unknown = await asyncio.to_thread(run_cli, *base, "deploy/nope")
    assert unknown.returncode == 2
    assert unknown.stderr.strip().splitlines() == [
        f"capstan: error: Deployment/nope: not found in namespace {namespace}"
    ]
    assert "Traceback" not in unknown.stderr


def test_a_cluster_that_cannot_be_read_at_all_is_one_line_and_exit_2(tmp_path: Path) -> None:
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],  # nothing listens
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    proc = run_cli("diagnose", "--kubeconfig", str(dead))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"capstan: error: {dead}: cannot read the cluster: ")
