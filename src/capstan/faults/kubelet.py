"""Write failures to the API the way a kubelet would, for kwok nodes that run no containers.

Everything a restart collector, recorder or analyzer reads from a real node is produced here: container statuses
with ``lastState.terminated`` (reason, exit code, signal, start and finish) and a growing ``restartCount``; waiting
reasons; init containers and native sidecars; kubelet-style Events (same reasons, types, source, count and series
bumps on repeats); probe failures; node conditions; GPU allocatable dropping to zero; and previous-container logs
that the standard pod-log API returns (kwok serves them from files through its ``Logs`` resource, in the CRI log
format kubelet writes).

Status writes go to the ``status`` subresource with optimistic concurrency (resourceVersion) and retry on conflict.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from capstan.kube import ApiError, KubeClient, resources
from capstan.sandbox import GPU_RESOURCE, KWOK_NODE_ANNOTATION, KWOK_NODE_ANNOTATION_VALUE


class LogsNotServed(RuntimeError):
    """kwok never began serving a pod's log after its ``Logs`` object was applied (the log reads would fail)."""


ContainerKind = Literal["container", "init", "sidecar"]
Clock = Callable[[], dt.datetime]

# Signals as the kernel numbers them; exit code = 128 + signal for a process killed by one.
SIGNALS = {"SIGKILL": 9, "SIGTERM": 15, "SIGSEGV": 11, "SIGABRT": 6, "SIGINT": 2}
WAITING_REASONS = (
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "InvalidImageName",
    "ContainerCreating",
    "PodInitializing",
)


def _ts(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cri_line(t: dt.datetime, line: str, stream: str = "stdout") -> str:
    stamp = t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp} {stream} F {line}\n"


@dataclasses.dataclass(frozen=True)
class Termination:
    """How the previous container instance ended."""

    reason: str = "Error"
    exit_code: int = 1
    signal: int | None = None
    message: str | None = None
    runtime_seconds: float = 30.0

    @classmethod
    def oom_killed(cls) -> Termination:
        return cls("OOMKilled", 137, SIGNALS["SIGKILL"])

    @classmethod
    def error(cls, exit_code: int = 1, message: str | None = None) -> Termination:
        return cls("Error", exit_code, None, message)

    @classmethod
    def completed(cls) -> Termination:
        return cls("Completed", 0)

    @classmethod
    def killed(cls, signal_name: str = "SIGTERM") -> Termination:
        sig = SIGNALS[signal_name]
        return cls("Error", 128 + sig, sig)


class Kubelet:
    """Fault injection for pods and nodes of a sandbox. ``log_dir`` must be readable by the sandbox's kwok."""

    def __init__(self, client: KubeClient, log_dir: Path, *, clock: Clock | None = None) -> None:
        self.client = client
        self.log_dir = log_dir
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._events: dict[str, tuple[str, int]] = {}
        self._logs_served: set[str] = set()  # pod uids whose Logs object kwok already serves

    # ---- status plumbing ----------------------------------------------------------------------------------------
    async def _update_pod_status(
        self, namespace: str, name: str, mutate: Callable[[dict[str, Any]], None], attempts: int = 20
    ) -> dict[str, Any]:
        for _ in range(attempts):
            pod = await self.client.get(resources.PODS, name, namespace)
            mutate(pod)
            try:
                updated: dict[str, Any] = await self.client.request(
                    "PUT", resources.PODS.item_path(name, namespace, "status"), body=pod
                )
                return updated
            except ApiError as exc:
                if not exc.conflict:
                    raise
                await asyncio.sleep(0.02)
        raise ApiError(409, "Conflict", f"pod {namespace}/{name}: status kept changing under us")

    @staticmethod
    def _find(pod: dict[str, Any], container: str) -> tuple[str, dict[str, Any], ContainerKind]:
        spec = pod.get("spec") or {}
        for c in spec.get("containers") or []:
            if c["name"] == container:
                return "containerStatuses", c, "container"
        for c in spec.get("initContainers") or []:
            if c["name"] == container:
                kind: ContainerKind = "sidecar" if c.get("restartPolicy") == "Always" else "init"
                return "initContainerStatuses", c, kind
        raise ValueError(f"pod {pod['metadata']['name']} has no container {container!r}")

    @staticmethod
    def _status_entry(pod: dict[str, Any], field: str, spec: dict[str, Any]) -> dict[str, Any]:
        status = pod.setdefault("status", {})
        entries = status.setdefault(field, [])
        for entry in entries:
            if entry.get("name") == spec["name"]:
                result: dict[str, Any] = entry  # mutated in place by the caller
                return result
        entry = {
            "name": spec["name"],
            "image": spec.get("image", ""),
            "ready": False,
            "restartCount": 0,
            "state": {},
        }
        entries.append(entry)
        return entry

    # ---- logs -----------------------------------------------------------------------------------------------------
    def _log_paths(self, namespace: str, pod: str, container: str) -> tuple[Path, Path]:
        d = self.log_dir / f"{namespace}_{pod}" / container
        d.mkdir(parents=True, exist_ok=True)
        return d / "current.log", d / "previous.log"

    async def _register_logs(self, pod: dict[str, Any]) -> None:
        """A kwok ``Logs`` object mapping each container of the pod to its files."""
        meta = pod["metadata"]
        spec = pod.get("spec") or {}
        names = [c["name"] for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
        entries = []
        for name in names:
            current, previous = self._log_paths(meta["namespace"], meta["name"], name)
            current.touch(exist_ok=True)
            entries.append(
                {"containers": [name], "logsFile": str(current), "previousLogsFile": str(previous)}
            )
        body = {
            "apiVersion": resources.KWOK_LOGS.api_version,
            "kind": "Logs",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "spec": {"logs": entries},
        }
        await self.client.apply(resources.KWOK_LOGS, body, field_manager="capstan-faults")
        uid = str(meta.get("uid") or "")
        if uid in self._logs_served or not names:
            return
        if not spec.get("nodeName"):
            return  # no node serves an unscheduled pod's log; a later call waits once it is bound
        # kwok learns of a new Logs object through its own watch; until then the log API answers an error. Wait
        # until it serves this pod, so a restart made visible next finds its previous log, as with a real kubelet.
        last: ApiError | None = None
        for _ in range(1200):  # bounded: 60 s (kwok's queue lags far behind on a loaded machine)
            try:
                await self.client.pod_log(meta["namespace"], meta["name"], names[-1], tail_lines=1)
                self._logs_served.add(uid)
                return
            except ApiError as exc:
                # the pod's node is gone (or never was): nothing serves its log, as in a cluster
                if exc.not_found:
                    return
                last = exc
                await asyncio.sleep(0.05)
        raise LogsNotServed(
            f"kwok did not serve the log of pod {meta['namespace']}/{meta['name']} within 60 s"
            + (f" (last answer: {last.status} {last.message[:200]})" if last else "")
        )

    async def write_log(self, namespace: str, pod: str, container: str, lines: list[str]) -> None:
        """Append lines to the container's current log (what `kubectl logs` shows now)."""
        pod_obj = await self.client.get(resources.PODS, pod, namespace)
        await self._register_logs(pod_obj)
        current, _ = self._log_paths(namespace, pod, container)
        now = self.clock()
        with current.open("a") as f:
            f.writelines(_cri_line(now, ln) for ln in lines)

    # ---- events ---------------------------------------------------------------------------------------------------
    async def event(
        self,
        involved: dict[str, Any],
        reason: str,
        message: str,
        *,
        type_: Literal["Normal", "Warning"] = "Normal",
        field_path: str | None = None,
        component: str = "kubelet",
        host: str | None = None,
    ) -> dict[str, Any]:
        """Record an Event as the kubelet does; a repeat of the same reason and message bumps ``count``."""
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        host = host or (involved.get("spec") or {}).get("nodeName") or meta.get("name")
        now = self.clock()
        key = hashlib.sha1(f"{meta.get('uid')}|{field_path}|{reason}|{message}".encode()).hexdigest()
        if key in self._events:
            name, count = self._events[key]
            count += 1
            patch = {"count": count, "lastTimestamp": _ts(now)}
            try:
                ev = await self.client.patch(resources.EVENTS, name, patch, namespace=namespace)
                self._events[key] = (name, count)
                return ev
            except ApiError as exc:
                if not exc.not_found:
                    raise
        name = f"{meta['name']}.{int(now.timestamp() * 1e9):x}{len(self._events) % 1000:03d}"
        involved_ref: dict[str, Any] = {
            "apiVersion": involved.get("apiVersion", "v1"),
            "kind": involved.get("kind", "Pod"),
            "name": meta["name"],
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
        }
        if meta.get("namespace"):
            involved_ref["namespace"] = namespace
        if field_path:
            involved_ref["fieldPath"] = field_path
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": involved_ref,
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": component, "host": host},
            "reportingComponent": component,
            "reportingInstance": host,
            "firstTimestamp": _ts(now),
            "lastTimestamp": _ts(now),
            "count": 1,
        }
        ev = await self.client.create(resources.EVENTS, body, namespace)
        self._events[key] = (name, 1)
        return ev

    # ---- containers -----------------------------------------------------------------------------------------------
    async def restart_container(
        self,
        namespace: str,
        pod: str,
        container: str,
        termination: Termination | None = None,
        *,
        previous_log: list[str] | None = None,
        then: Literal["running", "crashloop"] = "crashloop",
        backoff_seconds: int = 10,
    ) -> dict[str, Any]:
        """One more restart of ``container``: lastState.terminated, restartCount + 1, and the kubelet's events.

        ``previous_log`` becomes what ``kubectl logs --previous`` returns (None: no previous log file at all).
        ``then`` says whether the new instance is running or waiting in CrashLoopBackOff.
        """
        term = termination or Termination.error()
        now = self.clock()
        started = now - dt.timedelta(seconds=term.runtime_seconds)
        pod_obj = await self.client.get(resources.PODS, pod, namespace)
        field, spec, kind = self._find(pod_obj, container)
        await self._register_logs(pod_obj)
        current, previous = self._log_paths(namespace, pod, container)
        if previous_log is None:
            previous.unlink(missing_ok=True)
        else:
            with previous.open("w") as f:
                f.writelines(
                    _cri_line(started + dt.timedelta(milliseconds=i), ln) for i, ln in enumerate(previous_log)
                )
        current.write_text("")

        def mutate(p: dict[str, Any]) -> None:
            entry = self._status_entry(p, field, spec)
            terminated: dict[str, Any] = {
                "exitCode": term.exit_code,
                "reason": term.reason,
                "startedAt": _ts(started),
                "finishedAt": _ts(now),
                "containerID": f"containerd://{hashlib.sha256(f'{pod}{container}{now}'.encode()).hexdigest()}",
            }
            if term.signal is not None:
                terminated["signal"] = term.signal
            if term.message:
                terminated["message"] = term.message
            entry["lastState"] = {"terminated": terminated}
            entry["restartCount"] = int(entry.get("restartCount") or 0) + 1
            if then == "running":
                entry["state"] = {"running": {"startedAt": _ts(now)}}
                entry["ready"] = kind != "init"
                entry["started"] = True
            else:
                entry["state"] = {
                    "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": f"back-off {backoff_seconds}s restarting failed container={container} "
                        f"pod={pod}_{namespace}({p['metadata']['uid']})",
                    }
                }
                entry["ready"] = False
                entry["started"] = False
            _set_ready(p)

        updated = await self._update_pod_status(namespace, pod, mutate)
        ref = f"spec.{'initContainers' if kind != 'container' else 'containers'}{{{container}}}"
        image = spec.get("image", "")
        await self.event(
            updated, "Pulled", f'Container image "{image}" already present on machine', field_path=ref
        )
        await self.event(updated, "Created", f"Created container: {container}", field_path=ref)
        await self.event(updated, "Started", f"Started container {container}", field_path=ref)
        if then == "crashloop":
            await self.event(
                updated,
                "BackOff",
                f"Back-off restarting failed container {container} in pod {pod}_{namespace}"
                f"({updated['metadata']['uid']})",
                type_="Warning",
                field_path=ref,
            )
        return updated

    async def set_waiting(
        self, namespace: str, pod: str, container: str, reason: str, message: str = ""
    ) -> dict[str, Any]:
        """Put a container in a waiting state (ImagePullBackOff, CreateContainerConfigError…) with its events."""
        if reason not in WAITING_REASONS:
            raise ValueError(f"unknown waiting reason {reason!r}; one of {', '.join(WAITING_REASONS)}")
        pod_obj = await self.client.get(resources.PODS, pod, namespace)
        field, spec, kind = self._find(pod_obj, container)

        def mutate(p: dict[str, Any]) -> None:
            entry = self._status_entry(p, field, spec)
            entry["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
            entry["ready"] = False
            entry["started"] = False
            _set_ready(p)

        updated = await self._update_pod_status(namespace, pod, mutate)
        ref = f"spec.{'initContainers' if kind != 'container' else 'containers'}{{{container}}}"
        image = spec.get("image", "")
        if reason in ("ErrImagePull", "ImagePullBackOff"):
            await self.event(updated, "Pulling", f'Pulling image "{image}"', field_path=ref)
            await self.event(
                updated,
                "Failed",
                message or f'Failed to pull image "{image}": rpc error: code = NotFound desc = not found',
                type_="Warning",
                field_path=ref,
            )
            await self.event(updated, "Failed", "Error: ErrImagePull", type_="Warning", field_path=ref)
            if reason == "ImagePullBackOff":
                await self.event(
                    updated, "BackOff", f'Back-off pulling image "{image}"', type_="Normal", field_path=ref
                )
        elif reason in ("CreateContainerConfigError", "CreateContainerError"):
            await self.event(
                updated, "Failed", f"Error: {message or reason}", type_="Warning", field_path=ref
            )
        return updated

    async def probe_failure(
        self,
        namespace: str,
        pod: str,
        container: str,
        probe: Literal["Liveness", "Readiness", "Startup"] = "Liveness",
        message: str = "HTTP probe failed with statuscode: 500",
        *,
        failures: int = 3,
        restart: bool = True,
        previous_log: list[str] | None = None,
    ) -> dict[str, Any]:
        """``failures`` kubelet ``Unhealthy`` events; a failed liveness/startup probe then kills and restarts it."""
        pod_obj = await self.client.get(resources.PODS, pod, namespace)
        _, _, kind = self._find(pod_obj, container)
        ref = f"spec.{'initContainers' if kind != 'container' else 'containers'}{{{container}}}"
        for _ in range(failures):
            await self.event(
                pod_obj, "Unhealthy", f"{probe} probe failed: {message}", type_="Warning", field_path=ref
            )
        if probe == "Readiness" or not restart:
            return pod_obj
        await self.event(
            pod_obj,
            "Killing",
            f"Container {container} failed {probe.lower()} probe, will be restarted",
            field_path=ref,
        )
        return await self.restart_container(
            namespace,
            pod,
            container,
            Termination("Error", 137, SIGNALS["SIGKILL"], runtime_seconds=60),
            previous_log=previous_log,
            then="running",
        )

    async def set_ready(self, namespace: str, pod: str, container: str, ready: bool) -> dict[str, Any]:
        """Mark a running container (not) ready, as the kubelet does when its readiness probe fails or recovers."""
        pod_obj = await self.client.get(resources.PODS, pod, namespace)
        field, spec, _ = self._find(pod_obj, container)

        def mutate(p: dict[str, Any]) -> None:
            self._status_entry(p, field, spec)["ready"] = ready
            _set_ready(p)

        return await self._update_pod_status(namespace, pod, mutate)

    async def end_pod(
        self,
        namespace: str,
        pod: str,
        container: str,
        termination: Termination | None = None,
        *,
        phase: Literal["Failed", "Succeeded"] = "Failed",
        log: list[str] | None = None,
    ) -> dict[str, Any]:
        """End the pod for good, as a kubelet reports a pod of ``restartPolicy: Never`` whose container exited:
        ``phase``, the container ``state.terminated`` and, when given, its log (the Job controller counts it)."""
        term = termination or (Termination.completed() if phase == "Succeeded" else Termination.error())
        now = self.clock()
        started = now - dt.timedelta(seconds=term.runtime_seconds)
        pod_obj = await self.client.get(resources.PODS, pod, namespace)
        field, spec, _ = self._find(pod_obj, container)
        if log is not None and (pod_obj.get("spec") or {}).get("nodeName"):
            await self._register_logs(pod_obj)
            current, _ = self._log_paths(namespace, pod, container)
            with current.open("w") as f:
                f.writelines(
                    _cri_line(started + dt.timedelta(milliseconds=i), ln) for i, ln in enumerate(log)
                )

        def mutate(p: dict[str, Any]) -> None:
            entry = self._status_entry(p, field, spec)
            terminated: dict[str, Any] = {
                "exitCode": term.exit_code,
                "reason": term.reason,
                "startedAt": _ts(started),
                "finishedAt": _ts(now),
            }
            if term.signal is not None:
                terminated["signal"] = term.signal
            if term.message:
                terminated["message"] = term.message
            entry["state"] = {"terminated": terminated}
            entry["ready"] = False
            entry["started"] = False
            p.setdefault("status", {})["phase"] = phase
            _set_ready(p)

        return await self._update_pod_status(namespace, pod, mutate)

    # ---- nodes ----------------------------------------------------------------------------------------------------
    async def _update_node_status(
        self, name: str, mutate: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any]:
        for _ in range(20):
            node = await self.client.get(resources.NODES, name)
            mutate(node)
            try:
                updated: dict[str, Any] = await self.client.request(
                    "PUT", resources.NODES.item_path(name, subresource="status"), body=node
                )
                return updated
            except ApiError as exc:
                if not exc.conflict:
                    raise
                await asyncio.sleep(0.02)
        raise ApiError(409, "Conflict", f"node {name}: status kept changing under us")

    async def node_condition(
        self,
        node: str,
        condition: str,
        status: Literal["True", "False", "Unknown"],
        reason: str,
        message: str = "",
    ) -> dict[str, Any]:
        """Set one node condition as the kubelet reports it (MemoryPressure, DiskPressure, PIDPressure, Ready…).

        A node made not Ready is released by kwok (its management annotation is removed), as a kubelet that stopped
        would be; :meth:`restore_node` hands it back.
        """
        if condition == "Ready" and status != "True":
            await self.client.patch(
                resources.NODES, node, {"metadata": {"annotations": {KWOK_NODE_ANNOTATION: None}}}
            )
        now = _ts(self.clock())

        def mutate(n: dict[str, Any]) -> None:
            conds = n.setdefault("status", {}).setdefault("conditions", [])
            for c in conds:
                if c.get("type") == condition:
                    if c.get("status") != status:
                        c["lastTransitionTime"] = now
                    c.update(status=status, reason=reason, message=message, lastHeartbeatTime=now)
                    return
            conds.append(
                {
                    "type": condition,
                    "status": status,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            )

        updated = await self._update_node_status(node, mutate)
        if status == "True" and condition != "Ready":
            await self.event(
                updated,
                f"NodeHas{condition}",
                f"Node {node} status is now: NodeHas{condition}",
                host=node,
            )
        elif condition == "Ready" and status != "True":
            await self.event(updated, "NodeNotReady", f"Node {node} status is now: NodeNotReady", host=node)
        return updated

    async def restore_node(self, node: str) -> dict[str, Any]:
        """Give the node back to kwok: it resets conditions to healthy on its next pass."""
        patch = {"metadata": {"annotations": {KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE}}}
        await self.client.patch(resources.NODES, node, patch)

        def mutate(n: dict[str, Any]) -> None:
            n.setdefault("status", {})["conditions"] = [
                c for c in n["status"].get("conditions", []) if c.get("type") != "Ready"
            ]

        return await self._update_node_status(node, mutate)

    async def set_gpu_allocatable(self, node: str, count: int) -> dict[str, Any]:
        """Change ``nvidia.com/gpu`` allocatable (0 = the device plugin lost its GPUs), capacity unchanged."""

        def mutate(n: dict[str, Any]) -> None:
            n.setdefault("status", {}).setdefault("allocatable", {})[GPU_RESOURCE] = str(count)

        return await self._update_node_status(node, mutate)


def _set_ready(pod: dict[str, Any]) -> None:
    """Recompute the pod's Ready/ContainersReady conditions from its container statuses, as the kubelet does."""
    status = pod.setdefault("status", {})
    statuses = status.get("containerStatuses") or []
    all_ready = bool(statuses) and all(s.get("ready") for s in statuses)
    now = _ts(dt.datetime.now(dt.UTC))
    value = "True" if all_ready else "False"
    for cond in status.setdefault("conditions", []):
        if cond.get("type") in ("Ready", "ContainersReady") and cond.get("status") != value:
            cond["status"] = value
            cond["lastTransitionTime"] = now
            if value == "False":
                cond["reason"] = "ContainersNotReady"
            else:
                cond.pop("reason", None)
