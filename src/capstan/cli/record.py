"""``capstan record``: run the recorder (cluster objects and Events, Redis/Valkey engine logs) from a config file."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from capstan.cli.options import LEASE_DURATION, LEASE_NAMESPACE, PROBE_ADDRESS, probe_port_option

if TYPE_CHECKING:
    import socket

    from capstan.kube import KubeConnect
    from capstan.record import Recorder, RecorderConfig

_Lease = tuple[str, str, float]  # namespace, name, duration in seconds

# NOTE: capstan.record (the store, Redis, the cluster client) is imported inside the command, so `--help` and
# usage errors answer without loading it.

app = typer.Typer(
    help="Record cluster changes, Events and engine logs durably into the history store.",
    invoke_without_command=True,
)


@app.callback()
def record(
    config: Path = typer.Option(..., "--config", "-c", help="Recorder configuration YAML."),
    once: bool = typer.Option(False, "--once", help="Poll every target once, print the result and exit."),
    store: str | None = typer.Option(
        None,
        "--store",
        envvar="CAPSTAN_HISTORY_STORE",
        help="History store (SQLite path or postgresql:// URL); replaces the file's store: (in a pod: from a Secret).",
    ),
    kubeconfig: Path | None = typer.Option(
        None,
        "--kubeconfig",
        help="Record this cluster (overrides kubernetes.kubeconfig; enables the section).",
    ),
    leader_elect: bool = typer.Option(
        False,
        "--leader-elect/--no-leader-elect",
        help="Record only while holding a Lease in the recorded cluster: of several replicas of one recorder, one "
        "records and the others stand by; a standby takes over within --lease-duration when the leader dies, "
        "resuming from the stored cursors.",
    ),
    lease_namespace: str = LEASE_NAMESPACE,
    lease_name: str | None = typer.Option(
        None,
        "--lease-name",
        help="Name of the Lease [default: capstan-record-<source>-<8 hex digits of what the recorder covers>, one "
        "per shard].",
    ),
    lease_duration: str = LEASE_DURATION,
    probe_port: int | None = probe_port_option(
        "/healthz, /readyz (store, cluster, first lists; a standby is ready) and /metrics"
    ),
    probe_address: str = PROBE_ADDRESS,
) -> None:
    """Run the recorder until SIGINT/SIGTERM; a failing target is retried, a failing store write stops it (exit 1).
    A store or API server not reachable yet (refused, no DNS yet, a timeout, a 5xx, PostgreSQL starting up) is
    waited for: /readyz says so, one log line per attempt, retried after 0.5 s doubling to 30 s. A configuration
    that cannot work (the file, the kubeconfig, a refused password or token, a Lease it may not read) is one line and
    exit 2 before anything starts. With --leader-elect it records only while it holds the Lease, and exits 1 if it
    loses it."""
    from capstan.cli.options import check_lease_name, exit_lost_lease, parse_lease_duration
    from capstan.errors import UserError
    from capstan.kube import connector, in_a_pod
    from capstan.record import KubernetesConfig, Recorder, load_recorder_config
    from capstan.store import StoreWriteError

    lease_s = parse_lease_duration(lease_duration)
    if lease_name is not None:
        check_lease_name(lease_name)
    check_lease_name(lease_namespace, "--lease-namespace")
    cfg = load_recorder_config(config, store=store)
    if kubeconfig is not None:
        cfg.kubernetes = (cfg.kubernetes or KubernetesConfig()).model_copy(update={"kubeconfig": kubeconfig})
    lease = None
    if leader_elect:
        if once:
            raise UserError("--leader-elect: not with --once (a single poll has nothing to hand over)")
        if cfg.kubernetes is None:
            raise UserError(
                f"{config}: --leader-elect: the Lease lives in the recorded cluster; this configuration records "
                "none (add a kubernetes: section, or give --kubeconfig)"
            )
        lease = (lease_namespace, lease_name or cfg.lease_name(), lease_s)
    kube_connect = None
    if cfg.kubernetes is not None:
        if cfg.kubernetes.kubeconfig is None and not in_a_pod():
            raise UserError(
                f"{config}: kubernetes.kubeconfig: not set (set it, or give --kubeconfig; in a pod, the pod's "
                "service account is used)"
            )
        # each run of the collector opens its own client inside its event loop (capstan.record.KubeCollector)
        kube_connect = connector(cfg.kubernetes.kubeconfig)
    if once:
        if kube_connect is not None:
            asyncio.run(_open_cluster_client(kube_connect))
        _record_once(Recorder(cfg, kube_connect=kube_connect))
        return
    from capstan.runtime import shorten_gil_switch_interval

    shorten_gil_switch_interval()  # the writer thread gets the GIL back soon after each database answer
    sock = None
    if probe_port is not None:
        from capstan.httpserver import bind_listener

        sock = bind_listener(probe_address, probe_port)
    try:
        lost = asyncio.run(_run(cfg, kube_connect, lease, sock))
    except StoreWriteError as exc:
        Console(stderr=True).print(f"capstan record: history store write failed, recorder stopped: {exc}")
        raise typer.Exit(1) from None
    if lost and lease is not None:
        namespace, name, _ = lease
        exit_lost_lease(
            "capstan record",
            namespace,
            name,
            "stopped recording (the next leader resumes from the stored cursors; restart this one to stand by "
            "again)",
        )


def _record_once(recorder: Recorder) -> None:
    """Poll every target once and print one line per target (exit 1 when any failed)."""
    try:
        results = recorder.poll_redis_once()
        if recorder.kubernetes is not None:
            results[recorder.kubernetes.name] = asyncio.run(recorder.kubernetes.record_once())
        console = Console()
        for name, error in results.items():
            # an error line quotes a server's words: redacted like every other output
            console.print(f"{name}: {'ok' if error is None else recorder.redactor.text(error)}", markup=False)
        if any(error is not None for error in results.values()):
            raise typer.Exit(1)
    finally:
        recorder.close()


async def _open_cluster_client(kube_connect: KubeConnect) -> None:
    """Open the cluster client once: a missing, empty, binary or broken kubeconfig, a failing credential plugin,
    or a pod without its service account's files, is a UserError here, not a collector that crashes."""
    client = await kube_connect()
    await client.close()


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _run(
    cfg: RecorderConfig, kube_connect: KubeConnect | None, lease: _Lease | None, probe: socket.socket | None
) -> bool:
    """Serve the probes, reach the cluster and the store (waiting while either is unreachable, not ready:
    :mod:`capstan.startup`), then record until a signal; with a Lease, stand by until this process holds it, then
    record until a signal or until leadership is lost. True when it was lost (the recorder stopped at once; what it
    had written stays, and the cursors it stored tell the next leader where to resume). A standby is ready."""
    from prometheus_client import CollectorRegistry

    from capstan.cli.options import check_lease_readable
    from capstan.kube import KubeClient, LeaderElection, while_leading
    from capstan.probes import Check, ClusterCheck, serving_probes, store_check
    from capstan.record import Recorder
    from capstan.redact import Redactor
    from capstan.startup import ClusterAccess, Dependency, Opening, Startup
    from capstan.store import HistoryMetrics

    stop = _stop_on_signals()
    metrics = HistoryMetrics(CollectorRegistry())
    opening = Opening(lambda: Recorder(cfg, kube_connect=kube_connect, metrics=metrics))
    startup = Startup("capstan record")
    dependencies = []
    cluster = None
    if kube_connect is not None:
        assert cfg.kubernetes is not None
        verify = None
        if lease is not None:
            namespace, name, _ = lease

            async def verify(client: KubeClient) -> None:
                await check_lease_readable(client, namespace, name)

        cluster = ClusterAccess(kube_connect, verify)
        what = f"cluster {cfg.kubernetes.kubeconfig or 'in-cluster'}"
        dependencies.append(Dependency("cluster", what, cluster))
    # the cluster first: a kubeconfig or credentials that cannot work create no store
    dependencies.append(Dependency("store", "store", opening))
    # /readyz lists the store first; each check is replaced by the running component's once the wait is over
    checks: dict[str, Check] = {"store": startup.check("store")}
    if cluster is not None:
        checks["cluster"] = startup.check("cluster")
    waiting = Redactor()

    def redact(text: str) -> str:
        return (opening.value.redactor if opening.value is not None else waiting).text(text)

    election: LeaderElection | None = None
    try:
        async with serving_probes(probe, checks, registry=metrics.registry, redact=redact):
            try:
                if not await startup.reach(dependencies, stop):
                    return False  # stopped while waiting
            finally:
                if cluster is not None:
                    await cluster.close()
            recorder = opening.value
            assert recorder is not None
            checks["store"] = store_check(recorder.store.database)
            if kube_connect is not None:
                checks["cluster"] = ClusterCheck(kube_connect)
            collector = recorder.kubernetes
            if collector is not None:
                keys = [w.key for w in collector.config.watches()]

                async def first_lists() -> str | None:
                    if election is not None and not election.leading.is_set():
                        return None  # a standby records nothing yet
                    missing = [
                        k for k in keys if not (k in collector.synced and collector.synced[k].is_set())
                    ]
                    if missing:
                        return (
                            f"{len(missing)} of {len(keys)} watches have not stored their first list "
                            f"({missing[0]}, …)"
                        )
                    return None

                checks["watches"] = first_lists
            if lease is None or kube_connect is None:
                await recorder.run(stop)
                return False
            namespace, name, duration_s = lease
            client = await kube_connect()
            try:
                election = LeaderElection.for_this_process(
                    client, name, namespace, lease_duration_s=duration_s
                )
                await while_leading(election, stop, recorder.run)
                return election.lost.is_set()
            finally:
                await client.close()
    finally:
        if opening.value is not None:
            opening.value.close()
