"""The Services analyzer: a selector that matches no pod (naming the pods that almost match, and the label that
differs), and a ``targetPort`` the selected pods do not expose (a named port no container declares, or a number
none of the declared ports has)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import is_terminal, labels_of, preceding_changes, ref_of, selector_text
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source, Symptom
from capstan.diagnose._ingress import routes_to
from capstan.diagnose._snapshot import KubeObject, Snapshot

NAME: Final = "services"
MAX_NEAR: Final = 3


class PodIndex:
    """The live pods of each namespace by label, so that matching a selector costs the size of its smallest
    label set, not a scan of every pod (10k pods × 1k Services in one namespace is 10M label checks)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.pods: list[KubeObject] = []
        self.labels: list[Mapping[str, str]] = []
        self.by_label: dict[tuple[str, str, str], set[int]] = {}
        self.by_key: dict[tuple[str, str], set[int]] = {}
        self.by_namespace: dict[str, set[int]] = {}
        for pod in snapshot.of("Pod"):
            if is_terminal(pod):
                continue
            i = len(self.pods)
            namespace = str((pod.get("metadata") or {}).get("namespace") or "")
            labels = labels_of(pod)
            self.pods.append(pod)
            self.labels.append(labels)
            self.by_namespace.setdefault(namespace, set()).add(i)
            for k, v in labels.items():
                self.by_label.setdefault((namespace, k, v), set()).add(i)
                self.by_key.setdefault((namespace, k), set()).add(i)

    def matching(self, namespace: str, selector: Mapping[str, str]) -> list[int]:
        sets = sorted((self.by_label.get((namespace, k, v), set()) for k, v in selector.items()), key=len)
        if not sets:
            return []
        return sorted(set.intersection(*sets)) if len(sets) > 1 else sorted(sets[0])

    def near(self, namespace: str, selector: Mapping[str, str]) -> list[tuple[int, str]]:
        """Pods matching every pair of the selector but one (for a one-pair selector: pods with that key and
        another value), with the key that differs."""
        out: list[tuple[int, str]] = []
        for key in selector:
            rest = {k: v for k, v in selector.items() if k != key}
            candidates = (
                self.matching(namespace, rest) if rest else sorted(self.by_key.get((namespace, key), set()))
            )
            out.extend((i, key) for i in candidates)
        return out


def analyze_services(snapshot: Snapshot) -> list[Finding]:
    if not snapshot.readable("Pod").readable:
        return []  # reported as a blind spot: without pods a selector cannot be checked
    index = PodIndex(snapshot)
    routes = routes_to(snapshot)
    out: list[Finding] = []
    for service in snapshot.of("Service"):
        ref = ref_of("Service", service)
        with about(ref):
            for finding in _service(snapshot, index, service, ref):
                out.append(_with_routes(finding, routes.get(ref, ())))
    return out


def _with_routes(finding: Finding, backends: Sequence[Any]) -> Finding:
    """The Ingresses and HTTPRoutes that route to a Service without endpoints are its symptoms."""
    symptoms = {s.object: s for s in finding.symptoms}
    for b in backends:
        symptoms.setdefault(
            b.route,
            Symptom(
                b.route,
                f"{b.route.kind} {b.route.name} routes {b.path} to Service {b.service.name}, which serves nothing",
            ),
        )
    return dataclasses.replace(finding, symptoms=tuple(symptoms.values())) if backends else finding


def _service(snapshot: Snapshot, index: PodIndex, service: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    spec = service.get("spec") or {}
    raw = spec.get("selector") or {}
    if spec.get("type") == "ExternalName" or not isinstance(raw, Mapping) or not raw:
        return
    selector = {str(k): str(v) for k, v in raw.items()}
    selected = [index.pods[i] for i in index.matching(ref.namespace, selector)]
    text = selector_text(selector)
    if not selected:
        yield _no_pods(snapshot, ref, selector, text, index)
        return
    yield from _target_ports(snapshot, ref, spec.get("ports") or [], selected, text)


def _no_pods(
    snapshot: Snapshot, ref: ObjectRef, selector: Mapping[str, str], text: str, index: PodIndex
) -> Finding:
    """The pods that match all but one key of the selector point at the label that changed."""
    near: list[tuple[ObjectRef, str]] = []
    for i, key in index.near(ref.namespace, selector):
        labels = index.labels[i]
        have = f"{key}={labels[key]}" if key in labels else f"no label {key}"
        near.append((ref_of("Pod", index.pods[i]), have))
    near.sort()
    evidence = [Evidence("selector", Source.OBJECT_FIELD, "spec.selector", text)]
    for pod_ref, have in near[:MAX_NEAR]:
        evidence.append(
            Evidence("nearly selected pod", Source.OBJECT_FIELD, f"Pod {pod_ref.name} metadata.labels", have)
        )
    hint = f"; pod {near[0][0].name} has {near[0][1]}" if near else ""
    related = [p for p, _ in near[:MAX_NEAR]]
    return Finding.create(
        NAME,
        "selector-matches-no-pod",
        subject=ref,
        related=related,
        severity=Severity.CRITICAL,
        category=Category.NETWORKING,
        root_cause=(
            f"Service {ref.namespace}/{ref.name} has no endpoints: its selector {text} matches no pod in "
            f"namespace {ref.namespace}{hint}."
        ),
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref, *related]),
        confidence=0.9 if near else 0.8,
        next_check=f"kubectl get pods -n {ref.namespace} --show-labels, against spec.selector {text}",
    )


def _declared_ports(pods: Sequence[KubeObject]) -> tuple[set[str], set[int], bool]:
    names: set[str] = set()
    numbers: set[int] = set()
    any_declared = False
    for pod in pods:
        for c in (pod.get("spec") or {}).get("containers") or []:
            for port in c.get("ports") or []:
                any_declared = True
                if port.get("name"):
                    names.add(str(port["name"]))
                if port.get("containerPort") is not None:
                    numbers.add(int(port["containerPort"]))
    return names, numbers, any_declared


def _target_ports(
    snapshot: Snapshot,
    ref: ObjectRef,
    ports: Sequence[Mapping[str, Any]],
    selected: Sequence[KubeObject],
    text: str,
) -> Iterator[Finding]:
    names, numbers, any_declared = _declared_ports(selected)
    for i, port in enumerate(ports):
        target = port.get("targetPort", port.get("port"))
        label = str(port.get("name") or port.get("port") or i)
        if isinstance(target, str) and not target.isdigit():
            if target in names:
                continue
            problem = f"targetPort {target!r} is a port name no container of the selected pods declares"
            confidence = 0.95
        else:
            if not any_declared or target is None or int(target) in numbers:
                continue  # containers that declare no ports may still listen: nothing to say for sure
            problem = f"targetPort {target} is not among the ports the selected pods declare"
            confidence = 0.7
        declared = ", ".join([*sorted(names), *map(str, sorted(numbers))]) or "(none)"
        pods = [ref_of("Pod", p) for p in selected[:MAX_NEAR]]
        yield Finding.create(
            NAME,
            f"targetPort/{label}",
            subject=ref,
            related=pods,
            severity=Severity.CRITICAL,
            category=Category.NETWORKING,
            root_cause=(
                f"Service {ref.namespace}/{ref.name} port {label}: {problem} (they declare {declared}), so its "
                "traffic reaches nothing."
            ),
            evidence=[
                Evidence("target port", Source.OBJECT_FIELD, f"spec.ports[{label}].targetPort", str(target)),
                Evidence(
                    "declared container ports", Source.OBJECT_FIELD, "spec.containers[*].ports", declared
                ),
            ],
            changes=preceding_changes(snapshot, [ref]),
            confidence=confidence,
            next_check=f"kubectl get endpointslices -n {ref.namespace} -l kubernetes.io/service-name={ref.name}",
        )
