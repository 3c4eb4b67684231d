"""``capstan sandbox``: build and run the local control plane."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

if TYPE_CHECKING:
    from capstan.sandbox import Sandbox

# NOTE: capstan.sandbox is imported inside the commands, so `capstan sandbox … --help` answers without loading it.

app = typer.Typer(
    help="A real local Kubernetes control plane (etcd, apiserver, controller-manager, scheduler, kwok)."
)

_DIR = typer.Option(
    None, "--dir", help="Sandbox state directory (default: ~/.local/state/capstan/sandbox/NAME)."
)
_NAME = typer.Option("default", "--name", help="Sandbox name.")


def _sandbox(directory: Path | None, name: str, *, need_binaries: bool = True) -> Sandbox:
    from capstan.sandbox import Sandbox, default_state_dir, require_toolchain

    toolchain = require_toolchain() if need_binaries else None
    return Sandbox(directory or default_state_dir(name), toolchain)


@app.command()
def build(force: bool = typer.Option(False, "--force", help="Rebuild even when cached.")) -> None:
    """Build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd, kwok and helm (cached by
    version)."""
    from capstan.sandbox import build_helm, build_toolchain

    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description:<24}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("packages"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        tasks: dict[str, TaskID] = {}

        def report(step: str, done: int, total: int) -> None:
            if step not in tasks:
                tasks[step] = progress.add_task(step, total=max(total, 1))
            progress.update(tasks[step], completed=done, total=max(total, 1))

        toolchain = build_toolchain(report, force=force)
        helm = build_helm(report, force=force)
    console.print(f"control plane binaries: {toolchain.bin_dir}")
    console.print(f"helm (the chart's tests): {helm}")


@app.command()
def up(
    spec: Path | None = typer.Option(None, "--spec", help="Sandbox spec YAML (node pools, event TTL…)."),
    directory: Path | None = _DIR,
    name: str = _NAME,
    timeout: float = typer.Option(180.0, help="Seconds to wait for a schedulable cluster."),
) -> None:
    """Start the control plane and kwok nodes (reuses a running sandbox)."""
    from capstan.sandbox import load_spec

    parsed = load_spec(spec)
    sandbox = _sandbox(directory, parsed.name if spec else name)
    console = Console(stderr=True)
    state = sandbox.up(parsed, timeout=timeout, on_step=lambda msg: console.print(f"[dim]•[/] {msg}"))
    console.print(f"kubeconfig: {state.kubeconfig}")
    console.print(f"export KUBECONFIG={state.kubeconfig}")


@app.command()
def down(directory: Path | None = _DIR, name: str = _NAME) -> None:
    """Stop exactly the processes `up` started."""
    stopped = _sandbox(directory, name, need_binaries=False).down()
    Console(stderr=True).print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))


@app.command()
def status(
    directory: Path | None = _DIR,
    name: str = _NAME,
    output: str = typer.Option("table", "--output", "-o", help="table or json"),
) -> None:
    """Say whether the sandbox is up, and show its components."""
    sandbox = _sandbox(directory, name, need_binaries=False)
    state, comps = sandbox.status()
    if output == "json":
        print(
            json.dumps(
                {
                    "up": sandbox.is_up(),
                    "kubeconfig": state.kubeconfig if state else None,
                    "server": state.server if state else None,
                    "components": [c.__dict__ for c in comps],
                }
            )
        )
        return
    console = Console()
    if state is None:
        console.print("sandbox is down")
        raise typer.Exit(1)
    table = Table(title=f"sandbox {state.name}: {'up' if sandbox.is_up() else 'DEGRADED'} at {state.server}")
    table.add_column("component")
    table.add_column("pid", justify="right")
    table.add_column("state")
    for c in comps:
        table.add_row(c.name, str(c.pid), "running" if c.running else "[red]stopped")
    console.print(table)
    console.print(f"kubeconfig: {state.kubeconfig}")
    if not sandbox.is_up():
        raise typer.Exit(1)


@app.command()
def kubeconfig(directory: Path | None = _DIR, name: str = _NAME) -> None:
    """Print the admin kubeconfig path of a running sandbox."""
    state = _sandbox(directory, name, need_binaries=False).load_state()
    if state is None:
        Console(stderr=True).print("sandbox is down: run `capstan sandbox up`")
        raise typer.Exit(1)
    print(state.kubeconfig)
