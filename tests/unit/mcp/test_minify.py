"""The three minify levels over a typical pod, workload, node and Secret: what each keeps, what it drops, and how
much smaller each is (the figures in capstan.mcp._minify's docstring)."""

from __future__ import annotations

import copy
from typing import Any

from capstan.jsontext import dumps
from capstan.mcp._minify import minify, probe_text
from capstan.tokens import count_tokens


def typical_pod() -> dict[str, Any]:
    """A Deployment's pod as the API server returns it (one container, env, probes, mounts, managedFields)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-7d9c8b6f5d-x2k4p",
            "generateName": "web-7d9c8b6f5d-",
            "namespace": "shop",
            "uid": "0f6b3c7e-8a1d-4a55-9c1e-2b7f4e9d1a00",
            "resourceVersion": "48211",
            "creationTimestamp": "2026-12-01T09:58:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d9c8b6f5d"},
            "annotations": {
                "kubectl.kubernetes.io/restartedAt": "2026-12-01T09:57:00Z",
                "prometheus.io/scrape": "true",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d9c8b6f5d",
                    "uid": "5b1e2c9a-1111-4c2d-8e7f-000000000001",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-12-01T09:58:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}}},
                        "f:spec": {
                            "f:containers": {'k:{"name":"app"}': {".": {}, "f:image": {}, "f:env": {}}}
                        },
                    },
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-12-01T09:59:00Z",
                    "fieldsType": "FieldsV1",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:podIP": {}}},
                },
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example.com/shop/web:1.4.2",
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                    "env": [
                        {"name": "LOG_LEVEL", "value": "info"},
                        {"name": "DB_PASSWORD", "value": "[REDACTED]"},
                        {"name": "DB_URL", "valueFrom": {"secretKeyRef": {"name": "db", "key": "url"}}},
                    ],
                    "envFrom": [{"configMapRef": {"name": "web-config"}}],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"memory": "256Mi"},
                    },
                    "livenessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                        "initialDelaySeconds": 5,
                        "periodSeconds": 10,
                        "timeoutSeconds": 1,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "readinessProbe": {
                        "tcpSocket": {"port": 8080},
                        "periodSeconds": 5,
                        "timeoutSeconds": 1,
                        "successThreshold": 1,
                        "failureThreshold": 3,
                    },
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/var/lib/web"},
                        {
                            "name": "kube-api-access-abcde",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        },
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
                }
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "web-data"}},
                {
                    "name": "kube-api-access-abcde",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                    },
                },
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": "node-1",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "PodReadyToStartContainers",
                    "status": "True",
                    "lastTransitionTime": "2026-12-01T09:58:02Z",
                },
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-12-01T09:58:00Z"},
                {
                    "type": "Ready",
                    "status": "False",
                    "lastTransitionTime": "2026-12-01T09:59:00Z",
                    "reason": "ContainersNotReady",
                    "message": "containers with unready status: [app]",
                },
                {
                    "type": "ContainersReady",
                    "status": "False",
                    "lastTransitionTime": "2026-12-01T09:59:00Z",
                    "reason": "ContainersNotReady",
                    "message": "containers with unready status: [app]",
                },
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T09:58:00Z"},
            ],
            "hostIP": "10.0.0.11",
            "hostIPs": [{"ip": "10.0.0.11"}],
            "podIP": "10.244.1.17",
            "podIPs": [{"ip": "10.244.1.17"}],
            "startTime": "2026-12-01T09:58:00Z",
            "containerStatuses": [
                {
                    "name": "app",
                    "state": {
                        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}
                    },
                    "lastState": {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "startedAt": "2026-12-01T10:00:00Z",
                            "finishedAt": "2026-12-01T10:00:03Z",
                            "containerID": "containerd://aa11bb22cc33dd44ee55ff6600112233445566778899aabbccddeeff00112233",
                        }
                    },
                    "ready": False,
                    "restartCount": 4,
                    "image": "registry.example.com/shop/web:1.4.2",
                    "imageID": "registry.example.com/shop/web@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                    "containerID": "containerd://aa11bb22cc33dd44ee55ff6600112233445566778899aabbccddeeff00112233",
                    "started": False,
                }
            ],
            "qosClass": "Burstable",
        },
    }


def tokens_of(data: Any) -> int:
    return count_tokens(dumps(data))


def test_each_level_is_smaller_than_the_one_above() -> None:
    pod = typical_pod()
    raw, detail = tokens_of(pod), tokens_of(minify(pod, "detail"))
    compact, summary = tokens_of(minify(pod, "compact")), tokens_of(minify(pod, "summary"))
    assert summary < compact < detail < raw
    assert (
        compact <= raw * 0.45
    )  # the docstring's measured figures, with room: compact is at most 45 % of raw
    assert summary <= 100


def test_minify_is_pure_and_deterministic() -> None:
    pod = typical_pod()
    before = copy.deepcopy(pod)
    for level in ("summary", "compact", "detail"):
        first = minify(pod, level)
        assert dumps(first) == dumps(minify(copy.deepcopy(pod), level))
    assert pod == before


def test_summary_is_identity_and_health() -> None:
    assert minify(typical_pod(), "summary") == {
        "kind": "Pod",
        "namespace": "shop",
        "name": "web-7d9c8b6f5d-x2k4p",
        "phase": "Running",
        "ready": "0/1",
        "restarts": 4,
        "reasons": ["CrashLoopBackOff", "Error"],
        "node": "node-1",
        "images": ["registry.example.com/shop/web:1.4.2"],
    }


def test_compact_drops_noise_and_keeps_what_explains_a_failure() -> None:
    out = minify(typical_pod(), "compact")
    text = dumps(out)
    for noise in ("managedFields", "resourceVersion", "uid", "podIP", "hostIP", "qosClass", "dnsPolicy",
                  "schedulerName", "terminationGracePeriodSeconds", "tolerations", "prometheus.io/scrape",
                  "imageID", "securityContext"):  # fmt: skip
        assert noise not in text, noise
    assert out["metadata"]["owners"] == ["ReplicaSet/web-7d9c8b6f5d"]
    assert out["metadata"]["annotations"] == {"kubectl.kubernetes.io/restartedAt": "2026-12-01T09:57:00Z"}
    container = out["spec"]["containers"][0]
    assert container["env"] == ["LOG_LEVEL", "DB_PASSWORD", "DB_URL<-Secret/db[url]"]
    assert container["envFrom"] == ["<-ConfigMap/web-config"]
    assert container["livenessProbe"] == "httpGet :8080/healthz delay=5 period=10 timeout=1 failures=3"
    assert container["volumeMounts"][0] == "data:/var/lib/web"
    assert out["spec"]["volumes"][0] == "data<-persistentVolumeClaim/web-data"
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready", "ContainersReady"]
    assert out["status"]["conditions"][0]["reason"] == "ContainersNotReady"
    status = out["status"]["containerStatuses"][0]
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff" and status["restartCount"] == 4


def test_detail_keeps_spec_and_status_without_noise_or_defaults() -> None:
    out = minify(typical_pod(), "detail")
    assert "managedFields" not in out["metadata"] and "uid" not in out["metadata"]
    assert "dnsPolicy" not in out["spec"] and "tolerations" not in out["spec"]
    assert out["spec"]["containers"][0]["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert out["spec"]["containers"][0]["env"][1] == {"name": "DB_PASSWORD", "value": "[REDACTED]"}
    assert out["status"]["podIP"] == "10.244.1.17"
    assert "terminationMessagePath" not in out["spec"]["containers"][0]


def test_a_secret_is_its_key_names_at_every_level() -> None:
    secret = {
        "kind": "Secret",
        "metadata": {"name": "db", "namespace": "shop", "uid": "u"},
        "type": "Opaque",
        "data": {"password": "[REDACTED:abc]", "url": "[REDACTED:def]"},
    }
    for level in ("summary", "compact", "detail"):
        out = minify(secret, level)
        assert out["keys"] == ["password", "url"]
        assert "REDACTED" not in dumps(out) and "data" not in out


def test_workload_node_and_service_summaries() -> None:
    deploy = {
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "a", "image": "web:1"}]}}},
        "status": {"readyReplicas": 1, "updatedReplicas": 3},
    }
    assert minify(deploy, "summary") == {
        "kind": "Deployment",
        "namespace": "shop",
        "name": "web",
        "desired": 3,
        "ready": 1,
        "updated": 3,
        "images": ["web:1"],
    }
    node = {
        "kind": "Node",
        "metadata": {"name": "gpu-1"},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "MemoryPressure", "status": "True"},
                {"type": "DiskPressure", "status": "False"},
            ],
            "allocatable": {"cpu": "8", "nvidia.com/gpu": "4"},
            "images": [{"names": ["x"], "sizeBytes": 1}],
        },
    }
    assert minify(node, "summary") == {
        "kind": "Node",
        "name": "gpu-1",
        "ready": "True",
        "pressure": ["MemoryPressure"],
        "gpu_allocatable": {"nvidia.com/gpu": "4"},
    }
    assert "images" not in minify(node, "compact")["status"]
    svc = {
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app": "web"},
            "ports": [{"port": 80, "targetPort": 8080}],
        },
    }
    assert minify(svc, "summary")["ports"] == ["80/TCP->8080"]
    assert minify(svc, "summary")["selector"] == {"app": "web"}


def test_probe_text_for_every_handler() -> None:
    assert (
        probe_text({"exec": {"command": ["cat", "/tmp/ok"]}, "periodSeconds": 5})
        == "exec cat /tmp/ok period=5"
    )
    assert probe_text({"grpc": {"port": 9000}}) == "grpc :9000"
