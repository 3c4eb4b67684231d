"""score(): top-1 (object, category, keywords), evidence recall over evidence and recorded changes, false roots on
decoys and declared symptoms; on hand-built diagnoses."""

from __future__ import annotations

from capstan.diagnose import Category, Diagnosis, Evidence, Finding, ObjectRef, Severity, Source
from capstan.faults import Expectation, ObjectKey, score
from capstan.restarts import RecordedChange

NS = "fault-x-1a2b"


def finding(
    kind: str,
    name: str,
    *,
    category: Category = Category.CONFIGURATION,
    root_cause: str = "The container app of pod api cannot start: ConfigMap api-config has no key DB_HOST.",
    evidence: tuple[Evidence, ...] = (),
    changes: tuple[RecordedChange, ...] = (),
    related: tuple[ObjectRef, ...] = (),
) -> Finding:
    return Finding.create(
        "pods",
        f"cause/{name}",
        subject=ObjectRef(kind, "" if kind == "Node" else NS, name),
        severity=Severity.CRITICAL,
        category=category,
        root_cause=root_cause,
        related=related,
        evidence=evidence,
        changes=changes,
    )


EXPECT = Expectation(
    object=ObjectKey(kind="Pod", name="api"),
    category="configuration",
    keywords=["api-config", "db_host"],
    evidence=["DB_HOST", "ConfigMap/api-config"],
    symptoms=[ObjectKey(kind="Deployment", name="api")],
)
WAITING = Evidence("waiting message", Source.OBJECT_FIELD, "status.containerStatuses[app]", "no key DB_HOST")
RENAME = RecordedChange(10.0, "ConfigMap", NS, "api-config", "modified", "remove /data/DB_HOST")


def test_a_correct_first_finding_with_all_evidence_passes() -> None:
    s = score(EXPECT, Diagnosis(findings=(finding("Pod", "api", evidence=(WAITING,), changes=(RENAME,)),)))
    assert s.top1 and s.evidence_recall == 1.0 and not s.false_roots and s.passed
    assert s.to_json()["passed"] is True and s.reasons == ()


def test_keywords_are_case_insensitive_and_missing_ones_are_named() -> None:
    f = finding("Pod", "api", root_cause="the pod API crash-loops", evidence=(WAITING,))
    s = score(EXPECT, Diagnosis(findings=(f,)))
    assert not s.top1 and s.missing_keywords == ("api-config", "db_host")
    assert s.evidence_recall == 0.5 and s.missing_evidence == ("ConfigMap/api-config",)
    assert not s.passed


def test_wrong_object_or_category_is_not_top1() -> None:
    other = finding("Pod", "worker", evidence=(WAITING,), changes=(RENAME,))
    s = score(EXPECT, Diagnosis(findings=(other, finding("Pod", "api"))))
    assert not s.top1 and "not Pod/api" in s.reasons[0]
    wrong_category = finding("Pod", "api", category=Category.RUNTIME, evidence=(WAITING,), changes=(RENAME,))
    s = score(EXPECT, Diagnosis(findings=(wrong_category,)))
    assert not s.top1 and s.reasons == ("category runtime, not configuration",)
    assert s.evidence_recall == 1.0  # recall is measured on the first finding whatever it names


def test_only_the_first_finding_counts() -> None:
    s = score(
        EXPECT, Diagnosis(findings=(finding("Pod", "worker"), finding("Pod", "api", evidence=(WAITING,))))
    )
    assert not s.top1 and s.evidence_recall == 0.0


def test_false_roots_are_decoys_and_symptoms_reported_as_roots() -> None:
    good = finding("Pod", "api", evidence=(WAITING,), changes=(RENAME,))
    decoy = finding("Pod", "frontend", category=Category.RUNTIME)
    symptom = finding("Deployment", "api", category=Category.STARTUP)
    s = score(
        EXPECT, Diagnosis(findings=(good, decoy, symptom)), decoys=[ObjectKey(kind="Pod", name="frontend")]
    )
    assert s.top1 and s.evidence_recall == 1.0
    assert s.false_roots == (f"Pod/{NS}/frontend", f"Deployment/{NS}/api")
    assert not s.passed


def test_prefix_names_and_scenario_node_names() -> None:
    expect = Expectation(object=ObjectKey(kind="Node", name="gpu"), category="gpu", keywords=["xid"])
    f = finding("Node", f"{NS}-gpu", category=Category.GPU, root_cause="Node reports Xid 79")
    assert score(expect, Diagnosis(findings=(f,)), node_names={"gpu": f"{NS}-gpu"}).top1
    assert not score(expect, Diagnosis(findings=(f,))).top1  # without the mapping it is another node
    by_prefix = Expectation(object=ObjectKey(kind="Pod", name="web-*"), category="configuration")
    assert score(by_prefix, Diagnosis(findings=(finding("Pod", "web-7d9f8-abcde"),))).top1
    assert not score(by_prefix, Diagnosis(findings=(finding("Pod", "webhook"),))).top1


def test_no_finding() -> None:
    s = score(EXPECT, Diagnosis())
    assert not s.top1 and s.evidence_recall == 0.0 and s.reasons == ("no finding",)
    assert score(Expectation(object=EXPECT.object, category="startup"), Diagnosis()).evidence_recall == 1.0


def test_an_info_finding_about_a_decoy_blames_nothing() -> None:
    import dataclasses

    good = finding("Pod", "api", evidence=(WAITING,), changes=(RENAME,))
    waiting = dataclasses.replace(
        finding("Pod", "llm-big", category=Category.SCHEDULING), severity=Severity.INFO
    )
    s = score(EXPECT, Diagnosis(findings=(good, waiting)), decoys=[ObjectKey(kind="Pod", name="llm-big")])
    assert s.false_roots == () and s.passed
    blamed = dataclasses.replace(waiting, severity=Severity.WARNING)
    s = score(EXPECT, Diagnosis(findings=(good, blamed)), decoys=[ObjectKey(kind="Pod", name="llm-big")])
    assert s.false_roots == (f"Pod/{NS}/llm-big",)
