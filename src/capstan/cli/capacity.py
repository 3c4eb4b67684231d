"""``capstan capacity``: replay a trace against capacity policies and show what each one cost.

Thin shell over :mod:`capstan.capacity`: parse options, load the trace and node types, run, print a Rich table,
write PNG plots. All decisions live in the package.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from capstan.cli.options import (
    LEASE_DURATION,
    LEASE_NAMESPACE,
    PROBE_ADDRESS,
    check_lease_name,
    exit_lost_lease,
    parse_duration,
    parse_interval,
    parse_lease_duration,
    probe_port_option,
)
from capstan.errors import UserError

if TYPE_CHECKING:
    from capstan.capacity import Delay, NodeType, PlannerConfig, Summary, Workload
    from capstan.capacity.live import GatewayDemand

# NOTE: capstan.capacity (its pydantic models, the planner) is imported inside the functions, so
# `capstan capacity … --help` and usage errors answer without loading it.

app = typer.Typer(help="GPU capacity planning: simulate policies on real traces.", no_args_is_help=True)


def parse_wait(text: str, option: str) -> tuple[float, float]:
    """A headroom wait as :class:`PlannerConfig`'s ``(headroom_wait_s, headroom_wait_share)``: ``20%`` is a share
    of the boot plus GPU-ready delay, anything else a duration (:func:`parse_duration`); a one-line error naming
    the option otherwise."""
    if text.strip().endswith("%"):
        try:
            share = float(text.strip()[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0.0 <= share < 1.0:
            raise UserError(f"{option} {text!r}: a share must be at least 0% and below 100% (e.g. 20%)")
        return 0.0, share
    return parse_duration(text, option), 0.0


def parse_buffer(text: str, option: str) -> int | None:
    """A CapacityBuffer size: a count of one-GPU pods (>= 0), or ``peak`` (None: sized to the trace's peak burst)."""
    if text.strip().lower() == "peak":
        return None
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise UserError(f"{option} {text!r}: expected a count of GPUs (>= 0) or 'peak'")
    return count


def buffer_line(workload: Workload, types: tuple[NodeType, ...], count: int | None) -> str:
    """What ``ca-buffer`` held: how many one-GPU pods of which template (and, at ``peak``, why that many)."""
    from capstan.capacity import buffer_size_and_template

    why = ", the trace's peak burst: the most GPUs asked for within one boot plus GPU-ready delay"
    if count is not None:
        why = ""
    count, t = buffer_size_and_template(workload.pods, types, count)
    return (
        f"ca-buffer: a CapacityBuffer of {count} one-GPU pods ({t.cpu_milli}m CPU, {t.memory_mib}Mi memory each"
        f"{why})"
    )


def resolve_node_types(trace: str, nodes: Path | None, boot: Delay, gpu_ready: Delay) -> tuple[NodeType, ...]:
    """Node types from ``--nodes`` (YAML node-type file or openb node CSV), the openb list next to the trace,
    or the built-in inference menu."""
    from capstan.capacity import inference_node_types, load_node_type_file, read_openb_nodes

    if nodes is not None:
        if nodes.suffix.lower() in (".yaml", ".yml", ".json"):
            return load_node_type_file(nodes, boot, gpu_ready)
        return read_openb_nodes(nodes, boot, gpu_ready)
    sibling = Path(trace).parent / "openb_node_list_all_node.csv"
    if (
        not trace.startswith("synthetic:")
        and Path(trace).name.startswith("openb_pod_list")
        and sibling.exists()
    ):
        return read_openb_nodes(sibling, boot, gpu_ready)
    return inference_node_types(boot, gpu_ready)


HEADLINE_PEERS = ("cluster-autoscaler", "oracle")
"""The policies every headline figure is compared with: today's tool and what knowing the future would allow."""


def _ratio(value: float, peer: float | None) -> str:
    if peer is None:
        return "—"
    if peer == 0:
        return "—" if value else "1.00×"
    return f"{value / peer:.2f}×"


def headline_table(summaries: list[Summary], title: str) -> Table:
    """The few figures that say whether the planner is better: idle GPU-hours, the p99 pending time and the cost,
    each beside its ratio to the cluster-autoscaler and to the oracle when they ran (``--wide``: everything)."""
    by_name = {s.policy: s for s in summaries}
    figures: tuple[tuple[str, Callable[[Summary], float], str], ...] = (
        ("idle GPU-h", lambda s: s.idle_total, "{:,.0f}"),
        ("pending p99 (s)", lambda s: s.pending["total"][2], "{:,.0f}"),
        ("cost $", lambda s: s.cost, "{:,.0f}"),
    )
    peers = [p for p in HEADLINE_PEERS if p in by_name]
    table = Table(title=title, caption="--wide: every figure; --json FILE: all of them as JSON")
    table.add_column("policy", no_wrap=True)
    for name, _, _ in figures:
        table.add_column(name, justify="right")
        for peer in peers:
            table.add_column(f"÷ {'CA' if peer == 'cluster-autoscaler' else peer}", justify="right")
    table.add_column("unplaced", justify="right")
    for s in summaries:
        cells = [s.policy]
        for _, get, fmt in figures:
            cells.append(fmt.format(get(s)))
            cells.extend(_ratio(get(s), get(by_name[peer])) for peer in peers)
        cells.append(str(s.unplaced))
        table.add_row(*cells)
    return table


def summaries_json(summaries: list[Summary], title: str) -> dict[str, Any]:
    """Every figure of every policy, as ``--json`` writes it."""
    import dataclasses

    return {
        "title": title,
        "policies": [
            dataclasses.asdict(s) | {"idle_total": s.idle_total, "allocation_rate": s.allocation_rate}
            for s in summaries
        ],
    }


def summary_table(summaries: list[Summary], title: str) -> Table:
    from capstan.capacity import IDLE_CAUSES, STAGES

    table = Table(title=title)
    table.add_column("policy", no_wrap=True, min_width=18)
    for col in ("GPU-h", "alloc %", "idle GPU-h", *(f"idle {c}" for c in IDLE_CAUSES)):
        table.add_column(col, justify="right")
    table.add_column("pending p50/p95/p99 (s)", justify="right")
    table.add_column("waited > 60 s", justify="right")
    for stage in STAGES:
        table.add_column(f"p99 {stage} (s)", justify="right")
    for col in (
        "cost $",
        "launches",
        "drains",
        "moves",
        "moved wait p50/p99 (s)",
        "unplaced",
        "run s",
        "CPU s",
    ):
        table.add_column(col, justify="right")
    for s in summaries:
        p = s.pending["total"]
        table.add_row(
            s.policy,
            f"{s.gpu_hours:,.0f}",
            f"{100 * s.allocation_rate:.1f}",
            f"{s.idle_total:,.0f}",
            *(f"{s.idle[c]:,.0f}" for c in IDLE_CAUSES),
            f"{p[0]:.0f}/{p[1]:.0f}/{p[2]:.0f}",
            str(s.slow_starts),
            *(f"{s.pending[st][2]:.0f}" for st in STAGES),
            f"{s.cost:,.0f}",
            str(s.launches),
            str(s.drains),
            s.moves_text,
            f"{s.move_wait[0]:.0f}/{s.move_wait[1]:.0f}",
            str(s.unplaced),
            f"{s.seconds:.1f}",
            f"{s.cpu_seconds:.1f}",
        )
    return table


def _run(
    workload: Workload,
    types: tuple[NodeType, ...],
    policies: list[str],
    seed: int,
    console: Console,
    label: str,
    planner: PlannerConfig,
    buffer_gpus: int | None,
    intervals: tuple[float | None, float | None],
    announce: tuple[float, bool] | None = None,
) -> list[Summary]:
    from capstan.capacity import NoForecast, QueuedDemand, TraceLead, gpu_horizon, run_policies

    forecaster = None
    if announce is not None:
        lead, alone = announce

        def forecaster() -> QueuedDemand:
            return QueuedDemand(
                TraceLead(workload.pods, lead),
                NoForecast() if alone else None,
                lookahead_s=gpu_horizon(types),
            )

    show = len(workload.pods) >= 2000 and console.is_terminal
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console, disable=not show
    ) as bar:
        task = bar.add_task(label, total=100.0)

        def progress(policy: str, frac: float) -> None:
            bar.update(task, description=f"{label} {policy}", completed=100 * frac)

        results = run_policies(
            workload,
            types,
            policies,
            seed=seed,
            progress=progress if show else None,
            planner=planner,
            buffer_gpus=buffer_gpus,
            review_interval=intervals[0],
            repack_interval=intervals[1],
            forecaster=forecaster,
        )
    return [s for _, s in results.values()]


@app.command()
def simulate(
    trace: str = typer.Option(
        ...,
        "--trace",
        help="Trace file (openb pod list, GenAI qps.csv, request file or Mooncake trace) or "
        "synthetic:agentic[:HOURS].",
    ),
    policy: list[str] | None = typer.Option(
        None, "--policy", help="Policies to compare (repeat; default: every policy)."
    ),
    boot_delay: str = typer.Option(
        "5m", "--boot-delay", help="Node boot delay, request → Ready (e.g. 300, 5m)."
    ),
    gpu_ready_delay: str = typer.Option("90s", "--gpu-ready-delay", help="Ready → GPUs allocatable."),
    nodes: Path | None = typer.Option(
        None, "--nodes", help="Node types: YAML node-type file or openb node list CSV."
    ),
    sweep: bool = typer.Option(
        False, "--sweep", help="Also sweep the boot delay over 3, 6, 9, 12, 15 minutes."
    ),
    max_pods: int = typer.Option(0, "--max-pods", help="Replay only the first N pods (0: all)."),
    window: float = typer.Option(
        300.0, "--window", help="GenAI qps.csv, request files, Mooncake traces: seconds per demand window."
    ),
    replica_rps: float = typer.Option(
        2.0,
        "--replica-rps",
        help="GenAI qps.csv, request files, Mooncake traces: requests per second one inference replica serves "
        "(the HPA asks for ceil(rate / this) replicas).",
    ),
    seed: int = typer.Option(0, "--seed", help="Seed for delays and the synthetic generator."),
    headroom_quantile: float = typer.Option(
        0.99,
        "--headroom-quantile",
        help="Capstan's headroom: cover the boot-delay window at this quantile of those the forecast offers (0: none).",
    ),
    headroom_wait: str = typer.Option(
        "20%",
        "--headroom-wait",
        help="Capstan's headroom: how long a pod may wait for capacity already on its way, as a duration "
        "(e.g. 60s) or a share of the boot plus GPU-ready delay (e.g. 20%; 0: no wait); headroom then covers "
        "one boot delay less this.",
    ),
    forecast_days: int = typer.Option(
        7,
        "--forecast-days",
        help="Capstan's batch forecast: windows of the last 2 h and of this time of day ±1 h on this many past "
        "days (0: every window of the last 96 boot delays).",
    ),
    pinned_headroom_ratio: float = typer.Option(
        2.0,
        "--pinned-headroom-ratio",
        help="Capstan's headroom: a node launched or kept empty only for a forecast pod limited to some GPU "
        "models has at most this many times the GPUs that pod asks for, unless it costs no more than a type "
        "within that (0: none; inf: no limit).",
    ),
    room_moves: int = typer.Option(
        4,
        "--room-moves",
        help="Capstan: a pending pod no allocatable node can take may have one freed for it by moving up to this "
        "many pods (all safe to evict) onto other allocatable nodes, instead of waiting for a new node (0: never).",
    ),
    repack_interval: str | None = typer.Option(
        None,
        "--repack-interval",
        help="Capstan's controller: a full plan (repacks) at most this often, and when a node launched for a "
        "repack is up (e.g. 900, 15m; default: the controller's, 15m).",
    ),
    review_interval: str | None = typer.Option(
        None,
        "--review-interval",
        help="Capstan's controller: headroom and drains reviewed at most this often while anything changes "
        "(default: the controller's, 60s).",
    ),
    repack_orders: str = typer.Option(
        "both",
        "--repack-orders",
        help="Capstan: 'both' plans a full decision again with the repack search before headroom when headroom "
        "held room on a repack candidate, and keeps the cheaper plan; 'one' never does.",
    ),
    buffer_gpus: str = typer.Option(
        "peak",
        "--buffer-gpus",
        help="ca-buffer's CapacityBuffer: this many virtual one-GPU pods, or 'peak' for the most GPUs the trace "
        "asks for within one boot plus GPU-ready delay (known in hindsight).",
    ),
    announce_ahead: str | None = typer.Option(
        None,
        "--announce-ahead",
        help="Capstan: each pod is announced this long before it arrives (e.g. 1h), as a queue holding Jobs "
        "suspended would announce it, and headroom is held for it from one boot plus GPU-ready delay before it "
        "comes (docs/capacity.md, 'Demand known before it arrives').",
    ),
    queue_only: bool = typer.Option(
        False,
        "--queue-only",
        help="With --announce-ahead: the announcements are Capstan's whole forecast (every GPU pod comes "
        "through the queue), not added to its own.",
    ),
    not_safe_to_evict: list[str] = typer.Option(
        [],
        "--not-safe-to-evict",
        help="openb pods of this QoS class (repeat; e.g. BE, the batch tasks) are not safe to evict: no policy "
        "moves them, and one evicted anyway runs again from the start.",
    ),
    out: Path = typer.Option(Path("capacity-out"), "--out", help="Directory for PNG plots."),
    wide: bool = typer.Option(
        False, "--wide", help="Print every figure (idle by cause, pending by stage, churn, run time)."
    ),
    json_path: Path | None = typer.Option(None, "--json", help="Also write every figure to this JSON file."),
) -> None:
    """Replay a trace against capacity policies: idle GPU-hours by cause, pending time by stage, cost, churn."""
    from capstan.capacity import (
        OPENB_QOS,
        POLICY_NAMES,
        Delay,
        PlannerConfig,
        Workload,
        inference_node_types,
        load_trace,
        write_plots,
        write_sweep_plot,
    )

    policy = policy or list(POLICY_NAMES)
    console = Console()
    if not console.is_terminal:
        console = Console(width=260)  # the table is wide; keep it readable in logs and pipes
    boot = Delay("fixed", parse_duration(boot_delay, "--boot-delay"))
    ready = Delay("fixed", parse_duration(gpu_ready_delay, "--gpu-ready-delay"))
    for name in policy:
        if name not in POLICY_NAMES:
            raise UserError(f"--policy {name}: unknown policy; choose from {', '.join(POLICY_NAMES)}")
    if max_pods < 0:
        raise UserError("--max-pods must be >= 0")
    if not 0.0 <= headroom_quantile <= 1.0:
        raise UserError(
            f"--headroom-quantile {headroom_quantile}: must be between 0 and 1 (0 disables headroom)"
        )
    if forecast_days < 0:
        raise UserError(f"--forecast-days {forecast_days}: must be >= 0 (0: the plain look-back)")
    wait_s, wait_share = parse_wait(headroom_wait, "--headroom-wait")
    buffer = parse_buffer(buffer_gpus, "--buffer-gpus")
    if not pinned_headroom_ratio >= 0:  # NaN fails too
        raise UserError(
            f"--pinned-headroom-ratio {pinned_headroom_ratio}: must be >= 0 (0: no node; inf: no limit)"
        )
    if room_moves < 0:
        raise UserError(f"--room-moves {room_moves}: must be >= 0 (0: never move pods to make room)")
    intervals = (
        None if review_interval is None else parse_interval(review_interval, "--review-interval"),
        None if repack_interval is None else parse_interval(repack_interval, "--repack-interval"),
    )
    if repack_orders not in ("both", "one"):
        raise UserError(f"--repack-orders {repack_orders}: expected 'both' or 'one'")
    announce = None
    if announce_ahead is not None:
        announce = (parse_duration(announce_ahead, "--announce-ahead"), queue_only)
        if headroom_quantile == 0:
            raise UserError(
                "--announce-ahead holds headroom for the announced pods: it cannot go with --headroom-quantile 0"
            )
    elif queue_only:
        raise UserError("--queue-only: the queue is --announce-ahead's; give it too")
    planner = PlannerConfig(
        headroom=headroom_quantile > 0,
        forecast_quantile=headroom_quantile or 0.99,
        forecast_days=forecast_days,
        headroom_wait_s=wait_s,
        headroom_wait_share=wait_share,
        pinned_headroom_node_ratio=pinned_headroom_ratio,
        make_room_moves=room_moves,
        repack_both_orders=repack_orders == "both",
    )
    for qos in not_safe_to_evict:
        if qos not in OPENB_QOS:
            raise UserError(
                f"--not-safe-to-evict {qos}: unknown QoS class; choose from {', '.join(OPENB_QOS)}"
            )
    if json_path is not None and not json_path.parent.is_dir():  # said before the replay, not after it
        raise UserError(f"--json {json_path}: no directory {json_path.parent}")
    if not replica_rps > 0 or not math.isfinite(replica_rps):  # NaN fails too
        raise UserError(f"--replica-rps {replica_rps}: must be a finite number > 0")
    if not window > 0 or not math.isfinite(window):
        raise UserError(f"--window {window}: must be a finite number of seconds > 0")
    workload = load_trace(
        trace,
        seed=seed,
        window=window,
        not_safe_to_evict=frozenset(not_safe_to_evict),
        per_replica=replica_rps,
    )
    if max_pods:
        workload = Workload(workload.name, workload.pods[:max_pods])
    types = resolve_node_types(trace, nodes, boot, ready)
    builtin = [t.name for t in inference_node_types(boot, ready)]
    if nodes is None and not trace.startswith("synthetic:") and [t.name for t in types] == builtin:
        Console(stderr=True).print(
            f"capstan capacity simulate: no node list (--nodes) for {trace}: using the built-in node types "
            f"({', '.join(t.name for t in types)}); pods that fit none of them stay unplaced",
            markup=False,
            soft_wrap=True,
        )
    title = f"{workload.name}: {len(workload.pods)} pods, {len(types)} node types, boot {boot.a:.0f}s + GPU {ready.a:.0f}s"
    if announce is not None:
        title += f"; capstan told each pod {announce[0]:g} s ahead" + (
            ", nothing else" if announce[1] else ""
        )
    summaries = _run(
        workload, types, policy, seed, console, "simulating", planner, buffer, intervals, announce
    )
    console.print(summary_table(summaries, title) if wide else headline_table(summaries, title))
    if json_path is not None:
        try:
            json_path.write_text(json.dumps(summaries_json(summaries, title), indent=1) + "\n")
        except OSError as exc:
            raise UserError(f"--json {json_path}: cannot write ({exc.strerror or exc})") from None
    if "ca-buffer" in policy:
        console.print(buffer_line(workload, types, buffer))
    for s in summaries:
        for reason, count in sorted(s.unplaced_reasons.items()):
            console.print(f"[yellow]{s.policy}: {count} pod(s) not placed: {reason}[/yellow]")
        for problem in s.problems[:5]:
            console.print(f"[red]{s.policy}: conservation check failed: {problem}[/red]")
    paths = write_plots(summaries, out, workload.name)
    if sweep:
        rows = []
        for minutes in (3, 6, 9, 12, 15):
            sweep_types = resolve_node_types(trace, nodes, Delay("fixed", minutes * 60.0), ready)
            for s in _run(
                workload,
                sweep_types,
                policy,
                seed,
                console,
                f"sweep {minutes} min",
                planner,
                buffer,
                intervals,
                announce,
            ):
                rows.append((minutes * 60.0, s.policy, s))
        sweep_table = Table(title=f"Boot-delay sweep — {workload.name}")
        for col in ("boot min", "policy", "idle GPU-h", "p99 pending s", "waited > 60 s", "cost $"):
            sweep_table.add_column(col, justify="right")
        for d, name, s in rows:
            sweep_table.add_row(
                f"{d / 60:.0f}",
                name,
                f"{s.idle_total:,.0f}",
                f"{s.pending['total'][2]:.0f}",
                str(s.slow_starts),
                f"{s.cost:,.0f}",
            )
            if name == "oracle":
                # the oracle's own launches, each made one boot delay early by a policy that knew the future
                sweep_table.add_row(
                    f"{d / 60:.0f}", "oracle + boot", "", "", "", f"{s.cost + s.boot_cost:,.0f}"
                )
        console.print(sweep_table)
        paths.append(write_sweep_plot(rows, out, workload.name))
    for p in paths:
        console.print(f"wrote {p}")


PROVIDERS = ("kwok", "karpenter")


@app.command()
def run(
    node_types: Path = typer.Option(
        ...,
        "--node-types",
        help="YAML node-type file: the types Capstan may launch (instance-type label = name).",
    ),
    kubeconfig: Path | None = typer.Option(
        None,
        "--kubeconfig",
        help="Cluster to act on (default: the local sandbox started by `capstan sandbox up`).",
    ),
    provider: str = typer.Option("kwok", "--provider", help=f"What launches nodes: {', '.join(PROVIDERS)}."),
    namespace: str | None = typer.Option(
        None, "--namespace", "-n", help="Place only this namespace's pods (default: every namespace)."
    ),
    nodepool: str = typer.Option(
        "capstan", "--nodepool", help="karpenter: the NodePool Capstan's NodeClaims belong to."
    ),
    node_class: str = typer.Option(
        "karpenter.kwok.sh/KWOKNodeClass/default",
        "--node-class",
        help="karpenter: the NodeClaims' nodeClassRef as group/kind/name (e.g. karpenter.k8s.aws/EC2NodeClass/default).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan and log each decision; write nothing."),
    duration: str = typer.Option(
        "0", "--duration", help="Stop after this long, e.g. 10m (0: until SIGINT/SIGTERM)."
    ),
    boot_delay: str = typer.Option("5m", "--boot-delay", help="Boot delay of types that do not give one."),
    gpu_ready_delay: str = typer.Option(
        "90s", "--gpu-ready-delay", help="GPU-ready delay of types without one."
    ),
    review_interval: str = typer.Option(
        "60s", "--review-interval", help="Reviews (headroom, drains) at most this often."
    ),
    drain_empty_after: str = typer.Option(
        "5m",
        "--drain-empty-after",
        help="Drain a node Capstan launched once it has been empty this long (Karpenter's consolidateAfter, "
        "cluster-autoscaler's --scale-down-unneeded-time).",
    ),
    no_headroom: bool = typer.Option(False, "--no-headroom", help="Hold no forecast headroom."),
    suspended_jobs: bool = typer.Option(
        False,
        "--read-suspended-jobs",
        help="Read Jobs created suspended (in --namespace) as demand announced ahead: nodes for their pods are "
        "launched before the Jobs run.",
    ),
    provisioning_requests: bool = typer.Option(
        False,
        "--serve-provisioning-requests",
        help="Serve ProvisioningRequests (autoscaling.x-k8s.io/v1, in --namespace; Kueue's admission check makes "
        "them) of the classes best-effort-atomic-scale-up (nodes for all their pods launched in one plan) and "
        "check-capacity (room there now), and write their conditions. Needs the CRD.",
    ),
    announced_only: bool = typer.Option(
        False,
        "--queue-only",
        help="The demand announced ahead (--read-suspended-jobs, --serve-provisioning-requests, --gateway-metrics) "
        "is Capstan's whole forecast: no headroom for its own forecast of arrivals (where every GPU pod comes "
        "through a queue, such as Kueue's).",
    ),
    gateway_metrics: str | None = typer.Option(
        None,
        "--gateway-metrics",
        help="An inference gateway's metrics URL (capstan route's /metrics): its request rate, at --replica-rps "
        "per replica, is the replicas of --gateway-deployment it will need; nodes for those beyond the "
        "Deployment's replicas are launched before the autoscaler adds them.",
    ),
    gateway_deployment: str | None = typer.Option(
        None,
        "--gateway-deployment",
        help="namespace/name of the Deployment whose replicas serve the gateway.",
    ),
    replica_rps: float | None = typer.Option(
        None, "--replica-rps", help="Requests per second one replica of --gateway-deployment absorbs."
    ),
    placeholder_namespace: str | None = typer.Option(
        None,
        "--placeholder-namespace",
        help="Hold headroom nodes' free GPUs with low-priority placeholder pods in this namespace (default: none).",
    ),
    allow_other_autoscalers: bool = typer.Option(
        False,
        "--allow-other-autoscalers",
        help="Run even if cluster-autoscaler (or, with the kwok provider, Karpenter) is running.",
    ),
    leader_elect: bool = typer.Option(
        True, "--leader-elect/--no-leader-elect", help="Act only while holding the Lease (not in a dry run)."
    ),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Serve Prometheus metrics (capstan_capacity_*) on this port."
    ),
    metrics_address: str = typer.Option(
        "127.0.0.1", "--metrics-address", help="Address of the metrics server."
    ),
    lease_namespace: str = LEASE_NAMESPACE,
    lease_name: str = typer.Option("capstan-capacity", "--lease-name", help="Name of the Lease."),
    lease_duration: str = LEASE_DURATION,
    probe_port: int | None = probe_port_option(
        "/healthz, /readyz (the cluster answers; a standby is ready) and /metrics"
    ),
    probe_address: str = PROBE_ADDRESS,
) -> None:
    """Run Capstan's capacity controller on a cluster: pods gated by `capstan.io/capacity` are placed by the same
    planner the simulator replays; nodes are launched and drained through the provider. Prints what it did. An API
    server not reachable yet is waited for (not ready, one log line per attempt, backing off to 30 s); one that
    refuses it (401, 403) is one line and exit 2."""
    import asyncio
    import signal
    import socket
    import time

    from prometheus_client import start_http_server

    from capstan.capacity import (
        AllAnnounced,
        Announcements,
        Controller,
        Delay,
        NoForecast,
        PlannerConfig,
        QueuedDemand,
        load_node_type_file,
    )
    from capstan.capacity.live import (
        ControllerMetrics,
        EventRecorder,
        KarpenterProvider,
        KwokProvider,
        ProvisioningRequests,
        SuspendedJobs,
        live_config,
        other_autoscalers,
        run_controller,
    )
    from capstan.cli._cluster import cluster_kubeconfig
    from capstan.kube import KubeClient, LeaderElection, connector
    from capstan.percentile import percentile
    from capstan.probes import Check, ClusterCheck, serving_probes
    from capstan.redact import Redactor
    from capstan.startup import ClusterAccess, Dependency, Startup

    if provider not in PROVIDERS:
        raise UserError(f"--provider {provider}: unknown provider; choose from {', '.join(PROVIDERS)}")
    class_ref = tuple(node_class.split("/"))
    if len(class_ref) != 3 or not all(class_ref):
        raise UserError(f"--node-class {node_class!r}: expected group/kind/name")
    stop_after = parse_duration(duration, "--duration")
    types = load_node_type_file(
        node_types,
        Delay("fixed", parse_duration(boot_delay, "--boot-delay")),
        Delay("fixed", parse_duration(gpu_ready_delay, "--gpu-ready-delay")),
    )
    review = parse_interval(review_interval, "--review-interval")
    min_idle_s = parse_duration(drain_empty_after, "--drain-empty-after")
    lease_s = parse_lease_duration(lease_duration)
    check_lease_name(lease_name)
    path = cluster_kubeconfig(kubeconfig)
    probe = None
    if probe_port is not None:
        from capstan.httpserver import bind_listener

        probe = bind_listener(probe_address, probe_port)
    if suspended_jobs and no_headroom:
        raise UserError(
            "--read-suspended-jobs holds headroom for the Jobs' pods: it cannot go with --no-headroom"
        )
    if provisioning_requests and no_headroom:
        raise UserError(
            "--serve-provisioning-requests holds headroom for the requests' pods: it cannot go with --no-headroom"
        )
    queue = SuspendedJobs() if suspended_jobs else None
    provreqs = ProvisioningRequests() if provisioning_requests else None
    gateway = _gateway_demand(gateway_metrics, gateway_deployment, replica_rps, no_headroom)
    sources: list[Announcements] = [
        s for s in (queue, provreqs, gateway[1] if gateway else None) if s is not None
    ]
    if announced_only and not sources:
        raise UserError(
            "--queue-only: no demand is announced; give --read-suspended-jobs, --serve-provisioning-requests or "
            "--gateway-metrics"
        )
    controller = Controller(
        live_config(PlannerConfig(headroom=not no_headroom, min_idle_s=min_idle_s)),
        review_interval=review,
        forecaster=QueuedDemand(AllAnnounced(*sources), NoForecast() if announced_only else None)
        if sources
        else None,
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if stop_after > 0:
            loop.call_later(stop_after, stop.set)

        async def alone(client: KubeClient) -> None:
            if allow_other_autoscalers:
                return
            allowed = ("karpenter",) if provider == "karpenter" else ()
            running = await other_autoscalers(client, allow=allowed, now=time.time())
            if running:
                raise UserError(
                    f"{running[0]}: Capstan and it would both provision for the same pending pods; stop it, or give "
                    "--allow-other-autoscalers"
                )

        startup = Startup("capstan capacity run")
        cluster = ClusterAccess(connector(path), alone)
        metrics = ControllerMetrics()
        # a cluster error quotes the API server's words: redacted like every other output
        checks: dict[str, Check] = {"cluster": startup.check("cluster")}
        server = None
        try:
            if metrics_port is not None:
                try:
                    server, _thread = start_http_server(
                        metrics_port, addr=metrics_address, registry=metrics.registry
                    )
                except OSError as exc:
                    raise UserError(
                        f"--metrics-port {metrics_port}: cannot listen on {metrics_address}: {exc}"
                    ) from None
            async with serving_probes(probe, checks, registry=metrics.registry, redact=Redactor().text):
                dependency = Dependency("cluster", f"cluster {path or 'in-cluster'}", cluster)
                if not await startup.reach([dependency], stop):
                    return  # stopped while waiting for the cluster
                client = cluster.client
                assert client is not None
                checks["cluster"] = ClusterCheck(connector(path))
                election = None
                if leader_elect and not dry_run:
                    election = LeaderElection.for_this_process(
                        client, lease_name, lease_namespace, lease_duration_s=lease_s
                    )
                stats = await run_controller(
                    client,
                    KwokProvider(client)
                    if provider == "kwok"
                    else KarpenterProvider(
                        client, nodepool=nodepool, node_class=(class_ref[0], class_ref[1], class_ref[2])
                    ),
                    controller,
                    types,
                    stop=stop,
                    namespace=namespace,
                    dry_run=dry_run,
                    election=election,
                    metrics=metrics,
                    events=EventRecorder(client, host=socket.gethostname()),
                    placeholder_namespace=placeholder_namespace,
                    queue=queue,
                    gateway=gateway,
                    provisioning=provreqs,
                )
        finally:
            await cluster.close()
            if server is not None:
                server.shutdown()
        decided = sorted(stats.decision_s)
        done = stats.actions
        console = Console()
        console.print(
            f"{'dry run, nothing written: ' if dry_run else ''}{stats.decisions} decisions "
            f"(p50 {percentile(decided, 50, empty=0.0) * 1000:.0f} ms, "
            f"p99 {percentile(decided, 99, empty=0.0) * 1000:.0f} ms); {len(done.launches)} launches, "
            f"{len(done.promises)} pods placed, {len(done.drains)} drains, {len(done.refused)} refused, "
            f"{len(stats.failures)} failed calls (retried)"
            + (f", {stats.gateway_errors} failed gateway scrapes (retried)" if gateway else ""),
            markup=False,
            soft_wrap=True,
        )
        if stats.lost_leadership:
            exit_lost_lease(
                "capstan capacity run", lease_namespace, lease_name, "stopping (restart it to campaign again)"
            )

    from capstan.kube import ApiError

    try:
        asyncio.run(main())
    except ApiError as exc:  # the cluster unreachable, or refusing what the start-up reads (a 403, a 5xx)
        raise UserError(f"cluster {path or 'in-cluster'}: {exc}") from None


def _gateway_demand(
    url: str | None, deployment: str | None, replica_rps: float | None, no_headroom: bool
) -> tuple[str, GatewayDemand] | None:
    """``--gateway-metrics``, ``--gateway-deployment`` and ``--replica-rps`` checked together (all or none), as
    the URL and the :class:`GatewayDemand` the loop scrapes into; a bad one is one line, exit 2."""
    from urllib.parse import urlsplit

    from capstan.capacity.live import GatewayDemand as Demand

    given = {"--gateway-metrics": url, "--gateway-deployment": deployment, "--replica-rps": replica_rps}
    if all(v is None for v in given.values()):
        return None
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise UserError(
            f"{', '.join(missing)}: needed with {', '.join(k for k in given if k not in missing)}"
        )
    assert url is not None and deployment is not None and replica_rps is not None
    if no_headroom:
        raise UserError(
            "--gateway-metrics holds headroom for the replicas the rate asks for: it cannot go with --no-headroom"
        )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--gateway-metrics {url!r}: expected an http:// or https:// URL")
    try:
        return url, Demand(deployment, replica_rps)
    except ValueError as exc:
        flag = "--gateway-deployment" if "deployment" in str(exc) else "--replica-rps"
        raise UserError(f"{flag}: {exc}") from None
