"""The Finding schema: stable ids, stable JSON, and redaction of everything a finding carries."""

from __future__ import annotations

import json

from capstan.diagnose import (
    Category,
    Evidence,
    Finding,
    ObjectRef,
    Severity,
    Snapshot,
    Source,
    Symptom,
    diagnose,
)
from capstan.redact import Redactor
from capstan.restarts import RecordedChange

from .kit import container, pod, terminated, waiting

POD = ObjectRef("Pod", "shop", "web-1")


def make(cause: str = "CrashLoopBackOff/app", sentence: str = "The container app crash-loops.") -> Finding:
    return Finding.create(
        "pods",
        cause,
        subject=POD,
        related=[ObjectRef("Deployment", "shop", "web"), POD],
        severity=Severity.CRITICAL,
        category=Category.RUNTIME,
        root_cause=sentence,
        evidence=[Evidence("exit", Source.OBJECT_FIELD, "status.x", "exitCode=1", 5.0)],
        symptoms=[Symptom(ObjectRef("Service", "shop", "web"), "no ready endpoints")],
        confidence=1.7,
    )


def test_the_id_depends_on_analyzer_object_and_cause_not_on_the_wording() -> None:
    a, b = make(), make(sentence="The container app crash-loops (12 restarts).")
    assert a.id == b.id and len(a.id) == 16
    assert make(cause="OOMKilled/app").id != a.id
    other = Finding.create(
        "pods",
        "CrashLoopBackOff/app",
        subject=ObjectRef("Pod", "shop", "web-2"),
        severity=Severity.CRITICAL,
        category=Category.RUNTIME,
        root_cause="x",
    )
    assert other.id != a.id


def test_objects_start_with_the_subject_once_and_confidence_is_clamped() -> None:
    f = make()
    assert f.objects == (POD, ObjectRef("Deployment", "shop", "web"))
    assert f.confidence == 1.0


def test_json_is_plain_and_stable() -> None:
    f = make()
    data = f.to_json()
    assert list(data) == [
        "id",
        "analyzer",
        "cause",
        "severity",
        "category",
        "root_cause",
        "objects",
        "evidence",
        "changes",
        "symptoms",
        "confidence",
        "next_check",
    ]
    assert data["severity"] == "critical" and data["category"] == "runtime"
    assert data["evidence"][0] == {
        "what": "exit",
        "source": "object-field",
        "where": "status.x",
        "text": "exitCode=1",
        "at": 5.0,
    }
    assert json.dumps(data) == json.dumps(make().to_json())
    assert {c.value for c in Category} == {
        "startup",
        "runtime",
        "scheduling",
        "configuration",
        "networking",
        "storage",
        "scaling",
        "security",
        "node",
        "gpu",
        "control-plane",
    }


def test_planted_secrets_in_a_log_line_and_an_env_value_never_reach_the_json() -> None:
    log_secret = "hunter2-log-Secret-9f8e7d"
    env_secret = "s3cr3t-env-Value-1a2b3c"
    c = container(env=[{"name": "DB_PASSWORD", "value": env_secret}])
    p = pod(
        containers=[c], statuses=[waiting("app", "CrashLoopBackOff", restarts=2, last=terminated("Error", 1))]
    )
    log = f"connecting to postgres://app:{log_secret}@db:5432/shop\nFATAL: login failed with password={log_secret}\n"
    snap = Snapshot(objects={"Pod": [p]}, logs={("shop", p["metadata"]["name"], "app"): log})
    planted = Finding.create(
        "pods",
        "planted",
        subject=POD,
        severity=Severity.WARNING,
        category=Category.CONFIGURATION,
        root_cause=f"env DB_PASSWORD={env_secret} is wrong",
        evidence=[
            Evidence(
                "env",
                Source.OBJECT_FIELD,
                "spec.containers[app].env[DB_PASSWORD]",
                f"DB_PASSWORD={env_secret}",
            )
        ],
        changes=[RecordedChange(1.0, "Secret", "shop", "db", "MODIFIED", f"password={env_secret}")],
    )

    class Planted:
        name = "planted"
        reads = ("Pod",)

        def analyze(self, snapshot: Snapshot) -> list[Finding]:
            return [planted]

    from capstan.diagnose import ANALYZERS

    d = diagnose(snap, [*ANALYZERS.values(), Planted()], redactor=Redactor())
    text = json.dumps(d.to_json())
    assert "FATAL" in text and "REDACTED" in text  # the log line is cited, its secret is not
    assert log_secret not in text
    assert env_secret not in text
    assert len(d.findings) == 2
