"""Cache-aware routing on the virtual clock: policies side by side over the same simulated replicas.

The router's scheduler (the same code the HTTP gateway runs) drives ``--replicas`` simulated vLLM engines
(``capstan.enginesim``) through whole workloads in seconds, with no HTTP:

1. A Mooncake-format trace (``--trace``, default the shared conversation trace): every policy at every point of
   per-replica KV capacity (``--kv-tokens``, default a sweep from ~300k tokens up to where the replicas together
   hold the trace's working set) × load factor (``--load``: arrival rate over the recorded one, 0.5 = half the rate,
   timestamps stretched by 2), each next to the pooled-cache reference (one LRU holding all replicas' blocks) and
   the infinite-cache bound. Requests the engines reject (longer than the context, or than one replica's cache)
   are counted and left out of both references, by the engine's own rule. Tables are titled with the trace's file
   name.
2. Synthetic agentic sessions (closed loop: a turn follows the previous answer after a think time).

Figures: prefix-cache hit ratio from the engines' counters, TTFT p50/p90/p99, output throughput, GPU-seconds per
request (engine busy time), router decision latency p50/p99 (in the run, and "quiet": 300 decisions re-timed
against the final state, fastest of five, to remove a shared machine's preemption noise), busiest replica's prefill
work over the mean, prefix-index entries. Prints Rich tables, writes PNG plots and a JSON file under bench/out/. ``--smoke`` runs in
seconds (a test runs it).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from capstan.config import load_model
from capstan.enginesim import EngineConfig, get_preset
from capstan.errors import UserError
from capstan.kvcache import DEFAULT_BLOCK_SIZE
from capstan.percentile import percentile
from capstan.replay import AgenticConfig, agentic_requests
from capstan.route import (
    SchedulerConfig,
    SimRequest,
    SimResult,
    from_replay_requests,
    mooncake_requests,
    pooled_cache_reference,
    recommended_scheduler,
    simulate,
)
from goals import limit

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared/data/traces/mooncake-fast25/conversation_trace.jsonl"
console = Console(width=200)

# The policies compared. Capstan's: its recommended scheduler (capstan.route.recommended_scheduler, the tuning runs
# in docs/benchmarks.md and benchmarks-history.md) and the same scorers over the approximate index.
LLMD_SCORERS = [
    {"type": "prefix", "weight": 3},
    {"type": "queue", "weight": 2},
    {"type": "kv-utilization", "weight": 2},
]


def policies() -> dict[str, dict[str, Any]]:
    recommended = recommended_scheduler().model_dump(mode="json")
    return {
        "capstan-precise": recommended,
        # the same without the in-flight overlay: what the KV events alone give (the index before issue 28)
        "capstan-precise-events": {**recommended, "prefix": {"kind": "precise", "inflight": False}},
        "capstan-approx": {**recommended, "prefix": {"kind": "approximate"}},
        # llm-d's precise scorer reads the KV events only
        "llmd-weights-precise": {"prefix": {"kind": "precise", "inflight": False}, "scorers": LLMD_SCORERS},
        "llmd-weights-approx": {"prefix": {"kind": "approximate"}, "scorers": LLMD_SCORERS},
        "least-loaded": {"prefix": {"kind": "none"}, "scorers": [{"type": "in-flight", "weight": 1}]},
        "round-robin": {"prefix": {"kind": "none"}, "picker": {"type": "round-robin"}},
        "random": {"prefix": {"kind": "none"}, "picker": {"type": "random"}},
    }


SWEEP_POLICIES = [
    "capstan-precise",
    "capstan-precise-events",
    "capstan-approx",
    "llmd-weights-precise",
    "round-robin",
]  # plotted

# Agentic shapes. "chat": short tool-using sessions on three shared agent prompts (AgenticConfig's defaults).
# "coding": llm-d-benchmark's agentic_code_generation profile (shared system prompt 3,000 tokens, a per-session
# context of mean 160k tokens, 540 turns of 1,500 input and 425 output tokens, 15 s of tool latency) with the
# context and the turn count scaled by 1/10 so a run takes minutes: 16k tokens of context, 20-60 turns.
AGENTIC_SHAPES: dict[str, dict[str, Any]] = {
    "chat": {},
    "coding": {
        "agent_types": 1,
        "system_tokens": 3000,
        "tools": 0,
        "user_tokens": 16000,
        "turns_min": 20,
        "turns_max": 60,
        "tool_output_tokens": 1500,
        "answer_tokens": 425,
        "think_time_s": 15.0,
        "user_followup_prob": 0.0,
    },
}


def run_policy(
    reqs: list[SimRequest],
    name: str,
    engine: EngineConfig,
    replicas: int,
    assume_cached: dict[str, int] | None = None,
) -> tuple[SimResult, float]:
    cfg = load_model(SchedulerConfig, policies()[name], name)
    gc.collect()
    t0 = time.perf_counter()
    res = simulate(reqs, cfg, engine, replicas, name=name, quiet_decisions=300, assume_cached=assume_cached)
    return res, time.perf_counter() - t0


def row(res: SimResult, pooled: float, wall: float) -> dict[str, Any]:
    return {
        "policy": res.policy,
        "hit": res.hit_ratio,
        "hit_vs_pooled": res.hit_ratio / pooled if pooled else float("nan"),
        "ttft_p50": percentile(res.ttft, 50),
        "ttft_p90": percentile(res.ttft, 90),
        "ttft_p99": percentile(res.ttft, 99),
        "throughput_tok_s": res.throughput_tok_s,
        "gpu_s_per_req": res.gpu_seconds_per_request,
        "prefill_tokens_per_req": sum(r.prefill_tokens for r in res.replicas) / max(1, len(res.ttft)),
        "decision_p50_us": percentile(res.decision_s, 50) * 1e6,
        "decision_p99_us": percentile(res.decision_s, 99) * 1e6,
        "learn_p99_us": percentile(res.learn_s, 99) * 1e6,
        "quiet_decision_p50_us": res.extra.get("quiet_p50_s", float("nan")) * 1e6,
        "quiet_decision_p99_us": res.extra.get("quiet_p99_s", float("nan")) * 1e6,
        "busiest_prefill_over_mean": res.prefill_imbalance,
        "index_entries": res.index_entries,
        "rejected": res.rejected,
        "sim_wall_s": wall,
    }


def against_round_robin(rows: list[dict[str, Any]]) -> None:
    """Each row's prefill work and GPU time as ratios to round-robin's (in the same point)."""
    rr = next(r for r in rows if r["policy"] == "round-robin")
    for r in rows:
        r["gpu_s_vs_round_robin"] = (
            r["gpu_s_per_req"] / rr["gpu_s_per_req"] if rr["gpu_s_per_req"] else float("nan")
        )
        r["prefill_vs_round_robin"] = r["prefill_tokens_per_req"] / max(1e-9, rr["prefill_tokens_per_req"])


def print_table(title: str, rows: list[dict[str, Any]], pooled: float, bound: float, rejected: int) -> None:
    t = Table(title=title)
    cols = [
        ("policy", "policy", "{}"),
        ("hit", "hit", "{:.3f}"),
        ("hit/pooled", "hit_vs_pooled", "{:.3f}"),
        ("TTFT p50 s", "ttft_p50", "{:.3f}"),
        ("p90", "ttft_p90", "{:.3f}"),
        ("p99", "ttft_p99", "{:.3f}"),
        ("out tok/s", "throughput_tok_s", "{:.0f}"),
        ("GPU-s/req", "gpu_s_per_req", "{:.3f}"),
        ("decide p50 µs", "decision_p50_us", "{:.0f}"),
        ("p99 µs", "decision_p99_us", "{:.0f}"),
        ("learn p99 µs", "learn_p99_us", "{:.0f}"),
        ("quiet p50 µs", "quiet_decision_p50_us", "{:.0f}"),
        ("quiet p99 µs", "quiet_decision_p99_us", "{:.0f}"),
        ("busiest prefill/mean", "busiest_prefill_over_mean", "{:.2f}"),
        ("prefill ÷ RR", "prefill_vs_round_robin", "{:.2f}"),
        ("index entries", "index_entries", "{:,}"),
        ("rejected", "rejected", "{:,}"),
    ]
    for label, _, _ in cols:
        t.add_column(label, justify="right" if label != "policy" else "left", no_wrap=label == "policy")
    for r in rows:
        t.add_row(*(fmt.format(r[key]) for _, key, fmt in cols))
    console.print(t)
    console.print(
        f"  pooled-cache reference hit {pooled:.3f}; infinite-cache bound {bound:.3f}"
        + (f"; {rejected:,} requests the engines reject, left out of both" if rejected else "")
    )


def prefill_capacity_tok_s(engine: EngineConfig) -> float:
    """Prompt tokens one replica computes per second at most: full chunks of ``max_num_batched_tokens`` back to
    back, decode left out (so it is an upper bound)."""
    chunk = engine.max_num_batched_tokens
    return chunk / engine.latency.step_time(chunk, 0)


def saturation_load(
    uncached_tokens: int, recorded_span_s: float, engine: EngineConfig, replicas: int
) -> float:
    """The load factor at which the pooled reference's uncached prefill work (prompt tokens it does not hit)
    equals the replicas' prefill capacity over the trace's recorded span stretched by the load. The pooled
    reference depends on the order of arrivals only, so its uncached work is the same at every load; above this
    load no routing can keep up, whatever it hits (inf: no uncached work)."""
    if uncached_tokens <= 0:
        return float("inf")
    return replicas * prefill_capacity_tok_s(engine) * recorded_span_s / uncached_tokens


def print_load_table(
    name: str,
    replicas: int,
    sweep: list[dict[str, Any]],
    loads: list[float],
    caps: list[int],
    saturation: dict[int, float],
) -> None:
    """Hit ratio over the pooled reference as a function of load, one row per (capacity, policy), loads above the
    capacity's saturation point marked "*"; then the goal's verdict for Capstan's recommended policy."""
    goal = limit("route.mooncake_hit_under_load")
    t = Table(title=f"{name}: hit / pooled by load (* = above saturation), {replicas} replicas")
    t.add_column("KV tokens/replica", justify="right")
    t.add_column("saturation load", justify="right")
    t.add_column("policy", no_wrap=True)
    for load in loads:
        t.add_column(f"{load:g}", justify="right")
    t.add_column("worst busiest prefill/mean ≤ sat.", justify="right")
    by = {(p["kv_tokens_per_replica"] // DEFAULT_BLOCK_SIZE, p["load"]): p for p in sweep}
    names = [r["policy"] for r in sweep[0]["rows"]]
    for cap in caps:
        sat = saturation[cap]
        for policy in names:
            cells = []
            worst = 0.0
            for load in loads:
                r = next(x for x in by[(cap, load)]["rows"] if x["policy"] == policy)
                cells.append(f"{r['hit_vs_pooled']:.3f}" + ("*" if load > sat else ""))
                if load <= sat:
                    worst = max(worst, r["busiest_prefill_over_mean"])
            t.add_row(f"{cap * DEFAULT_BLOCK_SIZE:,}", f"{sat:.3f}", policy, *cells, f"{worst:.2f}")
    console.print(t)
    misses = []
    for p in sweep:
        if p["load"] > p["saturation_load"]:
            continue
        r = next(x for x in p["rows"] if x["policy"] == "capstan-precise")
        if r["hit_vs_pooled"] < goal or r["busiest_prefill_over_mean"] > 1.2:
            misses.append(
                f"{p['kv_tokens_per_replica']:,} tokens at load {p['load']:g}: {r['hit_vs_pooled']:.3f} of pooled, "
                f"busiest prefill {r['busiest_prefill_over_mean']:.2f}× the mean"
            )
    console.print(
        f"  route.mooncake_hit_under_load (capstan-precise ≥ {goal} of pooled, busiest prefill ≤ 1.2× the mean, "
        "at every point up to saturation): " + ("met" if not misses else "missed at " + "; ".join(misses))
    )


def working_set_blocks(reqs: list[SimRequest]) -> int:
    seen: set[int] = set()
    for r in reqs:
        seen.update(r.block_hashes)
    return len(seen)


def parse_list(text: str, option: str, convert: Callable[[str], float], what: str) -> list[float]:
    """A comma-separated list of positive numbers, or a UserError naming the option."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UserError(f"{option} {text!r}: give at least one {what}")
    out = []
    for item in items:
        try:
            value = convert(item)
        except ValueError:
            raise UserError(f"{option} {text!r}: {item!r} is not a number") from None
        if not value > 0 or value == float("inf"):
            raise UserError(f"{option} {text!r}: {item!r} must be a positive {what}")
        out.append(value)
    return out


def main() -> None:
    try:
        run()
    except UserError as exc:  # bad input: one line, exit 2
        print(f"route_sim.py: {exc}", file=sys.stderr)
        sys.exit(2)


def run() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="seconds-long run")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--preset", default="llama-3.1-8b-h100")
    ap.add_argument(
        "--trace",
        type=Path,
        default=TRACE,
        help="a Mooncake-format JSONL trace (default: the shared conversation trace)",
    )
    ap.add_argument("--mooncake-limit", type=int, default=3000, help="first N requests of the trace")
    ap.add_argument(
        "--load",
        "--mooncake-time-scale",
        dest="load",
        default="0.5",
        help="load factors, comma-separated: arrival rate over the trace's (0.5: half the rate, timestamps "
        "stretched by 2; 2: twice the rate)",
    )
    ap.add_argument(
        "--kv-tokens",
        default=None,
        help="KV capacities per replica in tokens, comma-separated (default: --sweep-points from 300k tokens "
        "up to the trace's working set / replicas)",
    )
    ap.add_argument("--sweep-points", type=int, default=4)
    ap.add_argument("--agentic-sessions", type=int, default=300)
    ap.add_argument("--agentic-rate", type=float, default=4.0, help="new sessions per second")
    ap.add_argument("--agentic-shape", choices=sorted(AGENTIC_SHAPES), default="chat")
    ap.add_argument(
        "--agentic-answer-tokens",
        type=int,
        default=None,
        help="mean output tokens per turn instead of the shape's (e.g. short tool calls)",
    )
    ap.add_argument(
        "--policies",
        default=None,
        help="policies to run, comma-separated (default: all; round-robin always runs, the ratios need it)",
    )
    ap.add_argument("--no-agentic", action="store_true", help="the trace sweep only")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/out")
    args = ap.parse_args()
    known = list(policies())
    chosen = known
    if args.policies is not None:
        asked = [p.strip() for p in args.policies.split(",") if p.strip()]
        unknown = [p for p in asked if p not in known]
        if unknown or not asked:
            raise UserError(
                f"--policies {args.policies!r}: unknown {unknown or 'none given'}; known: {', '.join(known)}"
            )
        chosen = [p for p in known if p in asked or p == "round-robin"]
    if args.agentic_answer_tokens is not None and args.agentic_answer_tokens < 1:
        raise UserError("--agentic-answer-tokens must be at least 1")
    loads = parse_list(args.load, "--load", float, "load factor")
    kv_tokens = None if args.kv_tokens is None else parse_list(args.kv_tokens, "--kv-tokens", int, "capacity")
    for tokens in kv_tokens or []:
        if tokens < DEFAULT_BLOCK_SIZE:
            raise UserError(
                f"--kv-tokens: {tokens:g} is less than one KV block ({DEFAULT_BLOCK_SIZE} tokens)"
            )
    if args.smoke:
        args.replicas, args.mooncake_limit, args.sweep_points = 4, 150, 2
        args.agentic_sessions = 12 if args.agentic_shape == "chat" else 2
    args.out.mkdir(parents=True, exist_ok=True)
    preset = get_preset(args.preset)
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": {k: str(v) for k, v in vars(args).items()},
    }

    # ---- 1. The trace: every policy at every (capacity, load) point ---------------------------------------
    name = args.trace.name
    base = mooncake_requests(args.trace, limit=args.mooncake_limit)
    if not base:
        raise UserError(f"{args.trace}: no requests")
    ws = working_set_blocks(base)
    if kv_tokens is not None:
        caps = sorted({int(t) // DEFAULT_BLOCK_SIZE for t in kv_tokens})
    else:
        lo = 18_750  # 300k tokens per replica, an H100-realistic size
        hi = max(lo, -(-ws // args.replicas))
        points = args.sweep_points
        caps = sorted({round(lo * (hi / lo) ** (i / max(1, points - 1))) for i in range(points)})
    console.print(
        f"{name}: {len(base)} requests over {base[-1].arrival - base[0].arrival:.0f} s as recorded, working set "
        f"{ws:,} blocks ({ws * DEFAULT_BLOCK_SIZE:,} tokens); per-replica capacity "
        f"{[c * DEFAULT_BLOCK_SIZE for c in caps]} tokens × load {loads}"
    )
    sweep: list[dict[str, Any]] = []
    recorded_span = base[-1].arrival - base[0].arrival
    saturation: dict[int, float] = {}
    for cap in caps:  # the pooled reference sees only the order of arrivals: its uncached work is load-free
        engine = EngineConfig(latency=preset.latency, num_gpu_blocks=cap, max_num_seqs=preset.max_num_seqs)
        ref = pooled_cache_reference(base, cap * args.replicas, engine=engine)
        saturation[cap] = saturation_load(ref.queries - ref.hits, recorded_span, engine, args.replicas)
        console.print(
            f"  {cap * DEFAULT_BLOCK_SIZE:,} KV tokens/replica: pooled reference leaves "
            f"{ref.queries - ref.hits:,} prompt tokens to compute; {args.replicas} replicas prefill at most "
            f"{args.replicas * prefill_capacity_tok_s(engine):,.0f} tok/s, so saturation at load "
            f"{saturation[cap]:.3f} (the pooled work needs {1 / saturation[cap]:.3f} of their prefill "
            "capacity at load 1)"
        )
    for load in loads:
        reqs = [replace(r, arrival=r.arrival / load) for r in base]
        for cap in caps:
            engine = EngineConfig(
                latency=preset.latency, num_gpu_blocks=cap, max_num_seqs=preset.max_num_seqs
            )
            ref = pooled_cache_reference(reqs, cap * args.replicas, engine=engine)
            bound = pooled_cache_reference(reqs, None, engine=engine).hit_ratio
            rows = []
            for policy in chosen:
                res, wall = run_policy(reqs, policy, engine, args.replicas)
                rows.append(row(res, ref.hit_ratio, wall))
            against_round_robin(rows)
            print_table(
                f"{name}, load {load:g}, {args.replicas} replicas × {cap * DEFAULT_BLOCK_SIZE:,} KV tokens",
                rows,
                ref.hit_ratio,
                bound,
                ref.rejected,
            )
            sweep.append(
                {
                    "kv_tokens_per_replica": cap * DEFAULT_BLOCK_SIZE,
                    "load": load,
                    "arrival_span_s": reqs[-1].arrival - reqs[0].arrival,
                    "pooled": ref.hit_ratio,
                    "saturation_load": saturation[cap],
                    "bound": bound,
                    "rejected": ref.rejected,
                    "rows": rows,
                }
            )
    summary = Table(title=f"{name}: every point, {args.replicas} replicas")
    for label in (
        "KV tokens/replica",
        "load",
        "policy",
        "hit",
        "hit/pooled",
        "TTFT p90",
        "prefill ÷ RR",
        "rejected",
    ):
        summary.add_column(label, justify="left" if label == "policy" else "right", no_wrap=label == "policy")
    for point in sweep:
        for r in point["rows"]:
            summary.add_row(
                f"{point['kv_tokens_per_replica']:,}",
                f"{point['load']:g}",
                r["policy"],
                f"{r['hit']:.3f}",
                f"{r['hit_vs_pooled']:.3f}",
                f"{r['ttft_p90']:.3f}",
                f"{r['prefill_vs_round_robin']:.2f}",
                f"{r['rejected']:,}",
            )
    console.print(summary)
    print_load_table(name, args.replicas, sweep, loads, caps, saturation)
    results["trace"] = {
        "name": name,
        "path": str(args.trace),
        "requests": len(base),
        "working_set_blocks": ws,
        "loads": loads,
        "kv_tokens_per_replica": [c * DEFAULT_BLOCK_SIZE for c in caps],
        "saturation_load": {str(c * DEFAULT_BLOCK_SIZE): saturation[c] for c in caps},
        "points": sweep,
    }

    # ---- 2. Agentic sessions -------------------------------------------------------------------------------
    rows = run_agentic(args, preset, chosen, results) if not args.no_agentic else []
    plot(args, name, loads, sweep, rows, [p for p in SWEEP_POLICIES if p in chosen])
    (args.out / "route_sim.json").write_text(json.dumps(results, indent=1))
    console.print(f"wrote {args.out}/route_sim_hit_vs_capacity.png, route_sim_ttft_p90.png, route_sim.json")


def run_agentic(
    args: argparse.Namespace, preset: Any, chosen: list[str], results: dict[str, Any]
) -> list[dict[str, Any]]:
    """Part 2: every chosen policy on agentic sessions, against round-robin and the cache-bound optimum."""
    acfg = AgenticConfig(
        sessions=args.agentic_sessions,
        session_rate=args.agentic_rate,
        **{
            **AGENTIC_SHAPES[args.agentic_shape],
            **({"answer_tokens": args.agentic_answer_tokens} if args.agentic_answer_tokens else {}),
        },
    )
    areqs = from_replay_requests(agentic_requests(acfg))
    engine = EngineConfig(
        latency=preset.latency, num_gpu_blocks=preset.num_gpu_blocks, max_num_seqs=preset.max_num_seqs
    )
    aref = pooled_cache_reference(areqs, preset.num_gpu_blocks * args.replicas, engine=engine)
    pooled = aref.hit_ratio
    bound_ref = pooled_cache_reference(areqs, None, engine=engine)
    abound = bound_ref.hit_ratio
    rows = []
    for policy in chosen:
        res, wall = run_policy(areqs, policy, engine, args.replicas)
        rows.append(row(res, pooled, wall))
        # the cache-bound optimum of the same routing: every request finds all that any earlier one computed
        optimum, _ = run_policy(areqs, policy, engine, args.replicas, assume_cached=bound_ref.blocks_hit)
        rows[-1]["optimum_gpu_s_per_req"] = optimum.gpu_seconds_per_request
        rows[-1]["busy_vs_bound"] = (
            res.gpu_seconds_per_request / optimum.gpu_seconds_per_request
            if optimum.gpu_seconds_per_request
            else float("nan")
        )
    # the routing whose optimum is cheapest also batches best (decode shares a step's fixed time): against it,
    # what a policy loses to misses and to batching together
    best = min(r["optimum_gpu_s_per_req"] for r in rows)
    for r in rows:
        r["busy_vs_best_bound"] = r["gpu_s_per_req"] / best if best else float("nan")
    against_round_robin(rows)
    print_table(
        f"Agentic sessions, {args.agentic_shape}, {acfg.answer_tokens} output tokens per turn "
        f"({len(areqs)} requests, {args.agentic_sessions} sessions), "
        f"{args.replicas} replicas × "
        f"{preset.num_gpu_blocks * DEFAULT_BLOCK_SIZE:,} KV tokens",
        rows,
        pooled,
        abound,
        aref.rejected,
    )
    for r in rows:
        r["reuse_vs_bound"] = r["hit"] / abound if abound else float("nan")
    console.print(
        "  GPU-s/request vs round-robin: "
        + ", ".join(f"{r['policy']} {r['gpu_s_vs_round_robin']:.2f}" for r in rows)
    )
    console.print(
        "  prefill tokens computed per request vs round-robin: "
        + ", ".join(f"{r['policy']} {r['prefill_vs_round_robin']:.2f}" for r in rows)
    )
    console.print(
        "  busy GPU-seconds vs the cache-bound optimum of the same routing (every request hits the "
        "infinite-cache bound): " + ", ".join(f"{r['policy']} {r['busy_vs_bound']:.3f}" for r in rows)
    )
    console.print(
        f"  … vs the cheapest routing's optimum ({best:.3f} GPU-s/request): "
        + ", ".join(f"{r['policy']} {r['busy_vs_best_bound']:.3f}" for r in rows)
    )
    results["agentic"] = {"requests": len(areqs), "pooled": pooled, "bound": abound, "rows": rows}
    return rows


def plot(
    args: argparse.Namespace,
    name: str,
    loads: list[float],
    sweep: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    plotted: list[str],
) -> None:
    """Hit ratio against capacity (per load) and TTFT p90 per policy (trace, agentic when it ran)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for load in loads:
        at = [p for p in sweep if p["load"] == load]
        xs = [p["kv_tokens_per_replica"] / 1000 for p in at]
        tag = f" (load {load:g})" if len(loads) > 1 else ""
        ax.plot(xs, [p["pooled"] for p in at], "k--", label=f"pooled-cache reference{tag}")
        ax.plot(xs, [p["bound"] for p in at], "k:", label=f"infinite-cache bound{tag}")
        for policy in plotted:
            ys = [next(r["hit"] for r in p["rows"] if r["policy"] == policy) for p in at]
            ax.plot(xs, ys, marker="o", label=f"{policy}{tag}")
    ax.set_xscale("log")
    ax.set_xlabel("KV capacity per replica (k tokens)")
    ax.set_ylabel("prefix-cache hit ratio (tokens)")
    ax.set_title(f"{name}, {args.replicas} replicas")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out / "route_sim_hit_vs_capacity.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    first = sweep[0]["rows"]
    names = [r["policy"] for r in first]
    ax.bar([i - 0.2 for i in range(len(names))], [r["ttft_p90"] for r in first], 0.4, label=name)
    if rows:
        ax.bar(
            [i + 0.2 for i in range(len(names))],
            [next(r["ttft_p90"] for r in rows if r["policy"] == n) for n in names],
            0.4,
            label="agentic",
        )
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("TTFT p90 (s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "route_sim_ttft_p90.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
