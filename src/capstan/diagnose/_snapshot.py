"""What an analyzer reads: one :class:`Snapshot` of live objects, Events, previous-log tails, recorded changes and
restart records, with a :class:`Readable` note for every kind that could not be read (a 403), so an analyzer says
"cannot read X" instead of guessing. Plain data, built by a shell (the live builder over the informer and the store
is not written yet) or by hand in tests; nothing here calls the cluster.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capstan.kube import parse_timestamp
from capstan.restarts import RecordedChange

if TYPE_CHECKING:
    from capstan.store import Restart

KubeObject = Mapping[str, Any]


@dataclass(frozen=True)
class Readable:
    """Whether one kind could be read, and why not (the API server's message: ``pods is forbidden: …``)."""

    kind: str
    readable: bool = True
    reason: str = ""


@dataclass(frozen=True)
class Snapshot:
    """One cluster state to diagnose.

    ``objects`` maps a kind (``"Pod"``, ``"Service"``, ``"Node"``, ``"ConfigMap"``…) to its live objects as plain
    dicts; ``logs`` maps ``(namespace, pod, container)`` to the tail of the previous container's log; ``changes`` are
    the recorded changes of the window; ``restarts`` the store's restart records; ``capacity`` the capacity
    planner's view when one runs. ``unreadable`` holds the kinds that could not be read; a kind that is absent
    from ``objects`` and not in ``unreadable`` was read and has no objects."""

    objects: Mapping[str, Sequence[KubeObject]] = field(default_factory=dict)
    events: Sequence[KubeObject] = ()
    logs: Mapping[tuple[str, str, str], str] = field(default_factory=dict)
    changes: Sequence[RecordedChange] = ()
    restarts: Sequence[Restart] = ()
    capacity: Mapping[str, Any] | None = None
    unreadable: Mapping[str, Readable] = field(default_factory=dict)
    observed_at: float = 0.0

    def of(self, kind: str) -> Sequence[KubeObject]:
        """The live objects of ``kind`` (empty when none, or when the kind could not be read)."""
        return self.objects.get(kind, ())

    def readable(self, kind: str) -> Readable:
        return self.unreadable.get(kind) or Readable(kind)

    def get(self, kind: str, namespace: str, name: str) -> KubeObject | None:
        """One object by kind, namespace (empty for cluster-scoped kinds) and name."""
        for obj in self.of(kind):
            meta = obj.get("metadata") or {}
            if meta.get("name") == name and str(meta.get("namespace") or "") == namespace:
                return obj
        return None

    def in_namespace(self, kind: str, namespace: str) -> Iterator[KubeObject]:
        for obj in self.of(kind):
            if str((obj.get("metadata") or {}).get("namespace") or "") == namespace:
                yield obj

    def events_about(self, kind: str, namespace: str, name: str, uid: str = "") -> list[KubeObject]:
        """Events whose subject is this object (by UID when both sides have one, else by kind, namespace, name),
        oldest first."""
        out = []
        for event in self.events:
            subject = event.get("involvedObject") or event.get("regarding") or {}
            if not isinstance(subject, Mapping) or subject.get("kind") != kind:
                continue
            if uid and subject.get("uid"):
                if subject.get("uid") != uid:
                    continue
            elif subject.get("name") != name or str(subject.get("namespace") or "") != namespace:
                continue
            out.append(event)
        return sorted(out, key=lambda e: event_time(e) or 0.0)

    def log(self, namespace: str, pod: str, container: str) -> str | None:
        return self.logs.get((namespace, pod, container))


def event_time(event: KubeObject) -> float | None:
    """When an Event last happened: series, lastTimestamp, eventTime, firstTimestamp, then creation.

    NOTE: the same lookup as ``capstan.restarts._report.event_time``, which is private there; once the restarts
    package exports it this becomes an import."""
    series = event.get("series") or {}
    for value in (
        series.get("lastObservedTime") if isinstance(series, Mapping) else None,
        event.get("lastTimestamp"),
        event.get("eventTime"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        if (at := parse_timestamp(value)) is not None:
            return at
    return None


def event_message(event: KubeObject) -> str:
    return str(event.get("message") or event.get("note") or "").strip()


def meta_of(obj: KubeObject) -> tuple[str, str, str]:
    """(namespace, name, uid) of an object."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or "")
