"""Scale: the recorder and the restart notifier, run as the chart runs them, on a sandbox of 5,000 kwok nodes and
50,000 pods with churn (rollouts, container restarts, node conditions).

What runs is what `helm install` with the PostgreSQL store would start: the chart's own arguments for both
components (``--leader-elect``, the Lease in the release namespace, ``--probe-port``), the recorder's configuration
from the chart's ConfigMap, one PostgreSQL store for both, and each process in-cluster (no kubeconfig: the service
variables and a TokenRequest token of the chart's ServiceAccount for it, bound to the chart's roles). The restart
notifier's chat is a Slack receiver on loopback.

Phases, each timed:
1. the cluster (``Sandbox.up`` with the nodes) and its pods (Deployments of 100 replicas; kube-controller-manager
   creates the pods, kube-scheduler binds them, kwok runs them);
2. first full sync: from each component's start to its ``/readyz`` answering 200 (the recorder's first lists all
   stored);
3. churn for ``--churn-seconds``: a rollout of one Deployment every ``--rollout-every`` s, a container restart
   every ``--restart-every`` s (the fault injector's kubelet: lastState, restartCount + 1, its Events), and a node
   condition (MemoryPressure) set and cleared every ``--condition-every`` s.

Figures:
- **recorder lag**: a reference watch (its own process, watching pods, nodes, Deployments and ReplicaSets from the
  moment the recorder starts) stamps each event on arrival; a poller stamps each stored row when it first becomes
  visible in the store (every 0.1 s, so figures include up to 0.1 s of polling); lag is the difference, p50/p99.
- **lost changes**, counted against the API server's own resourceVersions: every event of the reference watch that
  changes the object outside the recorder's noise paths (capstan.record's DiffPolicy: managedFields,
  resourceVersion, heartbeat times…) must have a stored row at that resourceVersion; deletions a deletion row. And
  every object the API server lists at the end must be stored as it is (its normalized form equal to the stored
  state).
- **restart detection**: from the injected restart's status write to its row in the notifier's ``restarts`` table.
- **memory and CPU**: peak RSS (VmHWM) and CPU seconds of each component and of the API server, etcd and kwok, per
  phase.
- **API requests caused by Capstan**, counted by the API server: its audit log, for the components' ServiceAccounts
  alone, per phase and by verb and resource (a watch counts once, when it starts).

Prints a Rich table, writes bench/out/cluster_scale.json and a PNG. ``--smoke`` runs a tiny cluster in a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import yaml
from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, text

from capstan.faults import Kubelet, Termination
from capstan.kube import ApiError, KubeClient, Resource, resources
from capstan.notify import DEV_TOKEN, SlackReceiver, serve_in_thread
from capstan.percentile import percentile
from capstan.record import DiffPolicy, normalize
from capstan.sandbox import (
    HA_VALUES,
    NodePool,
    PostgresServer,
    Sandbox,
    SandboxSpec,
    chart_documents,
    free_port,
    identity_manifest,
    mount_service_account,
    render_chart,
    require_toolchain,
)
from goals import limit

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=160)
NAMESPACE = "capstan"  # the release namespace: the chart's identities and Leases live here
COMPONENTS = ("record", "restarts")
REFERENCE_KINDS: tuple[Resource, ...] = (
    resources.PODS,
    resources.NODES,
    resources.DEPLOYMENTS,
    resources.REPLICASETS,
)
POLL_S = 0.1


# ---- the reference watch (a process of its own, so its decoding does not share the bench's interpreter) --------


def _fingerprint(obj: dict[str, Any], policy: DiffPolicy) -> bytes:
    """The object as the recorder compares it (its noise paths dropped), as canonical bytes."""
    return json.dumps(normalize(obj, policy), sort_keys=True, separators=(",", ":")).encode()


async def _reference_watch(kubeconfig: Path, out: Path, ready: Path) -> None:
    """List then watch every reference kind; one line per event: ``arrival kind uid rv type changed``."""
    policy = DiffPolicy()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    relists = 0
    async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
        with out.open("w") as sink:
            starts: dict[str, str] = {}
            prints: dict[str, bytes] = {}
            for res in REFERENCE_KINDS:
                items, rv = await kube.list(res)
                for item in items:
                    prints[item["metadata"]["uid"]] = _fingerprint(item, policy)
                starts[res.kind] = rv
            await asyncio.to_thread(ready.write_text, "ok")

            async def follow(res: Resource) -> None:
                nonlocal relists
                rv = starts[res.kind]
                for _ in range(1_000_000):  # bounded: one pass per server-ended stream
                    try:
                        async for event in kube.watch(res, resource_version=rv, timeout_seconds=300):
                            now = time.time()
                            obj = event.get("object") or {}
                            meta = obj.get("metadata") or {}
                            rv = str(meta.get("resourceVersion") or rv)
                            etype = event.get("type")
                            if etype == "BOOKMARK":
                                continue
                            if etype == "ERROR":
                                raise ApiError(410, "Gone", str(obj.get("message")))
                            uid = str(meta.get("uid"))
                            if etype == "DELETED":
                                changed = prints.pop(uid, None) is not None
                            else:
                                fp = _fingerprint(obj, policy)
                                changed = prints.get(uid) != fp
                                prints[uid] = fp
                            sink.write(f"{now:.4f} {res.kind} {uid} {rv} {etype} {int(changed)}\n")
                    except ApiError as exc:
                        if exc.status != 410 and not exc.gone:
                            await asyncio.sleep(0.5)
                            continue
                        relists += 1  # the reference itself fell behind: what it missed is not counted
                        sink.write(f"{time.time():.4f} {res.kind} - - RELIST 0\n")
                        items, rv = await kube.list(res)
                        for item in items:
                            prints[item["metadata"]["uid"]] = _fingerprint(item, policy)

            tasks = [asyncio.create_task(follow(res)) for res in REFERENCE_KINDS]
            await stop.wait()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            sink.flush()


# ---- sampling -----------------------------------------------------------------------------------------------


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Usage:
    """CPU seconds of watched processes at named marks; peak RSS at the end."""

    pids: dict[str, int]
    marks: list[tuple[str, float, dict[str, float]]] = field(default_factory=list)
    peak_at_mark: dict[str, dict[str, float]] = field(default_factory=dict)  # VmHWM so far, at each mark

    def mark(self, name: str) -> None:
        cpu: dict[str, float] = {}
        for who, pid in self.pids.items():
            with contextlib.suppress(OSError):
                cpu[who] = _proc_cpu_s(pid)
        self.marks.append((name, time.monotonic(), cpu))
        self.peak_at_mark[name] = self.peaks()

    def phase(self, start: str, end: str) -> dict[str, float]:
        """Cores used by each process between two marks (CPU seconds over wall seconds)."""
        (_, t0, c0), (_, t1, c1) = (next(m for m in self.marks if m[0] == n) for n in (start, end))
        return {who: (c1[who] - c0.get(who, 0.0)) / max(t1 - t0, 1e-9) for who in c1}

    def peaks(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for who, pid in self.pids.items():
            with contextlib.suppress(OSError):
                out[who] = _proc_hwm_mb(pid)
        return out


class StorePoller(threading.Thread):
    """Stamps each stored change row and restart row with the time it first became visible."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        self.rows: dict[tuple[str, str], tuple[float, str, str]] = {}  # (uid, rv) -> (seen, change type, via)
        self.restarts: dict[tuple[str, int], float] = {}  # (pod uid, restart count) -> seen
        self.last_row_at = time.time()
        self._halt = threading.Event()
        self._change_id = 0
        self._restart_id = 0

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self.poll_once()
            except Exception as exc:  # the tables appear with the first component's migration
                if "does not exist" not in str(exc):
                    console.print(f"[yellow]poller: {str(exc).splitlines()[0]}[/]")
            self._halt.wait(POLL_S)

    def poll_once(self) -> None:
        with self.engine.connect() as conn:
            now = time.time()
            changes = conn.execute(
                text(
                    "SELECT id, uid, resource_version, change_type, observed_via FROM object_changes "
                    "WHERE id > :last ORDER BY id LIMIT 200000"
                ),
                {"last": self._change_id},
            ).all()
            for row_id, uid, rv, change, via in changes:
                self.rows.setdefault((uid, rv), (now, change, via))
                self._change_id = row_id
            if changes:
                self.last_row_at = now
            with contextlib.suppress(Exception):
                restarts = conn.execute(
                    text("SELECT id, pod_uid, restart_count FROM restarts WHERE id > :last ORDER BY id"),
                    {"last": self._restart_id},
                ).all()
                for row_id, uid, count in restarts:
                    self.restarts.setdefault((uid, int(count)), now)
                    self._restart_id = row_id

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)
        self.engine.dispose()


# ---- the cluster, its pods, the churn ------------------------------------------------------------------------


def cluster_spec(nodes: int, pods: int, node_lease_s: int) -> SandboxSpec:
    per_node = max(110, 2 * -(-pods // max(nodes, 1)))
    pool = NodePool(
        name="scale", count=nodes, cpu="64", memory="256Gi", pods=per_node, instance_type="m6i.16xlarge"
    )
    return SandboxSpec(name="scale", client_qps=1000, node_lease_duration_s=node_lease_s, node_pools=[pool])


def deployment(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example.com/web:1",
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        }
                    ],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


async def ensure_namespace(kube: KubeClient, name: str) -> None:
    try:
        await kube.create(
            resources.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    except ApiError as exc:
        if not exc.conflict:
            raise


async def populate(
    kube: KubeClient, pods: int, replicas: int, namespaces: int, deadline_s: float
) -> list[tuple[str, str]]:
    """Deployments of ``replicas`` pods until ``pods`` run; returns (namespace, name) of each Deployment."""
    count = max(1, pods // replicas)
    deployments = [(f"scale-{i % namespaces}", f"web-{i}") for i in range(count)]
    for ns in sorted({ns for ns, _ in deployments}):
        await ensure_namespace(kube, ns)
    # the namespaces' default ServiceAccounts come from kube-controller-manager; pods need them
    sem = asyncio.Semaphore(16)

    async def create(ns: str, name: str) -> None:
        async with sem:
            for _ in range(600):  # bounded: 120 s per Deployment
                try:
                    await kube.create(resources.DEPLOYMENTS, deployment(name, ns, replicas))
                    return
                except ApiError as exc:
                    if exc.conflict:
                        return
                    await asyncio.sleep(0.2)

    await asyncio.gather(*(create(ns, name) for ns, name in deployments))
    want = count * replicas
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        items, _ = await kube.list(resources.DEPLOYMENTS)
        ready = sum(int((d.get("status") or {}).get("readyReplicas") or 0) for d in items)
        if ready >= want:
            return deployments
        console.log(f"pods ready: {ready:,} of {want:,}")
        await asyncio.sleep(10 if want > 5000 else 1)
    raise SystemExit(f"cluster_scale: only part of the {want:,} pods became ready within {deadline_s:.0f} s")


@dataclass
class Churn:
    rollouts: int = 0
    restarts: list[tuple[str, int, float]] = field(
        default_factory=list
    )  # (pod uid, restart count, written at)
    conditions: int = 0
    errors: list[str] = field(default_factory=list)


async def churn(
    kube: KubeClient,
    kubelet: Kubelet,
    deployments: list[tuple[str, str]],
    nodes: list[str],
    seconds: float,
    rollout_every: float,
    restart_every: float,
    condition_every: float,
    rng: random.Random,
) -> Churn:
    done = Churn()
    end = time.monotonic() + seconds

    async def rollouts() -> None:
        for i in range(1_000_000):  # bounded by the churn's end
            if time.monotonic() >= end:
                return
            ns, name = deployments[i % len(deployments)]
            patch = {"spec": {"template": {"metadata": {"annotations": {"capstan.io/rollout": str(i)}}}}}
            try:
                await kube.patch(resources.DEPLOYMENTS, name, patch, namespace=ns)
                done.rollouts += 1
            except ApiError as exc:
                done.errors.append(f"rollout {ns}/{name}: {exc}")
            await asyncio.sleep(rollout_every)

    async def restarts() -> None:
        for _ in range(1_000_000):
            if time.monotonic() >= end:
                return
            ns, name = rng.choice(deployments)
            try:
                items, _ = await kube.list(
                    resources.PODS, namespace=ns, label_selector=f"app={name}", limit=500
                )
                running = [p for p in items if (p.get("status") or {}).get("phase") == "Running"
                           and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
                if running:
                    pod = rng.choice(running)
                    updated = await kubelet.restart_container(
                        ns, pod["metadata"]["name"], "main", Termination.error(),
                        previous_log=["panic: out of range"], then="running",
                    )  # fmt: skip
                    written = time.time()
                    (status,) = [c for c in updated["status"]["containerStatuses"] if c["name"] == "main"]
                    done.restarts.append((updated["metadata"]["uid"], int(status["restartCount"]), written))
            except ApiError as exc:
                done.errors.append(f"restart in {ns}/{name}: {exc}")
            await asyncio.sleep(restart_every)

    async def conditions() -> None:
        for i in range(1_000_000):
            if time.monotonic() >= end:
                return
            node = nodes[i % len(nodes)]
            try:
                await kubelet.node_condition(node, "MemoryPressure", "True", "KubeletHasInsufficientMemory")
                await asyncio.sleep(condition_every / 2)
                await kubelet.node_condition(node, "MemoryPressure", "False", "KubeletHasSufficientMemory")
                done.conditions += 1
            except ApiError as exc:
                done.errors.append(f"condition on {node}: {exc}")
            await asyncio.sleep(condition_every / 2)

    await asyncio.gather(rollouts(), restarts(), conditions())
    return done


# ---- the components, as the chart starts them ---------------------------------------------------------------


def chart_args(component: str) -> tuple[list[str], str | None]:
    """The chart's container arguments for ``component`` and, for the recorder, its ConfigMap's configuration."""
    shown = ["--show-only", f"templates/{component}.yaml"]
    if component == "record":
        shown += ["--show-only", "templates/record-config.yaml"]
    docs = chart_documents(render_chart(*HA_VALUES, *shown))
    (deploy,) = [d for d in docs if d["kind"] == "Deployment"]
    args = list(deploy["spec"]["template"]["spec"]["containers"][0]["args"])
    config = next((d["data"]["record.yaml"] for d in docs if d["kind"] == "ConfigMap"), None)
    return args, config


async def apply_identity(
    sandbox: Sandbox, kube: KubeClient, kubeconfig: Path, component: str, work: Path
) -> dict[str, str]:
    """The chart's identity of ``component`` applied; a pod's environment of its ServiceAccount."""
    manifest_text = identity_manifest(component)
    path = work / f"{component}-identity.yaml"
    path.write_text(manifest_text)
    await asyncio.to_thread(sandbox.kubectl, ["apply", "--server-side", "-f", str(path)])
    (account,) = [d for d in chart_documents(manifest_text) if d["kind"] == "ServiceAccount"]
    name = account["metadata"]["name"]
    answer = await kube.request(
        "POST",
        resources.SERVICE_ACCOUNTS.item_path(name, NAMESPACE, "token"),
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 86400},
        },
    )
    return mount_service_account(
        work / f"{component}-account", answer["status"]["token"], kubeconfig, NAMESPACE
    )


def audit_policy(work: Path) -> list[str]:
    """The API server's audit log of the components' ServiceAccounts alone (every request, metadata only): which
    requests Capstan causes, by verb and resource, counted by the API server itself."""
    users = [f"system:serviceaccount:{NAMESPACE}:capstan-{c}" for c in COMPONENTS]
    policy = {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": users}, {"level": "None"}],
    }
    (work / "audit-policy.yaml").write_text(yaml.safe_dump(policy))
    return [
        f"--audit-policy-file={work / 'audit-policy.yaml'}",
        f"--audit-log-path={work / 'audit.log'}",
        "--audit-log-format=json",
        "--audit-log-maxsize=0",
    ]


def audited(log: Path, marks: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Each component's requests per phase (``marks``: wall-clock phase starts, in order) and by verb."""
    starts = sorted(marks.items(), key=lambda kv: kv[1])
    out: dict[str, dict[str, Any]] = {
        c: {"by_verb": {p: {} for p, _ in starts}, **{p: 0 for p, _ in starts}} for c in COMPONENTS
    }
    seen: set[str] = set()
    for line in log.read_text().splitlines() if log.exists() else []:
        entry = json.loads(line)
        if entry["auditID"] in seen:
            continue  # a watch is logged when it starts and again when it ends
        seen.add(entry["auditID"])
        user = entry["user"]["username"].rsplit(":", 1)[-1].removeprefix("capstan-")
        if user not in out:
            continue
        at = _rfc3339(entry["requestReceivedTimestamp"])
        phase = next((p for p, t in reversed(starts) if at >= t), starts[0][0])
        out[user][phase] += 1
        ref = entry.get("objectRef") or {}
        what = "/".join(x for x in (ref.get("resource"), ref.get("subresource")) if x) or entry.get(
            "requestURI", ""
        )
        key = f"{entry['verb']} {what}"
        verbs = out[user]["by_verb"][phase]
        verbs[key] = verbs.get(key, 0) + 1
    return out


def _rfc3339(stamp: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def wait_leading(kube: KubeClient, prefix: str, identity: str, deadline_s: float) -> None:
    """Until the component's Lease in the release namespace is held by ``identity`` (a standby is ready too, so
    readiness alone does not say the component has started its work)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        leases, _ = await kube.list(resources.LEASES, namespace=NAMESPACE)
        if any(
            lease["metadata"]["name"].startswith(prefix)
            and (lease.get("spec") or {}).get("holderIdentity") == identity
            for lease in leases
        ):
            return
        await asyncio.sleep(0.1)
    raise SystemExit(f"cluster_scale: {identity} never took its Lease")


def start_component(
    component: str, args: list[str], config: Path, env: dict[str, str], probe: int, log: Path
) -> subprocess.Popen[bytes]:
    argv = [a for a in args if not a.startswith(("--config=", "--probe-port=", "--probe-address="))]
    argv += [f"--config={config}", f"--probe-port={probe}", "--probe-address=127.0.0.1"]
    full = {k: v for k, v in os.environ.items() if k not in {"KUBECONFIG"}} | env
    return subprocess.Popen(
        [sys.executable, "-m", "capstan.cli.main", *argv],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=full,
    )


async def wait_ready(port: int, proc: subprocess.Popen[bytes], deadline_s: float, what: str) -> float:
    """Seconds until ``/readyz`` answers 200."""
    import httpx

    start = time.monotonic()
    async with httpx.AsyncClient(timeout=5) as http:
        while time.monotonic() - start < deadline_s:
            if proc.poll() is not None:
                raise SystemExit(f"cluster_scale: {what} exited with {proc.returncode} before it was ready")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                    return time.monotonic() - start
            await asyncio.sleep(0.1)
    raise SystemExit(f"cluster_scale: {what} not ready within {deadline_s:.0f} s")


@contextlib.contextmanager
def stopping(procs: list[subprocess.Popen[bytes]]) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


# ---- the run ----------------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, work: Path, sandbox: Sandbox) -> dict[str, Any]:
    rng = random.Random(args.seed)
    figures: dict[str, Any] = {"nodes": args.nodes, "pods_asked": args.pods, "cores": os.cpu_count()}
    t0 = time.monotonic()
    spec = cluster_spec(args.nodes, args.pods, args.node_lease_s)
    figures["node_lease_s"] = spec.node_lease_duration_s
    state = sandbox.up(
        spec, timeout=args.deadline, on_step=console.log, extra_apiserver_args=audit_policy(work)
    )
    figures["cluster_up_s"] = time.monotonic() - t0
    kubeconfig = Path(state.kubeconfig)
    pids = {p.name: p.pid for p in state.processes}
    async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
        t0 = time.monotonic()
        deployments = await populate(kube, args.pods, args.replicas, args.namespaces, args.deadline)
        figures["pods_ready_s"] = time.monotonic() - t0
        figures["pods"] = len(deployments) * args.replicas
        nodes, _ = await kube.list(resources.NODES)
        node_names = sorted(n["metadata"]["name"] for n in nodes)
        figures["nodes_listed"] = len(node_names)
        pg = PostgresServer().start()
        try:
            with serve_in_thread(SlackReceiver().app) as slack:
                return await measure(args, work, sandbox, kube, kubeconfig, pg.url, slack.url, deployments,
                                     node_names, pids, rng, figures)  # fmt: skip
        finally:
            pg.stop()


async def measure(
    args: argparse.Namespace,
    work: Path,
    sandbox: Sandbox,
    kube: KubeClient,
    kubeconfig: Path,
    store_url: str,
    slack_url: str,
    deployments: list[tuple[str, str]],
    nodes: list[str],
    pids: dict[str, int],
    rng: random.Random,
    figures: dict[str, Any],
) -> dict[str, Any]:
    await ensure_namespace(kube, NAMESPACE)
    envs, procs, ports = {}, {}, {}
    for component in COMPONENTS:
        envs[component] = await apply_identity(sandbox, kube, kubeconfig, component, work)
    record_args, record_config = chart_args("record")
    restarts_args, _ = chart_args("restarts")
    assert record_config is not None
    (work / "record.yaml").write_text(record_config)
    (work / "restarts.yaml").write_text(yaml.safe_dump({
        "cluster_name": "scale",
        "sinks": [{"name": "slack", "type": "slack_bot", "token": DEV_TOKEN, "channel": "C0ALERTS",
                   "base_url": f"{slack_url}/api/"}],
    }))  # fmt: skip
    reference_ready = work / "reference.ready"
    reference = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--reference-watch",
            str(kubeconfig),
            str(work / "reference.log"),
            str(reference_ready),
        ]
    )
    for _ in range(int(args.deadline * 10)):  # bounded
        if reference_ready.exists() or reference.poll() is not None:
            break
        await asyncio.sleep(0.1)
    if not reference_ready.exists():
        raise SystemExit("cluster_scale: the reference watch never listed")
    poller = StorePoller(store_url)
    poller.start()
    for component, cargs in (("record", record_args), ("restarts", restarts_args)):
        ports[component] = free_port()
        env = envs[component] | {"CAPSTAN_HISTORY_STORE": store_url, "POD_NAME": f"capstan-{component}-0"}
        procs[component] = start_component(component, cargs, work / f"{component}.yaml", env, ports[component],
                                           work / f"{component}.log")  # fmt: skip
        pids[component] = procs[component].pid
    usage = Usage(pids)
    usage.mark("start")
    wall = {"start": time.time()}
    with stopping([*procs.values(), reference]):

        async def first_sync(component: str) -> float:
            started = time.monotonic()
            await wait_leading(kube, f"capstan-{component}", f"capstan-{component}-0", args.deadline)
            await wait_ready(ports[component], procs[component], args.deadline, component)
            return time.monotonic() - started

        ready = await asyncio.gather(*(first_sync(c) for c in COMPONENTS))
        figures["first_sync_s"] = dict(zip(COMPONENTS, ready, strict=True))
        usage.mark("synced")
        wall["sync_end"] = time.time()
        kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
        t0 = time.monotonic()
        done = await churn(kube, kubelet, deployments, nodes, args.churn_seconds, args.rollout_every,
                           args.restart_every, args.condition_every, rng)  # fmt: skip
        churn_s = time.monotonic() - t0
        usage.mark("churned")
        wall["churn_end"] = time.time()
        # quiescence: the store has taken no row for a while and every restart is detected (bounded)
        for _ in range(int(args.deadline)):
            detected = all((uid, n) in poller.restarts for uid, n, _ in done.restarts)
            if detected and time.time() - poller.last_row_at > args.quiet_s:
                break
            await asyncio.sleep(1)
        usage.mark("quiet")
        reference.send_signal(signal.SIGTERM)
        reference.wait(timeout=60)
        final = await final_mismatches(kube, store_url)
        peaks = usage.peaks()
    poller.stop()
    figures.update(lag_and_losses(work / "reference.log", poller, after=wall["sync_end"]))
    figures["final_state_mismatches"] = final
    detect = [poller.restarts[(u, n)] - w for u, n, w in done.restarts if (u, n) in poller.restarts]
    figures["restarts_injected"] = len(done.restarts)
    figures["restarts_detected"] = len(detect)
    figures["restart_detect_p50_s"] = percentile(detect, 50)
    figures["restart_detect_p99_s"] = percentile(detect, 99)
    figures["restart_detect_s"] = detect
    figures["rollouts"], figures["conditions"] = done.rollouts, done.conditions
    figures["churn_errors"] = done.errors[:20]
    figures["churn_s"] = churn_s
    figures["peak_rss_mb"] = peaks
    figures["peak_rss_mb_at"] = usage.peak_at_mark  # which phase reached the peak
    figures["cores_sync"] = usage.phase("start", "synced")
    figures["cores_churn"] = usage.phase("synced", "churned")
    requests = audited(
        work / "audit.log", {"sync": wall["start"], "churn": wall["sync_end"], "after": wall["churn_end"]}
    )
    for counts in requests.values():
        counts["churn_per_s"] = counts["churn"] / churn_s
    figures["api_requests"] = requests
    return figures


async def final_mismatches(kube: KubeClient, url: str) -> dict[str, int]:
    """Objects the API server lists now whose stored state differs from their normalized form (or is missing)."""
    policy = DiffPolicy()
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    out: dict[str, int] = {}
    try:
        with engine.connect() as conn:
            stored = {
                uid: obj
                for uid, obj in conn.execute(
                    text("SELECT uid, object FROM object_state WHERE source = 'default'")
                )
            }
        for res in REFERENCE_KINDS:
            items, _ = await kube.list(res)
            bad = 0
            for item in items:
                kept = stored.get(item["metadata"]["uid"])
                if isinstance(kept, str):
                    kept = json.loads(kept)
                if kept != normalize(item, policy):
                    bad += 1
            out[res.kind] = bad
    finally:
        engine.dispose()
    return out


def lag_and_losses(log: Path, poller: StorePoller, after: float) -> dict[str, Any]:
    """Lag and losses of the changes the reference watch saw once both components had synced (``after``): before
    that, the recorder's first list stores each object as it is then, and earlier versions are not its to keep."""
    lags: list[float] = []
    series: list[tuple[float, float]] = []
    lost: list[str] = []
    events = changes = noise = relists = 0
    for line in log.read_text().splitlines():
        arrival_s, kind, uid, rv, etype, changed = line.split()
        if float(arrival_s) < after:
            continue
        if etype == "RELIST":
            relists += 1
            continue
        events += 1
        if changed == "0":
            noise += 1
            continue
        changes += 1
        seen = poller.rows.get((uid, rv))
        if seen is None:
            lost.append(f"{kind} {uid} rv={rv} {etype}")
            continue
        # a row the poller saw before the reference watch's event arrived counts as no lag, in both
        arrival, lag = float(arrival_s), max(0.0, seen[0] - float(arrival_s))
        lags.append(lag)
        series.append((arrival, lag))
    via = [v for _, _, v in poller.rows.values()]
    return {
        "reference_events": events,
        "reference_changes": changes,
        "reference_noise_only": noise,
        "reference_relists": relists,
        "lost_changes": len(lost),
        "lost_examples": lost[:10],
        "recorder_relist_rows": via.count("relist"),
        "stored_rows": len(poller.rows),
        "lag_p50_s": percentile(lags, 50),
        "lag_p99_s": percentile(lags, 99),
        "lag_max_s": max(lags, default=float("nan")),
        "lag_series": series,
    }


# ---- report -------------------------------------------------------------------------------------------------


def report(fig: dict[str, Any], out: Path, command: str) -> None:
    def ok(good: bool) -> str:
        return "[green]met[/]" if good else "[red]missed[/]"

    t = Table(title=f"Capstan at scale: {fig['nodes_listed']:,} kwok nodes, {fig['pods']:,} pods, churn "
                    f"{fig['churn_s']:.0f} s ({fig['cores']} cores)")  # fmt: skip
    t.add_column("figure")
    t.add_column("recorder", justify="right")
    t.add_column("notifier", justify="right")
    t.add_column("goal")
    rss_goal, lag_goal, detect_goal = (
        limit("deploy.scale_rss"),
        limit("deploy.scale_lag"),
        limit("deploy.scale_detect"),
    )
    sync = fig["first_sync_s"]
    t.add_row("first full sync (start → ready)", f"{sync['record']:.1f} s", f"{sync['restarts']:.1f} s", "")
    t.add_row("lag p50 / p99 (event → stored)", f"{fig['lag_p50_s']:.2f} / {fig['lag_p99_s']:.2f} s", "",
              f"p99 ≤ {lag_goal} s: {ok(fig['lag_p99_s'] <= lag_goal)}")  # fmt: skip
    t.add_row("restart detection p50 / p99", "",
              f"{fig['restart_detect_p50_s']:.2f} / {fig['restart_detect_p99_s']:.2f} s",
              f"p99 ≤ {detect_goal} s: {ok(fig['restart_detect_p99_s'] <= detect_goal)}")  # fmt: skip
    t.add_row("restarts detected", "", f"{fig['restarts_detected']} of {fig['restarts_injected']}", "")
    lost = fig["lost_changes"] + sum(fig["final_state_mismatches"].values())
    t.add_row("lost changes / final-state mismatches",
              f"{fig['lost_changes']} of {fig['reference_changes']:,} / {sum(fig['final_state_mismatches'].values())}",
              "", f"0: {ok(lost == 0)}")  # fmt: skip
    peaks = fig["peak_rss_mb"]
    t.add_row("peak RSS", f"{peaks.get('record', 0):.0f} MB", f"{peaks.get('restarts', 0):.0f} MB",
              f"recorder ≤ {rss_goal} MB: {ok(peaks.get('record', 1e9) <= rss_goal)}")  # fmt: skip
    for phase in ("sync", "churn"):
        cores = fig[f"cores_{phase}"]
        t.add_row(
            f"CPU, {phase} (cores)", f"{cores.get('record', 0):.2f}", f"{cores.get('restarts', 0):.2f}", ""
        )
    api = fig["api_requests"]
    t.add_row("API requests, sync", f"{api['record']['sync']:.0f}", f"{api['restarts']['sync']:.0f}", "")
    t.add_row("API requests/s, churn", f"{api['record']['churn_per_s']:.2f}", f"{api['restarts']['churn_per_s']:.2f}",
              "watch-based: no polling lists")  # fmt: skip
    console.print(t)
    others = " · ".join(f"{k} {fig['cores_churn'].get(k, 0):.2f}" for k in ("kube-apiserver", "etcd", "kwok"))
    console.print(
        f"cluster up {fig['cluster_up_s']:.0f} s, pods ready {fig['pods_ready_s']:.0f} s; churn: {fig['rollouts']} "
        f"rollouts, {fig['restarts_injected']} restarts, {fig['conditions']} node conditions; the reference watch saw "
        f"{fig['reference_events']:,} events ({fig['reference_noise_only']:,} noise only, {fig['reference_relists']} "
        f"relists); recorder relist rows {fig['recorder_relist_rows']}; cores in churn: {others}"
    )
    for component in COMPONENTS:
        verbs = sorted(api[component]["by_verb"]["churn"].items(), key=lambda kv: -kv[1])
        console.print(f"{component} requests in churn: " + ", ".join(f"{k} {v}" for k, v in verbs[:12]))
    if fig["churn_errors"]:
        console.print(f"[yellow]churn errors: {fig['churn_errors'][:3]}[/]")
    out.mkdir(parents=True, exist_ok=True)
    data = {k: v for k, v in fig.items() if k not in {"lag_series", "restart_detect_s"}}
    data["command"] = command
    data["date"] = time.strftime("%Y-%m-%d")
    (out / "cluster_scale.json").write_text(json.dumps(data, indent=2))
    f, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    series = sorted(fig["lag_series"])
    if series:
        start = series[0][0]
        a.scatter([s - start for s, _ in series], [lag for _, lag in series], s=2)
    a.axhline(lag_goal, color="red", linestyle="--", label=f"goal p99 ≤ {lag_goal} s")
    a.set_xlabel("event arrival (s since the recorder started)")
    a.set_ylabel("lag to stored row (s)")
    a.set_title("recorder lag")
    a.legend()
    detect = sorted(fig["restart_detect_s"])
    b.plot(detect, [i / max(len(detect), 1) for i in range(1, len(detect) + 1)])
    b.axvline(detect_goal, color="red", linestyle="--", label=f"goal p99 ≤ {detect_goal} s")
    b.set_xlabel("restart detection latency (s)")
    b.set_ylabel("fraction of restarts")
    b.set_title("restart detection (CDF)")
    b.legend()
    f.suptitle(f"{fig['nodes_listed']:,} nodes, {fig['pods']:,} pods")
    f.tight_layout()
    f.savefig(out / "cluster_scale.png", dpi=110)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--reference-watch":
        asyncio.run(_reference_watch(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="a tiny cluster, about a minute")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--replicas", type=int, default=100, help="pods per Deployment")
    parser.add_argument("--namespaces", type=int, default=10)
    parser.add_argument("--churn-seconds", type=float, default=180)
    parser.add_argument("--rollout-every", type=float, default=10)
    parser.add_argument("--restart-every", type=float, default=1)
    parser.add_argument("--condition-every", type=float, default=5)
    parser.add_argument(
        "--quiet-s", type=float, default=10, help="no new row for this long: the store caught up"
    )
    parser.add_argument("--deadline", type=float, default=3600, help="bound of each wait")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--node-lease-s",
        type=int,
        default=240,
        help="kwok's node Lease duration (the kubelet's: 40 s); renewals of thousands of Leases would otherwise be "
        "most of what a 2-core control plane does",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.pods, args.replicas, args.namespaces = 20, 200, 20, 2
        args.churn_seconds, args.rollout_every, args.condition_every, args.quiet_s = 15, 5, 4, 3
        args.deadline = 300
    command = "python bench/cluster_scale.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="capstan-scale-") as tmp:
        sandbox = Sandbox(Path(tmp) / "sandbox", require_toolchain())
        try:
            figures = asyncio.run(run(args, Path(tmp), sandbox))
        finally:  # Ctrl-C included
            sandbox.down()
    report(figures, args.out, command)


if __name__ == "__main__":
    main()
