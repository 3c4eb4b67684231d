"""Time from `capstan sandbox up` to a schedulable cluster (binaries already built), split by phase.

"Schedulable" means: every kwok node Ready, the scheduler and controller-manager healthy, the default
ServiceAccount present; the run then creates one pod and waits until it is Running on a kwok node, which is
reported separately as the first-pod latency. Goal: ≤ 30 s.

    .venv/bin/python bench/sandbox_startup.py --runs 3
    .venv/bin/python bench/sandbox_startup.py --smoke
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from capstan.kube import KubeClient, resources
from capstan.sandbox import NodePool, Sandbox, SandboxSpec, require_toolchain
from goals import limit

PHASES = (
    "generating certificates",
    "starting etcd",
    "starting kube-apiserver",
    "installing kwok resources",
    "starting kube-controller-manager",
    "creating",
    "sandbox up",
)


async def first_pod(kubeconfig: str) -> float:
    client = await KubeClient.from_kubeconfig(kubeconfig)
    t0 = time.perf_counter()
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "first", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "example.com/c:1"}]},
    }
    await client.create(resources.PODS, body)
    for _ in range(600):
        pod = await client.get(resources.PODS, "first", "default")
        if (pod.get("status") or {}).get("phase") == "Running":
            break
        await asyncio.sleep(0.02)
    elapsed = time.perf_counter() - t0
    await client.close()
    return elapsed


def one_run(nodes: int) -> dict[str, float]:
    spec = SandboxSpec(name="bench")
    if nodes:
        spec = SandboxSpec(
            name="bench",
            node_pools=[*spec.node_pools, NodePool(name="extra", count=nodes, cpu="32", memory="128Gi")],
        )
    marks: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="capstan-bench-") as tmp:
        box = Sandbox(Path(tmp), require_toolchain())
        t0 = time.perf_counter()
        state = box.up(spec, timeout=240, on_step=lambda msg: marks.append((msg, time.perf_counter() - t0)))
        total = time.perf_counter() - t0
        try:
            pod_s = asyncio.run(first_pod(state.kubeconfig))
        finally:
            box.down()
    starts = {name: next((t for msg, t in marks if msg.startswith(name)), total) for name in PHASES}
    return {
        "total_s": total,
        "pki_s": starts["starting etcd"] - starts["generating certificates"],
        "etcd_s": starts["starting kube-apiserver"] - starts["starting etcd"],
        "apiserver_s": starts["installing kwok resources"] - starts["starting kube-apiserver"],
        "components_s": starts["creating"] - starts["installing kwok resources"],
        "nodes_s": total - starts["creating"],
        "first_pod_s": pod_s,
        "nodes": sum(p.count for p in spec.node_pools),
    }


def main() -> None:
    # A SIGTERM unwinds like Ctrl-C, so a sandbox started here is always stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--extra-nodes", type=int, default=0, help="add a pool of this many CPU nodes")
    ap.add_argument("--smoke", action="store_true", help="one run, for the test suite")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out", help="where JSON and plots go")
    args = ap.parse_args()
    runs = 1 if args.smoke else args.runs
    console = Console(width=140)
    results = []
    for i in range(runs):
        results.append(one_run(args.extra_nodes))
        console.print(f"run {i + 1}: {results[-1]['total_s']:.1f} s")
    table = Table(title=f"sandbox up → schedulable ({results[0]['nodes']} kwok nodes), {runs} run(s)")
    cols = ("total_s", "pki_s", "etcd_s", "apiserver_s", "components_s", "nodes_s", "first_pod_s")
    table.add_column("run")
    for c in cols:
        table.add_column(c.removesuffix("_s"), justify="right")
    for i, r in enumerate(results, 1):
        table.add_row(str(i), *(f"{r[c]:.2f} s" for c in cols))
    if runs > 1:
        table.add_row("median", *(f"{statistics.median(r[c] for r in results):.2f} s" for c in cols))
    console.print(table)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "sandbox_startup.json").write_text(json.dumps(results, indent=2))
    if not args.smoke:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        bottom = [0.0] * runs
        for c in cols[1:6]:
            vals = [r[c] for r in results]
            ax.bar([f"run {i + 1}" for i in range(runs)], vals, bottom=bottom, label=c.removesuffix("_s"))
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.axhline(limit("sandbox.startup"), color="red", linestyle="--", linewidth=1, label="goal 30 s")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "sandbox_startup.png", dpi=110)
        console.print(f"plot: {out / 'sandbox_startup.png'}")


if __name__ == "__main__":
    main()
