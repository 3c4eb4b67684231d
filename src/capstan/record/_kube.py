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
import dataclasses
import gc
import hashlib
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from capstan.config import StrictModel
from capstan.kube import ApiError, Delta, Informer, KubeClient, KubeConnect, Resource, resource_for
from capstan.record._diff import DiffPolicy
from capstan.record._diffpool import DiffPool
from capstan.record._objects import ObjectHistory, event_record, kind_key
from capstan.redact import Redactor
from capstan.store import Batch, Gap, HistoryMetrics, HistoryWriter, KindCursor, ObjectState

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
_NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_CURSOR_KEY_CHARS = 300  # kind_cursors.kind


class CustomKind(StrictModel):
    """A custom resource to record: ``group/version/Kind`` plus its plural and scope."""

    kind: str = Field(description="group/version/Kind, e.g. serving.kserve.io/v1beta1/InferenceService")
    plural: str
    namespaced: bool = True


class KubernetesConfig(StrictModel):
    """The ``kubernetes:`` section of the recorder configuration.

    ``namespaces`` and ``exclude_namespaces`` make the recorder one shard of several writing into one store: each
    watch keeps its own cursor (keyed by the kind and the namespaces it covers) and a relist compares only against
    the stored states of its own namespaces, so shards with disjoint namespaces (or disjoint kinds) record exactly
    the rows one recorder would. A shard that names ``namespaces`` records namespaced kinds only (the default kinds
    lose their cluster-scoped ones; naming one is an error): cluster-scoped kinds belong to the shard that takes the
    rest, with ``exclude_namespaces`` or no namespaces at all."""

    kubeconfig: Path | None = None
    kinds: list[str] | None = Field(
        default=None,
        description="kinds to record (default: DEFAULT_KINDS, the namespaced ones with `namespaces`)",
    )
    events: bool = True
    custom: list[CustomKind] = Field(default_factory=list)
    namespaces: list[str] = Field(
        default_factory=list, description="record these namespaces only, one watch each (default: all)"
    )
    exclude_namespaces: list[str] = Field(
        default_factory=list, description="record every namespace but these (the shard that takes the rest)"
    )
    flush_interval_s: float = Field(default=0.2, gt=0, le=10)
    max_batch: int = Field(default=2000, ge=1, le=100_000)
    diff_workers: int = Field(
        default=0,
        ge=0,
        le=32,
        description="processes running the diff builder, sharded by object (0: in the recorder's own process); "
        "worth it with spare cores (capstan.record._diffpool)",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_namespace(cls, data: Any) -> Any:
        """``namespace: x`` (one namespace) is kept as the shorthand of ``namespaces: [x]``."""
        if isinstance(data, dict) and "namespace" in data:
            data = dict(data)
            one = data.pop("namespace")
            if one is not None:
                if data.get("namespaces"):
                    raise ValueError("give namespace or namespaces, not both")
                data["namespaces"] = [one]
        return data

    @field_validator("kinds")
    @classmethod
    def _known_kinds(cls, v: list[str] | None) -> list[str] | None:
        for spec in v or ():
            resource_for(spec)  # raises a UserError naming an unknown kind
        return v

    @field_validator("namespaces", "exclude_namespaces")
    @classmethod
    def _namespace_names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _NAMESPACE_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a namespace name (lower-case letters, digits and '-')")
        if len(set(v)) != len(v):
            raise ValueError("a namespace is named twice")
        return sorted(v)

    @model_validator(mode="after")
    def _one_scope(self) -> KubernetesConfig:
        if self.namespaces and self.exclude_namespaces:
            raise ValueError("give namespaces or exclude_namespaces, not both")
        if self.namespaces:
            explicit = [resource_for(k) for k in self.kinds or ()]
            explicit += [resource_for(c.kind, plural=c.plural, namespaced=c.namespaced) for c in self.custom]
            scoped = sorted({r.kind for r in explicit if not r.namespaced})
            if scoped:
                verb = "is" if len(scoped) == 1 else "are"
                raise ValueError(
                    f"{', '.join(scoped)} {verb} cluster-scoped: a shard of namespaces records namespaced kinds "
                    "only (record it in the shard with exclude_namespaces, or without namespaces)"
                )
        return self

    @property
    def namespace(self) -> str | None:
        """The one namespace this recorder covers (None: several, or all)."""
        return self.namespaces[0] if len(self.namespaces) == 1 else None

    def resources(self) -> list[Resource]:
        """The kinds to record (custom ones last)."""
        if self.kinds is not None:
            out = [resource_for(k) for k in self.kinds]
        else:
            out = [r for r in map(resource_for, DEFAULT_KINDS) if r.namespaced or not self.namespaces]
        out += [resource_for(c.kind, plural=c.plural, namespaced=c.namespaced) for c in self.custom]
        return out

    def watches(self) -> list[Watch]:
        """One :class:`Watch` per kind and namespace this recorder covers (Events included when ``events``)."""
        kinds = [(r, False) for r in self.resources()]
        if self.events:
            kinds += [(resource_for(k), True) for k in EVENT_KINDS]
        out: list[Watch] = []
        for resource, is_event in kinds:
            if not resource.namespaced:
                out.append(Watch(resource, is_event))
            elif self.namespaces:
                out += [Watch(resource, is_event, namespace=ns) for ns in self.namespaces]
            else:
                out.append(Watch(resource, is_event, excluded=tuple(self.exclude_namespaces)))
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class Watch:
    """One watch of a recorder: a kind, cluster-wide, in one namespace, or in every namespace but ``excluded``.

    ``key`` names its cursor in the store: the kind's key (``/v1/Pod``) for a cluster-wide watch, with
    ``@ns=<namespace>`` or ``@ns!=<excluded,…>`` after it for a shard's, so shards never share a cursor."""

    resource: Resource
    is_event: bool
    namespace: str | None = None
    excluded: tuple[str, ...] = ()

    @property
    def kind_key(self) -> str:
        return kind_key(self.resource.api_version, self.resource.kind)

    @property
    def key(self) -> str:
        if self.namespace is not None:
            return f"{self.kind_key}@ns={self.namespace}"
        if self.excluded:
            names = ",".join(self.excluded)
            if len(self.kind_key) + len(names) > _CURSOR_KEY_CHARS - 5:
                names = "sha1:" + hashlib.sha1(names.encode()).hexdigest()
            return f"{self.kind_key}@ns!={names}"
        return self.kind_key

    @property
    def field_selector(self) -> str | None:
        """The API server's filter for the excluded namespaces (``metadata.namespace!=…``, which every kind
        supports)."""
        return ",".join(f"metadata.namespace!={ns}" for ns in self.excluded) or None

    def covers(self, namespace: str) -> bool:
        """Whether an object stored in ``namespace`` is this watch's (a relist compares against those only)."""
        if self.namespace is not None:
            return namespace == self.namespace
        return namespace not in self.excluded


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
        self._stored_states: dict[str, list[ObjectState]] = {}  # per kind, for the watches of one run

    # ---- state from the store -----------------------------------------------------------------------------------
    def _known(self, watch: Watch) -> dict[str, dict[str, Any]]:
        """The stored states this watch covers: a relist compares against these (not another shard's)."""
        resource = watch.resource
        if resource.kind not in self._stored_states:  # read once per kind, however many namespaces watch it
            self._stored_states[resource.kind] = list(
                self.store.object_states(self.source, resource.kind).values()
            )
        known: dict[str, dict[str, Any]] = {}
        for st in self._stored_states[resource.kind]:
            if st.api_version != resource.api_version:
                continue
            if resource.namespaced and not watch.covers(st.namespace or ""):
                continue
            meta: dict[str, Any] = {"name": st.name, "uid": st.uid, "resourceVersion": st.resource_version}
            if st.namespace:
                meta["namespace"] = st.namespace
            key = f"{st.namespace}/{st.name}" if st.namespace else st.name
            known[key] = {"apiVersion": st.api_version, "kind": st.kind, "metadata": meta}
        return known

    # ---- one kind -----------------------------------------------------------------------------------------------
    async def _record_kind(
        self, client: KubeClient, history: ObjectHistory, watch: Watch, stop: asyncio.Event
    ) -> None:
        resource, is_event, key = watch.resource, watch.is_event, watch.key
        cursor = self.store.kind_cursor(self.source, key)
        known = {} if is_event else self._known(watch)
        informer = Informer(
            client,
            resource,
            namespace=watch.namespace,
            field_selector=watch.field_selector,
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
                            relist.gaps.append(self._relist_gap(watch, last_rv, delta.resource_version))
                        relist.kind_cursors.append(KindCursor(self.source, key, delta.resource_version))
                        last_rv = delta.resource_version
                        self._pending.extend(relist)
                        relist = None
                        if self.metrics is not None and delta.via == "relist":
                            self.metrics.relists.labels(self.source, watch.kind_key).inc()
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

    def _relist_gap(self, watch: Watch, from_rv: str, to_rv: str) -> Gap:
        """The watch could not resume where it stopped (410 Gone: history compacted, or the stream was lost for
        too long): the final state of every object is recorded by the relist, but versions in between and objects
        created and deleted in between are not recoverable — said explicitly, not silently."""
        return Gap(
            source=self.source,
            log="kubernetes",
            key=f"{watch.key}@{to_rv}"[-256:],
            observed_at=self.clock(),
            lost=None,
            reason="watch could not resume (410 Gone); relisted: intermediate versions are not recoverable",
            detail={
                "kind": watch.kind_key,
                **({"namespace": watch.namespace} if watch.namespace is not None else {}),
                **({"excluded_namespaces": list(watch.excluded)} if watch.excluded else {}),
                "from_resource_version": from_rv,
                "to_resource_version": to_rv,
            },
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

    async def record_once(self, *, timeout_s: float = 120.0) -> str | None:
        """List every kind once and record it as a start-up does (against the stored states, with the cursors),
        then stop: ``capstan record --once``. Returns the error line of this target (None: recorded). Each kind is
        asked for once first, so a kind the credentials may not list is named at once instead of retried."""
        watches = self.config.watches()
        client = await self._connect()
        try:
            for w in watches:
                try:
                    await client.list_page(
                        w.resource, namespace=w.namespace, field_selector=w.field_selector, limit=1
                    )
                except ApiError as exc:
                    where = f" in namespace {w.namespace}" if w.namespace else ""
                    return f"cannot list {w.resource.name}{where}: {exc}"
        finally:
            await client.close()
        keys = [w.key for w in watches]
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
        watches = self.config.watches()
        self._stored_states = {}  # a new run reads what the last one stored
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
            asyncio.create_task(self._record_kind(client, history, w, stop), name=f"{self.name}/{w.key}")
            for w in watches
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
