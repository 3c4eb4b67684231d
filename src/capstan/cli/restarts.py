"""``capstan restarts``: inspect restart-notification delivery and validate the restarts configuration."""

from __future__ import annotations

import json
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer

from capstan.cli.options import LEASE_DURATION, LEASE_NAMESPACE, PROBE_ADDRESS, probe_port_option
from capstan.errors import UserError

app = typer.Typer(
    help="Restart diagnostics: run the watcher, inspect the outbox, check the configuration.",
    no_args_is_help=True,
)


class State(StrEnum):
    unsent = "unsent"
    pending = "pending"
    dead = "dead"
    sent = "sent"
    all = "all"


class Output(StrEnum):
    table = "table"
    json = "json"


_STORE = typer.Option(
    ...,
    "--store",
    envvar="CAPSTAN_HISTORY_STORE",
    help="SQLite file path or postgresql:// URL of the store holding the outbox.",
)


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds))


@app.command("outbox")
def outbox(
    store: str = _STORE,
    state: State = typer.Option(
        State.unsent, "--state", help="unsent (pending + dead), pending, dead, sent, all."
    ),
    limit: int = typer.Option(200, "--limit", min=1, max=100_000, help="Maximum rows per state."),
    output: Output = typer.Option(Output.table, "--output", "-o", help="table (Rich) or json."),
    show: int | None = typer.Option(
        None,
        "--show",
        metavar="ID",
        help="Print one message in full (any state), e.g. a report that was delivered inside a combined message.",
    ),
) -> None:
    """List notifications waiting in the outbox or dead-lettered, with their last error."""
    from rich.console import Console
    from rich.table import Table

    from capstan.redact import Redactor
    from capstan.store import open_store

    st = open_store(store, create=False)  # a reader: a store that does not exist is an error, not a new file
    if show is not None:
        try:
            item = st.outbox.item(show)
        finally:
            st.close()
        if item is None:
            raise UserError(f"outbox: no message with id {show} in {store}")
        _print_message(item, output)
        return
    try:
        groups: dict[str, list[str | None]] = {"unsent": ["pending", "dead"], "all": [None]}
        states = groups.get(state.value, [state.value])
        items = [item for s in states for item in st.outbox.items(state=s, limit=limit)]
    finally:
        st.close()
    items.sort(key=lambda i: i.id)
    now = time.time()
    if output is Output.json:
        rows = [
            {
                "id": i.id,
                "destination": i.destination,
                "state": i.state,
                "attempts": i.attempts,
                "next_attempt_at": i.next_attempt_at,
                "created_at": i.created_at,
                "last_error": i.last_error,
                "title": i.payload.get("title"),
                "dedupe_key": i.dedupe_key,
            }
            for i in items
        ]
        typer.echo(json.dumps(Redactor().strings(rows), indent=2))
        return
    table = Table(title=f"Outbox ({state.value}): {len(items)} message(s)")
    for column in (
        "id",
        "destination",
        "state",
        "attempts",
        "next attempt (UTC)",
        "age",
        "title",
        "last error",
    ):
        table.add_column(column, overflow="fold")
    for i in items:
        table.add_row(
            str(i.id),
            i.destination,
            i.state,
            str(i.attempts),
            _when(i.next_attempt_at) if i.state == "pending" else "-",
            f"{max(0.0, now - i.created_at):.0f}s",
            str(i.payload.get("title", ""))[:80],
            Redactor().text(i.last_error or ""),
        )
    Console().print(table)


def _print_message(item: Any, output: Output) -> None:
    from capstan.notify import Notice
    from capstan.redact import Redactor

    if output is Output.json:
        typer.echo(
            json.dumps(
                {
                    "id": item.id,
                    "destination": item.destination,
                    "state": item.state,
                    "payload": Redactor().strings(item.payload),
                },
                indent=2,
            )
        )
        return
    notice = Notice.from_json(Redactor().strings(item.payload))
    lines = [
        f"#{item.id} to {item.destination} ({item.state}, {item.attempts} attempt(s))",
        notice.title,
        notice.summary,
        "",
    ]
    lines += [f"{k}: {v}" for k, v in notice.fields]
    for section in notice.sections:
        lines += ["", f"== {section.heading}", section.body]
    if notice.log:
        lines += ["", f"== {notice.log_name} (full)", notice.log]
    if notice.footer:
        lines += ["", notice.footer]
    typer.echo("\n".join(lines))


@app.command("check-config")
def check_config(path: Path = typer.Argument(..., help="The restarts configuration file (YAML).")) -> None:
    """Validate a restarts configuration: regexes, label selector, sink URLs and tokens; one line per problem."""
    from capstan.restarts import load_restarts_config

    config = load_restarts_config(path)
    sinks = ", ".join(f"{s.name} ({s.type})" for s in config.sinks)
    typer.echo(
        f"{path}: OK — cluster {config.cluster_name}; sinks: {sinks}; mute {config.mute_seconds:g}s; "
        f"restart cap {config.restart_cap}"
    )


@app.command("run")
def run(
    config: Path = typer.Option(..., "--config", help="The restarts configuration file (YAML)."),
    kubeconfig: Path | None = typer.Option(
        None,
        "--kubeconfig",
        envvar="KUBECONFIG",
        help="Cluster to watch [default in a pod: the pod's service account].",
    ),
    store: str = _STORE,
    namespace: str | None = typer.Option(None, "--namespace", help="Watch one namespace (default: all)."),
    source: str = typer.Option(
        "default", "--source", help="The cluster's name in the history store (as `capstan record` writes it)."
    ),
    leader_elect: bool = typer.Option(
        False,
        "--leader-elect/--no-leader-elect",
        help="Watch and notify only while holding a Lease: of several replicas on one store, one reports and the "
        "others stand by; a standby takes over within --lease-duration when the leader dies, from the stored "
        "restart counts and outbox.",
    ),
    lease_namespace: str = LEASE_NAMESPACE,
    lease_name: str | None = typer.Option(
        None,
        "--lease-name",
        help="Name of the Lease [default: capstan-restarts-<source>-<8 hex digits of --namespace>].",
    ),
    lease_duration: str = LEASE_DURATION,
    probe_port: int | None = probe_port_option(
        "/healthz, /readyz (store, cluster, first list of pods; a standby is ready) and /metrics (delivery: capstan_notify_*)"
    ),
    probe_address: str = PROBE_ADDRESS,
) -> None:
    """Watch pods and deliver a complete report for every container restart (until Ctrl-C or SIGTERM). A store or
    API server not reachable yet is waited for (not ready, one log line per attempt, backing off to 30 s); a
    configuration that cannot work (a refused password or token, a Lease it may not read) is one line and exit 2.
    With --leader-elect it reports only while it holds the Lease, and exits 1 if it loses it."""
    import asyncio
    import signal

    from prometheus_client import CollectorRegistry

    from capstan.cli.options import (
        check_lease_name,
        check_lease_readable,
        exit_lost_lease,
        parse_lease_duration,
    )
    from capstan.errors import UserError
    from capstan.kube import (
        KubeClient,
        LeaderElection,
        connector,
        in_a_pod,
        scoped_lease_name,
        while_leading,
    )
    from capstan.probes import Check, ClusterCheck, serving_probes, store_check
    from capstan.redact import Redactor
    from capstan.restarts import RestartWatcher, load_restarts_config
    from capstan.runtime import limit_malloc_arenas
    from capstan.startup import ClusterAccess, Dependency, Opening, Startup
    from capstan.store import open_store

    if kubeconfig is None and not in_a_pod():
        raise UserError(
            "--kubeconfig: not given (give it, or set KUBECONFIG; in a pod, the service account is used)"
        )
    lease_s = parse_lease_duration(lease_duration)
    check_lease_name(lease_namespace, "--lease-namespace")
    lease = lease_name or scoped_lease_name("restarts", source, [f"ns={namespace}"] if namespace else [])
    check_lease_name(lease)
    cfg = load_restarts_config(config)
    limit_malloc_arenas()
    lost = False
    sock = None
    if probe_port is not None:
        from capstan.httpserver import bind_listener

        sock = bind_listener(probe_address, probe_port)

    async def main() -> None:
        nonlocal lost
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)

        async def lease_readable(client: KubeClient) -> None:
            await check_lease_readable(client, lease_namespace, lease)

        cluster = ClusterAccess(connector(kubeconfig), lease_readable if leader_elect else None)
        opening = Opening(lambda: open_store(store))
        startup = Startup("capstan restarts run")
        # the kubeconfig (and its credential plugin) first: a configuration that cannot work creates no store
        dependencies = [
            Dependency("cluster", f"cluster {kubeconfig or 'in-cluster'}", cluster),
            Dependency("store", "store", opening),
        ]
        checks: dict[str, Check] = {"store": startup.check("store"), "cluster": startup.check("cluster")}
        registry = CollectorRegistry()
        redactor = [Redactor()]  # the store's keyed one once it is open

        def redact(text: str) -> str:
            return redactor[0].text(text)

        try:
            async with serving_probes(sock, checks, registry=registry, redact=redact):
                if not await startup.reach(dependencies, stop):
                    return  # stopped while waiting
                client, st = cluster.client, opening.value
                assert client is not None and st is not None
                redactor[0] = st.history.redactor()
                watcher = RestartWatcher.over_store(
                    cfg, client, st, source=source, namespace=namespace, registry=registry
                )
                election = (
                    LeaderElection.for_this_process(client, lease, lease_namespace, lease_duration_s=lease_s)
                    if leader_elect
                    else None
                )

                async def first_list() -> str | None:
                    if election is not None and not election.leading.is_set():
                        return None  # a standby watches nothing yet
                    return None if watcher.synced.is_set() else "the first list of pods is not handled yet"

                checks["store"] = store_check(st.database)
                checks["cluster"] = ClusterCheck(connector(kubeconfig))
                checks["pods"] = first_list
                if election is None:
                    await watcher.run(stop)
                    return
                await while_leading(election, stop, watcher.run)
                lost = election.lost.is_set()
        finally:
            await cluster.close()
            if opening.value is not None:
                opening.value.close()

    asyncio.run(main())
    if lost:
        exit_lost_lease(
            "capstan restarts run",
            lease_namespace,
            lease,
            "stopped (the next leader goes on from the stored restart counts and outbox; restart this one to "
            "stand by again)",
        )
