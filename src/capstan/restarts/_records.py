"""Restarts as store records: each restart number of each container becomes one ``Restart`` row (unique on pod
UID, container and count, so re-writing is harmless), and every container's count is kept as its last-seen
``RestartCount`` — what :func:`capstan.restarts.detect_while_down` compares with after Capstan restarts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from capstan.restarts._detect import ContainerRestart, Pod, container_counts, pod_uid
from capstan.restarts._report import last_termination
from capstan.store import Batch, Restart, RestartCount


def restart_records(restart: ContainerRestart, pod: Pod, observed_at: float) -> list[Restart]:
    """One record per restart number; only the latest has the termination the pod still shows (the earlier
    ones happened between two updates Capstan saw and are marked ``unobserved``)."""
    term = last_termination(pod, restart.container)
    records = []
    for number in restart.restart_numbers:
        latest = number == restart.restart_count
        state: dict[str, object] = {
            "while_down": restart.while_down,
            "previous_count": restart.previous_count,
        }
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


def restart_batch(pod: Pod, restarts: Sequence[ContainerRestart], observed_at: float) -> Batch:
    """The records and last-seen counts for one pod update, to write in one transaction."""
    batch = Batch(restart_counts=count_records(pod))
    for restart in restarts:
        batch.restarts.extend(restart_records(restart, pod, observed_at))
    return batch


def last_seen(counts: Mapping[tuple[str, str], RestartCount]) -> dict[tuple[str, str], int]:
    """``Store.restart_counts()`` in the shape :func:`detect_while_down` takes."""
    return {key: value.restart_count for key, value in counts.items()}
