"""The Services analyzer: a selector matching no pod, and a targetPort the selected pods do not expose."""

from __future__ import annotations

from capstan.diagnose import Category, ObjectRef, Snapshot, diagnose
from capstan.diagnose._services import analyze_services
from capstan.restarts import RecordedChange

from .kit import container, event, pod, service


def web_pod(
    labels: dict[str, str], ports: list[dict[str, object]] | None = None, name: str = "web-1"
) -> dict[str, object]:
    ports = ports if ports is not None else [{"name": "http", "containerPort": 8080}]
    return pod(name, labels=labels, containers=[container(ports=ports)])


def test_selector_matching_no_pod_names_the_label_that_differs_and_the_change() -> None:
    svc = service(selector={"app": "web", "tier": "front"})
    near = web_pod({"app": "web-v2", "tier": "front"})
    far = web_pod({"app": "db"}, name="db-0")
    relabel = RecordedChange(50.0, "Pod", "shop", "web-1", "MODIFIED", "metadata.labels.app: web -> web-v2")
    snap = Snapshot(objects={"Service": [svc], "Pod": [near, far]}, changes=[relabel], observed_at=60.0)
    (f,) = analyze_services(snap)
    assert f.category is Category.NETWORKING and f.cause == "selector-matches-no-pod"
    assert "selector app=web,tier=front matches no pod" in f.root_cause
    assert "pod web-1 has app=web-v2" in f.root_cause
    assert (
        ObjectRef("Pod", "shop", "web-1") in f.objects and ObjectRef("Pod", "shop", "db-0") not in f.objects
    )
    assert f.changes == (relabel,)


def test_pods_in_another_namespace_do_not_count() -> None:
    svc = service()
    other = pod("web-1", namespace="other", labels={"app": "web"})
    (f,) = analyze_services(Snapshot(objects={"Service": [svc], "Pod": [other]}))
    assert "matches no pod in namespace shop" in f.root_cause


def test_named_target_port_no_container_declares() -> None:
    svc = service(ports=[{"name": "http", "port": 80, "targetPort": "web"}])
    (f,) = analyze_services(Snapshot(objects={"Service": [svc], "Pod": [web_pod({"app": "web"})]}))
    assert f.cause == "targetPort/http"
    assert "targetPort 'web' is a port name no container" in f.root_cause and "http, 8080" in f.root_cause


def test_numeric_target_port_not_declared() -> None:
    svc = service(ports=[{"name": "http", "port": 80, "targetPort": 9090}])
    (f,) = analyze_services(Snapshot(objects={"Service": [svc], "Pod": [web_pod({"app": "web"})]}))
    assert "targetPort 9090 is not among the ports" in f.root_cause


def test_healthy_services_and_undeclared_ports_say_nothing() -> None:
    ok = service()
    numeric = service("api", ports=[{"port": 80, "targetPort": 8000}])
    headless = service("ext", selector={})
    pods = [web_pod({"app": "web"}), web_pod({"app": "api"}, ports=[], name="api-1")]
    numeric["spec"]["selector"] = {"app": "api"}
    assert analyze_services(Snapshot(objects={"Service": [ok, numeric, headless], "Pod": pods})) == []


def test_a_decoy_warning_on_a_healthy_service_is_not_a_root() -> None:
    good = service("api", selector={"app": "api"})
    broken = service("web", selector={"app": "web"})
    pods = [web_pod({"app": "api"}, name="api-1"), web_pod({"app": "web-v2"}, name="web-1")]
    decoy = event(
        good, "FailedToUpdateEndpoint", "Failed to update endpoint shop/api: the object has been modified"
    )
    d = diagnose(Snapshot(objects={"Service": [good, broken], "Pod": pods}, events=[decoy]))
    assert [f.subject for f in d.findings] == [ObjectRef("Service", "shop", "web")]
