"""Restarts as store records: each restart number of each container becomes one ``Restart`` row (unique on pod
UID, container and count, so re-writing is harmless), and every container's count is kept as its last-seen
``RestartCount`` — what :func:`capstan.restarts.detect_while_down` compares with after Capstan restarts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from capstan.restarts._detect import ContainerRestart, Pod, container_counts, pod_uid
from capstan.restarts._report import last_termination
from capstan.store import Batch, Restart, RestartCount


def restart_records(
    restart: ContainerRestart, pod: Pod, observed_at: float, notify: str | None = None
) -> list[Restart]:
    """One record per restart number; only the latest has the termination the pod still shows (the earlier
    ones happened between two updates Capstan saw and are marked ``unobserved``). ``notify`` is what the notifier
    did with it (``reported``, ``digested``, ``filtered``), kept so digests lost in a crash can be recovered."""
    term = last_termination(pod, restart.container)
    records = []
    for number in restart.restart_numbers:
        latest = number == restart.restart_count
        state: dict[str, object] = {
            "while_down": restart.while_down,
            "previous_count": restart.previous_count,
        }
        if notify is not None:
            state["notify"] = notify
        if latest and term is not None:
            state["termination"] = {
                "reason": term.reason,
                "exit_code": term.exit_code,
                "signal": term.signal,
                "started_at": term.started_at,
                "finished_at": term.finished_at,
            }
        records.append(
            Restart(
                pod_uid=restart.pod_uid,
                namespace=restart.namespace,
                pod=restart.pod,
                container=restart.container,
                container_type=restart.container_type,
                restart_count=number,
                observed_at=observed_at,
                reason=(term.reason or "Unknown") if latest and term is not None else "unobserved",
                exit_code=term.exit_code if latest and term is not None else None,
                reported_state=state,
            )
        )
    return records


def count_records(pod: Pod) -> list[RestartCount]:
    """The current restart count of every container of ``pod`` (its new last-seen counts)."""
    meta = pod.get("metadata") or {}
    uid = pod_uid(pod)
    return [
        RestartCount(
            uid, name, str(meta.get("namespace") or ""), str(meta.get("name") or ""), c.restart_count
        )
        for name, c in sorted(container_counts(pod).items())
    ]


def restart_batch(
    pod: Pod,
    restarts: Sequence[ContainerRestart],
    observed_at: float,
    notify: Mapping[str, str] | None = None,
) -> Batch:
    """The records and last-seen counts for one pod update, to write in one transaction; ``notify`` maps a
    container name to what the notifier did with its restart."""
    batch = Batch(restart_counts=count_records(pod))
    for restart in restarts:
        action = (notify or {}).get(restart.container)
        batch.restarts.extend(restart_records(restart, pod, observed_at, action))
    return batch


def notified_restarts(payloads: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str, int]]:
    """Every (namespace, pod, container, restart number) named in outbox payloads (reports and digests)."""
    seen: set[tuple[str, str, str, int]] = set()
    for payload in payloads:
        meta = payload.get("meta") or {}
        for r in meta.get("restarts") or []:
            try:
                first, last = int(r["from"]) + 1, int(r["to"])
                key = (str(r["namespace"]), str(r["pod"]), str(r["container"]))
            except (KeyError, TypeError, ValueError):
                continue
            seen.update((*key, n) for n in range(first, last + 1))
    return seen


def unsent_digested(
    records: Sequence[Restart], payloads: Iterable[Mapping[str, Any]]
) -> list[ContainerRestart]:
    """Restarts that were counted for a digest (``notify == "digested"``) but appear in no outbox message: the
    digest was still being collected when Capstan stopped. Feed them to :func:`recovered_digest_notices`."""
    notified = notified_restarts(payloads)
    lost = []
    for rec in sorted(records, key=lambda r: (r.namespace, r.pod, r.container, r.restart_count)):
        if rec.reported_state.get("notify") != "digested":
            continue
        if (rec.namespace, rec.pod, rec.container, rec.restart_count) in notified:
            continue
        kind = rec.container_type if rec.container_type in ("container", "init", "sidecar") else "container"
        lost.append(
            ContainerRestart(
                namespace=rec.namespace,
                pod=rec.pod,
                container=rec.container,
                pod_uid=rec.pod_uid,
                container_type=kind,  # type: ignore[arg-type]
                previous_count=rec.restart_count - 1,
                restart_count=rec.restart_count,
                while_down=bool(rec.reported_state.get("while_down")),
            )
        )
    return lost


def last_seen(counts: Mapping[tuple[str, str], RestartCount]) -> dict[tuple[str, str], int]:
    """``RestartRecords.restart_counts()`` in the shape :func:`detect_while_down` takes."""
    return {key: value.restart_count for key, value in counts.items()}
