"""How long one planner decision takes: 1,000 pending pods × 20 node types (goal ≤ 100 ms), and at 10×.

    .venv/bin/python bench/capacity_planner_speed.py           # 1,000 and 10,000 pending pods, 20 node types
    .venv/bin/python bench/capacity_planner_speed.py --smoke   # 100 pods: seconds

Pods are openb tasks (shares, whole GPUs, GPU-model constraints from the gpuspec20 variant); node types are the
openb shapes plus cloud-like GPU types to make 20. That snapshot has no nodes, so it never has a repack to search
for. A second table times full decisions on a busy cluster: openb default replayed by Capstan up to the arrival of
its 5,000th task (``--snapshot-task``), with the next 1,000 tasks pending at once and with none added, planned
with repacks in both orders (the default) and in one, and says whether the second order was planned. A third
times decisions and replays against the cluster's size (issue 27 §5): clusters of 100, 1,000 and 5,000 ready
openb nodes, each running a long task that is not safe to evict (every fifth node keeps one GPU free), with
1,000 openb tasks pending at once (a placement decision, median), and the same 1,000 tasks replayed by Capstan
at their trace times (seconds per pod). Live decisions (Node and Pod objects to recorded actions) are timed on
the busy cluster, and on the sized clusters as Node objects with the 1,000 tasks gated: warm, as a running
controller makes them, and cold, a restarted controller's first. Prints Rich tables, writes
bench/out/capacity_planner_speed.json and a PNG.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from capstan.capacity import (
    Controller,
    Delay,
    NodeState,
    NodeType,
    NodeView,
    PlanCache,
    PlannerConfig,
    Pod,
    Sim,
    SimResult,
    Snapshot,
    Workload,
    inference_node_types,
    node_labels,
    plan,
    read_openb_nodes,
    read_openb_pods,
)
from capstan.capacity.live import (
    BEST_EFFORT_ATOMIC,
    BOOTING_TAINT,
    GATE,
    PURPOSE_LABEL,
    LiveCluster,
    ProvisioningRequests,
    live_config,
)
from goals import limit

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT / ".." / "shared" / "data" / "traces" / "alibaba-openb-2023"
OUT = ROOT / "bench" / "out"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument(
        "--snapshot-task",
        type=int,
        default=5000,
        help="busy-cluster case: replay openb default up to this task",
    )
    ap.add_argument("--out", type=Path, default=OUT, help="where JSON and plots go")
    args = ap.parse_args()
    boot, ready = Delay("fixed", 300), Delay("fixed", 90)
    types = read_openb_nodes(OPENB / "openb_node_list_gpu_node.csv", boot, ready)
    extra = [t for t in inference_node_types(boot, ready) if t.gpu]
    types = tuple([replace(t, max_count=None) for t in types] + extra)[:20]
    pods = read_openb_pods(OPENB / "openb_pod_list_gpuspec20.csv").pods
    sizes = [100] if args.smoke else [1000, 10000]
    repeat = 2 if args.smoke else args.repeat
    console = Console(width=160)
    table = Table(title=f"One planner decision, {len(types)} node types, no nodes yet (median of {repeat})")
    for col in ("pending pods", "median ms", "min ms", "nodes launched", "ms per pod"):
        table.add_column(col, justify="right")
    rows = []
    for n in sizes:
        pending = tuple(replace(p, arrival=0.0) for p in (pods * (n // len(pods) + 1))[:n])
        pending = tuple(replace(p, name=f"{p.name}-{i}") for i, p in enumerate(pending))
        snap = Snapshot(now=0.0, node_types=types, nodes=(), pending=pending)
        times = []
        result = None
        for _ in range(repeat):
            t0 = time.perf_counter()
            result = plan(snap, PlannerConfig())
            times.append((time.perf_counter() - t0) * 1000)
        assert result is not None
        med = statistics.median(times)
        rows.append(
            {
                "pods": n,
                "types": len(types),
                "median_ms": med,
                "min_ms": min(times),
                "launches": len(result.launches),
            }
        )
        table.add_row(str(n), f"{med:.1f}", f"{min(times):.1f}", str(len(result.launches)), f"{med / n:.3f}")
    console.print(table)
    busy = busy_cluster(
        args.snapshot_task // 20 if args.smoke else args.snapshot_task, 100 if args.smoke else 1000, repeat
    )
    console.print(busy_table(busy))
    live = live_decisions(
        args.snapshot_task // 20 if args.smoke else args.snapshot_task, 100 if args.smoke else 1000, repeat
    )
    console.print(live_table(live))
    sized = cluster_sizes((20, 100) if args.smoke else (100, 1000, 5000), 100 if args.smoke else 1000, repeat)
    console.print(sizes_table(sized))
    live_sized = live_cluster_sizes(
        (20, 100) if args.smoke else (100, 1000, 5000), 100 if args.smoke else 1000, repeat
    )
    console.print(live_sizes_table(live_sized))
    busy += live + sized + live_sized
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "capacity_planner_speed.json").write_text(json.dumps(rows + busy, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([r["pods"] for r in rows], [r["median_ms"] for r in rows], marker="o")
    ax.axhline(limit("capacity.decision_ms"), color="red", linestyle="--", label="goal at 1,000 pods")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("pending pods")
    ax.set_ylabel("ms per decision")
    ax.legend()
    fig.tight_layout()
    (args.out / "capacity").mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "capacity" / "planner_speed.png", dpi=110)
    console.print(f"wrote {args.out / 'capacity_planner_speed.json'}")


def busy_cluster(task: int, pending: int, repeat: int) -> list[dict[str, object]]:
    """Full decisions on openb default as Capstan's replay left it at the arrival of task ``task`` (nodes,
    running pods, the forecast's recent arrivals): with the next ``pending`` tasks pending at once, and with
    only what the replay left pending; each timed with repacks in both orders and in one, and whether the
    second order was planned at all (it is only when headroom holds room on a repack candidate)."""
    boot, ready = Delay("fixed", 300), Delay("fixed", 90)
    types = read_openb_nodes(OPENB / "openb_node_list_all_node.csv", boot, ready)
    pods = read_openb_pods(OPENB / "openb_pod_list_default.csv").pods
    task = min(max(task, 1), len(pods) - 1)
    sim = Sim(Workload("openb default", pods), types, Controller(), seed=0)
    sim.run(until=pods[task].arrival)
    left = sim.snapshot()
    later = tuple(replace(p, arrival=left.now) for p in pods[task + 1 : task + 1 + pending])
    out: list[dict[str, object]] = []
    for snap in (replace(left, pending=left.pending + later), left):
        for label, cfg in (
            ("both orders", PlannerConfig()),
            ("one order", PlannerConfig(repack_both_orders=False)),
        ):
            times = []
            result = None
            for _ in range(repeat):
                t0 = time.perf_counter()
                result = plan(snap, cfg)  # a fresh cache each time: the decision's whole cost
                times.append((time.perf_counter() - t0) * 1000)
            assert result is not None
            # a second plan is made only if the first one's repack search passed over a candidate (and only
            # with repack_both_orders): the cache counts it
            counted = PlanCache(snap.node_types)
            plan(snap, cfg, counted)
            out.append(
                {
                    "case": f"busy cluster, {label}",
                    "pods": len(snap.pending),
                    "types": len(types),
                    "nodes": len(snap.nodes),
                    "running": sum(n.pods for n in snap.nodes),
                    "second_plan": counted.replans > 0,
                    "median_ms": statistics.median(times),
                    "min_ms": min(times),
                    "launches": len(result.launches),
                    "drains": len(result.drains),
                }
            )
    return out


T0 = 1_796_256_000.0
"""2026-12-03T00:00:00Z: the live bench's objects were created this long after the epoch plus their trace time."""


def _rfc3339(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def _k8s_pod(pod: Pod, node: str = "", gated: bool = False) -> dict[str, object]:
    """``pod`` as the API server would show it (a GPU share asks for one whole device: Kubernetes has no shares)."""
    ns, _, name = pod.name.rpartition("/")
    requests = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
    if pod.wants_gpu:
        requests["nvidia.com/gpu"] = str(max(1, pod.num_gpu))
    spec: dict[str, object] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": GATE}]
    if pod.node_selector:
        spec["nodeSelector"] = dict(pod.node_selector)
    return {
        "metadata": {
            "name": name or pod.name,
            "namespace": ns or "bench",
            "creationTimestamp": _rfc3339(T0 + pod.arrival),
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def _k8s_node(view: NodeView, nt: NodeType) -> dict[str, object]:
    capacity = {"cpu": f"{nt.cpu_milli}m", "memory": f"{nt.memory_mib}Mi", "nvidia.com/gpu": str(nt.gpu)}
    ready = view.state is NodeState.GPU_ALLOCATABLE
    return {
        "metadata": {
            "name": view.id,
            "labels": {**node_labels(nt), PURPOSE_LABEL: view.purpose},
            "creationTimestamp": "2026-12-03T00:00:00Z",
        },
        "spec": {"taints": [] if ready else [{"key": BOOTING_TAINT, "effect": "NoSchedule"}]},
        "status": {
            "capacity": capacity,
            "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def live_decisions(task: int, pending: int, repeat: int) -> list[dict[str, object]]:
    """A live decision, informer state to recorded actions: the busy cluster of :func:`busy_cluster` as Node and
    Pod objects (its running pods bound, the next ``pending`` tasks gated for Capstan), read by
    :class:`capstan.capacity.live.LiveCluster` and planned by the controller with the live settings: the snapshot
    built from the objects, the placement plan and its actions, each decision on a fresh cluster view."""
    boot, ready = Delay("fixed", 300), Delay("fixed", 90)
    types = read_openb_nodes(OPENB / "openb_node_list_all_node.csv", boot, ready)
    by_name = {t.name: t for t in types}
    pods = read_openb_pods(OPENB / "openb_pod_list_default.csv").pods
    task = min(max(task, 1), len(pods) - 1)
    sim = Sim(Workload("openb default", pods), types, Controller(), seed=0)
    sim.run(until=pods[task].arrival)
    left = sim.snapshot()
    nodes = {v.id: _k8s_node(v, by_name[v.type]) for v in left.nodes}
    objects: dict[str, dict[str, object]] = {}
    for v in left.nodes:
        for p in v.bound:
            objects[f"bench/{p.name}"] = _k8s_pod(replace(p, name=f"bench/{p.name}"), node=v.id)
    for p in pods[task + 1 : task + 1 + pending]:
        objects[f"bench/{p.name}"] = _k8s_pod(
            replace(p, name=f"bench/{p.name}", arrival=left.now), gated=True
        )
    running = sum(len(v.bound) for v in left.nodes)
    out: list[dict[str, object]] = []
    for scope in ("place", "review"):
        times = []
        launches = 0
        for _ in range(repeat):
            cluster = LiveCluster(types, nodes, objects, clock=lambda: T0 + left.now)
            controller = Controller(live_config())
            controller.start(cluster)
            cluster.observe()
            t0 = time.perf_counter()
            controller.on_wake(cluster, T0 + left.now, scope)
            times.append((time.perf_counter() - t0) * 1000)
            launches = len(cluster.log.launches)
        out.append(
            {
                "case": f"live {scope} decision",
                "pods": pending,
                "types": len(types),
                "nodes": len(nodes),
                "running": running,
                "second_plan": False,
                "median_ms": statistics.median(times),
                "min_ms": min(times),
                "launches": launches,
                "drains": 0,
            }
        )
    return out


FILL_AT = -30 * 86400.0
"""When the sized clusters' long tasks arrived: long before the forecast looks back (they are not arrivals it
counts)."""


class _Sized:
    """Capstan's controller over a cluster that starts with ``layout``: a ready node of each type, each with its
    task promised to it when the task arrives (before the controller sees it pending)."""

    steers_placement = True

    def __init__(self, layout: list[tuple[NodeType, Pod]], controller: Controller) -> None:
        self.layout = layout
        self.controller = controller
        self.name = controller.name
        self._fill: dict[str, str] = {}

    def start(self, sim: Sim) -> None:
        for i, (nt, task) in enumerate(self.layout):
            sim.launch(nt.name, purpose="static", node_id=f"b{i}")
            self._fill[task.name] = f"b{i}"
        self.controller.start(sim)

    def on_change(self, sim: Sim, now: float) -> None:
        if self._fill:
            for name in [n for n in sim.pending if n in self._fill]:
                sim.promise(name, self._fill.pop(name))
        self.controller.on_change(sim, now)

    def on_wake(self, sim: Sim, now: float, tag: str) -> None:
        self.controller.on_wake(sim, now, tag)


def sized_layout(types: tuple[NodeType, ...], n: int) -> list[tuple[NodeType, Pod]]:
    """``n`` nodes of openb's types in the proportions of its node list (spread evenly, deterministic), each with
    a task that runs for the whole replay and is not safe to evict: half the node's CPU and memory and all its
    GPUs, but one GPU on every fifth node (on a 1-GPU node that task asks for none)."""
    slots = sorted(
        ((k + 0.5) / (t.max_count or 1), i, t) for i, t in enumerate(types) for k in range(t.max_count or 1)
    )
    pattern = [t for _, _, t in slots]
    out = []
    for i in range(n):
        nt = pattern[i % len(pattern)]
        gpus = nt.gpu - (1 if i % 5 == 0 and nt.gpu else 0)
        task = Pod(
            f"filler-{i}",
            FILL_AT,
            nt.cpu_milli // 2,
            nt.memory_mib // 2,
            gpus,
            1000 if gpus else 0,
            duration=1e9,
            safe_to_evict=False,
        )
        out.append((replace(nt, max_count=None), task))
    return out


def sized_sim(n: int, tasks: tuple[Pod, ...]) -> Sim:
    boot, ready = Delay("fixed", 300), Delay("fixed", 90)
    types = read_openb_nodes(OPENB / "openb_node_list_all_node.csv", boot, ready)
    layout = sized_layout(types, n)
    types = tuple(replace(t, max_count=None) for t in types)
    workload = Workload(f"{n} nodes", tuple(task for _, task in layout) + tasks)
    return Sim(workload, types, _Sized(layout, Controller()), seed=0, record=False)


def cluster_sizes(sizes: tuple[int, ...], pending: int, repeat: int) -> list[dict[str, object]]:
    """Per cluster size: the median placement decision (snapshot, plan, actions) with openb default's first
    ``pending`` tasks pending at once, each on a copy of the cluster as the controller left it (its cache warm),
    and a replay of the same tasks at their trace times, timed from the first one's arrival to the end."""
    tasks = read_openb_pods(OPENB / "openb_pod_list_default.csv").pods[:pending]
    out: list[dict[str, object]] = []
    for n in sizes:
        sim = sized_sim(n, tuple(replace(p, arrival=0.0) for p in tasks))
        sim.run(until=0.0)  # the nodes up and running their tasks, the pods pending
        times = []
        launches = 0
        for _ in range(repeat):
            trial = copy.deepcopy(sim)
            before = trial.launches
            t0 = time.perf_counter()
            trial.policy.on_wake(trial, trial.now, "place")
            times.append((time.perf_counter() - t0) * 1000)
            launches = trial.launches - before
        replay = sized_sim(n, tasks)
        result, seconds = _replay_from_first_task(replay)
        policy = replay.policy
        assert isinstance(policy, _Sized)
        out.append(
            {
                "case": f"cluster of {n} nodes",
                "nodes": n,
                "pods": pending,
                "median_ms": statistics.median(times),
                "min_ms": min(times),
                "launches": launches,
                "replay_s": seconds,
                "replay_ms_per_pod": seconds / len(tasks) * 1000,
                "replay_plans": sum(v for k, v in policy.controller.plans.items() if k != "skipped"),
                "replay_launches": result.launches - n,
            }
        )
    return out


class _Clock:
    """A clock the bench sets."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def live_cluster_sizes(sizes: tuple[int, ...], pending: int, repeat: int) -> list[dict[str, object]]:
    """Per cluster size: one live placement decision (Node and Pod objects to recorded actions) with openb
    default's first ``pending`` tasks gated at once, on the clusters of :func:`sized_layout` as Node objects
    with their long tasks bound. Warm: the controller and its cluster view as a running controller has them (a
    review decision made before the pods arrived), each trial on a copy; cold: a new controller's first
    decision (a restart). The heap is collected before each trial, and the collector runs during it. Also what
    serving ProvisioningRequests adds to a pass (:func:`provreq_pass_ms`), with the gated pods still pending."""
    boot, ready = Delay("fixed", 300), Delay("fixed", 90)
    types = read_openb_nodes(OPENB / "openb_node_list_all_node.csv", boot, ready)
    tasks = read_openb_pods(OPENB / "openb_pod_list_default.csv").pods[:pending]
    out: list[dict[str, object]] = []
    for n in sizes:
        layout = sized_layout(types, n)
        live_types = tuple(replace(t, max_count=None) for t in types)
        nodes: dict[str, dict[str, object]] = {}
        pods: dict[str, dict[str, object]] = {}
        for i, (nt, task) in enumerate(layout):
            view = NodeView(f"b{i}", nt.name, NodeState.GPU_ALLOCATABLE, 0, 0, (), 0, 0.0, None, (), "static")
            nodes[view.id] = _k8s_node(view, nt)
            filler = replace(task, name=f"bench/{task.name}", arrival=0.0)
            pods[filler.name] = _k8s_pod(filler, node=view.id)
        clock = _Clock(T0 + 100.0)
        cluster = LiveCluster(live_types, nodes, pods, clock=clock)
        controller = Controller(live_config())
        controller.start(cluster)
        cluster.observe()
        controller.on_wake(cluster, clock.at, "review")  # the running controller has seen the nodes
        for p in tasks:
            gated = replace(p, name=f"bench/{p.name}", arrival=101.0)
            pods[gated.name] = _k8s_pod(gated, gated=True)
        clock.at += 1.0
        cluster.observe()
        warm: list[float] = []
        served: list[float] = []
        launches = 0
        for _ in range(repeat):
            trial_cluster, trial = copy.deepcopy((cluster, controller))
            gc.collect()
            served.append(provreq_pass_ms(trial_cluster, pods, clock.at))
            gc.collect()
            t0 = time.perf_counter()
            trial.on_wake(trial_cluster, clock.at, "place")
            warm.append((time.perf_counter() - t0) * 1000)
            launches = len(trial_cluster.log.launches) - len(cluster.log.launches)
        cold: list[float] = []
        for _ in range(repeat):
            fresh = LiveCluster(live_types, nodes, pods, clock=clock)
            restarted = Controller(live_config())
            restarted.start(fresh)
            fresh.observe()
            gc.collect()
            t0 = time.perf_counter()
            restarted.on_wake(fresh, clock.at, "place")
            cold.append((time.perf_counter() - t0) * 1000)
        out.append(
            {
                "case": f"live, cluster of {n} nodes",
                "nodes": n,
                "pods": pending,
                "running": n,
                "median_ms": statistics.median(warm),
                "min_ms": min(warm),
                "cold_median_ms": statistics.median(cold),
                "provreq_ms": statistics.median(served),
                "launches": launches,
            }
        )
    return out


PROVREQ_PODS = 64


def provreq_pass_ms(cluster: LiveCluster, pods: dict[str, dict[str, object]], now: float) -> float:
    """Milliseconds that serving one open best-effort-atomic ProvisioningRequest (:data:`PROVREQ_PODS` one-GPU
    pods) adds to a loop pass on ``cluster``: its pods announced, a look at the cluster, the review and the
    conditions to write (what the loop does after a pass's decisions)."""
    template = _k8s_pod(Pod("bench/worker", 0.0, 4000, 16384, 1, 1000))
    request = {
        "metadata": {
            "name": "gang",
            "namespace": "bench",
            "creationTimestamp": _rfc3339(now),
            "resourceVersion": "1",
        },
        "spec": {
            "provisioningClassName": BEST_EFFORT_ATOMIC,
            "podSets": [{"podTemplateRef": {"name": "worker"}, "count": PROVREQ_PODS}],
        },
    }
    served = ProvisioningRequests()
    served.follow({"bench/gang": request}, {"bench/worker": {"template": template}}, pods)
    t0 = time.perf_counter()
    announced, _ = served.announced(now)
    updates = served.updates(cluster.snapshot(peek=True))
    took = (time.perf_counter() - t0) * 1000
    if len(announced) != PROVREQ_PODS or len(updates) != 1:
        raise SystemExit(f"capacity_planner_speed: the ProvisioningRequest read as {len(announced)} pods")
    return took


def _replay_from_first_task(sim: Sim) -> tuple[SimResult, float]:
    """Run ``sim`` to its end: its result and the seconds from its first event at or after time 0 (the first
    task's arrival; the long tasks arrived before) to the end."""
    started: list[float] = []

    def progress(f: float) -> None:
        if f >= 0 and not started:
            started.append(time.perf_counter())

    sim.progress = progress
    result = sim.run()
    return result, time.perf_counter() - started[0]


Column = tuple[str, str, str]
"""A table column: its header, the row's key, and how its value prints (a format spec; "yes/no" for a flag)."""


def rows_table(title: str, columns: tuple[Column, ...], rows: list[dict[str, object]]) -> Table:
    """``rows`` as a Rich table, one column per ``columns`` entry, right-aligned."""
    table = Table(title=title)
    for header, _, _ in columns:
        table.add_column(header, justify="right")
    for r in rows:
        table.add_row(*(_cell(r[key], spec) for _, key, spec in columns))
    return table


def _cell(value: object, spec: str) -> str:
    if spec == "yes/no":
        return "yes" if value else "no"
    if spec.endswith("f"):
        return format(float(str(value)), spec)
    return format(value, spec)


MS = (("median ms", "median_ms", ".1f"), ("min ms", "min_ms", ".1f"))


def sizes_table(rows: list[dict[str, object]]) -> Table:
    return rows_table(
        "Decision and replay time against cluster size (openb nodes, each running a long task)",
        (
            ("nodes", "nodes", ","),
            ("pending pods", "pods", ""),
            ("decision median ms", "median_ms", ".1f"),
            ("min ms", "min_ms", ".1f"),
            ("launches", "launches", ""),
            ("replay s", "replay_s", ".2f"),
            ("replay ms per pod", "replay_ms_per_pod", ".2f"),
            ("plans", "replay_plans", ""),
            ("replay launches", "replay_launches", ""),
        ),
        rows,
    )


def live_table(rows: list[dict[str, object]]) -> Table:
    return rows_table(
        "One live decision: Node and Pod objects → snapshot → plan → recorded actions (median)",
        (
            ("case", "case", ""),
            ("pending pods", "pods", ""),
            ("nodes", "nodes", ""),
            ("running pods", "running", ""),
            *MS,
            ("launches", "launches", ""),
        ),
        rows,
    )


def live_sizes_table(rows: list[dict[str, object]]) -> Table:
    return rows_table(
        "One live placement decision against cluster size (Node and Pod objects → recorded actions)",
        (
            ("nodes", "nodes", ","),
            ("pending pods", "pods", ""),
            ("warm median ms", "median_ms", ".1f"),
            ("warm min ms", "min_ms", ".1f"),
            ("cold median ms", "cold_median_ms", ".1f"),
            ("ProvisioningRequest ms", "provreq_ms", ".1f"),
            ("launches", "launches", ""),
        ),
        rows,
    )


def busy_table(rows: list[dict[str, object]]) -> Table:
    return rows_table(
        "One full decision on a busy cluster (openb default mid-replay, median)",
        (
            ("case", "case", ""),
            ("pending pods", "pods", ""),
            ("nodes", "nodes", ""),
            ("running pods", "running", ""),
            ("second plan", "second_plan", "yes/no"),
            *MS,
            ("launches", "launches", ""),
            ("drains", "drains", ""),
        ),
        rows,
    )


if __name__ == "__main__":
    main()
