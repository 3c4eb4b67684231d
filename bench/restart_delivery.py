"""Restart notifications under a storm, without a cluster: detection → report → outbox → drainer → chat.

A seeded storm of container restarts (``--restarts`` over ``--pods`` pods of ``--workloads`` Deployments, spread
over ``--duration`` seconds; some pods have a second container, an init container or a native sidecar) is fed as
pod updates through the pure core (``detect_restarts``, ``build_report``, ``RestartNotifier`` with per-workload mute
windows of ``--mute`` seconds) into an outbox drained by ``Drainer`` to the local Slack receiver (``capstan dev
slack``, a separate process) which enforces ``--receiver-rate`` messages/s per destination and answers 429 with
Retry-After beyond it. Peers, same run and same storm, each in its own child process (so CPU and RSS are its own):

- ``memory+webhook``: in-memory outbox, Slack incoming webhook;
- ``sqlite+webhook``: the SQLite store's outbox, Slack incoming webhook;
- ``sqlite+bot``: the SQLite store's outbox, Slack bot token (chat.postMessage + log upload via files_upload_v2).

Reported per peer: restarts accounted for (individually or in a digest, matched by namespace, pod, container and
restart number) out of injected; latency from injection to arrival at the receiver for individually reported
restarts (p50/p99) and for digested ones; 429s received; CPU seconds and peak RSS of the child. The live storm on
the sandbox (issue 4's benchmark) is separate; this isolates what Capstan adds after detection.

Prints a Rich table, writes bench/out/restart_delivery.json and bench/out/restart_delivery_latency.png.
``--smoke`` runs in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from capstan.percentile import percentile

ROOT = Path(__file__).resolve().parent.parent
PEERS = ("memory+webhook", "sqlite+webhook", "sqlite+bot")
WEBHOOK_PATH = "T0CAPSTAN/B0CAPSTAN/capstandevwebhook0000001"
TOKEN = "xoxb-capstan-dev-token"


# ---- the storm (deterministic for a seed) ----------------------------------------------------------------


def make_pods(pods: int, workloads: int, rng: random.Random) -> list[dict[str, Any]]:
    out = []
    for i in range(pods):
        w = i % workloads
        name = f"svc-{w:03d}-5d8f7c9b4-{i:05d}"
        containers = [
            {"name": "app", "resources": {"limits": {"memory": "1Gi"}, "requests": {"cpu": "500m"}}}
        ]
        statuses = [{"name": "app", "restartCount": 0, "state": {"running": {}}}]
        init, init_statuses = [], []
        shape = rng.random()
        if shape < 0.2:
            containers.append({"name": "proxy", "resources": {}})
            statuses.append({"name": "proxy", "restartCount": 0, "state": {"running": {}}})
        elif shape < 0.3:
            init.append({"name": "migrate"})
            init_statuses.append(
                {"name": "migrate", "restartCount": 0, "state": {"terminated": {"exitCode": 0}}}
            )
        elif shape < 0.4:
            init.append({"name": "log-shipper", "restartPolicy": "Always"})
            init_statuses.append({"name": "log-shipper", "restartCount": 0, "state": {"running": {}}})
        out.append(
            {
                "metadata": {
                    "name": name,
                    "namespace": f"team-{w % 5}",
                    "uid": f"uid-{i:06d}",
                    "labels": {"app": f"svc-{w:03d}", "pod-template-hash": "5d8f7c9b4"},
                    "ownerReferences": [
                        {"kind": "ReplicaSet", "name": f"svc-{w:03d}-5d8f7c9b4", "controller": True}
                    ],
                },
                "spec": {"nodeName": f"node-{i % 10}", "containers": containers, "initContainers": init},
                "status": {"containerStatuses": statuses, "initContainerStatuses": init_statuses},
            }
        )
    return out


REASONS = [("OOMKilled", 137), ("Error", 1), ("Error", 137), ("Error", 143), ("Completed", 0), ("Error", 139)]


def storm(args: argparse.Namespace) -> list[tuple[float, int, str, str, int]]:
    """(offset seconds, pod index, container, reason, exit code), sorted by time."""
    rng = random.Random(args.seed)
    pods = make_pods(args.pods, args.workloads, rng)
    events = []
    for _ in range(args.restarts):
        i = rng.randrange(len(pods))
        names = [
            c["name"]
            for c in pods[i]["status"]["containerStatuses"] + pods[i]["status"]["initContainerStatuses"]
        ]
        container = names[0] if rng.random() < 0.7 else rng.choice(names)
        reason, code = rng.choice(REASONS)
        events.append((rng.uniform(0, args.duration), i, container, reason, code))
    return sorted(events)


# ---- one peer, in a child process ------------------------------------------------------------------------


async def run_peer(args: argparse.Namespace) -> dict[str, Any]:
    import copy

    from prometheus_client import CollectorRegistry

    from capstan.config import load_model
    from capstan.notify import (
        DeliveryPolicy,
        Drainer,
        MemoryOutbox,
        NotifyMetrics,
        SlackBotSink,
        SlackWebhookSink,
    )
    from capstan.restarts import RestartNotifier, RestartsConfig, RestartSnapshot, detect_restarts

    base = f"http://127.0.0.1:{args.port}"
    outbox: Any
    if args.peer.startswith("sqlite"):
        from capstan.store import open_store

        outbox = open_store(str(Path(args.workdir) / f"{args.peer}.db")).outbox
    else:
        outbox = MemoryOutbox()
    if args.peer.endswith("bot"):
        sink: Any = SlackBotSink("slack", TOKEN, "#alerts", base_url=base + "/api/", timeout=10)
        sink_conf = {
            "type": "slack_bot",
            "name": "slack",
            "token": TOKEN,
            "channel": "#alerts",
            "base_url": base + "/api/",
        }
    else:
        sink = SlackWebhookSink("slack", f"{base}/services/{WEBHOOK_PATH}", timeout=10)
        sink_conf = {"type": "slack_webhook", "name": "slack", "url": f"{base}/services/{WEBHOOK_PATH}"}
    config = load_model(
        RestartsConfig,
        {"cluster_name": "bench", "mute_seconds": args.mute, "restart_cap": 0, "sinks": [sink_conf]},
        "bench",
    )
    policy = DeliveryPolicy(rate_per_second=args.rate, burst=3, max_attempts=50, backoff_base_seconds=0.5)
    drainer = Drainer(
        outbox,
        {"slack": sink},
        clock=time.time,
        rng=random.Random(args.seed),
        policy=policy,
        metrics=NotifyMetrics(CollectorRegistry()),
    )
    notifier = RestartNotifier(config, drainer.enqueue)
    pods = make_pods(args.pods, args.workloads, random.Random(args.seed))
    log = "\n".join(f"2026-11-29T10:00:{i % 60:02d}Z worker step {i} loss=0.{i:04d}" for i in range(200))
    injected: dict[tuple[str, str, str, int], float] = {}
    stop = asyncio.Event()
    drain_task = asyncio.create_task(drainer.run(stop))

    async def ticker() -> None:
        while not stop.is_set():
            notifier.tick(time.time())
            await asyncio.sleep(0.1)

    tick_task = asyncio.create_task(ticker())
    cpu0 = time.process_time()
    start = time.time()
    for offset, i, container, reason, code in storm(args):
        delay = start + offset - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        old = pods[i]
        new = copy.deepcopy(old)
        for cs in new["status"]["containerStatuses"] + new["status"]["initContainerStatuses"]:
            if cs["name"] == container:
                cs["restartCount"] += 1
                cs["lastState"] = {
                    "terminated": {
                        "reason": reason,
                        "exitCode": code,
                        "startedAt": "2026-11-29T10:00:00Z",
                        "finishedAt": "2026-11-29T10:05:00Z",
                    }
                }
        pods[i] = new
        now = time.time()
        for restart in detect_restarts(old, new):
            for number in restart.restart_numbers:
                injected[(restart.namespace, restart.pod, restart.container, number)] = now
            snapshot = RestartSnapshot(restart=restart, pod=new, observed_at=now, previous_log=log)
            notifier.on_restart(snapshot, now)
    inject_end = time.time()
    # let the last mute windows end, then wait (bounded) for the outbox to empty
    deadline = inject_end + args.mute + args.drain_timeout
    while time.time() < deadline:
        if time.time() > inject_end + args.mute:
            notifier.flush(time.time())
            if not outbox.items(state="pending", limit=1):
                break
        await asyncio.sleep(0.2)
    stop.set()
    await asyncio.gather(drain_task, tick_task)
    cpu = time.process_time() - cpu0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "peer": args.peer,
        "injected": {"|".join(map(str, k)): v for k, v in injected.items()},
        "cpu_seconds": cpu,
        "peak_rss_mb": rss_mb,
        "wall_seconds": time.time() - start,
        "pending_left": len(outbox.items(state="pending", limit=100_000)),
        "dead": len(outbox.items(state="dead", limit=100_000)),
    }


# ---- the parent: receiver, peers, accounting, table, plot ------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _key(text: str) -> tuple[str, str, str, int]:
    ns, pod, container, number = text.split("|")
    return (ns, pod, container, int(number))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--restarts", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--workloads", type=int, default=20)
    parser.add_argument(
        "--duration", type=float, default=60.0, help="Seconds over which restarts are injected."
    )
    parser.add_argument("--mute", type=float, default=30.0, help="Mute window per workload (seconds).")
    parser.add_argument("--rate", type=float, default=1.0, help="Drainer: messages/s per destination.")
    parser.add_argument("--receiver-rate", type=float, default=0.9, help="Receiver: messages/s before 429.")
    parser.add_argument("--drain-timeout", type=float, default=900.0)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.restarts, args.pods, args.workloads, args.duration, args.mute = 60, 20, 4, 3.0, 2.0
        args.rate, args.receiver_rate, args.drain_timeout = 20.0, 15.0, 120.0
    if args.peer:  # child mode
        Path(args.result).write_text(json.dumps(asyncio.run(run_peer(args))))
        return

    import httpx
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rich.console import Console
    from rich.table import Table

    from capstan.restarts import account, messages_from_slack_receiver

    args.out.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    receiver = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from capstan.cli.dev import app; app(sys.argv[1:])",
            "slack",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    results = []
    try:
        for _ in range(300):  # up to ~30 s for the receiver to listen
            try:
                httpx.get(base + "/_admin/messages", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        with tempfile.TemporaryDirectory() as workdir:
            for peer in PEERS:
                httpx.delete(base + "/_admin/messages", timeout=10)
                httpx.post(
                    base + "/_admin/ratelimit", json={"rate": args.receiver_rate, "burst": 3}, timeout=10
                )
                result_file = Path(workdir) / f"{peer}.json"
                child = [
                    sys.executable,
                    __file__,
                    "--peer",
                    peer,
                    "--port",
                    str(port),
                    "--workdir",
                    workdir,
                    "--result",
                    str(result_file),
                    *(
                        f"--{k}={v}"
                        for k, v in (
                            ("restarts", args.restarts),
                            ("pods", args.pods),
                            ("workloads", args.workloads),
                            ("duration", args.duration),
                            ("mute", args.mute),
                            ("rate", args.rate),
                            ("drain-timeout", args.drain_timeout),
                            ("seed", args.seed),
                        )
                    ),
                ]
                subprocess.run(
                    child, check=True, timeout=args.duration + args.mute + args.drain_timeout + 120
                )
                data = json.loads(result_file.read_text())
                snapshot = httpx.get(base + "/_admin/messages", timeout=30).json()
                injected_times = {_key(k): v for k, v in data["injected"].items()}
                acc = account(list(injected_times), messages_from_slack_receiver(snapshot))
                individual: list[float] = []
                digested: list[float] = []
                for item, seen_at in acc.first_seen.items():
                    delay = seen_at - injected_times[item]
                    (digested if item in acc.digested else individual).append(delay)
                results.append(
                    {
                        "peer": peer,
                        "injected": acc.injected,
                        "accounted": acc.accounted,
                        "individually": acc.individually,
                        "in_digest": acc.in_digest,
                        "missing": len(acc.missing),
                        "duplicates": acc.duplicates,
                        "messages": len(snapshot["messages"]),
                        "count_429": snapshot["count_429"],
                        "individual_p50": percentile(individual, 50),
                        "individual_p99": percentile(individual, 99),
                        "digest_p50": percentile(digested, 50),
                        "cpu_seconds": data["cpu_seconds"],
                        "peak_rss_mb": data["peak_rss_mb"],
                        "dead": data["dead"],
                        "pending_left": data["pending_left"],
                        "latencies_individual": sorted(individual),
                        "latencies_digest": sorted(digested),
                    }
                )
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)

    console = Console(width=180)
    table = Table(
        title=f"Restart delivery: {args.restarts} restarts over {args.pods} pods / {args.workloads} workloads in "
        f"{args.duration:g}s, mute {args.mute:g}s, drainer {args.rate:g}/s, receiver {args.receiver_rate:g}/s"
    )
    for col in (
        "peer",
        "accounted",
        "individually",
        "in digest",
        "missing",
        "messages",
        "429s",
        "indiv. p50 s",
        "indiv. p99 s",
        "digest p50 s",
        "CPU s",
        "peak RSS MB",
        "dead",
    ):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(
            r["peer"],
            f"{r['accounted']}/{r['injected']} ({100 * r['accounted'] / max(1, r['injected']):.1f} %)",
            str(r["individually"]),
            str(r["in_digest"]),
            str(r["missing"]),
            str(r["messages"]),
            str(r["count_429"]),
            f"{r['individual_p50']:.2f}",
            f"{r['individual_p99']:.2f}",
            f"{r['digest_p50']:.2f}",
            f"{r['cpu_seconds']:.2f}",
            f"{r['peak_rss_mb']:.0f}",
            str(r["dead"]),
        )
    console.print(table)
    base_cpu = results[0]["cpu_seconds"] or float("nan")
    console.print(
        "CPU ratio vs memory+webhook: "
        + ", ".join(f"{r['peer']} {r['cpu_seconds'] / base_cpu:.2f}×" for r in results)
    )
    (args.out / "restart_delivery.json").write_text(
        json.dumps(
            {"args": {k: v for k, v in vars(args).items() if k not in ("out",)}, "results": results},
            indent=2,
            default=str,
        )
    )
    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        lat = r["latencies_individual"]
        if lat:
            ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], label=f"{r['peer']} (individual)")
    ax.set_xlabel("injection → arrival at receiver (s)")
    ax.set_ylabel("fraction of individually reported restarts")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.out / "restart_delivery_latency.png", dpi=110)


if __name__ == "__main__":
    main()
