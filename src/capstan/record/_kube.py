"""The Kubernetes side of ``capstan record``: every change of the watched kinds and every Event occurrence.

One informer per kind (``capstan.kube``) feeds the pure :class:`ObjectHistory` core; what it returns is written in
batches, each one transaction holding the records *and* the kind's resourceVersion cursor. On start the collector
loads the stored last states and cursors: the informer resumes each watch from the stored version (exact history,
nothing missed while Capstan was down as long as the API server still has it) and otherwise relists and records the
difference against the stored states, marked ``relist`` — so an edit or deletion that happened while Capstan was away
is still recorded. A relist is written in chunks and its cursor only with the last one, so a crash mid-relist
simply relists again, against the states the written chunks stored.

Writes are idempotent (unique keys on source + uid + resourceVersion), so replaying after a kill -9 stores every
change exactly once.

The collector never reads a kubeconfig: it is given ``connect``, which opens a :class:`~capstan.kube.KubeClient`
(the composition root, ``capstan record``, passes ``KubeClient.from_kubeconfig`` bound to the configured file). A
factory rather than a client, because each :meth:`KubeCollector.run` owns the client it opens inside its own event
loop and closes it when it ends, and the runner starts ``run`` again after a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from capstan.config import StrictModel
from capstan.kube import ApiError, Delta, Informer, KubeClient, KubeConnect, Resource, resource_for
from capstan.record._diff import DiffPolicy
from capstan.record._diffpool import DiffPool
from capstan.record._objects import ObjectHistory, event_record, kind_key
from capstan.redact import Redactor
from capstan.store import Batch, Gap, HistoryMetrics, HistoryWriter, KindCursor

log = logging.getLogger(__name__)

DEFAULT_KINDS: tuple[str, ...] = (
    "Pod",
    "Node",
    "Namespace",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "Service",
    "EndpointSlice",
    "Ingress",
    "ConfigMap",
    "Secret",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "ResourceQuota",
    "LimitRange",
    "NetworkPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
)
EVENT_KINDS: tuple[str, ...] = ("Event", "events.k8s.io/v1/Event")


class CustomKind(StrictModel):
    """A custom resource to record: ``group/version/Kind`` plus its plural and scope."""

    kind: str = Field(description="group/version/Kind, e.g. serving.kserve.io/v1beta1/InferenceService")
    plural: str
    namespaced: bool = True


class KubernetesConfig(StrictModel):
    """The ``kubernetes:`` section of the recorder configuration."""

    kubeconfig: Path | None = None
    kinds: list[str] = Field(default_factory=lambda: list(DEFAULT_KINDS))
    events: bool = True
    custom: list[CustomKind] = Field(default_factory=list)
    namespace: str | None = Field(default=None, description="record one namespace only (default: all)")
    flush_interval_s: float = Field(default=0.2, gt=0, le=10)
    max_batch: int = Field(default=2000, ge=1, le=100_000)
    diff_workers: int = Field(
        default=0,
        ge=0,
        le=32,
        description="processes running the diff builder, sharded by object (0: in the recorder's own process); "
        "worth it with spare cores (capstan.record._diffpool)",
    )

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, v: list[str]) -> list[str]:
        for spec in v:
            resource_for(spec)  # raises a UserError naming an unknown kind
        return v

    def resources(self) -> list[Resource]:
        out = [resource_for(k) for k in self.kinds]
        out += [resource_for(c.kind, plural=c.plural, namespaced=c.namespaced) for c in self.custom]
        return out


class KubeCollector:
    """A :class:`~capstan.record.Collector` recording one cluster into ``store`` under ``source``; every
    :meth:`run` opens its client with ``connect`` (see the module docstring)."""

    def __init__(
        self,
        config: KubernetesConfig,
        store: HistoryWriter,
        *,
        connect: KubeConnect,
        source: str = "default",
        policy: DiffPolicy | None = None,
        metrics: HistoryMetrics | None = None,
        clock: Callable[[], float] = time.time,
        watch_timeout: int = 300,
        redactor: Redactor | None = None,
    ) -> None:
        self.name = f"kubernetes/{source}"
        self.config = config
        self.store = store
        self.source = source
        self._connect = connect
        self.policy = policy or DiffPolicy()
        self.metrics = metrics
        self.clock = clock
        self.watch_timeout = watch_timeout
        # None: the store's keyed redactor, read when the collector starts
        self._redactor = redactor
        self._pending = Batch()
        self._pool: DiffPool | None = None
        self._wake = asyncio.Event()
        self._drained = asyncio.Event()
        self.informers: dict[str, Informer] = {}
        self.synced: dict[str, asyncio.Event] = {}

    # ---- state from the store -----------------------------------------------------------------------------------
    def _known(self, history: ObjectHistory, resource: Resource) -> dict[str, dict[str, Any]]:
        known: dict[str, dict[str, Any]] = {}
        for st in self.store.object_states(self.source, resource.kind).values():
            if st.api_version != resource.api_version:
                continue
            meta: dict[str, Any] = {"name": st.name, "uid": st.uid, "resourceVersion": st.resource_version}
            if st.namespace:
                meta["namespace"] = st.namespace
            key = f"{st.namespace}/{st.name}" if st.namespace else st.name
            known[key] = {"apiVersion": st.api_version, "kind": st.kind, "metadata": meta}
        return known

    # ---- one kind -----------------------------------------------------------------------------------------------
    async def _record_kind(
        self,
        client: KubeClient,
        history: ObjectHistory,
        resource: Resource,
        is_event: bool,
        stop: asyncio.Event,
    ) -> None:
        key = kind_key(resource.api_version, resource.kind)
        cursor = self.store.kind_cursor(self.source, key)
        known = {} if is_event else self._known(history, resource)
        informer = Informer(
            client,
            resource,
            namespace=self.config.namespace,
            known=known if (known or cursor) else None,
            resource_version=cursor.resource_version if cursor else None,
            keep_objects=False,
            watch_timeout=self.watch_timeout,
        )
        self.informers[key] = informer
        synced = self.synced.setdefault(key, asyncio.Event())
        relist: Batch | None = None
        last_rv = cursor.resource_version if cursor else None
        try:
            async for delta in informer.deltas():
                if stop.is_set():
                    break
                if delta.via != "watch" and relist is None:
                    relist = Batch()
                target = relist if relist is not None else self._pending
                if delta.type == "synced":
                    if relist is not None:
                        await self._settle()  # every change of the relist is in it before its cursor
                        if delta.via == "relist" and last_rv is not None:
                            relist.gaps.append(self._relist_gap(key, last_rv, delta.resource_version))
                        relist.kind_cursors.append(KindCursor(self.source, key, delta.resource_version))
                        last_rv = delta.resource_version
                        self._pending.extend(relist)
                        relist = None
                        if self.metrics is not None and delta.via == "relist":
                            self.metrics.relists.labels(self.source, key).inc()
                    synced.set()
                    self._wake.set()
                    continue
                self._observe(history, delta, target, resource, key, is_event)
                if delta.via == "watch" and delta.resource_version:
                    last_rv = delta.resource_version
                if self._pool is not None and self._pool.in_flight() >= self.config.max_batch:
                    await self._pool.wait_below(self.config.max_batch // 2)
                if relist is not None and self._relist_size(relist) >= self.config.max_batch:
                    await self._settle()  # the chunk moves only with all its changes applied
                    # A long relist is written in chunks *without* its cursor: after a crash the cursor is still the
                    # old one, the next relist diffs against the states these chunks stored, and nothing is written
                    # twice. Memory stays at one chunk however large the list.
                    self._pending.extend(relist)
                    relist = Batch()
                    self._wake.set()
                    while self._pending.size() >= self.config.max_batch:  # wait for the writer to take it
                        self._drained.clear()
                        await self._drained.wait()
                elif relist is None and _records(self._pending) >= self.config.max_batch:
                    self._wake.set()
                    await asyncio.sleep(0)
                    # A burst the writer cannot keep up with waits here, in the API server's stream, instead of
                    # growing the pending batch without bound: at most one batch being written and two waiting.
                    while _records(self._pending) >= 2 * self.config.max_batch and not stop.is_set():
                        self._drained.clear()
                        await self._drained.wait()
        finally:
            informer.stop()

    def _relist_size(self, relist: Batch) -> int:
        # with a pool, changes still being diffed count towards the chunk (they may belong to it)
        return relist.size() + (self._pool.in_flight() if self._pool is not None else 0)

    async def _settle(self) -> None:
        if self._pool is not None:
            await self._pool.settle()

    def _relist_gap(self, key: str, from_rv: str, to_rv: str) -> Gap:
        """The watch could not resume where it stopped (410 Gone: history compacted, or the stream was lost for
        too long): the final state of every object is recorded by the relist, but versions in between and objects
        created and deleted in between are not recoverable — said explicitly, not silently."""
        return Gap(
            source=self.source,
            log="kubernetes",
            key=f"{key}@{to_rv}"[-256:],
            observed_at=self.clock(),
            lost=None,
            reason="watch could not resume (410 Gone); relisted: intermediate versions are not recoverable",
            detail={"kind": key, "from_resource_version": from_rv, "to_resource_version": to_rv},
        )

    def _observe(
        self, history: ObjectHistory, delta: Delta, batch: Batch, resource: Resource, key: str, is_event: bool
    ) -> None:
        obj = delta.obj
        assert obj is not None
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        now = self.clock()
        if is_event:
            if delta.type != "deleted":  # an Event expiring (TTL) is not a change worth a record
                batch.kube_events.append(
                    event_record(self.source, obj, observed_at=now, redactor=history.redactor)
                )
            if delta.via == "watch":
                batch.kind_cursors.append(KindCursor(self.source, key, delta.resource_version))
            return
        pool = self._pool
        if delta.via != "watch":
            # a relist's cursor is written with its last record (at "synced")
            if pool is not None:
                pool.submit(batch, delta.type, obj, observed_at=now, via="relist")
            else:
                history.observe_into(batch, delta.type, obj, observed_at=now, via="relist")
            return
        rv = delta.resource_version or str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if pool is None:
            history.observe_into(batch, delta.type, obj, observed_at=now, via="watch")
            if rv:
                _set_cursor(batch, KindCursor(self.source, key, rv))
            return
        # the watch's changes go to whatever batch is pending when their results arrive, and so does the cursor
        # after them (a mark: applied only once every change before it is)
        pool.submit(None, delta.type, obj, observed_at=now, via="watch")
        if rv:
            cursor = KindCursor(self.source, key, rv)
            pool.mark(lambda: _set_cursor(self._pending, cursor))

    # ---- writing ----------------------------------------------------------------------------------------------------
    async def _flush(self) -> None:
        if self._pending.is_empty():
            return
        batch, self._pending = self._pending, Batch()
        # Keep only the newest cursor per kind: they all commit in this one transaction.
        newest: dict[str, KindCursor] = {}
        for c in batch.kind_cursors:
            newest[c.kind] = c
        batch.kind_cursors = list(newest.values())
        await asyncio.to_thread(self.store.write, batch)
        self._drained.set()

    async def _writer(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self.config.flush_interval_s)
            self._wake.clear()
            await self._flush()
        with contextlib.suppress(Exception):  # a failed pool: what it applied is still a consistent prefix
            await asyncio.wait_for(self._settle(), timeout=10)
        await self._flush()

    def _kinds(self) -> list[tuple[Resource, bool]]:
        """What this collector records: ``(resource, is_event)``."""
        kinds = [(r, False) for r in self.config.resources()]
        if self.config.events:
            kinds += [(resource_for(k), True) for k in EVENT_KINDS]
        return kinds

    async def record_once(self, *, timeout_s: float = 120.0) -> str | None:
        """List every kind once and record it as a start-up does (against the stored states, with the cursors),
        then stop: ``capstan record --once``. Returns the error line of this target (None: recorded). Each kind is
        asked for once first, so a kind the credentials may not list is named at once instead of retried."""
        kinds = self._kinds()
        client = await self._connect()
        try:
            for resource, _ in kinds:
                try:
                    await client.list_page(resource, namespace=self.config.namespace, limit=1)
                except ApiError as exc:
                    return f"cannot list {resource.name}: {exc}"
        finally:
            await client.close()
        keys = [kind_key(r.api_version, r.kind) for r, _ in kinds]
        for key in keys:
            self.synced.setdefault(key, asyncio.Event())
        stop = asyncio.Event()
        runner = asyncio.create_task(self.run(stop), name=f"{self.name}/once")

        async def all_synced() -> None:
            for key in keys:
                await self.synced[key].wait()

        waiter = asyncio.create_task(all_synced())
        try:
            done, _ = await asyncio.wait(
                {runner, waiter}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stop.set()
            waiter.cancel()
        await runner  # writes what was listed, or raises what stopped it
        if waiter not in done:
            return f"not every kind was listed within {timeout_s:g} s"
        return None

    async def run(self, stop: asyncio.Event) -> None:
        redactor = self._redactor or await asyncio.to_thread(self.store.redactor)
        states = await asyncio.to_thread(self.store.object_states, self.source)
        workers = self.config.diff_workers
        # with a pool the workers hold the states; this process keeps only the rules (the Events' redactor)
        history = ObjectHistory(
            self.source, None if workers else states, policy=self.policy, redactor=redactor
        )
        kinds = self._kinds()
        # NOTE: what is alive now (the libraries, the loaded states) lives as long as the recorder: frozen, the
        # collector's full passes no longer walk it for every few thousand changes (about a tenth of the whole
        # path's CPU under a burst, bench/history_ingest.py); capstan.mcp freezes its states the same way.
        gc.collect()
        gc.freeze()
        if workers:
            self._pool = DiffPool(
                self.source,
                states,
                policy=self.policy,
                redactor=history.redactor,
                workers=workers,
                sink=lambda: self._pending,
            )
        del states
        # the client is opened last: nothing between it and the ``finally`` that closes it can fail
        try:
            client = await self._connect()
        except BaseException:
            self._close_pool()
            raise
        writer = asyncio.create_task(self._writer(stop), name=f"{self.name}/writer")
        tasks = [
            asyncio.create_task(self._record_kind(client, history, r, ev, stop), name=f"{self.name}/{r.name}")
            for r, ev in kinds
        ]
        stop_wait = asyncio.create_task(stop.wait())
        if self._pool is not None:
            tasks.append(asyncio.create_task(self._pool.failure(), name=f"{self.name}/diff-workers"))
        try:
            done, _ = await asyncio.wait([*tasks, writer, stop_wait], return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is not stop_wait and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
        finally:
            stop.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer, timeout=30)
            stop_wait.cancel()
            await client.close()
            self._close_pool()

    def diff_worker_pids(self) -> list[int]:
        """The process ids of the running diff workers (none when diffing in this process or not running)."""
        return self._pool.pids() if self._pool is not None else []

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _records(batch: Batch) -> int:
    """What a watch adds to the pending batch, counted once per change (cheaper than ``Batch.size`` per delta)."""
    return len(batch.object_changes) + len(batch.kube_events)


def _set_cursor(batch: Batch, cursor: KindCursor) -> None:
    """``cursor`` into ``batch``: one per kind is enough, they all commit in the transaction of the records they
    cover."""
    cursors = batch.kind_cursors
    if cursors and cursors[-1].kind == cursor.kind:
        cursors[-1] = cursor
    else:
        cursors.append(cursor)
