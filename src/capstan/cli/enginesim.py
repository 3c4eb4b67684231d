"""``capstan enginesim``: run simulated vLLM replicas on loopback ports."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path

import typer

from capstan.errors import UserError
from capstan.kvcache import DEFAULT_BLOCK_SIZE  # light: the contract's constants, no numpy

app = typer.Typer(help="vLLM-compatible engine simulator (loopback only).", no_args_is_help=True)


@app.callback()
def _enginesim() -> None:
    """vLLM-compatible engine simulator (loopback only)."""


@app.command("presets")
def presets() -> None:
    """List the model/GPU presets and where their figures come from."""
    from rich.console import Console
    from rich.table import Table

    from capstan.enginesim import get_preset, preset_names

    table = Table("preset", "step ms", "prefill ms/token", "decode ms/seq", "KV blocks", "max seqs", "source")
    for name in preset_names():
        p = get_preset(name)
        lat = p.latency
        table.add_row(
            name,
            f"{lat.step_overhead_s * 1e3:g}",
            f"{lat.prefill_s_per_token * 1e3:g}",
            f"{lat.decode_s_per_seq * 1e3:g}",
            str(p.num_gpu_blocks),
            str(p.max_num_seqs),
            p.source,
        )
    Console().print(table)


@app.command("serve")
def serve(
    replicas: int = typer.Option(1, "--replicas", help="Replicas in this process, on consecutive ports."),
    port: int = typer.Option(8100, "--port", help="HTTP port of the first replica."),
    kv_events_port: int = typer.Option(
        0, "--kv-events-port", help="ZMQ PUB port of the first replica's KV events (0: no KV events)."
    ),
    model: str = typer.Option("sim-model", "--model", help="Model name served (and used in the KV topic)."),
    preset: str = typer.Option("llama-3.1-8b-h100", "--preset", help="Model/GPU preset (see `presets`)."),
    num_gpu_blocks: int | None = typer.Option(None, "--num-gpu-blocks", help="KV capacity in blocks."),
    block_size: int = typer.Option(DEFAULT_BLOCK_SIZE, "--block-size", help="Tokens per KV block."),
    max_num_seqs: int | None = typer.Option(None, "--max-num-seqs", help="Running batch limit."),
    max_num_batched_tokens: int = typer.Option(8192, "--max-num-batched-tokens", help="Tokens per step."),
    max_model_len: int = typer.Option(131072, "--max-model-len", help="Longest prompt + output."),
    time_scale: float = typer.Option(
        1.0, "--time-scale", help="Model seconds per wall second (10: 10x faster)."
    ),
    hash_seed: int = typer.Option(
        0, "--hash-seed", help="Seed of the block-hash chain (vLLM's PYTHONHASHSEED)."
    ),
    tokenizer: Path | None = typer.Option(
        None,
        "--tokenizer",
        help="A real model's tokenizer.json: tokenize with it and hash blocks as vLLM does (default: the "
        "contract's tokenizer and hashes).",
    ),
    tokenizer_config: Path | None = typer.Option(
        None, "--tokenizer-config", help="Its tokenizer_config.json (chat template, special tokens)."
    ),
    chat_template: Path | None = typer.Option(None, "--chat-template", help="A chat template file."),
    prefix_caching_hash_algo: str = typer.Option(
        "sha256",
        "--prefix-caching-hash-algo",
        help="vLLM's block hash with --tokenizer (sha256, sha256_cbor, …).",
    ),
) -> None:
    """Serve simulated vLLM replicas on 127.0.0.1 until interrupted."""
    import math
    from dataclasses import replace

    from capstan.enginesim import ReplicaSpec, get_preset, port_conflict, serve_forever

    if replicas < 1:
        raise UserError(f"--replicas: must be at least 1, got {replicas}")
    if not (math.isfinite(time_scale) and time_scale > 0):
        raise UserError(f"--time-scale: must be a positive number, got {time_scale}")
    if not 0 < port <= port + replicas - 1 < 65536:
        raise UserError(f"--port: {port}..{port + replicas - 1} are not all TCP ports (1-65535)")
    if kv_events_port and not 0 < kv_events_port <= kv_events_port + replicas - 1 < 65536:
        raise UserError(
            f"--kv-events-port: {kv_events_port}..{kv_events_port + replicas - 1} are not all TCP ports (1-65535)"
        )
    if block_size <= 0 or (num_gpu_blocks is not None and num_gpu_blocks <= 0):
        raise UserError("--block-size and --num-gpu-blocks must be positive")
    p = get_preset(preset)
    base = ReplicaSpec(
        model=model,
        latency=p.latency,
        num_gpu_blocks=num_gpu_blocks or p.num_gpu_blocks,
        block_size=block_size,
        max_num_seqs=max_num_seqs or p.max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_model_len=max_model_len,
        time_scale=time_scale,
        hash_seed=hash_seed,
        tokenizer=tokenizer,
        tokenizer_config=tokenizer_config,
        chat_template=chat_template,
        prefix_caching_hash_algo=prefix_caching_hash_algo,
    )
    if tokenizer is not None:
        from capstan.kvcache import HASH_ALGOS, ServedTokenizer

        if prefix_caching_hash_algo not in HASH_ALGOS:
            raise UserError(
                f"--prefix-caching-hash-algo: {prefix_caching_hash_algo!r} is not one of {', '.join(HASH_ALGOS)}"
            )
        ServedTokenizer.from_files(
            tokenizer, tokenizer_config, chat_template
        )  # a bad file: one line, before serving
    elif tokenizer_config is not None or chat_template is not None:
        raise UserError("--tokenizer-config and --chat-template need --tokenizer")
    specs = [
        replace(base, port=port + i, kv_events_port=(kv_events_port + i) if kv_events_port else None)
        for i in range(replicas)
    ]
    conflict = port_conflict(specs)
    if conflict is not None:
        raise UserError(f"--port/--kv-events-port: {conflict}")
    for s in specs:
        kv = f"  KV events tcp://127.0.0.1:{s.kv_events_port}" if s.kv_events_port else ""
        typer.echo(f"replica http://127.0.0.1:{s.port}  model {model}  blocks {s.num_gpu_blocks}{kv}")

    from capstan.runtime import fix_mmap_threshold

    fix_mmap_threshold()  # a long-running server of many connections: see capstan.runtime

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await serve_forever(specs, stop)
        except OSError as exc:
            raise UserError(f"--port/--kv-events-port: cannot bind ({exc.strerror or exc})") from None

    asyncio.run(main())
