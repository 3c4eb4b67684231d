"""The history query API over HTTP JSON (read by the MCP server and the dashboard), as a Starlette app factory.

Every route is a thin shell over one :class:`~capstan.store.HistoryReader` query, and three things hold for all of them:

- **Strict parameters.** Each route declares its query parameters once (:class:`~capstan.store._openapi.Param`);
  the parser refuses an unknown, repeated or malformed one with HTTP 400 and ``{"error": "<one line naming it>"}``
  and the same declarations are the OpenAPI description served at ``/openapi.json``.
- **Bounded responses.** A listing returns at most :data:`MAX_PAGE` records (a larger ``limit`` is a 400) and a
  ``next_cursor`` to go on from (see :mod:`capstan.store._cursor`); its body is streamed, the rows fetched
  :data:`CHUNK_ROWS` at a time in short read transactions (a slow client holds no database connection) and encoded
  as they go, so a request holds about one chunk in memory, not a page.
- **One encoder.** Every body (records, errors, the description, health) is made by :func:`encode_json`.

With a ``token``, every route but ``/healthz`` needs ``Authorization: Bearer <token>`` (401 with a JSON body and
``WWW-Authenticate: Bearer`` otherwise), compared in constant time. Database failures are a 503 with a one-line
error; nothing a client sends is a 500.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from sqlalchemy.exc import DBAPIError, OperationalError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from capstan import jsontext
from capstan.redact import Redactor
from capstan.store._connection import describe_db_error
from capstan.store._cursor import BadCursor, Position, decode_cursor, encode_cursor
from capstan.store._history import HistoryReader
from capstan.store._models import (
    EngineEntry,
    Gap,
    KubeEvent,
    ObjectChange,
    ObjectDiff,
    ObjectVersion,
    Restart,
    to_json,
)
from capstan.store._openapi import (
    MAX_TEXT,
    TEXT_PATTERN,
    Operation,
    Param,
    openapi_document,
    page_of,
    ref,
)
from capstan.store._rows import position_of
from capstan.store._timeparse import parse_time

log = logging.getLogger(__name__)

MAX_PAGE = 1000  # records a listing returns at most; a larger limit is a 400
DEFAULT_PAGE = 1000
CHUNK_ROWS = 100  # rows a streamed listing fetches per read transaction
OPEN_PATHS = frozenset({"/healthz"})  # the only route served without the bearer token
_TEXT = re.compile(TEXT_PATTERN)
_LIMIT = re.compile(r"[0-9]{1,7}", re.ASCII)

Parsed = dict[str, Any]


class BadRequest(ValueError):
    """A query parameter is missing, unknown, repeated or malformed (HTTP 400)."""


def encode_json(value: Any, redactor: Redactor | None = None) -> bytes:
    """The one encoder of every response body: a record's (or any value's) JSON form, compact UTF-8, redacted
    by ``redactor`` as a served record (:meth:`capstan.redact.Redactor.served`: defence in depth over what was
    redacted when it was written, and the only redaction of history written before redaction existed).

    NOTE: every byte the API sends but the fixed envelope of a listing (``{"items":[``, commas, ``],
    "next_cursor":``) and /metrics' exposition text passes through here, once per record.
    """
    data = to_json(value)
    return jsontext.dumpb(data if redactor is None else redactor.served(data))


def json_response(
    value: Any,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
    *,
    redactor: Redactor | None = None,
) -> Response:
    return Response(
        encode_json(value, redactor), status_code=status_code, headers=headers, media_type="application/json"
    )


# ---------------------------------------------------------------------- parameters
def _text(name: str, description: str, *, required: bool = False) -> Param:
    return Param(name, "text", description, required)


SINCE = Param("since", "time", "Start: epoch seconds, RFC 3339, or an age like 15m/2h/7d ago.")
UNTIL = Param("until", "time", "End (inclusive): epoch seconds, RFC 3339, or an age.")
LIMIT = Param("limit", "limit", f"Records in this page, 1 to {MAX_PAGE} (a larger value is a 400).")
CURSOR = Param("cursor", "cursor", "The next_cursor of the previous page (opaque).")
PAGING = (SINCE, UNTIL, LIMIT, CURSOR)


def parse_query(
    items: Sequence[tuple[str, str]], params: Sequence[Param], now: float, listing: str
) -> Parsed:
    """The declared parameters' values (None when absent; limit defaults to :data:`DEFAULT_PAGE`), or BadRequest
    with one line naming the parameter."""
    declared = {p.name: p for p in params}
    seen: dict[str, str] = {}
    for key, value in items:
        if key not in declared:
            allowed = ", ".join(sorted(declared)) or "none"
            raise BadRequest(f"unknown query parameter {_show(key)} (this route takes: {allowed})")
        if key in seen:
            raise BadRequest(f"query parameter {key!r} is given more than once")
        seen[key] = value
    out: Parsed = {}
    for p in params:
        given = seen.get(p.name)
        if given is None:
            if p.required:
                raise BadRequest(f"query parameter {p.name!r} is required")
            out[p.name] = DEFAULT_PAGE if p.kind == "limit" else None
            continue
        value = given
        if p.kind == "text":
            if len(value) > MAX_TEXT:
                raise BadRequest(f"{p.name}: {len(value)} characters is longer than {MAX_TEXT}")
            if not _TEXT.fullmatch(value):
                raise BadRequest(f"{p.name}: {_show(value)} holds a control character")
            out[p.name] = value
        elif p.kind == "time":
            try:
                out[p.name] = parse_time(value, now, what=p.name)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
        elif p.kind == "limit":
            if not _LIMIT.fullmatch(value) or not 1 <= int(value) <= MAX_PAGE:
                raise BadRequest(f"limit: {_show(value)} is not a whole number from 1 to {MAX_PAGE}")
            out[p.name] = int(value)
        else:
            try:
                out[p.name] = decode_cursor(listing, value, what=p.name)
            except BadCursor as exc:
                raise BadRequest(str(exc)) from None
    return out


def _show(value: str, width: int = 60) -> str:
    """A client's string in an error line: quoted, and cut short."""
    return repr(value if len(value) <= width else value[:width] + "…")


# ---------------------------------------------------------------------- listings
Fetch = Callable[[HistoryReader, Parsed, Position | None, int], Sequence[Any]]


@dataclass(frozen=True, slots=True)
class Listing:
    """A paged route: ``/v1/<name>``, its filters (besides since/until/limit/cursor) and its store query."""

    name: str
    summary: str
    filters: Sequence[Param]
    record: type
    fetch: Fetch

    @property
    def params(self) -> tuple[Param, ...]:
        return (*self.filters, *PAGING)


LISTINGS: tuple[Listing, ...] = (
    Listing(
        "timeline",
        "Object changes, oldest first (a change is a JSON patch, or the full object on snapshot rows).",
        (
            _text("source", "Cluster name in the records."),
            _text("kind", "Kind, e.g. Deployment."),
            _text("namespace", "Namespace."),
            _text("name", "Object name."),
            _text("uid", "Object uid."),
        ),
        ObjectChange,
        lambda st, p, after, n: st.timeline(
            source=p["source"],
            kind=p["kind"],
            namespace=p["namespace"],
            name=p["name"],
            uid=p["uid"],
            since=p["since"],
            until=p["until"],
            limit=n,
            after=after,
        ),
    ),
    Listing(
        "events",
        "Kubernetes Events, every occurrence, oldest first.",
        (
            _text("involved_uid", "Involved object uid."),
            _text("namespace", "Namespace."),
            _text("involved_name", "Involved object name."),
        ),
        KubeEvent,
        lambda st, p, after, n: st.events(
            involved_uid=p["involved_uid"],
            namespace=p["namespace"],
            involved_name=p["involved_name"],
            since=p["since"],
            until=p["until"],
            limit=n,
            after=after,
        ),
    ),
    Listing(
        "engine",
        "Redis/Valkey engine entries (slowlog, acllog, commandlog-*, config, restart), by when they happened.",
        (
            _text("target", "Engine target name from the recorder config."),
            _text("log", "slowlog, acllog, commandlog-slow, config, restart…"),
        ),
        EngineEntry,
        lambda st, p, after, n: st.engine_entries(
            target=p["target"], log_name=p["log"], since=p["since"], until=p["until"], limit=n, after=after
        ),
    ),
    Listing(
        "gaps",
        "Explicit holes in the history (entries lost before they could be read), oldest first.",
        (_text("source", "Engine target or cluster name."),),
        Gap,
        lambda st, p, after, n: st.gaps(
            source=p["source"], since=p["since"], until=p["until"], limit=n, after=after
        ),
    ),
    Listing(
        "restarts",
        "Observed container restarts, oldest first.",
        (_text("namespace", "Namespace."), _text("pod", "Pod name.")),
        Restart,
        lambda st, p, after, n: st.restarts(
            namespace=p["namespace"], pod=p["pod"], since=p["since"], until=p["until"], limit=n, after=after
        ),
    ),
)

OBJECT_PARAMS = (
    _text("kind", "Kind, e.g. Deployment.", required=True),
    _text("name", "Object name.", required=True),
    _text("namespace", "Namespace (empty or absent for cluster-scoped objects)."),
    _text("source", "Cluster name in the records."),
    Param("at", "time", "When (default: now): epoch seconds, RFC 3339, or an age."),
)
DIFF_PARAMS = (
    _text("kind", "Kind, e.g. Deployment.", required=True),
    _text("name", "Object name.", required=True),
    _text("namespace", "Namespace (empty or absent for cluster-scoped objects)."),
    _text("source", "Cluster name in the records."),
    Param("since", "time", "From this time: epoch seconds, RFC 3339, or an age.", required=True),
    Param("until", "time", "To this time (default: now)."),
)


def page_body(
    fetch: Callable[[Position | None, int], Sequence[Any]],
    first: Sequence[Any],
    *,
    listing: str,
    limit: int,
    chunk: int = CHUNK_ROWS,
    redactor: Redactor | None = None,
) -> Iterator[bytes]:
    """The streamed body of one page: ``{"items":[...],"next_cursor":...}``. ``first`` is the first chunk already
    fetched (``min(chunk, limit) + 1`` rows, so database errors are a 503 before the response starts); each next
    chunk is fetched after the last row sent, one row more than needed to know whether another page follows."""
    yield b'{"items":['
    sent = 0
    rows = first
    want = min(chunk, limit)
    more = False
    last: Position | None = None
    for _ in range(math.ceil(limit / chunk) + 1):  # bounded: each pass sends a chunk or ends the page
        has_next = len(rows) > want
        rows = rows[:want]
        if rows:
            yield (b"," if sent else b"") + b",".join(encode_json(r, redactor) for r in rows)
            sent += len(rows)
            last = position_of(rows[-1])
        if not has_next:
            break
        if sent >= limit:
            more = True
            break
        want = min(chunk, limit - sent)
        rows = fetch(last, want + 1)
    cursor = encode_cursor(listing, last) if more and last is not None else None
    yield b'],"next_cursor":' + encode_json(cursor) + b"}"


# ---------------------------------------------------------------------- authentication
class BearerAuth:
    """ASGI middleware: every HTTP request but to :data:`OPEN_PATHS` carries ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._digest = hashlib.sha256(token.encode()).digest()

    def _authorized(self, values: list[str]) -> bool:
        if len(values) != 1:
            return False
        scheme, _, credentials = values[0].strip().partition(" ")
        given = hashlib.sha256(credentials.strip().encode("latin-1", "replace")).digest()
        # NOTE: digests of equal length compared in constant time: neither the token nor its length leaks
        return hmac.compare_digest(given, self._digest) and scheme.lower() == "bearer"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self._app(scope, receive, send)
            return
        values = Headers(scope=scope).getlist("authorization")
        if self._authorized(values):
            await self._app(scope, receive, send)
            return
        challenge = 'Bearer realm="capstan-history"'
        if values:
            challenge += ', error="invalid_token"'
            message = "wrong bearer token (send Authorization: Bearer <token>)"
        else:
            message = "a bearer token is required (send Authorization: Bearer <token>)"
        response = json_response({"error": message}, 401, headers={"WWW-Authenticate": challenge})
        await response(scope, receive, send)


# ---------------------------------------------------------------------- the app
def create_history_app(
    store: HistoryReader,
    *,
    registry: CollectorRegistry | None = None,
    clock: Callable[[], float] = time.time,
    token: str | None = None,
) -> ASGIApp:
    """Routes: /v1/timeline, /v1/events, /v1/engine, /v1/gaps, /v1/restarts (paged), /v1/object, /v1/diff,
    /openapi.json, /healthz, and /metrics when a registry is given. ``token``: require it as a bearer token.
    Every body is redacted on the way out (:func:`encode_json`)."""
    redactor = Redactor()

    def respond(value: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
        return json_response(value, status_code, headers, redactor=redactor)

    def listing_endpoint(lst: Listing) -> Callable[[Request], Awaitable[Response]]:
        params = lst.params

        async def run(request: Request) -> Response:
            p = parse_query(request.query_params.multi_items(), params, clock(), lst.name)
            limit = int(p["limit"])

            def fetch(after: Position | None, n: int) -> Sequence[Any]:
                return lst.fetch(store, p, after, n)

            first = await run_in_threadpool(fetch, p["cursor"], min(CHUNK_ROWS, limit) + 1)
            return StreamingResponse(
                page_body(fetch, first, listing=lst.name, limit=limit, redactor=redactor),
                media_type="application/json",
            )

        return run

    async def object_at(request: Request) -> Response:
        p = parse_query(request.query_params.multi_items(), OBJECT_PARAMS, clock(), "object")
        at = p["at"] if p["at"] is not None else clock()
        version = await run_in_threadpool(
            store.object_at, p["kind"], p["namespace"] or "", p["name"], at, source=p["source"]
        )
        return respond({"version": version})

    async def diff(request: Request) -> Response:
        p = parse_query(request.query_params.multi_items(), DIFF_PARAMS, clock(), "diff")
        until = p["until"] if p["until"] is not None else clock()
        result = await run_in_threadpool(
            store.diff, p["kind"], p["namespace"] or "", p["name"], p["since"], until, source=p["source"]
        )
        return respond(result)

    async def healthz(request: Request) -> Response:
        parse_query(request.query_params.multi_items(), (), clock(), "healthz")
        return respond({"ok": True, "schema": await run_in_threadpool(store.schema_revision)})

    async def metrics(request: Request) -> Response:
        assert registry is not None
        parse_query(request.query_params.multi_items(), (), clock(), "metrics")
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    document = openapi_document(
        operations(metrics=registry is not None),
        [ObjectChange, KubeEvent, EngineEntry, Gap, Restart, ObjectVersion, ObjectDiff],
        auth=token is not None,
        max_page=MAX_PAGE,
        default_page=DEFAULT_PAGE,
    )

    async def openapi(request: Request) -> Response:
        parse_query(request.query_params.multi_items(), (), clock(), "openapi")
        return json_response(document)  # a constant of the code, not a record

    routes = [Route(f"/v1/{lst.name}", listing_endpoint(lst)) for lst in LISTINGS]
    routes += [
        Route("/v1/object", object_at),
        Route("/v1/diff", diff),
        Route("/openapi.json", openapi),
        Route("/healthz", healthz),
    ]
    if registry is not None:
        routes.append(Route("/metrics", metrics))

    def store_unavailable(_request: Request, exc: Exception) -> Response:
        line = describe_db_error(store.url, exc)
        log.warning("history API: %s", line)
        return respond({"error": f"history store unavailable: {line}"}, 503, headers={"Retry-After": "5"})

    def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return respond({"error": exc.detail}, exc.status_code, headers=dict(exc.headers or {}))

    def internal_error(_request: Request, _exc: Exception) -> Response:
        return respond({"error": "internal error (the server log has the details)"}, 500)

    app = Starlette(
        routes=routes,
        exception_handlers={
            BadRequest: lambda _r, exc: respond({"error": str(exc)}, 400),
            OperationalError: store_unavailable,
            DBAPIError: store_unavailable,
            HTTPException: http_error,
            Exception: internal_error,
        },
    )
    return app if token is None else BearerAuth(app, token)


def operations(*, metrics: bool) -> list[Operation]:
    """Every route of the app as the OpenAPI description lists it."""
    ops = [Operation(f"/v1/{lst.name}", lst.summary, lst.params, page_of(lst.record)) for lst in LISTINGS]
    ops += [
        Operation(
            "/v1/object",
            "The object as it was at a time, rebuilt from snapshot + patches (version null: not recorded then).",
            OBJECT_PARAMS,
            {
                "type": "object",
                "required": ["version"],
                "properties": {"version": {"anyOf": [ref(ObjectVersion), {"type": "null"}]}},
            },
        ),
        Operation(
            "/v1/diff", "The JSON patch between the object at two times.", DIFF_PARAMS, ref(ObjectDiff)
        ),
        Operation("/openapi.json", "This description.", (), {"type": "object"}),
        Operation(
            "/healthz",
            "Liveness and the store's schema revision (served without a token).",
            (),
            {
                "type": "object",
                "required": ["ok", "schema"],
                "properties": {"ok": {"type": "boolean"}, "schema": {"type": ["string", "null"]}},
            },
            authenticated=False,
        ),
    ]
    if metrics:
        ops.append(
            Operation(
                "/metrics",
                "Prometheus metrics of the store.",
                (),
                {"type": "string"},
                media_type=CONTENT_TYPE_LATEST.split(";")[0],
            )
        )
    return ops
