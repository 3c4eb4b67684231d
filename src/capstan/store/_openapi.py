"""The OpenAPI 3.1 description of the history HTTP API, built from the same parameter declarations the app parses.

:mod:`capstan.store._http` declares each route's query parameters once (:class:`Param`); the app parses requests
with them and this module turns them, and the record dataclasses of :mod:`capstan.store._models`, into the
document served at ``/openapi.json``. So the description cannot drift from the routes: the patterns it publishes
for times and cursors are the very regular expressions the parser uses, and a test checks its paths against the
app's routes. Pure code: no I/O.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from capstan.store import _models
from capstan.store._cursor import CURSOR_PATTERN
from capstan.store._timeparse import MAX_TIME_TEXT, TIME_PATTERN

ParamKind = Literal["text", "time", "limit", "cursor"]
JsonSchema = dict[str, Any]

# NOTE: what a text parameter may hold; the parser checks the same pattern and length (PostgreSQL refuses NUL in
# text, and no name, namespace, uid or target holds a control character).
MAX_TEXT = 512
TEXT_PATTERN = r"^[^\u0000-\u001f\u007f]*$"


@dataclass(frozen=True, slots=True)
class Param:
    """One query parameter of one route."""

    name: str
    kind: ParamKind
    description: str
    required: bool = False


@dataclass(frozen=True, slots=True)
class Operation:
    """One GET route: its query parameters and the schema of its 200 body (a record type, listed or single)."""

    path: str
    summary: str
    params: Sequence[Param]
    body: JsonSchema
    authenticated: bool = True
    media_type: str = "application/json"


def param_schema(param: Param, *, max_page: int, default_page: int) -> JsonSchema:
    if param.kind == "text":
        return {"type": "string", "maxLength": MAX_TEXT, "pattern": TEXT_PATTERN}
    if param.kind == "time":
        return {"type": "string", "maxLength": MAX_TIME_TEXT, "pattern": TIME_PATTERN}
    if param.kind == "limit":
        return {"type": "integer", "minimum": 1, "maximum": max_page, "default": default_page}
    return {"type": "string", "pattern": CURSOR_PATTERN}


def ref(record: type) -> JsonSchema:
    return {"$ref": f"#/components/schemas/{record.__name__}"}


def page_of(record: type) -> JsonSchema:
    """The body of a listing: one page of records and the cursor of the next page (null on the last)."""
    return {
        "type": "object",
        "required": ["items", "next_cursor"],
        "properties": {
            "items": {"type": "array", "items": ref(record)},
            "next_cursor": {"type": ["string", "null"], "pattern": CURSOR_PATTERN},
        },
    }


ERROR_SCHEMA: JsonSchema = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string"}},
}


def record_schema(record: type) -> JsonSchema:
    """The JSON Schema of a record's JSON form (:func:`capstan.store.to_json`): times are RFC 3339 strings."""
    hints = typing.get_type_hints(record, vars(_models))
    props: dict[str, JsonSchema] = {}
    for f in dataclasses.fields(record):
        if f.name == "mutable":  # to_json leaves it out
            continue
        props[f.name] = (
            _nullable({"type": "string", "format": "date-time"}, _is_optional(hints[f.name]))
            if f.name in _models._TIME_FIELDS
            else _type_schema(hints[f.name])
        )
    return {"type": "object", "required": sorted(props), "properties": props}


def _is_optional(hint: Any) -> bool:
    return type(None) in typing.get_args(hint)


def _nullable(schema: JsonSchema, optional: bool) -> JsonSchema:
    if not optional:
        return schema
    if "$ref" in schema:
        return {"anyOf": [schema, {"type": "null"}]}
    return {**schema, "type": [schema["type"], "null"]}


def _type_schema(hint: Any) -> JsonSchema:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return _nullable(_type_schema(inner), True)
    if origin is Literal:
        return {"type": "string", "enum": list(typing.get_args(hint))}
    if origin is list:
        return {"type": "array", "items": _type_schema(typing.get_args(hint)[0])}
    if origin is dict or hint is dict:
        return {"type": "object"}
    if dataclasses.is_dataclass(hint):
        return ref(typing.cast(type, hint))
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if hint in simple:
        return {"type": simple[hint]}
    raise TypeError(f"no JSON Schema for {hint!r}")


def openapi_document(
    operations: Sequence[Operation],
    records: Sequence[type],
    *,
    auth: bool,
    max_page: int,
    default_page: int,
    title: str = "Capstan history API",
) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations`` (``auth``: every authenticated operation needs a bearer token)."""
    paths: dict[str, Any] = {}
    for op in operations:
        responses: dict[str, Any] = {
            "200": {"description": "OK", "content": {op.media_type: {"schema": op.body}}},
        }
        if op.params:
            responses["400"] = _error("a query parameter is missing, unknown, repeated or malformed")
        if auth and op.authenticated:
            responses["401"] = {
                **_error("no or a wrong bearer token"),
                "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
            }
        responses["503"] = _error("the history store is unavailable; try again later")
        operation: dict[str, Any] = {
            "summary": op.summary,
            "operationId": op.path.strip("/").replace("/", "_").replace(".", "_") or "root",
            "parameters": [
                {
                    "name": p.name,
                    "in": "query",
                    "required": p.required,
                    "description": p.description,
                    "schema": param_schema(p, max_page=max_page, default_page=default_page),
                }
                for p in op.params
            ],
            "responses": responses,
        }
        if auth and not op.authenticated:
            operation["security"] = []
        paths[op.path] = {"get": operation}
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": title,
            "version": "1",
            "description": (
                "Read-only history of cluster changes and engine events. Listings are paged: at most "
                f"{max_page} items a page (a larger limit is a 400), oldest first; pass a page's next_cursor as "
                "cursor to get the next page (null on the last). Unknown or repeated query parameters are a 400."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": {r.__name__: record_schema(r) for r in records} | {"Error": ERROR_SCHEMA},
        },
    }
    if auth:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        doc["security"] = [{"bearer": []}]
    return doc


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
