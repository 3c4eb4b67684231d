"""A synthetic cluster snapshot at scale for bench/diagnose.py: N pods on nodes (some with GPUs), with their
Deployments, ReplicaSets, Services, ConfigMaps, Secrets and Events at the ratios of a real cluster, and ~2 % of
the pods broken in the ways the analyzers name (crash loops with previous logs, GPU pods that cannot be
scheduled, a ConfigMap that is gone, an image that cannot be pulled, OOM kills, and Services whose selector
matches no pod). Seeded and deterministic: the same arguments give the same snapshot, object for object.

The objects carry the fields a real API server returns that the analyzers skip (managed fields left out, but
resources, probes, env, volumes, tolerations and conditions kept), so the timing pays for realistic dicts.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Any

from capstan.diagnose import Snapshot
from capstan.restarts import RecordedChange

T_SNAPSHOT = 1_796_126_400.0  # 2026-12-01T12:00:00Z, the snapshot's observed_at
T_START = "2026-12-01T09:00:00Z"
T_RECENT = "2026-12-01T11:58:00Z"
GPU_MODELS = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L4")
FAULTS = ("crashloop", "pending-gpu", "missing-configmap", "image-pull", "oom")


@dataclass
class Cluster:
    """The synthesized state and what was planted in it (``faults``: kind of fault → the pods or Services)."""

    snapshot: Snapshot
    pods: int
    nodes: int
    gpu_nodes: int
    namespaces: int
    deployments: int
    services: int
    events: int
    changes: int
    faults: dict[str, list[str]] = field(default_factory=dict)


def _meta(name: str, namespace: str, uid: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "resourceVersion": str(zlib.crc32(uid.encode()) % 10_000_000),
        "creationTimestamp": T_START,
        **extra,
    }


def _node(i: int, gpu_model: str | None) -> dict[str, Any]:
    name = f"gpu-{i:03d}" if gpu_model else f"cpu-{i:03d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": f"zone-{i % 3}",
        "node.kubernetes.io/instance-type": "p5.48xlarge" if gpu_model else "m6i.8xlarge",
    }
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "500Gi"}
    spec: dict[str, Any] = {"providerID": f"kwok://{name}"}
    if gpu_model:
        labels["nvidia.com/gpu.product"] = gpu_model
        labels["nvidia.com/gpu.count"] = "8"
        capacity["nvidia.com/gpu"] = "8"
        spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    conditions = [
        {"type": t, "status": "False", "reason": f"KubeletHas{r}", "lastHeartbeatTime": T_RECENT}
        for t, r in (
            ("MemoryPressure", "SufficientMemory"),
            ("DiskPressure", "NoDiskPressure"),
            ("PIDPressure", "SufficientPID"),
        )
    ]
    conditions.append(
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": T_RECENT}
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-node-{name}", "labels": labels, "creationTimestamp": T_START},
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": conditions,
            "nodeInfo": {"kubeletVersion": "v1.34.0", "containerRuntimeVersion": "containerd://2.1.0"},
        },
    }


def _event(
    subject: dict[str, Any], reason: str, message: str, *, type: str = "Normal", count: int = 1, seq: int
) -> dict[str, Any]:
    meta = subject["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{seq:x}", "namespace": meta.get("namespace") or "default"},
        "involvedObject": {
            "kind": subject["kind"],
            "namespace": meta.get("namespace", ""),
            "name": meta["name"],
            "uid": meta.get("uid", ""),
        },
        "type": type,
        "reason": reason,
        "message": message,
        "count": count,
        "firstTimestamp": T_START,
        "lastTimestamp": T_RECENT,
        "source": {
            "component": "kubelet" if reason not in ("FailedScheduling", "Scheduled") else "default-scheduler"
        },
    }


def synthesize(
    pods: int = 10_000, *, seed: int = 1, faulty_share: float = 0.02, max_changes: int = 5_000
) -> Cluster:
    """A snapshot of about ``pods`` pods (whole Deployments), ``faulty_share`` of them broken, with an hour of
    recorded changes (one per two pods, at most ``max_changes``: the live reader's cap)."""
    rng = random.Random(seed)
    n_nodes = max(5, pods // 20)
    n_gpu = max(len(GPU_MODELS), n_nodes // 10)
    nodes = [_node(i, GPU_MODELS[i % len(GPU_MODELS)] if i < n_gpu else None) for i in range(n_nodes)]
    gpu_names = [n["metadata"]["name"] for n in nodes[:n_gpu]]
    cpu_names = [n["metadata"]["name"] for n in nodes[n_gpu:]]
    n_namespaces = max(1, pods // 250)
    namespaces = [f"team-{i:02d}" for i in range(n_namespaces)]

    objects: dict[str, list[dict[str, Any]]] = {
        k: [] for k in ("Pod", "Deployment", "ReplicaSet", "Service", "ConfigMap", "Secret", "Namespace")
    }
    objects["Node"] = nodes
    events: list[dict[str, Any]] = []
    logs: dict[tuple[str, str, str], str] = {}
    faults: dict[str, list[str]] = {f: [] for f in (*FAULTS, "selector-mismatch")}
    for ns in namespaces:
        objects["Namespace"].append(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "uid": f"uid-ns-{ns}"},
                "status": {"phase": "Active"},
            }
        )
        objects["ConfigMap"].append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "data": {"ca.crt": "-----BEGIN CERTIFICATE-----…"},
                "metadata": _meta("kube-root-ca.crt", ns, f"uid-cm-root-{ns}"),
            }
        )
    seq = 0
    made = 0
    d = 0
    # the faulty pods are drawn at the replica level, so a broken Deployment has one broken pod or all of them
    while made < pods:
        ns = namespaces[d % n_namespaces]
        app = f"svc-{d:04d}"
        replicas = min(pods - made, rng.choice((1, 2, 2, 3, 3, 3, 4, 5, 6, 8, 10, 16)))
        gpu = rng.random() < 0.08
        image = f"registry.example/{app}:{rng.randint(1, 40)}.{rng.randint(0, 9)}"
        pod_hash = f"{rng.getrandbits(40):010x}"[:10]
        rs_name = f"{app}-{pod_hash}"
        labels = {"app": app, "tier": rng.choice(("web", "api", "worker")), "team": ns}
        cm_name, secret_name = f"{app}-config", f"{app}-credentials"
        objects["ConfigMap"].append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(cm_name, ns, f"uid-cm-{app}"),
                "data": {
                    "DB_HOST": f"db.{ns}.svc",
                    "LOG_LEVEL": "info",
                    "app.yaml": "workers: 4\ntimeout: 30s\n",
                },
            }
        )
        objects["Secret"].append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": "Opaque",
                "metadata": _meta(secret_name, ns, f"uid-s-{app}"),
                "data": {"password": ""},
            }
        )
        resources: dict[str, Any] = {
            "requests": {"cpu": "500m", "memory": "1Gi"},
            "limits": {"cpu": "2", "memory": "2Gi"},
        }
        if gpu:
            resources["requests"]["nvidia.com/gpu"] = "1"
            resources["limits"]["nvidia.com/gpu"] = "1"
        template_spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "app",
                    "image": image,
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [
                        {
                            "name": "DB_HOST",
                            "valueFrom": {"configMapKeyRef": {"name": cm_name, "key": "DB_HOST"}},
                        },
                        {
                            "name": "DB_PASSWORD",
                            "valueFrom": {"secretKeyRef": {"name": secret_name, "key": "password"}},
                        },
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    ],
                    "resources": resources,
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 10},
                    "livenessProbe": {"httpGet": {"path": "/live", "port": "http"}, "periodSeconds": 20},
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                }
            ],
            "volumes": [{"name": "config", "configMap": {"name": cm_name}}],
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
            if gpu
            else [],
        }
        candidates = cpu_names
        if gpu:
            model = rng.choice(GPU_MODELS)
            template_spec["nodeSelector"] = {"nvidia.com/gpu.product": model}
            candidates = [n for i, n in enumerate(gpu_names) if GPU_MODELS[i % len(GPU_MODELS)] == model]
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(app, ns, f"uid-deploy-{app}", labels=dict(labels), generation=3),
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": app}},
                "template": {"metadata": {"labels": dict(labels)}, "spec": template_spec},
                "progressDeadlineSeconds": 600,
            },
            "status": {
                "replicas": replicas,
                "readyReplicas": replicas,
                "availableReplicas": replicas,
                "updatedReplicas": replicas,
                "observedGeneration": 3,
                "conditions": [
                    {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                    {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
                ],
            },
        }
        objects["Deployment"].append(deployment)
        for rs_n, (rs, count) in enumerate(((rs_name, replicas), (f"{app}-{pod_hash[::-1]}", 0))):
            objects["ReplicaSet"].append(
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "metadata": _meta(
                        rs,
                        ns,
                        f"uid-rs-{rs}",
                        labels={**labels, "pod-template-hash": rs.rsplit("-", 1)[1]},
                        ownerReferences=[
                            {
                                "kind": "Deployment",
                                "name": app,
                                "uid": f"uid-deploy-{app}",
                                "controller": True,
                            }
                        ],
                        annotations={"deployment.kubernetes.io/revision": str(3 - rs_n)},
                    ),
                    "spec": {"replicas": count, "selector": {"matchLabels": {"app": app}}},
                    "status": {"replicas": count, "readyReplicas": count, "availableReplicas": count},
                }
            )
        service_selector = {"app": app}
        if rng.random() < 0.01:  # a Service whose selector matches no pod: a relabelled template
            service_selector = {"app": f"{app}-v2"}
            faults["selector-mismatch"].append(f"Service/{ns}/{app}")
        objects["Service"].append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": _meta(app, ns, f"uid-svc-{app}", labels=dict(labels)),
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": f"10.96.{d // 250}.{d % 250}",
                    "selector": service_selector,
                    "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}],
                },
            }
        )
        broken = rng.random() < faulty_share * 1.6  # ~2 % of pods: some Deployments break in one replica only
        kind_of_fault = rng.choice(FAULTS)
        if kind_of_fault == "pending-gpu" and not gpu:
            kind_of_fault = "crashloop"
        for r in range(replicas):
            name = f"{rs_name}-{rng.getrandbits(25):05x}"[: len(rs_name) + 6]
            is_broken = broken and (
                r == 0 or kind_of_fault in ("pending-gpu", "missing-configmap", "image-pull")
            )
            pod = _pod(name, ns, labels, rs_name, pod_hash, template_spec, candidates, rng)
            if is_broken:
                seq = _break(pod, kind_of_fault, events, logs, objects, rng, seq, n_nodes, n_gpu)
                faults[kind_of_fault].append(f"Pod/{ns}/{name}")
            elif rng.random() < 0.3:  # recent starts leave the kubelet's Normal Events
                for reason, message in (
                    ("Scheduled", f"Successfully assigned {ns}/{name} to {pod['spec']['nodeName']}"),
                    ("Pulled", f'Container image "{image}" already present on machine'),
                    ("Created", "Created container: app"),
                    ("Started", "Started container app"),
                ):
                    seq += 1
                    events.append(_event(pod, reason, message, seq=seq))
            objects["Pod"].append(pod)
            made += 1
        d += 1
    changes = _changes(objects, faults, rng, min(max_changes, made // 2))
    snapshot = Snapshot(objects=objects, events=events, logs=logs, changes=changes, observed_at=T_SNAPSHOT)
    return Cluster(
        snapshot=snapshot,
        pods=made,
        nodes=n_nodes,
        gpu_nodes=n_gpu,
        namespaces=n_namespaces,
        deployments=d,
        services=len(objects["Service"]),
        events=len(events),
        changes=len(changes),
        faults=faults,
    )


def _pod(
    name: str,
    ns: str,
    labels: dict[str, str],
    rs_name: str,
    pod_hash: str,
    template_spec: dict[str, Any],
    node_names: list[str],
    rng: random.Random,
) -> dict[str, Any]:
    spec = {
        **template_spec,
        "containers": [dict(c) for c in template_spec["containers"]],
        "nodeName": rng.choice(node_names),
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "dnsPolicy": "ClusterFirst",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(
            name,
            ns,
            f"uid-pod-{name}",
            labels={**labels, "pod-template-hash": pod_hash},
            ownerReferences=[
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": rs_name,
                    "uid": f"uid-rs-{rs_name}",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        ),
        "spec": spec,
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "podIP": f"10.244.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
            "hostIP": f"10.0.{rng.randint(0, 7)}.{rng.randint(1, 254)}",
            "startTime": T_START,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": T_START}
                for t in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "containerStatuses": [
                {
                    "name": "app",
                    "image": template_spec["containers"][0]["image"],
                    "imageID": f"registry.example/sha256:{rng.getrandbits(64):016x}",
                    "containerID": f"containerd://{rng.getrandbits(64):016x}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": T_START}},
                }
            ],
        },
    }


_CRASH_LOGS = (
    "INFO starting worker pool (4 workers)\nINFO connecting to db.{ns}.svc:5432\n"
    "ERROR dial tcp 10.96.4.12:5432: connect: connection refused\nFATAL cannot reach the database, exiting\n",
    "INFO loading model weights\n[rank0]:[E1201 11:57:02 ProcessGroupNCCL.cpp:616] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=412, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out.\n",
    'Traceback (most recent call last):\n  File "/app/main.py", line 12, in <module>\n'
    "KeyError: 'REDIS_URL'\nerror: environment variable REDIS_URL is not set\n",
)


def _break(
    pod: dict[str, Any],
    fault: str,
    events: list[dict[str, Any]],
    logs: dict[tuple[str, str, str], str],
    objects: dict[str, list[dict[str, Any]]],
    rng: random.Random,
    seq: int,
    n_nodes: int,
    n_gpu: int,
) -> int:
    meta, status = pod["metadata"], pod["status"]
    ns, name = meta["namespace"], meta["name"]
    cs = status["containerStatuses"][0]
    for cond in status["conditions"]:
        if cond["type"] in ("Ready", "ContainersReady"):
            cond["status"] = "False"
    cs["ready"] = False
    seq += 1
    if fault == "crashloop":
        restarts = rng.randint(3, 40)
        cs.update(
            restartCount=restarts,
            started=False,
            state={
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off 5m0s restarting failed container=app pod={name}",
                }
            },
            lastState={
                "terminated": {
                    "reason": "Error",
                    "exitCode": 1,
                    "startedAt": T_RECENT,
                    "finishedAt": T_RECENT,
                    "containerID": cs["containerID"],
                }
            },
        )
        logs[(ns, name, "app")] = rng.choice(_CRASH_LOGS).format(ns=ns)
        events.append(
            _event(
                pod,
                "BackOff",
                "Back-off restarting failed container app in pod " + name,
                type="Warning",
                count=restarts * 3,
                seq=seq,
            )
        )
    elif fault == "oom":
        cs.update(
            restartCount=rng.randint(1, 9),
            state={
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": "back-off 2m40s restarting failed container",
                }
            },
            lastState={
                "terminated": {
                    "reason": "OOMKilled",
                    "exitCode": 137,
                    "startedAt": T_RECENT,
                    "finishedAt": T_RECENT,
                }
            },
        )
        events.append(
            _event(pod, "BackOff", "Back-off restarting failed container app", type="Warning", seq=seq)
        )
    elif fault == "image-pull":
        image = pod["spec"]["containers"][0]["image"] + "-rc"
        pod["spec"]["containers"][0]["image"] = image
        cs.update(
            image=image,
            state={"waiting": {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{image}"'}},
        )
        events.append(
            _event(
                pod,
                "Failed",
                f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull '
                f'and unpack image "{image}": not found',
                type="Warning",
                count=6,
                seq=seq,
            )
        )
    elif fault == "missing-configmap":
        missing = f"{meta['labels']['app']}-settings"
        container = pod["spec"]["containers"][0]
        container["env"] = [
            *container["env"],
            {"name": "FEATURE_FLAGS", "valueFrom": {"configMapKeyRef": {"name": missing, "key": "flags"}}},
        ]
        cs.update(
            started=False,
            state={
                "waiting": {
                    "reason": "CreateContainerConfigError",
                    "message": f'configmap "{missing}" not found',
                }
            },
        )
        events.append(
            _event(
                pod, "Failed", f'Error: configmap "{missing}" not found', type="Warning", count=12, seq=seq
            )
        )
    elif fault == "pending-gpu":
        del pod["spec"]["nodeName"]
        status.pop("podIP", None)
        status.pop("hostIP", None)
        status["phase"] = "Pending"
        status.pop("containerStatuses")
        message = (
            f"0/{n_nodes} nodes are available: {n_gpu} Insufficient nvidia.com/gpu, {n_nodes - n_gpu} node(s) "
            "didn't match Pod's node affinity/selector. preemption: 0/{n} nodes are available: {g} No preemption "
            "victims found for incoming pod, {c} Preemption is not helpful for scheduling."
        ).format(n=n_nodes, g=n_gpu, c=n_nodes - n_gpu)
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": T_RECENT,
            }
        ]
        events.append(_event(pod, "FailedScheduling", message, type="Warning", count=4, seq=seq))
    return seq


def _changes(
    objects: dict[str, list[dict[str, Any]]], faults: dict[str, list[str]], rng: random.Random, limit: int
) -> list[RecordedChange]:
    """An hour of what the recorder keeps: mostly status reports (pods' conditions, Deployments' replica counts,
    node heartbeats that changed a condition), some spec and data edits, pods created by rollouts; and, before
    some of the planted faults, the edit that caused them (a Deployment's template, a Service's selector)."""
    out: list[RecordedChange] = []
    t0 = T_SNAPSHOT - 3600
    for key in faults["selector-mismatch"]:
        _, ns, name = key.split("/", 2)
        out.append(
            RecordedChange(T_SNAPSHOT - 300, "Service", ns, name, "modified", "replace /spec/selector/app")
        )
    for key in faults["crashloop"][::2] + faults["missing-configmap"]:
        _, ns, pod = key.split("/", 2)
        app = pod.rsplit("-", 2)[0]
        out.append(
            RecordedChange(
                T_SNAPSHOT - 600,
                "Deployment",
                ns,
                app,
                "modified",
                "replace /spec/template/spec/containers/0/env; replace /metadata/generation",
            )
        )
    pools = [(k, objects[k]) for k in ("Pod", "Pod", "Pod", "Deployment", "ReplicaSet", "ConfigMap", "Node")]
    while len(out) < limit:
        kind, pool = rng.choice(pools)
        obj = rng.choice(pool)
        meta = obj["metadata"]
        at = t0 + rng.random() * 3600
        roll = rng.random()
        if roll < 0.7:
            summary = {
                "Pod": "replace /status/conditions/1/status; replace /status/containerStatuses/0/ready",
                "Deployment": "replace /status/readyReplicas; replace /status/availableReplicas",
                "ReplicaSet": "replace /status/readyReplicas",
                "Node": "replace /status/conditions/3/lastTransitionTime",
            }.get(kind, "replace /data/LOG_LEVEL")
            out.append(RecordedChange(at, kind, meta.get("namespace", ""), meta["name"], "modified", summary))
        elif roll < 0.9:
            out.append(
                RecordedChange(
                    at,
                    kind,
                    meta.get("namespace", ""),
                    meta["name"],
                    "modified",
                    "replace /metadata/annotations/deployment.kubernetes.io~1revision",
                )
            )
        else:
            out.append(RecordedChange(at, kind, meta.get("namespace", ""), meta["name"], "added", "added"))
    return sorted(out[:limit], key=lambda c: (c.at, c.kind, c.namespace, c.name))
