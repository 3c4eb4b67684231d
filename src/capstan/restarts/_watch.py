"""The live shell of restart diagnostics: watch pods, gather each restart's evidence, notify, record.

Pure decisions (detection, report, noise control, rendering) live in the other modules; this one only fetches and
writes. Per restart it reads, each with a timeout and each allowed to fail without stopping the report: the owner
chain (ReplicaSet → Deployment…), the node, the pod's Events (by uid), the previous container's log, and the
changes the history recorder stored for the workload, its ConfigMaps/Secrets and its node in the preceding window.
Messages go through the store's outbox (so a crash loses none) and one drainer delivers them. The watcher takes the
store's parts it uses, each behind a narrow seam: the restart records it writes (:class:`RestartRecordWriter`), the
history it reads its evidence and past records from (:class:`RestartHistory`), the outbox and thread index of
:mod:`capstan.notify`, and the store's redaction key.

Work for one pod is handled in order by one worker (a pod's restarts hash to the same worker), so its restart
records and last-seen counts never go backwards; different pods are handled concurrently by a bounded pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry

from capstan.kube import ApiError, Delta, Informer, KubeClient, resources
from capstan.notify import Drainer, NotifyMetrics, Outbox, ThreadIndex, build_sink
from capstan.redact import Redactor
from capstan.restarts._config import RestartsConfig
from capstan.restarts._detect import (
    ContainerRestart,
    Counts,
    Pod,
    detect_restarts_since,
    detect_while_down,
    pod_uid,
    seen_counts,
)
from capstan.restarts._events import PodEventIndex
from capstan.restarts._pipeline import RestartNotifier
from capstan.restarts._records import last_seen, restart_batch, unsent_digested
from capstan.restarts._render import recovered_digest_notices
from capstan.restarts._report import RecordedChange, RestartSnapshot, summarize_patch
from capstan.store import Batch, ObjectChange, Restart, RestartCount, WriteResult

if TYPE_CHECKING:
    from capstan.store import Store

log = logging.getLogger(__name__)

_OWNER_KINDS = {
    "ReplicaSet": resources.REPLICASETS,
    "Deployment": resources.DEPLOYMENTS,
    "StatefulSet": resources.STATEFULSETS,
    "DaemonSet": resources.DAEMONSETS,
    "Job": resources.JOBS,
    "CronJob": resources.CRONJOBS,
}
_LOG_LIMIT_BYTES = 512 * 1024
LIST_PAGE_PODS = 100
EVENTS_CATCH_UP_SECONDS = 0.5  # longest wait for the Event index to reach a restart's pod version


def referenced_config(pod: Pod) -> set[tuple[str, str]]:
    """(kind, name) of the ConfigMaps and Secrets a pod mounts or reads into its environment."""
    spec = pod.get("spec") or {}
    refs: set[tuple[str, str]] = set()
    for vol in spec.get("volumes") or []:
        if (vol.get("configMap") or {}).get("name"):
            refs.add(("ConfigMap", vol["configMap"]["name"]))
        if (vol.get("secret") or {}).get("secretName"):
            refs.add(("Secret", vol["secret"]["secretName"]))
        for src in (vol.get("projected") or {}).get("sources") or []:
            if (src.get("configMap") or {}).get("name"):
                refs.add(("ConfigMap", src["configMap"]["name"]))
            if (src.get("secret") or {}).get("name"):
                refs.add(("Secret", src["secret"]["name"]))
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        for env_from in c.get("envFrom") or []:
            if (env_from.get("configMapRef") or {}).get("name"):
                refs.add(("ConfigMap", env_from["configMapRef"]["name"]))
            if (env_from.get("secretRef") or {}).get("name"):
                refs.add(("Secret", env_from["secretRef"]["name"]))
        for env in c.get("env") or []:
            source = env.get("valueFrom") or {}
            if (source.get("configMapKeyRef") or {}).get("name"):
                refs.add(("ConfigMap", source["configMapKeyRef"]["name"]))
            if (source.get("secretKeyRef") or {}).get("name"):
                refs.add(("Secret", source["secretKeyRef"]["name"]))
    return refs


class RestartRecordWriter(Protocol):
    """Where the watcher keeps its restart records and last-seen counts (:class:`capstan.store.RestartRecords`)."""

    def write(self, batch: Batch) -> WriteResult: ...

    def restart_counts(self) -> dict[tuple[str, str], RestartCount]: ...


class RestartHistory(Protocol):
    """What the watcher reads from the history (:class:`capstan.store.HistoryReader`): the recorded changes before
    a restart, and the restart records of past runs (digests to recover)."""

    def timeline(
        self,
        *,
        source: str | None = None,
        kind: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        since: float | None = None,
        until: float | None = None,
        limit: int = ...,
    ) -> list[ObjectChange]: ...

    def restarts(self, *, since: float | None = None, limit: int = ...) -> list[Restart]: ...


class RestartWatcher:
    """Runs restart diagnostics for one cluster until stopped."""

    def __init__(
        self,
        config: RestartsConfig,
        client: KubeClient,
        *,
        records: RestartRecordWriter,
        history: RestartHistory,
        outbox: Outbox,
        threads: ThreadIndex,
        redaction_key: bytes | None,
        source: str = "default",
        namespace: str | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        registry: CollectorRegistry | None = None,
        workers: int = 8,
        call_timeout: float = 5.0,
    ) -> None:
        self.config = config
        self.client = client
        self.records = records
        self.history = history
        self.outbox = outbox
        self.source = source
        self.namespace = namespace
        self.clock = clock
        self.registry = registry or CollectorRegistry()
        self.sinks = {s.name: build_sink(s, threads=threads) for s in config.sinks}
        # one redactor for the evidence, the notices and the delivery errors, keyed with the store's key
        self.redactor = Redactor(config.redaction_policy(), key=redaction_key)
        self.drainer = Drainer(
            outbox,
            self.sinks,
            clock=clock,
            rng=rng or random.Random(0),
            policy=config.delivery,
            metrics=NotifyMetrics(self.registry),
            redactor=self.redactor,
        )
        self.notifier = RestartNotifier(config, self.drainer.enqueue, redactor=self.redactor)
        self.workers = workers
        self.call_timeout = call_timeout
        self._previous: dict[str, Counts] = {}  # pod uid → restart counts last seen
        self._queues: list[asyncio.Queue[tuple[Pod, list[ContainerRestart], float] | None]] = []
        self.synced = asyncio.Event()
        self.handled = 0
        self.pod_events = PodEventIndex(client, namespace=namespace)
        self.skipped_evidence = 0  # restarts whose evidence was not fetched (digested or filtered)
        self._owner_cache: dict[tuple[str, str, str], tuple[float, Mapping[str, Any] | None]] = {}

    @classmethod
    def over_store(
        cls,
        config: RestartsConfig,
        client: KubeClient,
        store: Store,
        *,
        source: str = "default",
        namespace: str | None = None,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        registry: CollectorRegistry | None = None,
        workers: int = 8,
        call_timeout: float = 5.0,
    ) -> RestartWatcher:
        """A watcher over one store's parts: its restart records, its history, its outbox and thread index, and its
        redaction key. The other arguments are those of the constructor, which takes the parts one by one."""
        return cls(
            config,
            client,
            records=store.restart_records,
            history=store.history,
            outbox=store.outbox,
            threads=store.threads,
            redaction_key=store.keys.redaction_key(),
            source=source,
            namespace=namespace,
            clock=clock,
            rng=rng,
            registry=registry,
            workers=workers,
            call_timeout=call_timeout,
        )

    # ---- evidence -----------------------------------------------------------------------------------------------
    async def _get(self, coro: Any) -> Any:
        async with asyncio.timeout(self.call_timeout):
            return await coro

    async def _owners(self, pod: Pod) -> dict[tuple[str, str, str], Mapping[str, Any]]:
        found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        obj: Mapping[str, Any] | None = pod
        now = self.clock()
        for _ in range(5):  # bounded walk up the controller chain
            refs = (obj.get("metadata") or {}).get("ownerReferences") if obj else None
            ref = next((r for r in refs or [] if r.get("controller")), None)
            if ref is None or ref.get("kind") not in _OWNER_KINDS:
                break
            key = (str(ref["kind"]), namespace, str(ref["name"]))
            cached = self._owner_cache.get(key)
            if cached is not None and now - cached[0] < 30.0:
                obj = cached[1]
            else:
                try:
                    obj = await self._get(self.client.get(_OWNER_KINDS[key[0]], key[2], namespace))
                except (ApiError, TimeoutError):
                    obj = None
                self._owner_cache[key] = (now, obj)
            if obj is None:
                break
            found[key] = obj
        return found

    def _changes(
        self, pod: Pod, owners: Mapping[tuple[str, str, str], Mapping[str, Any]], now: float
    ) -> list[RecordedChange]:
        window = self.config.report.change_window_seconds
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        targets = {(kind, namespace, name) for kind, _, name in owners}
        targets |= {(kind, namespace, name) for kind, name in referenced_config(pod)}
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            targets.add(("Node", "", str(node)))
        out: list[RecordedChange] = []
        for kind, ns, name in sorted(targets):
            for c in self.history.timeline(
                source=self.source,
                kind=kind,
                namespace=ns,
                name=name,
                since=now - window,
                until=now,
                limit=50,
            ):
                if kind == "Node" and c.change_type == "modified" and not c.patch:
                    continue
                out.append(
                    RecordedChange(
                        c.observed_at,
                        kind,
                        ns,
                        name,
                        c.change_type,
                        summarize_patch(kind, c.patch, c.change_type),
                    )
                )
        return sorted(out, key=lambda r: r.at)

    async def snapshot(
        self,
        restart: ContainerRestart,
        pod: Pod,
        now: float,
        owners: Mapping[tuple[str, str, str], Mapping[str, Any]] | None = None,
        timings: dict[str, float] | None = None,
    ) -> RestartSnapshot:
        """Gather everything a report needs; every part may fail on its own and is then described, not fatal.

        The node, the Events, the previous log and the recorded changes are fetched concurrently (each with its own
        timeout), so a report waits for the slowest part, not for their sum; ``timings`` receives each part's
        seconds."""
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if owners is None:
            owners = await self._owners(pod)
        spent = timings if timings is not None else {}

        async def timed(part: str, coro: Any) -> Any:
            started = time.perf_counter()
            try:
                return await coro
            finally:
                spent[part] = round(time.perf_counter() - started, 4)

        (node, node_error), events, (previous_log, log_error), changes = await asyncio.gather(
            timed("node", self._node(pod)),
            timed("events", self._events(namespace, pod)),
            timed("log", self._previous_log(namespace, name, restart.container)),
            timed("changes", self._recorded_changes(pod, owners, now)),
        )
        return RestartSnapshot(
            restart=restart,
            pod=pod,
            observed_at=now,
            owners=owners,
            node=node,
            node_error=node_error,
            events=events,
            previous_log=previous_log,
            log_error=log_error,
            changes=changes,
        )

    async def _node(self, pod: Pod) -> tuple[Mapping[str, Any] | None, str | None]:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            return None, "pod is not bound to a node"
        try:
            return await self._get(self.client.get(resources.NODES, str(node_name))), None
        except ApiError as exc:
            return None, (
                f"node {node_name} not found (deleted?)" if exc.not_found else f"node {node_name}: {exc}"
            )
        except TimeoutError:
            return None, f"node {node_name}: no answer within {self.call_timeout:.0f} s"

    async def _events(self, namespace: str, pod: Pod) -> list[dict[str, Any]]:
        if self.pod_events.synced.is_set():
            rv = str((pod.get("metadata") or {}).get("resourceVersion") or "")
            await self.pod_events.caught_up(rv, EVENTS_CATCH_UP_SECONDS)
            return self.pod_events.events_for(pod_uid(pod))
        try:  # before the index has its first list: ask the API server
            events, _ = await self._get(
                self.client.list(
                    resources.EVENTS, namespace=namespace, field_selector=f"involvedObject.uid={pod_uid(pod)}"
                )
            )
        except (ApiError, TimeoutError):
            return []
        return list(events)

    async def _previous_log(self, namespace: str, name: str, container: str) -> tuple[str | None, str | None]:
        try:
            text = await self._get(
                self.client.pod_log(
                    namespace,
                    name,
                    container,
                    previous=True,
                    tail_lines=max(self.config.report.log_lines * 4, 200),
                    limit_bytes=_LOG_LIMIT_BYTES,
                )
            )
        except ApiError as exc:
            return None, exc.message or str(exc)
        except TimeoutError:
            return None, f"no answer within {self.call_timeout:.0f} s"
        return text, None

    async def _recorded_changes(
        self, pod: Pod, owners: Mapping[tuple[str, str, str], Mapping[str, Any]], now: float
    ) -> list[RecordedChange]:
        try:
            return await asyncio.to_thread(self._changes, pod, owners, now)
        except Exception as exc:  # the history store is optional evidence
            log.warning("recorded changes unavailable", extra={"error": str(exc)})
            return []

    # ---- handling -------------------------------------------------------------------------------------------------
    async def _handle(self, pod: Pod, restarts: list[ContainerRestart], now: float) -> None:
        notify: dict[str, str] = {}
        owners = await self._owners(pod)
        for restart in restarts:
            # decide first: a restart counted into a digest (its workload is muted) or filtered out needs none of
            # the log, events, node and recorded changes, so a storm costs API calls only for the reported ones
            action = self.notifier.decide(pod, restart, owners, now)
            if action == "reported":
                timings: dict[str, float] = {}
                self.notifier.report(await self.snapshot(restart, pod, now, owners, timings), now)
                log.info(
                    "restart reported",
                    extra={
                        "pod": f"{restart.namespace}/{restart.pod}",
                        "container": restart.container,
                        "restart_count": restart.restart_count,
                        "detected_at": round(now, 3),
                        "enqueued_at": round(self.clock(), 3),
                        "evidence_seconds": timings,
                    },
                )
            else:
                self.skipped_evidence += 1
            notify[restart.container] = action
        batch = restart_batch(pod, restarts, now, notify=notify)
        await asyncio.to_thread(self.records.write, batch)
        self.handled += len(restarts)

    async def _worker(self, queue: asyncio.Queue[tuple[Pod, list[ContainerRestart], float] | None]) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            pod, restarts, now = item
            try:
                await self._handle(pod, restarts, now)
            except Exception:
                log.exception(
                    "restart handling failed", extra={"pod": (pod.get("metadata") or {}).get("name")}
                )
            finally:
                queue.task_done()

    def _dispatch(self, pod: Pod, restarts: list[ContainerRestart], now: float) -> None:
        index = zlib.crc32(pod_uid(pod).encode()) % len(self._queues)
        self._queues[index].put_nowait((pod, restarts, now))

    async def _baseline(self, batch: Batch) -> None:
        if not batch.is_empty():
            await asyncio.to_thread(self.records.write, batch)

    def _recover_digests(self, now: float) -> None:
        """Digests that were still being collected when Capstan stopped are sent now (nothing is lost)."""
        window = max(self.config.mute_seconds, self.config.cap_window_seconds) * 2 + 3600
        records = self.history.restarts(since=now - window, limit=100_000)
        payloads = [item.payload for item in self.outbox.items(limit=100_000)]
        lost = unsent_digested(records, payloads)
        if lost:
            for notice in recovered_digest_notices(
                lost, self.config.cluster_name, since=now - window, until=now
            ):
                for dest in self.sinks:
                    self.drainer.enqueue(dest, notice, f"recovered/{notice.title}/{now:.0f}/{dest}")

    async def _on_delta(self, delta: Delta, last: Mapping[tuple[str, str], int], initial: Batch) -> None:
        if delta.type == "synced":
            await self._baseline(initial)
            initial.restart_counts.clear()
            self.synced.set()
            return
        pod = delta.obj
        assert pod is not None
        uid = pod_uid(pod)
        now = self.clock()
        if delta.type == "deleted":
            self._previous.pop(uid, None)
            return
        old = self._previous.get(uid)
        if old is None:
            # First sight: restarts since the stored counts (Capstan was down), else a baseline only.
            restarts = detect_while_down(pod, last)
            if restarts:
                self._dispatch(pod, restarts, now)
            elif delta.via == "watch":
                await self._baseline(restart_batch(pod, [], now))
            else:
                # The first list: only the counts are kept (not the pods) and written in chunks.
                initial.extend(restart_batch(pod, [], now))
                if len(initial.restart_counts) >= 2000:
                    await self._baseline(initial)
                    initial.restart_counts.clear()
        else:
            restarts = detect_restarts_since(old, pod)
            if restarts:
                self._dispatch(pod, restarts, now)
        self._previous[uid] = seen_counts(pod)

    async def run(self, stop: asyncio.Event) -> None:
        now = self.clock()
        last = last_seen(await asyncio.to_thread(self.records.restart_counts))
        await asyncio.to_thread(self._recover_digests, now)
        self._queues = [asyncio.Queue() for _ in range(self.workers)]
        workers = [asyncio.create_task(self._worker(q)) for q in self._queues]
        drainer = asyncio.create_task(self.drainer.run(stop))
        pod_events = asyncio.create_task(self.pod_events.run(stop))
        # small pages: a decoded page of pods is the list's peak memory (about 20 KB per pod as Python objects)
        informer = Informer(
            self.client,
            resources.PODS,
            namespace=self.namespace,
            keep_objects=False,
            page_size=LIST_PAGE_PODS,
        )

        async def ticker() -> None:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
                self.notifier.tick(self.clock())

        tick = asyncio.create_task(ticker())
        initial = Batch()

        async def consume() -> None:
            async for delta in informer.deltas():
                await self._on_delta(delta, last, initial)

        consumer = asyncio.create_task(consume())
        try:
            await stop.wait()
        finally:
            informer.stop()
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
            for q in self._queues:
                q.put_nowait(None)
            await asyncio.gather(*workers, return_exceptions=True)
            self.notifier.flush(self.clock())
            tick.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tick
            # One last bounded pass so what is due now goes out; the rest stays in the outbox for next time.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.drainer.drain_once(), timeout=10)
            await asyncio.gather(drainer, pod_events, return_exceptions=True)
