"""The ingress analyzer: Ingress and HTTPRoute backends that lead to no Service or no port, IngressClasses that do
not exist, and a Service without endpoints that explains the Ingress routing to it."""

from __future__ import annotations

from typing import Any

from capstan.diagnose import Category, ObjectRef, Readable, Severity, Snapshot, diagnose
from capstan.diagnose._ingress import analyze_ingress

from .kit import pod, service


def ingress(backend: str = "web", port: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "shop", "namespace": "shop"},
        "spec": {
            "rules": [
                {
                    "host": "shop.example",
                    "http": {
                        "paths": [
                            {
                                "path": "/",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": backend, "port": port or {"number": 80}}},
                            }
                        ]
                    },
                }
            ],
            **spec,
        },
    }


def ingress_class(name: str, default: bool = False) -> dict[str, Any]:
    annotations = {"ingressclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {"kind": "IngressClass", "metadata": {"name": name, "annotations": annotations}}


def test_a_backend_service_that_does_not_exist() -> None:
    (f,) = analyze_ingress(Snapshot(objects={"Ingress": [ingress("web-v2")], "Service": [service()]}))
    assert f.cause == "missing-service/shop/web-v2" and f.category is Category.NETWORKING
    assert f.severity is Severity.CRITICAL and f.subject == ObjectRef("Ingress", "shop", "shop")
    assert "routes shop.example/ to Service shop/web-v2" in f.root_cause and "does not exist" in f.root_cause
    assert any(e.where == "spec.rules[0].http.paths[0].backend.service" for e in f.evidence)


def test_a_port_the_service_does_not_expose_by_number_and_by_name() -> None:
    (f,) = analyze_ingress(
        Snapshot(objects={"Ingress": [ingress(port={"number": 8080})], "Service": [service()]})
    )
    assert f.cause == "service-port/web/8080" and "it has http=80" in f.root_cause
    (f,) = analyze_ingress(
        Snapshot(objects={"Ingress": [ingress(port={"name": "https"})], "Service": [service()]})
    )
    assert f.cause == "service-port/web/https"
    ok = Snapshot(objects={"Ingress": [ingress(port={"name": "http"})], "Service": [service()]})
    assert analyze_ingress(ok) == []


def test_ingress_class_checked_only_when_classes_were_read() -> None:
    ing = ingress(ingressClassName="nginx")
    assert analyze_ingress(Snapshot(objects={"Ingress": [ing], "Service": [service()]})) == []
    snap = Snapshot(
        objects={"Ingress": [ing], "Service": [service()], "IngressClass": [ingress_class("traefik")]}
    )
    (f,) = analyze_ingress(snap)
    assert f.cause == "missing-ingressclass/nginx" and "the cluster has traefik" in f.root_cause
    no_class = Snapshot(
        objects={"Ingress": [ingress()], "Service": [service()], "IngressClass": [ingress_class("traefik")]}
    )
    assert analyze_ingress(no_class)[0].cause == "no-ingressclass"
    with_default = Snapshot(
        objects={
            "Ingress": [ingress()],
            "Service": [service()],
            "IngressClass": [ingress_class("traefik", True)],
        }
    )
    assert analyze_ingress(with_default) == []


def test_unreadable_services_are_not_called_missing() -> None:
    snap = Snapshot(
        objects={"Ingress": [ingress("web-v2")]},
        unreadable={"Service": Readable("Service", False, "forbidden")},
    )
    assert analyze_ingress(snap) == []


def test_an_httproute_backend_to_a_missing_service() -> None:
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "shop", "namespace": "shop"},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "rules": [{"backendRefs": [{"name": "cart", "port": 8080}]}],
        },
    }
    (f,) = analyze_ingress(Snapshot(objects={"HTTPRoute": [route], "Service": [service()]}))
    assert f.subject == ObjectRef("HTTPRoute", "shop", "shop") and f.cause == "missing-service/shop/cart"
    assert "spec.rules[0].backendRefs[0]" in f.root_cause


def test_an_ingress_to_a_service_without_endpoints_is_its_symptom() -> None:
    p = pod(labels={"app": "web-v2"})
    snap = Snapshot(objects={"Ingress": [ingress()], "Service": [service()], "Pod": [p]})
    (root,) = diagnose(snap).findings
    assert root.analyzer == "services" and root.cause == "selector-matches-no-pod"
    assert [s.object for s in root.symptoms] == [ObjectRef("Ingress", "shop", "shop")]


def test_an_externalname_service_is_not_checked_for_ports() -> None:
    external = {
        "kind": "Service",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"type": "ExternalName", "externalName": "web.example"},
    }
    assert (
        analyze_ingress(Snapshot(objects={"Ingress": [ingress(port={"number": 443})], "Service": [external]}))
        == []
    )
