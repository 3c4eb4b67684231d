"""The benchmarks' goals, each stated once.

The goals come from the issues that asked for each capability. A bench that compares a figure with a goal
imports the limit from here (``limit("capacity.cost_vs_oracle")``), and ``bench/goal_table.py`` checks that
every goal has a row in the goal table at the top of docs/benchmarks.md, so a goal added here without a
figure in the report, or a row left behind for a goal removed here, fails a unit test.

A goal's ``key`` is the id its row carries in that table, and its ``statement`` is that row's goal cell, word
for word (Markdown; ``bench/goal_table.py --write`` copies it there). ``limit`` is the number a bench compares with,
in ``unit``, kept as the type the benches print (``300``, not ``300.0``); ``None`` where the goal is not one
number (a comparison with peers, a property such as "no 5xx").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Goal:
    """One goal: what is asked, of which capability, measured by which bench."""

    key: str
    capability: str
    statement: str
    bench: str
    limit: float | None = None
    unit: str = ""


GOALS: tuple[Goal, ...] = (
    Goal(
        "sandbox.startup",
        "sandbox",
        "`Sandbox.up` (binaries built) to a schedulable cluster ≤ 30 s",
        "sandbox_startup.py",
        30,
        "s",
    ),
    Goal(
        "cli.help", "command line", "every `capstan … --help` well under a second", "cli_startup.py", 1.0, "s"
    ),
    Goal(
        "restarts.accounted",
        "restart diagnostics",
        "100 % of injected restarts accounted (individually or in a digest)",
        "restart_storm.py",
        1.0,
        "share",
    ),
    Goal(
        "restarts.latency_p99",
        "restart diagnostics",
        "restart → Slack message p99 ≤ 2 s outside mute windows",
        "restart_storm.py",
        2.0,
        "s",
    ),
    Goal(
        "restarts.rss_10k",
        "restart diagnostics",
        "collector RSS ≤ 100 MB at 10,000 pods",
        "restart_storm.py",
        100,
        "MB",
    ),
    Goal(
        "route.mooncake_hit",
        "cache-aware routing",
        "Mooncake: hit ratio ≥ 95 % of the pooled-cache reference at every capacity, busiest prefill ≤ 1.2× mean",
        "route_sim.py",
        0.95,
        "× pooled",
    ),
    Goal(
        "route.mooncake_hit_under_load",
        "cache-aware routing",
        "Mooncake, arrival rate 50–100 % of the recorded one: hit ratio ≥ 95 % of the pooled-cache reference at "
        "every capacity and every load up to where the pooled reference's uncached prefill work exceeds the "
        "replicas' prefill capacity, busiest prefill ≤ 1.2× mean",
        "route_sim.py",
        0.95,
        "× pooled",
    ),
    Goal(
        "route.agentic_reuse",
        "cache-aware routing",
        "agentic sessions: ≥ 98 % reuse where the bound allows",
        "route_sim.py",
        0.98,
        "× bound",
    ),
    # NOTE: "agentic: GPU-seconds per request ≤ 1/10 of round-robin" was retired (issue 28 §4): it counted decode
    # time, which no router removes, so no routing could reach it; the two goals below measure what routing does.
    Goal(
        "route.agentic_prefill_vs_rr",
        "cache-aware routing",
        "agentic: prefill compute per request ≤ 0.1× round-robin's",
        "route_sim.py",
        0.1,
        "× round-robin",
    ),
    Goal(
        "route.agentic_busy_vs_bound",
        "cache-aware routing",
        "agentic: busy GPU-seconds ≤ 1.05× the cache-bound optimum (every request hits the infinite-cache bound)",
        "route_sim.py",
        1.05,
        "× optimum",
    ),
    Goal(
        "route.ttft_p90_vs_peers",
        "cache-aware routing",
        "TTFT p90 below sglang-router `cache_aware` and vllm-router `kv_aware` at equal load",
        "route_http.py",
    ),
    Goal(
        "route.decision_p99",
        "cache-aware routing",
        "routing decision p99 ≤ 1 ms",
        "route_sim.py",
        1.0,
        "ms",
    ),
    Goal(
        "route.soak",
        "cache-aware routing",
        "soak with engines killed and frozen: no 5xx but 502/503/504, descriptors and connections back to "
        "the baseline, RSS flat (second half grows < 5 %)",
        "route_soak.py",
        0.05,
        "RSS growth over the second half",
    ),
    Goal(
        "capacity.idle_vs_oracle",
        "GPU capacity",
        "on every trace, with its own forecast: idle GPU-hours ≤ 1.5× the oracle's (same trace and boot delay)",
        "capacity_policies.py",
        1.5,
        "× oracle",
    ),
    Goal(
        "capacity.p99_vs_ca",
        "GPU capacity",
        "on every trace, with its own forecast: p99 pending time ≤ 0.2× the cluster-autoscaler emulation's",
        "capacity_policies.py",
        0.2,
        "× CA",
    ),
    Goal(
        "capacity.cost_vs_oracle",
        "GPU capacity",
        "on every trace, with its own forecast: cost ≤ 1.10× the oracle's",
        "capacity_policies.py",
        1.10,
        "× oracle",
    ),
    Goal(
        "capacity.cost_with_signal",
        "GPU capacity",
        "on every trace, given a one-hour demand signal (each pod announced an hour before it arrives): cost ≤ "
        "1.05× the oracle's",
        "capacity_policies.py",
        1.05,
        "× oracle",
    ),
    Goal(
        "capacity.decision_ms",
        "GPU capacity",
        "one planner decision, 1,000 pending pods × 20 node types, ≤ 100 ms",
        "capacity_planner_speed.py",
        100,
        "ms",
    ),
    Goal(
        "capacity.live_decision_ms",
        "GPU capacity",
        "one live decision (Node and Pod objects to recorded actions) at 1,000 pending pods ≤ 100 ms",
        "capacity_planner_speed.py",
        100,
        "ms",
    ),
    Goal(
        "capacity.decision_vs_nodes",
        "GPU capacity",
        "one placement decision at 5,000 nodes with 1,000 pending pods ≤ 100 ms, and a replay's time per pod "
        "that does not grow with the cluster (100, 1,000 and 5,000 nodes)",
        "capacity_planner_speed.py",
        100,
        "ms",
    ),
    Goal(
        "capacity.live_vs_autoscalers",
        "GPU capacity",
        "live on the same trace slice: pending p99 ≤ 0.2× and idle GPU-hours ≤ 0.5× the better of the real "
        "Karpenter and cluster-autoscaler, at a cost no higher than theirs",
        "capacity_live.py",
    ),
    Goal(
        "capacity.emulation_fidelity",
        "GPU capacity",
        "the simulator's cluster-autoscaler and Karpenter emulations within 15 % of the real ones on idle "
        "GPU-hours and pending p99 (same slice)",
        "capacity_live.py",
        0.15,
        "relative",
    ),
    Goal(
        "capacity.replay_s",
        "GPU capacity",
        "each policy replays the 8,152-task openb trace in ≤ 10 s on one core",
        "capacity_policies.py",
        10,
        "s",
    ),
    Goal(
        "history.ingest",
        "durable history",
        "ingest ≥ 10,000 changes/s on SQLite",
        "history_ingest.py",
        10_000,
        "changes/s",
    ),
    Goal(
        "history.ingest_e2e",
        "durable history",
        "the recorder's whole path (watch event → diff → committed row) ≥ 10,000 changes/s on SQLite and on "
        "PostgreSQL",
        "history_ingest.py",
        10_000,
        "changes/s",
    ),
    Goal(
        "history.burst_memory",
        "durable history",
        "the recorder lagging under a burst of 100,000 changes never grows past 300 MB RSS",
        "history_ingest.py",
        300,
        "MB",
    ),
    Goal(
        "history.timeline",
        "durable history",
        "one object's timeline ≤ 20 ms with 1M records stored",
        "history_ingest.py",
        20,
        "ms",
    ),
    Goal(
        "history.timeline_10m",
        "durable history",
        "one object's timeline p99 ≤ 20 ms with 10M records stored on PostgreSQL",
        "history_ingest.py",
        20,
        "ms",
    ),
    Goal(
        "history.api_memory",
        "durable history",
        "HTTP API under 300 MB RSS with 10 concurrent maximum pages over 1M rows",
        "history_api_memory.py",
        300,
        "MB",
    ),
    Goal(
        "diagnose.top1",
        "diagnosis",
        "top-1 root-cause accuracy ≥ 95 % over the fault-scenario suite",
        "diagnose.py",
        0.95,
        "share",
    ),
    Goal(
        "diagnose.evidence_recall",
        "diagnosis",
        "evidence recall ≥ 95 %",
        "diagnose.py",
        0.95,
        "share",
    ),
    Goal(
        "diagnose.decoy_false_roots",
        "diagnosis",
        "no false root on decoy scenarios",
        "diagnose.py",
        0,
        "findings",
    ),
    Goal(
        "diagnose.vs_k8sgpt",
        "diagnosis",
        "more scenarios right than k8sgpt (`k8sgpt analyze --output json`, same cluster states)",
        "diagnose.py",
    ),
    Goal(
        "diagnose.seconds_10k",
        "diagnosis",
        "one diagnosis ≤ 1 s at 10k pods",
        "diagnose.py",
        1.0,
        "s",
    ),
    Goal(
        "diagnose.median_tokens",
        "diagnosis",
        "median output ≤ 1,500 tokens",
        "diagnose.py",
        1500,
        "tokens",
    ),
    Goal(
        "mcp.first_response",
        "MCP server",
        "MCP: root cause + evidence in first response ≥ 95 %",
        "mcp_context.py",
        0.95,
        "share",
    ),
    Goal(
        "mcp.tokens",
        "MCP server",
        "MCP median tokens ≤ 1,500 / p95 ≤ 4,000",
        "mcp_context.py",
        1500,
        "tokens",
    ),
    Goal(
        "mcp.budget",
        "MCP server",
        "no response over its budget",
        "mcp_context.py",
        0,
        "answers",
    ),
    Goal(
        "mcp.tool_p99_10k",
        "MCP server",
        "every tool ≤ 300 ms p99 at 10k pods",
        "mcp_context.py",
        300,
        "ms",
    ),
    Goal(
        "deploy.scale_lag",
        "in a cluster",
        "at 5,000 nodes and 50,000 pods with churn: recorder lag p99 ≤ 2 s",
        "cluster_scale.py",
        2,
        "s",
    ),
    Goal(
        "deploy.scale_detect",
        "in a cluster",
        "at 5,000 nodes and 50,000 pods with churn: restart detection p99 ≤ 2 s",
        "cluster_scale.py",
        2,
        "s",
    ),
    Goal(
        "deploy.scale_rss",
        "in a cluster",
        "at 5,000 nodes and 50,000 pods: recorder RSS ≤ 500 MB",
        "cluster_scale.py",
        500,
        "MB",
    ),
    Goal(
        "deploy.scale_lost",
        "in a cluster",
        "at 5,000 nodes and 50,000 pods with churn: zero lost changes (counted against the API server's resourceVersions)",
        "cluster_scale.py",
        0,
        "changes",
    ),
)
"""Every goal, in the order of the report's goal table."""


def goal(key: str) -> Goal:
    """The goal named ``key``; a ``KeyError`` naming it when there is none."""
    for g in GOALS:
        if g.key == key:
            return g
    raise KeyError(f"no goal {key!r} in bench/goals.py")


def limit(key: str) -> float:
    """The number goal ``key`` is compared with; a ``KeyError`` when the goal has none."""
    value = goal(key).limit
    if value is None:
        raise KeyError(f"goal {key!r} has no numeric limit")
    return value
