"""``capstan diagnose [-n NS] [KIND/NAME]``: read the cluster (and the history store when one is given), run the
analyzers, print the findings (Rich, or ``--output json``)."""

from __future__ import annotations

import asyncio
import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

from capstan.errors import UserError

if TYPE_CHECKING:
    from capstan.diagnose import Diagnosis, Finding, ObjectRef, Snapshot

app = typer.Typer(help="Name the root causes of what is broken, with evidence.", invoke_without_command=True)


class Output(StrEnum):
    text = "text"
    json = "json"


_SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
_EVIDENCE_SHOWN = 6


def parse_target(text: str, namespace: str | None) -> ObjectRef:
    """``KIND/NAME`` (``pod/web-1``, ``deploy/web``, ``Node/gpu-3``) as an :class:`ObjectRef`; namespaced kinds take
    ``namespace`` (default ``default``)."""
    from capstan.diagnose import ObjectRef
    from capstan.kube.resources import lookup_kind

    kind_text, sep, name = text.partition("/")
    if not sep or not kind_text or not name or "/" in name:
        raise UserError(
            f"{text!r}: give the object as KIND/NAME (e.g. pod/web-1, deployment/web, node/gpu-3)"
        )
    resource = lookup_kind(kind_text)
    if resource is None:
        raise UserError(f"{text!r}: unknown kind {kind_text!r}")
    return ObjectRef(resource.kind, (namespace or "default") if resource.namespaced else "", name)


@app.callback()
def diagnose(
    target: str | None = typer.Argument(
        None, metavar="[KIND/NAME]", help="Only the findings about this object (e.g. pod/web-1, deploy/web)."
    ),
    namespace: str | None = typer.Option(
        None, "--namespace", "-n", help="Read this namespace only (default: every namespace)."
    ),
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
        help="History store (SQLite path or postgresql:// URL) whose recorded changes the findings cite.",
    ),
    source: str | None = typer.Option(None, "--source", help="The recorder's source name in the store."),
    window: float = typer.Option(
        3600.0, "--window", min=0.0, help="Seconds of recorded history before now to read."
    ),
    output: Output = typer.Option(Output.text, "--output", "-o", help="text (Rich) or json."),
) -> None:
    """Read the cluster, run every analyzer, print the root causes ranked, each with its evidence, the recorded
    changes before it, the symptoms it explains and what to check next."""
    from capstan.cli._cluster import cluster_kubeconfig

    wanted = parse_target(target, namespace) if target else None
    path = cluster_kubeconfig(kubeconfig)
    snapshot, diagnosis = asyncio.run(
        _run(path, namespace=namespace, store=store, source=source, window=window)
    )
    if snapshot.unreadable and not snapshot.objects and not snapshot.events:
        # not one kind could be read: the cluster is unreachable or refuses these credentials altogether
        first = min(snapshot.unreadable.values(), key=lambda r: r.kind)
        raise UserError(f"{path or 'in-cluster'}: cannot read the cluster: {first.kind}: {first.reason}")
    findings = diagnosis.findings
    if wanted is not None:
        if snapshot.get(wanted.kind, wanted.namespace, wanted.name) is None:
            where = f" in namespace {wanted.namespace}" if wanted.namespace else ""
            raise UserError(f"{wanted.kind}/{wanted.name}: not found{where}")
        findings = diagnosis.about(wanted)
    if output is Output.json:
        body = diagnosis.to_json()
        body["findings"] = [f.to_json() for f in findings]
        body["observed_at"] = snapshot.observed_at
        typer.echo(json.dumps(body, indent=2))
        return
    _print(Console(), snapshot, diagnosis, findings, wanted)


async def _run(
    kubeconfig: Path | None, *, namespace: str | None, store: str | None, source: str | None, window: float
) -> tuple[Snapshot, Diagnosis]:
    from capstan.diagnose import diagnose as run_diagnosis
    from capstan.diagnose import read_snapshot
    from capstan.kube import connector
    from capstan.redact import Redactor

    history = None
    redactor = Redactor()
    opened = None
    if store is not None:
        from capstan.store import open_store

        opened = open_store(store, create=False)
        history = opened.history
        redactor = history.redactor(create_key=False)
    try:
        async with await connector(kubeconfig)() as client:
            snapshot = await read_snapshot(
                client, namespace=namespace, history=history, source=source, window_seconds=window
            )
    finally:
        if opened is not None:
            opened.close()
    return snapshot, run_diagnosis(snapshot, redactor=redactor)


def _print(
    console: Console,
    snapshot: Snapshot,
    diagnosis: Diagnosis,
    findings: tuple[Finding, ...],
    wanted: ObjectRef | None,
) -> None:
    pods = len(snapshot.of("Pod"))
    scope = f"about {wanted.key}" if wanted else f"{pods} pods, {len(snapshot.of('Node'))} nodes"
    if not findings:
        console.print(f"[green]no problems found[/] ({scope})")
    for number, f in enumerate(findings, 1):
        style = _SEVERITY_STYLE.get(str(f.severity), "")
        console.print(
            f"[{style}]{number}. {f.severity}[/] [bold]{escape(f.root_cause)}[/]\n"
            f"   [dim]{f.category} · {f.analyzer} · {escape(f.cause)} · id {f.id} · "
            f"confidence {f.confidence:.2f}[/]"
        )
        for e in f.evidence[:_EVIDENCE_SHOWN]:
            console.print(f"   • {escape(e.what)} [dim]({e.source}: {escape(e.where)})[/] {escape(e.text)}")
        if len(f.evidence) > _EVIDENCE_SHOWN:
            console.print(f"   [dim]… {len(f.evidence) - _EVIDENCE_SHOWN} more evidence (--output json)[/]")
        for c in f.changes:
            console.print(
                f"   [magenta]changed[/] {_when(c.at)} {c.kind}/{c.name}: {escape(c.summary or c.change)}"
            )
        if f.symptoms:
            shown = ", ".join(s.object.key for s in f.symptoms[:5])
            more = f" and {len(f.symptoms) - 5} more" if len(f.symptoms) > 5 else ""
            console.print(f"   [dim]explains {len(f.symptoms)}:[/] {escape(shown)}{more}")
        if f.next_check:
            console.print(f"   [cyan]next:[/] {escape(f.next_check)}")
    for failure in diagnosis.failures:
        on = f" on {failure.object.key}" if failure.object else ""
        console.print(f"[red]analyzer {failure.analyzer} failed{on}:[/] {escape(failure.error)}")
    blind: dict[tuple[str, str], list[str]] = {}
    for b in diagnosis.blind:  # one line per kind, naming every analyzer that is blind to it
        blind.setdefault((b.kind, b.reason), []).append(b.analyzer)
    for (kind, reason), names in sorted(blind.items()):
        console.print(f"[yellow]cannot read {kind}[/] (analyzers {', '.join(names)}): {escape(reason)}")
    if findings:
        console.print(f"[dim]{len(findings)} root cause(s), {scope}[/]")


def _when(at: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%H:%M:%S")
