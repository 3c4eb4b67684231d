"""The one query shape of every listing: equality filters (None is no filter), a time window and a keyset page by
(time, id), compiled as both back ends receive it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import make_url

from capstan.store._rows import MAX_LIMIT, listing_query
from capstan.store._schema import engine_entries, gaps, restarts

pytestmark = pytest.mark.unit

SQLITE = make_url("sqlite://").get_dialect()()
POSTGRES = make_url("postgresql+psycopg://").get_dialect()()


def compiled(q: Any, dialect: Any) -> tuple[str, dict[str, Any]]:
    c = q.compile(dialect=dialect)
    return " ".join(str(c).split()), dict(c.params)


def test_absent_filters_add_no_condition_and_given_ones_keep_their_order() -> None:
    bare, _ = compiled(
        listing_query(gaps, {"source": None}, since=None, until=None, after=None, limit=5), SQLITE
    )
    assert "WHERE" not in bare and bare.endswith("ORDER BY gaps.observed_at, gaps.id LIMIT ? OFFSET ?")
    sql, params = compiled(
        listing_query(
            restarts,
            {"pod": "web", "namespace": "ml"},
            since=1.0,
            until=None,
            after=(2_000_000, 7),
            limit=3,
        ),
        POSTGRES,
    )
    where = sql.split(" WHERE ", 1)[1]
    assert (
        where.index("restarts.pod")
        < where.index("restarts.namespace")
        < where.index("restarts.observed_at >=")
    )
    assert "restarts.observed_at > " in where and "restarts.id > " in where  # the keyset: after (time, id)
    assert sorted(params.values(), key=str) == sorted(
        ["web", "ml", 1_000_000, 2_000_000, 2_000_000, 7, 3], key=str
    )


def test_the_time_column_and_the_limit_are_the_stores() -> None:
    sql, params = compiled(
        listing_query(
            engine_entries,
            {"target": "cache", "log": None},
            time_column="happened_at",
            since=None,
            until=2.0,
            after=None,
            limit=10**9,
        ),
        SQLITE,
    )
    assert (
        "engine_entries.happened_at <= ?" in sql
        and "ORDER BY engine_entries.happened_at, engine_entries.id" in sql
    )
    assert MAX_LIMIT + 1 in params.values()  # one more than the cap, so a caller can tell a full last page


def test_a_filter_on_a_column_the_table_lacks_fails_at_once() -> None:
    with pytest.raises(KeyError):
        listing_query(gaps, {"pod": "x"}, since=None, until=None, after=None, limit=1)
