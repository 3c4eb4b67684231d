"""Restart reports and digests as :class:`capstan.notify.Notice` objects, which every sink then renders into its
own format. Each restart appears in a canonical token, ``<namespace>/<pod> · <container> restart #N`` (or
``#N–#M``), so a receiver can account for every restart (see :mod:`capstan.restarts._accounting`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from capstan.notify import Notice, Section, cut
from capstan.restarts._detect import ContainerRestart
from capstan.restarts._noise import Digest
from capstan.restarts._report import RestartReport

DIGEST_LINES_PER_SECTION: Final = 8
DIGEST_SECTIONS_PER_MESSAGE: Final = 5
BRIEF_LOG_LINES: Final = 3  # log lines a report keeps when it is combined with others into one message
BRIEF_CHARS: Final = 900
REPORT_PRIORITY: Final = 1  # first reports go before digests when a destination is backed up


def restart_token(restart: ContainerRestart) -> str:
    """The canonical text naming one restart (or a run of restarts) of one container."""
    numbers = restart.restart_numbers
    span = f"#{numbers[0]}" if len(numbers) == 1 else f"#{numbers[0]}–#{numbers[-1]}"
    return f"{restart.namespace}/{restart.pod} · {restart.container} restart {span}"


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _restart_meta(restart: ContainerRestart) -> dict[str, object]:
    return {
        "namespace": restart.namespace,
        "pod": restart.pod,
        "pod_uid": restart.pod_uid,
        "container": restart.container,
        "container_type": restart.container_type,
        "from": restart.previous_count,
        "to": restart.restart_count,
        "while_down": restart.while_down,
    }


def report_notice(report: RestartReport) -> Notice:
    """The chat message for one restart report."""
    r = report.restart
    term = report.termination
    reason = (term.reason if term else None) or "unknown reason"
    exit_part = f", exit {term.exit_code}" if term and term.exit_code is not None else ""
    kind = {"init": " (init container)", "sidecar": " (sidecar)", "container": ""}[r.container_type]
    times = f"{r.restarts} restarts" if r.restarts > 1 else "restarted"
    prefix = "While Capstan was down: " if r.while_down else ""
    summary = (
        f"{prefix}{restart_token(r)}{kind} — {times}, {reason}{exit_part} — "
        f"{report.owner.kind} {report.owner.name} on {report.node.name}"
    )
    fields: list[tuple[str, str]] = [
        ("Cluster", report.cluster),
        ("Workload", f"{report.owner.kind} {report.owner.namespace}/{report.owner.name}"),
        ("Pod", f"{r.namespace}/{r.pod}"),
        ("Container", r.container + kind),
        ("Restart count", f"{r.previous_count} → {r.restart_count}"),
        ("Node", report.node.name),
        ("Reason", reason),
        ("Exit code", "-" if not term or term.exit_code is None else str(term.exit_code)),
        ("Signal", report.signal or "-"),
        ("Started", (term.started_at if term else None) or "-"),
        ("Finished", (term.finished_at if term else None) or "-"),
        ("Requests", ", ".join(f"{k}={v}" for k, v in report.requests.items()) or "none"),
        ("Limits", ", ".join(f"{k}={v}" for k, v in report.limits.items()) or "none"),
    ]
    what = report.meaning
    if term and term.message:
        what += f"\nTermination message: {term.message.strip()[:500]}"
    if r.while_down:
        what += "\nThis restart happened while Capstan was not watching; details are from the pod's current state."
    sections = [Section("What happened", what), Section("Current state", report.current_state)]
    if report.probe_failures:
        sections.append(Section("Probe failures", "\n".join(report.probe_failures)))
    if report.events:
        lines = [
            f"{_when(e.last_seen) if e.last_seen else '?'}  {e.type} {e.reason}"
            + (f" (×{e.count})" if e.count > 1 else "")
            + f": {e.message}"
            for e in report.events
        ]
        sections.append(Section("Pod events", "\n".join(lines), code=True))
    else:
        sections.append(Section("Pod events", "No events recorded for this pod."))
    node = report.node
    if node.found:
        conds = ", ".join(f"{t}={s}" + (f" ({why})" if why else "") for t, s, why in node.conditions)
        pressure = ", ".join(node.pressure) or "no pressure"
        sched = ", SchedulingDisabled" if node.unschedulable else ""
        node_text = f"{node.name}: {node.ready}{sched}; {pressure}\n{conds}"
    else:
        node_text = f"{node.name}: unavailable ({node.error})"
    sections.append(Section("Node", node_text))
    if report.changes:
        lines = [
            f"{_when(c.at)}  {c.kind} {c.namespace + '/' if c.namespace else ''}{c.name} {c.change}"
            + (f": {c.summary}" if c.summary else "")
            for c in report.changes
        ]
        sections.append(Section("What changed before it", "\n".join(lines)))
    else:
        sections.append(
            Section(
                "What changed before it",
                "No recorded changes to the workload, its "
                "ConfigMaps/Secrets or its node in the window before the restart.",
            )
        )
    if report.log_tail is not None:
        sections.append(Section("Previous container log (tail)", report.log_tail, code=True))
    else:
        sections.append(Section("Previous container log", f"Unavailable: {report.log_unavailable}."))
    brief_lines = [summary, report.meaning.split("\n", 1)[0]]
    if term and term.message:
        brief_lines.append(f"Termination message: {term.message.strip()[:160]}")
    if report.changes:
        c = report.changes[-1]
        more = f" (+{len(report.changes) - 1} earlier)" if len(report.changes) > 1 else ""
        brief_lines.append(
            f"Changed before it{more}: {c.kind} {c.name} {c.change}" + (f": {c.summary}" if c.summary else "")
        )
    if report.log_tail is not None:
        last = [line[:160] for line in report.log_tail.splitlines()[-BRIEF_LOG_LINES:]]
        brief_lines.append("Log tail:\n" + "\n".join(f"  {line}" for line in last))
    else:
        brief_lines.append(f"Previous log unavailable: {report.log_unavailable}.")
    brief = (Section(f"{r.namespace}/{r.pod} · {r.container}", cut("\n".join(brief_lines), BRIEF_CHARS)),)
    return Notice(
        title=f"Container restarted: {r.namespace}/{r.pod}",
        summary=summary,
        severity="critical" if reason == "OOMKilled" else "warning",
        fields=tuple(fields),
        sections=tuple(sections),
        log=report.full_log,
        log_name=f"{r.pod}-{r.container}-previous.log",
        thread_key=report.owner.key,
        channel=report.channel,
        footer=f"cluster {report.cluster} · observed {_when(report.observed_at)} · capstan",
        meta={"kind": "restart", "restarts": [_restart_meta(r)]},
        brief=brief,
        priority=REPORT_PRIORITY,
    )


def digest_notices(digest: Digest, cluster: str, *, channel: str | None = None) -> list[Notice]:
    """The digest of a mute window, split over as many messages as needed so every restart is listed."""
    lines = [
        restart_token(r) + (" (while Capstan was down)" if r.while_down else "") for r in digest.restarts
    ]
    per_message = DIGEST_LINES_PER_SECTION * DIGEST_SECTIONS_PER_MESSAGE
    chunks = [lines[i : i + per_message] for i in range(0, len(lines), per_message)] or [[]]
    restarts = [digest.restarts[i : i + per_message] for i in range(0, len(lines), per_message)] or [[]]
    why = (
        "above the restart cap"
        if digest.reason == "cap"
        else f"muted from {_when(digest.opened_at)} to {_when(digest.closed_at)}"
    )
    notices = []
    for index, (chunk, chunk_restarts) in enumerate(zip(chunks, restarts, strict=True), start=1):
        part = f" (part {index}/{len(chunks)})" if len(chunks) > 1 else ""
        sections = tuple(
            Section(
                "Restarts" if start == 0 else "Restarts (continued)",
                "\n".join(chunk[start : start + DIGEST_LINES_PER_SECTION]),
            )
            for start in range(0, len(chunk), DIGEST_LINES_PER_SECTION)
        )
        notices.append(
            Notice(
                title=f"Restart digest: {digest.owner_key}{part}",
                summary=f"{digest.restart_count} restart(s) of {digest.owner_key} {why}",
                severity="warning",
                sections=sections,
                thread_key=digest.owner_key,
                channel=channel,
                footer=f"cluster {cluster} · capstan",
                meta={"kind": "digest", "restarts": [_restart_meta(r) for r in chunk_restarts]},
                brief=tuple(
                    Section(f"Digest {digest.owner_key}{part}: {s.heading.lower()}", s.body) for s in sections
                )
                or (Section(f"Digest {digest.owner_key}", f"{digest.restart_count} restart(s) {why}"),),
            )
        )
    return notices


def recovered_digest_notices(
    restarts: list[ContainerRestart], cluster: str, *, since: float, until: float
) -> list[Notice]:
    """Digests for restarts whose digest was lost when Capstan stopped, one per namespace (the owner workload
    is not kept in the records)."""
    by_namespace: dict[str, list[ContainerRestart]] = {}
    for restart in restarts:
        by_namespace.setdefault(restart.namespace, []).append(restart)
    notices = []
    for namespace in sorted(by_namespace):
        digest = Digest(
            f"{namespace} (recovered after a Capstan restart)", since, until, by_namespace[namespace], "mute"
        )
        notices.extend(digest_notices(digest, cluster))
    return notices
