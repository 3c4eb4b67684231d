"""What knowing demand early buys: Capstan replayed with each pod announced a lead before it arrives (a queue's
signal: a Job created suspended, a Kueue Workload waiting for quota), beside its own forecast alone, the
cluster-autoscaler emulation and the oracle.

    .venv/bin/python bench/capacity_demand_signals.py                 # openb default and gpuspec20, whole traces
    .venv/bin/python bench/capacity_demand_signals.py --trace FILE --leads 60,390,1800
    .venv/bin/python bench/capacity_demand_signals.py --smoke         # seconds: 300 tasks of openb default

Each lead L replays Capstan with ``QueuedDemand(TraceLead(pods, L))``: at every decision the planner's forecast
also holds the pods arriving within the next L seconds (``capstan.capacity.QueuedDemand``). "capped" holds an
announced pod only from one launch-to-GPUs time (``gpu_horizon``: boot plus GPU-ready delay) before it comes.
Nodes are the trace's node list (all node types), boot 300 s and GPU-ready 90 s, as the other capacity benches.
Prints a Rich table per trace, writes bench/out/capacity_demand_signals.json and a PNG (slow starts and cost
against the lead).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table

from capstan.capacity import (
    Controller,
    Delay,
    QueuedDemand,
    Sim,
    TraceLead,
    Workload,
    gpu_horizon,
    load_trace,
    read_openb_nodes,
    run_policies,
    summarize,
)

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT / ".." / "shared" / "data" / "traces" / "alibaba-openb-2023"
OUT = ROOT / "bench" / "out"


def row(name: str, summary: Any, oracle_cost: float, seconds: float) -> dict[str, Any]:
    return {
        "policy": name,
        "p99_pending_s": summary.pending["total"][2],
        "slow_starts": summary.slow_starts,
        "idle_gpu_hours": sum(summary.idle.values()),
        "cost": summary.cost,
        "cost_vs_oracle": summary.cost / oracle_cost if oracle_cost else 0.0,
        "launches": summary.launches,
        "seconds": seconds,
    }


def one_trace(
    path: Path, nodes: Path, leads: list[float], tasks: int | None, console: Console
) -> dict[str, Any]:
    types = read_openb_nodes(nodes, Delay("fixed", 300.0), Delay("fixed", 90.0))
    workload = load_trace(str(path))
    if tasks is not None:
        pods = sorted(workload.pods, key=lambda p: (p.arrival, p.name))[:tasks]
        workload = Workload(f"{workload.name}, first {len(pods)}", tuple(pods))
    base = run_policies(workload, types, ["capstan", "cluster-autoscaler", "oracle"])
    oracle_cost = base["oracle"][1].cost
    rows = [row("capstan, its own forecast", base["capstan"][1], oracle_cost, base["capstan"][1].seconds)]
    horizon = gpu_horizon(types)
    variants: list[tuple[str, float, float | None]] = [(f"capstan, told {lead:g} s ahead", lead, None)
                                                        for lead in leads]  # fmt: skip
    longest = max(leads, default=0.0)
    if longest > horizon:
        variants.append((f"capstan, told {longest:g} s ahead, capped at {horizon:g} s", longest, horizon))
    for name, lead, cap in variants:
        t0 = time.perf_counter()
        controller = Controller(forecaster=QueuedDemand(TraceLead(workload.pods, lead), lookahead_s=cap))
        result = Sim(workload, types, controller).run()
        rows.append(row(name, summarize(result), oracle_cost, time.perf_counter() - t0))
    for name in ("cluster-autoscaler", "oracle"):
        rows.append(row(f"{name} (emulation)" if name != "oracle" else name, base[name][1], oracle_cost,
                        base[name][1].seconds))  # fmt: skip
    table = Table(title=f"{workload.name}: boot 300 s + GPUs 90 s ({horizon:g} s from launch to GPUs)")
    for col in (
        "policy",
        "pending p99 s",
        "waited > 60 s",
        "idle GPU-h",
        "cost $",
        "cost / oracle",
        "launches",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            r["policy"], f"{r['p99_pending_s']:,.0f}", str(r["slow_starts"]), f"{r['idle_gpu_hours']:,.0f}",
            f"{r['cost']:,.0f}", f"{r['cost_vs_oracle']:.3f}", str(r["launches"]),
        )  # fmt: skip
    console.print(table)
    return {"trace": workload.name, "horizon_s": horizon, "rows": rows}


def plot(results: list[dict[str, Any]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a0, a1) = plt.subplots(1, 2, figsize=(10, 4))
    for res in results:
        told = [
            r for r in res["rows"] if r["policy"].startswith("capstan, told") and "capped" not in r["policy"]
        ]
        own = next(r for r in res["rows"] if r["policy"] == "capstan, its own forecast")
        xs = [0.0] + [float(r["policy"].split("told ")[1].split(" s")[0]) for r in told]
        a0.plot(
            xs, [own["slow_starts"]] + [r["slow_starts"] for r in told], marker="o", label=res["trace"][:40]
        )
        a1.plot(xs, [own["cost_vs_oracle"]] + [r["cost_vs_oracle"] for r in told], marker="o")
    a0.set_xlabel("lead of the queue's announcement (s)")
    a0.set_ylabel("pods that waited > 60 s")
    a1.set_xlabel("lead of the queue's announcement (s)")
    a1.set_ylabel("cost / oracle")
    a0.legend(fontsize=7)
    fig.tight_layout()
    path = out / "capacity_demand_signals.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _fail(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--trace", action="append", type=Path, help="an openb-format pod list (repeatable)")
    ap.add_argument("--nodes", type=Path, default=OPENB / "openb_node_list_all_node.csv")
    ap.add_argument("--leads", default="120,390,900", help="comma-separated seconds")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    try:
        leads = [float(x) for x in args.leads.split(",") if x.strip()]
    except ValueError:
        _fail(f"--leads {args.leads}: not a comma-separated list of seconds")
    if any(lead < 0 for lead in leads):
        _fail(f"--leads {args.leads}: a lead is 0 or more seconds")
    traces = args.trace or [OPENB / "openb_pod_list_default.csv", OPENB / "openb_pod_list_gpuspec20.csv"]
    tasks = None
    if args.smoke:
        traces, tasks, leads = traces[:1], 300, [390.0, 900.0]
    missing = [str(t) for t in [*traces, args.nodes] if not t.is_file()]
    if missing:
        _fail(f"no such file: {', '.join(missing)}")
    console = Console(width=140)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = [one_trace(t, args.nodes, leads, tasks, console) for t in traces]
    args.out.mkdir(parents=True, exist_ok=True)
    png = plot(results, args.out)
    out = args.out / "capacity_demand_signals.json"
    out.write_text(json.dumps({"smoke": args.smoke, "started": started, "results": results}, indent=1))
    console.print(f"wrote {out} and {png}")


if __name__ == "__main__":
    main()
