"""How long one planner decision takes: 1,000 pending pods × 20 node types (goal ≤ 100 ms), and at 10×.

    .venv/bin/python bench/capacity_planner_speed.py           # 1,000 and 10,000 pending pods, 20 node types
    .venv/bin/python bench/capacity_planner_speed.py --smoke   # 100 pods: seconds

Pods are openb tasks (shares, whole GPUs, GPU-model constraints from the gpuspec20 variant); node types are the
openb shapes plus cloud-like GPU types to make 20. Prints a Rich table, writes bench/out/capacity_planner_speed.json
and a PNG.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from capstan.capacity import Delay, PlannerConfig, Snapshot, inference_node_types, plan, read_openb_nodes
from capstan.capacity.traces import read_openb_pods

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT / ".." / "shared" / "data" / "traces" / "alibaba-openb-2023"
OUT = ROOT / "bench" / "out"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--repeat", type=int, default=7)
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
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "capacity_planner_speed.json").write_text(json.dumps(rows, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([r["pods"] for r in rows], [r["median_ms"] for r in rows], marker="o")
    ax.axhline(100, color="red", linestyle="--", label="goal at 1,000 pods")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("pending pods")
    ax.set_ylabel("ms per decision")
    ax.legend()
    fig.tight_layout()
    (args.out / "capacity").mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "capacity" / "planner_speed.png", dpi=110)
    console.print(f"wrote {args.out / 'capacity_planner_speed.json'}")


if __name__ == "__main__":
    main()
