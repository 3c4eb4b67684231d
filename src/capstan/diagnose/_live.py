"""The live side of the diagnosis: :func:`read_snapshot` builds a :class:`~capstan.diagnose.Snapshot` from a real
cluster (and, when one is given, from the history store), for the analyzers to read.

What it reads, all concurrently and each part on its own (a part that fails is described, never fatal):

- every kind the analyzers declare in ``reads`` (namespaced kinds in ``namespace`` when one is given, cluster-scoped
  kinds always). A ``403`` marks the kind unreadable with the API server's message, so the analyzers say "cannot
  read X" instead of guessing; a ``404`` (the API is not served: no Gateway API, an old cluster) reads as empty;
  any other error marks the kind unreadable with the error. Secrets keep their keys and lose their values here,
  before anything else sees them (the analyzers only ask whether a key exists);
- the Events of the namespace, and the Events about Nodes (which live in ``default``);
- the log tail of every container that has ended: the previous container's when it restarted, the current one's
  when it terminated and was not restarted (a failed Job's pod); at most ``max_logs`` of them, the most restarted
  first, ``log_lines`` lines each, at most :data:`LOG_CONCURRENCY` requests at a time;
- from ``history`` (a :class:`capstan.store.HistoryReader`), the recorded changes of the window before now
  (Secrets by name and path only), the restart records of the window, and the recorded Events the API server has
  already dropped (an Event lives an hour by default; the store keeps it), each listing bounded by ``max_changes``.

Nothing here decides anything: the analyzers are the same pure functions in tests, in ``capstan faults`` and live.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from capstan.diagnose._analyzer import Analyzer
from capstan.diagnose._snapshot import KubeObject, Readable, Snapshot
from capstan.kube import resources
from capstan.kube.resources import Resource
from capstan.restarts import RecordedChange, summarize_patch

if TYPE_CHECKING:
    from capstan.kube import KubeClient
    from capstan.store import HistoryReader, Restart

LOG_CONCURRENCY: Final = 8
"""Log requests in flight at once (each is a kubelet round trip through the API server)."""
LOG_BYTES: Final = 64 * 1024
"""The most of one log tail read (``limitBytes``); the analyzers classify a few lines of it."""
_HISTORY_PAGE: Final = 1000

# Kind → how to read it. Every kind an analyzer can declare; a kind missing here is reported unreadable ("no API
# resource known"), so adding an analyzer that reads a new kind without teaching the reader shows up as a blind spot.
_READABLE_KINDS: Final[Mapping[str, Resource]] = {
    r.kind: r for r in (*resources.WELL_KNOWN, *resources.READ_ONLY) if r is not resources.EVENTS_V1
}


def kinds_read(analyzers: Mapping[str, Analyzer] | Sequence[Analyzer]) -> list[str]:
    """The kinds ``analyzers`` read, Events aside (they are read on their own), sorted."""
    chosen = analyzers.values() if isinstance(analyzers, Mapping) else analyzers
    return sorted({kind for a in chosen for kind in a.reads if kind != "Event"})


async def read_snapshot(
    client: KubeClient,
    *,
    namespace: str | None = None,
    history: HistoryReader | None = None,
    source: str | None = None,
    window_seconds: float = 3600.0,
    log_lines: int = 50,
    max_logs: int = 200,
    max_changes: int = 5000,
    analyzers: Mapping[str, Analyzer] | Sequence[Analyzer] | None = None,
    clock: Callable[[], float] = time.time,
) -> Snapshot:
    """One :class:`Snapshot` of the cluster behind ``client`` (see the module docstring): the kinds ``analyzers``
    (default: every registered one) read, in ``namespace`` or everywhere, with Events, log tails and, from
    ``history`` under ``source`` (every source when None), the recorded changes and restarts of the last
    ``window_seconds``."""
    if analyzers is None:
        from capstan.diagnose._registry import ANALYZERS

        analyzers = ANALYZERS
    now = clock()
    kinds = kinds_read(analyzers)
    listed = await asyncio.gather(
        *(_read_kind(client, kind, namespace) for kind in kinds), _read_events(client, namespace)
    )
    objects: dict[str, list[KubeObject]] = {}
    unreadable: dict[str, Readable] = {}
    for kind, (items, note) in zip(kinds, listed[:-1], strict=True):
        if note is not None:
            unreadable[kind] = note
        elif items:
            objects[kind] = items
    events, events_note = listed[-1]
    if events_note is not None:
        unreadable["Event"] = events_note
    if "Secret" in objects:
        objects["Secret"] = [_without_values(s) for s in objects["Secret"]]
    logs = await _read_logs(client, objects.get("Pod", ()), log_lines=log_lines, max_logs=max_logs)
    changes: list[RecordedChange] = []
    restarts: list[Restart] = []
    if history is not None:
        changes, restarts, recorded_events = await asyncio.to_thread(
            _read_history, history, source, namespace, now - window_seconds, now, max_changes
        )
        events = _with_recorded(events, recorded_events)
    return Snapshot(
        objects=objects,
        events=events,
        logs=logs,
        changes=changes,
        restarts=restarts,
        unreadable=unreadable,
        observed_at=now,
    )


async def _list(
    client: KubeClient, resource: Resource, namespace: str | None, **kw: Any
) -> list[dict[str, Any]]:
    items, _ = await client.list(resource, namespace=namespace if resource.namespaced else None, **kw)
    return items


def _unreadable(kind: str, exc: Exception) -> tuple[list[KubeObject], Readable | None]:
    from capstan.kube import ApiError

    if isinstance(exc, ApiError) and exc.not_found:
        return [], None  # the API is not served here: nothing of that kind exists
    reason = exc.message if isinstance(exc, ApiError) else f"{type(exc).__name__}: {exc}"
    return [], Readable(kind, False, reason.splitlines()[0] if reason else type(exc).__name__)


async def _read_kind(
    client: KubeClient, kind: str, namespace: str | None
) -> tuple[list[KubeObject], Readable | None]:
    resource = _READABLE_KINDS.get(kind)
    if resource is None:
        return [], Readable(kind, False, f"no API resource known for kind {kind}")
    try:
        return list(await _list(client, resource, namespace)), None
    except Exception as exc:  # one kind failing is a blind spot, never the whole diagnosis
        return _unreadable(kind, exc)


async def _read_events(client: KubeClient, namespace: str | None) -> tuple[list[KubeObject], Readable | None]:
    try:
        events = await _list(client, resources.EVENTS, namespace)
        # Node Events are written to "default"; a namespaced diagnosis still wants them
        if namespace is not None:
            seen = {_uid(e) for e in events}
            about_nodes = await _list(
                client, resources.EVENTS, None, field_selector="involvedObject.kind=Node"
            )
            events += [e for e in about_nodes if _uid(e) not in seen]
        return list(events), None
    except Exception as exc:  # as for any kind
        return _unreadable("Event", exc)


def _without_values(secret: KubeObject) -> KubeObject:
    """The Secret with every value blanked (keys kept: a missing key is a finding, a value never is)."""
    out = dict(secret)
    for field in ("data", "stringData"):
        if isinstance(out.get(field), Mapping):
            out[field] = dict.fromkeys(out[field], "")
    meta = dict(out.get("metadata") or {})
    annotations = meta.get("annotations")
    if isinstance(annotations, Mapping) and "kubectl.kubernetes.io/last-applied-configuration" in annotations:
        meta["annotations"] = {
            k: v for k, v in annotations.items() if k != "kubectl.kubernetes.io/last-applied-configuration"
        }
        out["metadata"] = meta
    return out


def _ended_containers(pods: Iterable[KubeObject]) -> list[tuple[int, str, str, str, bool]]:
    """(restarts, namespace, pod, container, previous) for every container whose log explains an end."""
    out = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        status = pod.get("status") or {}
        for field in ("initContainerStatuses", "containerStatuses"):
            for c in status.get(field) or []:
                restarts = int(c.get("restartCount") or 0)
                if (c.get("lastState") or {}).get("terminated") or restarts:
                    out.append((restarts, namespace, name, str(c.get("name") or ""), True))
                elif (c.get("state") or {}).get("terminated"):
                    out.append((restarts, namespace, name, str(c.get("name") or ""), False))
    # the most restarted first, then by name: which logs are read under the cap does not depend on list order
    return sorted(out, key=lambda t: (-t[0], t[1], t[2], t[3]))


async def _read_logs(
    client: KubeClient, pods: Sequence[KubeObject], *, log_lines: int, max_logs: int
) -> dict[tuple[str, str, str], str]:
    wanted = _ended_containers(pods)[:max_logs]
    gate = asyncio.Semaphore(LOG_CONCURRENCY)

    async def one(namespace: str, pod: str, container: str, previous: bool) -> str | None:
        async with gate:
            try:
                return await client.pod_log(
                    namespace, pod, container, previous=previous, tail_lines=log_lines, limit_bytes=LOG_BYTES
                )
            except Exception:  # a log that cannot be read is only missing evidence
                return None

    texts = await asyncio.gather(*(one(ns, pod, c, prev) for _, ns, pod, c, prev in wanted))
    return {(ns, pod, c): text for (_, ns, pod, c, _), text in zip(wanted, texts, strict=True) if text}


def _uid(obj: KubeObject) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _with_recorded(live: list[KubeObject], recorded: Sequence[KubeObject]) -> list[KubeObject]:
    """The live Events plus the recorded ones the API server no longer has (an Event lives an hour by default):
    the newest recorded occurrence of each Event uid that is not live."""
    seen = {_uid(e) for e in live}
    newest: dict[str, KubeObject] = {}
    for event in recorded:  # oldest observed first, so the last occurrence of a uid wins
        if _uid(event) and _uid(event) not in seen:
            newest[_uid(event)] = event
    return [*live, *newest.values()]


def _read_history(
    history: HistoryReader,
    source: str | None,
    namespace: str | None,
    since: float,
    until: float,
    limit: int,
) -> tuple[list[RecordedChange], list[Restart], list[KubeObject]]:
    from capstan.store import position_of

    changes: list[RecordedChange] = []
    scopes = (
        [namespace, ""] if namespace else [None]
    )  # a namespace's objects and the cluster-scoped ones (Nodes)
    for scope in scopes:
        after = None
        while len(changes) < limit:
            page = history.timeline(
                source=source,
                namespace=scope,
                since=since,
                until=until,
                limit=min(_HISTORY_PAGE, limit - len(changes)),
                after=after,
            )
            for c in page:
                if c.kind == "Node" and c.change_type == "modified" and not c.patch:
                    continue  # a heartbeat with nothing recorded changed
                changes.append(
                    RecordedChange(
                        c.observed_at,
                        c.kind,
                        c.namespace,
                        c.name,
                        c.change_type,
                        summarize_patch(c.kind, c.patch, c.change_type),
                    )
                )
            if len(page) < _HISTORY_PAGE or page[-1].id is None:
                break
            after = position_of(page[-1])
    events: list[KubeObject] = []
    after = None
    while len(events) < limit:
        occurrences = history.events(
            namespace=namespace,
            since=since,
            until=until,
            limit=min(_HISTORY_PAGE, limit - len(events)),
            after=after,
        )
        events += [e.payload for e in occurrences if (source is None or e.source == source) and e.payload]
        if len(occurrences) < _HISTORY_PAGE or occurrences[-1].id is None:
            break
        after = position_of(occurrences[-1])
    restarts = history.restarts(namespace=namespace, since=since, until=until, limit=min(limit, 1000))
    return sorted(changes, key=lambda c: (c.at, c.kind, c.namespace, c.name)), restarts, events
