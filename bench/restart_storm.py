"""A restart storm on the real sandbox, measured for any restart collector run as a child process.

It brings up its own sandbox, creates Deployments whose pods have one or two containers and some a native sidecar,
starts the collector under test with a kubeconfig and a Slack incoming-webhook URL pointing at a local
Slack-compatible receiver, injects kubelet-like restarts (mixed reasons, exit codes and states) at an even pace,
then waits until every restart is accounted for or the deadline passes. Reported: restarts accounted for (reported
individually or inside a digest, matched by namespace, pod, container and restart number) out of injected;
detection-to-delivery latency p50/p99 of the individually reported ones (injection to arrival); CPU seconds and
peak RSS of the collector process.

The collector is a command-line template; placeholders: {python} {kubeconfig} {webhook} {namespace} {workdir}.
The default runs `capstan restarts run` with a generated configuration (Slack webhook sink, mute 30 s). Another
tool is measured the same way, e.g. the airwallex collector (give its messages' pattern with --pattern airwallex,
and a --label for the row and the output files):

    --collector 'env SLACK_WEBHOOK_URL={webhook} CLUSTER_NAME=bench WATCHED_NAMESPACES=^{namespace}$ \\
                 /path/to/k8s-pod-restart-info-collector -kubeconfig {kubeconfig}' --pattern airwallex --label airwallex

The receiver keeps every part of a Slack message (text, blocks, attachments, files) and refuses what Slack
refuses, so a collector is scored on what it sent; posts the receiver refused are counted in "refused".

    .venv/bin/python bench/restart_storm.py                      # 1,000 restarts over 200 pods in 60 s
    .venv/bin/python bench/restart_storm.py --smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from capstan.faults import Kubelet, Termination
from capstan.kube import ApiError, KubeClient, resources
from capstan.notify import DEV_WEBHOOK_PATH, SlackReceiver, serve_in_thread
from capstan.percentile import percentile
from capstan.restarts import AIRWALLEX_PATTERN, CAPSTAN_PATTERN, account, messages_from_slack_receiver
from capstan.sandbox import NodePool, Sandbox, SandboxSpec, require_toolchain
from goals import limit

NAMESPACE = "storm"
DEFAULT_COLLECTOR = (
    "{python} -m capstan.cli.main restarts run --config {workdir}/restarts.yaml --kubeconfig {kubeconfig} "
    "--store {workdir}/history.db --namespace {namespace}"
)
TERMINATIONS = [
    (Termination.oom_killed(), 0.3),
    (Termination.error(1), 0.3),
    (Termination.killed("SIGTERM"), 0.2),
    (Termination.completed(), 0.1),
    (Termination("Error", 139, 11), 0.1),
]


def deployment(i: int, replicas: int) -> dict[str, Any]:
    containers = [{"name": "main", "image": f"example.com/app-{i}:1"}]
    if i % 5 == 0:
        containers.append({"name": "proxy", "image": "example.com/proxy:1"})
    spec: dict[str, Any] = {"containers": containers}
    if i % 10 == 3:
        spec["initContainers"] = [{"name": "mesh", "image": "example.com/mesh:1", "restartPolicy": "Always"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"app-{i}", "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": f"app-{i}"}},
            "template": {"metadata": {"labels": {"app": f"app-{i}"}}, "spec": spec},
        },
    }


def proc_stats(pid: int) -> tuple[float, float]:
    """(CPU seconds, peak RSS MB) of a live process from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = 100.0
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    hwm = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1]) / 1024.0
    return cpu, hwm


async def storm(
    args: argparse.Namespace, kubeconfig: str, webhook: str, box: Sandbox, console: Console
) -> dict[str, Any]:
    async with await KubeClient.from_kubeconfig(kubeconfig, timeout=60) as kube:
        existing, _ = await kube.list(resources.NAMESPACES)
        reuse = any(n["metadata"]["name"] == NAMESPACE for n in existing)
        if not reuse:
            await kube.create(
                resources.NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            )
        for _ in range(600):
            try:
                await kube.get(resources.SERVICE_ACCOUNTS, "default", NAMESPACE)
                break
            except ApiError:
                await asyncio.sleep(0.1)
        per = max(1, args.pods // args.deployments)
        for i in range(args.deployments):
            if not reuse:
                await kube.create(resources.DEPLOYMENTS, deployment(i, per))
        want = per * args.deployments
        pods: list[dict[str, Any]] = []
        for _ in range(1200):
            items, _ = await kube.list(resources.PODS, namespace=NAMESPACE)
            pods = [p for p in items if (p.get("status") or {}).get("phase") == "Running"]
            if len(pods) >= want:
                break
            await asyncio.sleep(0.5)
        console.print(f"{len(pods)} pods Running in {args.deployments} Deployments")

        workdir = Path(args.workdir)
        cfg = {
            "cluster_name": "bench",
            "sinks": [{"name": "slack", "type": "slack_webhook", "url": webhook}],
            "mute_seconds": args.mute,
            "cap_window_seconds": args.mute,
        }
        (workdir / "restarts.yaml").write_text(yaml.safe_dump(cfg))
        argv = shlex.split(
            args.collector.format(
                python=sys.executable,
                kubeconfig=kubeconfig,
                webhook=webhook,
                namespace=NAMESPACE,
                workdir=workdir,
            )
        )
        log = (workdir / "collector.log").open("wb")
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        await asyncio.sleep(args.warmup)  # the collector lists the pods and settles
        if child.poll() is not None:
            raise SystemExit(
                f"the collector exited during warm-up (code {child.returncode}); see {workdir / 'collector.log'}"
            )

        kubelet = Kubelet(kube, box.directory / "pod-logs")
        rng = random.Random(args.seed)
        injected: dict[tuple[str, str, str, int], float] = {}
        sem = asyncio.Semaphore(12)
        weights = [w for _, w in TERMINATIONS]

        async def inject(pod: dict[str, Any], at: float) -> None:
            await asyncio.sleep(max(0.0, at - time.time()))
            spec = pod["spec"]
            names = [c["name"] for c in spec["containers"]] + [
                c["name"] for c in spec.get("initContainers") or []
            ]
            container = rng.choice(names)
            term = rng.choices([t for t, _ in TERMINATIONS], weights)[0]
            name = pod["metadata"]["name"]
            async with sem:
                t0 = time.time()
                updated = await kubelet.restart_container(
                    NAMESPACE, name, container, term, previous_log=[f"{name} {container} log line {k}" for k in range(20)],
                    then=rng.choice(["running", "crashloop"]),
                )  # fmt: skip
            statuses = (updated["status"].get("containerStatuses") or []) + (
                updated["status"].get("initContainerStatuses") or []
            )
            count = next(s["restartCount"] for s in statuses if s["name"] == container)
            injected[(NAMESPACE, name, container, int(count))] = t0

        start = time.time() + 1.0
        plan = [(rng.choice(pods), start + args.seconds * k / args.restarts) for k in range(args.restarts)]
        t_inject = time.time()
        await asyncio.gather(*(inject(p, at) for p, at in plan))
        inject_s = time.time() - t_inject
        console.print(f"injected {len(injected)} restarts in {inject_s:.1f} s")

        pattern = AIRWALLEX_PATTERN if args.pattern == "airwallex" else CAPSTAN_PATTERN
        receiver: SlackReceiver = args.receiver
        deadline = time.time() + args.mute + args.drain_timeout
        result = account(list(injected), messages_from_slack_receiver(receiver.snapshot()), pattern)
        while result.ratio < 1.0 and time.time() < deadline and child.poll() is None:
            await asyncio.sleep(2)
            result = account(list(injected), messages_from_slack_receiver(receiver.snapshot()), pattern)
        cpu, rss = proc_stats(child.pid) if child.poll() is None else (float("nan"), float("nan"))
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
        lat = sorted(
            result.first_seen[i] - t
            for i, t in injected.items()
            if i in result.first_seen and i not in result.digested
        )
        stages = stage_latencies(workdir / "collector.log", injected, result)
        args.collector_log = (workdir / "collector.log").read_bytes()
        return {
            "injected": len(injected),
            "accounted": result.accounted,
            "individually": result.individually,
            "in_digest": result.in_digest,
            "duplicates": result.duplicates,
            "p50_s": percentile(lat, 50) if lat else None,
            "p99_s": percentile(lat, 99) if lat else None,
            "cpu_s": cpu,
            "rss_mb": rss,
            "messages": len(receiver.messages),
            "count_429": receiver.count_429,
            "refused": len(receiver.snapshot()["rejected"]),
            "inject_s": inject_s,
            "stages": stages,
            "latencies_s": lat,
        }


def stage_latencies(
    log_path: Path, injected: dict[tuple[str, str, str, int], float], result: Any
) -> dict[str, dict[str, float]]:
    """Where an individually reported restart's time goes, from Capstan's "restart reported" log lines:
    injection → detection (watch delivery + worker queue), detection → enqueue (the evidence), enqueue →
    receipt (outbox pacing + the send). Empty for collectors that do not write those lines."""
    parts: dict[str, list[float]] = {"detect": [], "evidence": [], "deliver": []}
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        if '"restart reported"' not in line:
            continue
        try:
            rec = json.loads(line)
            ns, pod = str(rec["pod"]).split("/", 1)
            key = (ns, pod, str(rec["container"]), int(rec["restart_count"]))
        except (ValueError, KeyError):
            continue
        if key not in injected or key not in result.first_seen:
            continue
        parts["detect"].append(float(rec["detected_at"]) - injected[key])
        parts["evidence"].append(float(rec["enqueued_at"]) - float(rec["detected_at"]))
        parts["deliver"].append(result.first_seen[key] - float(rec["enqueued_at"]))
        for part, seconds in (rec.get("evidence_seconds") or {}).items():
            parts.setdefault(f"evidence.{part}", []).append(float(seconds))
    out = {}
    for name, values in parts.items():
        if values:
            values.sort()
            out[name] = {
                "n": len(values),
                "p50_s": percentile(values, 50),
                "p99_s": percentile(values, 99),
                "max_s": values[-1],
            }
    return out


def plot(result: dict[str, Any], path: Path, args: argparse.Namespace) -> None:
    """Detection-to-delivery CDF of the individually reported restarts, and where the time went (p50/p99)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    lat = result.get("latencies_s") or []
    if lat:
        left.step(lat, [(i + 1) / len(lat) for i in range(len(lat))], where="post")
    left.axvline(limit("restarts.latency_p99"), color="red", linestyle="--", label="goal: p99 ≤ 2 s")
    left.set_xlabel("injection → message received (s)")
    left.set_ylabel("fraction of individually reported restarts")
    left.set_title(f"{args.restarts} restarts over {args.pods} pods in {args.seconds:.0f} s")
    left.legend()
    stages = result.get("stages") or {}
    names = [n for n in ("detect", "evidence", "deliver") if n in stages]
    xs = range(len(names))
    right.bar([x - 0.2 for x in xs], [stages[n]["p50_s"] for n in names], width=0.4, label="p50")
    right.bar([x + 0.2 for x in xs], [stages[n]["p99_s"] for n in names], width=0.4, label="p99")
    right.set_xticks(list(xs), names)
    right.set_ylabel("seconds")
    right.set_title("where the time goes")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out", help="where JSON and plots go")
    ap.add_argument("--deployments", type=int, default=20)
    ap.add_argument("--restarts", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--mute", type=float, default=30.0, help="mute window of the generated Capstan config")
    ap.add_argument(
        "--collector", default=DEFAULT_COLLECTOR, help="command-line template of the collector under test"
    )
    ap.add_argument("--pattern", choices=["capstan", "airwallex"], default="capstan")
    ap.add_argument(
        "--label", default=None, help="name of the collector in the table; also names the output files"
    )
    ap.add_argument("--warmup", type=float, default=20.0)
    ap.add_argument("--drain-timeout", type=float, default=240.0)
    ap.add_argument("--rate", type=float, default=None, help="receiver rate limit per destination (msgs/s)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", metavar="DIR", help="leave the sandbox up under DIR/sandbox for --sandbox-dir")
    ap.add_argument("--sandbox-dir", help="reuse a sandbox an earlier run left up with --keep (its pods too)")
    ap.add_argument("--smoke", action="store_true", help="10 pods, 20 restarts in 10 s")
    args = ap.parse_args()
    if args.smoke:
        args.pods, args.deployments, args.restarts, args.seconds, args.mute, args.warmup = (
            10,
            5,
            20,
            10.0,
            5.0,
            15.0,
        )
    console = Console(width=140)
    with tempfile.TemporaryDirectory(prefix="capstan-bench-storm-") as tmp:
        args.workdir = tmp
        receiver = SlackReceiver()
        if args.rate:
            receiver.set_rate(args.rate, burst=3)
        args.receiver = receiver
        if args.sandbox_dir:  # a sandbox left up by an earlier run (see --keep): same pods, no set-up wait
            box = Sandbox(Path(args.sandbox_dir), require_toolchain())
            loaded = box.load_state()
            if loaded is None or not box.is_up():
                raise SystemExit(f"--sandbox-dir {args.sandbox_dir}: no running sandbox there")
            state = loaded
        else:
            box = Sandbox(Path(args.keep or tmp) / "sandbox", require_toolchain())
            pool = NodePool(
                name="storm", count=max(1, -(-args.pods // 400)), cpu="1000", memory="4Ti", pods=500
            )
            state = box.up(SandboxSpec(name="storm", node_pools=[pool]), timeout=240)
        try:
            with serve_in_thread(receiver.app) as server:
                receiver.base_url = server.url
                webhook = f"{server.url}/services/{DEV_WEBHOOK_PATH}"
                result = asyncio.run(storm(args, state.kubeconfig, webhook, box, console))
        finally:
            if not (args.sandbox_dir or args.keep):
                box.down()
    label = args.label or ("capstan" if args.collector == DEFAULT_COLLECTOR else "collector")
    table = Table(
        title=f"restart storm: {args.restarts} restarts over {args.pods} pods in {args.seconds:.0f} s"
    )
    for col in (
        "collector",
        "accounted",
        "individually",
        "in digests",
        "latency p50",
        "latency p99",
        "CPU",
        "peak RSS",
        "messages",
        "refused",
        "429s",
    ):
        table.add_column(col, justify="right")
    fmt = lambda v, unit="s": "-" if v is None else f"{v:.2f} {unit}"  # noqa: E731
    table.add_row(
        label,
        f"{result['accounted']}/{result['injected']}",
        str(result["individually"]),
        str(result["in_digest"]),
        fmt(result["p50_s"]),
        fmt(result["p99_s"]),
        fmt(result["cpu_s"]),
        fmt(result["rss_mb"], "MB"),
        str(result["messages"]),
        str(result["refused"]),
        str(result["count_429"]),
    )
    console.print(table)
    for name, st in result.get("stages", {}).items():
        console.print(
            f"  {name:>17}: p50 {st['p50_s']:.2f} s, p99 {st['p99_s']:.2f} s, max {st['max_s']:.2f} s (n={st['n']})"
        )
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    stem = "restart_storm" if args.label is None else f"restart_storm_{args.label}"
    (out / f"{stem}_collector.log").write_bytes(args.collector_log)  # what the collector said, for the docs
    plot(result, out / f"{stem}_latency.png", args)
    (out / f"{stem}.json").write_text(
        json.dumps(
            {
                "args": {k: v for k, v in vars(args).items() if k not in ("receiver", "collector_log")},
                **result,
            },
            indent=2,
            default=str,
        )
    )


if __name__ == "__main__":
    main()
