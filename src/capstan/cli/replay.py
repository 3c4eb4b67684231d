"""``capstan replay``: make request files from traces or generators, and replay them against an OpenAI server."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import typer

from capstan.errors import UserError

app = typer.Typer(help="Workloads (request files) and the HTTP replayer.", no_args_is_help=True)


@app.callback()
def _replay() -> None:
    """Workloads (request files) and the HTTP replayer."""


def _write(out: Path, requests: list[Any]) -> None:
    from capstan.replay import write_requests

    try:
        n = write_requests(out, requests)
    except OSError as exc:
        raise UserError(f"--out: cannot write {out} ({exc.strerror})") from None
    typer.echo(f"wrote {n} requests to {out}")


@app.command("mooncake")
def mooncake(
    trace: Path = typer.Argument(
        ..., help="Mooncake JSONL trace (timestamp, input_length, output_length, hash_ids)."
    ),
    out: Path = typer.Option(..., "--out", help="Request file to write."),
    model: str = typer.Option("sim-model", "--model"),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N requests."),
    max_output_tokens: int | None = typer.Option(None, "--max-output-tokens", help="Cap output lengths."),
    speedup: float = typer.Option(
        1.0, "--speedup", help="Compress arrival times by this factor (more load)."
    ),
) -> None:
    """Convert a Mooncake trace into a request file (prompts as compact references to the trace's text)."""
    from capstan.replay import mooncake_requests

    if speedup <= 0:
        raise UserError(f"--speedup: must be positive, got {speedup}")
    reqs = list(
        mooncake_requests(
            trace, model=model, limit=limit, max_output_tokens=max_output_tokens, time_scale=speedup
        )
    )
    _write(out, reqs)


@app.command("agentic")
def agentic(
    out: Path = typer.Option(..., "--out", help="Request file to write."),
    config: Path | None = typer.Option(None, "--config", help="YAML with AgenticConfig fields (see docs)."),
    sessions: int | None = typer.Option(None, "--sessions"),
    seed: int | None = typer.Option(None, "--seed"),
    model: str | None = typer.Option(None, "--model"),
) -> None:
    """Generate synthetic agent sessions (shared system/tool prompts, growing turns, think times)."""
    from capstan.config import load_file, load_model
    from capstan.replay import AgenticConfig, agentic_requests

    cfg = load_file(AgenticConfig, config) if config else load_model(AgenticConfig, {}, "agentic defaults")
    overrides = {"sessions": sessions, "seed": seed, "model": model}
    cfg = load_model(
        AgenticConfig,
        {**cfg.model_dump(), **{k: v for k, v in overrides.items() if v is not None}},
        "--sessions/--seed/--model",
    )
    _write(out, agentic_requests(cfg))


@app.command("shared-prefix")
def shared_prefix(
    out: Path = typer.Option(..., "--out", help="Request file to write."),
    config: Path | None = typer.Option(
        None, "--config", help="YAML with SharedPrefixConfig fields (see docs)."
    ),
    groups: int | None = typer.Option(None, "--groups"),
    prompts_per_group: int | None = typer.Option(None, "--prompts-per-group"),
    rate: float | None = typer.Option(None, "--rate", help="Requests per second (0: all at once)."),
    seed: int | None = typer.Option(None, "--seed"),
    model: str | None = typer.Option(None, "--model"),
) -> None:
    """Generate llm-d-benchmark-like shared-prefix requests (groups x prompts)."""
    from capstan.config import load_file, load_model
    from capstan.replay import SharedPrefixConfig, shared_prefix_requests

    cfg = load_file(SharedPrefixConfig, config) if config else load_model(SharedPrefixConfig, {}, "defaults")
    overrides = {
        "groups": groups,
        "prompts_per_group": prompts_per_group,
        "rate": rate,
        "seed": seed,
        "model": model,
    }
    cfg = load_model(
        SharedPrefixConfig,
        {**cfg.model_dump(), **{k: v for k, v in overrides.items() if v is not None}},
        "--groups/--prompts-per-group/--rate/--seed/--model",
    )
    _write(out, shared_prefix_requests(cfg))


def _fmt(v: float) -> str:
    return "-" if isinstance(v, float) and math.isnan(v) else f"{v:.4g}"


@app.command("run")
def run(
    requests_file: Path = typer.Argument(..., help="Request file (JSONL; see docs/enginesim.md)."),
    target: str = typer.Option(..., "--target", help="Base URL of the OpenAI server (router or replica)."),
    backend: list[str] | None = typer.Option(
        None, "--backend", help="Backend base URL whose /metrics counters are read at the end (repeatable)."
    ),
    time_scale: float = typer.Option(1.0, "--time-scale", help="Same factor as the simulated backends use."),
    concurrency: int = typer.Option(256, "--concurrency", help="Most requests in flight."),
    model: str | None = typer.Option(None, "--model", help="Override the body's model."),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N lines."),
    max_duration: float | None = typer.Option(
        None, "--max-duration", help="Stop after this many wall seconds."
    ),
    results: Path | None = typer.Option(None, "--results", help="Write per-request results (JSONL) here."),
    no_stream: bool = typer.Option(False, "--no-stream", help="Do not stream (TTFT then equals e2e)."),
) -> None:
    """Replay a request file on schedule; print TTFT/e2e percentiles, hit ratios and backend counters."""
    from rich.console import Console
    from rich.table import Table

    from capstan.replay import ReplayConfig, read_requests, replay, result_rows

    if not target.startswith(("http://127.0.0.1", "http://localhost")):
        raise UserError(f"--target: only loopback targets are allowed here, got {target!r}")
    if time_scale <= 0 or concurrency < 1:
        raise UserError("--time-scale must be positive and --concurrency at least 1")
    reqs = read_requests(requests_file, limit=limit)
    cfg = ReplayConfig(
        target=target,
        time_scale=time_scale,
        max_concurrency=concurrency,
        model=model,
        stream=not no_stream,
        max_duration_s=max_duration,
        backends=tuple(backend or ()),
    )
    report = asyncio.run(replay(reqs, cfg))
    if results is not None:
        with results.open("w", encoding="utf-8") as fh:
            for row in result_rows(report):
                fh.write(json.dumps(row) + "\n")
    console = Console()
    table = Table("figure", "value", title=f"replay of {requests_file.name} (model seconds)")
    for key, value in report.summary.items():
        table.add_row(key, _fmt(float(value)))
    table.add_row("wall_seconds", _fmt(report.wall_seconds))
    console.print(table)
    if report.backends:
        bt = Table("backend", "queries", "hits", "hit ratio", "GPU busy s", "prefill tokens", "error")
        for b in report.backends:
            ratio = b.prefix_cache_hits / b.prefix_cache_queries if b.prefix_cache_queries else math.nan
            bt.add_row(
                b.url, f"{b.prefix_cache_queries:.0f}", f"{b.prefix_cache_hits:.0f}", _fmt(ratio),
                _fmt(b.gpu_busy_seconds), f"{b.prefill_tokens_computed:.0f}", b.error or "",
            )  # fmt: skip
        console.print(bt)
    errors = [r for r in report.results if not r.ok]
    if errors:
        console.print(f"{len(errors)} request(s) failed; first: {errors[0].id}: {errors[0].error}")
