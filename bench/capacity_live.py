"""Capstan's capacity controller live on a real control plane, on a time-compressed slice of a trace, beside the
same slice replayed in the simulator (Capstan, the cluster-autoscaler and Karpenter emulations, the oracle).

    .venv/bin/python bench/capacity_live.py                        # openb's busiest 3 h, 50x faster
    .venv/bin/python bench/capacity_live.py --trace FILE --window 6 --speed 30 --tasks 200
    .venv/bin/python bench/capacity_live.py --smoke --kubeconfig K # seconds: 6 tasks on a running cluster

The slice is the trace's busiest ``--window`` hours of GPU tasks (gangs and tasks over 8 GPUs left out, at most
``--tasks``), replayed ``--speed`` times faster than recorded: each task's pod is created gated for Capstan at its
arrival and deleted at its end (durations capped at the window), through ``capstan.capacity.live.replay_pods``.
Boot and GPU-ready delays are given in trace time; the kwok provider boots each node in ``--boot-delay / speed``
wall seconds and makes its GPUs allocatable ``--gpu-ready-delay / speed`` later, and the simulator replays the same
slice with the same delays in trace time. Figures are in trace time: pending p50/p99, pods that waited over a
minute, GPU-hours, idle GPU-hours, cost and launches. The live controller runs with its defaults (react 1 s,
reviews every 60 s, the planner's durations such as the 300 s an empty node waits before a drain) divided by the
speed-up, and with moving running pods off (``live_config``, as every live run); the simulator replays Capstan
with those same settings ("capstan, live settings") and with its defaults, beside the emulations and the oracle. The replay polls the API server every 0.5 wall seconds, so
waits are measured to about ``0.5 × speed`` trace seconds.

The real Karpenter and cluster-autoscaler (kwok providers) are not run yet: the peers are built outside the
repository (docs/benchmarks.md says how) and this bench will take their binaries' paths.

Without ``--kubeconfig`` it starts a sandbox of its own (and stops it). Prints a Rich table, writes
bench/out/capacity_live.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from capstan.capacity import (
    Controller,
    Delay,
    NodeType,
    PlannerConfig,
    Taint,
    Workload,
    load_trace,
    run_policies,
)
from capstan.capacity.live import (
    POOL_LABEL,
    ReplayResult,
    live_config,
    replay_under_controller,
)
from capstan.kube import KubeClient
from capstan.percentile import percentile

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT / ".." / "shared" / "data" / "traces" / "alibaba-openb-2023" / "openb_pod_list_default.csv"
OUT = ROOT / "bench" / "out"
POOL = "bench-live"
NAMESPACE = "capstan-bench-live"


def node_types(boot: float, ready: float, *, pool: str) -> tuple[NodeType, ...]:
    taint = (Taint("nvidia.com/gpu", "present", "NoSchedule"),)
    labels = ((POOL_LABEL, pool),)
    return (
        NodeType("live-l4x4", 48000, 196608, 4, "NVIDIA-L4", 3.35, boot_delay=Delay("fixed", boot),
                 gpu_ready_delay=Delay("fixed", ready), taints=taint, labels=labels),
        NodeType("live-h100x8", 96000, 786432, 8, "NVIDIA-H100", 55.04, boot_delay=Delay("fixed", boot),
                 gpu_ready_delay=Delay("fixed", ready), taints=taint, labels=labels),
    )  # fmt: skip


def the_slice(trace: str, tasks: int, window_s: float) -> Workload:
    """The busiest ``window_s`` of the trace (the most GPU tasks arriving within it; gangs and tasks over 8 GPUs
    left out), at most ``tasks`` of them, arrivals from 0 and durations capped at the window."""
    workload = load_trace(trace)
    pods = sorted(
        (p for p in workload.pods if p.wants_gpu and p.num_gpu <= 8 and not p.gang), key=lambda p: p.arrival
    )
    if not pods:
        raise SystemExit(f"{trace}: no GPU task to replay")
    best, lo = (0, 0), 0
    for hi in range(len(pods)):
        while pods[hi].arrival - pods[lo].arrival >= window_s:
            lo += 1
        if hi - lo + 1 > best[1] - best[0]:
            best = (lo, hi + 1)
    chosen = pods[best[0] : best[1]][:tasks]
    t0 = chosen[0].arrival
    # Kubernetes has no GPU shares: a task asking for part of a GPU asks for a whole one, in both replays
    chosen = [
        replace(
            p, arrival=p.arrival - t0, duration=min(p.duration, window_s), node_selector=(), gpu_milli=1000
        )
        for p in chosen
    ]
    return Workload(
        f"{Path(trace).name}, busiest {window_s / 3600:.2g} h ({len(chosen)} GPU tasks)", tuple(chosen)
    )


TIME_FIELDS = (
    "forecast_day_s",
    "forecast_day_band_s",
    "forecast_day_step_s",
    "forecast_recent_s",
    "service_half_life_s",
    "headroom_wait_s",
    "repack_min_age_s",
    "min_idle_s",
)
"""The planner's settings that are durations: a live replay at ``speed`` divides them by it."""


def wall_config(config: PlannerConfig, speed: float) -> PlannerConfig:
    """``config`` on the wall clock of a replay ``speed`` times faster than the trace."""
    return replace(config, **{f: getattr(config, f) / speed for f in TIME_FIELDS})


async def capstan_live(
    kubeconfig: Path, workload: Workload, speed: float, types: tuple[NodeType, ...], drain_wait_s: float
) -> tuple[ReplayResult, dict[str, float]]:
    async with await KubeClient.from_kubeconfig(kubeconfig) as kube:
        # the controller's defaults (react 1 s, reviews every 60 s, the planner's durations) in wall time
        controller = Controller(
            wall_config(live_config(), speed), react=1.0 / speed, review_interval=60.0 / speed
        )
        run = await replay_under_controller(
            kube,
            workload.pods,
            NAMESPACE,
            controller,
            types,
            speed=speed,
            pool=POOL,
            drain_wait_s=drain_wait_s,
        )
    decided = sorted(run.stats.decision_s)
    return run.replay, {
        "decisions": float(run.stats.decisions),
        "decision_p99_ms": percentile(decided, 99, empty=0.0) * 1000,
        "failed_calls": float(len(run.stats.failures)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--trace", default=str(OPENB))
    ap.add_argument("--tasks", type=int, default=60, help="at most this many GPU tasks")
    ap.add_argument("--window", type=float, default=3.0, help="hours of the trace to replay (its busiest)")
    ap.add_argument("--speed", type=float, default=50.0, help="trace seconds per wall second")
    ap.add_argument("--boot-delay", type=float, default=300.0, help="trace seconds, launch → node Ready")
    ap.add_argument(
        "--gpu-ready-delay", type=float, default=90.0, help="trace seconds, Ready → GPUs allocatable"
    )
    ap.add_argument(
        "--kubeconfig", type=Path, default=None, help="a running cluster (default: a sandbox of its own)"
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.smoke:
        args.tasks, args.window = 6, 0.25
    speed = args.speed
    workload = the_slice(args.trace, args.tasks, args.window * 3600)
    wall_types = node_types(args.boot_delay / speed, args.gpu_ready_delay / speed, pool=POOL)
    trace_types = node_types(args.boot_delay, args.gpu_ready_delay, pool=POOL)
    console = Console(width=160)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    box = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        from capstan.sandbox import NodePool, Sandbox, SandboxSpec, find_toolchain

        toolchain = find_toolchain()
        if toolchain is None:
            raise SystemExit(
                "control plane binaries are not built: run `make test` or `capstan sandbox up` first"
            )
        box = Sandbox(Path(tempfile.mkdtemp(prefix="capstan-live-")), toolchain)
        state = box.up(SandboxSpec(name="live", node_pools=[NodePool(name="cpu", count=1)]), timeout=240)
        kubeconfig = Path(state.kubeconfig)
    try:
        live, extra = asyncio.run(
            capstan_live(kubeconfig, workload, speed, wall_types, 60.0 if not args.smoke else 30.0)
        )
    finally:
        if box is not None:
            box.down()
    sim = run_policies(workload, trace_types, ["capstan", "cluster-autoscaler", "karpenter", "oracle"])
    same = run_policies(workload, trace_types, ["capstan"], planner=live_config())["capstan"]

    prices = {t.name: t.price_per_hour for t in trace_types}
    waits = live.pending_s(speed)
    rows = [
        {
            "policy": "capstan",
            "where": "live",
            "pods": len(workload.pods),
            "bound": len(live.bound),
            "p50_pending_s": percentile(waits, 50, empty=0.0),
            "p99_pending_s": percentile(waits, 99, empty=0.0),
            "waited_over_60s": sum(1 for w in waits if w > 60.0),
            "gpu_hours": live.gpu_hours(speed),
            "idle_gpu_hours": live.gpu_hours(speed) - live.allocated_gpu_hours(speed),
            "cost": live.cost(speed, prices),
            "launches": len(live.node_life),
            **extra,
        }
    ]
    for name, (_, s) in [("capstan, live settings", same), *sim.items()]:
        rows.append(
            {
                "policy": name,
                "where": "simulator",
                "pods": s.pods,
                "bound": s.bound,
                "p50_pending_s": s.pending["total"][0],
                "p99_pending_s": s.pending["total"][2],
                "waited_over_60s": s.slow_starts,
                "gpu_hours": s.gpu_hours,
                "idle_gpu_hours": sum(s.idle.values()),
                "cost": s.cost,
                "launches": s.launches,
            }
        )
    table = Table(
        title=f"{workload.name} at {speed:,.0f}x; boot {args.boot_delay:.0f} s + GPUs {args.gpu_ready_delay:.0f} s "
        "(figures in trace time)"
    )
    for col in ("policy", "where", "bound", "pending p50 s", "pending p99 s", "waited > 60 s", "GPU-h", "idle GPU-h",
                "cost $", "launches"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["policy"]), str(r["where"]), f"{r['bound']}/{r['pods']}", f"{r['p50_pending_s']:,.0f}",
            f"{r['p99_pending_s']:,.0f}", str(r["waited_over_60s"]), f"{r['gpu_hours']:,.1f}",
            f"{r['idle_gpu_hours']:,.1f}", f"{r['cost']:,.0f}", str(r["launches"]),
        )  # fmt: skip
    console.print(table)
    console.print(
        f"live decisions: {extra['decisions']:.0f}, p99 {extra['decision_p99_ms']:.1f} ms, "
        f"{extra['failed_calls']:.0f} failed calls (retried)"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "capacity_live.json"
    out.write_text(
        json.dumps(
            {
                "smoke": args.smoke,
                "started": started,
                "speed": speed,
                "workload": workload.name,
                "rows": rows,
            },
            indent=1,
        )
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
