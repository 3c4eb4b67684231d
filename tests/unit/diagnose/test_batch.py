"""The batch analyzer: failed Jobs (with what their last pod says) and suspended Jobs and CronJobs."""

from __future__ import annotations

from typing import Any

from capstan.diagnose import Category, ObjectRef, Severity, Snapshot, diagnose
from capstan.diagnose._batch import analyze_batch

from .kit import pod, terminated


def job(
    name: str = "migrate",
    *,
    failed: tuple[str, str] | None = ("BackoffLimitExceeded", "Job has reached the specified backoff limit"),
    suspend: bool = False,
    cron: str | None = None,
    complete: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "shop", "uid": f"uid-{name}"}
    if cron:
        meta["ownerReferences"] = [{"kind": "CronJob", "name": cron, "controller": True}]
    status: dict[str, Any] = {"failed": 3 if failed else 0}
    if failed:
        status["conditions"] = [
            {"type": "Failed", "status": "True", "reason": failed[0], "message": failed[1]}
        ]
    if complete:
        status["completionTime"] = "2026-12-01T10:00:00Z"
    return {
        "kind": "Job",
        "metadata": meta,
        "spec": {"backoffLimit": 2, "suspend": suspend},
        "status": status,
    }


def failed_pod(name: str, created: str, job_name: str = "migrate") -> dict[str, Any]:
    p = pod(
        name,
        owner=("Job", job_name),
        phase="Failed",
        restartPolicy="Never",
        statuses=[
            {
                "name": "app",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated("Error", 1)},
            }
        ],
    )
    p["metadata"]["creationTimestamp"] = created
    return p


def test_a_failed_job_names_what_its_last_pod_logged_and_folds_its_pods() -> None:
    pods = [
        failed_pod("migrate-aaaaa", "2026-12-01T09:00:00Z"),
        failed_pod("migrate-bbbbb", "2026-12-01T09:05:00Z"),
    ]
    logs = {
        ("shop", "migrate-aaaaa", "app"): "starting\nerror: could not resolve db.internal\n",
        (
            "shop",
            "migrate-bbbbb",
            "app",
        ): "starting\npsycopg.OperationalError: connection refused (db:5432)\n",
    }
    snap = Snapshot(objects={"Job": [job()], "Pod": pods}, logs=logs)
    (f,) = analyze_batch(snap)
    assert f.subject == ObjectRef("Job", "shop", "migrate") and f.severity is Severity.CRITICAL
    assert f.category is Category.NETWORKING  # from the newest pod's log line
    assert "BackoffLimitExceeded" in f.root_cause and "connection refused" in f.root_cause
    assert "migrate-bbbbb" in f.root_cause
    assert [s.object.name for s in f.symptoms] == ["migrate-aaaaa", "migrate-bbbbb"]

    (root,) = diagnose(snap).findings  # the pods' own "exited" findings are folded into the Job
    assert root.subject == ObjectRef("Job", "shop", "migrate")


def test_a_job_failed_by_deadline_without_pods_still_says_why() -> None:
    (f,) = analyze_batch(
        Snapshot(objects={"Job": [job(failed=("DeadlineExceeded", "Job was active longer"))]})
    )
    assert f.cause == "job-failed/DeadlineExceeded" and f.category is Category.RUNTIME
    assert f.confidence < 0.9


def test_a_running_or_complete_job_says_nothing_and_a_suspended_one_warns() -> None:
    assert analyze_batch(Snapshot(objects={"Job": [job(failed=None)]})) == []
    assert analyze_batch(Snapshot(objects={"Job": [job(failed=None, suspend=True, complete=True)]})) == []
    (f,) = analyze_batch(Snapshot(objects={"Job": [job(failed=None, suspend=True, cron="nightly")]}))
    assert f.cause == "suspended" and f.severity is Severity.WARNING
    assert ObjectRef("CronJob", "shop", "nightly") in f.objects


def test_a_suspended_cronjob_warns() -> None:
    cron: dict[str, Any] = {
        "kind": "CronJob",
        "metadata": {"name": "nightly", "namespace": "shop"},
        "spec": {"suspend": True},
    }
    (f,) = analyze_batch(Snapshot(objects={"CronJob": [cron]}))
    assert f.subject == ObjectRef("CronJob", "shop", "nightly") and "spec.suspend" in f.root_cause
    cron["spec"]["suspend"] = False
    assert analyze_batch(Snapshot(objects={"CronJob": [cron]})) == []


def test_without_a_log_the_termination_message_says_why() -> None:
    p = failed_pod("migrate-aaaaa", "2026-12-01T09:00:00Z")
    p["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        "dial tcp 10.96.0.5:5432: connection refused"
    )
    (f,) = analyze_batch(Snapshot(objects={"Job": [job()], "Pod": [p]}))
    assert f.category is Category.NETWORKING and "termination message says" in f.root_cause
    assert any(e.what == "termination message" for e in f.evidence)
