"""The history query API over HTTP JSON (read by the MCP server and the dashboard), as a Starlette app factory.

Every route is a thin shell over one :class:`~capstan.store.Store` query; responses use the record JSON form of
:func:`capstan.store.to_json`. Bad parameters get HTTP 400 with ``{"error": "<one line>"}``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from capstan.store._models import to_json
from capstan.store._store import DEFAULT_LIMIT, Store
from capstan.store._timeparse import parse_time


class BadRequest(ValueError):
    """A query parameter is missing or malformed."""


class _Params:
    def __init__(self, request: Request, now: float) -> None:
        self._q = request.query_params
        self._now = now

    def text(self, name: str, *, required: bool = False) -> str | None:
        value = self._q.get(name)
        if value is None and required:
            raise BadRequest(f"query parameter {name!r} is required")
        return value

    def required(self, name: str) -> str:
        value = self.text(name, required=True)
        assert value is not None
        return value

    def time(self, name: str, *, default: float | None = None) -> float | None:
        value = self._q.get(name)
        if value is None:
            return default
        try:
            return parse_time(value, self._now, what=name)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    def limit(self) -> int:
        value = self._q.get("limit", str(DEFAULT_LIMIT))
        if not value.isdigit() or int(value) < 1:
            raise BadRequest(f"limit: {value!r} is not a positive integer")
        return int(value)


Handler = Callable[[_Params], Any]


def create_history_app(
    store: Store, *, registry: CollectorRegistry | None = None, clock: Callable[[], float] = time.time
) -> Starlette:
    """Routes: /v1/timeline, /v1/object, /v1/diff, /v1/events, /v1/engine, /v1/gaps, /v1/restarts, /healthz,
    and /metrics when a registry is given."""

    def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            try:
                params = _Params(request, clock())
                result = await run_in_threadpool(handler, params)
            except BadRequest as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            return JSONResponse(to_json(result))

        return run

    def timeline(p: _Params) -> Any:
        return {
            "items": store.timeline(
                source=p.text("source"),
                kind=p.text("kind"),
                namespace=p.text("namespace"),
                name=p.text("name"),
                uid=p.text("uid"),
                since=p.time("since"),
                until=p.time("until"),
                limit=p.limit(),
            )
        }

    def object_at(p: _Params) -> Any:
        at = p.time("at", default=clock())
        assert at is not None
        version = store.object_at(
            p.required("kind"), p.text("namespace") or "", p.required("name"), at, source=p.text("source")
        )
        return {"version": version}

    def diff(p: _Params) -> Any:
        since, until = p.time("since"), p.time("until", default=clock())
        if since is None or until is None:
            raise BadRequest("query parameter 'since' is required")
        return store.diff(
            p.required("kind"),
            p.text("namespace") or "",
            p.required("name"),
            since,
            until,
            source=p.text("source"),
        )

    def events(p: _Params) -> Any:
        return {
            "items": store.events(
                involved_uid=p.text("involved_uid"),
                namespace=p.text("namespace"),
                involved_name=p.text("involved_name"),
                since=p.time("since"),
                until=p.time("until"),
                limit=p.limit(),
            )
        }

    def engine(p: _Params) -> Any:
        return {
            "items": store.engine_entries(
                target=p.text("target"),
                log_name=p.text("log"),
                since=p.time("since"),
                until=p.time("until"),
                limit=p.limit(),
            )
        }

    def gaps(p: _Params) -> Any:
        return {
            "items": store.gaps(
                source=p.text("source"), since=p.time("since"), until=p.time("until"), limit=p.limit()
            )
        }

    def restarts(p: _Params) -> Any:
        return {
            "items": store.restarts(
                namespace=p.text("namespace"),
                pod=p.text("pod"),
                since=p.time("since"),
                until=p.time("until"),
                limit=p.limit(),
            )
        }

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"ok": True, "schema": await run_in_threadpool(store.schema_revision)})

    async def metrics(_request: Request) -> Response:
        assert registry is not None
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/v1/timeline", endpoint(timeline)),
        Route("/v1/object", endpoint(object_at)),
        Route("/v1/diff", endpoint(diff)),
        Route("/v1/events", endpoint(events)),
        Route("/v1/engine", endpoint(engine)),
        Route("/v1/gaps", endpoint(gaps)),
        Route("/v1/restarts", endpoint(restarts)),
        Route("/healthz", healthz),
    ]
    if registry is not None:
        routes.append(Route("/metrics", metrics))
    return Starlette(routes=routes)
