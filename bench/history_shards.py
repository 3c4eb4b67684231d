"""History: recorders as shards of one store, against one recorder of everything (changes/s, end to end).

The recorder's whole path of bench/_history_e2e.py (an API server's watch stream → informer → diff builder →
committed rows, each recorder in a process of its own), with the burst split between ``n`` recorders that are
shards by namespace (``kubernetes.namespaces: [shard-i]``, each reading its namespace's stream and keeping its own
cursors) writing into ONE store, started together. For every shard count: the aggregate rate (all the burst's
changes over the wall time from the first shard's start to the last shard's last commit), each shard's own rate,
and the recorders' summed memory; and the ratio against one recorder of the whole burst in the same run.

Both back ends: PostgreSQL (a throw-away local server, ``fsync=off`` as in the tests) is the store shards are for;
SQLite is measured beside it because one file has one writer at a time, so its shards queue on the write lock.
What bounds the ratio on a machine is its cores: each recorder is CPU-bound on its own diff builder and JSON, and
the database server needs its share too; the table prints the core count beside the figures.

Prints a Rich table, writes bench/out/history_shards.json and a PNG. ``--smoke`` runs in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from _history_e2e import finish_child, start_child
from capstan.sandbox import PostgresServer
from capstan.store import open_store

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=160)


def run_shards(url: str, shards: int, burst: int, objects: int, batch: int) -> dict[str, Any]:
    """``shards`` recorders at once into ``url`` (one: a recorder of everything, not a shard); their figures."""
    per, objs = burst // shards, max(1, objects // shards)
    children = [
        start_child(url, per, objs, batch, 0, namespace=f"shard-{i}" if shards > 1 else None)
        for i in range(shards)
    ]
    figures = [finish_child(c) for c in children]
    store = open_store(url)
    try:
        stored = store.database.count("object_changes")
    finally:
        store.close()
    wall = max(f["done_at"] for f in figures) - min(f["started_at"] for f in figures)
    return {
        "shards": shards,
        "changes": per * shards,
        "stored": stored,
        "seconds": wall,
        "changes_per_s": per * shards / wall,
        "shard_changes_per_s": [f["changes_per_s"] for f in figures],
        "memory_mb": sum(f["memory_mb"] for f in figures),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="seconds-long run")
    parser.add_argument(
        "--burst", type=int, default=100_000, help="changes in the burst, split between shards"
    )
    parser.add_argument("--objects", type=int, default=2_000, help="objects the burst changes, split too")
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--shards", default="1,2,4", help="shard counts to run, comma-separated (1 first)")
    parser.add_argument("--backends", default="postgresql,sqlite")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    args = parser.parse_args()
    if args.smoke:
        args.burst, args.objects, args.shards = 3_000, 200, "1,2"
    try:
        counts = sorted({int(n) for n in args.shards.split(",") if n.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] < 1:
        raise SystemExit("--shards: give shard counts ≥ 1, e.g. 1,2,4")
    if counts[0] != 1:
        counts.insert(0, 1)  # the one recorder every ratio is against
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "burst": args.burst,
        "objects": args.objects,
        "batch": args.batch,
        "cores": os.cpu_count(),
        "backends": {},
    }
    pg: PostgresServer | None = None
    workdir = Path(tempfile.mkdtemp(prefix="capstan-bench-shards-"))
    try:
        for backend in backends:
            runs = []
            for n in counts:
                if backend == "postgresql":
                    pg = pg or PostgresServer().start()
                    pg.reset()
                    url = pg.url
                elif backend == "sqlite":
                    url = str(workdir / f"shards-{n}.db")
                else:
                    raise SystemExit(f"unknown backend {backend!r}")
                console.print(f"[bold]{backend}[/]: {n} recorder(s), a burst of {args.burst:,} changes…")
                runs.append(run_shards(url, n, args.burst, args.objects, args.batch))
            one = runs[0]["changes_per_s"]
            for r in runs:
                r["against_one"] = r["changes_per_s"] / one
            results["backends"][backend] = runs
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    table = Table(
        title=f"Recorders as shards of one store: a burst of {args.burst:,} changes over {args.objects:,} "
        f"Deployments, end to end ({results['cores']} cores)"
    )
    for col in (
        "backend",
        "recorders",
        "changes/s",
        "× one recorder",
        "each shard changes/s",
        "MB (all)",
        "stored",
    ):
        table.add_column(col, justify="right")
    for backend, runs in results["backends"].items():
        for r in runs:
            table.add_row(
                backend,
                str(r["shards"]),
                f"{r['changes_per_s']:,.0f}",
                f"{r['against_one']:.2f}",
                ", ".join(f"{v:,.0f}" for v in r["shard_changes_per_s"]),
                f"{r['memory_mb']:,.0f}",
                f"{r['stored']:,}" + ("" if r["stored"] == r["changes"] else f" of {r['changes']:,}"),
            )
    console.print(table)

    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(results["backends"]))
    for i, (backend, runs) in enumerate(results["backends"].items()):
        ax.bar([r["shards"] + (i - 0.5 * (len(results["backends"]) - 1)) * width for r in runs],
               [r["changes_per_s"] for r in runs], width=width, label=backend)  # fmt: skip
    ax.set_xticks(counts)
    ax.set_xlabel("recorders (shards by namespace) into one store")
    ax.set_ylabel("changes/s, end to end")
    ax.set_title(f"a burst of {args.burst:,} changes, {results['cores']} cores")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "history_shards.png", dpi=100)
    (args.out / "history_shards.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
