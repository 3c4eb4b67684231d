"""The prefix indexes on their own: match latency over real Mooncake prompts, and memory per entry.

The router's decision time at large KV capacities is mostly one prefix match: every block of a long prompt (up to
~7,600 blocks of 16 tokens in the Mooncake conversation trace) is looked up in an index of millions of entries.
This bench fills a :class:`capstan.route.PreciseKVIndex` as KV events would (each of the first ``--stored``
requests held by one or two of ``--replicas`` endpoints), then times ``match`` for ``--queries`` prompts (the
next requests of the trace, then a replay of early ones; each the fastest of five, so a shared machine's
preemptions drop out) and measures the bytes per entry of both indexes with tracemalloc.

To compare with another version of the index, run the same command with that version first on ``PYTHONPATH``
(e.g. a ``git worktree`` of an older commit). Prints a table, writes ``route_index.json`` and
``route_index_match.png`` under ``--out``. ``--smoke`` runs in seconds (a test runs it).
"""

from __future__ import annotations

import argparse
import json
import random
import time
import tracemalloc
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

import capstan.route
from capstan.kvcache import DEFAULT_BLOCK_SIZE, BlockStored, MooncakeText
from capstan.route import ApproximatePrefixIndex, PreciseKVIndex

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared/data/traces/mooncake-fast25/conversation_trace.jsonl"
console = Console(width=160)


def read_prompts(path: Path, limit: int, block_size: int = DEFAULT_BLOCK_SIZE) -> list[list[int]]:
    text = MooncakeText(block_size)
    out = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if len(out) >= limit:
                break
            try:
                rec = json.loads(line)
                out.append(text.block_hashes([int(h) for h in rec["hash_ids"]], int(rec["input_length"])))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise SystemExit(f"{path}:{lineno}: bad Mooncake record: {exc}") from None
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bytes_per_entry(kind: str, entries: int, seed: int) -> float:
    """tracemalloc's count for ``entries`` distinct blocks over 8 endpoints (the hashes are new ints, as decoded
    events bring them)."""
    rng = random.Random(seed)
    per_call = 500
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index: Any
        if kind == "precise":
            index = PreciseKVIndex()
            for i in range(entries // per_call):
                blocks = [rng.getrandbits(63) for _ in range(per_call)]
                index.apply(f"e{i % 8}", [BlockStored(blocks, None, [], DEFAULT_BLOCK_SIZE)])
        else:
            index = ApproximatePrefixIndex(capacity_per_endpoint=entries, stride=1)
            for i in range(entries // per_call):
                index.record(f"e{i % 8}", [rng.getrandbits(63) for _ in range(per_call)])
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return float(used) / max(1, index.size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="seconds-long run")
    ap.add_argument("--trace", type=Path, default=TRACE, help="a Mooncake-format JSONL trace")
    ap.add_argument("--stored", type=int, default=8000, help="requests whose blocks the endpoints hold")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--memory-entries", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/out")
    args = ap.parse_args()
    if args.smoke:
        args.stored, args.queries, args.memory_entries = 300, 100, 20_000
    args.out.mkdir(parents=True, exist_ok=True)

    prompts = read_prompts(args.trace, args.stored + args.queries // 2)
    stored, fresh = prompts[: args.stored], prompts[args.stored :]
    queries = (fresh + stored)[: args.queries]
    rng = random.Random(args.seed)
    names = [f"e{i}" for i in range(args.replicas)]
    index = PreciseKVIndex()
    for blocks in stored:
        for name in rng.sample(names, rng.choice([1, 1, 2])):
            index.apply(name, [BlockStored(list(blocks), None, [], DEFAULT_BLOCK_SIZE)])
    timings = []
    for blocks in queries:
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            index.match(blocks, names)
            best = min(best, time.perf_counter() - t0)
        timings.append(best * 1e6)
    lengths = [len(q) for q in queries]
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": {k: str(v) for k, v in vars(args).items()},
        "index_module": capstan.route.__file__,
        "entries": index.size,
        "prompt_blocks_p50": pct(lengths, 0.5),
        "prompt_blocks_p99": pct(lengths, 0.99),
        "match_us": {
            q: pct(timings, p) for q, p in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))
        },
        "bytes_per_entry": {
            kind: bytes_per_entry(kind, args.memory_entries, args.seed) for kind in ("precise", "approximate")
        },
    }
    table = Table(
        title=f"Prefix match, {index.size:,} entries over {args.replicas} endpoints ({args.queries} prompts)"
    )
    for col in (
        "match p50 µs",
        "p90",
        "p99",
        "max",
        "prompt blocks p50 / p99",
        "precise B/entry",
        "approx B/entry",
    ):
        table.add_column(col, justify="right")
    m = result["match_us"]
    table.add_row(
        f"{m['p50']:.0f}",
        f"{m['p90']:.0f}",
        f"{m['p99']:.0f}",
        f"{m['max']:.0f}",
        f"{result['prompt_blocks_p50']} / {result['prompt_blocks_p99']}",
        f"{result['bytes_per_entry']['precise']:.0f}",
        f"{result['bytes_per_entry']['approximate']:.0f}",
    )
    console.print(table)
    console.print(f"index module: {result['index_module']}")
    (args.out / "route_index.json").write_text(json.dumps(result, indent=2))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(lengths, timings, s=4)
    ax.set_xlabel(f"prompt length (blocks of {DEFAULT_BLOCK_SIZE} tokens)")
    ax.set_ylabel("match time, fastest of 5 (µs)")
    ax.set_title(f"precise prefix match, {index.size:,} entries")
    fig.tight_layout()
    fig.savefig(args.out / "route_index_match.png", dpi=120)
    console.print(f"wrote {args.out / 'route_index.json'}, route_index_match.png")


if __name__ == "__main__":
    main()
