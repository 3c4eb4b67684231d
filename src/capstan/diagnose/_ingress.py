"""The ingress analyzer: Ingress and Gateway API HTTPRoute references that lead nowhere.

An Ingress backend (``spec.defaultBackend``, ``spec.rules[].http.paths[].backend``) naming a Service that does not
exist, or a port (number or name) the Service does not expose; an ``ingressClassName`` that names no IngressClass
(checked only when IngressClasses were read: a reader may leave the cluster-scoped kind out). An HTTPRoute
``backendRef`` to a Service that does not exist or lacks the port. Nothing is concluded about Services when they
cannot be read. A Service that exists but has no endpoints is the ``services`` analyzer's: it lists the Ingresses
and HTTPRoutes that route to it as its symptoms (:func:`routes_to`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import preceding_changes, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source
from capstan.diagnose._snapshot import KubeObject, Snapshot

NAME: Final = "ingress"
DEFAULT_CLASS: Final = "ingressclass.kubernetes.io/is-default-class"


@dataclass(frozen=True)
class Backend:
    """One route to a Service: the route object, the field path, the Service and the port (number or name)."""

    route: ObjectRef
    where: str
    service: ObjectRef
    port: int | str | None
    path: str


def ingress_backends(ingress: KubeObject) -> Iterator[Backend]:
    ref = ref_of("Ingress", ingress)
    spec = ingress.get("spec") or {}

    def one(backend: Any, where: str, path: str) -> Iterator[Backend]:
        service = (backend or {}).get("service") if isinstance(backend, Mapping) else None
        if isinstance(service, Mapping) and service.get("name"):
            port = service.get("port") or {}
            value = port.get("number") if port.get("number") is not None else port.get("name")
            svc = ObjectRef("Service", ref.namespace, str(service["name"]))
            yield Backend(ref, where, svc, value, path)

    yield from one(spec.get("defaultBackend"), "spec.defaultBackend.service", "(default)")
    for i, rule in enumerate(spec.get("rules") or ()):
        host = str((rule or {}).get("host") or "*")
        for j, p in enumerate(((rule or {}).get("http") or {}).get("paths") or ()):
            where = f"spec.rules[{i}].http.paths[{j}].backend.service"
            yield from one((p or {}).get("backend"), where, f"{host}{(p or {}).get('path') or '/'}")


def route_backends(route: KubeObject) -> Iterator[Backend]:
    ref = ref_of("HTTPRoute", route)
    for i, rule in enumerate((route.get("spec") or {}).get("rules") or ()):
        for j, b in enumerate((rule or {}).get("backendRefs") or ()):
            if not isinstance(b, Mapping) or str(b.get("kind") or "Service") != "Service" or b.get("group"):
                continue
            svc = ObjectRef("Service", str(b.get("namespace") or ref.namespace), str(b.get("name") or ""))
            yield Backend(ref, f"spec.rules[{i}].backendRefs[{j}]", svc, b.get("port"), f"rule {i}")


def routes_to(snapshot: Snapshot) -> dict[ObjectRef, list[Backend]]:
    """Every Ingress and HTTPRoute backend, by the Service it routes to."""
    out: dict[ObjectRef, list[Backend]] = {}
    for ingress in snapshot.of("Ingress"):
        for b in ingress_backends(ingress):
            out.setdefault(b.service, []).append(b)
    for route in snapshot.of("HTTPRoute"):
        for b in route_backends(route):
            out.setdefault(b.service, []).append(b)
    return out


def analyze_ingress(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    services = snapshot.readable("Service").readable
    classes = "IngressClass" in snapshot.objects and snapshot.readable("IngressClass").readable
    for kind, backends_of in (("Ingress", ingress_backends), ("HTTPRoute", route_backends)):
        for obj in snapshot.of(kind):
            ref = ref_of(kind, obj)
            with about(ref):
                if kind == "Ingress" and classes:
                    out.extend(_ingress_class(snapshot, obj, ref))
                if services:
                    for backend in backends_of(obj):
                        out.extend(_backend(snapshot, backend))
    return out


def _ingress_class(snapshot: Snapshot, ingress: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    spec = ingress.get("spec") or {}
    annotations = (ingress.get("metadata") or {}).get("annotations") or {}
    name = spec.get("ingressClassName") or annotations.get("kubernetes.io/ingress.class")
    where = (
        "spec.ingressClassName"
        if spec.get("ingressClassName")
        else "metadata.annotations[kubernetes.io/ingress.class]"
    )
    known = sorted(ref_of("IngressClass", c).name for c in snapshot.of("IngressClass"))
    if name:
        if str(name) in known:
            return
        cause, problem = f"missing-ingressclass/{name}", f"names IngressClass {name}, which does not exist"
        evidence = [Evidence("ingress class", Source.OBJECT_FIELD, where, str(name))]
    else:
        defaults = [
            c
            for c in snapshot.of("IngressClass")
            if ((c.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS) == "true"
        ]
        if defaults:
            return
        cause, problem = "no-ingressclass", "names no IngressClass and none is marked the default"
        evidence = [Evidence("ingress class", Source.OBJECT_FIELD, "spec.ingressClassName", "(not set)")]
    evidence.append(
        Evidence(
            "IngressClasses", Source.OBJECT_FIELD, "IngressClass metadata.name", ", ".join(known) or "(none)"
        )
    )
    yield Finding.create(
        NAME,
        cause,
        subject=ref,
        severity=Severity.CRITICAL,
        category=Category.NETWORKING,
        root_cause=(
            f"Ingress {ref.namespace}/{ref.name} {problem} (the cluster has {', '.join(known) or 'no IngressClass'}), "
            "so no ingress controller serves it."
        ),
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref]),
        confidence=0.9,
        next_check="kubectl get ingressclass; set spec.ingressClassName to one of them",
    )


def _backend(snapshot: Snapshot, b: Backend) -> Iterator[Finding]:
    kind = b.route.kind
    svc = snapshot.get("Service", b.service.namespace, b.service.name)
    evidence = [
        Evidence(
            "backend",
            Source.OBJECT_FIELD,
            b.where,
            f"{b.service.name}:{b.port if b.port is not None else '?'}",
        )
    ]
    if svc is None:
        yield Finding.create(
            NAME,
            f"missing-service/{b.service.namespace}/{b.service.name}",
            subject=b.route,
            related=[b.service],
            severity=Severity.CRITICAL,
            category=Category.NETWORKING,
            root_cause=(
                f"{kind} {b.route.namespace}/{b.route.name} routes {b.path} to Service {b.service.namespace}/"
                f"{b.service.name} ({b.where}), which does not exist."
            ),
            evidence=evidence,
            changes=preceding_changes(snapshot, [b.route, b.service]),
            confidence=0.95,
            next_check=f"kubectl get services -n {b.service.namespace}",
        )
        return
    if b.port is None or (svc.get("spec") or {}).get("type") == "ExternalName":
        return
    ports = [p for p in (svc.get("spec") or {}).get("ports") or () if isinstance(p, Mapping)]
    if isinstance(b.port, int) or str(b.port).isdigit():
        exposed = any(int(p.get("port") or 0) == int(b.port) for p in ports)
    else:
        exposed = any(str(p.get("name") or "") == str(b.port) for p in ports)
    if exposed:
        return
    has = (
        ", ".join(f"{p.get('name')}={p.get('port')}" if p.get("name") else str(p.get("port")) for p in ports)
        or "(none)"
    )
    evidence.append(Evidence("service ports", Source.OBJECT_FIELD, f"{b.service.key} spec.ports", has))
    yield Finding.create(
        NAME,
        f"service-port/{b.service.name}/{b.port}",
        subject=b.route,
        related=[b.service],
        severity=Severity.CRITICAL,
        category=Category.NETWORKING,
        root_cause=(
            f"{kind} {b.route.namespace}/{b.route.name} routes {b.path} to port {b.port} of Service "
            f"{b.service.namespace}/{b.service.name} ({b.where}), which the Service does not expose (it has {has})."
        ),
        evidence=evidence,
        changes=preceding_changes(snapshot, [b.route, b.service]),
        confidence=0.9,
        next_check=f"kubectl get service -n {b.service.namespace} {b.service.name} -o jsonpath='{{.spec.ports}}'",
    )
