"""The batch analyzer: Jobs that failed for good (``BackoffLimitExceeded``, ``DeadlineExceeded``, a pod failure
policy) and Jobs or CronJobs that are suspended.

A failed Job is the root: its sentence carries what its newest failed pod says (the last termination and the
previous log's telling line, classified by the pods analyzer's pattern library), and its failed pods are attached as
symptoms, so the correlation step folds each pod's own ``exited`` finding into the Job. A CronJob that owns the Job
is named among the objects; a suspended CronJob or Job (``spec.suspend``) is a warning, since nothing runs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import preceding_changes, quote, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source, Symptom
from capstan.diagnose._pods import classify_log, containers
from capstan.diagnose._snapshot import KubeObject, Snapshot, meta_of
from capstan.kube import parse_timestamp
from capstan.restarts import explain, last_termination

NAME: Final = "batch"


def analyze_batch(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    pods_of: dict[tuple[str, str], list[KubeObject]] = {}
    for pod in snapshot.of("Pod"):
        namespace, _, _ = meta_of(pod)
        for owner in (pod.get("metadata") or {}).get("ownerReferences") or ():
            if isinstance(owner, Mapping) and owner.get("kind") == "Job" and owner.get("controller"):
                pods_of.setdefault((namespace, str(owner.get("name") or "")), []).append(pod)
    for job in snapshot.of("Job"):
        ref = ref_of("Job", job)
        with about(ref):
            out.extend(_job(snapshot, job, ref, pods_of.get((ref.namespace, ref.name), [])))
    for cron in snapshot.of("CronJob"):
        ref = ref_of("CronJob", cron)
        with about(ref):
            if (cron.get("spec") or {}).get("suspend") is True:
                out.append(_suspended(snapshot, ref))
    return out


def _owner_cron(job: KubeObject, ref: ObjectRef) -> list[ObjectRef]:
    for owner in (job.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(owner, Mapping) and owner.get("kind") == "CronJob":
            return [ObjectRef("CronJob", ref.namespace, str(owner.get("name") or ""))]
    return []


def _failed_condition(job: KubeObject) -> Mapping[str, object] | None:
    for cond in (job.get("status") or {}).get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Failed" and cond.get("status") == "True":
            return cond
    return None


def _job(snapshot: Snapshot, job: KubeObject, ref: ObjectRef, pods: list[KubeObject]) -> Iterator[Finding]:
    related = _owner_cron(job, ref)
    failed = _failed_condition(job)
    if failed is None:
        if (job.get("spec") or {}).get("suspend") is True and not (job.get("status") or {}).get(
            "completionTime"
        ):
            yield _suspended(snapshot, ref, related)
        return
    reason = str(failed.get("reason") or "Failed")
    message = str(failed.get("message") or "")
    status = job.get("status") or {}
    failed_pods = sorted(
        (p for p in pods if str((p.get("status") or {}).get("phase") or "") == "Failed"),
        key=lambda p: parse_timestamp(str((p.get("metadata") or {}).get("creationTimestamp") or "")) or 0.0,
    )
    evidence = [
        Evidence(
            "job failed", Source.OBJECT_FIELD, "status.conditions[Failed]", quote(f"{reason}: {message}")
        ),
        Evidence("failed pods", Source.OBJECT_FIELD, "status.failed", str(status.get("failed", 0))),
    ]
    because, category = "", Category.RUNTIME
    if failed_pods:
        newest = failed_pods[-1]
        pod_ref = ref_of("Pod", newest)
        related = [*related, pod_ref]
        for c in containers(newest):
            term = last_termination(newest, c.name)
            if term is None or not term.exit_code:
                continue
            evidence.append(
                Evidence(
                    "last failed pod",
                    Source.OBJECT_FIELD,
                    f"Pod {pod_ref.name} {c.where}.state.terminated",
                    f"reason={term.reason} exitCode={term.exit_code}",
                )
            )
            because = (
                f" Its last pod {pod_ref.name} ({c.name}) {explain(term.reason, term.exit_code, term.signal)}"
            )
            log = snapshot.log(pod_ref.namespace, pod_ref.name, c.name)
            if not log and term.message:
                # no log to read (the pod's node is gone, logs rotated): the termination message is the app's
                # last word (terminationMessagePolicy FallbackToLogsOnError puts the log's tail there)
                evidence.append(
                    Evidence(
                        "termination message", Source.OBJECT_FIELD,
                        f"Pod {pod_ref.name} {c.where}.state.terminated.message", quote(term.message),
                    )
                )  # fmt: skip
                cls, lines = classify_log(term.message)
                if cls is not None:
                    category = cls.category
                    because += f"; its termination message says {cls.meaning}: {quote(lines[-1], 160)}"
            if log:
                cls, lines = classify_log(log)
                evidence.extend(
                    Evidence("log", Source.LOG_LINE, f"log {pod_ref.name}/{c.name}", quote(line))
                    for line in lines
                )
                if cls is not None:
                    category = cls.category
                    because += f"; its log says {cls.meaning}: {quote(lines[-1], 160)}"
            because += "."
            break
    yield Finding.create(
        NAME,
        f"job-failed/{reason}",
        subject=ref,
        related=related,
        severity=Severity.CRITICAL,
        category=category,
        root_cause=f"Job {ref.namespace}/{ref.name} failed ({reason}: {quote(message, 120)}).{because}",
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref, *related]),
        symptoms=[Symptom(ref_of("Pod", p), "failed pod of the Job") for p in failed_pods],
        confidence=0.9 if because else 0.7,
        next_check=f"kubectl logs -n {ref.namespace} job/{ref.name}",
    )


def _suspended(snapshot: Snapshot, ref: ObjectRef, related: list[ObjectRef] | None = None) -> Finding:
    return Finding.create(
        NAME,
        "suspended",
        subject=ref,
        related=related or (),
        severity=Severity.WARNING,
        category=Category.CONFIGURATION,
        root_cause=f"{ref.kind} {ref.namespace}/{ref.name} is suspended (spec.suspend: true): it starts no pods.",
        evidence=[Evidence("suspended", Source.OBJECT_FIELD, "spec.suspend", "true")],
        changes=preceding_changes(snapshot, [ref, *(related or ())]),
        confidence=0.9,
        next_check=f"kubectl get {ref.kind.lower()} -n {ref.namespace} {ref.name} -o jsonpath='{{.spec.suspend}}'",
    )
