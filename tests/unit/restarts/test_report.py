"""The report builder over snapshots: meaning, resources by name, events by UID, node, logs, changes."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.kube import parse_timestamp as parse_time
from capstan.notify import blocks_problem, render_slack
from capstan.restarts import RecordedChange, ReportSettings, RestartSnapshot, build_report, detect_restarts
from capstan.restarts._meaning import explain
from capstan.restarts._render import report_notice, restart_token
from capstan.restarts._report import WorkloadRef, resolve_owner
from tests.unit.restarts.podkit import event, node, pod, status

pytestmark = pytest.mark.unit

SETTINGS = ReportSettings(cluster="dev", log_lines=5, max_line_chars=60)


def _snapshot(old: dict[str, Any], new: dict[str, Any], **kw: Any) -> RestartSnapshot:
    [restart] = detect_restarts(old, new)
    return RestartSnapshot(
        restart=restart, pod=new, observed_at=parse_time("2026-11-29T10:06:00Z") or 0, **kw
    )


def _oom_pair(**kw: object) -> tuple[dict, dict]:  # type: ignore[type-arg]
    res = {"requests": {"memory": "256Mi", "cpu": "100m"}, "limits": {"memory": "512Mi"}}
    old = pod(containers=[status("sidecar", 0), status("app", 0)], resources=res, **kw)  # type: ignore[arg-type]
    new = pod(
        containers=[status("sidecar", 0), status("app", 1, reason="OOMKilled", exit_code=137)],
        resources=res,
        **kw,  # type: ignore[arg-type]
    )
    # give the two containers different resources to prove matching by name, not index
    new["spec"]["containers"][0]["resources"] = {"limits": {"memory": "64Mi"}}
    return old, new


def test_oom_report() -> None:
    old, new = _oom_pair()
    report = build_report(_snapshot(old, new, node=node(), previous_log="starting\nallocating\n"), SETTINGS)
    assert report.termination is not None and report.termination.reason == "OOMKilled"
    assert report.signal == "SIGKILL (9)"
    assert "512Mi" in report.meaning and "OOM killer" in report.meaning
    assert report.limits == {"memory": "512Mi"} and report.requests == {"cpu": "100m", "memory": "256Mi"}
    assert report.owner == WorkloadRef("Deployment", "default", "web")  # inferred from pod-template-hash
    assert report.node.ready == "Ready" and report.node.pressure == ()


def test_sigkill_under_node_memory_pressure_is_not_blamed_on_the_limit() -> None:
    old = pod(containers=[status("app", 0)])
    new = pod(containers=[status("app", 1, reason="Error", exit_code=137)])
    report = build_report(_snapshot(old, new, node=node(memory_pressure=True)), SETTINGS)
    assert "node ran out of memory" in report.meaning
    assert report.node.pressure == ("MemoryPressure",)


def test_liveness_probe_kill_and_events_by_uid() -> None:
    old = pod(containers=[status("app", 0), status("proxy", 0)])
    new = pod(containers=[status("app", 1, reason="Error", exit_code=143), status("proxy", 0)])
    events = [
        event(
            "uid-1",
            "Unhealthy",
            "Liveness probe failed: HTTP 500",
            count=3,
            field_path="spec.containers{app}",
        ),
        event("uid-1", "Unhealthy", "Readiness probe failed: timeout", field_path="spec.containers{proxy}"),
        event(
            "uid-1",
            "Killing",
            "Container app failed liveness probe, will be restarted",
            field_path="spec.containers{app}",
            last="2026-11-29T10:04:30Z",
        ),
        event("uid-1", "BackOff", "Back-off restarting", last="2026-11-29T10:01:00Z"),
        event("uid-1", "BackOff", "Back-off restarting", last="2026-11-29T10:03:00Z", count=2),
        event("uid-OLD", "OOMKilling", "old pod with the same name", name="web-7d9f8-abcde"),
    ]
    report = build_report(_snapshot(old, new, node=node(), events=events), SETTINGS)
    assert "liveness" in report.meaning and "SIGTERM" in report.meaning
    assert report.probe_failures == (
        "Liveness probe failed: HTTP 500 (×3)",
        "Container app failed liveness probe, will be restarted",
    )
    reasons = [(e.reason, e.count) for e in report.events]
    assert ("OOMKilling", 1) not in reasons  # matched by uid, not name
    assert reasons[0] == ("BackOff", 3)  # duplicates merged, oldest first
    assert len(report.events) == 4


def test_missing_node_and_missing_log_do_not_stop_the_report() -> None:
    old = pod(containers=[status("app", 0)])
    new = pod(containers=[status("app", 1, reason="Error", exit_code=1)])
    report = build_report(
        _snapshot(
            old,
            new,
            node=None,
            node_error='nodes "node-a" not found',
            log_error='previous terminated container "app" in pod "web" not found',
        ),
        SETTINGS,
    )
    assert not report.node.found and "not found" in (report.node.error or "")
    assert report.log_tail is None and "previous terminated container" in (report.log_unavailable or "")
    notice = report_notice(report)
    texts = {s.heading: s.body for s in notice.sections}
    assert texts["Previous container log"].startswith("Unavailable:")
    [brief] = notice.brief  # the short form used when this report is combined with others
    assert brief.body.startswith(notice.summary) and "Previous log unavailable" in brief.body
    assert texts["Node"] == 'node-a: unavailable (nodes "node-a" not found)'
    assert "exited with code 1" in report.meaning


def test_log_tail_is_redacted_cut_and_limited() -> None:
    old = pod(containers=[status("app", 0)])
    new = pod(containers=[status("app", 1, reason="Error", exit_code=1)])
    log = "\n".join(
        [f"line {i}" for i in range(20)]
        + [
            "Authorization: Bearer abcdefghijklmnop",
            "db password=hunter22 host=x",
            "x" * 200,
            "slack xoxb-123456789-abcdef",
            "connecting to postgres://app:s3cr3t@db:5432/app",
        ]
    )
    report = build_report(_snapshot(old, new, previous_log=log), SETTINGS)
    lines = (report.log_tail or "").splitlines()
    assert len(lines) == 5
    assert lines[0] == "Authorization: Bearer [REDACTED]"
    assert lines[1] == "db password=[REDACTED] host=x"
    assert lines[2] == "x" * 60 + "… [140 chars cut]"
    assert lines[3] == "slack [REDACTED]"
    assert lines[4] == "connecting to postgres://app:[REDACTED]@db:5432/app"
    assert "hunter22" not in (report.full_log or "") and "line 0" in (report.full_log or "")


def test_owner_chain_through_objects() -> None:
    rs = {
        "metadata": {
            "name": "web-7d9f8",
            "ownerReferences": [{"kind": "Deployment", "name": "web-api", "controller": True}],
        }
    }
    p = pod()
    assert resolve_owner(p, {("ReplicaSet", "default", "web-7d9f8"): rs}) == WorkloadRef(
        "Deployment", "default", "web-api"
    )
    job = {
        "metadata": {
            "name": "backup-123",
            "ownerReferences": [{"kind": "CronJob", "name": "backup", "controller": True}],
        }
    }
    jp = pod(owner=("Job", "backup-123"), labels={})
    assert resolve_owner(jp, {("Job", "default", "backup-123"): job}).kind == "CronJob"
    assert resolve_owner(pod(owner=None), {}) == WorkloadRef("Pod", "default", "web-7d9f8-abcde")
    assert resolve_owner(pod(owner=("StatefulSet", "db")), {}) == WorkloadRef("StatefulSet", "default", "db")


def test_what_changed_before_it() -> None:
    at = parse_time("2026-11-29T10:05:00Z") or 0.0
    spec_extra = {
        "volumes": [{"name": "cfg", "configMap": {"name": "web-config"}}],
    }
    old = pod(containers=[status("app", 0)], spec_extra=spec_extra)
    new = pod(containers=[status("app", 1, reason="Error", exit_code=1)], spec_extra=spec_extra)
    new["spec"]["containers"][0]["env"] = [
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db-pass", "key": "pw"}}}
    ]
    changes = [
        RecordedChange(at - 600, "Deployment", "default", "web", "updated", "image web:1 → web:2"),
        RecordedChange(at - 300, "ConfigMap", "default", "web-config", "updated", "data.LOG_LEVEL"),
        RecordedChange(at - 200, "Secret", "default", "db-pass", "updated", "data.pw changed to hunter2"),
        RecordedChange(at - 100, "Node", "", "node-a", "updated", "condition MemoryPressure=True"),
        RecordedChange(at - 100, "ConfigMap", "default", "unrelated", "updated"),
        RecordedChange(at - 100, "Deployment", "other", "web", "updated"),
        RecordedChange(at - 7200, "Deployment", "default", "web", "updated", "too early"),
        RecordedChange(at + 10, "Deployment", "default", "web", "updated", "after the restart"),
    ]
    report = build_report(_snapshot(old, new, changes=changes), SETTINGS)
    assert [(c.kind, c.name, c.summary) for c in report.changes] == [
        ("Deployment", "web", "image web:1 → web:2"),
        ("ConfigMap", "web-config", "data.LOG_LEVEL"),
        ("Secret", "db-pass", ""),  # names only
        ("Node", "node-a", "condition MemoryPressure=True"),
    ]


def test_channel_annotation_and_notice_fits_slack() -> None:
    old, new = _oom_pair(annotations={"capstan.io/restart-channel": "#ml-oncall"})
    snap = _snapshot(old, new, node=node(), previous_log="```\n" + "boom\n" * 5000)
    report = build_report(snap, SETTINGS, channel_annotation="capstan.io/restart-channel")
    notice = report_notice(report)
    assert notice.channel == "#ml-oncall"
    assert notice.thread_key == "default/Deployment/web"
    assert restart_token(report.restart) in notice.summary
    assert notice.summary.startswith(
        "default/web-7d9f8-abcde · app restart #1 — restarted, OOMKilled, exit 137"
    )
    assert blocks_problem(render_slack(notice)["blocks"]) is None


@pytest.mark.parametrize(
    ("reason", "code", "expected"),
    [
        ("Completed", 0, "Exited successfully"),
        ("Error", 139, "segmentation fault"),
        ("Error", 134, "SIGABRT"),
        ("ContainerCannotRun", 127, "not found"),
        ("Error", 130, "SIGINT (2)"),
        (None, None, "not available"),
    ],
)
def test_explain(reason: str | None, code: int | None, expected: str) -> None:
    assert expected in explain(reason, code)
