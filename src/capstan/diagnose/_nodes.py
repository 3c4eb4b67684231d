"""The nodes analyzer: a node that is not Ready, a pressure condition, any other condition a problem detector set
(an XID or GPU health condition is a GPU fault), and GPUs that a node's device plugin no longer offers (allocatable
below capacity)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import number, preceding_changes, quote, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source
from capstan.diagnose._snapshot import KubeObject, Snapshot

NAME: Final = "nodes"
_GPU_WORDS: Final = re.compile(r"\bxid\b|gpu|nvlink|nvidia|ecc", re.I)
PRESSURE: Final = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def analyze_nodes(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    for node in snapshot.of("Node"):
        ref = ref_of("Node", node)
        with about(ref):
            out.extend(_node(snapshot, node, ref))
    return out


def _bound_pods(snapshot: Snapshot, name: str) -> list[ObjectRef]:
    return sorted(
        ref_of("Pod", p) for p in snapshot.of("Pod") if (p.get("spec") or {}).get("nodeName") == name
    )


def _node(snapshot: Snapshot, node: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    status = node.get("status") or {}
    conditions = {str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}
    ready = conditions.get("Ready")
    if ready is not None and ready.get("status") != "True":
        why = str(ready.get("message") or ready.get("reason") or "")
        yield Finding.create(
            NAME,
            "NotReady",
            subject=ref,
            related=_bound_pods(snapshot, ref.name)[:5],
            severity=Severity.CRITICAL,
            category=Category.NODE,
            root_cause=f"Node {ref.name} is NotReady (Ready={ready.get('status')}): {quote(why, 200)}.",
            evidence=[
                Evidence(
                    "Ready condition",
                    Source.OBJECT_FIELD,
                    "status.conditions[Ready]",
                    f"status={ready.get('status')} reason={ready.get('reason')} message={quote(why)}",
                )
            ],
            changes=preceding_changes(snapshot, [ref]),
            confidence=0.9,
            next_check=f"kubectl describe node {ref.name}; the kubelet's log on the node",
        )
    for ctype in PRESSURE:
        cond = conditions.get(ctype)
        if cond is None or cond.get("status") != "True":
            continue
        yield Finding.create(
            NAME,
            ctype,
            subject=ref,
            severity=Severity.WARNING,
            category=Category.NODE,
            root_cause=f"Node {ref.name} reports {ctype}: {quote(str(cond.get('message') or cond.get('reason') or ''), 200)}.",
            evidence=[
                Evidence(
                    ctype,
                    Source.OBJECT_FIELD,
                    f"status.conditions[{ctype}]",
                    quote(str(cond.get("message") or "")),
                )
            ],
            confidence=0.9,
            next_check=f"kubectl describe node {ref.name} (Allocated resources, eviction Events)",
        )
    for ctype, cond in sorted(conditions.items()):
        if ctype == "Ready" or ctype in PRESSURE or cond.get("status") != "True":
            continue
        # a condition set by a problem detector (node-problem-detector, the GPU operator's health checks)
        text = f"{ctype} {cond.get('reason') or ''} {cond.get('message') or ''}"
        gpu = bool(_GPU_WORDS.search(text))
        message = str(cond.get("message") or cond.get("reason") or "")
        yield Finding.create(
            NAME,
            f"condition/{ctype}",
            subject=ref,
            related=_bound_pods(snapshot, ref.name)[:5] if gpu else (),
            severity=Severity.CRITICAL if gpu else Severity.WARNING,
            category=Category.GPU if gpu else Category.NODE,
            root_cause=f"Node {ref.name} reports {ctype}=True: {quote(message, 200)}.",
            evidence=[
                Evidence(
                    ctype,
                    Source.OBJECT_FIELD,
                    f"status.conditions[{ctype}]",
                    f"reason={cond.get('reason')} message={quote(message)}",
                )
            ],
            changes=preceding_changes(snapshot, [ref]),
            confidence=0.85,
            next_check=(
                f"nvidia-smi -q on {ref.name} and the kernel log (dmesg | grep -i xid); drain it if a GPU fell off the bus"
                if gpu
                else f"kubectl describe node {ref.name}; the problem detector's log"
            ),
        )
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    for resource, total in sorted(capacity.items()):
        if not (resource.endswith("/gpu") or "/mig-" in resource):
            continue
        have, offered = number(total), number(allocatable.get(resource, 0))
        if offered < have:
            plugin = snapshot.readable("DaemonSet")
            blind = (
                ""
                if plugin.readable
                else f" (DaemonSets cannot be read, so the device plugin was not checked: {quote(plugin.reason or 'forbidden', 120)})"
            )
            yield Finding.create(
                NAME,
                f"gpu-allocatable/{resource}",
                subject=ref,
                severity=Severity.WARNING,
                category=Category.GPU,
                root_cause=(
                    f"Node {ref.name} offers {offered:g} of its {have:g} {resource} (status.allocatable below "
                    f"status.capacity): the device plugin marked GPUs unhealthy or lost them{blind}."
                ),
                evidence=[
                    Evidence("capacity", Source.OBJECT_FIELD, f"status.capacity[{resource}]", str(total)),
                    Evidence(
                        "allocatable",
                        Source.OBJECT_FIELD,
                        f"status.allocatable[{resource}]",
                        str(allocatable.get(resource, 0)),
                    ),
                ],
                changes=preceding_changes(snapshot, [ref]),
                confidence=0.8,
                next_check=f"the device plugin's log on {ref.name}; nvidia-smi -q (XID errors)",
            )
