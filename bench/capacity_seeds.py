"""How robust the capacity goals' verdicts are: the same trace replayed with boot delays drawn at random.

A replay with fixed delays is one sample of a chaotic system: one node up a few seconds earlier changes which
node a pod lands on, which node types stay under their limits, and so every later decision. This bench replays
Capstan, the cluster-autoscaler emulation and the oracle on one trace with each node's boot delay drawn
uniformly within ±``--jitter`` of ``--boot-delay`` (a different draw per seed), and says for each seed whether
each goal of the planner with its own forecast holds (bench/goals.py: idle GPU-hours ≤ 1.5× the oracle's, p99
pending ≤ 0.2× CA's, cost ≤ 1.10× the oracle's).
The oracle's nodes are up the instant it asks, so it does not depend on the seed and is replayed once.
``--variant`` replays Capstan with other planner settings (or controller intervals, ``POLICY_SETTINGS``) beside
the default, on the same seeds.

    .venv/bin/python bench/capacity_seeds.py                         # openb default, 5 min ± 10 %, 8 seeds
    .venv/bin/python bench/capacity_seeds.py --variant "no room moves:make_room_moves=0"
    .venv/bin/python bench/capacity_seeds.py --variant "one order, 300 s:repack_both_orders=0,repack_interval=300"
    .venv/bin/python bench/capacity_seeds.py --trace other_openb_pod_list.csv --seeds 16 --jitter 0.2
    .venv/bin/python bench/capacity_seeds.py --smoke                 # seconds: 300 tasks, 2 seeds

Prints Rich tables, writes capacity_seeds.json and capacity_seeds.png under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from dataclasses import dataclass, fields, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from capacity_policies import OUT, TRACES, ratio
from capstan.capacity import (
    Delay,
    NodeType,
    PlannerConfig,
    Policy,
    Sim,
    Summary,
    Workload,
    load_trace,
    make_policy,
    read_openb_nodes,
    run_policies,
    summarize,
)
from capstan.errors import UserError
from goals import limit

OPENB = TRACES / "alibaba-openb-2023"
GOALS = {key: limit(f"capacity.{key}") for key in ("idle_vs_oracle", "p99_vs_ca", "cost_vs_oracle")}
"""The simulator's goals with the planner's own forecast (bench/goals.py), each an upper bound on a ratio."""
LABELS = {
    "idle_vs_oracle": "idle GPU-h × oracle",
    "p99_vs_ca": "p99 pending × CA",
    "cost_vs_oracle": "cost × oracle",
}


POLICY_SETTINGS = {"review_interval": float, "repack_interval": float}
"""Settings of the controller loop (:class:`Controller`) a variant may set beside the planner's."""


@dataclass(frozen=True)
class Variant:
    """Capstan replayed with these planner and controller-loop settings."""

    name: str
    config: PlannerConfig
    policy: tuple[tuple[str, float], ...] = ()

    def make(self) -> Policy:
        loop = dict(self.policy)  # those not set keep the controller's defaults
        return make_policy(
            "capstan",
            planner=self.config,
            review_interval=loop.get("review_interval"),
            repack_interval=loop.get("repack_interval"),
        )


def parse_variant(text: str) -> Variant:
    """``NAME:key=value[,key=value]`` → a labelled :class:`Variant`: keys are :class:`PlannerConfig` settings
    or ``POLICY_SETTINGS`` (unknown keys and bad values are errors that name the variant)."""
    name, sep, spec = text.partition(":")
    if not sep or not name or not spec:
        raise UserError(f"--variant {text!r}: expected NAME:key=value[,key=value]")
    kinds = {f.name: type(getattr(PlannerConfig(), f.name)) for f in fields(PlannerConfig)}
    kw: dict[str, object] = {}
    policy: list[tuple[str, float]] = []
    for item in spec.split(","):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or (key not in kinds and key not in POLICY_SETTINGS):
            raise UserError(
                f"--variant {text!r}: {key or item!r} is not a PlannerConfig setting nor one of "
                f"{', '.join(POLICY_SETTINGS)}"
            )
        kind = kinds.get(key) or POLICY_SETTINGS[key]
        try:
            got = value.strip().lower() in ("1", "true", "yes") if kind is bool else kind(value)
        except ValueError:
            raise UserError(
                f"--variant {text!r}: {key}={value!r}: expected a value of type {kind.__name__}"
            ) from None
        if key in POLICY_SETTINGS:
            if not (isinstance(got, float) and got > 0 and math.isfinite(got)):
                raise UserError(f"--variant {text!r}: {key}={value!r}: expected a positive number of seconds")
            policy.append((key, got))
        else:
            kw[key] = got
    return Variant(name, PlannerConfig(**kw), tuple(policy))  # type: ignore[arg-type]


def jittered(types: tuple[NodeType, ...], boot: float, jitter: float) -> tuple[NodeType, ...]:
    """The node types with boot delays drawn uniformly within ± ``jitter`` of ``boot`` (fixed if 0)."""
    delay = Delay("uniform", boot * (1 - jitter), boot * (1 + jitter)) if jitter > 0 else Delay("fixed", boot)
    return tuple(replace(t, boot_delay=delay) for t in types)


def verdicts(r: dict[str, object]) -> str:
    """Which goals ``r`` meets: ``all``, the names of those met, or ``none``."""
    met = [k for k, bound in GOALS.items() if float(str(r[k])) <= bound]
    return "all" if len(met) == len(GOALS) else " ".join(k.split("_")[0] for k in met) or "none"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="300 tasks, 2 seeds: runs in seconds")
    ap.add_argument("--trace", type=Path, default=OPENB / "openb_pod_list_default.csv", help="openb pod list")
    ap.add_argument(
        "--nodes", type=Path, default=OPENB / "openb_node_list_all_node.csv", help="openb node list"
    )
    ap.add_argument("--boot-delay", type=float, default=300.0, help="nominal seconds, request → Ready")
    ap.add_argument("--jitter", type=float, default=0.1, help="boot delays uniform within ± this share")
    ap.add_argument("--gpu-ready-delay", type=float, default=90.0, help="seconds, Ready → GPUs allocatable")
    ap.add_argument("--seeds", type=int, default=8, help="seeds 0..N-1")
    ap.add_argument("--max-pods", type=int, default=0, help="replay only the first N tasks (0: all)")
    ap.add_argument(
        "--variant", action="append", default=[], help="NAME:key=value[,…] Capstan settings (repeat)"
    )
    ap.add_argument("--out", type=Path, default=OUT, help="where JSON and the plot go")
    args = ap.parse_args()
    if not 0 <= args.jitter < 1:
        ap.error(f"--jitter {args.jitter}: must be at least 0 and below 1")
    if args.seeds < 1:
        ap.error(f"--seeds {args.seeds}: must be at least 1")
    try:
        variants = [Variant("default", PlannerConfig()), *(parse_variant(v) for v in args.variant)]
        workload = load_trace(str(args.trace))
        types = read_openb_nodes(
            args.nodes, Delay("fixed", args.boot_delay), Delay("fixed", args.gpu_ready_delay)
        )
    except UserError as e:
        ap.error(str(e))
    pods = 300 if args.smoke else args.max_pods
    if pods:
        workload = Workload(workload.name, workload.pods[:pods])
    seeds = list(range(2 if args.smoke else args.seeds))
    types = jittered(types, args.boot_delay, args.jitter)
    console = Console(width=200)
    t0 = time.perf_counter()
    oracle = run_policies(workload, types, ["oracle"])["oracle"][1]
    rows: list[dict[str, object]] = []
    table = Table(
        title=f"{workload.name}: {len(workload.pods)} pods, boot {args.boot_delay:.0f} s ± "
        f"{100 * args.jitter:.0f} %, GPU-ready {args.gpu_ready_delay:.0f} s, oracle cost {oracle.cost:,.1f}"
    )
    for col in (
        "seed",
        "variant",
        "idle GPU-h",
        "× oracle",
        "p99 s",
        "× CA",
        "waited > 60 s",
        "cost",
        "× oracle",
    ):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("goals met")
    for seed in seeds:
        ca = run_policies(workload, types, ["cluster-autoscaler"], seed=seed)["cluster-autoscaler"][1]
        for variant in variants:
            name = variant.name
            s: Summary = summarize(Sim(workload, types, variant.make(), seed=seed).run())
            r: dict[str, object] = {
                "seed": seed,
                "variant": name,
                "loop": dict(variant.policy),
                "idle_gpu_h": s.idle_total,
                "idle_vs_oracle": ratio(s.idle_total, oracle.idle_total),
                "p99_s": s.pending["total"][2],
                "p99_vs_ca": ratio(s.pending["total"][2], ca.pending["total"][2]),
                "slow_starts": s.slow_starts,
                "cost": s.cost,
                "cost_vs_oracle": ratio(s.cost, oracle.cost),
                "ca_idle_gpu_h": ca.idle_total,
                "ca_p99_s": ca.pending["total"][2],
                "problems": len(s.problems) + len(ca.problems),
            }
            r["goals_met"] = verdicts(r)
            rows.append(r)
            table.add_row(
                str(seed),
                name,
                f"{s.idle_total:,.0f}",
                f"{r['idle_vs_oracle']:.3f}",
                f"{r['p99_s']:.0f}",
                f"{r['p99_vs_ca']:.3f}",
                str(s.slow_starts),
                f"{s.cost:,.0f}",
                f"{r['cost_vs_oracle']:.4f}",
                str(r["goals_met"]),
            )
    console.print(table)
    summary = summarize_variants(console, rows, [v.name for v in variants], len(seeds))
    console.print(f"{len(seeds)} seeds × {len(variants)} variants in {time.perf_counter() - t0:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    plot = write_plot(rows, [v.name for v in variants], args.out)
    (args.out / "capacity_seeds.json").write_text(
        json.dumps(
            {
                "smoke": args.smoke,
                "trace": workload.name,
                "pods": len(workload.pods),
                "boot_delay_s": args.boot_delay,
                "jitter": args.jitter,
                "gpu_ready_delay_s": args.gpu_ready_delay,
                "oracle_cost": oracle.cost,
                "goals": GOALS,
                "rows": rows,
                "summary": summary,
            },
            indent=1,
        )
    )
    console.print(f"wrote {args.out / 'capacity_seeds.json'} and {plot}")


def summarize_variants(
    console: Console, rows: list[dict[str, object]], names: list[str], seeds: int
) -> dict[str, dict[str, object]]:
    """Per variant: each ratio's min / median / max over the seeds, and on how many seeds each goal held."""
    table = Table(title="Across seeds: min / median / max, and seeds on which the goal held")
    for col in ("variant", "idle × CA", "p99 × CA", "cost × oracle", "all three goals"):
        table.add_column(col, justify="right")
    out: dict[str, dict[str, object]] = {}
    for name in names:
        mine = [r for r in rows if r["variant"] == name]
        entry: dict[str, object] = {}
        cells = []
        for key, bound in GOALS.items():
            vals = sorted(float(str(r[key])) for r in mine)
            held = sum(v <= bound for v in vals)
            entry[key] = {"min": vals[0], "median": statistics.median(vals), "max": vals[-1], "held": held}
            cells.append(
                f"{vals[0]:.3f} / {statistics.median(vals):.3f} / {vals[-1]:.3f} ({held} of {seeds})"
            )
        entry["all_held"] = sum(r["goals_met"] == "all" for r in mine)
        out[name] = entry
        table.add_row(name, *cells, f"{entry['all_held']} of {seeds}")
    console.print(table)
    return out


def write_plot(rows: list[dict[str, object]], names: list[str], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(11, 4))
    for ax, (key, bound) in zip(axes, GOALS.items(), strict=True):
        for i, name in enumerate(names):
            vals = [float(str(r[key])) for r in rows if r["variant"] == name]
            ax.scatter([i] * len(vals), vals, alpha=0.7, label=name)
        ax.axhline(bound, color="tab:red", linestyle="--", linewidth=1, label=f"goal ≤ {bound}")
        ax.set_xticks(range(len(names)), names, rotation=20, fontsize=7)
        ax.set_title(LABELS[key])
    axes[0].legend(fontsize=7)
    fig.suptitle("Capstan's goal ratios, one point per seed (boot delays drawn at random)")
    fig.tight_layout()
    path = out / "capacity_seeds.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
