"""``capstan route``: the cache-aware OpenAI-compatible gateway and its virtual-clock simulator."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from capstan.errors import UserError

if TYPE_CHECKING:
    from capstan.kube import KubeConnect

app = typer.Typer(help="Cache-aware OpenAI-compatible routing.", no_args_is_help=True)


@app.callback()
def _route() -> None:
    """Cache-aware OpenAI-compatible routing."""


def _load(config: Path | None, endpoints: list[str] | None, model: str | None) -> object:
    """The configuration ``route serve`` runs with (``--endpoint`` replaces its endpoints), checked as
    :func:`capstan.route.serving_problem` checks it; every problem is one line naming the file."""
    from capstan.config import load_file, load_model
    from capstan.route import RouteConfig, serving_problem

    cfg = load_file(RouteConfig, config) if config is not None else RouteConfig()
    where = str(config) if config is not None else "configuration"
    if endpoints:
        items = [
            {"name": f"e{i}", "url": spec, "models": [model] if model else []}
            for i, spec in enumerate(endpoints)
        ]
        data = {**cfg.model_dump(exclude={"endpoints", "discovery"}), "endpoints": items}
        cfg = load_model(RouteConfig, data, "--endpoint")
        where = "--endpoint"
    problem = serving_problem(cfg)
    if problem is not None:
        raise UserError(f"{where}: {problem}")
    return cfg


@app.command("serve")
def serve(
    config: Path | None = typer.Option(None, "--config", "-c", help="Router YAML (see docs/route.md)."),
    endpoint: list[str] | None = typer.Option(
        None, "--endpoint", help="Upstream base URL (repeatable); replaces the config's endpoints."
    ),
    model: str | None = typer.Option(None, "--model", help="Model the --endpoint upstreams serve."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", envvar="KUBECONFIG", help="Cluster for 'discovery.kubernetes' (serving pods)."
    ),
) -> None:
    """Run the gateway: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics."""
    import uvicorn

    from capstan.route import KubernetesEndpointSource, RouteConfig, Router, upstream_for
    from capstan.runtime import fix_mmap_threshold

    if not 0 < port < 65536:
        raise UserError(f"--port: {port} is not a TCP port")
    cfg = _load(config, endpoint, model)
    assert isinstance(cfg, RouteConfig)
    source = None
    if cfg.discovery is not None:
        from capstan.kube import connector, in_a_pod

        if kubeconfig is None and not in_a_pod():
            raise UserError(
                "discovery.kubernetes: give --kubeconfig (or set KUBECONFIG; in a pod, its service account is used)"
            )
        connect = connector(kubeconfig)
        asyncio.run(_check_cluster_access(connect))
        source = KubernetesEndpointSource(cfg.discovery.kubernetes, connect=connect)
    router = Router(cfg, source, upstream=upstream_for(cfg.proxy))
    fix_mmap_threshold()  # a long-running server of many connections: see capstan.runtime
    uvicorn.Server(router.server_config(host, port)).run()


async def _check_cluster_access(connect: KubeConnect) -> None:
    """Open the cluster client once before serving, so a missing or broken kubeconfig, a failing credential plugin
    or a pod without its service account's files is one line here rather than a traceback from the server's
    start-up."""
    client = await connect()
    await client.close()


@app.command("check")
def check(config: Path = typer.Argument(..., help="Router YAML to validate.")) -> None:
    """Validate a router configuration file: everything `route serve` would reject (unknown keys and plugin
    types, endpoint URLs, duplicate names, roles, KV-event addresses, no endpoints)."""
    from capstan.route import RouteConfig, served_models

    cfg = _load(config, None, None)
    assert isinstance(cfg, RouteConfig)
    # each served model's tokenizer and chat template load (a bad file: one line naming it)
    served_models(cfg)
    models = f", {len(cfg.models)} served models" if cfg.models else ""
    typer.echo(
        f"{config}: ok ({len(cfg.endpoints)} endpoints{models}, prefix index {cfg.scheduler.prefix.kind}, "
        f"scorers {', '.join(f'{s.type}×{s.weight:g}' for s in cfg.scheduler.scorers)}, "
        f"picker {cfg.scheduler.picker.type})"
    )


def _policy_names(paths: list[Path], reserved: set[str]) -> list[str]:
    """Shortest names telling the configurations apart: each file's stem, else as much more of its path as tells
    it from the others (never one of ``reserved``, the baselines' rows); the same file given twice is numbered."""

    def tail(path: Path, depth: int) -> str:
        return "/".join([*path.parts[-depth:-1], path.stem])

    names = []
    for i, path in enumerate(paths):
        name = tail(path, len(path.parts))
        for depth in range(1, len(path.parts) + 1):  # bounded by the path's length
            candidate = tail(path, depth)
            others = {tail(q, depth) for j, q in enumerate(paths) if j != i}
            if candidate not in reserved and candidate not in others:
                name = candidate
                break
        names.append(name)
    if len(set(names)) < len(names) or set(names) & reserved:
        return [f"{path.stem} #{i + 1}" for i, path in enumerate(paths)]
    return names


@app.command("simulate")
def simulate_cmd(
    trace: Path = typer.Option(..., "--trace", help="Mooncake-format JSONL trace."),
    config: list[Path] | None = typer.Option(
        None,
        "--config",
        "-c",
        help="Router YAML whose scheduler section is simulated (repeatable). Without it: Capstan's recommended "
        "scheduler (precise prefix index, scorers prefix 3 + prefill-cost 1; docs/route.md, Tuning).",
    ),
    replicas: int = typer.Option(8, "--replicas", min=1, max=256),
    preset: str = typer.Option("llama-3.1-8b-h100", "--preset", help="Engine preset (capstan enginesim)."),
    kv_tokens: int | None = typer.Option(None, "--kv-tokens", help="KV capacity per replica in tokens."),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N requests."),
    time_scale: float = typer.Option(1.0, "--time-scale", help="Divide arrival times (> 1: more load)."),
    baseline: bool = typer.Option(
        True,
        "--baseline/--no-baseline",
        help="Also replay round-robin (no prefix index) and show the pooled-cache reference, to compare with.",
    ),
) -> None:
    """Replay a trace through the scheduler and simulated engines on a virtual clock; print a table."""
    from rich.console import Console

    from capstan.config import load_file
    from capstan.enginesim import EngineConfig, get_preset
    from capstan.kvcache import DEFAULT_BLOCK_SIZE
    from capstan.percentile import percentile
    from capstan.route import (
        RouteConfig,
        SchedulerConfig,
        SimResult,
        mooncake_requests,
        pooled_cache_reference,
        recommended_scheduler,
        simulate,
    )

    if time_scale <= 0:
        raise UserError("--time-scale must be positive")
    if kv_tokens is not None and kv_tokens < DEFAULT_BLOCK_SIZE:
        raise UserError(f"--kv-tokens {kv_tokens}: must be at least {DEFAULT_BLOCK_SIZE} (one KV block)")
    p = get_preset(preset)
    blocks = p.num_gpu_blocks if kv_tokens is None else kv_tokens // DEFAULT_BLOCK_SIZE
    engine = EngineConfig(latency=p.latency, num_gpu_blocks=blocks, max_num_seqs=p.max_num_seqs)
    reqs = mooncake_requests(trace, limit=limit, time_scale=time_scale)
    if not reqs:
        raise UserError(f"{trace}: no requests")
    reserved = {"round-robin", "pooled reference"}
    policies: list[tuple[str, SchedulerConfig]] = (
        list(
            zip(
                _policy_names(config, reserved),
                [load_file(RouteConfig, c).scheduler for c in config],
                strict=True,
            )
        )
        if config
        else [("recommended", recommended_scheduler())]
    )
    if baseline:
        policies.append(
            (
                "round-robin",
                SchedulerConfig.model_validate(
                    {"prefix": {"kind": "none"}, "picker": {"type": "round-robin"}}
                ),
            )
        )
    ref = pooled_cache_reference(reqs, blocks * replicas, engine=engine)
    pooled = ref.hit_ratio
    bound = pooled_cache_reference(reqs, None, engine=engine).hit_ratio
    results = [(name, simulate(reqs, sched_cfg, engine, replicas, name=name)) for name, sched_cfg in policies]
    rr = results[-1][1] if baseline else None
    cols = ["policy", "hit", "÷ pooled", "TTFT p50", "TTFT p90", "prefill max/mean"]
    cols += ["prefill ÷ RR", "GPU-s ÷ RR"] if rr is not None else ["GPU-s /req"]
    cols += ["rejected"]

    def prefill(r: SimResult) -> int:
        return sum(x.prefill_tokens for x in r.replicas)

    rows: list[list[str]] = []
    for name, r in results:
        row = [
            name,
            f"{r.hit_ratio:.3f}",
            f"{r.hit_ratio / pooled:.2f}" if pooled else "-",
            f"{percentile(r.ttft, 50):.2f}",
            f"{percentile(r.ttft, 90):.2f}",
            f"{r.prefill_imbalance:.2f}",
        ]
        if rr is not None:
            row.append(f"{prefill(r) / prefill(rr):.2f}" if prefill(rr) else "-")
            gpu_rr = rr.gpu_seconds_per_request
            row.append(f"{r.gpu_seconds_per_request / gpu_rr:.2f}" if gpu_rr else "-")
        else:
            row.append(f"{r.gpu_seconds_per_request:.2f}")
        row.append(f"{r.rejected:,}")
        rows.append(row)
    if baseline:
        # what one cache shared by every replica (same total size, LRU in arrival order) would reuse
        rows.append(
            ["pooled reference", f"{pooled:.3f}", "1.00", *(["—"] * (len(cols) - 4)), f"{ref.rejected:,}"]
        )
    console = Console()
    table = _sim_table(
        f"{trace.name}: {len(reqs):,} requests, {replicas} × {blocks * DEFAULT_BLOCK_SIZE:,} KV tokens, "
        f"preset {preset}",
        "TTFT in model seconds; prefill max/mean: the busiest replica's prefill work over the mean"
        + ("; ÷ RR: against round-robin" if rr is not None else "")
        + "; rejected: requests the engines refuse",
        cols,
        rows,
        console.width,
    )
    console.print(table)
    console.print(f"pooled-cache reference {pooled:.3f}, infinite-cache bound {bound:.3f}")
    if ref.rejected:
        console.print(
            f"{ref.rejected:,} of {len(reqs):,} requests are longer than the context ({engine.max_model_len:,} "
            f"tokens) or than one replica's cache: the engines reject them, the references leave them out"
        )


def _sim_table(title: str, caption: str, cols: list[str], rows: list[list[str]], width: int) -> object:
    """The simulation's table. NOTE: fits ``width`` (80: Rich's width for pipes and logs) with policy names of up to
    19 characters on one line: each number column exactly as wide as its longest value or header word (headers
    wrap between words), no cell padding, units in the headers and the caption. A policy name is never cut: a longer
    one is folded onto more lines of its cell."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, caption=caption, box=box.HEAVY_HEAD, padding=(0, 0))
    widths = [
        max([len(w) for w in col.split()] + [len(row[i]) for row in rows]) for i, col in enumerate(cols)
    ]
    room = width - sum(widths[1:]) - (len(cols) + 1)  # what the numbers and the borders leave for the names
    table.add_column(cols[0], width=max(8, min(widths[0], room)), overflow="fold")
    for col, w in zip(cols[1:], widths[1:], strict=True):
        table.add_column(col, justify="right", width=w)
    for row in rows:
        table.add_row(*row)
    return table
