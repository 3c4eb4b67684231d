"""Planted secrets: nothing secret leaves Capstan, on SQLite and on PostgreSQL.

Distinct known secrets, each of a real shape or under a sensitive name, are planted in every recorded kind (its
annotations and labels, its containers' env, args and command, the last-applied annotation kubectl writes, ConfigMap
and Secret data), in Events, in a Redis server's parameters (``requirepass``, ``masterauth`` changed while
recorded), in slow command arguments and client names, in an ACL LOG entry, and in every source of restart
evidence (termination message, probe and other Events, the previous log, env and args). Then ``capstan record``
(Kubernetes + Redis + OTLP to a loopback receiver) and ``capstan restarts run`` (to a local Slack receiver) run as
the real processes, and every output is searched: the store's rows, every route of the HTTP API, the CLI's JSON,
the OTLP payloads, the outbox and the delivered chat messages, and both processes' own logs. The test also checks
that the planted data reached each output (redacted), so it cannot pass by recording nothing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from capstan.faults import Kubelet, Termination
from capstan.kube import KubeClient, resources
from capstan.notify import DEV_WEBHOOK_PATH, SlackReceiver, serve_in_thread
from capstan.sandbox import RedisServer, Sandbox
from capstan.store import Store, create_history_app, open_store
from tests.integration.store._loopback import serve

pytestmark = pytest.mark.integration

CAPSTAN = str(Path(sys.executable).with_name("capstan"))


class Plants:
    """Distinct secrets, one per place, each remembered with where it was planted (so a hit names the leak)."""

    def __init__(self) -> None:
        self.where: dict[str, str] = {}
        self._n = 0

    def core(self, where: str) -> str:
        self._n += 1
        # 16 upper-case letters and digits: fits every shape below (an AWS key id holds exactly 16)
        value = f"PLNT{self._n:03d}{secrets.token_hex(8).upper()}"[:16]
        self.where[value] = where
        return value

    # each returns the text to plant; the core is what must never appear in any output
    def raw(self, where: str) -> str:
        return self.core(where)

    def url(self, where: str) -> str:
        return f"postgres://app:{self.core(where)}@db.internal:5432/app"

    def kv(self, where: str) -> str:
        return f"connecting with password={self.core(where)} to db"

    def bearer(self, where: str) -> str:
        return f"Authorization: Bearer {self.core(where)}"

    def aws(self, where: str) -> str:
        return f"AKIA{self.core(where)}"

    def github(self, where: str) -> str:
        return "ghp_" + self.core(where) + "abcdefghijklmnopqrst"

    def slack(self, where: str) -> str:
        return f"xoxb-1234567890-{self.core(where)}"

    def jwt(self, where: str) -> str:
        return f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.{self.core(where)}"

    def pem(self, where: str) -> str:
        return f"-----BEGIN PRIVATE KEY-----\nMII{self.core(where)}\n-----END PRIVATE KEY-----"

    def hits(self, outputs: dict[str, str]) -> dict[str, list[str]]:
        """planted place -> the outputs that contain its secret."""
        found: dict[str, list[str]] = {}
        for core, where in self.where.items():
            for name, text in outputs.items():
                if core in text:
                    found.setdefault(where, []).append(name)
        return found


def _meta(
    p: Plants, kind: str, name: str, namespace: str | None, manifest_env: str | None = None
) -> dict[str, Any]:
    annotations = {
        "example.com/db-password": p.raw(f"{kind} annotation by name"),
        "example.com/notes": p.url(f"{kind} annotation URL"),
        "example.com/ci": p.github(f"{kind} annotation token shape"),
    }
    last_applied: dict[str, Any] = {
        "kind": kind,
        "metadata": {"name": name},
        "data": {"token": p.raw(f"{kind} last-applied")},
    }
    if manifest_env is not None:
        last_applied["spec"] = {
            "template": {
                "spec": {"containers": [{"name": "c", "env": [{"name": "API_TOKEN", "value": manifest_env}]}]}
            }
        }
    annotations["kubectl.kubernetes.io/last-applied-configuration"] = json.dumps(last_applied)
    meta: dict[str, Any] = {
        "name": name,
        "annotations": annotations,
        "labels": {"capstan-test/key-id": p.aws(f"{kind} label")},
    }
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _pod_spec(p: Plants, kind: str) -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": "main",
                "image": "example.com/app:1",
                "command": ["sh", "-c", f"curl -H '{p.bearer(f'{kind} command')}' http://api"],
                "args": [
                    f"--db-password={p.raw(f'{kind} args flag')}",
                    "--token",
                    p.raw(f"{kind} args value"),
                ],
                "env": [
                    {"name": "DB_PASSWORD", "value": p.raw(f"{kind} env by name")},
                    {"name": "DATABASE_URL", "value": p.url(f"{kind} env URL")},
                    {"name": "MODE", "value": "production"},
                ],
            }
        ],
        "initContainers": [
            {
                "name": "init",
                "image": "example.com/init:1",
                "env": [{"name": "HF_TOKEN", "value": p.raw(f"{kind} init env")}],
            }
        ],
    }


def _objects(p: Plants, ns: str) -> list[tuple[Any, dict[str, Any]]]:
    """One object of every recorded kind, each carrying its own planted secrets."""
    labels = {"app": "planted"}

    def m(kind: str, name: str, namespaced: bool = True, env: bool = False) -> dict[str, Any]:
        return _meta(
            p, kind, name, ns if namespaced else None, p.raw(f"{kind} last-applied env") if env else None
        )

    def template(kind: str) -> dict[str, Any]:
        return {"metadata": {"labels": labels}, "spec": _pod_spec(p, kind)}

    cluster_suffix = ns[-20:]
    return [
        (resources.CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": m("ConfigMap", "app-config"),
                                "data": {"REDIS_PASSWORD": p.raw("ConfigMap data by name"),
                                         "settings.yaml": f"db: {p.url('ConfigMap data URL')}\nslack: {p.slack('ConfigMap data token')}",
                                         "tls.key": p.pem("ConfigMap data PEM")}}),
        (resources.SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": m("Secret", "creds"),
                             "data": {"password": base64.b64encode(p.raw("Secret data").encode()).decode()},
                             "stringData": {"token": p.raw("Secret stringData")}}),
        (resources.DEPLOYMENTS, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": m("Deployment", "web", env=True),
                                 "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template("Deployment")}}),
        (resources.REPLICASETS, {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": m("ReplicaSet", "rs"),
                                 "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": template("ReplicaSet")}}),
        (resources.STATEFULSETS, {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": m("StatefulSet", "db"),
                                  "spec": {"replicas": 0, "serviceName": "db", "selector": {"matchLabels": labels},
                                           "template": template("StatefulSet")}}),
        (resources.DAEMONSETS, {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": m("DaemonSet", "agent"),
                                "spec": {"selector": {"matchLabels": labels},
                                         "template": {**template("DaemonSet"), "spec": {**_pod_spec(p, "DaemonSet"),
                                                      "nodeSelector": {"capstan-test/none": "none"}}}}}),
        (resources.JOBS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": m("Job", "migrate"),
                          "spec": {"suspend": True, "template": {**template("Job"), "spec": {**_pod_spec(p, "Job"), "restartPolicy": "Never"}}}}),
        (resources.CRONJOBS, {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": m("CronJob", "backup"),
                              "spec": {"schedule": "0 0 1 1 *", "suspend": True, "jobTemplate": {"spec": {"template": {
                                  **template("CronJob"), "spec": {**_pod_spec(p, "CronJob"), "restartPolicy": "Never"}}}}}}),
        (resources.SERVICES, {"apiVersion": "v1", "kind": "Service", "metadata": m("Service", "web"),
                              "spec": {"selector": labels, "ports": [{"port": 80}]}}),
        (resources.resource_for("EndpointSlice"), {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                                                   "metadata": m("EndpointSlice", "web-x"), "addressType": "IPv4", "endpoints": []}),
        (resources.resource_for("Ingress"), {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": m("Ingress", "web"),
                                             "spec": {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}),
        (resources.resource_for("PersistentVolumeClaim"), {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                                           "metadata": m("PersistentVolumeClaim", "data"),
                                                           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        (resources.resource_for("PersistentVolume"), {"apiVersion": "v1", "kind": "PersistentVolume",
                                                      "metadata": m("PersistentVolume", f"pv-{cluster_suffix}", namespaced=False),
                                                      "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                                               "hostPath": {"path": "/tmp/x"}}}),
        (resources.resource_for("HorizontalPodAutoscaler"), {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                                                             "metadata": m("HorizontalPodAutoscaler", "web"),
                                                             "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                                                                      "minReplicas": 1, "maxReplicas": 2}}),
        (resources.resource_for("PodDisruptionBudget"), {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                                                         "metadata": m("PodDisruptionBudget", "web"),
                                                         "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}}),
        (resources.resource_for("ResourceQuota"), {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": m("ResourceQuota", "q"),
                                                   "spec": {"hard": {"pods": "100"}}}),
        (resources.resource_for("LimitRange"), {"apiVersion": "v1", "kind": "LimitRange", "metadata": m("LimitRange", "lr"),
                                                "spec": {"limits": [{"type": "Container", "default": {"memory": "1Gi"}}]}}),
        (resources.resource_for("NetworkPolicy"), {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                                                   "metadata": m("NetworkPolicy", "deny"), "spec": {"podSelector": {}}}),
        (resources.resource_for("Role"), {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": m("Role", "reader"),
                                          "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        (resources.resource_for("RoleBinding"), {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                                                 "metadata": m("RoleBinding", "reader"),
                                                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
                                                 "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]}),
        (resources.resource_for("ClusterRole"), {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                                 "metadata": m("ClusterRole", f"reader-{cluster_suffix}", namespaced=False),
                                                 "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        (resources.resource_for("ClusterRoleBinding"), {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                                                        "metadata": m("ClusterRoleBinding", f"reader-{cluster_suffix}", namespaced=False),
                                                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                                    "name": f"reader-{cluster_suffix}"},
                                                        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]}),
    ]  # fmt: skip


@contextlib.contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A real OTLP/HTTP logs endpoint on loopback that keeps every request body."""
    bodies: list[bytes] = []

    async def logs(request: Request) -> Response:
        bodies.append(await request.body())
        return Response(b"", media_type="application/x-protobuf")

    with serve(Starlette(routes=[Route("/v1/logs", logs, methods=["POST"])])) as base:
        yield f"{base}/v1/logs", bodies


@contextlib.asynccontextmanager
async def process(argv: list[str], log: Path, env: dict[str, str]) -> AsyncIterator[subprocess.Popen[bytes]]:
    """A Capstan process with its stderr (its own logs) kept in ``log``; stopped with SIGTERM as an operator would."""
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.to_thread(proc.wait, 60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


async def eventually(
    predicate: Callable[[], Any], what: str, proc: subprocess.Popen[bytes], log: Path
) -> None:
    for _ in range(900):  # bounded: 90 s
        if await asyncio.to_thread(predicate):
            return
        if proc.poll() is not None:
            tail = (await asyncio.to_thread(log.read_text))[-2000:]
            pytest.fail(f"{what}: the process exited ({proc.returncode}): {tail}")
        await asyncio.sleep(0.1)
    tail = (await asyncio.to_thread(log.read_text))[-2000:]
    pytest.fail(f"timed out waiting for {what}; log: {tail}")


def _annotated(store: Store, namespace: str) -> bool:
    version = store.history.object_at("Namespace", "", namespace, time.time(), source="planted")
    return version is not None and "example.com/notes" in json.dumps(version.object)


def _served(store: Store, namespace: str) -> dict[str, str]:
    """Every route of the HTTP API, for every recorded object of the test."""
    outputs: dict[str, str] = {}
    with serve(create_history_app(store.history)) as api, httpx.Client(base_url=api, timeout=30) as http:
        for route in ("timeline", "events", "engine", "gaps", "restarts"):
            outputs[f"HTTP /v1/{route}"] = http.get(f"/v1/{route}", params={"limit": 1000}).text
        changes = store.history.timeline(source="planted", namespace=namespace, limit=1000)
        changes += store.history.timeline(source="planted", namespace="", limit=1000)
        for change in changes:
            q = {"kind": change.kind, "namespace": change.namespace, "name": change.name}
            outputs[f"HTTP /v1/object {change.kind}/{change.name}"] = http.get("/v1/object", params=q).text
            outputs[f"HTTP /v1/diff {change.kind}/{change.name}"] = http.get(
                "/v1/diff", params={**q, "since": "0"}
            ).text
    return outputs


def _cli(store_url: str, namespace: str, env: dict[str, str]) -> dict[str, str]:
    """The CLI's JSON (and one table) through the real console script."""
    cli = {
        "timeline": ["history", "timeline", "--store", store_url, "--limit", "100000", "-o", "json"],
        "events": ["history", "events", "--store", store_url, "-o", "json"],
        "engine": ["history", "engine", "--store", store_url, "-o", "json"],
        "object": [
            "history",
            "object",
            "Deployment",
            "web",
            "-n",
            namespace,
            "--store",
            store_url,
            "-o",
            "json",
        ],
        "engine table": ["history", "engine", "--store", store_url],
        "outbox": ["restarts", "outbox", "--store", store_url, "--state", "all", "-o", "json"],
        "outbox message": ["restarts", "outbox", "--store", store_url, "--show", "1", "-o", "json"],
    }
    outputs: dict[str, str] = {}
    for name, argv in cli.items():
        done = subprocess.run([CAPSTAN, *argv], capture_output=True, env=env, timeout=120, check=False)
        assert done.returncode == 0, (name, done.stderr.decode()[-2000:])
        outputs[f"CLI {name}"] = done.stdout.decode() + done.stderr.decode()
    return outputs


def _plant_redis(p: Plants, server: RedisServer, password: str) -> None:
    admin = redis.Redis(
        host="127.0.0.1", port=server.port, password=password, client_name=p.github("Redis client name")
    )
    admin.config_set("slowlog-log-slower-than", 0)
    admin.set("session:1", p.url("Redis slow command URL argument"))
    admin.hset("user:1", mapping={"password": p.raw("Redis slow command field value"), "name": "bob"})
    admin.set("api_token", p.raw("Redis slow command value of a secret key"))
    admin.execute_command("SET", "note", p.kv("Redis slow command key=value argument"))  # type: ignore[no-untyped-call]
    admin.acl_setuser("alice", enabled=True, passwords=["+alice-pw-1"], keys=["allowed:*"], commands=["+get"])
    alice = redis.Redis(host="127.0.0.1", port=server.port, username="alice", password="alice-pw-1")
    with contextlib.suppress(redis.ResponseError):
        alice.get(f"denied:{p.aws('ACL LOG object')}")  # denied: an ACL LOG entry naming the key
    alice.close()
    admin.close()


async def test_no_planted_secret_reaches_any_output(
    kube: KubeClient,
    namespace: str,
    kubeconfig: Path,
    sandbox: Sandbox,
    history_store_url: str,
    redis_factory: Callable[..., RedisServer],
    tmp_path: Path,
) -> None:
    p = Plants()
    password = p.raw("Redis requirepass")
    server = redis_factory("--requirepass", password, "--masterauth", p.raw("Redis masterauth, first value"))
    env = {**os.environ, "PLANTED_REDIS_PASSWORD": password}
    with otlp_receiver() as (otlp_url, otlp_bodies):
        record_yaml = tmp_path / "record.yaml"
        record_yaml.write_text(
            json.dumps(
                {
                    "store": history_store_url,
                    "source": "planted",
                    "kubernetes": {"kubeconfig": str(kubeconfig), "flush_interval_s": 0.05},
                    "redis": [
                        {
                            "name": "cache",
                            "address": server.address,
                            "password_env": "PLANTED_REDIS_PASSWORD",
                            "poll_interval_s": 0.2,
                        }
                    ],
                    "otlp": {"endpoint": otlp_url, "timeout_s": 5},
                }
            )
        )
        store = open_store(history_store_url)
        record_log = tmp_path / "record.log"
        async with process(
            [CAPSTAN, "--log-json", "record", "--config", str(record_yaml)], record_log, env
        ) as rec:
            await eventually(
                lambda: store.history.engine_cursor("cache", "config") is not None,
                "the first Redis poll",
                rec,
                record_log,
            )
            await eventually(
                lambda: store.history.kind_cursor("planted", "apps/v1/Deployment") is not None,
                "the recorder's first list",
                rec,
                record_log,
            )
            # the cluster: every recorded kind, an Event, the namespace itself
            for resource, body in _objects(p, namespace):
                await kube.create(resource, body, namespace if resource.namespaced else None)
            await kube.patch(
                resources.NAMESPACES, namespace, {"metadata": _meta(p, "Namespace", namespace, None)}
            )
            cm = await kube.get(resources.CONFIGMAPS, "app-config", namespace)
            kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
            await kubelet.event(cm, "Reloaded", p.kv("Event message"), type_="Warning")
            # Redis: a changed secret parameter, slow commands, a client name and an ACL LOG entry
            _plant_redis(p, server, password)
            changed = redis.Redis(host="127.0.0.1", port=server.port, password=password)
            changed.config_set("masterauth", p.raw("Redis masterauth, changed value"))
            changed.close()
            await eventually(
                lambda: any(
                    e.payload.get("parameter") == "masterauth"
                    for e in store.history.engine_entries(target="cache", log_name="config")
                ),
                "the masterauth change",
                rec,
                record_log,
            )
            await eventually(
                lambda: any(e.reason == "Reloaded" for e in store.history.events(namespace=namespace)),
                "the Event",
                rec,
                record_log,
            )
            await eventually(
                lambda: _annotated(store, namespace), "the namespace's annotations", rec, record_log
            )
            await eventually(
                lambda: any(e.log == "acllog" for e in store.history.engine_entries(target="cache")),
                "the ACL LOG entry",
                rec,
                record_log,
            )

            # restart evidence: a pod with secrets in env and args, a termination message, Events, the previous log
            receiver = SlackReceiver()
            with serve_in_thread(receiver.app) as slack:
                restarts_yaml = tmp_path / "restarts.yaml"
                restarts_yaml.write_text(
                    json.dumps(
                        {
                            "cluster_name": "planted",
                            "sinks": [
                                {
                                    "name": "slack",
                                    "type": "slack_webhook",
                                    "url": f"{slack.url}/services/{DEV_WEBHOOK_PATH}",
                                }
                            ],
                            "mute_seconds": 0,
                            "delivery": {"rate_per_second": 50, "burst": 50, "idle_interval_seconds": 0.05},
                        }
                    )
                )
                pod = await kube.create(
                    resources.PODS,
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": _meta(p, "Pod", "crashy", namespace),
                        "spec": _pod_spec(p, "Pod"),
                    },
                    namespace,
                )
                for _ in range(400):
                    pod = await kube.get(resources.PODS, "crashy", namespace)
                    if (pod.get("status") or {}).get("phase") == "Running":
                        break
                    await asyncio.sleep(0.05)
                watch_log = tmp_path / "restarts.log"
                argv = [CAPSTAN, "--log-json", "restarts", "run", "--config", str(restarts_yaml), "--kubeconfig", str(kubeconfig),
                        "--store", history_store_url, "--namespace", namespace, "--source", "planted"]  # fmt: skip
                async with process(argv, watch_log, env) as watcher:
                    uid = pod["metadata"]["uid"]
                    await eventually(
                        lambda: any(key[0] == uid for key in store.restart_records.restart_counts()),
                        "the watcher's baseline of the pod",
                        watcher,
                        watch_log,
                    )
                    await kubelet.event(pod, "BackOff", p.bearer("restart Event message"), type_="Warning")
                    await kubelet.probe_failure(
                        namespace, "crashy", "main", "Liveness", message=p.kv("probe failure output"), failures=2,
                        previous_log=["starting", p.url("previous log URL"), p.aws("previous log AWS key"),
                                      p.jwt("previous log JWT"), *p.pem("previous log PEM").splitlines(),
                                      p.slack("previous log Slack token")],
                    )  # fmt: skip
                    await kubelet.restart_container(
                        namespace, "crashy", "main", Termination.error(1, p.bearer("termination message")),
                        previous_log=["boom", p.kv("previous log key=value")],
                    )  # fmt: skip
                    await eventually(
                        lambda: len(receiver.messages) >= 2,
                        "two restart reports in Slack",
                        watcher,
                        watch_log,
                    )
                    await eventually(
                        lambda: all(i.state == "sent" for i in store.outbox.items(limit=100)),
                        "delivery",
                        watcher,
                        watch_log,
                    )

            # every output
            outputs: dict[str, str] = {
                "store rows": "\n".join(store.database.dump_all_text()),
                "Slack messages": json.dumps(receiver.snapshot(), default=str),
                "outbox": json.dumps(
                    [(i.payload, i.last_error) for i in store.outbox.items(limit=1000)], default=str
                ),
            }
            outputs.update(await asyncio.to_thread(_served, store, namespace))
        outputs.update(await asyncio.to_thread(_cli, history_store_url, namespace, env))
        outputs["OTLP payloads"] = b"".join(otlp_bodies).decode("utf-8", "replace")
        outputs["capstan record log"] = await asyncio.to_thread(record_log.read_text)
        outputs["capstan restarts run log"] = await asyncio.to_thread(watch_log.read_text)
        store.close()

    # nothing leaked ...
    assert p.hits(outputs) == {}
    # ... and it is not because nothing was recorded, served or sent: the planted places reached every output
    for name in ("store rows", "HTTP /v1/timeline", "CLI timeline", "OTLP payloads"):
        assert "[REDACTED:" in outputs[name] and "example.com/db-password" in outputs[name], name
    for name in ("HTTP /v1/engine", "CLI engine"):
        assert "masterauth" in outputs[name] and "[REDACTED:" in outputs[name], name
    assert "DB_PASSWORD" in outputs["HTTP /v1/object Deployment/web"]
    assert "Liveness probe failed" in outputs["Slack messages"] and "[REDACTED:" in outputs["Slack messages"]
    assert "Termination message" in outputs["Slack messages"]
    assert "restart reported" in outputs["capstan restarts run log"]
    assert len(p.where) > 150
