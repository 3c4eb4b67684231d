"""History store: ingest throughput (object changes/s) and one object's timeline query latency.

Both back ends in the same run: SQLite (WAL, a file under the output directory) and PostgreSQL 15 (a throw-away
local server from the Debian package, ``fsync=off`` as in the tests, so compare the two with that in mind).

1. Ingest: ``--changes`` Deployment changes over ``--objects`` objects, built by the real diff builder
   (``ObjectHistory``: normalisation, RFC 6902 patches, a snapshot every 20 versions), written in batches of
   ``--batch`` through ``Store.write`` (records + last states + the kind cursor in one transaction). Reported
   separately: building the batches (pure CPU) and writing them, one after the other on one thread, and both
   pipelined as ``capstan record`` runs them (diffing on one thread while a writer thread commits).
2. End to end: the recorder's whole path, as ``capstan record`` runs it: a ``KubeCollector`` reading one watch stream
   that carries a burst of ``--burst`` Deployment changes (an API server behind httpx2's ``MockTransport``), through
   the informer and the diff builder into committed rows (bench/_history_e2e.py), in a child process whose peak RSS
   is the recorder's memory under that burst.
3. Query: with ``--records`` changes stored (streamed straight into the store in the row shape the diff builder
   produces — a snapshot every 20 versions, small patches between — so that 1M rows load in minutes), the latency of
   ``Store.timeline(kind, namespace, name)`` for ``--queries`` random objects, and of ``Store.object_at`` (rebuild
   from snapshot + patches).

Prints Rich tables, writes bench/out/history_ingest.json and a PNG. ``--smoke`` runs in seconds. ``--diff-only N``
runs just the diff builder over N changes of 500 Deployments (what the docs count with callgrind).
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from _history_e2e import deployment, run_in_child
from capstan.record import ObjectHistory
from capstan.runtime import shorten_gil_switch_interval
from capstan.sandbox import PostgresServer
from capstan.store import INGEST_CACHE_KIB, Batch, ObjectChange, Store, open_store
from goals import limit

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=160)


def diffed_batches(source: str, n_changes: int, n_objects: int, batch_size: int) -> Iterator[Batch]:
    """``n_changes`` Deployment changes over ``n_objects`` objects through the real diff builder, in batches."""
    history = ObjectHistory(source)
    current = Batch()
    for i in range(n_changes):
        k = i % n_objects
        etype = "ADDED" if i < n_objects else "MODIFIED"
        current.extend(history.observe(etype, deployment(k, i + 1), observed_at=1_700_000_000.0 + i * 0.001))
        if len(current.object_changes) >= batch_size:
            yield current
            current = Batch()
    if not current.is_empty():
        yield current


def build_batches(n_changes: int, n_objects: int, batch_size: int) -> tuple[list[Batch], float]:
    start = time.perf_counter()
    batches = list(diffed_batches("bench", n_changes, n_objects, batch_size))
    return batches, time.perf_counter() - start


def load_query_dataset(
    store: Store, n_records: int, n_objects: int, span_days: float, batch_size: int = 10_000
) -> float:
    """Stream ``n_records`` changes over ``n_objects`` straight into the store, in the shape the diff builder
    produces (a snapshot at version 1 and every 20th, a small patch otherwise), without holding them in memory.
    They are spread evenly over ``span_days`` (on PostgreSQL a timeline then reads that many day partitions)."""
    step = span_days * 86_400.0 / max(1, n_records)
    start = time.perf_counter()
    batch = Batch()
    for i in range(n_records):
        k = i % n_objects
        seq = i // n_objects + 1
        obj = deployment(k, i + 1)
        meta = obj["metadata"]
        snapshot = obj if seq == 1 or seq % 20 == 0 else None
        patch = (
            None
            if seq == 1
            else [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": f"img:{i}"}]
        )
        batch.object_changes.append(
            ObjectChange(
                source="bench",
                observed_at=1_700_000_000.0 + i * step,
                kind="Deployment",
                api_version="apps/v1",
                namespace=meta["namespace"],
                name=meta["name"],
                uid=meta["uid"],
                resource_version=str(i + 1),
                change_type="added" if seq == 1 else "modified",
                observed_via="watch",
                version_seq=seq,
                patch=patch,
                snapshot=snapshot,
            )
        )
        if len(batch.object_changes) >= batch_size:
            store.history.write(batch)
            batch = Batch()
    store.history.write(batch)
    return time.perf_counter() - start


def pipelined(store: Store, n_changes: int, n_objects: int, batch_size: int) -> float:
    """The live recorder's arrangement: the diff builder on one thread hands full batches to a writer thread
    (``capstan record`` writes with ``asyncio.to_thread`` while its loop keeps diffing); at most two batches wait.
    Returns the seconds from the first diff to the last commit, with the GIL's switch interval ``capstan record``
    sets (restored after)."""
    handoff: queue.Queue[Batch | None] = queue.Queue(maxsize=2)
    failure: list[BaseException] = []

    def writer() -> None:
        try:
            while (b := handoff.get()) is not None:
                store.history.write(b)
        except BaseException as exc:  # reported below
            failure.append(exc)

    thread = threading.Thread(target=writer, name="bench-writer")
    interval = sys.getswitchinterval()
    shorten_gil_switch_interval()  # as `capstan record` does at its start
    try:
        start = time.perf_counter()
        thread.start()
        for batch in diffed_batches("bench-pipelined", n_changes, n_objects, batch_size):
            handoff.put(batch)
        handoff.put(None)
        thread.join()
    finally:
        sys.setswitchinterval(interval)
    if failure:
        raise failure[0]
    return time.perf_counter() - start


def ingest(store: Store, batches: list[Batch]) -> float:
    start = time.perf_counter()
    for b in batches:
        store.history.write(b)
    return time.perf_counter() - start


def query_latency(store: Store, n_objects: int, queries: int, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    timeline_ms: list[float] = []
    rebuild_ms: list[float] = []
    for _ in range(queries):
        k = rng.randrange(n_objects)
        t0 = time.perf_counter()
        rows = store.history.timeline(kind="Deployment", namespace=f"team-{k % 20}", name=f"svc-{k}")
        timeline_ms.append((time.perf_counter() - t0) * 1000)
        assert rows, "every object has changes"
        at = rows[len(rows) // 2].observed_at
        t0 = time.perf_counter()
        store.history.object_at("Deployment", f"team-{k % 20}", f"svc-{k}", at)
        rebuild_ms.append((time.perf_counter() - t0) * 1000)
    return {"timeline_ms": timeline_ms, "object_at_ms": rebuild_ms}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ingest_and_pipelined(
    backend: str,
    url: str,
    pg: PostgresServer | None,
    workdir: Path,
    ingest_batches: list[Batch],
    args: argparse.Namespace,
) -> tuple[float, float]:
    """Seconds to write the prebuilt batches, and to diff and write them pipelined (two stores, reset between)."""
    console.print(f"[bold]{backend}[/]: ingest…")
    store = open_store(url, writer_cache_kib=INGEST_CACHE_KIB)  # as `capstan record` opens it
    write_s = ingest(store, ingest_batches)
    store.close()
    if backend == "postgresql" and pg is not None:
        pg.reset()
    store = open_store(
        str(workdir / "pipelined.db") if backend == "sqlite" else url, writer_cache_kib=INGEST_CACHE_KIB
    )
    piped_s = pipelined(store, args.changes, args.objects, args.batch)
    store.close()
    if backend == "postgresql" and pg is not None:
        pg.reset()
    return write_s, piped_s


def _e2e_summary(runs: list[dict[str, float]]) -> dict[str, float]:
    """Several bursts of one configuration: the median rate (with the slowest and fastest run), and the largest
    memory (the goal is a bound the recorder never crosses) and the changes stored by every run (the fewest)."""
    rates = [r["changes_per_s"] for r in runs]
    return {
        "changes_per_s": statistics.median(rates),
        "min_changes_per_s": min(rates),
        "max_changes_per_s": max(rates),
        "stored": min(r["stored"] for r in runs),
        "memory_mb": max(r["memory_mb"] for r in runs),
        "helpers_pss_mb": max(r["helpers_pss_mb"] for r in runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="seconds-long run")
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--objects", type=int, default=2_000)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument(
        "--diff-workers",
        type=int,
        default=1,
        help="diff worker processes of the second end-to-end run (on 2 cores one beat two: the main process, "
        "the worker and the database share them)",
    )
    parser.add_argument(
        "--burst",
        type=int,
        default=100_000,
        help="changes in the end-to-end burst (the recorder's whole path)",
    )
    parser.add_argument(
        "--e2e-runs",
        type=int,
        default=3,
        help="bursts per end-to-end configuration, taking turns; the median rate is the figure, the range printed",
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="stored changes for the query test")
    parser.add_argument("--query-objects", type=int, default=10_000)
    parser.add_argument(
        "--span-days",
        type=float,
        default=14.0,
        help="days the stored records spread over (the default retention)",
    )
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    parser.add_argument(
        "--query-only",
        action="store_true",
        help="only the query test (load --records, time timelines): e.g. 10,000,000 records on PostgreSQL",
    )
    parser.add_argument(
        "--diff-only",
        type=int,
        metavar="N",
        help="only run the diff builder over N changes and print how many it built (for callgrind counts)",
    )
    args = parser.parse_args()
    if args.diff_only is not None:
        built = sum(len(b.object_changes) for b in diffed_batches("bench", args.diff_only, 500, args.batch))
        print(f"diff builder: {built} changes")
        return
    if args.smoke:
        args.changes, args.objects, args.records, args.query_objects, args.queries, args.burst = (
            4_000,
            200,
            8_000,
            400,
            50,
            3_000,
        )
        args.e2e_runs = 1
    args.out.mkdir(parents=True, exist_ok=True)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]

    if args.query_only:
        ingest_batches: list[Batch] = []
        build_s = math.nan
    else:
        console.print(f"building {args.changes} changes over {args.objects} objects (diff builder)…")
        ingest_batches, build_s = build_batches(args.changes, args.objects, args.batch)

    results: dict[str, Any] = {
        "changes": args.changes,
        "objects": args.objects,
        "batch": args.batch,
        "burst": args.burst,
        "records": args.records,
        "query_objects": args.query_objects,
        "build_changes_per_s": args.changes / build_s,
        "backends": {},
    }
    pg: PostgresServer | None = None
    workdir = Path(tempfile.mkdtemp(prefix="capstan-bench-history-"))
    try:
        for backend in backends:
            if backend == "sqlite":
                url_a, url_b = str(workdir / "ingest.db"), str(workdir / "query.db")
            elif backend == "postgresql":
                pg = pg or PostgresServer().start()
                pg.reset()
                url_a = url_b = pg.url
            else:
                raise SystemExit(f"unknown backend {backend!r}")
            nothing = {
                "changes_per_s": math.nan,
                "min_changes_per_s": math.nan,
                "max_changes_per_s": math.nan,
                "stored": 0.0,
                "memory_mb": math.nan,
                "helpers_pss_mb": math.nan,
            }
            e2e: dict[int, dict[str, float]] = {0: nothing, args.diff_workers: nothing}
            runs: dict[int, list[dict[str, float]]] = {0: [], args.diff_workers: []}
            write_s = piped_s = math.nan
            if not args.query_only:
                write_s, piped_s = ingest_and_pipelined(backend, url_a, pg, workdir, ingest_batches, args)
            # the configurations take turns (0, w, 0, w, …) so a change in the machine's load falls on both
            for i in range(args.e2e_runs) if not args.query_only else ():
                for workers in (0, args.diff_workers):
                    console.print(
                        f"[bold]{backend}[/]: end to end, a burst of {args.burst} changes, {workers} diff "
                        f"workers, run {i + 1} of {args.e2e_runs}…"
                    )
                    runs[workers].append(
                        run_in_child(
                            str(workdir / f"e2e-{workers}-{i}.db") if backend == "sqlite" else url_a,
                            args.burst,
                            args.objects,
                            args.batch,
                            workers,
                        )
                    )
                    if backend == "postgresql" and pg is not None:
                        pg.reset()
            for workers, done in runs.items():
                if done:
                    e2e[workers] = _e2e_summary(done)
            console.print(f"[bold]{backend}[/]: loading {args.records} records for the query test…")
            store = open_store(url_b, writer_cache_kib=INGEST_CACHE_KIB)
            load_s = load_query_dataset(store, args.records, args.query_objects, args.span_days)
            stored = store.database.count("object_changes")
            lat = query_latency(store, args.query_objects, args.queries, args.seed)
            size = store.retention.size_bytes()
            store.close()
            results["backends"][backend] = {
                "ingest_changes_per_s": args.changes / write_s,
                "ingest_with_diff_changes_per_s": args.changes / (write_s + build_s),
                "pipelined_changes_per_s": args.changes / piped_s,
                "bulk_load_changes_per_s": args.records / load_s,
                "end_to_end_runs": runs[0],
                "end_to_end_workers_runs": runs[args.diff_workers],
                "end_to_end_changes_per_s": e2e[0]["changes_per_s"],
                "end_to_end_min_changes_per_s": e2e[0]["min_changes_per_s"],
                "end_to_end_max_changes_per_s": e2e[0]["max_changes_per_s"],
                "end_to_end_workers_min_changes_per_s": e2e[args.diff_workers]["min_changes_per_s"],
                "end_to_end_workers_max_changes_per_s": e2e[args.diff_workers]["max_changes_per_s"],
                "end_to_end_stored": int(e2e[0]["stored"]),
                "burst_memory_mb": e2e[0]["memory_mb"],
                "end_to_end_workers_changes_per_s": e2e[args.diff_workers]["changes_per_s"],
                "end_to_end_workers_stored": int(e2e[args.diff_workers]["stored"]),
                "burst_workers_memory_mb": e2e[args.diff_workers]["memory_mb"],
                "burst_workers_helpers_pss_mb": e2e[args.diff_workers]["helpers_pss_mb"],
                "stored_records": stored,
                "store_bytes": size,
                "timeline_p50_ms": statistics.median(lat["timeline_ms"]),
                "timeline_p95_ms": pct(lat["timeline_ms"], 0.95),
                "timeline_p99_ms": pct(lat["timeline_ms"], 0.99),
                "object_at_p50_ms": statistics.median(lat["object_at_ms"]),
                "object_at_p95_ms": pct(lat["object_at_ms"], 0.95),
                "latencies": lat,
            }
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    if not args.query_only:
        print_ingest(results, args)
    table = Table(
        title=f"One object's timeline with {args.records:,} records stored ({args.queries} queries)"
    )
    for col in (
        "backend",
        "stored",
        "size MiB",
        "bulk load changes/s",
        "timeline p50 ms",
        "p95 ms",
        "p99 ms",
        "object_at p50 ms",
        "p95 ms",
    ):
        table.add_column(col, justify="right")
    for name, r in results["backends"].items():
        table.add_row(
            name,
            f"{r['stored_records']:,}",
            f"{r['store_bytes'] / 2**20:,.1f}",
            f"{r['bulk_load_changes_per_s']:,.0f}",
            f"{r['timeline_p50_ms']:.2f}",
            f"{r['timeline_p95_ms']:.2f}",
            f"{r['timeline_p99_ms']:.2f}",
            f"{r['object_at_p50_ms']:.2f}",
            f"{r['object_at_p95_ms']:.2f}",
        )
    console.print(table)
    timeline_goal = limit("history.timeline")
    for name, r in results["backends"].items():
        p99 = r["timeline_p99_ms"]
        console.print(
            f"{name}: one object's timeline p99 {p99:.2f} ms with {r['stored_records']:,} records stored "
            f"({'met' if p99 <= timeline_goal else 'missed'}, goal ≤ {timeline_goal:g} ms)"
        )
    if len(results["backends"]) == 2 and not args.query_only:
        s, p = results["backends"]["sqlite"], results["backends"]["postgresql"]
        console.print(
            f"ratios sqlite/postgresql: write {s['ingest_changes_per_s'] / p['ingest_changes_per_s']:.2f}x, "
            f"timeline p50 {s['timeline_p50_ms'] / p['timeline_p50_ms']:.2f}x"
        )
    plot(results, args)


def print_ingest(results: dict[str, Any], args: argparse.Namespace) -> None:
    """The ingest table and the end-to-end goal lines."""
    table = Table(
        title=f"History store ingest ({args.changes} changes, {args.objects} objects, batch {args.batch})"
    )
    for col in (
        "backend",
        "write changes/s",
        "diff+write changes/s",
        "pipelined diff | write changes/s",
        "bulk load changes/s",
        f"end to end changes/s (median; watch → row, {args.burst:,})",
        "burst MB",
        f"end to end, {args.diff_workers} diff workers",
        "burst MB (all processes)",
    ):
        table.add_column(col, justify="right")
    for name, r in results["backends"].items():
        table.add_row(
            name,
            f"{r['ingest_changes_per_s']:,.0f}",
            f"{r['ingest_with_diff_changes_per_s']:,.0f}",
            f"{r['pipelined_changes_per_s']:,.0f}",
            f"{r['bulk_load_changes_per_s']:,.0f}",
            f"{r['end_to_end_changes_per_s']:,.0f}",
            f"{r['burst_memory_mb']:,.0f}",
            f"{r['end_to_end_workers_changes_per_s']:,.0f}",
            f"{r['burst_workers_memory_mb']:,.0f}",
        )
    console.print(table)
    console.print(f"diff builder alone: {results['build_changes_per_s']:,.0f} changes/s")
    e2e_goal, rss_goal = limit("history.ingest_e2e"), limit("history.burst_memory")
    for name, r in results["backends"].items():
        for label, key, mb in (
            ("in process", "end_to_end", r["burst_memory_mb"]),
            (f"{args.diff_workers} diff workers", "end_to_end_workers", r["burst_workers_memory_mb"]),
        ):
            rate, low, high = (r[f"{key}{part}changes_per_s"] for part in ("_", "_min_", "_max_"))
            console.print(
                f"{name}, {label}: end to end {rate:,.0f} changes/s, median of {args.e2e_runs} burst(s) "
                f"({low:,.0f}–{high:,.0f}; {'met' if rate >= e2e_goal else 'missed'}, goal ≥ {e2e_goal:,}); "
                f"memory under the burst {mb:,.0f} MB at most "
                f"({'met' if mb <= rss_goal else 'missed'}, goal ≤ {rss_goal:,} MB)"
            )
    console.print(
        "burst memory: the recorder's peak RSS, plus with diff workers the PSS of the workers and their fork "
        "server at the end of the burst"
    )


def plot(results: dict[str, Any], args: argparse.Namespace) -> None:
    """Ingest rates and the timeline latency histogram; the JSON of every figure."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    names = list(results["backends"])
    axes[0].bar(names, [results["backends"][n]["ingest_changes_per_s"] for n in names])
    axes[0].axhline(limit("history.ingest"), color="red", linestyle="--", label="goal 10k/s (SQLite)")
    axes[0].set_ylabel("changes/s")
    axes[0].set_title("ingest")
    axes[0].legend()
    for n in names:
        axes[1].hist(results["backends"][n]["latencies"]["timeline_ms"], bins=40, alpha=0.6, label=n)
    axes[1].axvline(limit("history.timeline"), color="red", linestyle="--", label="goal 20 ms")
    axes[1].set_xlabel("timeline query ms")
    axes[1].set_title(f"one object's timeline, {args.records:,} stored")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(args.out / "history_ingest.png", dpi=100)
    for name, r in results["backends"].items():
        r.pop("latencies")
        # figures a --query-only run did not measure are null in the JSON (NaN is not JSON)
        results["backends"][name] = {
            k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()
        }
    if math.isnan(results["build_changes_per_s"]):
        results["build_changes_per_s"] = None
    (args.out / "history_ingest.json").write_text(json.dumps(results, indent=2, allow_nan=False))


if __name__ == "__main__":
    main()
