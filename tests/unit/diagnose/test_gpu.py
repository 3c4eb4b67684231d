"""GPU faults: a pod requesting a GPU resource no node advertises (a MIG name mismatch) is one GPU root, and a
device-plugin DaemonSet with no ready pod on a GPU node is the root of that node's lost GPUs."""

from __future__ import annotations

from typing import Any

from capstan.diagnose import Category, ObjectRef, Readable, Severity, Snapshot, diagnose
from capstan.diagnose._gpu import analyze_gpu
from capstan.diagnose._scheduling import analyze_scheduling

from .kit import container, event, node, pod, running, terminated, waiting

MIG_5 = "nvidia.com/mig-1g.5gb"
MIG_10 = "nvidia.com/mig-1g.10gb"


def pending(resource: str, n: int = 1) -> dict[str, Any]:
    c = container("trainer", resources={"limits": {resource: str(n)}})
    return pod("train-0", node=None, phase="Pending", statuses=[], owner=("Job", "train"), containers=[c])


def test_a_mig_profile_no_node_advertises_is_one_gpu_root_naming_what_nodes_offer() -> None:
    nodes = [node(f"mig-{i}", gpus=7, resource=MIG_5) for i in range(2)] + [node("cpu-0")]
    p = pending(MIG_10)
    msg = f"0/3 nodes are available: 3 Insufficient {MIG_10}."
    snap = Snapshot(objects={"Pod": [p], "Node": nodes}, events=[event(p, "FailedScheduling", msg)])
    (f,) = analyze_scheduling(snap)
    assert f.cause == f"gpu-not-advertised/{MIG_10}" and f.category is Category.GPU
    assert f.severity is Severity.CRITICAL
    assert f"requests 1 {MIG_10}" in f.root_cause and "no node advertises" in f.root_cause
    assert f"{MIG_5} on 2 node(s)" in f.root_cause and "other MIG profiles" in f.root_cause
    assert any(e.where == f"spec.containers[trainer].resources.limits[{MIG_10}]" for e in f.evidence)
    assert any(e.text.startswith("0/3 nodes are available") for e in f.evidence)
    (root,) = diagnose(snap).findings  # one root for the pod, not a second "GPU shortage" one
    assert root.id == f.id


def test_mixed_and_single_mig_strategies_are_named() -> None:
    mixed = [node("m", gpus=7, resource=MIG_5, labels={"nvidia.com/mig.strategy": "mixed"})]
    (f,) = analyze_scheduling(Snapshot(objects={"Pod": [pending("nvidia.com/gpu")], "Node": mixed}))
    assert "mixed MIG strategy (nvidia.com/mig.strategy=mixed)" in f.root_cause
    single = [node("s", gpus=7, labels={"nvidia.com/mig.strategy": "single"})]
    (f,) = analyze_scheduling(Snapshot(objects={"Pod": [pending(MIG_10)], "Node": single}))
    assert "single MIG strategy" in f.root_cause and "nvidia.com/gpu on 1 node(s)" in f.root_cause


def test_an_advertised_gpu_is_left_to_the_shortage_count_and_unreadable_nodes_say_nothing() -> None:
    p = pending("nvidia.com/gpu", 4)
    msg = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    snap = Snapshot(
        objects={"Pod": [p], "Node": [node("g", gpus=2)]}, events=[event(p, "FailedScheduling", msg)]
    )
    (f,) = analyze_scheduling(snap)
    assert f.cause == "unschedulable/resource/nvidia.com/gpu"
    blind = Snapshot(
        objects={"Pod": [pending(MIG_10)]}, unreadable={"Node": Readable("Node", False, "forbidden")}
    )
    assert analyze_scheduling(blind) == []


def plugin_ds(unavailable: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "gpu-operator", "uid": "uid-ds"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "nvidia-device-plugin-daemonset"}},
                "spec": {
                    "containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}]
                },
            }
        },
        "status": {
            "desiredNumberScheduled": 2,
            "numberReady": 2 - unavailable,
            "numberUnavailable": unavailable,
        },
    }


def plugin_pod(name: str, on: str, *, ready: bool) -> dict[str, Any]:
    statuses = (
        [running("plugin")]
        if ready
        else [waiting("plugin", "CrashLoopBackOff", restarts=5, last=terminated("Error", 1))]
    )
    p = pod(
        name,
        "gpu-operator",
        node=on,
        owner=("DaemonSet", "nvidia-device-plugin-daemonset"),
        containers=[container("plugin", image="nvcr.io/nvidia/k8s-device-plugin:v0.17.0")],
        statuses=statuses,
        labels={"app": "nvidia-device-plugin-daemonset"},
    )
    p["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return p


def test_a_device_plugin_not_ready_on_a_gpu_node_is_the_root_of_its_lost_gpus() -> None:
    nodes = [node("gpu-0", gpus=8, allocatable_gpus=0), node("gpu-1", gpus=8)]
    pods = [plugin_pod("plugin-aaaaa", "gpu-0", ready=False), plugin_pod("plugin-bbbbb", "gpu-1", ready=True)]
    waiting_pod = pending("nvidia.com/gpu", 8)
    msg = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    snap = Snapshot(
        objects={"Node": nodes, "DaemonSet": [plugin_ds()], "Pod": [*pods, waiting_pod]},
        events=[event(waiting_pod, "FailedScheduling", msg)],
    )
    (f,) = analyze_gpu(snap)
    assert f.cause == "device-plugin-not-ready" and f.category is Category.GPU
    assert f.subject == ObjectRef("DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
    assert f.severity is Severity.CRITICAL
    assert "gpu-0" in f.root_cause and "gpu-1" not in f.root_cause
    assert "plugin-aaaaa is not ready (container plugin is CrashLoopBackOff)" in f.root_cause
    assert "numberUnavailable=1" in f.root_cause
    (root,) = diagnose(
        snap
    ).findings  # the node's allocatable drop, the plugin crash and the pending pod fold in
    assert root.id == f.id
    assert {s.object for s in root.symptoms} == {
        ObjectRef("Node", "", "gpu-0"),
        ObjectRef("Pod", "gpu-operator", "plugin-aaaaa"),
        ObjectRef("Pod", "shop", "train-0"),
    }


def test_a_ready_plugin_leaves_a_gpu_drop_to_the_nodes_analyzer() -> None:
    nodes = [node("gpu-0", gpus=8, allocatable_gpus=7)]
    snap = Snapshot(
        objects={
            "Node": nodes,
            "DaemonSet": [plugin_ds(0)],
            "Pod": [plugin_pod("plugin-a", "gpu-0", ready=True)],
        }
    )
    assert analyze_gpu(snap) == []
    (root,) = diagnose(snap).findings
    assert root.analyzer == "nodes" and root.cause == "gpu-allocatable/nvidia.com/gpu"


def test_a_labelled_gpu_node_without_any_device_plugin() -> None:
    n = node(
        "gpu-9", labels={"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    )
    (f,) = analyze_gpu(Snapshot(objects={"Node": [n]}))
    assert f.cause == "no-device-plugin" and "nvidia.com/gpu.present=true" in f.root_cause
    blind = Snapshot(
        objects={"Node": [n]}, unreadable={"DaemonSet": Readable("DaemonSet", False, "forbidden")}
    )
    assert analyze_gpu(blind) == []
    assert ("gpu", "DaemonSet") in {(b.analyzer, b.kind) for b in diagnose(blind).blind}


def test_a_not_ready_gpu_node_stays_the_nodes_root_and_unreadable_daemonsets_are_said() -> None:
    down = node("gpu-0", gpus=8, allocatable_gpus=0, ready="False")
    snap = Snapshot(
        objects={
            "Node": [down],
            "DaemonSet": [plugin_ds()],
            "Pod": [plugin_pod("plugin-a", "gpu-0", ready=False)],
        }
    )
    assert analyze_gpu(snap) == []
    blind = Snapshot(
        objects={"Node": [node("gpu-1", gpus=8, allocatable_gpus=6)]},
        unreadable={"DaemonSet": Readable("DaemonSet", False, "daemonsets.apps is forbidden")},
    )
    (f,) = diagnose(blind).findings
    assert f.analyzer == "nodes"
    assert (
        "DaemonSets cannot be read, so the device plugin was not checked: daemonsets.apps is forbidden"
        in f.root_cause
    )


def test_a_plugin_with_no_pod_on_the_gpu_node_cites_its_node_selector() -> None:
    ds = plugin_ds()
    ds["spec"]["template"]["spec"]["nodeSelector"] = {"nvidia.com/gpu.deploy.device-plugin": "true"}
    (f,) = analyze_gpu(
        Snapshot(objects={"Node": [node("gpu-0", gpus=8, allocatable_gpus=0)], "DaemonSet": [ds]})
    )
    assert "it has no pod on them" in f.root_cause
    assert any(e.text == "nvidia.com/gpu.deploy.device-plugin=true" for e in f.evidence)
    assert "nodeSelector, tolerations" in f.next_check


def test_a_pod_an_autoscaler_is_provisioning_a_node_for_is_not_called_unadvertised() -> None:
    p = pending("nvidia.com/gpu", 1)
    scale_up = event(
        p, "TriggeredScaleUp", "pod triggered scale-up: [{gpu-pool 0->1 (max: 4)}]", type="Normal"
    )
    assert (
        analyze_scheduling(Snapshot(objects={"Pod": [p], "Node": [node("cpu-0")]}, events=[scale_up])) == []
    )
    (f,) = analyze_scheduling(Snapshot(objects={"Pod": [p], "Node": [node("cpu-0")]}))
    assert "no node advertises any GPU resource" in f.root_cause
