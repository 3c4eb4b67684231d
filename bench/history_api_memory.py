"""History HTTP API: the server's memory under concurrent maximum-page requests, this code against the code before.

With ``--rows`` object changes stored (1M by default, in the shape the recorder writes them: Deployment snapshots
every 20 versions and small patches between, loaded through ``Store.write`` in batches; see
bench/history_ingest.py), ``capstan history serve`` runs as its own process and ``--clients`` clients ask it for
the whole-store timeline at the same time; a sampler reads the server's RSS (psutil, every 20 ms) throughout.

Variants, all in the same run over the same store file:

- **peer** (the code before bounded responses, ``--peer-ref``, extracted with ``git archive`` and run from
  PYTHONPATH): each client asks for its maximum page, ``limit=100000`` (that code clamps there), in one response.
- **capstan, one page**: each client asks for this code's maximum page (``limit=1000``).
- **capstan, same volume**: each client follows ``next_cursor`` through ``--pages`` pages of 1000, the same rows
  the peer sends in one response.

Prints a Rich table, writes bench/out/history_api_memory.json and a PNG. Goal: the server stays under 300 MB RSS.
``--smoke`` runs in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import matplotlib
import orjson
import psutil

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from capstan.sandbox import PostgresServer
from capstan.store import HEAD_REVISION, INGEST_CACHE_KIB, open_store
from goals import limit
from history_ingest import load_query_dataset

ROOT = Path(__file__).resolve().parent.parent
GOAL_MB = limit("history.api_memory")
PEER_REF = "8ead40a"  # main before bounded responses: one response holds up to 100,000 records
PEER_MAX_PAGE = 100_000
MAX_PAGE = 1000
CODE = "import sys; from capstan.cli.main import main; main(sys.argv[1:])"
console = Console(width=160)


@dataclass
class Run:
    variant: str
    code: str
    backend: str
    page: int
    requests: int = 0
    rows: int = 0
    idle_mb: float = 0.0
    peak_mb: float = 0.0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def extract_peer(ref: str, into: Path) -> Path | None:
    """The source tree of ``ref`` (its src/), or None when this checkout does not have that commit."""
    archive = into / "peer.tar"
    proc = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), ref, "src"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        console.print(
            f"[yellow]peer {ref}: not in this checkout ({proc.stderr.strip()[:120]}); peer skipped[/]"
        )
        return None
    with tarfile.open(archive) as tar:
        tar.extractall(into / "peer", filter="data")
    return into / "peer" / "src"


class Sampler:
    """The peak RSS of one process, sampled on a thread."""

    def __init__(self, pid: int, interval_s: float = 0.02) -> None:
        self._proc = psutil.Process(pid)
        self._interval = interval_s
        self._stop = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return int(self._proc.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.peak = max(self.peak, self.rss())
            except psutil.Error:
                return

    def __enter__(self) -> Sampler:
        self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.peak = max(self.peak, self.rss())


def stamp(store_url: str, revision: str) -> None:
    from sqlalchemy import create_engine, text

    from capstan.store import parse_database_url

    sql_engine = create_engine(parse_database_url(store_url))
    with sql_engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    sql_engine.dispose()


def stamp_for_peer(store_url: str, peer_src: Path) -> str:
    """Stamp the store at the peer's newest revision for its run (returning ours, to put back after it): the same
    rows, and a peer that does not know a later revision would refuse the store. Later revisions only add tables
    the peer never reads (0004: store_keys)."""
    store_src = peer_src / "capstan" / "store"
    # the module was _engine.py before it was named for what it holds (the SQL connection pools and migrations)
    found = [p for p in (store_src / "_connection.py", store_src / "_engine.py") if p.exists()]
    match = re.search(r'HEAD_REVISION = "(\w+)"', found[0].read_text()) if found else None
    if match is None:
        raise SystemExit(f"peer {peer_src}: no HEAD_REVISION in capstan/store/_connection.py or _engine.py")
    stamp(store_url, match.group(1))
    return HEAD_REVISION


def start_server(store_url: str, peer_src: Path | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(os.environ)
    env.pop("CAPSTAN_HISTORY_TOKEN", None)
    env.pop("CAPSTAN_HISTORY_TOKEN_FILE", None)
    if peer_src is not None:
        env["PYTHONPATH"] = str(peer_src)
    args = [sys.executable, "-c", CODE, "history", "serve", "--store", store_url, "--port", str(port)]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # bounded wait for start-up
        if proc.poll() is not None:
            raise SystemExit(f"history serve exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("history serve did not start within 60 s")


async def one_client(http: httpx.AsyncClient, page: int, pages: int, run: Run) -> None:
    cursor: str | None = None
    for _ in range(pages):
        params: dict[str, str] = {"limit": str(page)}
        if cursor:
            params["cursor"] = cursor
        response = await http.get("/v1/timeline", params=params)
        run.requests += 1
        if response.status_code != 200:
            run.errors.append(f"{response.status_code}: {response.text[:120]}")
            return
        body = orjson.loads(response.content)
        run.rows += len(body["items"])
        cursor = body.get("next_cursor")
        if not cursor:
            return


async def load(base: str, clients: int, page: int, pages: int, run: Run) -> None:
    timeout = httpx.Timeout(600, connect=10)
    async with httpx.AsyncClient(base_url=base, timeout=timeout) as http:
        await asyncio.gather(*(one_client(http, page, pages, run) for _ in range(clients)))


def measure(
    variant: str,
    code: str,
    backend: str,
    store_url: str,
    peer_src: Path | None,
    args: Any,
    page: int,
    pages: int,
) -> Run:
    run = Run(variant, code, backend, page)
    restore = stamp_for_peer(store_url, peer_src) if peer_src is not None else None
    proc, base = start_server(store_url, peer_src)
    try:
        httpx.get(f"{base}/v1/timeline", params={"limit": "10"}, timeout=60)  # warm the imports and the pool
        sampler = Sampler(proc.pid)
        run.idle_mb = sampler.rss() / 2**20
        start = time.perf_counter()
        with sampler:
            asyncio.run(load(base, args.clients, page, pages, run))
        run.seconds = time.perf_counter() - start
        run.peak_mb = sampler.peak / 2**20
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        if restore is not None:
            stamp(store_url, restore)
    console.print(
        f"  {variant} ({backend}): {run.rows:,} rows in {run.requests} requests, peak {run.peak_mb:,.0f} MB"
        + (f", errors: {run.errors[:2]}" if run.errors else "")
    )
    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="seconds-long run")
    parser.add_argument("--rows", type=int, default=1_000_000, help="object changes stored")
    parser.add_argument("--objects", type=int, default=10_000, help="objects the changes are spread over")
    parser.add_argument("--clients", type=int, default=10, help="concurrent clients")
    parser.add_argument(
        "--pages", type=int, default=100, help="pages each client follows in the same-volume run"
    )
    parser.add_argument("--backends", default="sqlite", help="sqlite,postgresql")
    parser.add_argument(
        "--peer-ref", default=PEER_REF, help="git ref of the code before (the peer); '' to skip"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    peer_page = PEER_MAX_PAGE
    if args.smoke:
        args.rows, args.objects, args.clients, args.pages = 6_000, 300, 3, 3
        peer_page = 3_000
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="capstan-bench-api-"))
    runs: list[Run] = []
    pg: PostgresServer | None = None
    try:
        peer_src = extract_peer(args.peer_ref, work) if args.peer_ref else None
        for backend in [b.strip() for b in args.backends.split(",") if b.strip()]:
            if backend == "sqlite":
                url = str(work / "history.db")
            elif backend == "postgresql":
                pg = pg or PostgresServer().start()
                pg.reset()
                url = pg.url
            else:
                raise SystemExit(f"unknown backend {backend!r}")
            console.print(f"[bold]{backend}[/]: loading {args.rows:,} object changes through Store.write…")
            store = open_store(url, writer_cache_kib=INGEST_CACHE_KIB)
            load_s = load_query_dataset(store, args.rows, args.objects, span_days=14.0)
            stored = store.database.count("object_changes")
            store.close()
            console.print(f"  {stored:,} rows in {load_s:,.1f} s")
            if peer_src is not None:
                runs.append(
                    measure(
                        "peer: one maximum page", args.peer_ref, backend, url, peer_src, args, peer_page, 1
                    )
                )
            runs.append(measure("capstan: one maximum page", "this", backend, url, None, args, MAX_PAGE, 1))
            runs.append(
                measure("capstan: same volume, paged", "this", backend, url, None, args, MAX_PAGE, args.pages)
            )
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)

    table = Table(
        title=f"history serve RSS, {args.clients} concurrent clients, {args.rows:,} object changes stored "
        f"(goal < {GOAL_MB} MB)"
    )
    for col in (
        "variant",
        "code",
        "store",
        "page",
        "requests",
        "rows sent",
        "idle MB",
        "peak MB",
        "s",
        "goal",
    ):
        table.add_column(col, justify="right")
    for r in runs:
        table.add_row(
            r.variant,
            r.code,
            r.backend,
            f"{r.page:,}",
            str(r.requests),
            f"{r.rows:,}",
            f"{r.idle_mb:,.0f}",
            f"{r.peak_mb:,.0f}",
            f"{r.seconds:,.1f}",
            "met" if r.peak_mb < GOAL_MB and not r.errors else "missed",
        )
    console.print(table)
    peers = {r.backend: r for r in runs if r.code != "this"}
    for r in runs:
        if r.code == "this" and r.backend in peers:
            console.print(
                f"{r.variant} ({r.backend}): peak {r.peak_mb:,.0f} MB = "
                f"{r.peak_mb / peers[r.backend].peak_mb:.2f}x the peer's {peers[r.backend].peak_mb:,.0f} MB"
            )

    fig, ax = plt.subplots(figsize=(9, 4))
    labels = [f"{r.variant}\n({r.backend})".replace(": ", ":\n").replace(", ", ",\n") for r in runs]
    ax.bar(labels, [r.peak_mb for r in runs], color=["#c44" if r.code != "this" else "#48c" for r in runs])
    ax.axhline(GOAL_MB, color="red", linestyle="--", label=f"goal {GOAL_MB} MB")
    ax.set_ylabel("server peak RSS (MB)")
    ax.set_title(f"{args.clients} concurrent clients, {args.rows:,} stored")
    ax.legend()
    ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(args.out / "history_api_memory.png", dpi=100)
    (args.out / "history_api_memory.json").write_text(
        json.dumps(
            {
                "rows": args.rows,
                "clients": args.clients,
                "pages": args.pages,
                "goal_mb": GOAL_MB,
                "runs": [r.__dict__ for r in runs],
            },
            indent=2,
        )
    )
    if any(r.errors for r in runs if r.code == "this"):
        raise SystemExit("requests to this code failed: see the errors above")


if __name__ == "__main__":
    main()
