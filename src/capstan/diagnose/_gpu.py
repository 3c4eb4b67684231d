"""The gpu analyzer: GPUs a node should offer but does not, blamed on the device plugin that offers them.

A GPU node (one with a ``*/gpu`` or ``*/mig-*`` capacity, or the labels NVIDIA's GPU feature discovery sets) whose
allocatable GPUs are 0 or below its capacity, while the device-plugin DaemonSet (``nvidia-device-plugin``,
``k8s-device-plugin`` by name, image or ``app`` label) has no ready pod on it: the DaemonSet is the root, and the
nodes, the plugin's own failing pods and the pods pending for those GPUs are its symptoms (so the ``nodes``
analyzer's "allocatable below capacity" and the plugin pod's crash loop fold into it). A node labelled as a GPU
node that advertises no GPU resource at all while no device plugin DaemonSet exists is reported on its own. A GPU
node whose plugin is ready but offers fewer GPUs is left to the ``nodes`` analyzer (an XID, a GPU marked unhealthy).

The helpers here (which resources are GPUs, which nodes advertise which) are shared with the ``scheduling``
analyzer, which names a pod that requests a GPU resource no node advertises (a MIG profile name mismatch).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import labels_of, number, preceding_changes, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source, Symptom
from capstan.diagnose._snapshot import KubeObject, Snapshot, meta_of

NAME: Final = "gpu"
PLUGIN_WORDS: Final = ("nvidia-device-plugin", "k8s-device-plugin", "amdgpu-device-plugin")
PLUGIN_APP_LABELS: Final = (
    "nvidia-device-plugin-daemonset",
    "nvidia-device-plugin-ds",
    "nvidia-device-plugin",
)
GPU_NODE_LABELS: Final = ("nvidia.com/gpu.present", "nvidia.com/gpu.product", "nvidia.com/gpu.count")
MAX_LISTED: Final = 5


def is_gpu_resource(resource: str) -> bool:
    """``nvidia.com/gpu``, ``amd.com/gpu``, ``nvidia.com/mig-1g.5gb``…"""
    return resource.endswith("/gpu") or "/mig-" in resource


def requested_gpus(pod: KubeObject) -> dict[str, tuple[float, str]]:
    """The GPU resources a pod's containers request (requests, else limits): resource → (the sum over the
    containers, the field of the first container that asks)."""
    spec = pod.get("spec") or {}
    out: dict[str, tuple[float, str]] = {}
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            res = (c or {}).get("resources") or {}
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            for resource in sorted({*map(str, limits), *map(str, requests)}):
                part = "requests" if resource in requests else "limits"
                amount = number((requests if part == "requests" else limits)[resource])
                if not is_gpu_resource(resource) or amount <= 0:
                    continue
                have, where = out.get(resource, (0.0, ""))
                out[resource] = (
                    have + amount,
                    where or f"spec.{key}[{c.get('name')}].resources.{part}[{resource}]",
                )
    return out


def advertised_gpus(snapshot: Snapshot) -> dict[str, list[str]]:
    """Every GPU resource some node has in its capacity or allocatable, with the nodes that have it."""
    out: dict[str, list[str]] = {}
    for node in snapshot.of("Node"):
        status = node.get("status") or {}
        names = {
            str(r)
            for part in ("capacity", "allocatable")
            for r, v in (status.get(part) or {}).items()
            if is_gpu_resource(str(r)) and number(v) > 0
        }
        for resource in names:
            out.setdefault(resource, []).append(meta_of(node)[1])
    return {r: sorted(nodes) for r, nodes in sorted(out.items())}


def is_gpu_node(node: KubeObject) -> bool:
    status = node.get("status") or {}
    if any(is_gpu_resource(str(r)) for r in status.get("capacity") or {}):
        return True
    labels = labels_of(node)
    return any(labels.get(k) not in (None, "", "false") for k in GPU_NODE_LABELS)


def is_device_plugin(ds: KubeObject) -> bool:
    name = meta_of(ds)[1]
    template = (ds.get("spec") or {}).get("template") or {}
    images = [str((c or {}).get("image") or "") for c in (template.get("spec") or {}).get("containers") or []]
    if any(w in text for w in PLUGIN_WORDS for text in (name, *images)):
        return True
    labels = {**labels_of(ds), **labels_of(template)}
    return labels.get("app") in PLUGIN_APP_LABELS or labels.get("app.kubernetes.io/name") in PLUGIN_APP_LABELS


def _gpu_shortfall(node: KubeObject) -> tuple[float, float, str]:
    """(capacity, allocatable, the resources' text) over a node's GPU resources."""
    status = node.get("status") or {}
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    resources = sorted(str(r) for r in capacity if is_gpu_resource(str(r)))
    have = sum(number(capacity[r]) for r in resources)
    offered = sum(number(allocatable.get(r, 0)) for r in resources)
    text = ", ".join(f"{r} {allocatable.get(r, 0)}/{capacity[r]}" for r in resources) or "no GPU resource"
    return have, offered, text


def _node_ready(node: KubeObject) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return True


def _pod_ready(pod: KubeObject) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _pod_problem(pod: KubeObject) -> str:
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or ():
        state = (cs or {}).get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            return f"container {cs.get('name')} is {state['waiting']['reason']}"
        if state.get("terminated"):
            return f"container {cs.get('name')} terminated ({state['terminated'].get('reason')})"
    return f"not ready (phase {status.get('phase') or 'unknown'})"


def _owned_by(pod: KubeObject, kind: str, name: str) -> bool:
    return any(
        isinstance(o, Mapping) and o.get("kind") == kind and o.get("name") == name and o.get("controller")
        for o in (pod.get("metadata") or {}).get("ownerReferences") or ()
    )


def analyze_gpu(snapshot: Snapshot) -> list[Finding]:
    problems: list[tuple[KubeObject, float, float, str]] = []
    for node in snapshot.of("Node"):
        if not is_gpu_node(node) or not _node_ready(node):
            continue  # a NotReady node is the nodes analyzer's root, its plugin pod not ready a consequence
        have, offered, text = _gpu_shortfall(node)
        if have <= 0 or offered < have:
            problems.append((node, have, offered, text))
    if not problems or not snapshot.readable("DaemonSet").readable:
        return []  # nothing to explain, or a blind spot (the nodes analyzer still names the GPUs lost)
    plugins = [ds for ds in snapshot.of("DaemonSet") if is_device_plugin(ds)]
    out: list[Finding] = []
    if not plugins:
        for node, have, _, _ in problems:
            if have <= 0:
                ref = ref_of("Node", node)
                with about(ref):
                    out.append(_no_plugin(snapshot, node, ref))
        return out
    for ds in sorted(plugins, key=meta_of):
        ref = ref_of("DaemonSet", ds)
        with about(ref):
            out.extend(_plugin(snapshot, ds, ref, problems))
    return out


def _no_plugin(snapshot: Snapshot, node: KubeObject, ref: ObjectRef) -> Finding:
    labels = labels_of(node)
    shown = ", ".join(f"{k}={labels[k]}" for k in GPU_NODE_LABELS if k in labels)
    return Finding.create(
        NAME,
        "no-device-plugin",
        subject=ref,
        severity=Severity.WARNING,
        category=Category.GPU,
        root_cause=(
            f"Node {ref.name} is labelled as a GPU node ({shown}) but advertises no GPU resource in "
            "status.capacity, and no device-plugin DaemonSet exists to offer its GPUs."
        ),
        evidence=[
            Evidence("GPU labels", Source.OBJECT_FIELD, "metadata.labels", shown),
            Evidence("GPU capacity", Source.OBJECT_FIELD, "status.capacity", "no */gpu or */mig-* resource"),
        ],
        changes=preceding_changes(snapshot, [ref]),
        confidence=0.7,
        next_check="kubectl get daemonsets -A | grep -i device-plugin; install the NVIDIA device plugin or GPU operator",
    )


def _plugin(
    snapshot: Snapshot, ds: KubeObject, ref: ObjectRef, problems: list[tuple[KubeObject, float, float, str]]
) -> Iterator[Finding]:
    pods = [p for p in snapshot.in_namespace("Pod", ref.namespace) if _owned_by(p, "DaemonSet", ref.name)]
    by_node: dict[str, KubeObject] = {}
    for p in pods:
        bound = str((p.get("spec") or {}).get("nodeName") or "")
        if bound:
            by_node[bound] = p
    status = ds.get("status") or {}
    unavailable = int(status.get("numberUnavailable") or 0)
    blamed: list[tuple[KubeObject, float, float, str, KubeObject | None]] = []
    for node, have, offered, text in problems:
        plugin_pod = by_node.get(meta_of(node)[1])
        if plugin_pod is None or not _pod_ready(plugin_pod):
            blamed.append((node, have, offered, text, plugin_pod))
    if not blamed:
        return
    symptoms: list[Symptom] = []
    evidence = [
        Evidence(
            "DaemonSet status",
            Source.OBJECT_FIELD,
            "status",
            f"desiredNumberScheduled={status.get('desiredNumberScheduled', '?')} "
            f"numberReady={status.get('numberReady', '?')} numberUnavailable={unavailable}",
        )
    ]
    lost: set[str] = set()
    for node, have, offered, text, plugin_pod in blamed:
        name = meta_of(node)[1]
        node_ref = ObjectRef("Node", "", name)
        capacity = (node.get("status") or {}).get("capacity") or {}
        lost.update(str(r) for r in capacity if is_gpu_resource(str(r)))
        what = f"offers {offered:g} of {have:g} GPUs ({text})" if have > 0 else "advertises no GPU resource"
        plugin_text = (
            f"plugin pod {meta_of(plugin_pod)[1]}: {_pod_problem(plugin_pod)}"
            if plugin_pod
            else "no plugin pod"
        )
        symptoms.append(Symptom(node_ref, f"Node {name} {what}; {plugin_text}"))
        if len(evidence) <= MAX_LISTED:
            evidence.append(
                Evidence(
                    "GPUs on node",
                    Source.OBJECT_FIELD,
                    f"Node {name} status.allocatable",
                    f"{text}; {plugin_text}",
                )
            )
        if plugin_pod is not None:
            pod_ref = ref_of("Pod", plugin_pod)
            symptoms.append(Symptom(pod_ref, f"device-plugin pod on {name}: {_pod_problem(plugin_pod)}"))
    for p in snapshot.of("Pod"):
        if (p.get("spec") or {}).get("nodeName") or (p.get("status") or {}).get(
            "phase", "Pending"
        ) != "Pending":
            continue
        wanted = requested_gpus(p)
        hit = sorted(set(wanted) & lost) if lost else sorted(wanted)
        if hit:
            symptoms.append(Symptom(ref_of("Pod", p), f"Pending: requests {wanted[hit[0]][0]:g} {hit[0]}"))
    names = [meta_of(n)[1] for n, *_ in blamed]
    first_pod = next((pp for *_, pp in blamed if pp is not None), None)
    how = (
        f"its pod {meta_of(first_pod)[1]} is not ready ({_pod_problem(first_pod)})"
        if first_pod is not None
        else "it has no pod on them"
    )
    if first_pod is None:
        template = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        selector = template.get("nodeSelector") or {}
        evidence.append(
            Evidence(
                "plugin node selector",
                Source.OBJECT_FIELD,
                "spec.template.spec.nodeSelector",
                ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "(none)",
            )
        )
    zero = any(offered <= 0 for _, _, offered, _, _ in blamed)
    listed = ", ".join(names[:MAX_LISTED]) + (
        f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    )
    yield Finding.create(
        NAME,
        "device-plugin-not-ready",
        subject=ref,
        related=[ObjectRef("Node", "", n) for n in names[:MAX_LISTED]],
        severity=Severity.CRITICAL if zero else Severity.WARNING,
        category=Category.GPU,
        root_cause=(
            f"The device plugin DaemonSet {ref.namespace}/{ref.name} does not run on GPU node(s) {listed}, so "
            f"they offer fewer GPUs than they have (status.allocatable below status.capacity): {how}"
            + (f"; numberUnavailable={unavailable}" if unavailable else "")
            + "."
        ),
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref]),
        symptoms=symptoms,
        confidence=0.85,
        next_check=(
            f"kubectl logs -n {ref.namespace} {meta_of(first_pod)[1]} --previous; kubectl describe daemonset -n "
            f"{ref.namespace} {ref.name}"
            if first_pod is not None
            else f"kubectl describe daemonset -n {ref.namespace} {ref.name} (nodeSelector, tolerations against "
            f"the GPU nodes' labels and taints)"
        ),
    )
