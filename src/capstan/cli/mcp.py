"""``capstan mcp serve|tools``: the read-only MCP server for AI agents (docs/mcp.md)."""

from __future__ import annotations

import asyncio
import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from capstan.cli.options import PROBE_ADDRESS, probe_port_option
from capstan.errors import UserError

if TYPE_CHECKING:
    import socket

    from capstan.mcp import HttpSettings
    from capstan.store import Store

app = typer.Typer(help="Read-only, secret-safe cluster context for AI agents over MCP.", no_args_is_help=True)

TOKEN_ENV = "CAPSTAN_MCP_TOKEN"


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


@app.command()
def serve(
    transport: Transport = typer.Option(Transport.stdio, "--transport", help="stdio, or streamable HTTP."),
    kubeconfig: Path | None = typer.Option(
        None,
        "--kubeconfig",
        envvar="KUBECONFIG",
        help="Cluster to read (default: the local sandbox from `capstan sandbox up`).",
    ),
    store: str | None = typer.Option(
        None,
        "--store",
        envvar="CAPSTAN_HISTORY_STORE",
        help="History store (SQLite path or postgresql:// URL) for changes, timeline, restarts, engine events.",
    ),
    source: str | None = typer.Option(None, "--source", help="The recorder's source name in the store."),
    namespace: str | None = typer.Option(
        None, "--namespace", "-n", help="Read this namespace only (default: every namespace)."
    ),
    window: float = typer.Option(
        3600.0, "--window", min=1.0, help="Seconds of recorded history findings cite."
    ),
    max_age: float = typer.Option(
        10.0,
        "--max-age",
        min=0.0,
        help="Seconds a cluster read is reused across calls (0: read on every call).",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="HTTP: address to listen on."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="HTTP: port (0 picks a free one)."),
    token_file: Path | None = typer.Option(
        None, "--token-file", help=f"HTTP: bearer token file (or {TOKEN_ENV}); required off loopback."
    ),
    allowed_host: list[str] = typer.Option(
        [], "--allowed-host", help="HTTP: another Host header to accept (e.g. the Service's name:port)."
    ),
    allowed_origin: list[str] = typer.Option([], "--allowed-origin", help="HTTP: another Origin to accept."),
    request_timeout: float = typer.Option(
        30.0, "--request-timeout", min=0.1, help="HTTP: seconds per request."
    ),
    probe_port: int | None = probe_port_option(
        "/healthz and /readyz (cluster, and the store when one is given), without a token,"
    ),
    probe_address: str = PROBE_ADDRESS,
) -> None:
    """Serve the MCP tools over stdio (for an agent that starts the server) or streamable HTTP (stateless,
    http://HOST:PORT/mcp). Nothing is written to the cluster or the store. Over HTTP, a store or API server not
    reachable yet is waited for (not ready, one log line per attempt); over stdio, a store it cannot open is one
    line and exit 2 at once, as is, with either, a configuration that cannot work."""
    from capstan.cli._cluster import cluster_kubeconfig
    from capstan.httpserver import is_loopback, load_token
    from capstan.mcp import HttpSettings

    path = cluster_kubeconfig(kubeconfig)
    settings = None
    if transport is Transport.http:
        token = load_token(token_file, os.environ.get(TOKEN_ENV), env_name=TOKEN_ENV)
        if token is None and not is_loopback(host):
            raise UserError(
                f"mcp serve: --host {host!r} is not a loopback address: give a bearer token "
                f"(--token-file FILE or {TOKEN_ENV}), or listen on 127.0.0.1"
            )
        settings = HttpSettings(
            host=host,
            port=port,
            token=token,
            allowed_hosts=tuple(allowed_host),
            allowed_origins=tuple(allowed_origin),
            request_timeout_s=request_timeout,
        )
    probe = None
    if probe_port is not None:
        from capstan.httpserver import bind_listener

        probe = bind_listener(probe_address, probe_port)
    asyncio.run(
        _serve(
            path,
            store=store,
            source=source,
            namespace=namespace,
            window=window,
            max_age=max_age,
            http=settings,
            probe=probe,
        )
    )


async def _serve(
    kubeconfig: Path | None,
    *,
    store: str | None,
    source: str | None,
    namespace: str | None,
    window: float,
    max_age: float,
    http: HttpSettings | None,
    probe: socket.socket | None = None,
) -> None:
    import signal

    from capstan.kube import connector
    from capstan.mcp import ClusterLogs, LiveSource, create_server
    from capstan.probes import Check, ClusterCheck, serving_probes, store_check
    from capstan.redact import Redactor
    from capstan.startup import MAX_ROUNDS, ClusterAccess, Dependency, Opening, Startup

    # Over HTTP it is a server under a kubelet: it waits, not ready, for an unreachable store or API server. Over
    # stdio an agent that started it waits on its first answer: a store it cannot open is one line, at once.
    wait = http is not None
    startup = Startup("capstan mcp serve", max_rounds=MAX_ROUNDS if wait else 1)
    cluster = ClusterAccess(connector(kubeconfig))
    dependencies = [Dependency("cluster", f"cluster {kubeconfig or 'in-cluster'}", cluster)] if wait else []
    opening: Opening[Store] | None = None
    if store is not None:
        from capstan.store import open_store

        location = store
        opening = Opening(lambda: open_store(location, create=False))
        dependencies.append(Dependency("store", "store", opening))
    checks: dict[str, Check] = {
        "cluster": startup.check("cluster") if wait else ClusterCheck(connector(kubeconfig))
    }
    if opening is not None:
        checks["store"] = startup.check("store")
    redactor = Redactor()
    current = [redactor]  # the store's keyed redactor once it is open

    def redact(text: str) -> str:
        return current[0].text(text)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # during the wait only: uvicorn handles them once it serves
        loop.add_signal_handler(sig, stop.set)
    try:
        async with serving_probes(probe, checks, redact=redact):
            try:
                if not await startup.reach(dependencies, stop):
                    return  # stopped while waiting
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
            history = None
            if opening is not None:
                assert opening.value is not None
                history = opening.value.history
                redactor = current[0] = history.redactor(create_key=False)
                checks["store"] = store_check(opening.value.database)
            checks["cluster"] = ClusterCheck(connector(kubeconfig))
            client = cluster.client if cluster.client is not None else await connector(kubeconfig)()
            cluster.client = None
            async with client:
                live = LiveSource(
                    client,
                    redactor=redactor,
                    history=history,
                    namespace=namespace,
                    source=source,
                    window_seconds=window,
                    max_age_s=max_age,
                )
                server = create_server(live, ClusterLogs(client), redactor=redactor)
                if http is None:
                    await server.run_stdio_async()
                else:
                    await _serve_http(server, http)
    finally:
        await cluster.close()
        if opening is not None and opening.value is not None:
            opening.value.close()


async def _serve_http(server: Any, settings: HttpSettings) -> None:
    import uvicorn

    from capstan.httpserver import bind_listener, server_config
    from capstan.mcp import http_app

    sock = bind_listener(settings.host, settings.port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    auth = "bearer token required" if settings.token else "loopback only, no token"
    typer.echo(f"MCP server listening on http://{shown}:{bound_port}/mcp ({auth})", err=True)
    config = server_config(
        http_app(server, settings), lifespan="on", server_header=False, limit_concurrency=64
    )
    try:
        await uvicorn.Server(config).serve(sockets=[sock])
    finally:
        sock.close()


@app.command()
def tools() -> None:
    """List the tools with their token budgets (default and maximum) and what they read."""
    from rich.console import Console
    from rich.table import Table

    from capstan.mcp import TOOLS

    table = Table("tool", "budget", "max", "reads", "what it answers")
    for spec in TOOLS:
        table.add_row(
            spec.name,
            str(spec.budget.default),
            str(spec.budget.maximum),
            "history" if spec.history else ", ".join(spec.reads) or "snapshot",
            spec.title,
        )
    Console().print(table)
