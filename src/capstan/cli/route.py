"""``capstan route``: the cache-aware OpenAI-compatible gateway and its virtual-clock simulator."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import typer

from capstan.errors import UserError

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
        if kubeconfig is None:
            raise UserError("discovery.kubernetes: give --kubeconfig (or set KUBECONFIG)")
        asyncio.run(_check_cluster_access(kubeconfig))
        from capstan.kube import KubeClient

        connect = functools.partial(KubeClient.from_kubeconfig, kubeconfig)
        source = KubernetesEndpointSource(cfg.discovery.kubernetes, connect=connect)
    router = Router(cfg, source, upstream=upstream_for(cfg.proxy))
    fix_mmap_threshold()  # a long-running server of many connections: see capstan.runtime
    uvicorn.Server(router.server_config(host, port)).run()


async def _check_cluster_access(kubeconfig: Path) -> None:
    """Open the cluster client once before serving, so a missing or broken kubeconfig or a failing credential
    plugin is one line here rather than a traceback from the server's start-up."""
    from capstan.kube import KubeClient

    client = await KubeClient.from_kubeconfig(kubeconfig)
    await client.close()


@app.command("check")
def check(config: Path = typer.Argument(..., help="Router YAML to validate.")) -> None:
    """Validate a router configuration file: everything `route serve` would reject (unknown keys and plugin
    types, endpoint URLs, duplicate names, roles, KV-event addresses, no endpoints)."""
    from capstan.route import RouteConfig

    cfg = _load(config, None, None)
    assert isinstance(cfg, RouteConfig)
    typer.echo(
        f"{config}: ok ({len(cfg.endpoints)} endpoints, prefix index {cfg.scheduler.prefix.kind}, "
        f"scorers {', '.join(f'{s.type}×{s.weight:g}' for s in cfg.scheduler.scorers)}, "
        f"picker {cfg.scheduler.picker.type})"
    )


@app.command("simulate")
def simulate_cmd(
    trace: Path = typer.Option(..., "--trace", help="Mooncake-format JSONL trace."),
    config: list[Path] | None = typer.Option(
        None, "--config", "-c", help="Router YAML whose scheduler section is simulated (repeatable)."
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
    from rich.table import Table

    from capstan.config import load_file
    from capstan.enginesim import EngineConfig, get_preset
    from capstan.kvcache import DEFAULT_BLOCK_SIZE
    from capstan.percentile import percentile
    from capstan.route import (
        RouteConfig,
        SchedulerConfig,
        mooncake_requests,
        pooled_cache_reference,
        simulate,
    )

    if time_scale <= 0:
        raise UserError("--time-scale must be positive")
    p = get_preset(preset)
    blocks = p.num_gpu_blocks if kv_tokens is None else max(1, kv_tokens // DEFAULT_BLOCK_SIZE)
    engine = EngineConfig(latency=p.latency, num_gpu_blocks=blocks, max_num_seqs=p.max_num_seqs)
    reqs = mooncake_requests(trace, limit=limit, time_scale=time_scale)
    if not reqs:
        raise UserError(f"{trace}: no requests")
    policies: list[tuple[str, SchedulerConfig]] = (
        [(str(c), load_file(RouteConfig, c).scheduler) for c in config]
        if config
        else [("default", SchedulerConfig())]
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
    pooled = pooled_cache_reference(reqs, blocks * replicas).hit_ratio
    bound = pooled_cache_reference(reqs, None).hit_ratio
    results = [(name, simulate(reqs, sched_cfg, engine, replicas, name=name)) for name, sched_cfg in policies]
    rr = results[-1][1] if baseline else None
    table = Table(
        title=f"{len(reqs)} requests, {replicas} × {blocks * DEFAULT_BLOCK_SIZE:,} KV tokens, preset {preset}"
    )
    cols = ["policy", "hit", "÷ pooled", "TTFT p50", "TTFT p90", "prefill max/mean", "GPU-s/req"]
    for col in cols + (["÷ round-robin"] if rr else []):
        if col == "policy":
            table.add_column(col, no_wrap=True)
        else:
            table.add_column(col, justify="right")
    for name, r in results:
        row = [
            name,
            f"{r.hit_ratio:.3f}",
            f"{r.hit_ratio / pooled:.2f}" if pooled else "-",
            f"{percentile(r.ttft, 50):.2f}s",
            f"{percentile(r.ttft, 90):.2f}s",
            f"{r.prefill_imbalance:.2f}",
            f"{r.gpu_seconds_per_request:.2f}",
        ]
        if rr is not None:
            gpu_rr = rr.gpu_seconds_per_request
            row.append(f"{r.gpu_seconds_per_request / gpu_rr:.2f}×" if gpu_rr else "-")
        table.add_row(*row)
    if baseline:
        # what one cache shared by every replica (same total size, LRU in arrival order) would reuse
        table.add_row("pooled reference", f"{pooled:.3f}", "1.00", *(["—"] * (len(cols) - 3 + 1)))
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # readable in logs and pipes, where Rich would assume 80 columns
    console.print(table)
    console.print(f"pooled-cache reference {pooled:.3f}, infinite-cache bound {bound:.3f}")
