"""What an analyzer reads: one :class:`Snapshot` of live objects, Events, previous-log tails, recorded changes and
restart records, with a :class:`Readable` note for every kind that could not be read (a 403), so an analyzer says
"cannot read X" instead of guessing. Plain data, built by a shell (the live builder over the informer and the store
is not written yet) or by hand in tests; nothing here calls the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from capstan.kube import event_time
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
class _EventIndex:
    by_name: dict[tuple[str, str, str], list[KubeObject]]
    by_uid: dict[tuple[str, str], list[KubeObject]]
    without_uid: dict[tuple[str, str, str], list[KubeObject]]


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
        return self._by_name.get((kind, namespace, name))

    def in_namespace(self, kind: str, namespace: str) -> Sequence[KubeObject]:
        return self._by_namespace.get((kind, namespace), ())

    def events_about(self, kind: str, namespace: str, name: str, uid: str = "") -> Sequence[KubeObject]:
        """Events whose subject is this object (by UID when both sides have one, else by kind, namespace and
        name), oldest first."""
        index = self._events
        if uid:
            with_uid = index.by_uid.get((kind, uid), [])
            without = index.without_uid.get((kind, namespace, name), [])
            if not without:
                return with_uid
            return sorted([*with_uid, *without], key=lambda e: event_time(e) or 0.0)
        return index.by_name.get((kind, namespace, name), [])

    # The indexes are built once, on first use (a snapshot is immutable), so that analyzers stay linear in the
    # number of objects and Events rather than scanning all Events for every pod.
    @cached_property
    def _by_name(self) -> dict[tuple[str, str, str], KubeObject]:
        out: dict[tuple[str, str, str], KubeObject] = {}
        for kind, objects in self.objects.items():
            for obj in objects:
                namespace, name, _ = meta_of(obj)
                out.setdefault((kind, namespace, name), obj)
        return out

    @cached_property
    def _by_namespace(self) -> dict[tuple[str, str], list[KubeObject]]:
        out: dict[tuple[str, str], list[KubeObject]] = {}
        for kind, objects in self.objects.items():
            for obj in objects:
                out.setdefault((kind, meta_of(obj)[0]), []).append(obj)
        return out

    @cached_property
    def _events(self) -> _EventIndex:
        index = _EventIndex({}, {}, {})
        for event in sorted(self.events, key=lambda e: event_time(e) or 0.0):
            subject = event.get("involvedObject") or event.get("regarding") or {}
            if not isinstance(subject, Mapping):
                continue
            kind = str(subject.get("kind") or "")
            key = (kind, str(subject.get("namespace") or ""), str(subject.get("name") or ""))
            index.by_name.setdefault(key, []).append(event)
            if subject.get("uid"):
                index.by_uid.setdefault((kind, str(subject["uid"])), []).append(event)
            else:
                index.without_uid.setdefault(key, []).append(event)
        return index

    def changes_about(self, objects: Iterable[tuple[str, str, str]]) -> list[RecordedChange]:
        """The recorded changes of these objects (``(kind, namespace, name)``), in the order of ``changes``."""
        index = self._changes
        found = [item for key in set(objects) for item in index.get(key, ())]
        found.sort(key=lambda item: item[0])
        return [change for _, change in found]

    @cached_property
    def _changes(self) -> dict[tuple[str, str, str], list[tuple[int, RecordedChange]]]:
        out: dict[tuple[str, str, str], list[tuple[int, RecordedChange]]] = {}
        for i, change in enumerate(self.changes):
            out.setdefault((change.kind, change.namespace, change.name), []).append((i, change))
        return out

    def log(self, namespace: str, pod: str, container: str) -> str | None:
        return self.logs.get((namespace, pod, container))


def event_message(event: KubeObject) -> str:
    return str(event.get("message") or event.get("note") or "").strip()


def meta_of(obj: KubeObject) -> tuple[str, str, str]:
    """(namespace, name, uid) of an object."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or "")
