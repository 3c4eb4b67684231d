"""The correlation step: symptoms folded into the root that explains them, across analyzers; recorded changes of
the objects a root involves (owners and symptoms included) cited on it; roots ranked."""

from __future__ import annotations

from capstan.diagnose import (
    Category,
    Finding,
    FunctionAnalyzer,
    ObjectRef,
    Severity,
    Snapshot,
    Symptom,
    diagnose,
)
from capstan.restarts import RecordedChange

from .kit import event, node, pod, terminated, waiting
from .test_storage import claim, mounting_pod, storage_class


def crashing(name: str, owner: str = "web-7d9f8", node_name: str = "node-a") -> dict[str, object]:
    return pod(
        name,
        owner=("ReplicaSet", owner),
        node=node_name,
        statuses=[waiting("app", "CrashLoopBackOff", restarts=4, last=terminated("Error", 1))],
    )


def replica_set(name: str, deployment: str) -> dict[str, object]:
    return {
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": "shop",
            "ownerReferences": [{"kind": "Deployment", "name": deployment, "controller": True}],
        },
        "spec": {"replicas": 2},
        "status": {"replicas": 2},
    }


def test_a_pod_waiting_for_a_broken_claim_is_the_claims_symptom_not_a_second_root() -> None:
    waiting_pod = mounting_pod()
    message = (
        "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/3 nodes"
    )
    waiting_pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    snap = Snapshot(
        objects={
            "PersistentVolumeClaim": [claim()],
            "StorageClass": [storage_class("standard", True)],
            "Pod": [waiting_pod],
            "Node": [node("a"), node("b"), node("c")],
        },
        events=[event(waiting_pod, "FailedScheduling", message)],
    )
    alone = diagnose(snap, [a for name, a in _analyzers().items() if name == "scheduling"])
    assert [f.subject for f in alone.findings] == [
        ObjectRef("Pod", "shop", "db-0")
    ]  # the pod is a finding alone

    (root,) = diagnose(snap).findings
    assert root.analyzer == "storage" and root.subject == ObjectRef("PersistentVolumeClaim", "shop", "data")
    assert [s.object for s in root.symptoms] == [ObjectRef("Pod", "shop", "db-0")]


def test_pods_on_a_not_ready_node_are_the_nodes_symptoms() -> None:
    snap = Snapshot(
        objects={
            "Node": [node("gpu-3", ready="False")],
            "Pod": [crashing("web-7d9f8-aaaaa", node_name="gpu-3"), crashing("api-1", "api-5f", "node-b")],
        }
    )
    findings = diagnose(snap).findings
    subjects = [f.subject for f in findings]
    assert ObjectRef("Pod", "shop", "web-7d9f8-aaaaa") not in subjects
    node_root = next(f for f in findings if f.subject == ObjectRef("Node", "", "gpu-3"))
    assert ObjectRef("Pod", "shop", "web-7d9f8-aaaaa") in [s.object for s in node_root.symptoms]
    assert ObjectRef("Pod", "shop", "api-1") in subjects  # on another node: its own root


def test_replicas_with_the_same_fault_are_one_root() -> None:
    pods = [crashing("web-7d9f8-bbbbb"), crashing("web-7d9f8-aaaaa"), crashing("other-1", owner="other-9")]
    findings = diagnose(Snapshot(objects={"Pod": pods}), [_analyzers()["pods"]]).findings
    assert len(findings) == 2
    web = next(f for f in findings if f.subject.name.startswith("web-"))
    others = {web.subject.name, *(s.object.name for s in web.symptoms)}
    assert others == {"web-7d9f8-aaaaa", "web-7d9f8-bbbbb"}
    assert findings[0] is web  # it explains a symptom, the other root none: it ranks first


def test_changes_of_the_owners_and_symptoms_are_cited_and_later_ones_are_not() -> None:
    snap = Snapshot(
        objects={
            "Pod": [crashing("web-7d9f8-aaaaa")],
            "ReplicaSet": [replica_set("web-7d9f8", "web")],
        },
        changes=[
            RecordedChange(90.0, "Deployment", "shop", "web", "modified", "spec.template image 1.0 → 1.1"),
            RecordedChange(95.0, "Deployment", "other", "web", "modified", "another namespace"),
            RecordedChange(150.0, "Deployment", "shop", "web", "modified", "after the snapshot"),
        ],
        observed_at=100.0,
    )
    (root,) = diagnose(snap, [_analyzers()["pods"]]).findings
    assert [(c.kind, c.namespace, c.summary) for c in root.changes] == [
        ("Deployment", "shop", "spec.template image 1.0 → 1.1")
    ]


def test_status_only_changes_are_consequences_and_are_not_cited() -> None:
    snap = Snapshot(
        objects={
            "Pod": [crashing("web-7d9f8-aaaaa")],
            "ReplicaSet": [replica_set("web-7d9f8", "web")],
        },
        changes=[
            RecordedChange(80.0, "Deployment", "shop", "web", "modified", "replace /spec/template/spec/containers/0/image"),
            RecordedChange(91.0, "ReplicaSet", "shop", "web-7d9f8", "modified", "replace /status/readyReplicas"),
            RecordedChange(
                92.0, "Pod", "shop", "web-7d9f8-aaaaa", "modified",
                "replace /status/conditions/1/status; add /status/conditions/1/reason (+3 more)",
            ),
            RecordedChange(93.0, "Deployment", "shop", "web", "modified", "add /metadata/annotations/x; replace /status/y"),
        ],
        observed_at=100.0,
    )  # fmt: skip
    (root,) = diagnose(snap, [_analyzers()["pods"]]).findings
    assert [c.at for c in root.changes] == [80.0, 93.0]


def test_an_edit_is_cited_before_newer_creations_that_are_only_the_recorders_first_sight() -> None:
    snap = Snapshot(
        objects={"Pod": [crashing("web-7d9f8-aaaaa")], "ReplicaSet": [replica_set("web-7d9f8", "web")]},
        changes=[
            RecordedChange(50.0, "Deployment", "shop", "web", "modified", "add /metadata/annotations/x"),
            *(RecordedChange(60.0 + i, "Pod", "shop", "web-7d9f8-aaaaa", "added") for i in range(6)),
        ],
        observed_at=100.0,
    )
    (root,) = diagnose(snap, [_analyzers()["pods"]]).findings
    assert [c.at for c in root.changes] == [50.0, 62.0, 63.0, 64.0, 65.0]


def test_a_secret_change_is_cited_by_name_only_and_at_most_five_newest_are_kept() -> None:
    subject = ObjectRef("Pod", "shop", "p")
    secret = ObjectRef("Secret", "shop", "db")

    def analyze(_: Snapshot) -> list[Finding]:
        return [
            Finding.create(
                "t",
                "x",
                subject=subject,
                severity=Severity.CRITICAL,
                category=Category.CONFIGURATION,
                root_cause="p reads Secret db",
                related=[secret],
            )
        ]

    changes = [
        RecordedChange(float(i), "Secret", "shop", "db", "modified", f"password=v{i}") for i in range(8)
    ]
    snap = Snapshot(changes=changes, observed_at=100.0)
    (root,) = diagnose(snap, [FunctionAnalyzer("t", (), analyze)]).findings
    assert [c.at for c in root.changes] == [3.0, 4.0, 5.0, 6.0, 7.0]
    assert all(c.summary == "" for c in root.changes)


def test_two_findings_naming_each_other_as_symptoms_leave_one_root_and_lose_neither() -> None:
    a, b = ObjectRef("Pod", "shop", "a"), ObjectRef("Pod", "shop", "b")

    def make(subject: ObjectRef, other: ObjectRef) -> Finding:
        return Finding.create(
            "t",
            "loop",
            subject=subject,
            severity=Severity.CRITICAL,
            category=Category.RUNTIME,
            root_cause=f"{subject.name} fails",
            symptoms=[Symptom(other, f"{other.name} waits")],
        )

    snap = Snapshot()
    (root,) = diagnose(snap, [FunctionAnalyzer("t", (), lambda _: [make(a, b), make(b, a)])]).findings
    assert {root.subject, *(s.object for s in root.symptoms)} == {a, b}


def test_a_warning_never_outranks_a_critical_root_and_more_symptoms_rank_first() -> None:
    def make(name: str, severity: Severity, symptoms: int) -> Finding:
        return Finding.create(
            "t",
            name,
            subject=ObjectRef("Service", "shop", name),
            severity=severity,
            category=Category.NETWORKING,
            root_cause=name,
            symptoms=[Symptom(ObjectRef("Pod", "shop", f"{name}-{i}"), "x") for i in range(symptoms)],
        )

    made = [
        make("w", Severity.WARNING, 9),
        make("c0", Severity.CRITICAL, 0),
        make("c2", Severity.CRITICAL, 2),
    ]
    findings = diagnose(Snapshot(), [FunctionAnalyzer("t", (), lambda _: made)]).findings
    assert [f.cause for f in findings] == ["c2", "c0", "w"]


def _analyzers() -> dict[str, FunctionAnalyzer]:
    from capstan.diagnose import ANALYZERS

    return {name: a for name, a in ANALYZERS.items() if isinstance(a, FunctionAnalyzer)}
