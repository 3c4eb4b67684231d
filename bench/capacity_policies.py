"""GPU capacity policies on real and synthetic traces: idle GPU-hours, p99 pending and cost against the goals.

Beside the goals: the cluster-autoscaler emulation with a CapacityBuffer of 1 to 32 GPUs (``ca-buffer``, the
headroom recipe platform teams use today) against Capstan's forecast headroom, as idle GPU-hours against pods
that waited for capacity (the buffer frontier).

Goals (bench/goals.py), on every trace with the same boot delay: Capstan with its own forecast idles ≤ 1.5× the
oracle's GPU-hours, its p99 pending time is ≤ 0.2× the cluster-autoscaler emulation's and its cost ≤ 1.10× the
oracle's; given a one-hour demand signal (``capstan + 1 h signal``: every pod announced an hour before it arrives,
``QueuedDemand(TraceLead(pods, 3600), NoForecast())``, held from one launch-to-GPUs time before it comes) its cost
is ≤ 1.05× the oracle's; each policy replays the 8,152-task openb trace in ≤ 10 s on one core. Also: how the
figures move when the trace grows 10×. A last table gives every case's verdict on each goal.

    .venv/bin/python bench/capacity_policies.py            # full: openb (all tasks), GenAI, synthetic, growth
    .venv/bin/python bench/capacity_policies.py --trace POD_LIST.csv [--nodes NODE_LIST.csv]  # and these
    .venv/bin/python bench/capacity_policies.py --smoke    # seconds: small slices of the same inputs

Prints Rich tables, writes bench/out/capacity_policies.json and PNG plots under bench/out/capacity/.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from _capacity_traces import grow, grow_node_types
from capstan.capacity import (
    AgenticSpec,
    Controller,
    Delay,
    NodeType,
    NoForecast,
    PlannerConfig,
    QueuedDemand,
    Sim,
    Summary,
    TraceLead,
    Workload,
    empty_start_floor,
    gpu_horizon,
    inference_node_types,
    load_trace,
    read_openb_nodes,
    run_policies,
    summarize,
    synthetic_agentic,
    write_plots,
)
from capstan.errors import UserError
from goals import limit

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / ".." / "shared" / "data" / "traces"
OUT = ROOT / "bench" / "out"
POLICIES = ["capstan", "cluster-autoscaler", "ca-buffer", "karpenter", "static", "oracle"]
SIGNAL = "capstan + 1 h signal"
"""Capstan told every pod an hour before it arrives, with no forecast of its own (the demand-signal goal)."""
SIGNAL_LEAD_S = 3600.0
BUFFER_SIZES = [1, 2, 4, 8, 16, 32]
"""CapacityBuffer sizes (one-GPU pods) the buffer frontier replays beside ``ca-buffer``'s peak-sized default."""


def ratio(a: float, b: float) -> float:
    return a / b if b else float("inf") if a else 1.0


def row(label: str, s: dict[str, Summary]) -> dict[str, object]:
    c, ca, o = s["capstan"], s["cluster-autoscaler"], s["oracle"]
    signal = s.get(SIGNAL)
    return {
        "case": label,
        "idle_vs_oracle": ratio(c.idle_total, o.idle_total),
        "idle_vs_ca": ratio(c.idle_total, ca.idle_total),
        "p99_vs_ca": ratio(c.pending["total"][2], ca.pending["total"][2]),
        "cost_vs_oracle": ratio(c.cost, o.cost),
        "cost_with_signal": ratio(signal.cost, o.cost) if signal is not None else None,
        "signal_idle_vs_oracle": ratio(signal.idle_total, o.idle_total) if signal is not None else None,
        "signal_p99_vs_ca": (
            ratio(signal.pending["total"][2], ca.pending["total"][2]) if signal is not None else None
        ),
        "policies": {
            k: {
                "idle_gpu_h": v.idle_total,
                "idle_by_cause": v.idle,
                "p99_pending_s": v.pending["total"][2],
                "p50_pending_s": v.pending["total"][0],
                "slow_starts": v.slow_starts,
                "cost": v.cost,
                "allocation_rate": v.allocation_rate,
                "launches": v.launches,
                "drains": v.drains,
                "moves": v.moves,
                "restarts": v.restarts,
                "lost_gpu_h": v.lost_gpu_hours,
                "move_wait_p50_s": v.move_wait[0],
                "move_wait_p99_s": v.move_wait[1],
                "unplaced": v.unplaced,
                "seconds": v.seconds,
                "cpu_seconds": v.cpu_seconds,
                "pods": v.pods,
                "problems": len(v.problems),
            }
            for k, v in s.items()
        },
    }


def boot_paid_ratio(oracle: Summary) -> float:
    """The oracle's cost plus the boot delay of each of its launches, over the oracle's cost: what a policy that
    knew the future and launched the oracle's nodes one boot delay early would pay, as a share of the goal's
    reference."""
    return (oracle.cost + oracle.boot_cost) / oracle.cost if oracle.cost else 1.0


def case(
    console: Console,
    label: str,
    workload: Workload,
    types: tuple[NodeType, ...],
    out: Path,
    seed: int = 0,
    policies: list[str] = POLICIES,
    signal: bool = True,
) -> dict[str, object]:
    t0 = time.perf_counter()
    results = run_policies(workload, types, policies, seed=seed)
    summaries = {k: v[1] for k, v in results.items()}
    if signal:

        def told() -> QueuedDemand:
            return QueuedDemand(
                TraceLead(workload.pods, SIGNAL_LEAD_S), NoForecast(), lookahead_s=gpu_horizon(types)
            )

        s = run_policies(workload, types, ["capstan"], seed=seed, forecaster=told)["capstan"][1]
        summaries = {"capstan": summaries["capstan"], SIGNAL: replace(s, policy=SIGNAL)} | summaries
    table = Table(title=f"{label}: {len(workload.pods)} pods ({time.perf_counter() - t0:.0f} s)")
    for col in (
        "policy",
        "idle GPU-h",
        "booting",
        "unalloc",
        "empty",
        "headroom",
        "dup",
        "p50 s",
        "p99 s",
        "waited > 60 s",
        "cost $",
        "alloc %",
        "launches",
        "moves",
        "moved wait p99",
        "unplaced",
        "run s",
        "CPU s",
    ):
        table.add_column(col, justify="right", no_wrap=True)
    for name, s in summaries.items():
        table.add_row(
            name,
            f"{s.idle_total:,.1f}",
            *(f"{s.idle[c]:,.1f}" for c in ("booting", "unallocated", "empty", "headroom", "duplicate")),
            f"{s.pending['total'][0]:.0f}",
            f"{s.pending['total'][2]:.0f}",
            str(s.slow_starts),
            f"{s.cost:,.1f}",
            f"{100 * s.allocation_rate:.1f}",
            str(s.launches),
            s.moves_text,
            f"{s.move_wait[1]:.0f}",
            str(s.unplaced),
            f"{s.seconds:.2f}",
            f"{s.cpu_seconds:.2f}",
        )
    console.print(table)
    r = row(label, summaries)
    r["oracle_boot_paid_vs_oracle"] = boot_paid_ratio(summaries["oracle"])
    floor = empty_start_floor(workload, types)
    r["p99_empty_start_floor_s"] = floor
    r["p99_empty_start_floor_vs_ca"] = ratio(floor, summaries["cluster-autoscaler"].pending["total"][2])
    with_signal = (
        f", told an hour ahead {r['cost_with_signal']:.3f}× (goal ≤ {limit('capacity.cost_with_signal')})"
        if r["cost_with_signal"] is not None
        else ""
    )
    console.print(
        f"  capstan: idle GPU-h {r['idle_vs_oracle']:.3f}× the oracle's (goal ≤ {limit('capacity.idle_vs_oracle')}), "
        f"p99 pending {r['p99_vs_ca']:.3f}× CA's (goal ≤ {limit('capacity.p99_vs_ca')}), "
        f"cost {r['cost_vs_oracle']:.3f}× the oracle's (goal ≤ {limit('capacity.cost_vs_oracle')}){with_signal}\n"
        f"  bounds: the oracle's launches each paying the boot delay cost "
        f"{summaries['oracle'].cost + summaries['oracle'].boot_cost:,.0f} "
        f"({r['oracle_boot_paid_vs_oracle']:.3f}× the oracle); p99 of an autoscaler starting empty ≥ {floor:.0f} s "
        f"({r['p99_empty_start_floor_vs_ca']:.3f}× CA)"
    )
    write_plots(
        list(summaries.values()), out / "capacity" / re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_"), label
    )
    return r


def ratio_table(title: str, first: str, extra: tuple[str, ...] = ()) -> Table:
    """A table of runs against the same run's CA and oracle: idle, p99 and slow starts, cost, launches."""
    table = Table(title=title)
    for col in (
        first,
        "idle GPU-h",
        "× CA",
        "p99 s",
        "× CA",
        "waited > 60 s",
        "cost",
        "× oracle",
        "launches",
        *extra,
    ):
        table.add_column(col, justify="right")
    return table


def frontier_variants() -> list[tuple[str, PlannerConfig]]:
    """Capstan's variants in the frontier: the forecast quantile, then the time-of-day forecast's settings."""
    return [
        ("no headroom", PlannerConfig(headroom=False)),
        *((f"quantile {q:.2f}", PlannerConfig(forecast_quantile=q)) for q in (0.9, 0.95, 0.97)),
        ("default (0.99, 7 days ±1 h, 2 h, wait 20 %)", PlannerConfig()),
        ("10 h look-back (forecast_days=0)", PlannerConfig(forecast_days=0)),
        ("3 days", PlannerConfig(forecast_days=3)),
        ("14 days", PlannerConfig(forecast_days=14)),
        ("bands ±30 min", PlannerConfig(forecast_day_band_s=1800.0)),
        ("bands ±90 min", PlannerConfig(forecast_day_band_s=5400.0)),
        ("bands step 5 min", PlannerConfig(forecast_day_step_s=300.0)),
        ("recent 1 h", PlannerConfig(forecast_recent_s=3600.0)),
        ("recent 4 h", PlannerConfig(forecast_recent_s=14400.0)),
        ("no headroom wait", PlannerConfig(headroom_wait_share=0.0)),
        *(
            (f"headroom wait {w:.0f} s", PlannerConfig(headroom_wait_s=w, headroom_wait_share=0.0))
            for w in (30.0, 60.0, 90.0)
        ),
        ("headroom wait 30 %", PlannerConfig(headroom_wait_share=0.3)),
    ]


def headroom_frontier(
    console: Console,
    workload: Workload,
    types: tuple[NodeType, ...],
    base: dict[str, object],
    variants: list[tuple[str, PlannerConfig]],
) -> list[dict[str, object]]:
    """Capstan's variants on one trace: what headroom buys in p99 and costs in idle GPU-h, and how much the
    figures move with the forecast's settings."""
    pols = base["policies"]
    assert isinstance(pols, dict)
    ca, oracle = pols["cluster-autoscaler"], pols["oracle"]
    table = ratio_table(
        "Headroom frontier (Capstan, openb default): forecast settings vs the goals",
        "variant",
        ("plans place/review/full (skipped)", "run s", "CPU s"),
    )
    out = []
    for label, cfg in variants:
        policy = Controller(cfg)
        t0, c0 = time.perf_counter(), time.process_time()
        s = summarize(Sim(workload, types, policy, seed=0, record=False).run())
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
        r = {
            "variant": label,
            "quantile": cfg.forecast_quantile if cfg.headroom else 0.0,
            "forecast_days": cfg.forecast_days,
            "idle_gpu_h": s.idle_total,
            "idle_vs_ca": ratio(s.idle_total, ca["idle_gpu_h"]),
            "p99_s": s.pending["total"][2],
            "p99_vs_ca": ratio(s.pending["total"][2], ca["p99_pending_s"]),
            "slow_starts": s.slow_starts,
            "cost": s.cost,
            "cost_vs_oracle": ratio(s.cost, oracle["cost"]),
            "launches": s.launches,
            "seconds": seconds,
            "cpu_seconds": cpu_seconds,
            "plans": dict(policy.plans),
        }
        out.append(r)
        table.add_row(
            label,
            f"{s.idle_total:,.0f}",
            f"{r['idle_vs_ca']:.3f}",
            f"{r['p99_s']:.0f}",
            f"{r['p99_vs_ca']:.3f}",
            str(s.slow_starts),
            f"{s.cost:,.0f}",
            f"{r['cost_vs_oracle']:.3f}",
            str(s.launches),
            "{place}/{review}/{full} ({skipped})".format(**policy.plans),
            f"{seconds:.1f}",
            f"{cpu_seconds:.1f}",
        )
    console.print(table)
    return out


def buffer_frontier(
    console: Console,
    label: str,
    workload: Workload,
    types: tuple[NodeType, ...],
    base: dict[str, object],
    sizes: list[int],
    capstan_points: list[dict[str, object]],
    out: Path,
    seed: int = 0,
) -> list[dict[str, object]]:
    """The cluster-autoscaler emulation with CapacityBuffers of ``sizes`` one-GPU pods on one trace, beside
    Capstan's points (its default, and on openb default its headroom frontier): what each static buffer costs
    for the pods it spares a boot. Writes a plot of idle GPU-hours against pods that waited > 60 s."""
    pols = base["policies"]
    assert isinstance(pols, dict)
    ca, oracle = pols["cluster-autoscaler"], pols["oracle"]
    table = ratio_table(
        f"CapacityBuffer frontier ({label}): CA + a static buffer vs Capstan's forecast", "policy"
    )
    rows: list[dict[str, object]] = []
    for size in sizes:
        results = run_policies(workload, types, ["ca-buffer"], seed=seed, buffer_gpus=size)
        s = results["ca-buffer"][1]
        rows.append(
            {
                "policy": f"ca-buffer {size} GPU",
                "buffer_gpus": size,
                "idle_gpu_h": s.idle_total,
                "p99_pending_s": s.pending["total"][2],
                "slow_starts": s.slow_starts,
                "cost": s.cost,
                "launches": s.launches,
            }
        )
    peak = pols["ca-buffer"]
    others = [
        {"policy": "cluster-autoscaler (no buffer)", **ca},
        {"policy": "ca-buffer at the peak burst (default)", **peak},
        *({"policy": f"capstan {p['variant']}", **p} for p in capstan_points),
    ]
    for r in rows + others:
        idle = float(r.get("idle_gpu_h", 0.0))
        p99 = float(r.get("p99_pending_s", r.get("p99_s", 0.0)))
        cost = float(r.get("cost", 0.0))
        table.add_row(
            str(r["policy"]),
            f"{idle:,.1f}",
            f"{ratio(idle, ca['idle_gpu_h']):.3f}",
            f"{p99:.0f}",
            f"{ratio(p99, ca['p99_pending_s']):.3f}",
            str(r["slow_starts"]),
            f"{cost:,.1f}",
            f"{ratio(cost, oracle['cost']):.3f}",
            str(r["launches"]),
        )
    console.print(table)
    _buffer_plot(label, rows, ca, peak, capstan_points, out)
    return rows


def _buffer_plot(
    label: str,
    rows: list[dict[str, object]],
    ca: dict[str, object],
    peak: dict[str, object],
    capstan_points: list[dict[str, object]],
    out: Path,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def xy(points: list[dict[str, object]]) -> tuple[list[float], list[float]]:
        return [float(str(p["idle_gpu_h"])) for p in points], [float(str(p["slow_starts"])) for p in points]

    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs, ys = xy([ca, *rows])
    ax.plot(xs, ys, marker="o", label="cluster-autoscaler + CapacityBuffer (0, 1, 2, … GPUs)")
    for r, x, y in zip(rows, xs[1:], ys[1:], strict=True):
        ax.annotate(str(r["buffer_gpus"]), (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    px, py = xy([peak])
    ax.scatter(px, py, marker="s", color="tab:orange", label="CapacityBuffer at the peak burst", zorder=3)
    cx, cy = xy(capstan_points)
    ax.scatter(cx, cy, marker="^", color="tab:green", label="Capstan (forecast headroom)", zorder=3)
    ax.set_xscale("log")
    ax.set_xlabel("idle GPU-hours (log)")
    ax.set_ylabel("pods that waited > 60 s")
    ax.set_title(f"Static buffer vs forecast headroom — {label}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "capacity" / f"buffer_frontier_{re.sub(r'[^A-Za-z0-9]+', '_', label).strip('_')}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


GOAL_KEYS = (
    ("idle_vs_oracle", "capacity.idle_vs_oracle", "idle × oracle"),
    ("p99_vs_ca", "capacity.p99_vs_ca", "p99 × CA"),
    ("cost_vs_oracle", "capacity.cost_vs_oracle", "cost × oracle"),
    ("cost_with_signal", "capacity.cost_with_signal", "told 1 h ahead: cost × oracle"),
)


def verdict_table(console: Console, rows: list[dict[str, object]]) -> dict[str, dict[str, str]]:
    """Every case against every goal: the ratio and whether it meets the goal's limit (— when not replayed)."""
    table = Table(title="Against the goals, case by case (✓ met, ✗ missed)")
    table.add_column("case")
    for _, key, label in GOAL_KEYS:
        table.add_column(f"{label} (≤ {limit(key)})", justify="right")
    table.add_column("told 1 h ahead: idle × oracle, p99 × CA", justify="right")
    out: dict[str, dict[str, str]] = {}
    for r in rows:
        cells, verdicts = [], {}
        for field, key, _ in GOAL_KEYS:
            value = r.get(field)
            if value is None:
                cells.append("—")
                continue
            met = float(str(value)) <= limit(key)
            verdicts[key] = "met" if met else "missed"
            cells.append(f"{float(str(value)):.3f} {'✓' if met else '✗'}")
        told = (
            f"{float(str(r['signal_idle_vs_oracle'])):.3f}, {float(str(r['signal_p99_vs_ca'])):.3f}"
            if r.get("signal_idle_vs_oracle") is not None
            else "—"
        )
        table.add_row(str(r["case"]), *cells, told)
        out[str(r["case"])] = verdicts
    console.print(table)
    return out


def capstan_point(base: dict[str, object]) -> dict[str, object]:
    pols = base["policies"]
    assert isinstance(pols, dict)
    return {"variant": "default", **pols["capstan"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="small slices: runs in seconds")
    ap.add_argument("--boot-delay", type=float, default=300.0, help="seconds, request → Ready")
    ap.add_argument("--gpu-ready-delay", type=float, default=90.0, help="seconds, Ready → GPUs allocatable")
    ap.add_argument("--openb-pods", type=int, default=0, help="replay only the first N openb tasks (0: all)")
    ap.add_argument(
        "--openb-grow",
        type=int,
        default=0,
        help="also replay openb default grown N times (capstan, cluster-autoscaler, oracle; 0: skip)",
    )
    ap.add_argument(
        "--trace",
        action="append",
        type=Path,
        default=[],
        help="also replay this openb-format pod list against the goals (repeatable)",
    )
    ap.add_argument(
        "--nodes",
        type=Path,
        default=TRACES / "alibaba-openb-2023" / "openb_node_list_all_node.csv",
        help="the openb-format node list the --trace pod lists run on",
    )
    ap.add_argument("--out", type=Path, default=OUT, help="where JSON and plots go")
    args = ap.parse_args()
    missing = [str(p) for p in (*args.trace, args.nodes) if not p.is_file()]
    if missing:
        print(f"capacity_policies: no such file: {', '.join(missing)}", file=sys.stderr)
        raise SystemExit(2)
    console = Console(width=200)
    boot, ready = Delay("fixed", args.boot_delay), Delay("fixed", args.gpu_ready_delay)
    openb_dir = TRACES / "alibaba-openb-2023"
    openb_types = read_openb_nodes(openb_dir / "openb_node_list_all_node.csv", boot, ready)
    extra: list[tuple[Workload, tuple[NodeType, ...]]] = []
    for path in args.trace:
        try:
            extra.append((load_trace(str(path)), read_openb_nodes(args.nodes, boot, ready)))
        except (OSError, ValueError, UserError) as e:
            said = str(e) if isinstance(e, UserError) else f"{path}: {e}"  # a UserError names its file
            print(f"capacity_policies: {said}", file=sys.stderr)
            raise SystemExit(2) from None
    infer_types = inference_node_types(boot, ready)
    rows = []
    buffers: dict[str, list[dict[str, object]]] = {}
    sizes = [1, 4] if args.smoke else BUFFER_SIZES

    n_openb = 200 if args.smoke else args.openb_pods
    frontier: list[dict[str, object]] = []
    for variant in ("default", "gpuspec20"):
        w = load_trace(str(openb_dir / f"openb_pod_list_{variant}.csv"))
        if n_openb:
            w = Workload(w.name, w.pods[:n_openb])
        rows.append(case(console, f"openb {variant}", w, openb_types, args.out))
        if variant == "default":
            frontier = headroom_frontier(console, w, openb_types, rows[-1], frontier_variants())
            buffers["openb default"] = buffer_frontier(
                console, "openb default", w, openb_types, rows[-1], sizes, frontier, args.out
            )
            # the same tasks with the batch (BE) ones not safe to evict: moving them would lose their work
            pinned = load_trace(
                str(openb_dir / "openb_pod_list_default.csv"), not_safe_to_evict=frozenset({"BE"})
            )
            pinned = Workload(pinned.name, pinned.pods[: len(w.pods)])
            rows.append(case(console, "openb default, BE not safe to evict", pinned, openb_types, args.out))
            grown = 2 if args.smoke else args.openb_grow
            if grown > 1:
                rows.append(
                    case(
                        console,
                        f"openb default x{grown}",
                        grow(w, grown, seed=0),
                        grow_node_types(openb_types, grown),
                        args.out,
                        policies=["capstan", "cluster-autoscaler", "oracle"],
                        signal=False,  # a growth check, not a goal trace
                    )
                )
        if args.smoke:
            break

    genai = load_trace(str(TRACES / "alibaba-genai-2026" / "qps.csv"), window=300.0)
    if args.smoke:
        genai = Workload(genai.name, genai.pods[:60])
    rows.append(case(console, "genai qps", genai, infer_types, args.out))
    buffers["genai qps"] = buffer_frontier(
        console, "genai qps", genai, infer_types, rows[-1], sizes, [capstan_point(rows[-1])], args.out
    )

    hours = 0.5 if args.smoke else 3.0
    synth = synthetic_agentic(11, AgenticSpec(hours=hours))
    rows.append(case(console, "synthetic agentic", synth, infer_types, args.out, seed=11))
    buffers["synthetic agentic"] = buffer_frontier(
        console,
        "synthetic agentic",
        synth,
        infer_types,
        rows[-1],
        sizes,
        [capstan_point(rows[-1])],
        args.out,
        11,
    )
    factor = 3 if args.smoke else 10
    rows.append(
        case(
            console,
            f"synthetic agentic x{factor}",
            grow(synth, factor, seed=11),
            grow_node_types(infer_types, factor),
            args.out,
            seed=11,
            signal=False,
        )
    )
    for w, types in extra:
        if args.smoke:
            w = Workload(w.name, w.pods[:200])
        rows.append(case(console, f"{w.name} (--trace)", w, types, args.out))
    verdicts = verdict_table(console, rows)

    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "capacity_policies.json").write_text(
        json.dumps(
            {
                "boot_delay_s": args.boot_delay,
                "gpu_ready_delay_s": args.gpu_ready_delay,
                "smoke": args.smoke,
                "rows": rows,
                "verdicts": verdicts,
                "headroom_frontier_openb_default": frontier,
                "buffer_frontier": buffers,
            },
            indent=1,
        )
    )
    console.print(f"wrote {args.out / 'capacity_policies.json'} and plots under {args.out / 'capacity'}")


if __name__ == "__main__":
    main()
