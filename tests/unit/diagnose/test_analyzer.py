"""diagnose(): the registry, failure isolation, blind spots for unreadable kinds, order and de-duplication."""

from __future__ import annotations

import pytest

from capstan.diagnose import (
    ANALYZERS,
    Category,
    Finding,
    FunctionAnalyzer,
    ObjectRef,
    Readable,
    Severity,
    Snapshot,
    about,
    diagnose,
)
from capstan.diagnose._analyzer import analyzer_registry

from .kit import pod, terminated, waiting


def finding(name: str, severity: Severity, cause: str) -> Finding:
    return Finding.create(
        name,
        cause,
        subject=ObjectRef("Pod", "ns", cause),
        severity=severity,
        category=Category.RUNTIME,
        root_cause=cause,
    )


def test_registry_names_and_duplicates() -> None:
    assert list(ANALYZERS) == [
        "pods",
        "scheduling",
        "services",
        "nodes",
        "references",
        "storage",
        "workloads",
        "batch",
        "scaling",
        "lifecycle",
        "network-policies",
        "gpu",
        "quotas",
        "ingress",
        "rbac",
        "webhooks",
    ]
    one = FunctionAnalyzer("x", (), lambda s: [])
    with pytest.raises(TypeError, match="registered twice"):
        analyzer_registry(one, one)


def test_an_analyzer_that_raises_is_reported_and_the_others_still_answer() -> None:
    def broken(snapshot: Snapshot) -> list[Finding]:
        for p in snapshot.of("Pod"):
            with about(ObjectRef("Pod", "shop", p["metadata"]["name"])):
                raise KeyError("spec")
        return []

    p = pod(statuses=[waiting("app", "CrashLoopBackOff", restarts=2, last=terminated("Error", 1))])
    d = diagnose(
        Snapshot(objects={"Pod": [p]}), [FunctionAnalyzer("broken", ("Pod",), broken), ANALYZERS["pods"]]
    )
    assert [f.analyzer for f in d.findings] == ["pods"]
    (failure,) = d.failures
    assert failure.analyzer == "broken"
    assert failure.object == ObjectRef("Pod", "shop", "web-7d9f8-abcde")
    assert "KeyError" in failure.error
    assert d.to_json()["failures"][0]["object"]["name"] == "web-7d9f8-abcde"


def test_a_failure_outside_about_has_no_object() -> None:
    def broken(snapshot: Snapshot) -> list[Finding]:
        raise RuntimeError("boom")

    d = diagnose(Snapshot(), [FunctionAnalyzer("broken", (), broken)])
    assert d.failures[0].object is None and d.failures[0].error == "RuntimeError: boom"


def test_an_unreadable_kind_is_a_blind_spot_not_a_guess() -> None:
    snap = Snapshot(
        objects={
            "Service": [
                {"metadata": {"name": "web", "namespace": "shop"}, "spec": {"selector": {"app": "web"}}}
            ]
        },
        unreadable={
            "Pod": Readable("Pod", False, 'pods is forbidden: User "capstan" cannot list resource "pods"')
        },
    )
    d = diagnose(snap)
    assert d.findings == ()  # no "selector matches no pod" when pods could not be read
    assert {(b.analyzer, b.kind) for b in d.blind} == {
        ("pods", "Pod"),
        ("scheduling", "Pod"),
        ("services", "Pod"),
        ("references", "Pod"),
        ("storage", "Pod"),
        ("batch", "Pod"),
        ("lifecycle", "Pod"),
        ("network-policies", "Pod"),
        ("gpu", "Pod"),
        ("webhooks", "Pod"),
    }
    assert "forbidden" in d.blind[0].reason


def test_order_is_severity_then_id_and_duplicates_are_kept_once() -> None:
    made = [
        finding("a", Severity.INFO, "i"),
        finding("a", Severity.CRITICAL, "c2"),
        finding("a", Severity.WARNING, "w"),
        finding("a", Severity.CRITICAL, "c1"),
    ]
    twice = FunctionAnalyzer("a", (), lambda s: made + made)
    d = diagnose(Snapshot(), [twice])
    assert [f.severity for f in d.findings] == [
        Severity.CRITICAL,
        Severity.CRITICAL,
        Severity.WARNING,
        Severity.INFO,
    ]
    crit = [f.id for f in d.findings[:2]]
    assert crit == sorted(crit)
    assert len(d.findings) == 4
    assert diagnose(Snapshot(), [twice]).to_json() == d.to_json()


def test_a_failure_message_is_redacted_too() -> None:
    def leaky(snapshot: Snapshot) -> list[Finding]:
        raise ValueError("cannot parse postgres://app:pl4nted-Secret-77@db/shop")

    d = diagnose(Snapshot(), [FunctionAnalyzer("leaky", (), leaky)])
    assert "pl4nted-Secret-77" not in str(d.to_json()) and "REDACTED" in d.failures[0].error


def test_about_an_object_finds_its_findings_and_the_roots_it_is_a_symptom_of() -> None:
    from capstan.diagnose import Diagnosis, Symptom

    pod = ObjectRef("Pod", "shop", "web-1")
    other = ObjectRef("Pod", "shop", "db-0")
    deploy = ObjectRef("Deployment", "shop", "web")
    own = Finding.create(
        "t", "a", subject=pod, severity=Severity.WARNING, category=Category.RUNTIME, root_cause="x"
    )
    root = Finding.create(
        "t", "b", subject=deploy, severity=Severity.CRITICAL, category=Category.RUNTIME, root_cause="y",
        symptoms=[Symptom(pod, "not ready")],
    )  # fmt: skip
    unrelated = Finding.create(
        "t", "c", subject=other, severity=Severity.CRITICAL, category=Category.RUNTIME, root_cause="z"
    )
    diagnosis = Diagnosis(findings=(root, unrelated, own))
    assert diagnosis.about(pod) == (root, own)
    assert diagnosis.about(ObjectRef("Pod", "shop", "gone")) == ()
