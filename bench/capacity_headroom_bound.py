"""What headroom must hold to keep 1 % of pods from waiting a boot, in a fluid model of the planner's headroom.

    .venv/bin/python bench/capacity_headroom_bound.py            # openb default, boot 300 s + GPU-ready 90 s
    .venv/bin/python bench/capacity_headroom_bound.py --smoke    # the first 600 tasks: seconds
    .venv/bin/python bench/capacity_headroom_bound.py --seeds 4   # and across seeds of boot delays (±10 %)
    .venv/bin/python bench/capacity_headroom_bound.py --trace OTHER_OPENB_POD_LIST.csv

The model: headroom is a level of free GPUs held at each moment. A pod asking for GPUs takes its share, and the
share is replaced at once by a node that comes up one boot plus GPU-ready delay later. So a pod waits a boot
only when the pods of the last ``window`` seconds before it (the headroom window: boot plus GPU-ready delay less
the wait a pod may bear, 312 s at a 5-minute boot) took more GPUs than were held; and a level raised now is only
there a boot later. Placement, the free room of busy nodes and departures are left out (they let fewer pods
wait in a replay than here).

Three ways to choose the level, each printed as GPU-hours held and pods that would wait a boot:

- the planner's own forecast (``capstan.capacity.SlidingForecast``), as configured and with
  less headroom (lower quantiles, a shorter recent look-back): the level is the GPUs of the forecast's pods;
- a constant level, held whenever the planner's forecast holds any (so both start and stop together);
- clairvoyant policies: told, at the start of every block of the clock (an hour, 4 h, a day: ``--blocks``),
  which pods that block brings and when, each holds one level through the block, chosen for all blocks together
  to hold the fewest GPU-hours with at most 1 % of pods waiting (Lagrangian over blocks: the points of the lower
  convex hull). No forecast that reads the past can know more about a block's bursts than such a policy is
  told, but one may change its level within the block.

A second table replays the trace (the simulator, as ``capstan capacity simulate`` does) with Capstan's own
forecast, with no headroom, and with headroom from each clairvoyant policy's levels (a ``Forecaster`` told each
block's pods, holding copies of the pods of the block's busiest window from one boot before the block), beside
the cluster-autoscaler emulation and the oracle, as ratios to the goals' references.

Prints a table, writes bench/out/capacity_headroom_bound.json and a plot of GPU-hours held against pods waiting.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from capacity_policies import ratio
from capacity_seeds import GOALS, jittered, verdicts
from capstan.capacity import (
    ClusterAutoscalerPolicy,
    Controller,
    Delay,
    Forecast,
    NodeType,
    OraclePolicy,
    PlannerConfig,
    Pod,
    Policy,
    Sim,
    SlidingForecast,
    Snapshot,
    Workload,
    forecast_lookback,
    gpu_horizon,
    headroom_window,
    read_openb_nodes,
    read_openb_pods,
    summarize,
)

ROOT = Path(__file__).resolve().parents[1]
OPENB = ROOT / ".." / "shared" / "data" / "traces" / "alibaba-openb-2023"
OUT = ROOT / "bench" / "out"

VARIANTS: tuple[tuple[str, PlannerConfig], ...] = (
    ("planner forecast (default)", PlannerConfig()),
    ("forecast quantile 0.98", PlannerConfig(forecast_quantile=0.98)),
    ("forecast quantile 0.97", PlannerConfig(forecast_quantile=0.97)),
    ("quantile 0.97, recent 1 h", PlannerConfig(forecast_quantile=0.97, forecast_recent_s=3600.0)),
    ("no daily bands (10 h look-back)", PlannerConfig(forecast_days=0)),
)


@dataclass(frozen=True)
class Demand:
    """The pods headroom is for (GPU pods outside gangs, by arrival), the GPUs each asks for, and the GPUs the
    pods of the window before each took, itself included."""

    pods: tuple[Pod, ...]
    arrivals: tuple[float, ...]
    gpus: tuple[float, ...]
    trailing: tuple[float, ...]


@dataclass(frozen=True)
class Row:
    label: str
    gpu_hours: float
    waiting: int
    cpu_seconds: float


def demand(workload: Workload, window: float) -> Demand:
    pods = tuple(sorted((p for p in workload.pods if p.wants_gpu and not p.gang), key=lambda p: p.arrival))
    arrivals = tuple(p.arrival for p in pods)
    gpus = tuple(p.gpu_total_milli / 1000 for p in pods)
    sums = [0.0]
    for g in gpus:
        sums.append(sums[-1] + g)
    trailing = tuple(
        sums[i + 1] - sums[bisect.bisect_right(arrivals, a - window)] for i, a in enumerate(arrivals)
    )
    return Demand(pods, arrivals, gpus, trailing)


def forecast_levels(
    workload: Workload, cfg: PlannerConfig, horizon: float, node_types: tuple[NodeType, ...]
) -> tuple[list[float], list[float]]:
    """The planner's headroom level as a step function: (times it changes, level from then), from the first
    arrival to the last one plus a look-back. Evaluated at every arrival and whenever the forecast says it may
    change with no arrival, as the planner's controller does."""
    every = sorted(workload.pods, key=lambda p: (p.arrival, p.name))
    times = [p.arrival for p in every]
    lookback = forecast_lookback(cfg, headroom_window(cfg, horizon))
    sliding = SlidingForecast()
    starts: list[float] = []
    levels: list[float] = []
    now = times[0]
    end = times[-1] + lookback
    i = lo = 0
    for _ in range(4 * len(every) + 100_000):  # arrivals, and the changes between them
        while i < len(every) and times[i] <= now:
            i += 1
        while lo < i and times[lo] <= now - lookback:
            lo += 1
        snap = Snapshot(now=now, node_types=node_types, nodes=(), pending=(), recent=tuple(every[lo:i]))
        fc = sliding.forecast(snap, cfg, headroom_window(cfg, horizon))
        level = sum(p.gpu_total_milli for p in fc.pods) / 1000
        if not levels or level != levels[-1]:
            starts.append(now)
            levels.append(level)
        nxt = [t for t in (times[i] if i < len(every) else None, fc.changes_at) if t is not None]
        if not nxt or now >= end:
            break
        now = min(min(nxt), end)
    return starts, levels


def constant_levels(
    starts: list[float], levels: list[float], level: float
) -> tuple[list[float], list[float]]:
    """``level`` GPUs whenever the forecast's level is not zero, none when it is."""
    out_s: list[float] = []
    out_l: list[float] = []
    for t, x in zip(starts, levels, strict=True):
        held = level if x > 0 else 0.0
        if not out_l or held != out_l[-1]:
            out_s.append(t)
            out_l.append(held)
    return out_s, out_l


def level_at(starts: list[float], levels: list[float], t: float) -> float:
    k = bisect.bisect_right(starts, t) - 1
    return levels[k] if k >= 0 else 0.0


def gpu_hours(starts: list[float], levels: list[float]) -> float:
    return sum(levels[k] * (starts[k + 1] - starts[k]) for k in range(len(starts) - 1)) / 3600


def waiting(d: Demand, starts: list[float], levels: list[float], lag: float) -> int:
    """Pods whose window before them took more than was held (a level raised comes up ``lag`` later)."""
    n = 0
    for a, need in zip(d.arrivals, d.trailing, strict=True):
        held = min(level_at(starts, levels, a), level_at(starts, levels, a - lag))
        n += need > held + 1e-9
    return n


def clairvoyant(
    d: Demand, target: int, block: float = 3600.0
) -> tuple[list[tuple[float, int]], tuple[float, int] | None, dict[int, float]]:
    """The lower convex hull of (GPU-hours held, pods waiting) over levels flat through each ``block`` seconds
    of the clock, its cheapest point with at most ``target`` pods waiting (None if no level meets it), and that
    point's level per block (by index, ``floor(t / block)``)."""
    by_block: dict[int, list[float]] = {}
    for a, need in zip(d.arrivals, d.trailing, strict=True):
        by_block.setdefault(math.floor(a / block), []).append(need)
    # per block, the levels worth holding are the pods' own needs (anything between waits as many as the lower)
    options: dict[int, list[tuple[float, int]]] = {}
    for key, needs in by_block.items():
        levels = [0.0, *sorted(set(needs))]
        options[key] = [(h, sum(1 for x in needs if x > h + 1e-9)) for h in levels]
    hull: list[tuple[float, int]] = []
    best: tuple[float, int] | None = None
    best_levels: dict[int, float] = {}
    for k in range(241):  # λ, the GPU-hours one waiting pod is worth, from 1e-3 to 1e3
        lam = 10 ** (-3 + k * 6 / 240)
        chosen = {key: min(opts, key=lambda o: o[0] + lam * o[1]) for key, opts in options.items()}
        held = sum(h for h, _ in chosen.values()) * block / 3600
        wait = sum(w for _, w in chosen.values())
        hull.append((held, wait))
        if wait <= target and (best is None or held < best[0]):
            best = (held, wait)
            best_levels = {key: h for key, (h, _) in chosen.items()}
    return sorted(set(hull)), best, best_levels


class Clairvoyant:
    """A :class:`~capstan.capacity.Forecaster` told each ``block`` of the clock's pods in advance: from one
    boot and GPU-ready delay (``lead``) before a block begins until it ends it holds that block's level (GPUs,
    the higher of the two blocks while both apply) as copies of the pods of the block's busiest window. Not a
    forecast anyone has: it shows what knowing each block would buy."""

    def __init__(
        self, d: Demand, levels: dict[int, float], window: float, lead: float, block: float = 3600.0
    ) -> None:
        self.levels = levels
        self.lead = lead
        self.block = block
        self.shapes: dict[int, tuple[Pod, ...]] = {}
        by_block: dict[int, list[int]] = {}
        for i, a in enumerate(d.arrivals):
            by_block.setdefault(math.floor(a / block), []).append(i)
        for key, idx in by_block.items():
            # the window (of ``window`` seconds, from a pod's arrival) of the block with the most GPUs
            best = max(
                (
                    (sum(d.gpus[j] for j in idx if a <= d.arrivals[j] < a + window), -k)
                    for k, a in enumerate(d.arrivals[i] for i in idx)
                ),
                default=(0.0, 0),
            )
            start = d.arrivals[idx[-best[1]]]
            self.shapes[key] = tuple(d.pods[j] for j in idx if start <= d.arrivals[j] < start + window)

    def forecast(self, snap: Snapshot, cfg: PlannerConfig, horizon: float) -> Forecast:
        now, block = snap.now, self.block
        keys = {math.floor(now / block), math.floor((now + self.lead) / block)}
        key = max(sorted(keys), key=lambda k: self.levels.get(k, 0.0))
        # the next time either block changes
        at = min(
            (math.floor(now / block) + 1) * block,
            (math.floor((now + self.lead) / block) + 1) * block - self.lead,
        )
        at = max(at, math.nextafter(now, math.inf))
        level = self.levels.get(key, 0.0)
        shapes = self.shapes.get(key, ())
        pods: list[Pod] = []
        held = 0.0
        for k in range(256):  # bounded: copies of the window's pods until they add up to the level
            if held >= level - 1e-9 or not shapes:
                break
            p = shapes[k % len(shapes)]
            pods.append(replace(p, name=f"{p.name}~{key}-{k}"))
            held += p.gpu_total_milli / 1000
        return Forecast(tuple(pods), at)


def replays(
    workload: Workload, types: tuple[NodeType, ...], told: list[tuple[str, Clairvoyant]]
) -> list[dict[str, object]]:
    """Capstan's replay with its forecast, with none, and with each clairvoyant forecaster of ``told``, beside
    the cluster-autoscaler emulation and the oracle (the goals' references)."""
    policies: list[tuple[str, Policy]] = [
        ("cluster-autoscaler", ClusterAutoscalerPolicy()),
        ("oracle", OraclePolicy()),
        ("capstan (its forecast)", Controller()),
        ("capstan, no headroom", Controller(PlannerConfig(headroom=False))),
        *((f"capstan, told each {label}", Controller(forecaster=f)) for label, f in told),
    ]
    out: list[dict[str, object]] = []
    for label, policy in policies:
        t0 = time.process_time()
        s = summarize(Sim(workload, types, policy, seed=0).run())
        out.append(
            {
                "policy": label,
                "cost": s.cost,
                "idle_gpu_hours": s.idle_total,
                "headroom_idle_gpu_hours": s.idle.get("headroom", 0.0),
                "p99_s": s.pending["total"][2],
                "slow_starts": s.slow_starts,
                "launches": s.launches,
                "problems": len(s.problems),
                "cpu_seconds": time.process_time() - t0,
            }
        )
    return out


def seeded_replays(
    workload: Workload,
    types: tuple[NodeType, ...],
    told: list[tuple[str, Clairvoyant]],
    seed: int,
    boot: float,
    oracle_cost: float,
    oracle_idle: float,
) -> list[dict[str, object]]:
    """One seed of boot delays drawn within ±10 % (as ``capacity_seeds.py`` draws them): Capstan with its own
    forecast and with each clairvoyant one, as ratios to that seed's cluster-autoscaler emulation and to the
    oracle (whose nodes are up at once, so no draw changes it)."""
    drawn = jittered(types, boot, 0.1)
    ca = summarize(Sim(workload, drawn, ClusterAutoscalerPolicy(), seed=seed).run())
    out: list[dict[str, object]] = []
    policies = [("capstan (its forecast)", Controller())]
    policies += [(f"capstan, told each {label}", Controller(forecaster=f)) for label, f in told]
    for label, policy in policies:
        s = summarize(Sim(workload, drawn, policy, seed=seed).run())
        r: dict[str, object] = {
            "policy": label,
            "seed": seed,
            "cost_vs_oracle": ratio(s.cost, oracle_cost),
            "idle_vs_oracle": ratio(s.idle_total, oracle_idle),
            "p99_vs_ca": ratio(s.pending["total"][2], ca.pending["total"][2]),
            "slow_starts": s.slow_starts,
        }
        r["goals_met"] = verdicts(r)  # the seeds bench's verdict on the goals with the planner's own forecast
        out.append(r)
    return out


def seeds_table(rows: list[dict[str, object]], seeds: int) -> Table:
    table = Table(
        title=f"Across {seeds} seeds, boot delays within ±10 % (min–max; goals met on how many seeds)"
    )
    for col in (
        "policy",
        "cost × oracle",
        "idle × oracle",
        "p99 × CA",
        "waited > 60 s",
        "all three goals met",
    ):
        table.add_column(col, justify="right")
    for label in dict.fromkeys(str(r["policy"]) for r in rows):
        mine = [r for r in rows if r["policy"] == label]

        def span(key: str, fmt: str, mine: list[dict[str, object]] = mine) -> str:
            values = [float(str(r[key])) for r in mine]
            return f"{min(values):{fmt}}–{max(values):{fmt}}"

        met = sum(r["goals_met"] == "all" for r in mine)
        table.add_row(
            label,
            span("cost_vs_oracle", ".3f"),
            span("idle_vs_oracle", ".3f"),
            span("p99_vs_ca", ".3f"),
            span("slow_starts", ".0f"),
            f"{met} of {len(mine)}",
        )
    return table


def replay_table(rows: list[dict[str, object]]) -> Table:
    ca = next(r for r in rows if r["policy"] == "cluster-autoscaler")
    oracle = next(r for r in rows if r["policy"] == "oracle")

    def against(r: dict[str, object], ref: dict[str, object], key: str) -> str:
        return f"{ratio(float(str(r[key])), float(str(ref[key]))):.3f}"

    goals = (
        f"idle ≤ {GOALS['idle_vs_oracle']}× the oracle's, p99 ≤ {GOALS['p99_vs_ca']}× CA's, "
        f"cost ≤ {GOALS['cost_vs_oracle']}× the oracle's"
    )
    table = Table(title=f"Replays (goals: {goals})")
    for col in (
        "policy",
        "cost",
        "× oracle",
        "idle GPU-h",
        "× oracle",
        "p99 s",
        "× CA",
        "waited > 60 s",
        "CPU s",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["policy"]),
            f"{float(str(r['cost'])):,.1f}",
            against(r, oracle, "cost"),
            f"{float(str(r['idle_gpu_hours'])):,.0f}",
            against(r, oracle, "idle_gpu_hours"),
            f"{float(str(r['p99_s'])):.0f}",
            against(r, ca, "p99_s"),
            str(r["slow_starts"]),
            f"{float(str(r['cpu_seconds'])):.1f}",
        )
    return table


def _blocks(text: str) -> tuple[float, ...]:
    try:
        out = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--blocks {text!r}: comma-separated seconds, e.g. 3600,14400"
        ) from None
    if not out or min(out) <= 0:
        raise argparse.ArgumentTypeError(f"--blocks {text!r}: every block must be longer than 0 s")
    return out


def _block_label(block: float) -> str:
    if block % 86400 == 0:
        n = int(block // 86400)
        return "day" if n == 1 else f"{n} days"
    if block % 3600 == 0:
        n = int(block // 3600)
        return "hour" if n == 1 else f"{n} h"
    return f"{block:g} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="the first 600 tasks: seconds")
    ap.add_argument("--trace", type=Path, default=OPENB / "openb_pod_list_default.csv", help="openb pod list")
    ap.add_argument(
        "--nodes", type=Path, default=OPENB / "openb_node_list_all_node.csv", help="openb node list"
    )
    ap.add_argument("--boot-delay", type=float, default=300.0, help="seconds, request → Ready")
    ap.add_argument("--gpu-ready-delay", type=float, default=90.0, help="seconds, Ready → GPUs allocatable")
    ap.add_argument("--max-pods", type=int, default=0, help="only the first N tasks (0: all)")
    ap.add_argument("--no-replay", action="store_true", help="leave out the replays")
    ap.add_argument(
        "--seeds",
        type=int,
        default=0,
        help="also replay Capstan (its forecast and each clairvoyant one) on seeds 0..N-1 of boot delays "
        "within ±10 %%",
    )
    ap.add_argument(
        "--blocks",
        type=_blocks,
        default=(3600.0, 14400.0, 86400.0),
        help="comma-separated seconds: the clairvoyant policies are told each block of this length in advance",
    )
    ap.add_argument("--out", type=Path, default=OUT, help="where JSON and the plot go")
    args = ap.parse_args()
    if args.seeds < 0:
        ap.error(f"--seeds {args.seeds}: must be 0 or more")
    types = read_openb_nodes(
        args.nodes, Delay("fixed", args.boot_delay), Delay("fixed", args.gpu_ready_delay)
    )
    workload = read_openb_pods(args.trace)
    limit = 600 if args.smoke else args.max_pods
    if limit:
        workload = replace(workload, pods=workload.pods[:limit])
    horizon = gpu_horizon(types)
    window = headroom_window(PlannerConfig(), horizon)
    target = len(workload.pods) // 100
    d = demand(workload, window)
    console = Console(width=150)
    table = Table(
        title=f"{args.trace.name}: {len(workload.pods)} pods, {len(d.pods)} asking for GPUs; headroom window "
        f"{window:.0f} s, a raised level up {horizon:.0f} s later; 1 % of pods = {target}"
    )
    for col in ("headroom level chosen by", "GPU-h held", "pods waiting a boot", "share of pods", "CPU s"):
        table.add_column(col, justify="right")
    rows: list[Row] = []

    def add(label: str, held: float, wait: int, cpu: float) -> None:
        rows.append(Row(label, held, wait, cpu))
        table.add_row(label, f"{held:,.0f}", str(wait), f"{wait / len(workload.pods):.2%}", f"{cpu:.1f}")

    default: tuple[list[float], list[float]] | None = None
    for label, cfg in VARIANTS:
        t0 = time.process_time()
        starts, levels = forecast_levels(workload, cfg, horizon, types)
        default = default or (starts, levels)
        add(label, gpu_hours(starts, levels), waiting(d, starts, levels, horizon), time.process_time() - t0)
    assert default is not None
    # a constant level held while the default forecast holds any: the least that meets the target, and the
    # least that lets no more pods wait than the default forecast does
    t0 = time.process_time()
    points = []  # (level, GPU-h, waiting), a quarter GPU apart up to twice the forecast's highest level
    for k in range(8 * math.ceil(max(default[1], default=0.0)) + 1):  # bounded by the forecast's peak
        s, lv = constant_levels(*default, k / 4)
        points.append((k / 4, gpu_hours(s, lv), waiting(d, s, lv, horizon)))
    cpu = time.process_time() - t0
    for label, bound in (
        (f"constant, ≤ {target} waiting", target),
        ("constant, ≤ the default's waiting", rows[0].waiting),
    ):
        met = [p for p in points if p[2] <= bound]
        if met:
            level, held, wait = min(met, key=lambda p: p[1])
            add(f"{label} ({level:g} GPUs)", held, wait, cpu)
        else:
            table.add_row(label, "—", "no level meets it", "", f"{cpu:.1f}")
    told: list[tuple[str, Clairvoyant]] = []
    hulls: dict[str, list[tuple[float, int]]] = {}
    for block in args.blocks:
        label = _block_label(block)
        t0 = time.process_time()
        hull, best, block_levels = clairvoyant(d, target, block)
        cpu = time.process_time() - t0
        hulls[label] = hull
        if best is not None:
            add(f"told each {label}'s pods, ≤ {target} waiting", best[0], best[1], cpu)
            told.append((label, Clairvoyant(d, block_levels, window, horizon, block)))
        else:
            table.add_row(
                f"told each {label}'s pods, ≤ {target} waiting", "—", "no level meets it", "", f"{cpu:.1f}"
            )
    console.print(table)
    replayed: list[dict[str, object]] = []
    seeded: list[dict[str, object]] = []
    if not args.no_replay:
        replayed = replays(workload, types, told)
        console.print(replay_table(replayed))
        oracle = next(r for r in replayed if r["policy"] == "oracle")
        oracle_cost, oracle_idle = float(str(oracle["cost"])), float(str(oracle["idle_gpu_hours"]))
        for seed in range(args.seeds):
            seeded.extend(
                seeded_replays(workload, types, told, seed, args.boot_delay, oracle_cost, oracle_idle)
            )
        if seeded:
            console.print(seeds_table(seeded, args.seeds))
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "smoke": args.smoke,
        "trace": str(args.trace),
        "pods": len(workload.pods),
        "window_s": window,
        "horizon_s": horizon,
        "target": target,
        "rows": [asdict(r) for r in rows],
        "clairvoyant_hulls": hulls,
        "constant": points,
        "replays": replayed,
        "seeded": seeded,
    }
    (args.out / "capacity_headroom_bound.json").write_text(json.dumps(result, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for (label, hull), style in zip(hulls.items(), ("k.-", "k.--", "k.:", "k.-."), strict=False):
        ax.plot(
            [w for _, w in hull], [h for h, _ in hull], style, label=f"told each {label} (flat through it)"
        )
    ax.plot([w for _, _, w in points], [h for _, h, _ in points], ".-", color="grey", label="constant level")
    for r, marker in zip((r for r in rows if r.label in dict(VARIANTS)), "os^vD", strict=False):
        ax.scatter([r.waiting], [r.gpu_hours], marker=marker, label=r.label, zorder=3)
    ax.set_xlim(left=0)
    ax.set_ylim(0, 2 * max(r.gpu_hours for r in rows))
    ax.axvline(target, color="red", linestyle="--", label="1 % of pods")
    ax.set_xscale("symlog")
    ax.set_xlabel("pods waiting a boot (model)")
    ax.set_ylabel("GPU-hours of headroom held")
    ax.legend(fontsize=7)
    fig.tight_layout()
    (args.out / "capacity").mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / "capacity" / "headroom_bound.png", dpi=110)
    console.print(f"wrote {args.out / 'capacity_headroom_bound.json'}")


if __name__ == "__main__":
    main()
