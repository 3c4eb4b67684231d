"""``capstan history``: read the durable history (Rich tables or ``--output json``), serve it over HTTP, migrate."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from capstan.errors import UserError

if TYPE_CHECKING:
    from capstan.store import (
        EngineEntry,
        Gap,
        HistoryReader,
        KubeEvent,
        ObjectChange,
        Position,
        Restart,
        Store,
    )

# NOTE: capstan.store (SQLAlchemy) and the redactor are imported inside the commands, so `capstan history … --help`
# and usage errors answer without loading them.

app = typer.Typer(
    help="Query the durable history of cluster changes and engine events.", no_args_is_help=True
)

_STORE = typer.Option(
    ...,
    "--store",
    envvar="CAPSTAN_HISTORY_STORE",
    help="SQLite file path or postgresql:// URL of the history store.",
)
_SINCE = typer.Option(None, "--since", help="Start: epoch seconds, RFC 3339, or an age like 15m/2h/7d.")
_UNTIL = typer.Option(None, "--until", help="End (default: now): epoch seconds, RFC 3339, or an age.")
_LIMIT = typer.Option(1000, "--limit", min=1, max=100_000, help="Maximum rows.")
_CURSOR = typer.Option(
    None, "--cursor", help="Go on after a previous page: its next_cursor (from here or the HTTP API)."
)
T = TypeVar("T", bound="ObjectChange | KubeEvent | EngineEntry | Gap | Restart")


class Output(StrEnum):
    table = "table"
    json = "json"


_OUTPUT = typer.Option(Output.table, "--output", "-o", help="table (Rich) or json.")


def open_store(location: str, *, create: bool = False, **options: Any) -> Store:
    """:func:`capstan.store.open_store`, imported on first use. Every command here but ``migrate`` only reads, so a
    store that does not exist is an error (``create=False``), not a new empty file."""
    from capstan.store import open_store as _open_store

    return _open_store(location, create=create, **options)


def rfc3339(seconds: float) -> str:
    from capstan.store import rfc3339 as _rfc3339

    return _rfc3339(seconds)


def _open(location: str) -> HistoryReader:
    """The history of the store at ``location``, to read (the queries need no other part of the store)."""
    return open_store(location).history


def _time(value: str | None, option: str) -> float | None:
    if value is None:
        return None
    from capstan.store import parse_time

    try:
        return parse_time(value, time.time(), what=option)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def _page(
    listing: str, cursor: str | None, limit: int, fetch: Callable[[Position | None, int], list[T]]
) -> tuple[list[T], str | None]:
    """One page of a listing: at most ``limit`` rows after ``cursor``, and the cursor of the next page (None on
    the last). Cursors are the HTTP API's, so a page can be taken from either."""
    from capstan.store import BadCursor, decode_cursor, encode_cursor, position_of

    try:
        after = None if cursor is None else decode_cursor(listing, cursor, what="--cursor")
    except BadCursor as exc:
        raise UserError(str(exc)) from None
    rows = fetch(after, limit + 1)
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, encode_cursor(listing, position_of(rows[-1]))


def _emit_page(items: Sequence[Any], next_cursor: str | None) -> None:
    _emit_json({"items": items, "next_cursor": next_cursor})


def _more(next_cursor: str | None) -> None:
    if next_cursor is not None:
        typer.echo(f"more: --cursor {next_cursor}")


def _emit_json(data: Any) -> None:
    # what a store holds is redacted again on the way out (capstan.redact): defence in depth, and the only
    # redaction of anything written before redaction existed
    from capstan.redact import Redactor
    from capstan.store import to_json

    typer.echo(json.dumps(Redactor().served(to_json(data)), indent=2, sort_keys=True))


def _short(value: Any, width: int = 80) -> str:
    """A cell: redacted as a served record (before it is cut, so a cut cannot hide a secret's shape)."""
    from capstan.redact import Redactor

    value = Redactor().served(value)
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= width else text[: width - 1] + "…"


def _server(payload: Mapping[str, Any]) -> str:
    """``valkey 8.1.8``: the server and version an engine entry came from (empty for entries recorded before)."""
    return _short(f"{payload.get('server', '')} {payload.get('server_version', '')}".strip(), 32)


def _entry(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in payload.items() if k not in ("server", "server_version")}


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title)
    for col in columns:
        table.add_column(col)
    from capstan.redact import Redactor

    redactor = Redactor()
    for row in rows:
        table.add_row(*[redactor.text(str(v)) for v in row])
    Console().print(table)


@app.command()
def timeline(
    store: str = _STORE,
    kind: str | None = typer.Option(None, "--kind"),
    namespace: str | None = typer.Option(None, "--namespace", "-n"),
    name: str | None = typer.Option(None, "--name"),
    source: str | None = typer.Option(None, "--source", help="Cluster name in the records."),
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    limit: int = _LIMIT,
    cursor: str | None = _CURSOR,
    output: Output = _OUTPUT,
) -> None:
    """Changes of one object, or of a namespace/kind, in a time window (oldest first)."""
    start, end = _time(since, "--since"), _time(until, "--until")
    st = _open(store)
    items, next_cursor = _page(
        "timeline",
        cursor,
        limit,
        lambda after, n: st.timeline(
            source=source,
            kind=kind,
            namespace=namespace,
            name=name,
            since=start,
            until=end,
            limit=n,
            after=after,
        ),
    )
    if output is Output.json:
        _emit_page(items, next_cursor)
        return
    _table(
        "object changes",
        ["observed", "kind", "namespace/name", "type", "via", "rv", "change"],
        [
            (
                rfc3339(c.observed_at),
                c.kind,
                f"{c.namespace}/{c.name}" if c.namespace else c.name,
                c.change_type,
                c.observed_via,
                c.resource_version,
                _short(c.patch if c.patch is not None else "(full object)"),
            )
            for c in items
        ],
    )
    _more(next_cursor)


@app.command("object")
def object_at(
    kind: str = typer.Argument(..., help="Kind, e.g. Deployment."),
    name: str = typer.Argument(...),
    store: str = _STORE,
    namespace: str = typer.Option("", "--namespace", "-n"),
    at: str | None = typer.Option(None, "--at", help="Time (default: now)."),
    source: str | None = typer.Option(None, "--source"),
    output: Output = _OUTPUT,
) -> None:
    """The object as it was at a time, rebuilt from snapshot + patches."""
    from capstan.redact import Redactor

    when = _time(at, "--at") or time.time()  # bad input is reported before any I/O
    st = _open(store)
    version = st.object_at(kind, namespace, name, when, source=source)
    if version is None:
        raise UserError(
            f"{kind} {namespace + '/' if namespace else ''}{name}: not recorded at {rfc3339(when)}"
        )
    if output is Output.json:
        _emit_json(version)
        return
    state = "deleted" if version.deleted else "live"
    Console().print(
        f"[bold]{kind} {namespace}/{name}[/] uid={version.uid} rv={version.resource_version} "
        f"version={version.version_seq} observed={rfc3339(version.observed_at)} ({state})"
    )
    typer.echo(json.dumps(Redactor().kube_object(version.object), indent=2, sort_keys=True))


@app.command()
def diff(
    kind: str = typer.Argument(...),
    name: str = typer.Argument(...),
    store: str = _STORE,
    namespace: str = typer.Option("", "--namespace", "-n"),
    since: str = typer.Option(..., "--since", help="From this time."),
    until: str | None = _UNTIL,
    source: str | None = typer.Option(None, "--source"),
    output: Output = _OUTPUT,
) -> None:
    """The JSON patch between the object at two times."""
    start = _time(since, "--since")
    assert start is not None
    end = _time(until, "--until") or time.time()
    st = _open(store)
    result = st.diff(kind, namespace, name, start, end, source=source)
    if output is Output.json:
        _emit_json(result)
        return
    _table(
        f"{kind} {namespace}/{name}: {rfc3339(result.since)} -> {rfc3339(result.until)}",
        ["op", "path", "value"],
        [(op["op"], op.get("path", ""), _short(op.get("value", op.get("from", "")))) for op in result.patch],
    )


@app.command()
def events(
    store: str = _STORE,
    involved_uid: str | None = typer.Option(None, "--uid", help="Involved object uid."),
    involved_name: str | None = typer.Option(None, "--name", help="Involved object name."),
    namespace: str | None = typer.Option(None, "--namespace", "-n"),
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    limit: int = _LIMIT,
    cursor: str | None = _CURSOR,
    output: Output = _OUTPUT,
) -> None:
    """Kubernetes Events (every occurrence) by involved object."""
    start, end = _time(since, "--since"), _time(until, "--until")
    st = _open(store)
    items, next_cursor = _page(
        "events",
        cursor,
        limit,
        lambda after, n: st.events(
            involved_uid=involved_uid,
            involved_name=involved_name,
            namespace=namespace,
            since=start,
            until=end,
            limit=n,
            after=after,
        ),
    )
    if output is Output.json:
        _emit_page(items, next_cursor)
        return
    _table(
        "events",
        ["observed", "object", "type", "reason", "count", "message"],
        [
            (
                rfc3339(e.observed_at),
                f"{e.involved_kind} {e.involved_namespace}/{e.involved_name}",
                e.type,
                e.reason,
                e.count,
                _short(e.message, 60),
            )
            for e in items
        ],
    )
    _more(next_cursor)


@app.command()
def engine(
    store: str = _STORE,
    target: str | None = typer.Option(None, "--target", help="Engine target name from the recorder config."),
    log: str | None = typer.Option(None, "--log", help="slowlog, acllog, commandlog-slow, config, restart…"),
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    limit: int = _LIMIT,
    cursor: str | None = _CURSOR,
    output: Output = _OUTPUT,
) -> None:
    """Redis/Valkey engine entries by target."""
    start, end = _time(since, "--since"), _time(until, "--until")
    st = _open(store)
    items, next_cursor = _page(
        "engine",
        cursor,
        limit,
        lambda after, n: st.engine_entries(
            target=target, log_name=log, since=start, until=end, limit=n, after=after
        ),
    )
    if output is Output.json:
        _emit_page(items, next_cursor)
        return
    _table(
        "engine entries",
        ["happened", "target", "server", "log", "id", "entry"],
        [
            (
                rfc3339(e.happened_at),
                e.target,
                _server(e.payload),
                e.log,
                e.native_id,
                _short(_entry(e.payload)),
            )
            for e in items
        ],
    )
    _more(next_cursor)


@app.command()
def gaps(
    store: str = _STORE,
    source: str | None = typer.Option(None, "--source", help="Engine target or cluster name."),
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    limit: int = _LIMIT,
    cursor: str | None = _CURSOR,
    output: Output = _OUTPUT,
) -> None:
    """Explicit holes in the history (entries lost before they could be read)."""
    start, end = _time(since, "--since"), _time(until, "--until")
    st = _open(store)
    items, next_cursor = _page(
        "gaps",
        cursor,
        limit,
        lambda after, n: st.gaps(source=source, since=start, until=end, limit=n, after=after),
    )
    if output is Output.json:
        _emit_page(items, next_cursor)
        return
    _table(
        "gaps",
        ["observed", "source", "log", "lost", "reason"],
        [
            (rfc3339(g.observed_at), g.source, g.log, "unknown" if g.lost is None else g.lost, g.reason)
            for g in items
        ],
    )
    _more(next_cursor)


@app.command()
def migrate(store: str = _STORE) -> None:
    """Create or upgrade the store schema (the recorder also does this on start)."""
    st = open_store(store, create=True)
    typer.echo(f"{st.display_url}: schema at revision {st.schema_revision()}")
    st.close()


@app.command()
def serve(
    store: str = _STORE,
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to listen on (not loopback: needs a token)."
    ),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port (0: any free port)."),
    token_file: Path | None = typer.Option(
        None,
        "--token-file",
        envvar="CAPSTAN_HISTORY_TOKEN_FILE",
        help="File holding the bearer token every route but /healthz then requires.",
    ),
    max_connections: int = typer.Option(
        100, "--max-connections", min=1, max=10_000, help="Concurrent connections; more get a 503."
    ),
) -> None:
    """Serve the query API over HTTP JSON (/v1/timeline, /v1/events, /v1/engine, /v1/gaps, /v1/restarts, /v1/object,
    /v1/diff, /openapi.json, /healthz, /metrics). The bearer token comes from --token-file or the
    CAPSTAN_HISTORY_TOKEN environment variable; one is required unless --host is a loopback address."""
    import os

    import uvicorn
    from prometheus_client import CollectorRegistry

    from capstan.httpserver import bind_listener, is_loopback, load_token
    from capstan.logs import uvicorn_log_config
    from capstan.store import HistoryMetrics, create_history_app

    token = load_token(token_file, os.environ.get(TOKEN_ENV), env_name=TOKEN_ENV)
    if token is None and not is_loopback(host):
        raise UserError(
            f"history serve: --host {host!r} is not a loopback address, and the history holds cluster state: "
            f"give a bearer token (--token-file FILE or {TOKEN_ENV}), or listen on 127.0.0.1"
        )
    registry = CollectorRegistry()
    st = open_store(store, metrics=HistoryMetrics(registry))
    sock = bind_listener(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    auth = "on: bearer token required on every route but /healthz" if token else "off: loopback only"
    typer.echo(
        f"history API listening on http://{shown}:{bound_port} (auth {auth}), store {st.display_url}",
        err=True,
    )
    config = uvicorn.Config(
        create_history_app(st.history, registry=registry, token=token),
        log_level="warning",
        lifespan="off",
        limit_concurrency=max_connections,
        server_header=False,
        access_log=False,
        log_config=uvicorn_log_config(),
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        st.close()


TOKEN_ENV = "CAPSTAN_HISTORY_TOKEN"
