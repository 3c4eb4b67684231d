"""The history HTTP API on a real loopback server over SQLite and PostgreSQL: cursor pages stable under concurrent
inserts, the page cap, streamed bodies, strict parameters (400 naming the parameter, never a 500), bearer-token
authentication, a store failure as a 503, and an OpenAPI description that matches the routes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from starlette.routing import Route

from capstan.store import Batch, ObjectChange, Store, create_history_app, open_store
from tests.integration.store._loopback import serve

pytestmark = pytest.mark.integration

# The API's contract as docs/history.md states it, written out here so that a change to it fails a test
LISTINGS = ("timeline", "events", "engine", "gaps", "restarts")  # the paged routes, /v1/<name>
MAX_PAGE = 1000  # records a listing returns at most; a larger limit is a 400
TOKEN = "t0ken-for-the-history-api-tests"
START = 1_764_400_000.0


def change(i: int, at: float) -> ObjectChange:
    return ObjectChange(
        source="c1",
        observed_at=at,
        kind="Deployment",
        api_version="apps/v1",
        namespace="ml",
        name=f"svc-{i}",
        uid=f"uid-{i}",
        resource_version=str(i + 1),
        change_type="added",
        observed_via="watch",
        version_seq=1,
        patch=None,
        snapshot={"metadata": {"name": f"svc-{i}"}, "spec": {"replicas": i % 5}},
    )


def fill(store: Store, n: int) -> None:
    for start in range(0, n, 1000):
        store.history.write(
            Batch(object_changes=[change(i, START + i) for i in range(start, min(n, start + 1000))])
        )


@pytest.fixture
def filled(history_store_url: str) -> Iterator[Store]:
    store = open_store(history_store_url)
    fill(store, 2500)
    try:
        yield store
    finally:
        store.close()


def pages(http: httpx.Client, path: str, params: dict[str, Any], *, between: Any = None) -> list[list[Any]]:
    out: list[list[Any]] = []
    cursor: str | None = None
    for _ in range(100):  # bounded
        response = http.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        body = response.json()
        out.append(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return out
        if between is not None:
            between(len(out))
    raise AssertionError("paging did not end")


def test_pages_follow_the_cursor_to_the_end_stable_under_concurrent_inserts(filled: Store) -> None:
    app = create_history_app(filled.history, clock=lambda: START + 10_000)

    def insert_meanwhile(pages_read: int) -> None:
        if pages_read == 1:  # after the first page (rows 0..999): one row before its end, two after it
            filled.history.write(
                Batch(
                    object_changes=[
                        change(5000, START + 500.5),  # earlier than the cursor: never shown
                        change(5001, START + 999),  # the cursor's own time, a later id: shown next
                        change(5002, START + 9999),  # at the end: shown on the last page
                    ]
                )
            )

    with serve(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        got = pages(http, "/v1/timeline", {"kind": "Deployment", "limit": "1000"}, between=insert_meanwhile)
    assert [len(p) for p in got] == [1000, 1000, 502]
    names = [item["name"] for page in got for item in page]
    assert len(names) == len(set(names))  # nothing twice
    assert names[:1000] == [f"svc-{i}" for i in range(1000)]
    assert names[1000] == "svc-5001"
    assert names[1001:-1] == [f"svc-{i}" for i in range(1000, 2500)]  # nothing skipped
    assert names[-1] == "svc-5002" and "svc-5000" not in names
    keys = [(item["observed_at"], item["id"]) for page in got for item in page]
    assert keys == sorted(keys)


@pytest.mark.parametrize("listing", LISTINGS)
def test_every_listing_pages_with_the_same_envelope(history_store_url: str, listing: str) -> None:
    store = open_store(history_store_url)
    with serve(create_history_app(store.history)) as base, httpx.Client(base_url=base, timeout=30) as http:
        body = http.get(f"/v1/{listing}", params={"limit": "1"}).json()
        assert body == {"items": [], "next_cursor": None}
        assert http.get(f"/v1/{listing}", params={"limit": str(MAX_PAGE + 1)}).status_code == 400
    store.close()


def test_a_listing_is_streamed_and_capped_at_the_page_size(filled: Store) -> None:
    with serve(create_history_app(filled.history)) as base, httpx.Client(base_url=base, timeout=30) as http:
        response = http.get("/v1/timeline")
        assert response.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in response.headers
        body = response.json()
        assert len(body["items"]) == MAX_PAGE and body["next_cursor"]
        too_big = http.get("/v1/timeline", params={"limit": "100000"})
        assert too_big.status_code == 400
        assert too_big.json() == {"error": f"limit: '100000' is not a whole number from 1 to {MAX_PAGE}"}


BAD = [
    ("/v1/timeline", "since=NaN", "since"),
    ("/v1/timeline", "since=inf", "since"),
    ("/v1/timeline", "until=-inf", "until"),
    ("/v1/timeline", "since=1e400", "since"),
    ("/v1/timeline", "since=%D9%A1%D9%A2", "since"),  # '١٢'
    ("/v1/timeline", "since=1" + "0" * 400 + "d", "since"),  # 10**400 days ago
    ("/v1/timeline", "since=10000000000000d", "since"),
    ("/v1/timeline", "since=99999999999999999", "since"),
    ("/v1/timeline", "limit=%C2%B2", "limit"),  # '²'
    ("/v1/timeline", "limit=%D9%A1%D9%A2", "limit"),
    ("/v1/timeline", "limit=100000000", "limit"),
    ("/v1/timeline", "foo=1", "foo"),
    ("/v1/timeline", "limit=1&limit=2", "limit"),
    ("/v1/timeline", "kind=a%00b", "kind"),
    ("/v1/timeline", "cursor=garbage", "cursor"),
    ("/v1/events", "since=2026-02-30T00:00:00Z", "since"),
    ("/v1/engine", "until=9999-12-31T23:59:59-01:00", "until"),
    ("/v1/gaps", "limit=1.5", "limit"),
    ("/v1/restarts", "since=%20%207d", "since"),
    ("/v1/object", "kind=Deployment&name=svc-1&at=nan", "at"),
    ("/v1/object", "name=svc-1", "kind"),
    ("/v1/diff", "kind=Deployment&name=svc-1&since=1e400", "since"),
    ("/v1/diff", "kind=Deployment&name=svc-1&since=1h&until=%EF%BC%91", "until"),  # fullwidth '1'
    ("/healthz", "verbose=1", "verbose"),
    # found by the fuzz test (test_history_api_fuzz.py) against the code before the strict parser: 500s
    ("/v1/engine", "until=-7921567659699874252854766.70317376761871047382s", "until"),
    ("/v1/engine", "since=-843155329734207466.48330337707s&limit=349", "since"),
    ("/v1/object", "kind=%5C%C3%8D&at=15371111003760.43d&name=x", "at"),
    ("/v1/diff", "kind=O&name=E&since=%2B056329014585756196.0&until=%2B219.2", "since"),
    ("/v1/diff", "kind=K&name=N&since=-68867795655458237127366499m&until=-072631s", "since"),
    ("/v1/restarts", "since=622133519.0d&until=0d", "since"),
]


def test_bad_parameters_are_a_400_naming_them_never_a_500(filled: Store) -> None:
    with serve(create_history_app(filled.history)) as base, httpx.Client(base_url=base, timeout=30) as http:
        for path, query, named in BAD:
            response = http.get(f"{path}?{query}")
            assert response.status_code == 400, (path, query, response.status_code, response.text[:200])
            assert response.headers["content-type"] == "application/json"
            error = response.json()["error"]
            assert named in error and "\n" not in error, (path, query, error)
        # the keep-alive connection is still good
        assert http.get("/v1/timeline", params={"limit": "1"}).status_code == 200


def test_a_token_guards_every_route_but_healthz(filled: Store) -> None:
    registry = CollectorRegistry()
    app = create_history_app(filled.history, registry=registry, token=TOKEN)
    with serve(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        for path in ("/v1/timeline", "/v1/object?kind=D&name=n", "/openapi.json", "/metrics", "/nope"):
            bare = http.get(path)
            assert bare.status_code == 401, path
            assert bare.headers["www-authenticate"].startswith("Bearer ")
            assert "token" in bare.json()["error"]
            wrong = http.get(path, headers={"Authorization": f"Bearer {TOKEN}x"})
            assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
            for header in (f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN[:-1]}"):
                assert http.get(path, headers={"Authorization": header}).status_code == 401, header
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert http.get("/v1/timeline", params={"limit": "2"}, headers=good).status_code == 200
        assert http.get("/metrics", headers=good).status_code == 200
        assert http.get("/v1/timeline", headers={"authorization": f"bearer {TOKEN}"}).status_code == 200
        assert http.get("/healthz").json()["ok"] is True


def test_a_failing_store_is_a_503_with_one_line(history_store_url: str) -> None:
    store = open_store(history_store_url)
    with serve(create_history_app(store.history)) as base, httpx.Client(base_url=base, timeout=30) as http:
        with store.database.write_sql_engine.begin() as conn:
            conn.exec_driver_sql(
                "DROP TABLE gaps CASCADE" if store.dialect == "postgresql" else "DROP TABLE gaps"
            )
        response = http.get("/v1/gaps")
        assert response.status_code == 503
        assert response.headers["retry-after"] == "5"
        error = response.json()["error"]
        assert error.startswith("history store unavailable: database ") and "gaps" in error
        assert http.get("/v1/timeline").status_code == 200  # the other routes go on
    store.close()


def test_the_served_description_matches_the_routes(filled: Store) -> None:
    app: Any = create_history_app(filled.history, registry=CollectorRegistry(), token=TOKEN)
    inner = app._app  # behind the bearer-token middleware
    served_routes = {r.path for r in inner.routes if isinstance(r, Route)}
    with serve(app) as base, httpx.Client(base_url=base, timeout=30) as http:
        doc = http.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert set(doc["paths"]) == served_routes
        for path, item in doc["paths"].items():
            assert set(item) == {"get"}, path
            # every documented parameter is accepted, every other one refused
            names = {p["name"] for p in item["get"]["parameters"]}
            refused = http.get(path, params={"zzz": "1"}, headers={"Authorization": f"Bearer {TOKEN}"})
            assert refused.status_code == 400 and "zzz" in refused.json()["error"], path
            for name in names:
                assert name in refused.json()["error"], (path, name)
