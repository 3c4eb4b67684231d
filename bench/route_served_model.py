"""What the served-model path costs the gateway: a request body to vLLM's block keys, against the simulator's path.

In front of a real vLLM the gateway tokenizes each request with the served model's tokenizer (the ``tokenizers``
library and the model's Jinja chat template) and hashes every full block as vLLM does
(:class:`capstan.kvcache.ServedModel`); in front of Capstan's engine simulator it uses the toy tokenizer and
Capstan's own block hash (:class:`capstan.kvcache.PromptHasher`). Both run on the gateway's event loop, once per
request, before the routing decision. This bench times both on chat bodies of growing length built from real
English and code text (this repository's docs and sources), per step (chat template and tokenizer, block hashes)
and per case:

* ``cold``: a conversation the gateway has never seen (a fresh hasher, so every block is hashed);
* ``next turn``: the same conversation sent again with one more user turn, as an agent does (the block memo
  holds the earlier blocks; the tokenizer has no memo and encodes the whole prompt again).

The tokenizer is a byte-level BPE trained here with the same library on the same text (``--vocab``, nothing is
downloaded), or a real model's ``tokenizer.json`` given with ``--tokenizer`` (and its ``tokenizer_config.json``
with ``--tokenizer-config`` for the chat template). Each figure is the median of ``--repeat`` runs. The table sets
each cost beside the prefill time of the same prompt on the ``--preset`` engine (what routing tries to save) and
the router's decision budget (1 ms). Prints the table, writes ``route_served_model.json`` and
``route_served_model.png`` under ``--out``; ``--smoke`` runs in seconds (a test runs it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from _tokenizer_model import train_tokenizer
from capstan.enginesim import get_preset
from capstan.errors import UserError
from capstan.kvcache import HASH_ALGOS, PromptHasher, ServedModel, ServedTokenizer, VllmBlockHasher

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=160)


def corpus() -> list[str]:
    """This repository's docs and Python sources, file by file, in a fixed order."""
    files = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "src/capstan").rglob("*.py"))
    return [f.read_text(encoding="utf-8") for f in files]


def conversation(text: str, served: ServedTokenizer, tokens: int, turns: int = 4) -> dict[str, Any]:
    """A chat body of about ``tokens`` prompt tokens: a system prompt and ``turns`` user/assistant exchanges."""
    chars = len(text) * tokens // max(1, len(served.encode(text, add_special_tokens=False)))
    if chars > len(text):
        text = text * (chars // len(text) + 1)
    part = chars // (2 * turns + 1)
    msgs = [{"role": "system", "content": text[:part]}]
    for i in range(turns):
        start = (2 * i + 1) * part
        msgs.append({"role": "user", "content": text[start : start + part]})
        msgs.append({"role": "assistant", "content": text[start + part : start + 2 * part]})
    msgs.append({"role": "user", "content": "What changed, and why?"})
    return {"model": "bench", "messages": msgs}


def next_turn(body: dict[str, Any]) -> dict[str, Any]:
    """The same conversation with the answer and one more user turn appended."""
    msgs = [*body["messages"], {"role": "assistant", "content": "Three things changed."}]
    return {**body, "messages": [*msgs, {"role": "user", "content": "Which of them broke the rollout?"}]}


def loop_stall_ms(fn: Callable[[], object], off_loop: bool, repeat: int) -> float:
    """The longest an event loop's 1 ms ticker waited while ``fn`` ran on the loop (as a gateway that computes the
    keys inline does) or on a worker thread (as the gateway does for a long prompt); the median over ``repeat``."""

    async def once() -> float:
        worst = 0.0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal worst
            last = time.perf_counter()
            while not done.is_set():  # bounded: ``done`` is set when fn returns
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                worst = max(worst, now - last)
                last = now

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0.005)
        if off_loop:
            await anyio.to_thread.run_sync(fn)
        else:
            fn()
        await asyncio.sleep(0.002)
        done.set()
        await task
        return worst * 1000

    return statistics.median(asyncio.run(once()) for _ in range(repeat))


def beside_encoding(tokenizer_path: Path, text: str, batch: bool, rounds: int = 4) -> float:
    """How fast a Python thread runs while another thread encodes ``text`` ``rounds`` times with the tokenizers
    library (``encode_batch`` when ``batch``, else ``encode``), as a share of its speed alone: near 1 when the library
    releases the GIL while it works, near 0 when it holds it."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))

    def spin_rate(until: threading.Event) -> float:
        count, t0 = 0, time.perf_counter()
        while not until.is_set():  # bounded: ends with the timer or the encoding thread
            count += 1
        return count / (time.perf_counter() - t0)

    window = threading.Event()
    timer = threading.Timer(0.5, window.set)  # the same loop as below, for half a second alone
    timer.start()
    alone = spin_rate(window)
    done = threading.Event()

    def work() -> None:
        for _ in range(rounds):
            tok.encode_batch([text]) if batch else tok.encode(text)
        done.set()

    worker = threading.Thread(target=work)
    worker.start()
    beside = spin_rate(done)
    worker.join()
    return beside / alone


def median_us(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def measure(body: dict[str, Any], served: ServedTokenizer, algos: list[str], repeat: int) -> dict[str, Any]:
    """Every path's cost for one body (µs, medians): toy and each served algorithm, cold and next turn."""
    follow = next_turn(body)
    ids = served.token_ids(body)
    follow_ids = served.token_ids(follow)
    out: dict[str, Any] = {"prompt_tokens": len(ids), "served": {}}

    def toy(b: dict[str, Any], warm: dict[str, Any] | None) -> None:
        hasher = PromptHasher()
        if warm is not None:
            hasher.block_hashes(hasher.token_ids(warm))
        t0 = time.perf_counter()
        hasher.block_hashes(hasher.token_ids(b))
        toy_times.append(time.perf_counter() - t0)

    for case, b, warm in (("cold", body, None), ("next_turn", follow, body)):
        toy_times: list[float] = []
        for _ in range(repeat):
            toy(b, warm)
        out[f"toy_{case}_us"] = statistics.median(toy_times) * 1e6
    out["tokenize_us"] = median_us(lambda: served.token_ids(body), repeat)
    out["tokenize_next_turn_us"] = median_us(lambda: served.token_ids(follow), repeat)
    for algo in algos:
        cold: list[float] = []
        warm_t: list[float] = []
        for _ in range(repeat):
            h = VllmBlockHasher(algo, hash_seed="0")
            t0 = time.perf_counter()
            h.block_hashes(ids)
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            h.block_hashes(follow_ids)
            warm_t.append(time.perf_counter() - t0)
        out["served"][algo] = {
            "hash_cold_us": statistics.median(cold) * 1e6,
            "hash_next_turn_us": statistics.median(warm_t) * 1e6,
        }
    # the whole path through the public entry point, as the gateway calls it (default algorithm)
    model = ServedModel(served, VllmBlockHasher("sha256", hash_seed="0"))
    out["served_model_cold_us"] = median_us(
        lambda: ServedModel(served, VllmBlockHasher("sha256", hash_seed="0")).block_hashes(
            served.token_ids(body)
        ),
        repeat,
    )
    model.block_hashes(model.token_ids(body))
    out["served_model_next_turn_us"] = median_us(lambda: model.block_hashes(model.token_ids(follow)), repeat)
    out["template_us"] = median_us(lambda: served.render_chat(body["messages"]), repeat)

    def whole() -> None:
        ServedModel(served, VllmBlockHasher("sha256", hash_seed="0")).block_hashes(served.token_ids(body))

    out["loop_stall_inline_ms"] = loop_stall_ms(whole, False, repeat)
    out["loop_stall_off_loop_ms"] = loop_stall_ms(whole, True, repeat)
    return out


def main() -> None:
    try:
        run()
    except UserError as exc:  # bad input: one line, exit 2
        print(f"route_served_model.py: {exc}", file=sys.stderr)
        sys.exit(2)


def run() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="seconds-long run")
    ap.add_argument("--tokens", default="1000,8000,32000,128000", help="prompt sizes, comma-separated")
    ap.add_argument("--vocab", type=int, default=32000, help="vocabulary of the tokenizer trained here")
    ap.add_argument("--tokenizer", type=Path, help="a model's tokenizer.json instead of training one")
    ap.add_argument("--tokenizer-config", type=Path, help="its tokenizer_config.json (the chat template)")
    ap.add_argument("--algos", default=",".join(HASH_ALGOS), help="vLLM prefix-caching hash algorithms")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--preset", default="llama-3.1-8b-h100", help="the engine whose prefill time is compared")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/out")
    args = ap.parse_args()
    try:
        sizes = [int(t) for t in args.tokens.split(",") if t.strip()]
    except ValueError:
        raise UserError(f"--tokens {args.tokens!r}: give whole numbers, comma-separated") from None
    if not sizes or min(sizes) < 16:
        raise UserError(f"--tokens {args.tokens!r}: every size must be at least one block (16 tokens)")
    algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = [a for a in algos if a not in HASH_ALGOS]
    if unknown or not algos:
        raise UserError(
            f"--algos {args.algos!r}: unknown {unknown or 'none given'}; vLLM's: {', '.join(HASH_ALGOS)}"
        )
    if args.tokenizer_config is not None and args.tokenizer is None:
        raise UserError("--tokenizer-config needs --tokenizer")
    if args.smoke:
        sizes, args.vocab, args.repeat, algos = [200, 2000], 1000, 3, ["sha256", "xxhash_cbor"]
    preset = get_preset(args.preset)
    texts = corpus()
    text = "\n".join(texts)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        if args.tokenizer is not None:
            tokenizer_path, config_path = args.tokenizer, args.tokenizer_config
            origin = str(args.tokenizer)
        else:
            t0 = time.perf_counter()
            tokenizer_path, config_path = train_tokenizer(
                Path(tmp), texts[:40] if args.smoke else texts, args.vocab
            )
            origin = (
                f"byte-level BPE, {args.vocab:,} tokens, trained here in {time.perf_counter() - t0:.1f} s"
            )
        served = ServedTokenizer.from_files(tokenizer_path, config_path)
        sample = text[: 50_000 if args.smoke else 400_000]
        gil = {"encode": beside_encoding(tokenizer_path, sample, False)}
        gil["encode_batch"] = beside_encoding(tokenizer_path, sample, True)
    if not served.has_chat_template:
        raise UserError(f"{config_path or tokenizer_path}: no chat template (give --tokenizer-config)")
    console.print(f"tokenizer: {origin}; corpus {len(text):,} characters; preset {preset.name}")
    rows = []
    for size in sizes:
        body = conversation(text, served, size)
        r = measure(body, served, algos, args.repeat)
        r["target_tokens"] = size
        r["prefill_s"] = preset.latency.step_time(r["prompt_tokens"], 0)
        rows.append(r)
    table = Table(title="Request body → vLLM's block keys (default sha256), µs per request (median)")
    for label in (
        "prompt tokens",
        "simulator path",
        "… next turn",
        "chat template",
        "tokenizer",
        "sha256 keys",
        "whole path",
        "… next turn",
        "µs / 1k tokens",
        "÷ prefill time",
        "loop stall inline ms",
        "off the loop ms",
    ):
        table.add_column(label, justify="right")
    for r in rows:
        default = r["served"].get("sha256", next(iter(r["served"].values())))
        table.add_row(
            f"{r['prompt_tokens']:,}",
            f"{r['toy_cold_us']:,.0f}",
            f"{r['toy_next_turn_us']:,.0f}",
            f"{r['template_us']:,.0f}",
            f"{r['tokenize_us'] - r['template_us']:,.0f}",
            f"{default['hash_cold_us']:,.0f}",
            f"{r['served_model_cold_us']:,.0f}",
            f"{r['served_model_next_turn_us']:,.0f}",
            f"{r['served_model_cold_us'] / r['prompt_tokens'] * 1000:,.0f}",
            f"{r['served_model_cold_us'] / 1e6 / r['prefill_s']:.4f}",
            f"{r['loop_stall_inline_ms']:,.1f}",
            f"{r['loop_stall_off_loop_ms']:,.1f}",
        )
    console.print(table)
    hashes = Table(
        title="Block keys alone by --prefix-caching-hash-algo, µs per request (median): cold / next turn"
    )
    hashes.add_column("prompt tokens", justify="right")
    for a in algos:
        hashes.add_column(a, justify="right")
    for r in rows:
        hashes.add_row(
            f"{r['prompt_tokens']:,}",
            *[
                f"{r['served'][a]['hash_cold_us']:,.0f} / {r['served'][a]['hash_next_turn_us']:,.0f}"
                for a in algos
            ],
        )
    console.print(hashes)
    console.print(
        f"a Python thread beside the tokenizer ran at {gil['encode']:.0%} of its speed alone during encode, "
        f"{gil['encode_batch']:.0%} during encode_batch (the call that releases the GIL, which the gateway uses)"
    )
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": {k: str(v) for k, v in vars(args).items()},
        "tokenizer": origin,
        "algos": algos,
        "rows": rows,
        "thread_speed_beside": gil,
    }
    (args.out / "route_served_model.json").write_text(json.dumps(results, indent=1))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs = [r["prompt_tokens"] for r in rows]
    ax.plot(xs, [r["toy_cold_us"] for r in rows], "k--", marker="o", label="simulator path (toy), cold")
    ax.plot(xs, [r["tokenize_us"] for r in rows], marker="o", label="chat template + tokenizer")
    for a in algos:
        ax.plot(xs, [r["served"][a]["hash_cold_us"] for r in rows], marker=".", label=f"{a} block keys, cold")
    ax.plot(xs, [r["served_model_next_turn_us"] for r in rows], marker="s", label="whole path, next turn")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("µs per request")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out / "route_served_model.png", dpi=120)
    plt.close(fig)
    console.print(f"wrote {args.out}/route_served_model.json, route_served_model.png")


if __name__ == "__main__":
    main()
