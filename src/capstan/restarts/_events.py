"""Recent Events about pods, indexed by pod UID, so a restart report reads its pod's events without a LIST.

The API server cannot look Events up by the object they are about: ``fieldSelector=involvedObject.uid=…`` scans
every Event of the namespace, and a storm that starts many workloads' first reports at once queues those scans on
the API server (docs/benchmarks.md: the Events part of a report, p99 0.84 s at 10,000 pods before this index). One list + watch of the Pod Events instead (through
:class:`capstan.kube.Informer`, which keeps no per-object state here) keeps a compact entry per Event; a report then
costs a dictionary lookup. ``Scheduled`` Events (one per pod, "Successfully assigned … to node") are left out: the
report names the node anyway, and they are most of a large namespace's Events. Per pod the newest
``per_pod`` Events are kept; an Event the API server expires (its TTL) is dropped when its deletion arrives, and a
relist rebuilds the index from scratch.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

from capstan.kube import Informer, KubeClient, event_time, resources

FIELD_SELECTOR = "involvedObject.kind=Pod,reason!=Scheduled"
EVENTS_PER_POD = 30
PAGE_SIZE = 200
MESSAGE_CHARS = 1000


class _Entry(NamedTuple):
    type: str
    reason: str
    message: str
    times: int
    last_seen: float | None
    field_path: str | None


def _interned(value: Any) -> str | None:
    return sys.intern(str(value)) if value else None


def _entry(event: Mapping[str, Any]) -> _Entry:
    series = event.get("series") or {}
    count = (series.get("count") if isinstance(series, Mapping) else None) or event.get("count") or 1
    last = event_time(event)
    subject = event.get("involvedObject") or {}
    return _Entry(
        _interned(event.get("type")) or "Normal",
        _interned(event.get("reason")) or "",
        str(event.get("message") or "")[:MESSAGE_CHARS],
        int(count),
        last,
        _interned(subject.get("fieldPath")),
    )


def _when(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class PodEventIndex:
    """Pod UID → its recent Events, kept current by one watch (see the module text)."""

    def __init__(
        self, client: KubeClient, *, namespace: str | None = None, per_pod: int = EVENTS_PER_POD
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._per_pod = max(1, per_pod)
        self._index: dict[str, dict[str, _Entry]] = {}
        self._building: dict[str, dict[str, _Entry]] | None = None
        self.synced = asyncio.Event()
        self._seen_rv = 0  # the newest resourceVersion the watch delivered (events or bookmarks)
        self._advanced = asyncio.Event()

    def __len__(self) -> int:
        return sum(len(v) for v in self._index.values())

    def events_for(self, pod_uid: str) -> list[dict[str, Any]]:
        """The pod's Events as Kubernetes Event objects (the fields the report reads), oldest first."""
        entries = self._index.get(pod_uid) or {}
        ordered = sorted(entries.items(), key=lambda kv: (kv[1].last_seen or 0.0, kv[0]))
        return [
            {
                "metadata": {"uid": uid},
                "involvedObject": {"kind": "Pod", "uid": pod_uid, "fieldPath": e.field_path},
                "type": e.type,
                "reason": e.reason,
                "message": e.message,
                "count": e.times,
                "lastTimestamp": _when(e.last_seen),
            }
            for uid, e in ordered
        ]

    def observe(self, change: str, event: Mapping[str, Any], *, listing: bool = False) -> None:
        """Apply one Event change (``added``/``modified``/``deleted``); ``listing`` builds the next index."""
        pod_uid = str((event.get("involvedObject") or {}).get("uid") or "")
        uid = str((event.get("metadata") or {}).get("uid") or "")
        if not pod_uid or not uid:
            return
        index = self._building if listing and self._building is not None else self._index
        if change == "deleted":
            entries = index.get(pod_uid)
            if entries is not None:
                entries.pop(uid, None)
                if not entries:
                    del index[pod_uid]
            return
        entries = index.setdefault(sys.intern(pod_uid), {})
        entries[uid] = _entry(event)
        if len(entries) > self._per_pod:  # bounded: drop the oldest
            oldest = min(entries.items(), key=lambda kv: (kv[1].last_seen or 0.0, kv[0]))[0]
            del entries[oldest]

    def saw(self, resource_version: str) -> None:
        """The watch has delivered everything up to ``resource_version``."""
        with contextlib.suppress(ValueError):
            self._seen_rv = max(self._seen_rv, int(resource_version))
            self._advanced.set()

    async def caught_up(self, resource_version: str, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until the index has seen every Event written before ``resource_version``
        (the pod update that showed the restart), so Events emitted just before it are not missed. Both come from
        the same API server's ordered history, so a larger resourceVersion seen here means nothing before it is
        missing. False on timeout (nothing newer arrived: most likely nothing is missing)."""
        try:
            wanted = int(resource_version)
        except ValueError:
            return True
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        for _ in range(1000):  # bounded: each round waits for the watch to advance
            if self._seen_rv >= wanted:
                return True
            remaining = end - loop.time()
            if remaining <= 0:
                return False
            self._advanced.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._advanced.wait()
        return self._seen_rv >= wanted

    def start_listing(self) -> None:
        self._building = {}

    def finish_listing(self) -> None:
        if self._building is not None:
            self._index, self._building = self._building, None
        self.synced.set()

    async def run(self, stop: asyncio.Event) -> None:
        """List, then watch, until ``stop``; a relist (after 410 Gone) rebuilds the index."""
        informer = Informer(
            self._client,
            resources.EVENTS,
            namespace=self._namespace,
            field_selector=FIELD_SELECTOR,
            keep_objects=False,
            remember=False,
            page_size=PAGE_SIZE,
        )

        async def consume() -> None:
            listing = False
            async for delta in informer.deltas():
                self.saw(informer.resource_version)
                if delta.type == "synced":
                    self.finish_listing()
                    listing = False
                    continue
                if delta.via != "watch" and not listing:
                    self.start_listing()
                    listing = True
                if delta.obj is not None:
                    self.observe(delta.type, delta.obj, listing=listing)

        task = asyncio.create_task(consume())
        try:
            await stop.wait()
        finally:
            informer.stop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
