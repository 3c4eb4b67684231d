"""The pure parts of the history API: strict time parsing (shared with the CLI), page cursors, query parameters,
the streamed page body and the OpenAPI description built from the same declarations."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capstan.errors import UserError
from capstan.httpserver import check_token
from capstan.store import BadCursor, Gap, decode_cursor, encode_cursor, parse_time, position_of, to_json
from capstan.store._http import (
    LISTINGS,
    MAX_PAGE,
    OBJECT_PARAMS,
    BadRequest,
    operations,
    page_body,
    parse_query,
)
from capstan.store._openapi import Param, openapi_document, record_schema
from capstan.store._timeparse import MAX_TIME, MIN_TIME, TIME_PATTERN

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0


# ---------------------------------------------------------------------- times
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1764400000", 1764400000.0),
        ("1764400000.25", 1764400000.25),
        ("2026-11-29T10:00:00Z", 1795946400.0),
        ("2026-11-29T11:00:00+01:00", 1795946400.0),
        ("2026-11-29T10:00:00.123456789Z", 1795946400.123456),  # nanoseconds cut to microseconds
        ("2026-11-29 10:00:00", 1795946400.0),  # no offset: UTC
        ("2026-11-29", 1795910400.0),
        ("90s", NOW - 90),
        ("15m", NOW - 900),
        ("-2h", NOW - 7200),
        ("7d", NOW - 7 * 86400),
        ("0001-01-01T00:00:00Z", MIN_TIME),
        ("9999-12-31T23:59:59Z", MAX_TIME),
    ],
)
def test_parse_time_accepts_the_documented_forms(text: str, expected: float) -> None:
    assert parse_time(text, NOW, what="since") == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("NaN", "is not epoch seconds"),
        ("nan", "is not epoch seconds"),
        ("inf", "is not epoch seconds"),
        ("-Infinity", "is not epoch seconds"),
        ("1e400", "is not epoch seconds"),  # overflows float to inf
        ("1_000", "is not epoch seconds"),
        ("١٢", "is not epoch seconds"),  # Arabic-Indic digits: float() takes them
        ("١٢d", "is not epoch seconds"),  # and \d matched them
        ("12\u0660", "is not epoch seconds"),
        ("1" + "0" * 400 + "d", "too long"),  # 10**400 days
        ("10000000000000d", "out of range"),  # finite, but before the year 1
        ("99999999999999999", "out of range"),  # beyond int64 microseconds
        ("9999-12-31T23:59:59-01:00", "out of range"),
        ("0001-01-01T00:00:00+01:00", "out of range"),
        ("2026-02-30T00:00:00Z", "not a valid RFC 3339 time"),
        ("2026-11-29T25:00Z", "not a valid RFC 3339 time"),
        (" 7d", "is not epoch seconds"),
        ("", "is not epoch seconds"),
        ("yesterday", "is not epoch seconds"),
    ],
)
def test_parse_time_refuses_with_one_line_naming_the_parameter(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)) as info:
        parse_time(text, NOW, what="since")
    message = str(info.value)
    assert message.startswith("since: ") and "\n" not in message and len(message) < 200


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=80), st.from_regex(TIME_PATTERN, fullmatch=True)))
def test_parse_time_gives_a_time_in_range_or_a_value_error_for_any_text(text: str) -> None:
    try:
        value = parse_time(text, NOW, what="t")
    except ValueError as exc:
        assert str(exc).startswith("t: ")
        return
    assert MIN_TIME <= value <= MAX_TIME
    assert re.fullmatch(TIME_PATTERN, text)  # what is accepted is what the OpenAPI description publishes


# ---------------------------------------------------------------------- cursors
@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([lst.name for lst in LISTINGS]),
    st.integers(int(MIN_TIME) * 1_000_000, int(MAX_TIME) * 1_000_000),
    st.integers(0, 2**63 - 1),
)
def test_a_cursor_round_trips_its_position(listing: str, time_us: int, row_id: int) -> None:
    text = encode_cursor(listing, (time_us, row_id))
    assert re.fullmatch(r"[A-Za-z0-9_-]+", text)
    assert decode_cursor(listing, text) == (time_us, row_id)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_position_or_bad_cursor(text: str) -> None:
    try:
        decode_cursor("timeline", text)
    except BadCursor as exc:
        assert str(exc).startswith("cursor: ")


def test_a_cursor_of_another_listing_or_out_of_range_is_refused() -> None:
    events = encode_cursor("events", (1, 2))
    with pytest.raises(BadCursor, match="events"):
        decode_cursor("timeline", events)
    with pytest.raises(BadCursor, match="out of range"):
        decode_cursor("timeline", encode_cursor("timeline", (10**18, 1)))
    for junk in ("garbage", "A", "", "=" * 4, "x" * 129):
        with pytest.raises(BadCursor):
            decode_cursor("timeline", junk)


def test_position_of_a_stored_record_round_trips_its_microseconds() -> None:
    # every time the recorder stores comes from a float clock; its µs value survives float seconds and back
    for us in (1_764_400_000_123_456, 1_000_000, 0, 4_102_444_800_999_999):
        gap = Gap("s", "slowlog", "k", us / 1_000_000, 1, "r", id=7)
        assert position_of(gap) == (us, 7)


# ---------------------------------------------------------------------- parameters
TIMELINE = next(lst for lst in LISTINGS if lst.name == "timeline")


def parse(query: Sequence[tuple[str, str]], params: Sequence[Param] = TIMELINE.params) -> dict[str, Any]:
    return parse_query(query, params, NOW, "timeline")


def test_parameters_parse_to_values_and_defaults() -> None:
    got = parse([("kind", "Deployment"), ("since", "15m"), ("limit", "10")])
    assert got["kind"] == "Deployment" and got["since"] == NOW - 900 and got["limit"] == 10
    assert got["name"] is None and got["until"] is None and got["cursor"] is None
    assert parse([])["limit"] == 1000
    cursor = encode_cursor("timeline", (5, 6))
    assert parse([("cursor", cursor)])["cursor"] == (5, 6)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ([("foo", "1")], "unknown query parameter 'foo'"),
        ([("limit", "1"), ("limit", "2")], "'limit' is given more than once"),
        ([("limit", "0")], "limit:"),
        ([("limit", "1001")], "limit:"),
        ([("limit", "100000000")], "limit:"),
        ([("limit", "²")], "limit:"),  # str.isdigit() is true and int() raised: a 500 before
        ([("limit", "١٢")], "limit:"),
        ([("limit", "1.5")], "limit:"),
        ([("limit", "+5")], "limit:"),
        ([("limit", "")], "limit:"),
        ([("limit", "9" * 5000)], "limit:"),
        ([("since", "NaN")], "since:"),
        ([("until", "-inf")], "until:"),
        ([("kind", "a\x00b")], "kind:"),  # PostgreSQL refuses NUL in text: a 500 before
        ([("name", "x\n")], "name:"),
        ([("uid", "u" * 513)], "uid:"),
        ([("cursor", "garbage")], "cursor:"),
    ],
)
def test_bad_parameters_are_one_line_naming_them(query: list[tuple[str, str]], named: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse(query)
    assert named in str(info.value) and "\n" not in str(info.value) and len(str(info.value)) < 300


def test_required_parameters_are_named() -> None:
    with pytest.raises(BadRequest, match="'kind' is required"):
        parse_query([("name", "api")], OBJECT_PARAMS, NOW, "object")


def test_a_bearer_token_must_be_long_printable_ascii() -> None:
    assert check_token("a" * 16, "T") == "a" * 16
    for bad in ("short", "a" * 15, "has space in it!!", "ünïcödé-token-value", "a" * 4097):
        with pytest.raises(UserError, match=r"^T: the bearer token"):
            check_token(bad, "T")


# ---------------------------------------------------------------------- the streamed page
class Rows:
    """A fake listing query over rows with positions (t, id): what the store's keyset query returns."""

    def __init__(self, n: int) -> None:
        self.rows = [Gap("s", "l", str(i), float(i // 3), None, "r", id=i + 1) for i in range(n)]
        self.calls: list[tuple[Any, int]] = []

    def fetch(self, after: tuple[int, int] | None, n: int) -> list[Gap]:
        self.calls.append((after, n))
        rest = [r for r in self.rows if after is None or position_of(r) > after]
        return rest[:n]


def body_of(rows: Rows, limit: int, chunk: int, after: tuple[int, int] | None = None) -> dict[str, Any]:
    first = rows.fetch(after, min(chunk, limit) + 1)
    raw = b"".join(page_body(rows.fetch, first, listing="gaps", limit=limit, chunk=chunk))
    parsed: dict[str, Any] = json.loads(raw)
    return parsed


@pytest.mark.parametrize(
    ("n", "limit", "chunk"), [(0, 10, 3), (5, 10, 3), (10, 10, 3), (11, 10, 3), (25, 10, 4)]
)
def test_a_page_streams_in_chunks_and_says_where_the_next_begins(n: int, limit: int, chunk: int) -> None:
    rows = Rows(n)
    seen: list[str] = []
    after = None
    for _ in range(n // limit + 2):  # bounded: every page but the last is full
        page = body_of(rows, limit, chunk, after)
        seen += [item["key"] for item in page["items"]]
        assert len(page["items"]) <= limit
        assert all(n_rows <= chunk + 1 for _, n_rows in rows.calls)  # never more than a chunk in memory
        rows.calls.clear()
        if page["next_cursor"] is None:
            break
        after = decode_cursor("gaps", page["next_cursor"])
    assert seen == [str(i) for i in range(n)]


def test_a_page_item_is_the_record_json_form() -> None:
    rows = Rows(2)
    page = body_of(rows, 10, 3)
    assert page == {"items": [to_json(r) for r in rows.rows], "next_cursor": None}


# ---------------------------------------------------------------------- the OpenAPI description
def test_the_description_lists_every_route_with_its_declared_parameters() -> None:
    doc = openapi_document(operations(metrics=True), [Gap], auth=True, max_page=MAX_PAGE, default_page=1000)
    paths = doc["paths"]
    assert set(paths) == {f"/v1/{lst.name}" for lst in LISTINGS} | {
        "/v1/object",
        "/v1/diff",
        "/openapi.json",
        "/healthz",
        "/metrics",
    }
    timeline = paths["/v1/timeline"]["get"]
    assert [p["name"] for p in timeline["parameters"]] == [p.name for p in TIMELINE.params]
    limit = next(p for p in timeline["parameters"] if p["name"] == "limit")
    assert limit["schema"]["maximum"] == MAX_PAGE
    since = next(p for p in timeline["parameters"] if p["name"] == "since")
    assert since["schema"]["pattern"] == TIME_PATTERN
    assert "401" in timeline["responses"] and paths["/healthz"]["get"]["security"] == []
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_record_schemas_follow_the_json_form() -> None:
    schema = record_schema(Gap)
    assert schema["properties"]["observed_at"] == {"type": "string", "format": "date-time"}
    assert schema["properties"]["lost"] == {"type": ["integer", "null"]}
    assert set(schema["required"]) == set(to_json(Gap("s", "l", "k", 1.0, None, "r", id=1)))
