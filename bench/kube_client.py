"""Which async Kubernetes client should capstan.kube stand on? Decode and watch N pods with each, same cluster, same run.

Variants, each in its own process (so peak RSS is its own):
  capstan           capstan.kube: lightkube's kubeconfig handling + httpx2, responses decoded once to dicts
  k8s-asyncio-raw   kubernetes_asyncio's ApiClient transport (aiohttp), responses decoded to dicts
  k8s-asyncio-models kubernetes_asyncio's generated API and models (list_namespaced_pod, Watch().stream)
  kr8s              kr8s.asyncio: api.get / api.watch (APIObject wrappers)
  lightkube         lightkube AsyncClient: list / watch into its typed models
and three Capstan processes over the same pods: the bare informer, the restart watcher and the history recorder
(time to a complete first view, peak RSS).

The cluster is the real sandbox control plane with N kwok pods (Running). Each variant lists the namespace's pods
(best of 3) and then watches from the resourceVersion taken before the pods were created, until it has received
the same number of events the reference watch received.

    .venv/bin/python bench/kube_client.py --pods 10000
    .venv/bin/python bench/kube_client.py --smoke
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

VARIANTS = (
    "capstan",
    "k8s-asyncio-raw",
    "k8s-asyncio-models",
    "kr8s",
    "lightkube",
    "capstan-informer",
    "restart-watcher",
    "recorder",
)
CLIENTS = VARIANTS[:5]


def peak_rss_mb() -> float:
    """VmHWM of this process (ru_maxrss would include the forking parent's peak: it survives exec on Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---------------------------------------------------------------------------------------------- variants (child side)
async def run_capstan(
    kubeconfig: str, since: str, expect: int, namespace: str
) -> tuple[float, int, float, int]:
    from capstan.kube import KubeClient, resources

    client = await KubeClient.from_kubeconfig(kubeconfig, timeout=300)
    best = float("inf")
    n = 0
    for _ in range(3):
        t0 = time.perf_counter()
        items, _ = await client.list(resources.PODS, namespace=namespace)
        best = min(best, time.perf_counter() - t0)
        n = len(items)
        del items
    t0 = time.perf_counter()
    seen = 0
    async for _event in client.watch(
        resources.PODS, resource_version=since, namespace=namespace, bookmarks=False
    ):
        seen += 1
        if seen >= expect:
            break
    watch_s = time.perf_counter() - t0
    await client.close()
    return best, n, watch_s, seen


async def run_k8s_raw(
    kubeconfig: str, since: str, expect: int, namespace: str
) -> tuple[float, int, float, int]:
    """kubernetes_asyncio's ApiClient transport (aiohttp), responses decoded to dicts: Capstan's first design."""
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    api = client.ApiClient(cfg)
    path = f"/api/v1/namespaces/{namespace}/pods"

    async def get_json(query: list[tuple[str, str]]) -> Any:
        resp = await api.call_api(
            path, "GET", query_params=query, auth_settings=["BearerToken"], _preload_content=False,
            _request_timeout=300,
        )  # fmt: skip
        try:
            return json.loads(await resp.read())
        finally:
            resp.release()

    best = float("inf")
    n = 0
    for _ in range(3):
        t0 = time.perf_counter()
        items: list[Any] = []
        cont = ""
        while True:
            query = [("limit", "500")] + ([("continue", cont)] if cont else [])
            page = await get_json(query)
            items.extend(page["items"])
            cont = page["metadata"].get("continue") or ""
            if not cont:
                break
        best = min(best, time.perf_counter() - t0)
        n = len(items)
        del items
    t0 = time.perf_counter()
    seen = 0
    resp = await api.call_api(
        path, "GET", query_params=[("watch", "true"), ("resourceVersion", since), ("timeoutSeconds", "600")],
        auth_settings=["BearerToken"], _preload_content=False, _request_timeout=900,
    )  # fmt: skip
    buffer = b""
    async for chunk in resp.content.iter_any():
        buffer += chunk
        while (nl := buffer.find(b"\n")) >= 0:
            line, buffer = buffer[:nl], buffer[nl + 1 :]
            json.loads(line)
            seen += 1
        if seen >= expect:
            break
    resp.release()
    watch_s = time.perf_counter() - t0
    await api.close()
    return best, n, watch_s, seen


async def run_models(
    kubeconfig: str, since: str, expect: int, namespace: str
) -> tuple[float, int, float, int]:
    from kubernetes_asyncio import client, config, watch

    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    api = client.ApiClient(cfg)
    v1 = client.CoreV1Api(api)
    best = float("inf")
    n = 0
    for _ in range(3):
        t0 = time.perf_counter()
        items: list[Any] = []
        cont = None
        while True:
            page = await v1.list_namespaced_pod(namespace, limit=500, _continue=cont)
            items.extend(page.items)
            cont = page.metadata._continue
            if not cont:
                break
        best = min(best, time.perf_counter() - t0)
        n = len(items)
        del items
    t0 = time.perf_counter()
    seen = 0
    w = watch.Watch()
    async with w.stream(
        v1.list_namespaced_pod, namespace, resource_version=since, timeout_seconds=600
    ) as stream:
        async for _event in stream:
            seen += 1
            if seen >= expect:
                break
    watch_s = time.perf_counter() - t0
    await api.close()
    return best, n, watch_s, seen


async def run_kr8s(kubeconfig: str, since: str, expect: int, namespace: str) -> tuple[float, int, float, int]:
    import kr8s.asyncio

    api = await kr8s.asyncio.api(kubeconfig=kubeconfig)
    best = float("inf")
    n = 0
    for _ in range(3):
        t0 = time.perf_counter()
        items = [p async for p in api.get("pods", namespace=namespace)]
        best = min(best, time.perf_counter() - t0)
        n = len(items)
        del items
    t0 = time.perf_counter()
    seen = 0
    async for _event in api.watch("pods", namespace=namespace, since=since):
        seen += 1
        if seen >= expect:
            break
    watch_s = time.perf_counter() - t0
    return best, n, watch_s, seen


async def run_lightkube(
    kubeconfig: str, since: str, expect: int, namespace: str
) -> tuple[float, int, float, int]:
    from lightkube import AsyncClient, KubeConfig
    from lightkube.resources.core_v1 import Pod

    client = AsyncClient(config=KubeConfig.from_file(kubeconfig), timeout=300)
    best = float("inf")
    n = 0
    for _ in range(3):
        t0 = time.perf_counter()
        items = [p async for p in client.list(Pod, namespace=namespace, chunk_size=500)]
        best = min(best, time.perf_counter() - t0)
        n = len(items)
        del items
    t0 = time.perf_counter()
    seen = 0
    async for _event in client.watch(Pod, namespace=namespace, resource_version=since):
        seen += 1
        if seen >= expect:
            break
    watch_s = time.perf_counter() - t0
    await client.close()
    return best, n, watch_s, seen


async def _until_synced(run: Any, synced: asyncio.Event) -> float:
    stop = asyncio.Event()
    t0 = time.perf_counter()
    task = asyncio.create_task(run(stop))
    await asyncio.wait_for(synced.wait(), 1800)
    elapsed = time.perf_counter() - t0
    await asyncio.sleep(2)  # a little steady state
    stop.set()
    await asyncio.wait_for(task, 120)
    return elapsed


async def run_informer(
    kubeconfig: str, since: str, expect: int, namespace: str
) -> tuple[float, int, float, int]:
    """Capstan's informer over the same pods, keeping only identities (what the restart watcher does)."""
    from capstan.kube import Informer, KubeClient, resources

    client = await KubeClient.from_kubeconfig(kubeconfig, timeout=300)
    informer = Informer(client, resources.PODS, namespace=namespace, keep_objects=False)
    t0 = time.perf_counter()
    n = 0
    async for delta in informer.deltas():
        if delta.type == "synced":
            break
        n += 1
    elapsed = time.perf_counter() - t0
    informer.stop()
    await client.close()
    return elapsed, n, 0.0, 0


async def run_restart_watcher(
    kubeconfig: str, since: str, expect: int, namespace: str
) -> tuple[float, int, float, int]:
    """The restart diagnostics process (informer, baselines written to SQLite, drainer) until synced."""
    from capstan.kube import KubeClient
    from capstan.restarts import RestartsConfig, RestartWatcher
    from capstan.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"{tmp}/history.db")
        client = await KubeClient.from_kubeconfig(kubeconfig, timeout=300)
        cfg = RestartsConfig.model_validate(
            {"sinks": [{"name": "hook", "type": "webhook", "url": "http://127.0.0.1:9/hook"}]}
        )
        watcher = RestartWatcher.over_store(cfg, client, store, namespace=namespace)
        elapsed = await _until_synced(watcher.run, watcher.synced)
        n = len({uid for uid, _ in store.restart_records.restart_counts()})
        await client.close()
        store.close()
    return elapsed, n, 0.0, 0


async def run_recorder(
    kubeconfig: str, since: str, expect: int, namespace: str
) -> tuple[float, int, float, int]:
    """The history recorder (pods only) into SQLite until its first list is stored."""
    from capstan.kube import KubeClient
    from capstan.record import KubeCollector, KubernetesConfig
    from capstan.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"{tmp}/history.db")
        config = KubernetesConfig(kinds=["Pod"], events=False, namespace=namespace)
        collector = KubeCollector(
            config, store.history, connect=functools.partial(KubeClient.from_kubeconfig, kubeconfig)
        )
        # The one watch's key names its namespace (`/v1/Pod@ns=<namespace>`): take it from the config.
        (watch,) = config.watches()
        synced = collector.synced.setdefault(watch.key, asyncio.Event())
        elapsed = await _until_synced(collector.run, synced)
        n = store.database.count("object_state")
        store.close()
    return elapsed, n, 0.0, 0


RUNNERS = {
    "capstan": run_capstan,
    "k8s-asyncio-raw": run_k8s_raw,
    "k8s-asyncio-models": run_models,
    "kr8s": run_kr8s,
    "lightkube": run_lightkube,
    "capstan-informer": run_informer,
    "restart-watcher": run_restart_watcher,
    "recorder": run_recorder,
}
CONSUMERS = ("capstan-informer", "restart-watcher", "recorder")


def child(variant: str, kubeconfig: str, since: str, expect: int, namespace: str) -> None:
    list_s, n, watch_s, seen = asyncio.run(RUNNERS[variant](kubeconfig, since, expect, namespace))
    print(
        json.dumps(
            {
                "variant": variant,
                "list_s": list_s,
                "items": n,
                "watch_s": watch_s,
                "events": seen,
                "rss_mb": peak_rss_mb(),
            }
        )
    )


# ----------------------------------------------------------------------------------------------------- parent side
async def prepare(kubeconfig: str, pods: int, namespace: str) -> tuple[str, int]:
    """Create the namespace and N pods; returns (rv before creation, events a watch from it sees)."""
    from capstan.kube import ApiError, KubeClient, resources

    client = await KubeClient.from_kubeconfig(kubeconfig, timeout=120)
    try:
        await client.create(
            resources.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
    except ApiError as exc:
        if not exc.conflict:
            raise
    for _ in range(400):
        try:
            await client.get(resources.SERVICE_ACCOUNTS, "default", namespace)
            break
        except ApiError:
            await asyncio.sleep(0.05)
    _, since = await client.list(resources.PODS, namespace=namespace, limit=1)
    sem = asyncio.Semaphore(48)

    async def make(i: int) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"p-{i}",
                "namespace": namespace,
                "labels": {"app": f"app-{i % 50}", "tier": "bench"},
            },
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example.com/app:1.0",
                        "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}},
                        "env": [{"name": f"VAR_{k}", "value": "x" * 20} for k in range(5)],
                    },
                    {"name": "sidecar", "image": "registry.example.com/proxy:1.0"},
                ],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        }
        async with sem:
            await client.create(resources.PODS, body)

    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task(f"creating {pods} pods", total=pods)
        batch = 500
        for start in range(0, pods, batch):
            await asyncio.gather(*(make(i) for i in range(start, min(pods, start + batch))))
            progress.update(task, completed=min(pods, start + batch))
        # Wait until kwok has made them all Running, so the objects look like a live cluster's.
        wait = progress.add_task("waiting for Running", total=pods)
        for _ in range(1200):
            items, _ = await client.list(resources.PODS, namespace=namespace)
            running = sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running")
            progress.update(wait, completed=running)
            if running >= pods:
                break
            await asyncio.sleep(0.5)
    # Reference count: every event a watch from `since` replays (read until the stream goes quiet).
    events = 0
    kinds: set[str] = set()
    try:
        async for event in client.watch(
            resources.PODS, resource_version=since, namespace=namespace, bookmarks=False, inactivity_timeout=3
        ):
            events += 1
            kinds.add(event["type"])
    except ApiError as exc:
        if exc.reason != "Inactive":
            raise
    await client.close()
    if "ERROR" in kinds or events < pods:
        raise SystemExit(
            f"the reference watch from {since} saw {events} events ({kinds}): history was not kept"
        )
    return since, events


def parent(args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    from capstan.sandbox import NodePool, Sandbox, SandboxSpec, require_toolchain

    console = Console(width=150)
    pods = 200 if args.smoke else args.pods
    tmp = tempfile.TemporaryDirectory(prefix="capstan-bench-")
    box = None
    kubeconfig = args.kubeconfig
    if kubeconfig is None:
        box = Sandbox(Path(tmp.name) / "sandbox", require_toolchain())
        # Enough pod slots for every pod (a kubelet's default is 110 pods per node).
        pool = NodePool(name="bench", count=max(1, -(-pods // 1000)), cpu="1000", memory="4Ti", pods=1000)
        # Watches from the pre-creation version must replay every event: no compaction, and pods watched straight
        # from etcd (no watch cache, whose window is shorter than the time it takes to create the pods).
        spec = SandboxSpec(name="bench", node_pools=[pool], etcd_compaction_interval="0s")
        kubeconfig = box.up(spec, timeout=240, extra_apiserver_args=["--watch-cache-sizes=pods#0"]).kubeconfig
    try:
        namespace = f"bench-client-{int(time.time())}"
        since, events = asyncio.run(prepare(kubeconfig, pods, namespace))
        console.print(f"{pods} pods Running; a watch from rv {since} replays {events} events")
        results = []
        variants = args.variants or VARIANTS
        # A variant that never completes (a watch short of its events, a sync that never comes) is a failed row,
        # not a hung benchmark.
        child_timeout = 180 if args.smoke else 1800
        for variant in variants:
            try:
                proc = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        variant,
                        "--kubeconfig",
                        kubeconfig,
                        "--since",
                        since,
                        "--expect",
                        str(events),
                        "--namespace",
                        namespace,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=child_timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                console.print(f"[red]{variant} failed:[/] did not finish in {child_timeout} s")
                results.append({"variant": variant, "error": f"did not finish in {child_timeout} s"})
                continue
            if proc.returncode != 0:
                console.print(f"[red]{variant} failed:[/] {proc.stderr.strip().splitlines()[-1:]}")
                results.append({"variant": variant, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]})
                continue
            results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    finally:
        if box is not None:
            box.down()
        tmp.cleanup()

    base = next((r for r in results if r.get("variant") == "capstan" and "list_s" in r), None)
    table = Table(title=f"Decoding and watching {pods} pods ({events} watch events), one run, same cluster")
    for col in (
        "client",
        "list (best of 3)",
        "items",
        "list vs capstan",
        "watch",
        "events/s",
        "watch vs capstan",
        "peak RSS",
    ):
        table.add_column(col, justify="right" if col != "client" else "left")
    consumers = [r for r in results if r.get("variant") in CONSUMERS]
    results = [r for r in results if r.get("variant") not in CONSUMERS]
    for r in results:
        if "error" in r:
            table.add_row(r["variant"], "failed", "", "", "", "", "", r["error"][:40])
            continue
        table.add_row(
            r["variant"],
            f"{r['list_s'] * 1000:.0f} ms",
            str(r["items"]),
            f"{r['list_s'] / base['list_s']:.2f}×" if base else "",
            f"{r['watch_s'] * 1000:.0f} ms",
            f"{r['events'] / r['watch_s']:.0f}",
            f"{r['watch_s'] / base['watch_s']:.2f}×" if base else "",
            f"{r['rss_mb']:.0f} MB",
        )
    console.print(table)
    if consumers:
        ctable = Table(
            title=f"Capstan processes over the same {pods} pods: time to a complete first view, peak RSS"
        )
        for col in ("process", "initial sync", "objects", "peak RSS"):
            ctable.add_column(col, justify="left" if col == "process" else "right")
        for r in consumers:
            if "error" in r:
                ctable.add_row(r["variant"], "failed", "", r["error"][:60])
            else:
                ctable.add_row(r["variant"], f"{r['list_s']:.1f} s", str(r["items"]), f"{r['rss_mb']:.0f} MB")
        console.print(ctable)
    results = results + consumers
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "kube_client.json").write_text(
        json.dumps({"pods": pods, "events": events, "results": results}, indent=2)
    )
    ok = [r for r in results if "list_s" in r and r["variant"] in CLIENTS]
    if ok and not args.smoke:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
        names = [r["variant"] for r in ok]
        for ax, key, label in zip(
            axes,
            ("list_s", "watch_s", "rss_mb"),
            ("list (s)", "watch replay (s)", "peak RSS (MB)"),
            strict=True,
        ):
            ax.bar(
                names, [r[key] for r in ok], color=["#2a6f97" if n == "capstan" else "#adb5bd" for n in names]
            )
            ax.set_title(label)
            ax.tick_params(axis="x", rotation=30)
        fig.suptitle(f"{pods} pods, {events} watch events")
        fig.tight_layout()
        fig.savefig(out / "kube_client.png", dpi=110)
        console.print(f"plot: {out / 'kube_client.png'}")


def main() -> None:
    # A SIGTERM unwinds like Ctrl-C, so a sandbox started here is always stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=10_000)
    ap.add_argument("--smoke", action="store_true", help="200 pods, no plot: seconds, for the test suite")
    ap.add_argument("--kubeconfig", help="use this cluster instead of starting a sandbox")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "out", help="where JSON and plots go")
    ap.add_argument("--variants", nargs="*", choices=VARIANTS)
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--since", help=argparse.SUPPRESS)
    ap.add_argument("--expect", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--namespace", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.kubeconfig, args.since, args.expect, args.namespace)
    else:
        parent(args)


if __name__ == "__main__":
    main()
