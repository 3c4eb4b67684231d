"""The network-policy analyzer: NetworkPolicies that cut a Service off from its clients, and ones that select nothing.

A Service's traffic reaches its pods only if every NetworkPolicy that selects those pods for ``Ingress`` allows it
(policies are additive: one rule of one policy admitting the port is enough). For each Service with a selector and
each policy that selects at least one of the Service's pods for Ingress:

- **denies all**: no policy selecting those pods has any ingress rule (``ingress`` empty or absent) — every client
  of the Service is refused (warning: it may be deliberate, so the finding says what it blocks and cites the policy's
  recorded changes, a new deny-all being the classic "what changed");
- **port not admitted**: the policies have rules, but none admits the Service's ``targetPort`` (by number, or by the
  name a container declares) — rules without ``ports`` admit every port.

Who may connect (``from`` peers) is not judged: without the clients' identity a rule's peers cannot be checked, so
only what no client could pass is reported. A policy whose ``podSelector`` selects no pod of its namespace is info.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import (
    is_terminal,
    label_selector,
    labels_of,
    preceding_changes,
    ref_of,
    selects,
)
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source
from capstan.diagnose._services import PodIndex
from capstan.diagnose._snapshot import KubeObject, Snapshot

NAME: Final = "network-policies"
MAX_PODS: Final = 3


def analyze_network_policies(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    policies = snapshot.of("NetworkPolicy")
    if not policies or not snapshot.readable("Pod").readable:
        return out
    pods_by_ns: dict[str, list[KubeObject]] = {}
    for pod in snapshot.of("Pod"):
        if not is_terminal(pod):
            pods_by_ns.setdefault(str((pod.get("metadata") or {}).get("namespace") or ""), []).append(pod)
    ingress: dict[
        str, list[tuple[KubeObject, list[KubeObject]]]
    ] = {}  # namespace → (policy, pods it selects)
    for policy in policies:
        ref = ref_of("NetworkPolicy", policy)
        with about(ref):
            spec = policy.get("spec") or {}
            requirements = label_selector(spec.get("podSelector"))
            if requirements is None:
                continue
            selected = [p for p in pods_by_ns.get(ref.namespace, []) if selects(requirements, labels_of(p))]
            if not selected:
                out.append(_selects_nothing(snapshot, policy, ref))
                continue
            if "Ingress" in _policy_types(spec):
                ingress.setdefault(ref.namespace, []).append((policy, selected))
    index = PodIndex(snapshot)  # a Service's pods by label lookups, not a scan of its namespace per Service
    for service in snapshot.of("Service"):
        ref = ref_of("Service", service)
        if ref.namespace not in ingress:
            continue
        with about(ref):
            out.extend(_service(snapshot, service, ref, ingress[ref.namespace], index))
    return out


def _policy_types(spec: Mapping[str, Any]) -> list[str]:
    types = spec.get("policyTypes")
    if types:
        return [str(t) for t in types]
    # the API server's default: Ingress always, Egress when egress rules are given
    return ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def _service(
    snapshot: Snapshot,
    service: KubeObject,
    ref: ObjectRef,
    policies: Sequence[tuple[KubeObject, list[KubeObject]]],
    index: PodIndex,
) -> Iterator[Finding]:
    selector = (service.get("spec") or {}).get("selector") or {}
    if not selector:
        return
    backends = [
        index.pods[i] for i in index.matching(ref.namespace, {str(k): str(v) for k, v in selector.items()})
    ]
    if not backends:
        return  # the services analyzer reports a selector that matches nothing
    names = {id(p) for p in backends}
    governing = [(pol, [p for p in sel if id(p) in names]) for pol, sel in policies]
    governing = [(pol, sel) for pol, sel in governing if sel]
    if not governing:
        return
    rules = [rule for pol, _ in governing for rule in (pol.get("spec") or {}).get("ingress") or []]
    policy_refs = [ref_of("NetworkPolicy", pol) for pol, _ in governing]
    blocked = sorted({_name(p) for _, sel in governing for p in sel})
    evidence = [
        Evidence(
            "policy", Source.OBJECT_FIELD, f"{r.key} spec",
            f"podSelector {_selector_text((pol.get('spec') or {}).get('podSelector'))}; policyTypes "
            f"{','.join(_policy_types(pol.get('spec') or {}))}; ingress rules {len((pol.get('spec') or {}).get('ingress') or [])}",
        )
        for r, (pol, _) in zip(policy_refs, governing, strict=True)
    ]  # fmt: skip
    pods_text = ", ".join(blocked[:MAX_PODS]) + (
        f" and {len(blocked) - MAX_PODS} more" if len(blocked) > MAX_PODS else ""
    )
    changes = preceding_changes(snapshot, policy_refs)
    if not rules:
        names_text = ", ".join(r.name for r in policy_refs)
        yield Finding.create(
            NAME, f"deny-all/{names_text}", subject=ref, related=policy_refs, severity=Severity.WARNING,
            category=Category.NETWORKING,
            root_cause=(
                f"NetworkPolicy {names_text} in {ref.namespace} selects the pods of Service {ref.name} ({pods_text}) "
                f"for Ingress with no ingress rule: it denies every connection to the Service."
            ),
            evidence=evidence, changes=changes, confidence=0.8,
            next_check=f"kubectl describe networkpolicy -n {ref.namespace} {policy_refs[0].name}; add an ingress rule for the Service's clients",
        )  # fmt: skip
        return
    for port in (service.get("spec") or {}).get("ports") or []:
        target = port.get("targetPort", port.get("port"))
        numbers = _numbers(target, backends, str(port.get("protocol") or "TCP"))
        if any(_admits(rule, target, numbers) for rule in rules):
            continue
        yield Finding.create(
            NAME, f"port-not-admitted/{target}", subject=ref, related=policy_refs, severity=Severity.WARNING,
            category=Category.NETWORKING,
            root_cause=(
                f"No ingress rule of NetworkPolicy {', '.join(r.name for r in policy_refs)} admits port {target} of "
                f"Service {ref.namespace}/{ref.name} (targetPort of port {port.get('port')}): connections to it are refused."
            ),
            evidence=[
                *evidence,
                Evidence("admitted ports", Source.OBJECT_FIELD, "spec.ingress[].ports", _ports_text(rules)),
                Evidence("service port", Source.OBJECT_FIELD, f"{ref.key} spec.ports", f"port {port.get('port')} targetPort {target}"),
            ],
            changes=changes, confidence=0.75,
            next_check=f"kubectl get networkpolicy -n {ref.namespace} -o yaml; add port {target} to a rule",
        )  # fmt: skip


def _name(obj: KubeObject) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _numbers(target: Any, pods: Sequence[KubeObject], protocol: str) -> set[int]:
    """The container port numbers ``target`` (a number, or a port name) means on ``pods``."""
    if isinstance(target, int) or (isinstance(target, str) and target.isdigit()):
        return {int(target)}
    out = set()
    for pod in pods:
        for c in (pod.get("spec") or {}).get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("name") == target and str(p.get("protocol") or "TCP") == protocol:
                    out.add(int(p.get("containerPort") or 0))
    return out


def _admits(rule: Mapping[str, Any], target: Any, numbers: set[int]) -> bool:
    ports = rule.get("ports")
    if not ports:
        return True  # a rule without ports admits every port
    for p in ports:
        port, end = p.get("port"), p.get("endPort")
        if port is None or port == target:
            return True
        if isinstance(port, int) and any(port <= n <= (end or port) for n in numbers):
            return True
    return False


def _ports_text(rules: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for rule in rules:
        ports = rule.get("ports")
        if not ports:
            return "every port"
        parts += [str(p.get("port")) + (f"-{p['endPort']}" if p.get("endPort") else "") for p in ports]
    return ", ".join(dict.fromkeys(parts))


def _selector_text(selector: Any) -> str:
    if not isinstance(selector, Mapping) or not selector:
        return "{} (every pod)"
    labels = ",".join(f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items()))
    exprs = len(selector.get("matchExpressions") or [])
    return labels + (f" +{exprs} expression(s)" if exprs else "")


def _selects_nothing(snapshot: Snapshot, policy: KubeObject, ref: ObjectRef) -> Finding:
    selector = (policy.get("spec") or {}).get("podSelector")
    return Finding.create(
        NAME, "selects-no-pod", subject=ref, severity=Severity.INFO, category=Category.NETWORKING,
        root_cause=(
            f"NetworkPolicy {ref.namespace}/{ref.name} selects no pod (podSelector {_selector_text(selector)}): "
            f"it protects nothing."
        ),
        evidence=[Evidence("pod selector", Source.OBJECT_FIELD, "spec.podSelector", _selector_text(selector))],
        changes=preceding_changes(snapshot, [ref]), confidence=0.7,
        next_check=f"kubectl get pods -n {ref.namespace} --show-labels",
    )  # fmt: skip
