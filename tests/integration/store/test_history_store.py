"""The history store on both back ends: object versions and relists, events, engine entries, outbox, retention,
Secrets, and one-line errors for bad database URLs."""

from __future__ import annotations

import base64
import copy
from typing import Any

import pytest

from capstan.errors import UserError
from capstan.record import DiffPolicy, ObjectHistory, event_record, kind_key, normalize
from capstan.sandbox import free_port
from capstan.store import (
    Batch,
    EngineEntry,
    Gap,
    Restart,
    RestartCount,
    RetentionPolicy,
    Store,
    apply_retention,
    open_store,
)

pytestmark = pytest.mark.integration


def pod(uid: str, name: str, rv: int, image: str, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid,
            "resourceVersion": str(rv),
            "labels": labels or {"app": name},
            "managedFields": [{"manager": "kubectl", "time": f"t{rv}"}],
        },
        "spec": {"containers": [{"name": "main", "image": image}]},
    }


@pytest.fixture
def store(history_store_url: str) -> Any:
    st = open_store(history_store_url)
    yield st
    st.close()


def test_every_version_of_an_object_can_be_rebuilt_and_diffed(store: Store) -> None:
    policy = DiffPolicy(snapshot_every=5)
    history = ObjectHistory("c1", policy=policy)
    versions: list[tuple[float, dict[str, Any]]] = []
    obj = pod("u1", "web", 1, "img:1")
    store.history.write(history.observe("ADDED", obj, observed_at=1000.0))
    versions.append((1000.0, obj))
    for i in range(2, 24):
        obj = pod("u1", "web", i, f"img:{i // 3}", labels={"app": "web", "rev": str(i)})
        store.history.write(history.observe("MODIFIED", obj, observed_at=1000.0 + i))
        versions.append((1000.0 + i, obj))
    store.history.write(history.observe("DELETED", obj, observed_at=1100.0))

    timeline = store.history.timeline(source="c1", kind="Pod", namespace="ml", name="web")
    assert [c.change_type for c in timeline] == ["added"] + ["modified"] * 22 + ["deleted"]
    assert [c.version_seq for c in timeline] == list(range(1, 25))
    assert sum(1 for c in timeline if c.snapshot is not None) == 1 + 4  # first + every 5th
    for at, expected in versions:
        got = store.history.object_at("Pod", "ml", "web", at + 0.5)
        assert got is not None and not got.deleted
        assert got.object == normalize(expected, policy)
        assert got.resource_version == expected["metadata"]["resourceVersion"]
    after = store.history.object_at("Pod", "ml", "web", 1200.0)
    assert after is not None and after.deleted
    assert store.history.object_at("Pod", "ml", "web", 999.0) is None
    d = store.history.diff("Pod", "ml", "web", 1002.5, 1009.5)
    assert {"op": "replace", "path": "/spec/containers/0/image", "value": "img:3"} in d.patch
    assert store.history.kind_cursor("c1", kind_key("v1", "Pod")) is not None
    assert store.history.object_states("c1") == {}


def test_relist_after_a_restart_records_what_changed_while_away(store: Store) -> None:
    history = ObjectHistory("c1")
    a, b, c = pod("ua", "a", 1, "x:1"), pod("ub", "b", 2, "x:1"), pod("uc", "c", 3, "x:1")
    batch = Batch()
    for o in (a, b, c):
        batch.extend(history.observe("ADDED", o, observed_at=10.0))
    store.history.write(batch)
    # The recorder restarts: a fresh core loaded from the store.
    restarted = ObjectHistory("c1", store.history.object_states("c1"))
    assert len(restarted) == 3
    b2 = pod("ub", "b", 7, "x:2")
    d = pod("ud", "d", 8, "x:1")
    items = [copy.deepcopy(o) for o in (a, b2, d)]
    for o in items:
        del o["apiVersion"], o["kind"]
    relist = restarted.relist("v1", "Pod", items, resource_version="9", observed_at=20.0)
    result = store.history.write(relist)
    assert result.inserted["object_changes"] == 3
    changes = [(x.name, x.change_type, x.observed_via) for x in store.history.timeline(since=15.0)]
    assert sorted(changes) == [
        ("b", "modified", "relist"),
        ("c", "deleted", "relist"),
        ("d", "added", "relist"),
    ]
    cur = store.history.kind_cursor("c1", "/v1/Pod")
    assert cur is not None and cur.resource_version == "9"
    # The same relist again (a crash before the recorder knew it was written) changes nothing.
    again = ObjectHistory("c1", store.history.object_states("c1")).relist(
        "v1", "Pod", items, resource_version="9", observed_at=21.0
    )
    assert again.object_changes == []
    assert len(store.history.timeline()) == 6


def test_every_event_occurrence_is_kept_and_found_by_involved_object(store: Store) -> None:
    def ev(count: int, rv: int) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "ml", "uid": "e1", "resourceVersion": str(rv)},
            "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "web", "uid": "u1"},
            "reason": "BackOff",
            "type": "Warning",
            "message": "Back-off restarting failed container",
            "count": count,
            "lastTimestamp": f"2026-11-29T10:00:{count:02d}Z",
        }

    batch = Batch(kube_events=[event_record("c1", ev(n, 100 + n), observed_at=50.0 + n) for n in (1, 2, 3)])
    assert store.history.write(batch).inserted["kube_events"] == 3
    assert store.history.write(batch).inserted["kube_events"] == 0
    found = store.history.events(involved_uid="u1")
    assert [e.count for e in found] == [1, 2, 3]
    assert found[0].reason == "BackOff"
    assert found[2].event_time is not None


def test_engine_entries_gaps_restarts_and_outbox_round_trip(store: Store) -> None:
    entry = EngineEntry("cache", "slowlog", "run", "7", 5.0, 6.0, {"args": ["GET", "k"]})
    gap = Gap("cache", "slowlog", "run:3-6", 6.0, 4, "ring overwrote entries before they were read")
    restart = Restart("p1", "ml", "web", "main", "regular", 3, 7.0, "OOMKilled", 137, {"terminated": {}})
    batch = Batch(
        engine_entries=[entry],
        gaps=[gap],
        restarts=[restart],
        restart_counts=[RestartCount("p1", "main", "ml", "web", 3)],
    )
    store.history.write(batch)
    store.history.write(batch)
    assert [e.payload for e in store.history.engine_entries(target="cache")] == [{"args": ["GET", "k"]}]
    assert [g.lost for g in store.history.gaps()] == [4]
    assert [r.exit_code for r in store.history.restarts(namespace="ml")] == [137]
    assert store.restart_records.restart_counts()[("p1", "main")].restart_count == 3

    first = store.outbox.enqueue("slack", {"text": "web restarted"}, "p1/main/3", now=100.0)
    assert first is not None
    assert store.outbox.enqueue("slack", {"text": "dup"}, "p1/main/3", now=101.0) is None
    second = store.outbox.enqueue("slack", {"text": "other"}, "p1/main/4", now=102.0)
    assert second is not None
    assert [i.id for i in store.outbox.claim_due(101.0, 10)] == [first.id]
    assert store.outbox.claim_due(101.0, 10) == []  # leased
    store.outbox.mark_retry(first.id, at=200.0, error="HTTP 500", now=110.0)
    claimed = store.outbox.claim_due(150.0, 10)
    assert [i.id for i in claimed] == [second.id]
    store.outbox.mark_sent(second.id, now=151.0)
    retried = store.outbox.claim_due(200.0, 10)
    assert [(i.id, i.attempts, i.last_error) for i in retried] == [(first.id, 2, "HTTP 500")]
    store.outbox.mark_dead(first.id, "gave up", now=201.0)
    assert [(i.state, i.attempts) for i in store.outbox.items()] == [("dead", 2), ("sent", 1)]

    # a release gives claimed items back, due later, without counting the claim; claims go in enqueue order
    third = store.outbox.enqueue("slack", {"text": "third"}, "p1/main/5", now=300.0)
    fourth = store.outbox.enqueue("slack", {"text": "fourth"}, "p1/main/6", now=301.0)
    assert third is not None and fourth is not None
    assert [i.id for i in store.outbox.claim_due(302.0, 10)] == [third.id, fourth.id]
    store.outbox.release([fourth.id, third.id], 310.0, now=302.0)
    store.outbox.release([first.id], 310.0, now=302.0)  # dead items stay dead
    assert store.outbox.claim_due(309.0, 10) == []
    again = store.outbox.claim_due(310.0, 10)
    assert [(i.id, i.attempts) for i in again] == [(third.id, 1), (fourth.id, 1)]
    assert (store.outbox.item(first.id) or first).state == "dead" and store.outbox.item(10_000) is None


def test_retention_by_age_keeps_every_later_version_rebuildable(store: Store) -> None:
    history = ObjectHistory("c1", policy=DiffPolicy(snapshot_every=4))
    objs = []
    for i in range(1, 13):
        o = pod("u1", "web", i, f"img:{i}")
        objs.append(o)
        store.history.write(history.observe("ADDED" if i == 1 else "MODIFIED", o, observed_at=float(i * 10)))
    gone = pod("u2", "old", 1, "img:1")
    store.history.write(history.observe("ADDED", gone, observed_at=1.0))
    store.history.write(history.observe("DELETED", gone, observed_at=2.0))
    store.history.write(
        Batch(engine_entries=[EngineEntry("c", "slowlog", "r", str(i), i, float(i), {}) for i in range(100)])
    )
    deleted = apply_retention(store.retention, RetentionPolicy(max_age_s=1000.0 - 65.0), now=1000.0)
    assert deleted > 0
    remaining = store.history.timeline(uid="u1")
    assert remaining[0].version_seq == 4  # newest snapshot before the cutoff is kept
    for i in range(7, 13):
        got = store.history.object_at("Pod", "ml", "web", i * 10 + 1.0)
        assert got is not None and got.object["spec"]["containers"][0]["image"] == f"img:{i}"
    assert store.history.timeline(uid="u2") == []
    assert len(store.history.engine_entries(target="c")) == 100 - 65


def test_no_secret_value_is_stored_anywhere(store: Store) -> None:
    planted = "planted-value-6f1c0a9e-42"
    encoded = base64.b64encode(planted.encode()).decode()
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "db",
            "namespace": "ml",
            "uid": "s1",
            "resourceVersion": "1",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": f'{{"data":{{"pw":"{encoded}"}}}}'
            },
        },
        "data": {"pw": encoded},
        "stringData": {"raw": planted},
    }
    history = ObjectHistory("c1", redactor=store.keys.redactor())
    store.history.write(history.observe("ADDED", secret, observed_at=1.0))
    changed = copy.deepcopy(secret)
    changed["metadata"]["resourceVersion"] = "2"
    changed["data"]["other"] = encoded
    store.history.write(history.observe("MODIFIED", changed, observed_at=2.0))
    store.history.write(history.relist("v1", "Secret", [], resource_version="3", observed_at=3.0))
    cells = list(store.database.dump_all_text())
    # the Secret was stored, as metadata, key names and a keyed hash per value
    assert any("'pw': '[REDACTED:" in c for c in cells)
    assert not [c for c in cells if planted in c or encoded in c]


def test_bad_database_urls_are_one_line_errors(tmp_path: Any) -> None:
    cases = [
        "mysql://u@127.0.0.1/db",
        "postgresql://",
        f"postgresql://capstan@127.0.0.1:{free_port()}/capstan",
        str(tmp_path / "missing-dir" / "h.db"),
        "sqlite://",
    ]
    for url in cases:
        with pytest.raises(UserError) as info:
            open_store(url)
        message = str(info.value)
        assert "\n" not in message
        assert "database" in message


def test_chat_threads_survive_a_reopen_and_the_first_one_stays(store: Store) -> None:
    assert store.threads.get("ml/Deployment/web") is None
    store.threads.put("ml/Deployment/web", "C1", "1700000000.000100", now=100.0)
    store.threads.put("ml/Deployment/web", "C1", "1700000099.000100", now=101.0)  # a later put is ignored
    assert store.threads.get("ml/Deployment/web") == ("C1", "1700000000.000100")
    store.threads.put("ml/Deployment/old", "C1", "1.0", now=10.0)
    store.retention.prune_before(50.0)
    assert store.threads.get("ml/Deployment/old") is None
    assert store.threads.get("ml/Deployment/web") is not None


def test_the_parts_share_one_database_and_restart_records_take_only_restart_rows(store: Store) -> None:
    restart = Restart("p2", "ml", "api", "main", "regular", 1, 8.0, "Error", 1, {})
    store.restart_records.write(
        Batch(restarts=[restart], restart_counts=[RestartCount("p2", "main", "ml", "api", 1)])
    )
    assert [r.pod for r in store.history.restarts(namespace="ml")] == ["api"]  # readers list them as history
    assert store.restart_records.restart_counts()[("p2", "main")].restart_count == 1
    entry = EngineEntry("cache", "slowlog", "run", "8", 5.0, 6.0, {})
    with pytest.raises(ValueError, match="only restarts"):
        store.restart_records.write(Batch(engine_entries=[entry], restarts=[restart]))
    assert store.database.count("engine_entries") == 0  # nothing of the refused batch was written
    seen: list[Batch] = []
    store.history.add_commit_listener(seen.append)  # one write path: a restart-record commit is heard too
    store.restart_records.write(Batch(restart_counts=[RestartCount("p2", "main", "ml", "api", 2)]))
    assert len(seen) == 1 and store.restart_records.restart_counts()[("p2", "main")].restart_count == 2


def test_awkward_text_comes_back_exactly_from_the_state_and_the_history(store: Store) -> None:
    """Quotes, backslashes, braces, commas, NULL and non-ASCII text in names and values: what an array literal or
    COPY would have to escape comes back byte for byte (PostgreSQL gets the arrays as binary parameters)."""
    awkward = 'a "quoted" \\back\\slash {brace}, comma; NULL ☃ é \t tab'
    obj = pod("u-awk", "we\\ird,{name}", 7, awkward, labels={"NULL": "", "q": '"', "b": "\\"})
    history = ObjectHistory("awk")
    store.history.write(history.observe("ADDED", obj, observed_at=2000.0))
    changed = copy.deepcopy(obj)
    changed["metadata"]["resourceVersion"] = "8"
    changed["spec"]["containers"][0]["image"] = awkward + " 2"
    store.history.write(history.observe("MODIFIED", changed, observed_at=2001.0))
    state = store.history.object_states("awk")["u-awk"]
    assert state.name == "we\\ird,{name}" and state.object == normalize(changed, DiffPolicy())
    timeline = store.history.timeline(source="awk", kind="Pod", namespace="ml", name="we\\ird,{name}")
    assert timeline[0].snapshot == normalize(obj, DiffPolicy())
    assert timeline[1].patch == [
        {"op": "replace", "path": "/spec/containers/0/image", "value": awkward + " 2"}
    ]


def test_a_batch_of_many_statements_inserts_each_change_once_and_keeps_every_last_state(store: Store) -> None:
    # SQLite writes 256 rows a statement: 3 versions of 300 objects cross every boundary, a change repeated in the
    # same batch (a worker's result applied twice) lands in another statement than its first copy, and the whole
    # batch written again inserts nothing
    history = ObjectHistory("c1")
    batch = Batch()
    for version in range(1, 4):
        for k in range(300):
            obj = pod(f"u{k:03d}", f"p{k:03d}", version * 1000 + k, f"img:{version}")
            batch.extend(
                history.observe("ADDED" if version == 1 else "MODIFIED", obj, observed_at=10.0 + version)
            )
    batch.object_changes.append(batch.object_changes[3])
    assert store.history.write(batch).inserted["object_changes"] == 900
    assert store.history.write(batch).inserted.get("object_changes", 0) == 0
    states = store.history.object_states("c1")
    assert len(states) == 300
    assert {st.resource_version for st in states.values()} == {str(3000 + k) for k in range(300)}
    assert states["u299"].full_object()["spec"]["containers"][0]["image"] == "img:3"
    timeline = store.history.timeline(source="c1", kind="Pod", namespace="ml", name="p257")
    assert [(c.change_type, c.version_seq) for c in timeline] == [
        ("added", 1),
        ("modified", 2),
        ("modified", 3),
    ]


def test_an_old_sqlite_library_s_parameter_limit_gets_smaller_statements(tmp_path: Any) -> None:
    # SQLite before 3.32 takes at most 999 parameters a statement: 256 rows of 13 columns would be refused
    import sqlite3

    from sqlalchemy import event

    store = open_store(str(tmp_path / "old.db"))
    try:
        engine = store.database.write_sql_engine
        engine.dispose()
        limits: list[int] = []

        @event.listens_for(engine, "connect")
        def _old_limit(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
            limits.append(dbapi_conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))

        history = ObjectHistory("c1")
        batch = Batch()
        for k in range(300):
            batch.extend(
                history.observe("ADDED", pod(f"u{k:03d}", f"p{k:03d}", k + 1, "img:1"), observed_at=10.0)
            )
        assert store.history.write(batch).inserted["object_changes"] == 300
        assert limits and limits[0] == 999  # the write ran on a connection with the old limit
        assert len(store.history.object_states("c1")) == 300
    finally:
        store.close()
