"""Playing fault scenarios on a real control plane and scoring the diagnosis (the shell around the pure
:func:`~capstan.faults.score`).

Each scenario gets its own namespace (``fault-<name>-<4 hex>``) and its own recorder writing into a temporary SQLite
store, started before anything is created so that every edit is recorded. Then: the scenario's extra kwok Nodes
(cluster-scoped, named ``<namespace>-<name>``), its manifests, the waits, the edits (each one confirmed recorded),
the injected faults, the decoy; then :func:`capstan.diagnose.read_snapshot` of the namespace with the store's
history, :func:`capstan.diagnose.diagnose`, and the score. An optional ``on_state(scenario, namespace,
kubeconfig)`` hook runs after the snapshot and before the cleanup, so a benchmark can run another tool (k8sgpt)
against the same live state.

Scope: only the findings about the scenario (an object in its namespace, or one of its Nodes, or explaining one of
those as a symptom) are scored; a broken Node of some other test sharing the cluster is not the scenario's answer.

Failure: anything that goes wrong before the snapshot is a *setup failure* reported with one line; the cleanup
(pods force-deleted, the namespace and the Nodes deleted, Nodes taken back by kwok first) always runs, and the
next scenario still runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import secrets
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capstan.diagnose import Diagnosis, Snapshot, diagnose, read_snapshot
from capstan.faults._scenario import (
    Edit,
    NodeSpec,
    ObjectKey,
    PodRef,
    Scenario,
    Step,
    TerminationSpec,
    WaitSpec,
    substitute,
)
from capstan.faults._score import Score, score
from capstan.faults.kubelet import Kubelet, Termination
from capstan.kube import ApiError, KubeClient, Resource, resources
from capstan.kube.resources import lookup_kind, resource_for
from capstan.record import DEFAULT_KINDS
from capstan.redact import Redactor

if TYPE_CHECKING:
    from capstan.store import HistoryReader

from capstan.sandbox import (
    KWOK_NODE_ANNOTATION,
    KWOK_NODE_ANNOTATION_VALUE,
    NodePool,
    SandboxSpec,
    node_manifests,
)

log = logging.getLogger(__name__)

OnState = Callable[[Scenario, str, Path], Awaitable[None]]
SCENARIO_LABEL = "capstan.io/fault-scenario"
RECORDED_KINDS = tuple(k for k in DEFAULT_KINDS if resource_for(k).namespaced)
"""What a scenario's recorder records: the recorder's default kinds that live in a namespace (a scenario's nodes are
read live; the shared cluster's other objects are not the scenario's)."""
_SOURCE = "faults"
_STARTUP_TAINTS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/network-unavailable",
    }
)
_POLL = 0.1


class SetupFailed(Exception):
    """The scenario could not be set up (one line)."""


@dataclasses.dataclass
class Outcome:
    """One scenario's result: its score, or the one line saying why it could not be set up."""

    scenario: Scenario
    namespace: str
    score: Score | None = None
    diagnosis: Diagnosis | None = None
    snapshot: Snapshot | None = None
    setup_error: str | None = None
    cleanup_error: str | None = None
    seconds: float = 0.0
    nodes: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.score is not None and self.score.passed

    def to_json(self) -> dict[str, Any]:
        first = self.diagnosis.findings[0] if self.diagnosis and self.diagnosis.findings else None
        return {
            "name": self.scenario.name,
            "category": self.scenario.category,
            "tags": list(self.scenario.tags),
            "namespace": self.namespace,
            "setup_error": self.setup_error,
            "cleanup_error": self.cleanup_error,
            "score": self.score.to_json() if self.score else None,
            "first_finding": first.to_json() if first else None,
            "findings": len(self.diagnosis.findings) if self.diagnosis else 0,
            "seconds": round(self.seconds, 3),
        }


def namespace_for(scenario: Scenario) -> str:
    """``fault-<name>-<4 hex>``: unique per run (a namespace of the last run may still be terminating)."""
    return f"fault-{scenario.name[:50]}-{secrets.token_hex(2)}"


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, ApiError):
        text = f"API server: {exc.status} {exc.reason}: {exc.message}"
    elif isinstance(exc, SetupFailed):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    # the API server's message may quote a manifest's values (a Secret's stringData): redacted before it is shown
    return Redactor().text(" ".join(text.split()))[:400]


def _resource(manifest: dict[str, Any]) -> Resource:
    res = lookup_kind(str(manifest["kind"]))
    if res is None or res.api_version != manifest["apiVersion"]:
        raise SetupFailed(f"{manifest['apiVersion']}/{manifest['kind']}: not a kind the runner knows")
    return res


def _field(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def scoped(diagnosis: Diagnosis, namespace: str, nodes: Sequence[str]) -> Diagnosis:
    """The findings about the scenario: an object in ``namespace`` or one of ``nodes``, directly or as a symptom."""

    def ours(kind: str, ns: str, name: str) -> bool:
        return ns == namespace or (kind == "Node" and name in nodes)

    kept = tuple(
        f
        for f in diagnosis.findings
        if any(ours(o.kind, o.namespace, o.name) for o in f.objects)
        or any(ours(s.object.kind, s.object.namespace, s.object.name) for s in f.symptoms)
    )
    return dataclasses.replace(diagnosis, findings=kept)


class Runner:
    """Plays scenarios against the cluster of ``kubeconfig``; ``log_dir`` is the directory the cluster's kwok
    serves pod logs from (the sandbox's ``pod-logs``)."""

    def __init__(
        self,
        kubeconfig: Path,
        log_dir: Path,
        *,
        on_state: OnState | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kubeconfig = kubeconfig
        self.log_dir = log_dir
        self.history: HistoryReader | None = None
        """While ``on_state`` runs: the history the scenario's recorder writes (what its diagnosis cites); else
        None."""
        self.on_state = on_state
        self.clock = clock

    async def run_all(
        self, scenarios: Sequence[Scenario], *, progress: Callable[[Outcome], None] | None = None
    ) -> list[Outcome]:
        out = []
        for s in scenarios:
            outcome = await self.run(s)
            if progress is not None:
                progress(outcome)
            out.append(outcome)
        return out

    async def run(self, scenario: Scenario) -> Outcome:
        started = time.monotonic()
        outcome = Outcome(scenario, namespace_for(scenario))
        outcome.nodes = {n.name: f"{outcome.namespace}-{n.name}" for n in scenario.nodes}
        client = await KubeClient.from_kubeconfig(self.kubeconfig)
        try:
            with tempfile.TemporaryDirectory(prefix="capstan-faults-") as tmp:
                play = _Play(self, client, scenario, outcome, Path(tmp))
                try:
                    await play.run()
                except Exception as exc:  # a scenario that fails to set up is reported, and the run goes on
                    outcome.setup_error = _one_line(exc)
                    log.info("scenario %s: setup failed: %s", scenario.name, outcome.setup_error)
                finally:
                    try:
                        await play.cleanup()
                    except Exception as exc:
                        outcome.cleanup_error = _one_line(exc)
        finally:
            await client.close()
        outcome.seconds = time.monotonic() - started
        return outcome


class _Play:
    """One run of one scenario (its namespace, nodes, recorder and kubelet)."""

    def __init__(
        self, runner: Runner, client: KubeClient, scenario: Scenario, outcome: Outcome, tmp: Path
    ) -> None:
        self.runner = runner
        self.client = client
        self.scenario = scenario
        self.outcome = outcome
        self.ns = outcome.namespace
        self.tmp = tmp
        self.kubelet = Kubelet(client, runner.log_dir)
        self.values = {"namespace": self.ns, **{f"node.{k}": v for k, v in outcome.nodes.items()}}
        self.created_ns = False
        self.created_nodes: list[str] = []
        self.broken_nodes: set[str] = set()
        self.store: Any = None
        self.recorder: asyncio.Task[None] | None = None
        self.stop = asyncio.Event()

    # ---- the play ---------------------------------------------------------------------------------------------------
    async def run(self) -> None:
        s = self.scenario
        await self._namespace()
        await self._start_recorder()
        for spec in s.nodes:
            await self._node(spec)
        for spec in s.nodes:
            await self._wait_node_ready(self.outcome.nodes[spec.name])
        for manifest in s.manifests:
            await self._apply(manifest, create_only=True)
        for wait in s.wait if s.wait is not None else self._default_waits():
            await self._wait(wait)
        await self._edits(s.edits)
        for step in s.inject:
            await self._step(step)
        if s.decoy is not None:
            for manifest in s.decoy.manifests:
                await self._apply(manifest, create_only=True)
            for manifest in s.decoy.manifests:
                if manifest["kind"] == "Pod":
                    await self._wait(WaitSpec(running=PodRef(pod=manifest["metadata"]["name"])))
            for step in s.decoy.inject:
                await self._step(step)
        for wait in s.settle:
            await self._wait(wait)
        await asyncio.sleep(0.3)  # the recorder's last flush (flush_interval 0.05 s)
        snapshot = await read_snapshot(
            self.client,
            namespace=self.ns,
            history=self.store.history,
            source=_SOURCE,
            clock=self.runner.clock,
        )
        nodes = list(self.outcome.nodes.values())
        diagnosis = scoped(diagnose(snapshot), self.ns, nodes)
        self.outcome.snapshot = snapshot
        self.outcome.diagnosis = diagnosis
        self.outcome.score = score(s.expect, diagnosis, decoys=s.decoy_objects, node_names=self.outcome.nodes)
        if self.runner.on_state is not None:
            self.runner.history = self.store.history
            try:
                await self.runner.on_state(s, self.ns, self.runner.kubeconfig)
            finally:
                self.runner.history = None

    async def _namespace(self) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": self.ns,
                "labels": {**self.scenario.namespace_labels, SCENARIO_LABEL: self.scenario.name},
            },
        }
        await self.client.create(resources.NAMESPACES, body)
        self.created_ns = True

        async def default_sa() -> bool:
            try:
                await self.client.get(resources.SERVICE_ACCOUNTS, "default", self.ns)
                return True
            except ApiError as exc:
                if not exc.not_found:
                    raise
                return False

        await self._until("the namespace's default ServiceAccount", default_sa, 60)

    async def _start_recorder(self) -> None:
        from capstan.record import KubeCollector, KubernetesConfig
        from capstan.store import open_store

        self.store = open_store(str(self.tmp / "history.db"))
        collector = KubeCollector(
            KubernetesConfig(
                kinds=list(RECORDED_KINDS), namespaces=[self.ns], events=False, flush_interval_s=0.05
            ),
            self.store.history,
            source=_SOURCE,
            connect=functools.partial(KubeClient.from_kubeconfig, self.runner.kubeconfig),
        )
        self.recorder = asyncio.create_task(collector.run(self.stop))

        async def synced() -> bool:
            if self.recorder is not None and self.recorder.done():
                exc = self.recorder.exception()
                raise SetupFailed(f"the recorder stopped: {exc}")
            return len(collector.synced) >= len(RECORDED_KINDS) and all(
                e.is_set() for e in collector.synced.values()
            )

        await self._until("the recorder's first sync", synced, 60)

    async def _node(self, spec: NodeSpec) -> None:
        name = self.outcome.nodes[spec.name]
        pool = NodePool(
            name=spec.name,
            count=1,
            cpu=spec.cpu,
            memory=spec.memory,
            pods=spec.pods,
            gpu=spec.gpu,
            gpu_product=spec.gpu_product,
            gpu_memory_mib=spec.gpu_memory_mib,
            labels={SCENARIO_LABEL: self.scenario.name, **spec.labels},
        )
        (body,) = node_manifests(SandboxSpec(node_pools=[pool]))
        body["metadata"]["name"] = name
        body["metadata"]["labels"]["kubernetes.io/hostname"] = name
        body["status"]["addresses"][1]["address"] = name
        if spec.taints:
            body["spec"]["taints"] = substitute([dict(t) for t in spec.taints], self.values)
        await self.client.create(resources.NODES, body)
        self.created_nodes.append(name)

    async def _wait_node_ready(self, name: str) -> None:
        async def ready() -> bool:
            node = await self.client.get(resources.NODES, name)
            conds = {
                c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []
            }
            # the node lifecycle controller lifts its not-ready taint a moment after Ready: until then the
            # scheduler counts the node as tainted
            taints = {t.get("key") for t in (node.get("spec") or {}).get("taints") or []}
            return conds.get("Ready") == "True" and not taints & _STARTUP_TAINTS

        await self._until(f"node {name} Ready (kwok)", ready, 60)

    async def _apply(self, manifest: dict[str, Any], *, create_only: bool = False) -> None:
        body = substitute(manifest, self.values)
        body["metadata"] = {**body["metadata"], "namespace": self.ns}
        res = _resource(body)
        if not res.namespaced:
            raise SetupFailed(
                f"{body['kind']}/{body['metadata']['name']}: only namespaced objects may be applied"
            )
        if create_only:
            await self.client.create(res, body, self.ns)
            return
        try:
            current = await self.client.get(res, body["metadata"]["name"], self.ns)
        except ApiError as exc:
            if not exc.not_found:
                raise
            await self.client.create(res, body, self.ns)
            return
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        await self.client.replace(res, body, self.ns)

    # ---- waits --------------------------------------------------------------------------------------------------------
    def _default_waits(self) -> list[WaitSpec]:
        """Every bare Pod of the manifests Running; every Deployment's replicas Running."""
        waits = []
        for m in self.scenario.manifests:
            if m["kind"] == "Pod":
                waits.append(WaitSpec(running=PodRef(pod=m["metadata"]["name"])))
            elif m["kind"] == "Deployment":
                labels = ((m.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
                selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
                count = int((m.get("spec") or {}).get("replicas", 1) or 0)
                if selector and count:
                    waits.append(WaitSpec(running=PodRef(selector=selector), count=count))
        return waits

    async def _until(self, what: str, check: Callable[[], Awaitable[bool]], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:  # bounded by the deadline
            if await check():
                return
            if time.monotonic() > deadline:
                raise SetupFailed(f"waited {timeout:.0f}s for {what}")
            await asyncio.sleep(_POLL)

    async def _pods(self, ref: PodRef) -> list[dict[str, Any]]:
        if ref.pod is not None:
            try:
                return [await self.client.get(resources.PODS, substitute(ref.pod, self.values), self.ns)]
            except ApiError as exc:
                if exc.not_found:
                    return []
                raise
        items, _ = await self.client.list(
            resources.PODS, namespace=self.ns, label_selector=substitute(ref.selector, self.values)
        )
        live = [p for p in items if not (p.get("metadata") or {}).get("deletionTimestamp")]
        return sorted(live, key=lambda p: str(p["metadata"]["name"]))

    async def _pod_name(self, ref: PodRef) -> str:
        pods = await self._pods(ref)
        if not pods:
            raise SetupFailed(f"no pod {ref.pod or ref.selector!r} in {self.ns}")
        return str(pods[0]["metadata"]["name"])

    async def _get(self, key: ObjectKey) -> dict[str, Any] | None:
        res = lookup_kind(key.kind)
        if res is None:
            raise SetupFailed(f"unknown kind {key.kind}")
        name = self.outcome.nodes.get(key.name, key.name) if key.kind == "Node" else key.name
        if name.endswith("*"):  # a generated name: the first (by name) with that prefix
            items, _ = await self.client.list(res, namespace=self.ns if res.namespaced else None)
            found = sorted(
                (i for i in items if str(i["metadata"]["name"]).startswith(name[:-1])),
                key=lambda i: str(i["metadata"]["name"]),
            )
            return found[0] if found else None
        try:
            return await self.client.get(res, name, self.ns if res.namespaced else None)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    async def _wait(self, w: WaitSpec) -> None:
        if w.seconds is not None:
            await asyncio.sleep(w.seconds)
            return
        if w.running is not None:
            ref = w.running

            async def running() -> bool:
                pods = await self._pods(ref)
                return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running") >= w.count

            await self._until(f"{w.count} pod(s) {ref.pod or ref.selector} Running", running, w.timeout)
        elif w.unschedulable is not None:
            uref = w.unschedulable

            async def unschedulable() -> bool:
                pods = await self._pods(uref)
                return len(pods) >= w.count and all(
                    any(
                        c.get("type") == "PodScheduled" and c.get("status") == "False"
                        for c in (p.get("status") or {}).get("conditions") or []
                    )
                    for p in pods
                )

            await self._until(f"pod {uref.pod or uref.selector} unschedulable", unschedulable, w.timeout)
        elif w.event is not None:
            reason = w.event

            async def event() -> bool:
                items, _ = await self.client.list(
                    resources.EVENTS, namespace=self.ns, field_selector=f"reason={reason}"
                )
                return bool(items)

            await self._until(f"an Event {reason}", event, w.timeout)
        elif w.condition is not None:
            ckey, ctype, cstatus = w.condition, w.type, w.status

            async def condition() -> bool:
                obj = await self._get(ckey)
                conds = ((obj or {}).get("status") or {}).get("conditions") or []
                return any(c.get("type") == ctype and c.get("status") == cstatus for c in conds)

            await self._until(f"{ckey.kind}/{ckey.name} {ctype}={cstatus}", condition, w.timeout)
        elif w.field is not None and w.object is not None:
            fkey, path, equals = w.object, w.field, w.equals

            async def field() -> bool:
                obj = await self._get(fkey)
                return obj is not None and str(_field(obj, path)) == equals

            await self._until(f"{fkey.kind}/{fkey.name} {path}={equals}", field, w.timeout)

    # ---- edits --------------------------------------------------------------------------------------------------------
    async def _edits(self, edits: Sequence[Edit]) -> None:
        for edit in edits:
            if edit.wait is not None:
                await self._wait(edit.wait)
                continue
            since = self.runner.clock() - 1.0
            if edit.patch is not None and edit.body is not None:
                res = lookup_kind(edit.patch.kind)
                if res is None:
                    raise SetupFailed(f"unknown kind {edit.patch.kind}")
                await self.client.patch(
                    res, edit.patch.name, substitute(edit.body, self.values), namespace=self.ns
                )
            elif edit.apply is not None:
                await self._apply(edit.apply)
            elif edit.delete is not None:
                res = lookup_kind(edit.delete.kind)
                if res is None:
                    raise SetupFailed(f"unknown kind {edit.delete.kind}")
                await self.client.delete(res, edit.delete.name, self.ns)
            key = edit.changes
            if key is not None and key.kind in RECORDED_KINDS:
                await self._recorded(key, since)

    async def _recorded(self, key: ObjectKey, since: float) -> None:
        history = self.store.history

        async def seen() -> bool:
            changes = await asyncio.to_thread(
                history.timeline, source=_SOURCE, kind=key.kind, namespace=self.ns, name=key.name, since=since
            )
            return any(c.change_type != "created" for c in changes)

        await self._until(f"the recorder to record the edit of {key.kind}/{key.name}", seen, 30)

    # ---- injection ----------------------------------------------------------------------------------------------------
    @staticmethod
    def _termination(t: TerminationSpec) -> Termination:
        return Termination(t.reason, t.exit_code, t.signal, t.message, t.runtime_seconds)

    async def _step(self, step: Step) -> None:
        name, a = step.action
        k = self.kubelet
        sub = functools.partial(substitute, values=self.values)
        if name == "restart_container":
            pod = await self._pod_name(a)
            for _ in range(a.times):
                await k.restart_container(
                    self.ns,
                    pod,
                    a.container,
                    self._termination(a.termination),
                    previous_log=sub(a.previous_log),
                    then=a.then,
                )
        elif name == "set_waiting":
            pod = await self._pod_name(a)
            await k.set_waiting(self.ns, pod, a.container, a.reason, sub(a.message))
        elif name == "probe_failure":
            pod = await self._pod_name(a)
            for _ in range(a.times):
                await k.probe_failure(
                    self.ns,
                    pod,
                    a.container,
                    a.probe,
                    sub(a.message),
                    failures=a.failures,
                    restart=a.restart,
                    previous_log=sub(a.previous_log),
                )
        elif name == "write_log":
            pod = await self._pod_name(a)
            await k.write_log(self.ns, pod, a.container, sub(a.lines))
        elif name == "pod_phase":
            pod = await self._pod_name(a)
            await k.end_pod(
                self.ns, pod, a.container, self._termination(a.termination), phase=a.phase, log=sub(a.log)
            )
        elif name == "set_ready":
            pod = await self._pod_name(a)
            await k.set_ready(self.ns, pod, a.container, a.ready)
        elif name == "node_condition":
            node = self.outcome.nodes[a.node]
            if a.condition == "Ready" and a.status != "True":
                self.broken_nodes.add(node)
            await k.node_condition(node, a.condition, a.status, a.reason, sub(a.message))
        elif name == "set_gpu_allocatable":
            await k.set_gpu_allocatable(self.outcome.nodes[a.node], a.count)
        elif name == "event":
            obj = await self._get(a.object)
            if obj is None:
                raise SetupFailed(f"event about {a.object.kind}/{a.object.name}: no such object")
            obj.setdefault("kind", a.object.kind)
            for _ in range(a.count):
                await k.event(
                    obj,
                    a.reason,
                    sub(a.message),
                    type_=a.type,
                    field_path=a.field_path,
                    component=a.component,
                )

    # ---- cleanup ------------------------------------------------------------------------------------------------------
    async def cleanup(self) -> None:
        errors: list[str] = []
        self.stop.set()
        if self.recorder is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self.recorder, 30)
        if self.store is not None:
            with contextlib.suppress(Exception):
                self.store.close()
        for node in self.broken_nodes:  # kwok takes the node back, so its pods can be deleted
            try:
                patch = {"metadata": {"annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE}}}
                await self.client.patch(resources.NODES, node, patch)
            except Exception as exc:
                errors.append(_one_line(exc))
        if self.created_ns:
            try:
                pods, _ = await self.client.list(resources.PODS, namespace=self.ns)
                for p in pods:
                    await self.client.delete(resources.PODS, p["metadata"]["name"], self.ns, grace_seconds=0)
                await self.client.delete(resources.NAMESPACES, self.ns)
            except Exception as exc:
                errors.append(_one_line(exc))
        for node in self.created_nodes:
            try:
                await self.client.delete(resources.NODES, node)
            except Exception as exc:
                errors.append(_one_line(exc))
        if self.created_ns:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # bounded
                try:
                    await self.client.get(resources.NAMESPACES, self.ns)
                except ApiError as exc:
                    if exc.not_found:
                        break
                    raise
                await asyncio.sleep(0.2)
            else:
                errors.append(f"namespace {self.ns} still terminating after 60s")
        if errors:
            raise SetupFailed("; ".join(errors))
