"""Cache-aware routing end to end over real loopback HTTP: Capstan's gateway and the peers from PyPI.

For each policy: fresh simulated vLLM replicas (``capstan enginesim serve``, time-scaled, KV events on ZMQ), the
router as a child process in front of them, the same workload replayed through it (``capstan.replay``), then the
backends' counters. Policies: Capstan precise / approximate / round-robin / least-loaded / random, and the peers
sglang-router (``cache_aware``, ``round_robin``, ``--backend openai``) and vllm-router (``cache_aware``, and
``kv_aware`` fed with the simulator's KV events through ``--kv-event-source``).

The peers are installed by this program into a separate venv (``bench/out/peers-venv``, created once and reused;
never the project venv). Also measured: proxy overhead (the same tiny request direct and through each router),
router RSS, and httpx against aiohttp as the proxy's upstream client at the target concurrency.

The workload: synthetic agentic sessions, or with ``--trace`` any Mooncake-format file (``--trace-limit`` first
requests, arrivals at ``--load`` × the recorded rate), each request sent as one chat message holding the trace's
fixed text for its ``hash_ids`` (sglang-router's openai backend serves only the chat endpoint; every policy gets
the same requests). A bad trace line is one line naming the file and the line (exit 2), before anything starts.

Prints Rich tables, writes a PNG plot and JSON under bench/out/. ``--smoke`` runs Capstan only, in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import psutil
import yaml
from rich.console import Console
from rich.table import Table

from capstan.enginesim import EngineConfig, get_preset
from capstan.errors import UserError
from capstan.kvcache import DEFAULT_BLOCK_SIZE, MooncakeText
from capstan.replay import (
    AgenticConfig,
    ReplayConfig,
    ReplayRequest,
    agentic_requests,
    expand_body,
    mooncake_requests,
    replay,
)
from capstan.route import from_replay_requests, pooled_cache_reference, recommended_scheduler

ROOT = Path(__file__).resolve().parent.parent
PEERS_VENV = ROOT / "bench/out/peers-venv"
PEER_PACKAGES = ["sglang-router==0.3.2", "vllm-router==0.1.17", "aiohttp>=3.9,<4", "httpx>=0.27,<1"]
MODEL = "sim-model"
CAPSTAN = [sys.executable, "-m", "capstan.cli.main"]  # the Capstan this bench runs with (any checkout)
console = Console(width=200)


def capstan_policies() -> dict[str, dict[str, Any]]:
    """Capstan's policies; ``capstan-precise`` is its recommended scheduler (capstan.route.recommended_scheduler)."""
    recommended = recommended_scheduler().model_dump(mode="json")
    return {
        "capstan-precise": recommended,
        "capstan-approx": {**recommended, "prefix": {"kind": "approximate"}},
        "capstan-round-robin": {"prefix": {"kind": "none"}, "picker": {"type": "round-robin"}},
        "capstan-least-loaded": {"prefix": {"kind": "none"}, "scorers": [{"type": "in-flight", "weight": 1}]},
        "capstan-random": {"prefix": {"kind": "none"}, "picker": {"type": "random"}},
    }


PEER_POLICIES = [
    "sglang-cache_aware",
    "sglang-round_robin",
    "vllm-router-cache_aware",
    "vllm-router-kv_aware",
]


def free_ports(n: int) -> int:
    """First of ``n`` consecutive free loopback ports (checked by binding each)."""
    for _ in range(200):  # bounded search
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n >= 65000:
            continue
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free port range")


def ensure_peers_venv() -> Path:
    py = PEERS_VENV / "bin/python"
    marker = PEERS_VENV / ".capstan-peers"
    if marker.exists() and marker.read_text() == "\n".join(PEER_PACKAGES):
        return py
    uv = Path(sys.executable).parent / "uv"
    console.print(f"installing peers into {PEERS_VENV} (once)")
    subprocess.run(
        [str(uv), "venv", "-q", "--allow-existing", "--python", "3.11", str(PEERS_VENV)], check=True
    )
    subprocess.run(
        [str(uv), "pip", "install", "-q", "--python", str(py), *PEER_PACKAGES], check=True, timeout=900
    )
    marker.write_text("\n".join(PEER_PACKAGES))
    return py


class Child:
    """A child process in its own process group, stopped by its pid."""

    def __init__(self, argv: Sequence[str], log: Path) -> None:
        self.argv = list(argv)
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            self.argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT
        )

    def rss_mib(self) -> float:
        try:
            p = psutil.Process(self.proc.pid)
            return float(sum(c.memory_info().rss for c in [p, *p.children(recursive=True)])) / 2**20
        except psutil.Error:
            return math.nan

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        self.log.close()


def wait_http(url: str, child: Child, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # bounded by the deadline
        if child.proc.poll() is not None:
            raise RuntimeError(f"{' '.join(child.argv[:6])} … exited; see {child.log.name}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout} s; see {child.log.name}")


def start_engines(args: argparse.Namespace, out: Path, tag: str) -> tuple[Child, list[str], list[str]]:
    base = free_ports(args.replicas)
    kv = free_ports(args.replicas)
    child = Child(
        [
            *CAPSTAN,
            "enginesim",
            "serve",
            "--replicas",
            str(args.replicas),
            "--port",
            str(base),
            "--kv-events-port",
            str(kv),
            "--model",
            MODEL,
            "--preset",
            args.preset,
            "--num-gpu-blocks",
            str(args.kv_blocks),
            "--time-scale",
            str(args.time_scale),
        ],
        out / f"route_http_{tag}_engines.log",
    )
    urls = [f"http://127.0.0.1:{base + i}" for i in range(args.replicas)]
    for u in urls:
        wait_http(f"{u}/health", child)
    return child, urls, [f"tcp://127.0.0.1:{kv + i}" for i in range(args.replicas)]


def start_router(
    policy: str, urls: list[str], kv: list[str], out: Path, peers_py: Path | None, upstream_client: str
) -> tuple[Child, str]:
    port = free_ports(1)
    log = out / f"route_http_{policy}_router.log"
    if policy.startswith("capstan-"):
        cfg = {
            "endpoints": [
                {"name": f"r{i}", "url": u, "models": [MODEL], "kv_events": kv[i]} for i, u in enumerate(urls)
            ],
            "scheduler": capstan_policies()[policy],
            "proxy": {"upstream_client": upstream_client},
        }
        path = out / f"route_http_{policy}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        argv = [*CAPSTAN, "route", "serve", "--config", str(path), "--port", str(port)]
        child = Child(argv, log)
        wait_http(f"http://127.0.0.1:{port}/health", child)
        return child, f"http://127.0.0.1:{port}"
    assert peers_py is not None
    bindir = peers_py.parent
    if policy.startswith("sglang-"):
        argv = [
            str(peers_py), "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
            "--policy", policy.removeprefix("sglang-"), "--backend", "openai", "--worker-urls", *urls,
            "--log-level", "warn", "--prometheus-port", str(free_ports(1)),
        ]  # fmt: skip
    else:
        argv = [
            str(bindir / "vllm-router"), "--host", "127.0.0.1", "--port", str(port),
            "--policy", policy.removeprefix("vllm-router-"), "--worker-urls", *urls,
        ]  # fmt: skip
        if policy.endswith("kv_aware"):
            for u, k in zip(urls, kv, strict=True):
                argv += ["--kv-event-source", f"{u}={k}"]
            argv += ["--kv-event-block-size", str(DEFAULT_BLOCK_SIZE), "--kv-event-model", MODEL]
    child = Child(argv, log)
    ready = f"http://127.0.0.1:{port}/v1/models"
    wait_http(ready, child, timeout=120)
    return child, f"http://127.0.0.1:{port}"


def openai_strict(requests: list[ReplayRequest]) -> list[ReplayRequest]:
    """The generator's tool outputs as ``user`` messages: sglang-router's openai backend rejects ``tool``
    messages without a ``tool_call_id`` (4xx). The same text in the same place, for every policy alike."""
    out = []
    for r in requests:
        msgs = r.body.get("messages")
        if isinstance(msgs, list):
            body = dict(r.body)
            body["messages"] = [{**m, "role": "user"} if m.get("role") == "tool" else m for m in msgs]
            r = dataclasses.replace(r, body=body)
        out.append(r)
    return out


def trace_requests(path: Path, limit: int, load: float) -> list[ReplayRequest]:
    """The first ``limit`` requests of a Mooncake-format trace (``capstan.replay``'s reader: a bad line is a
    UserError naming ``path:line``), arrivals at ``load`` × the recorded rate, each as one chat message holding
    the trace's fixed text for its ``hash_ids``."""
    text = MooncakeText(DEFAULT_BLOCK_SIZE)
    out = []
    for r in mooncake_requests(path, model=MODEL, limit=limit, time_scale=load):
        body = expand_body(r, text)
        prompt = body.pop("prompt")
        body["messages"] = [{"role": "user", "content": prompt}]
        out.append(dataclasses.replace(r, api="chat", prompt_ref=None, body=body))
    if not out:
        raise UserError(f"{path}: no requests")
    return out


def pooled_reference(requests: list[ReplayRequest], args: argparse.Namespace) -> tuple[float, int]:
    """The pooled-cache reference of a trace's requests in the engines' own tokens and blocks (the shared contract
    renders and tokenizes them as router and engines do): one LRU cache of every replica's blocks fed the
    requests in arrival order, leaving out what one engine would reject. (hit ratio, requests rejected)."""
    preset = get_preset(args.preset)
    engine = EngineConfig(
        latency=preset.latency, num_gpu_blocks=args.kv_blocks, max_num_seqs=preset.max_num_seqs
    )
    ref = pooled_cache_reference(
        from_replay_requests(requests), args.kv_blocks * args.replicas, engine=engine
    )
    return ref.hit_ratio, ref.rejected


def probe_latency(url: str, n: int) -> tuple[float, float]:
    """Median and fastest wall latency of ``n`` sequential tiny non-streaming chat completions (sglang-router's
    openai backend implements only the chat endpoint)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "probe"}], "max_tokens": 1}
    times = []
    with httpx.Client(timeout=30) as c:
        for _ in range(n):
            t0 = time.perf_counter()
            r = c.post(f"{url}/v1/chat/completions", json=body)
            times.append(time.perf_counter() - t0)
            r.raise_for_status()
    return statistics.median(times), min(times)


def capstan_quantiles(url: str, metric: str) -> tuple[float, float]:
    """Upper bucket bounds of one of the router's latency histograms at p50 and p99 (seconds)."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        if line.startswith(f"{metric}_bucket"):
            le = line.split('le="')[1].split('"')[0]
            buckets.append((math.inf if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    total = buckets[-1][1] if buckets else 0
    out = []
    for q in (0.5, 0.99):
        out.append(next((le for le, c in buckets if total and c >= q * total), math.nan))
    return out[0], out[1]


CLIENT_SCRIPT = r"""
import asyncio, json, sys, time, resource
import httpx, aiohttp
urls, conc, total = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
body = {"model": "sim-model", "prompt": " hello world", "max_tokens": 8, "stream": True}
async def run_httpx():
    lim = httpx.Limits(max_connections=None, max_keepalive_connections=conc)
    async with httpx.AsyncClient(limits=lim, timeout=60) as c:
        async def one(i):
            async with c.stream("POST", urls[i % len(urls)] + "/v1/completions", json=body) as r:
                async for _ in r.aiter_raw():
                    pass
        await drive(one)
async def run_aiohttp():
    conn = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=60)) as s:
        async def one(i):
            async with s.post(urls[i % len(urls)] + "/v1/completions", json=body) as r:
                async for _ in r.content.iter_any():
                    pass
        await drive(one)
async def drive(one):
    q = iter(range(total))
    async def worker():
        for i in q:
            await one(i)
    await asyncio.gather(*(worker() for _ in range(conc)))
res = {}
for name, fn in (("httpx", run_httpx), ("aiohttp", run_aiohttp), ("httpx#2", run_httpx), ("aiohttp#2", run_aiohttp)):
    r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter()
    asyncio.run(fn())
    wall = time.perf_counter() - t0; r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    res[name] = {"req_s": total / wall, "client_cpu_ms_per_req": 1000 * cpu / total}
print(json.dumps(res))
"""


def compare_clients(args: argparse.Namespace, out: Path, peers_py: Path) -> dict[str, Any]:
    engines, urls, _ = start_engines(args, out, "clients")
    try:
        script = out / "route_http_client_compare.py"
        script.write_text(CLIENT_SCRIPT)
        proc = subprocess.run(
            [str(peers_py), str(script), json.dumps(urls), str(args.concurrency), str(args.client_requests)],
            capture_output=True, text=True, timeout=900, check=True,
        )  # fmt: skip
        result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return result
    finally:
        engines.stop()


def main() -> None:
    try:
        run()
    except UserError as exc:  # bad input: one line, exit 2
        print(f"route_http.py: {exc}", file=sys.stderr)
        sys.exit(2)


def run() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="Capstan policies only, tiny workload")
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--preset", default="llama-3.1-8b-h100")
    ap.add_argument("--kv-blocks", type=int, default=4096, help="per replica (64k tokens: scaled-down run)")
    ap.add_argument("--time-scale", type=float, default=4.0, help="model seconds per wall second")
    ap.add_argument(
        "--trace", type=Path, default=None, help="a Mooncake-format JSONL trace instead of sessions"
    )
    ap.add_argument("--trace-limit", type=int, default=300, help="--trace: its first N requests")
    ap.add_argument("--load", type=float, default=1.0, help="--trace: arrival rate over the recorded one")
    ap.add_argument("--sessions", type=int, default=40)
    ap.add_argument("--session-rate", type=float, default=1.0)
    ap.add_argument("--concurrency", type=int, default=64, help="for the httpx/aiohttp comparison")
    ap.add_argument("--client-requests", type=int, default=1500)
    ap.add_argument("--probes", type=int, default=40)
    ap.add_argument("--policies", nargs="*", default=None)
    ap.add_argument("--upstream-client", choices=["aiohttp", "httpx"], default="aiohttp", help="Capstan's")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/out")
    args = ap.parse_args()
    out: Path = args.out.resolve()
    if args.smoke:
        args.replicas, args.sessions, args.probes, args.time_scale = 2, 4, 5, 10.0
        args.trace_limit = min(args.trace_limit, 12)
    if args.trace_limit < 1:
        raise UserError(f"--trace-limit {args.trace_limit}: must be at least 1")
    if not args.load > 0 or args.load == math.inf:
        raise UserError(f"--load {args.load}: must be a positive factor")
    if args.trace is not None:  # read (and checked) before anything starts
        requests = trace_requests(args.trace, args.trace_limit, args.load)
        workload = f"{args.trace.name}, {len(requests)} requests at load {args.load:g}"
        pooled, pooled_rejected = pooled_reference(requests, args)
    else:
        acfg = AgenticConfig(
            model=MODEL,
            sessions=args.sessions,
            session_rate=args.session_rate,
            system_tokens=1500,
            tools=6,
            tool_schema_tokens=200,
            tool_output_tokens=400,
            answer_tokens=60,
            turns_min=3,
            turns_max=8,
            think_time_s=2.0,
        )
        requests = openai_strict(agentic_requests(acfg))
        pooled, pooled_rejected = math.nan, 0  # closed-loop sessions: arrival order depends on the routing
        workload = f"{len(requests)} agentic requests, {args.sessions} sessions"
    out.mkdir(parents=True, exist_ok=True)
    policies = args.policies or (["capstan-precise"] if args.smoke else [*capstan_policies(), *PEER_POLICIES])
    peers_py = ensure_peers_venv() if any(not p.startswith("capstan-") for p in policies) else None
    console.print(
        f"workload: {workload}; {args.replicas} replicas × "
        f"{args.kv_blocks * DEFAULT_BLOCK_SIZE:,} KV tokens, time scale {args.time_scale}"
    )
    rows: list[dict[str, Any]] = []
    for policy in policies:
        engines, urls, kv = start_engines(args, out, policy)
        router: Child | None = None
        try:
            direct = probe_latency(urls[0], args.probes)
            router, url = start_router(policy, urls, kv, out, peers_py, args.upstream_client)
            time.sleep(0.5)  # let the router's first health/metrics rounds land
            via = probe_latency(url, args.probes)
            report = asyncio.run(
                replay(
                    requests,
                    ReplayConfig(target=url, time_scale=args.time_scale, model=MODEL, backends=urls),
                )
            )
            s = report.summary  # the replayer's summarize() of this report
            rss = router.rss_mib()
            d50 = d99 = h50 = h99 = math.nan
            if policy.startswith("capstan-"):
                d50, d99 = capstan_quantiles(url, "capstan_route_decision_seconds")
                h50, h99 = capstan_quantiles(url, "capstan_route_prompt_hash_seconds")
            rows.append(
                {
                    "policy": policy,
                    **{
                        k: s.get(k, math.nan)
                        for k in (
                            "ok",
                            "errors",
                            "backend_hit_ratio",
                            "ttft_p50",
                            "ttft_p90",
                            "ttft_p99",
                            "ttft_mean",
                            "backend_ttft_mean",
                            "output_tokens_per_s",
                            "gpu_seconds_per_request",
                            "busiest_prefill_over_mean",
                        )
                    },
                    "proxy_overhead_ms": (via[0] - direct[0]) * 1000,
                    "proxy_overhead_min_ms": (via[1] - direct[1]) * 1000,
                    "router_rss_mib": rss,
                    "decision_p50_le_ms": d50 * 1000,
                    "decision_p99_le_ms": d99 * 1000,
                    "hash_p50_le_ms": h50 * 1000,
                    "hash_p99_le_ms": h99 * 1000,
                }
            )
            rows[-1]["hit_vs_pooled"] = rows[-1]["backend_hit_ratio"] / pooled if pooled else math.nan
            console.print(f"  {policy}: done ({s.get('ok', 0):.0f} ok, {s.get('errors', 0):.0f} errors)")
        except Exception as exc:  # a peer failing to start is reported, the run goes on
            console.print(f"  {policy}: FAILED: {exc}")
            rows.append({"policy": policy, "error": str(exc)})
        finally:
            if router is not None:
                router.stop()
            engines.stop()
    table = Table(title=f"{workload}: end to end over loopback HTTP (model-time figures; time scale applied)")
    cols = [
        ("policy", "policy", "{}"),
        ("ok", "ok", "{:.0f}"),
        ("err", "errors", "{:.0f}"),
        ("hit (backends)", "backend_hit_ratio", "{:.3f}"),
        ("hit / pooled", "hit_vs_pooled", "{:.3f}"),
        ("TTFT p50 s", "ttft_p50", "{:.3f}"),
        ("p90", "ttft_p90", "{:.3f}"),
        ("p99", "ttft_p99", "{:.3f}"),
        ("mean", "ttft_mean", "{:.3f}"),
        ("backend mean", "backend_ttft_mean", "{:.3f}"),
        ("out tok/s", "output_tokens_per_s", "{:.0f}"),
        ("GPU-s/req", "gpu_seconds_per_request", "{:.3f}"),
        ("busiest prefill/mean", "busiest_prefill_over_mean", "{:.2f}"),
        ("overhead median ms", "proxy_overhead_ms", "{:.2f}"),
        ("overhead min ms", "proxy_overhead_min_ms", "{:.2f}"),
        ("router RSS MiB", "router_rss_mib", "{:.0f}"),
        ("decide p50 ≤ ms", "decision_p50_le_ms", "{:.2f}"),
        ("p99 ≤ ms", "decision_p99_le_ms", "{:.2f}"),
        ("tokenize+hash p50 ≤ ms", "hash_p50_le_ms", "{:.2f}"),
        ("p99 ≤ ms", "hash_p99_le_ms", "{:.2f}"),
    ]
    for label, _, _ in cols:
        if label == "policy":
            table.add_column(label, no_wrap=True, min_width=24)
        else:
            table.add_column(label, justify="right")
    for r in rows:
        if "error" in r:
            table.add_row(r["policy"], *["-"] * (len(cols) - 2), "")
            continue
        table.add_row(*(fmt.format(r[k]) for _, k, fmt in cols))
    console.print(table)
    if not math.isnan(pooled):
        console.print(
            f"  pooled-cache reference (one LRU cache of all {args.replicas} replicas' blocks, arrival order): hit "
            f"{pooled:.3f}; {pooled_rejected} requests an engine rejects left out"
        )
    results: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": {k: str(v) for k, v in vars(args).items()},
        "workload": {"trace": args.trace.name if args.trace else None, "requests": len(requests)},
        "pooled": pooled,
        "pooled_rejected": pooled_rejected,
        "rows": rows,
    }
    (out / "route_http.json").write_text(json.dumps(results, indent=1, default=str))
    if not args.smoke and peers_py is not None:
        try:
            clients = compare_clients(args, out, peers_py)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, RuntimeError) as exc:
            err = getattr(exc, "stderr", "") or ""
            console.print(f"client comparison FAILED: {exc} {err[-500:]}")
            clients = {}
            results["clients_error"] = str(exc)
        t = Table(
            title=f"Upstream client at {args.concurrency} concurrent streams ({args.client_requests} requests)"
        )
        for c in ("client", "requests/s", "client CPU ms/request"):
            t.add_column(c)
        for name, v in clients.items():
            t.add_row(name, f"{v['req_s']:.0f}", f"{v['client_cpu_ms_per_req']:.2f}")
        if clients:
            console.print(t)
            results["clients"] = clients
    ok = [r for r in rows if "error" not in r]
    if ok:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ax.bar(range(len(ok)), [r["ttft_p90"] for r in ok])
        ax.set_xticks(range(len(ok)), [r["policy"] for r in ok], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("TTFT p90 (model s)")
        ax.set_title(f"{args.trace.name if args.trace else 'Agentic sessions'} over loopback HTTP")
        fig.tight_layout()
        fig.savefig(out / "route_http_ttft_p90.png", dpi=120)
        plt.close(fig)
    (out / "route_http.json").write_text(json.dumps(results, indent=1, default=str))
    console.print(f"wrote {out}/route_http_ttft_p90.png, route_http.json")
    if any("error" in r for r in rows) and args.smoke:
        sys.exit(1)


if __name__ == "__main__":
    main()
