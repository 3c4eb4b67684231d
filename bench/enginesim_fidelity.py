"""Engine simulator fidelity and throughput.

1. TTFT against the latency model's formula at several cached ratios, on the virtual clock (the pure engine)
   and over real loopback HTTP (a `capstan enginesim serve` process, streaming, time-scaled).
2. Requests per second one server process sustains (closed loop, several replicas in the process).
3. Whole-trace speed of the pure engine on the virtual clock (Mooncake trace).

Prints Rich tables and writes PNG plots under bench/out/. ``--smoke`` runs in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import matplotlib
import psutil

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from rich.console import Console
from rich.table import Table

from capstan.enginesim import Engine, EngineConfig, EngineRequest, get_preset
from capstan.kvcache import MooncakeText, Tokenizer, block_hashes
from capstan.replay import Words

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared/data/traces/mooncake-fast25/conversation_trace.jsonl"
PRESET = "llama-3.1-8b-h100"
console = Console()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def formula_ttft(uncached: int, chunk: int) -> float:
    lat = get_preset(PRESET).latency
    chunks = max(1, math.ceil(uncached / chunk))
    return chunks * lat.step_overhead_s + uncached * lat.prefill_s_per_token


def prompt_words(n: int, seed: int) -> str:
    """``n`` single-token words; prompts with the same seed share their first words."""
    return Words(seed).text(n)


def head(text: str, tokens: int) -> str:
    return "".join(Tokenizer().pieces(text)[:tokens])


# ---- 1a: virtual clock -------------------------------------------------------------------------------------
def virtual_ttft(length: int, ratios: list[float]) -> list[tuple[float, int, float, float]]:
    p = get_preset(PRESET)
    tok = Tokenizer()
    rows = []
    for r in ratios:
        e = Engine(
            EngineConfig(latency=p.latency, num_gpu_blocks=p.num_gpu_blocks, max_num_seqs=p.max_num_seqs)
        )
        full = tok.encode(prompt_words(length, 1))
        warm = full[: int(r * length)]
        t = 0.0
        if len(warm) >= 2:
            e.submit(EngineRequest("warm", len(warm), block_hashes(warm), 1), t)
            while (nxt := e.next_event_time()) is not None:
                e.advance(nxt)
            t = e.now + 1.0
        e.submit(EngineRequest("probe", len(full), block_hashes(full), 1), t)
        (c,) = e.advance(e.next_event_time() or t)
        assert c.ttft is not None
        rows.append((r, c.cached_tokens, c.ttft, formula_ttft(length - c.cached_tokens, 8192)))
    return rows


# ---- 1b: over HTTP -----------------------------------------------------------------------------------------
def start_server(
    replicas: int, preset: str, time_scale: float, extra: list[str] | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    while any(not _port_free(port + i) for i in range(replicas)):
        port = free_port()
    code = "import sys; from capstan.cli.main import main; main(sys.argv[1:])"
    args = [sys.executable, "-c", code, "--log-level", "WARNING", "enginesim", "serve", "--replicas", str(replicas),
            "--port", str(port), "--preset", preset, "--time-scale", str(time_scale), *(extra or [])]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if all(
                httpx.get(f"http://127.0.0.1:{port + i}/health", timeout=1).status_code == 200
                for i in range(replicas)
            ):
                return proc, port
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start in 180 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if the server has not exited after 60 s (a loaded host can be slow to shut down)."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        console.print("server did not exit within 60 s of SIGTERM; killed")
        proc.kill()
        proc.wait(timeout=30)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


async def _ttft_sum(client: httpx.AsyncClient, port: int) -> float:
    text = (await client.get(f"http://127.0.0.1:{port}/metrics")).text
    for line in text.splitlines():
        if line.startswith("vllm:time_to_first_token_seconds_sum"):
            return float(line.rsplit(" ", 1)[1])
    raise RuntimeError("no TTFT histogram in /metrics")


async def http_ttft(
    port: int, length: int, ratios: list[float], time_scale: float
) -> list[tuple[float, int, float, float, float]]:
    """Per ratio: (ratio, cached tokens, server-reported TTFT, client-measured TTFT, formula), model seconds."""
    rows = []
    url = f"http://127.0.0.1:{port}/v1/completions"
    async with httpx.AsyncClient(timeout=120) as client:
        # Warm-up: connection, code paths.
        (
            await client.post(url, json={"model": "sim-model", "prompt": " warm up", "max_tokens": 1})
        ).raise_for_status()
        for i, r in enumerate(ratios):
            seed = 100 + i
            full = prompt_words(length, seed)
            k = int(r * length)
            if k >= 2:
                warm = head(full, k)
                resp = await client.post(url, json={"model": "sim-model", "prompt": warm, "max_tokens": 1})
                resp.raise_for_status()
            body = {"model": "sim-model", "prompt": full, "max_tokens": 2, "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip
            before = await _ttft_sum(client, port)
            start = time.monotonic()
            first = None
            cached = 0
            async with client.stream("POST", url, json=body) as resp:
                async for line in resp.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if first is None and chunk["choices"] and chunk["choices"][0]["text"]:
                        first = time.monotonic()
                    if chunk.get("usage"):
                        cached = chunk["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert first is not None
            server = await _ttft_sum(client, port) - before
            rows.append(
                (r, cached, server, (first - start) * time_scale, formula_ttft(length - cached, 8192))
            )
    return rows


# ---- 2: throughput of one process ----------------------------------------------------------------------------
async def closed_loop(
    ports: list[int], prompt: str, concurrency: int, seconds: float, stream: bool
) -> tuple[float, int, int, str]:
    done = 0
    errors = 0
    first_error = ""
    stop_at = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=concurrency * 2)

    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def worker(i: int) -> None:
            nonlocal done, errors, first_error
            n = 0
            while time.monotonic() < stop_at:  # bounded by the deadline
                port = ports[(i + n) % len(ports)]
                n += 1
                body = {
                    "model": "sim-model",
                    "prompt": prompt + f" q{i}x{n}",
                    "max_tokens": 16,
                    "stream": stream,
                }
                url = f"http://127.0.0.1:{port}/v1/completions"
                why = ""
                try:
                    if stream:
                        async with client.stream("POST", url, json=body) as resp:
                            async for _ in resp.aiter_lines():
                                pass
                            ok = resp.status_code == 200
                    else:
                        resp = await client.post(url, json=body)
                        ok = resp.status_code == 200
                    why = "" if ok else f"HTTP {resp.status_code}"
                except httpx.HTTPError as exc:
                    ok, why = False, repr(exc)[:200]
                if why and not first_error:
                    first_error = why
                if ok:
                    done += 1
                else:
                    errors += 1

        start = time.monotonic()
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        return done / (time.monotonic() - start), errors, done, first_error


# ---- 3: whole-trace speed on the virtual clock --------------------------------------------------------------
# ---- 4: latency under load (virtual clock) -----------------------------------------------------------------
def load_curve(rates: list[float], n: int) -> list[tuple[float, float, float, float, float]]:
    """Poisson arrivals of 2000-token prompts (no shared prefix) with 200 output tokens on one engine:
    (rate, TTFT p50, TTFT p90, mean ITL, mean running) per rate, model seconds."""
    import random

    p = get_preset(PRESET)
    rows = []
    for rate in rates:
        rng = random.Random(1)
        e = Engine(
            EngineConfig(latency=p.latency, num_gpu_blocks=p.num_gpu_blocks, max_num_seqs=p.max_num_seqs)
        )
        t = 0.0
        done = []
        running_samples = []
        for i in range(n):
            t += rng.expovariate(rate)
            done += e.advance(t)
            running_samples.append(e.load().running)
            toks = [rng.randrange(100_000) for _ in range(2000)]
            e.submit(EngineRequest(f"r{i}", 2000, block_hashes(toks), 200), t)
        while (nxt := e.next_event_time()) is not None:
            done += e.advance(nxt)
        ttft = sorted(c.ttft for c in done if c.ttft is not None)
        itl = [(c.e2e - (c.ttft or 0)) / (c.output_tokens - 1) for c in done]
        rows.append((rate, ttft[len(ttft) // 2], ttft[int(len(ttft) * 0.9)], sum(itl) / len(itl),
                     sum(running_samples) / len(running_samples)))  # fmt: skip
    return rows


def trace_speed(n: int) -> dict[str, float]:
    p = get_preset(PRESET)
    mt = MooncakeText()
    recs = []
    with TRACE.open() as fh:
        for line in fh:
            if len(recs) >= n:
                break
            recs.append(json.loads(line))
    t0 = time.perf_counter()
    reqs = [(r["timestamp"] / 1000, EngineRequest(f"r{i}", r["input_length"], mt.block_hashes(r["hash_ids"], r["input_length"]),
             max(1, r["output_length"]))) for i, r in enumerate(recs)]  # fmt: skip
    t_hash = time.perf_counter() - t0
    # One engine carrying the trace's whole load would saturate; give it 8 replicas' worth of speed by
    # compressing nothing and using 8 engines round-robin (what a harness would do), timing the engine work only.
    engines = [Engine(EngineConfig(latency=p.latency, num_gpu_blocks=p.num_gpu_blocks)) for _ in range(8)]
    t1 = time.perf_counter()
    done = 0
    for i, (at, req) in enumerate(reqs):
        for e in engines:
            done += len(e.advance(at))
        engines[i % 8].submit(req, at)
    for e in engines:
        for _ in range(10_000_000):
            nxt = e.next_event_time()
            if nxt is None:
                break
            done += len(e.advance(nxt))
    t_sim = time.perf_counter() - t1
    steps = sum(e.counters.steps for e in engines)
    q = sum(e.counters.prefix_cache_queries for e in engines)
    h = sum(e.counters.prefix_cache_hits for e in engines)
    return {"requests": n, "completed": done, "hash_s": t_hash, "sim_s": t_sim, "steps": steps,
            "model_span_s": max(e.now for e in engines), "hit_ratio": h / q if q else 0.0}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="seconds-long run")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/out")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    smoke = args.smoke
    length = 2000 if smoke else 8000
    ratios = [0.0, 0.5, 0.9] if smoke else [0.0, 0.25, 0.5, 0.75, 0.9, 0.99]
    scale = 2.0

    vt = virtual_ttft(length, ratios)
    proc, port = start_server(1, PRESET, scale)
    try:
        ht = asyncio.run(http_ttft(port, length, ratios, scale))
    finally:
        stop_server(proc)

    table = Table(title=f"TTFT vs cached ratio, {length}-token prompt, preset {PRESET} (model seconds)")
    cols = ("cached ratio", "cached tok", "formula", "virtual clock", "HTTP server", "HTTP client",
            "client - formula", "wall overhead ms")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="right")
    for (r, c, v, f), (_, hc, hs, hcl, hf) in zip(vt, ht, strict=True):
        assert hc == c, "HTTP and virtual runs cached different amounts"
        table.add_row(
            f"{r:.2f}", str(c), f"{f:.4f}", f"{v:.4f}", f"{hs:.4f}", f"{hcl:.4f}", f"{hcl - hf:+.4f}",
            f"{(hcl - hf) / scale * 1e3:.1f}",
        )  # fmt: skip
    console.print(table)
    console.print(
        f"virtual clock: max |error| vs formula {max(abs(v - f) for _, _, v, f in vt):.2e} s; HTTP server-reported: "
        f"max |error| {max(abs(hs - hf) for _, _, hs, _, hf in ht):.2e} s; HTTP client-measured adds the wall "
        f"overhead x time scale {scale:g}"
    )

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([c / length for _, c, _, _ in vt], [f for *_, f in vt], "k-", label="formula")
    ax.plot([c / length for _, c, _, _ in vt], [v for _, _, v, _ in vt], "o", label="engine, virtual clock")
    ax.plot([c / length for _, c, _, _, _ in ht], [h for _, _, _, h, _ in ht], "x",
            label=f"HTTP client, time scale {scale:g}")  # fmt: skip
    ax.set_xlabel("cached fraction of the prompt")
    ax.set_ylabel("TTFT (model s)")
    ax.set_title(f"{length}-token prompt, {PRESET}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out / "enginesim_ttft_vs_cached.png")

    seconds = 2.0 if smoke else 10.0
    replicas = 4
    conc = 8 if smoke else 32
    rows = []
    proc, port = start_server(replicas, "tiny-test", 1000.0, ["--num-gpu-blocks", "100000"])
    try:
        ports = [port + i for i in range(replicas)]
        for label, ntok in (("1k-token prompt", 1000), ("12k-token prompt", 12000)):
            prompt = prompt_words(ntok, 7)
            for stream in (False, True):
                server = psutil.Process(proc.pid)
                cpu0, own0 = sum(server.cpu_times()[:2]), time.process_time()
                rps, errs, done, why = asyncio.run(closed_loop(ports, prompt, conc, seconds, stream))
                if why:
                    console.print(f"{label} {'stream' if stream else 'json'}: first error: {why}")
                server_ms = (sum(server.cpu_times()[:2]) - cpu0) / max(1, done) * 1e3
                client_ms = (time.process_time() - own0) / max(1, done) * 1e3
                rows.append((label, "stream" if stream else "json", rps, errs, server_ms, client_ms))
    finally:
        stop_server(proc)
    tt = Table(
        title=f"one server process, {replicas} replicas, {conc} closed-loop clients, {seconds:g} s each"
    )
    cols = ("prompt", "mode", "requests/s", "errors", "server CPU ms/req", "server req/s per core",
            "client CPU ms/req")  # fmt: skip
    for col in cols:
        tt.add_column(col, justify="right")
    for label, mode, rps, errs, server_ms, client_ms in rows:
        tt.add_row(
            label,
            mode,
            f"{rps:.0f}",
            str(errs),
            f"{server_ms:.2f}",
            f"{1e3 / server_ms:.0f}",
            f"{client_ms:.2f}",
        )
    console.print(tt)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([f"{r[0]}\n{r[1]}" for r in rows], [1e3 / r[4] for r in rows])
    ax.set_ylabel("requests/s per server CPU-second")
    ax.set_title("one enginesim process: capacity per core")
    fig.tight_layout()
    fig.savefig(args.out / "enginesim_throughput.png")

    rates = [0.5, 1.0, 1.5, 2.0] if smoke else [0.25, 0.5, 1.0, 1.5, 2.0, 2.25, 2.4]
    curve = load_curve(rates, 60 if smoke else 600)
    lt = Table(
        title=f"latency under load, one engine ({PRESET}), 2000-token prompts, 200 output tokens, no reuse"
    )
    for col in ("arrivals/s", "TTFT p50 s", "TTFT p90 s", "mean ITL ms", "mean running"):
        lt.add_column(col, justify="right")
    for rate, p50, p90, itl, run in curve:
        lt.add_row(f"{rate:g}", f"{p50:.3f}", f"{p90:.3f}", f"{itl * 1e3:.1f}", f"{run:.1f}")
    console.print(lt)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r[0] for r in curve], [r[1] for r in curve], "o-", label="TTFT p50")
    ax.plot([r[0] for r in curve], [r[2] for r in curve], "s-", label="TTFT p90")
    ax2 = ax.twinx()
    ax2.plot([r[0] for r in curve], [r[3] * 1e3 for r in curve], "^--", color="gray", label="mean ITL (ms)")
    ax.set_xlabel("arrivals per second")
    ax.set_ylabel("TTFT (model s)")
    ax2.set_ylabel("ITL (ms)")
    ax.set_yscale("log")
    ax.legend(loc="upper left")
    ax2.legend(loc="lower right")
    ax.set_title(f"one engine, {PRESET}")
    fig.tight_layout()
    fig.savefig(args.out / "enginesim_load.png")

    n = 300 if smoke else 3000
    ts = trace_speed(n)
    st = Table(title=f"virtual clock: first {n} Mooncake requests on 8 engines ({PRESET})")
    for col in (
        "requests",
        "hash s",
        "simulate s",
        "sim requests/s",
        "engine steps",
        "model span s",
        "hit ratio",
    ):
        st.add_column(col, justify="right")
    st.add_row(str(ts["requests"]), f"{ts['hash_s']:.2f}", f"{ts['sim_s']:.2f}", f"{ts['requests'] / ts['sim_s']:.0f}",
               f"{ts['steps']:.0f}", f"{ts['model_span_s']:.0f}", f"{ts['hit_ratio']:.3f}")  # fmt: skip
    console.print(st)
    assert ts["completed"] == ts["requests"]


if __name__ == "__main__":
    main()
