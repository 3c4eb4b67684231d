"""Soak: the gateway in front of real engine processes that are killed, frozen and restarted under load.

``capstan route serve`` runs as a child process in front of ``--engines`` separate ``capstan enginesim serve``
processes (one replica each, preset ``tiny-test``). ``--clients`` concurrent clients (aiohttp, one connection each)
send chat requests for ``--duration`` seconds, half of them streaming, each with a short think time. Meanwhile,
every ``--chaos-interval`` seconds one engine is, in turn, killed (SIGKILL, restarted on its port
``--restart-after`` seconds later) or frozen (SIGSTOP, then SIGCONT ``--freeze`` seconds later: longer than the
gateway's stall timeout, so streams on it end with an error event). Never more than one engine is down at a time.

Every second it samples the gateway process (psutil): open file descriptors, TCP connections, RSS. After the load
it waits (bounded) for the gateway's pooled upstream connections to expire and takes the final sample.

It reports: requests by HTTP status, streams by how they ended (``[DONE]``, an error event by its code, cut without
either), client-side failures by exception, the gateway's own counters (``/metrics``), file descriptors and
connections at the baseline, their maximum and at the end, and RSS over time (the growth over the second half of
the load). Prints Rich tables, writes ``route_soak.json`` and ``route_soak.png`` under ``--out``. ``--smoke``: two
engines, a few clients, seconds, a 1 s stall timeout; ``tests/integration/route/test_bench_smoke.py`` runs it and
checks the counts (no 500, descriptors back to the baseline), never the times.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import psutil
import yaml
from rich.console import Console
from rich.table import Table

from goals import limit

ROOT = Path(__file__).resolve().parent.parent
CAPSTAN = [sys.executable, "-c", "import sys; from capstan.cli.main import main; main(sys.argv[1:])"]
MODEL = "sim-model"
DOCUMENTED_5XX = {502, 503, 504}
console = Console(width=160)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Child:
    """A child process in its own session, logging to a file."""

    def __init__(self, argv: list[str], log: Path, src: Path | None = None) -> None:
        self.log = log.open("a")
        env = os.environ | ({"PYTHONPATH": str(src)} if src is not None else {})
        self.proc = subprocess.Popen(
            argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT, env=env
        )

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, sig)

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.signal(signal.SIGKILL)
                self.proc.wait(timeout=20)
        self.log.close()


async def wait_healthy(session: aiohttp.ClientSession, url: str, child: Child, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # bounded by the deadline
        if child.proc.poll() is not None:
            raise RuntimeError(f"{url}: the process exited; see {child.log.name}")
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                if r.status == 200:
                    return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} not healthy after {timeout} s; see {child.log.name}")


@dataclass
class Engine:
    index: int
    port: int
    log: Path
    child: Child | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [*CAPSTAN, "--log-level", "WARNING", "enginesim", "serve", "--port", str(self.port),
                "--preset", "tiny-test", "--model", MODEL]  # fmt: skip
        self.child = Child(argv, self.log)


@dataclass
class Results:
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    streams: collections.Counter[str] = field(default_factory=collections.Counter)
    client_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    completions: list[tuple[float, bool]] = field(default_factory=list)  # (time, ok)
    in_flight: int = 0


AGENT_SYSTEMS = [
    f"You are agent {a}. " + " ".join(f"rule{random.Random(a).randrange(8)}-{i}" for i in range(60))
    for a in range(8)
]


def prompt(rng: random.Random, variety: str) -> tuple[str, str]:
    """A system prompt and a question. ``pool``: 8 agents' fixed system prompts and 4,000 questions, so that every
    bounded cache of the gateway fills early and a growing RSS means a leak; ``unique``: a distinct system
    prompt and question every time, so that the caches fill up towards their bounds during the run."""
    if variety == "pool":
        return rng.choice(AGENT_SYSTEMS), f"question {rng.randrange(4000)}"
    system = f"You are agent {rng.randrange(8)}. " + " ".join(
        f"rule{rng.randrange(8)}-{i}" for i in range(60)
    )
    return system, f"q{rng.random()}"


async def one_request(
    session: aiohttp.ClientSession,
    url: str,
    rng: random.Random,
    res: Results,
    read_timeout: float,
    variety: str,
) -> None:
    stream = rng.random() < 0.5
    system, question = prompt(rng, variety)
    body = {
        "model": MODEL,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": rng.randint(8, 64),
        "stream": stream,
    }
    res.in_flight += 1
    ok = False
    try:
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=read_timeout)
        async with session.post(f"{url}/v1/chat/completions", json=body, timeout=timeout) as r:
            res.statuses[str(r.status)] += 1
            if not stream or r.status != 200:
                await r.read()
                ok = r.status == 200
                return
            outcome = "cut (no [DONE], no error event)"
            async for raw in r.content:
                line = raw.decode("utf-8", "replace").strip()
                if line == "data: [DONE]":
                    outcome = "[DONE]"
                    ok = True
                elif line.startswith('data: {"error"'):
                    code = json.loads(line[6:])["error"].get("code")
                    outcome = f"error event: {code}"
            res.streams[outcome] += 1
    except (aiohttp.ClientError, TimeoutError) as exc:
        res.client_errors[type(exc).__name__] += 1
    finally:
        res.in_flight -= 1
        res.completions.append((time.monotonic(), ok))


async def client_loop(
    session: aiohttp.ClientSession,
    url: str,
    seed: int,
    stop_at: float,
    res: Results,
    read_timeout: float,
    variety: str,
) -> None:
    rng = random.Random(seed)
    while time.monotonic() < stop_at:  # bounded by the load's end
        await one_request(session, url, rng, res, read_timeout, variety)
        await asyncio.sleep(rng.uniform(0, 0.2))


def _connections(p: psutil.Process) -> list[Any]:
    found: list[Any] = (
        p.net_connections(kind="tcp") if hasattr(p, "net_connections") else p.connections(kind="tcp")
    )
    return found


def gateway_sample(pid: int) -> dict[str, float]:
    p = psutil.Process(pid)
    return {
        "fds": p.num_fds(),
        "conns": len(_connections(p)),
        "rss_mib": p.memory_info().rss / 2**20,
        "threads": p.num_threads(),
    }


def connection_states(pid: int) -> dict[str, int]:
    """The gateway's TCP connections by state and peer port kind (for the record of the end state)."""
    return dict(collections.Counter(f"{c.status} raddr={c.raddr.port if c.raddr else '-'} laddr={c.laddr.port}"
                                    for c in _connections(psutil.Process(pid))))  # fmt: skip


async def sampler(pid: int, t0: float, every: float, out: list[dict[str, float]], res: Results) -> None:
    while True:  # until cancelled at the end of the run
        s = gateway_sample(pid)
        s["t"] = time.monotonic() - t0
        s["in_flight"] = res.in_flight
        out.append(s)
        await asyncio.sleep(every)


async def chaos(
    engines: list[Engine],
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    t0: float,
    events: list[Any],
) -> None:
    k = 0
    while True:  # until cancelled at the end of the load; one engine down at a time
        await asyncio.sleep(args.chaos_interval)
        e = engines[k % len(engines)]
        assert e.child is not None
        if k % 2 == 0:
            e.child.signal(signal.SIGKILL)
            e.child.proc.wait(timeout=20)
            events.append((time.monotonic() - t0, "kill", e.index))
            await asyncio.sleep(args.restart_after)
            e.start()
            events.append((time.monotonic() - t0, "restart", e.index))
            await wait_healthy(session, e.url, e.child)
            events.append((time.monotonic() - t0, "up", e.index))
        else:
            e.child.signal(signal.SIGSTOP)
            events.append((time.monotonic() - t0, "freeze", e.index))
            try:
                await asyncio.sleep(args.freeze)
            finally:
                e.child.signal(signal.SIGCONT)
            events.append((time.monotonic() - t0, "thaw", e.index))
        k += 1


def parse_counters(text: str, name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{(.*)\}} (\S+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def rss_growth(samples: list[dict[str, float]], start: float, end: float) -> tuple[float, float]:
    """Least-squares slope of RSS (MiB per minute) over [start, end], and the growth it implies over that window
    as a fraction of the mean RSS there."""
    pts = [(s["t"], s["rss_mib"]) for s in samples if start <= s["t"] <= end]
    if len(pts) < 3:
        return 0.0, 0.0
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mr = sum(r for _, r in pts) / n
    var = sum((t - mt) ** 2 for t, _ in pts)
    slope = sum((t - mt) * (r - mr) for t, r in pts) / var if var else 0.0
    return slope * 60, slope * (end - start) / mr


async def run(args: argparse.Namespace) -> dict[str, Any]:
    out: Path = args.out
    engines = [Engine(i, free_port(), out / f"route_soak_engine{i}.log") for i in range(args.engines)]
    for e in engines:
        e.log.write_text("")
        e.start()
    gw_port = free_port()
    cfg = {
        "endpoints": [{"name": f"e{e.index}", "url": e.url, "models": [MODEL]} for e in engines],
        "proxy": {"stall_timeout_s": args.stall_timeout} if args.stall_timeout > 0 else {},
    }
    cfg_path = out / "route_soak.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    gw_log = out / "route_soak_gateway.log"
    gw_log.write_text("")
    gateway = Child(
        [*CAPSTAN, "route", "serve", "--config", str(cfg_path), "--port", str(gw_port)],
        gw_log,
        args.gateway_src,
    )
    url = f"http://127.0.0.1:{gw_port}"
    res = Results()
    samples: list[dict[str, float]] = []
    events: list[Any] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            for e in engines:
                assert e.child is not None
                await wait_healthy(session, e.url, e.child)
            await wait_healthy(session, url, gateway)
            await asyncio.sleep(args.warmup)  # every endpoint polled, the monitor's connections open
            t0 = time.monotonic()
            baseline = gateway_sample(gateway.proc.pid)
            baseline_connections = connection_states(gateway.proc.pid)
            sampling = asyncio.create_task(sampler(gateway.proc.pid, t0, args.sample_every, samples, res))
            chaos_task = asyncio.create_task(chaos(engines, session, args, t0, events))
            stop_at = t0 + args.duration
            clients = [
                asyncio.create_task(
                    client_loop(
                        session, url, args.seed * 100_003 + i, stop_at, res, args.read_timeout, args.prompts
                    )
                )
                for i in range(args.clients)
            ]
            await asyncio.sleep(args.duration)
            chaos_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await chaos_task
            for e in engines:  # whatever the chaos was doing: every engine runs again
                assert e.child is not None
                e.child.signal(signal.SIGCONT)
                if e.child.proc.poll() is not None:
                    e.start()
                    events.append((time.monotonic() - t0, "restart", e.index))
            _, pending = await asyncio.wait(clients, timeout=args.read_timeout + 30)
            for task in pending:
                task.cancel()
            load_end = time.monotonic() - t0
            async with session.get(f"{url}/metrics") as r:
                metrics_text = await r.text()
        # the clients' connections are closed; the gateway's pooled upstream connections expire after 15 s idle
        settle_deadline = time.monotonic() + args.settle
        while True:  # bounded by the settle deadline
            end = gateway_sample(gateway.proc.pid)
            back = end["fds"] <= baseline["fds"] and end["conns"] <= baseline["conns"]
            if back or time.monotonic() > settle_deadline:
                break
            await asyncio.sleep(0.5)
        end["t"] = time.monotonic() - t0
        end_states = connection_states(gateway.proc.pid)
        baseline_states = baseline_connections
        sampling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampling
    finally:
        gateway.stop()
        for e in engines:
            if e.child is not None:
                e.child.stop()
    half = load_end / 2
    slope, growth = rss_growth(samples, half, load_end)
    five_xx = {s: n for s, n in res.statuses.items() if s.startswith("5")}
    return {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "duration_s": load_end,
        "requests": sum(res.statuses.values()) + sum(res.client_errors.values()),
        "statuses": dict(res.statuses),
        "streams": dict(res.streams),
        "client_errors": dict(res.client_errors),
        "undocumented_5xx": {s: n for s, n in five_xx.items() if int(s) not in DOCUMENTED_5XX},
        "gateway_responses": parse_counters(metrics_text, "capstan_route_responses_total"),
        "gateway_errors": parse_counters(metrics_text, "capstan_route_errors_total"),
        "gateway_rejected": parse_counters(metrics_text, "capstan_route_rejected_total"),
        "events": events,
        "baseline": baseline,
        "max": {k: max(s[k] for s in samples) for k in ("fds", "conns", "rss_mib")} if samples else baseline,
        "end": end,
        "baseline_connections": baseline_states,
        "end_connections": end_states,
        "rss_slope_mib_per_min_second_half": slope,
        "rss_growth_second_half": growth,
        "samples": samples,
        "completions": res.completions and [(t - t0, ok) for t, ok in res.completions],
    }


def report(data: dict[str, Any], out: Path) -> None:
    cfg = data["config"]
    console.print(
        f"[bold]route soak[/]: {cfg['clients']} clients × {data['duration_s']:.0f} s, {cfg['engines']} engines, "
        f"stall timeout {cfg['stall_timeout']:g} s, chaos every {cfg['chaos_interval']:g} s "
        f"(kill + restart after {cfg['restart_after']:g} s / freeze {cfg['freeze']:g} s), prompts {cfg['prompts']}, "
        f"gateway from {cfg['gateway_src'] or 'this tree'}"
    )
    t = Table("HTTP status", "requests", title=f"{data['requests']} requests")
    for status, n in sorted(data["statuses"].items()):
        t.add_row(status, str(n))
    for name, n in sorted(data["client_errors"].items()):
        t.add_row(f"client error: {name}", str(n))
    console.print(t)
    t = Table("stream ended with", "streams")
    for outcome, n in sorted(data["streams"].items()):
        t.add_row(outcome, str(n))
    console.print(t)
    t = Table("gateway counter", "labels", "value")
    for name in ("gateway_errors", "gateway_rejected"):
        for labels, v in sorted(data[name].items()):
            t.add_row(name.removeprefix("gateway_"), labels, f"{v:g}")
    console.print(t)
    kinds = collections.Counter(kind for _, kind, _ in data["events"])
    console.print("chaos: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    b, m, e = data["baseline"], data["max"], data["end"]
    t = Table("gateway process", "baseline", "max under load", "end (after settling)")
    t.add_row("open file descriptors", f"{b['fds']:.0f}", f"{m['fds']:.0f}", f"{e['fds']:.0f}")
    t.add_row("TCP connections", f"{b['conns']:.0f}", f"{m['conns']:.0f}", f"{e['conns']:.0f}")
    t.add_row("RSS MiB", f"{b['rss_mib']:.1f}", f"{m['rss_mib']:.1f}", f"{e['rss_mib']:.1f}")
    console.print(t)
    console.print(
        f"RSS over the second half of the load: {data['rss_slope_mib_per_min_second_half']:+.2f} MiB/min "
        f"({data['rss_growth_second_half'] * 100:+.1f} % over that half)"
    )
    verdicts = {
        "no 5xx other than 502/503/504": not data["undocumented_5xx"],
        "file descriptors back to the baseline": e["fds"] <= b["fds"],
        "connections back to the baseline": e["conns"] <= b["conns"],
        "RSS flat (second half grows < 5 %)": data["rss_growth_second_half"] < limit("route.soak"),
    }
    data["verdicts"] = verdicts
    for goal, ok in verdicts.items():
        console.print(f"  {'met' if ok else 'MISSED'}: {goal}")
    plot(data, out / "route_soak.png")


def plot(data: dict[str, Any], path: Path) -> None:
    s = data["samples"]
    ts = [x["t"] for x in s]
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    axes[0].plot(ts, [x["fds"] for x in s], label="open fds")
    axes[0].plot(ts, [x["conns"] for x in s], label="TCP connections")
    axes[0].plot(ts, [x["in_flight"] for x in s], label="client requests in flight", alpha=0.6)
    axes[0].axhline(data["baseline"]["fds"], color="grey", ls=":", label="baseline fds")
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].set_ylabel("count")
    axes[1].plot(ts, [x["rss_mib"] for x in s], color="tab:purple")
    axes[1].set_ylabel("gateway RSS MiB")
    comp = data["completions"] or []
    if comp:
        width = max(1.0, data["duration_s"] / 100)
        bins = int(data["duration_s"] / width) + 1
        ok = [0] * bins
        bad = [0] * bins
        for t, good in comp:
            i = min(bins - 1, max(0, int(t / width)))
            (ok if good else bad)[i] += 1
        xs = [i * width for i in range(bins)]
        axes[2].plot(xs, [n / width for n in ok], label="ok /s")
        axes[2].plot(
            xs, [n / width for n in bad], label="not ok /s (502/503/504, error events, client errors)"
        )
        axes[2].legend(loc="upper right", fontsize=8)
    axes[2].set_ylabel("requests / s")
    axes[2].set_xlabel("seconds since the load started")
    colours = {"kill": "red", "freeze": "tab:blue", "up": "green", "thaw": "tab:cyan", "restart": "orange"}
    for t, kind, _ in data["events"]:
        for ax in axes:
            ax.axvline(t, color=colours.get(kind, "black"), alpha=0.3, lw=1)
    axes[0].set_title(
        "gateway soak (vertical lines: red kill, orange restart, green up, blue freeze, cyan thaw)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="2 engines, 6 clients, ~20 s")
    ap.add_argument("--engines", type=int, default=4)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--duration", type=float, default=300.0, help="seconds of load")
    ap.add_argument(
        "--stall-timeout", type=float, default=15.0, help="the gateway's proxy.stall_timeout_s (0: not set)"
    )
    ap.add_argument(
        "--gateway-src",
        type=Path,
        default=None,
        help="run the gateway from this source tree (PYTHONPATH), e.g. a worktree of an older commit as the peer;"
        " the engines always run from this one",
    )
    ap.add_argument("--chaos-interval", type=float, default=30.0)
    ap.add_argument("--restart-after", type=float, default=5.0)
    ap.add_argument("--freeze", type=float, default=25.0)
    ap.add_argument(
        "--read-timeout", type=float, default=60.0, help="clients give up after this much silence"
    )
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--settle", type=float, default=45.0, help="longest wait for descriptors to go back")
    ap.add_argument("--sample-every", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--prompts", choices=["pool", "unique"], default="pool", help="prompt variety (see prompt())"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "bench/out")
    args = ap.parse_args()
    if args.smoke:
        args.engines, args.clients, args.duration = 2, 6, 14.0
        args.stall_timeout, args.chaos_interval, args.restart_after, args.freeze = 1.0, 3.0, 1.0, 2.5
        args.read_timeout, args.warmup, args.sample_every = 20.0, 1.0, 0.5
    args.out.mkdir(parents=True, exist_ok=True)
    data = asyncio.run(run(args))
    report(data, args.out)
    (args.out / "route_soak.json").write_text(json.dumps(data, indent=1))


if __name__ == "__main__":
    main()
