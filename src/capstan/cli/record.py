"""``capstan record``: run the recorder (cluster objects and Events, Redis/Valkey engine logs) from a config file."""

from __future__ import annotations

import asyncio
import functools
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from capstan.record import Recorder

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
    kubeconfig: Path | None = typer.Option(
        None,
        "--kubeconfig",
        help="Record this cluster (overrides kubernetes.kubeconfig; enables the section).",
    ),
) -> None:
    """Run the recorder until SIGINT/SIGTERM; a failing target is retried, a failing store stops it (exit 1), and
    a configuration that cannot work (the file, the kubeconfig, its credentials) is one line and exit 2 before
    anything starts."""
    from capstan.errors import UserError
    from capstan.kube import KubeClient
    from capstan.record import KubernetesConfig, Recorder, load_recorder_config
    from capstan.store import StoreWriteError

    cfg = load_recorder_config(config)
    if kubeconfig is not None:
        cfg.kubernetes = (cfg.kubernetes or KubernetesConfig()).model_copy(update={"kubeconfig": kubeconfig})
    kube_connect = None
    if cfg.kubernetes is not None:
        if cfg.kubernetes.kubeconfig is None:
            raise UserError(f"{config}: kubernetes.kubeconfig: not set (set it, or give --kubeconfig)")
        asyncio.run(_check_cluster_access(cfg.kubernetes.kubeconfig))
        # each run of the collector opens its own client inside its event loop (capstan.record.KubeCollector)
        kube_connect = functools.partial(KubeClient.from_kubeconfig, cfg.kubernetes.kubeconfig)
    recorder = Recorder(cfg, kube_connect=kube_connect)
    try:
        if once:
            results = recorder.poll_redis_once()
            if recorder.kubernetes is not None:
                results[recorder.kubernetes.name] = asyncio.run(recorder.kubernetes.record_once())
            console = Console()
            for name, error in results.items():
                # an error line quotes a server's words: redacted like every other output
                console.print(
                    f"{name}: {'ok' if error is None else recorder.redactor.text(error)}", markup=False
                )
            if any(error is not None for error in results.values()):
                raise typer.Exit(1)
            return
        asyncio.run(_run(recorder))
    except StoreWriteError as exc:
        Console(stderr=True).print(f"capstan record: history store write failed, recorder stopped: {exc}")
        raise typer.Exit(1) from None
    finally:
        recorder.close()


async def _check_cluster_access(kubeconfig: Path) -> None:
    """Open the cluster client once: a missing, empty, binary or broken kubeconfig, or a failing credential
    plugin, is a UserError here, not a collector that crashes and is restarted for ever."""
    from capstan.kube import KubeClient

    client = await KubeClient.from_kubeconfig(kubeconfig)
    await client.close()


async def _run(recorder: Recorder) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await recorder.run(stop)
