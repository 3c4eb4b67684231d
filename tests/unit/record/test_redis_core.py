"""Gap-aware cursor logic of the Redis/Valkey collectors, as pure functions."""

from __future__ import annotations

import pytest

from capstan.record import RingEntry, ServerInfo, plan_config, plan_ring, plan_server
from capstan.record._redis_core import plan_acllog_without_ids
from capstan.store import EngineCursor

pytestmark = pytest.mark.unit


def ring(*ids: int, updated: dict[int, int] | None = None) -> list[RingEntry]:
    updated = updated or {}
    return [RingEntry(i, 100.0 + i, {"id": i}, updated_ms=updated.get(i)) for i in reversed(ids)]


def test_first_poll_takes_everything_without_a_gap() -> None:
    out, gaps, cur = plan_ring("t", "slowlog", "run1", None, ring(5, 6, 7), observed_at=1.0)
    assert [e.native_id for e in out] == ["5", "6", "7"]
    assert gaps == []
    assert cur.last_id == 7


def test_overwritten_entries_become_a_gap_with_the_exact_count() -> None:
    cursor = EngineCursor("t", "slowlog", "run1", 7)
    out, gaps, cur = plan_ring("t", "slowlog", "run1", cursor, ring(20, 21, 22), observed_at=2.0)
    assert [e.native_id for e in out] == ["20", "21", "22"]
    assert [(g.lost, g.detail["first_lost_id"], g.detail["last_lost_id"]) for g in gaps] == [(12, 8, 19)]
    assert cur.last_id == 22


def test_nothing_new_writes_nothing() -> None:
    cursor = EngineCursor("t", "slowlog", "run1", 22)
    out, gaps, cur = plan_ring("t", "slowlog", "run1", cursor, ring(20, 21, 22), observed_at=3.0)
    assert (out, gaps, cur.last_id) == ([], [], 22)


def test_a_new_run_id_is_a_restart_and_ids_below_the_first_seen_are_lost() -> None:
    cursor = EngineCursor("t", "slowlog", "run1", 22)
    out, gaps, cur = plan_ring("t", "slowlog", "run2", cursor, ring(3, 4), observed_at=3.0)
    assert [e.native_id for e in out] == ["3", "4"]
    assert [(g.lost, g.key) for g in gaps] == [(None, "restart:run1->run2"), (3, "run2:0-2")]
    assert (cur.run_id, cur.last_id) == ("run2", 4)


def test_ids_going_backwards_under_the_same_run_id_are_a_reset() -> None:
    cursor = EngineCursor("t", "slowlog", "run1", 50)
    out, gaps, _ = plan_ring("t", "slowlog", "run1", cursor, ring(0, 1), observed_at=3.0)
    assert [e.native_id for e in out] == ["0", "1"]
    assert gaps[0].key.startswith("reset:") and gaps[0].lost is None


def test_mutable_entries_are_re_emitted_when_their_update_time_grows() -> None:
    out, _, cur = plan_ring(
        "t", "acllog", "r", None, ring(1, 2, updated={1: 10, 2: 20}), observed_at=1, mutable=True
    )
    assert len(out) == 2
    out, gaps, cur = plan_ring(
        "t", "acllog", "r", cur, ring(1, 2, updated={1: 10, 2: 25}), observed_at=2, mutable=True
    )
    assert [(e.native_id, e.mutable) for e in out] == [("2", True)]
    assert gaps == []
    out, _, _ = plan_ring(
        "t", "acllog", "r", cur, ring(1, 2, updated={1: 10, 2: 25}), observed_at=3, mutable=True
    )
    assert out == []


def test_server_restart_is_an_entry_only_when_the_run_id_changes() -> None:
    info = ServerInfo("run2", 5.0, "7.0.15")
    entries, cur = plan_server("t", info, None, observed_at=100.0)
    assert entries == [] and cur.run_id == "run2"
    entries, _ = plan_server("t", info, EngineCursor("t", "server", "run1", 0), observed_at=100.0)
    assert [(e.log, e.happened_at, e.payload["previous_run_id"]) for e in entries] == [
        ("restart", 95.0, "run1")
    ]


def test_config_changes_are_one_record_per_parameter_with_monotonic_ids() -> None:
    _, cur = plan_config("t", "r", None, {"a": "1", "b": "2"}, observed_at=1)
    out, cur = plan_config("t", "r", cur, {"a": "1", "b": "3", "c": "x"}, observed_at=2)
    assert [(e.native_id, e.payload["parameter"], e.payload["old"], e.payload["new"]) for e in out] == [
        ("1", "b", "2", "3"),
        ("2", "c", None, "x"),
    ]
    out, cur = plan_config("t", "r", cur, {"a": "1", "b": "3", "c": "x"}, observed_at=3)
    assert out == [] and cur.last_id == 2


def test_acl_entries_without_ids_merge_by_key_and_split_when_the_count_drops() -> None:
    def e(count: int, user: str = "app") -> dict[str, object]:
        return {"count": count, "reason": "auth", "context": "toplevel", "object": "AUTH", "username": user}

    out, cur = plan_acllog_without_ids("t", "r", None, [e(1)], observed_at=1)
    assert [x.native_id for x in out] == ["derived-0"]
    out, cur = plan_acllog_without_ids("t", "r", cur, [e(4)], observed_at=2)
    assert [(x.native_id, x.payload["count"]) for x in out] == [("derived-0", 4)]
    out, cur = plan_acllog_without_ids("t", "r", cur, [e(4)], observed_at=3)
    assert out == []
    out, cur = plan_acllog_without_ids("t", "r", cur, [e(1), e(4), e(2, "bob")], observed_at=4)
    assert sorted((x.native_id, x.payload["count"]) for x in out) == [("derived-1", 1), ("derived-2", 2)]


def test_server_info_tells_valkey_from_redis_and_takes_valkeys_own_version() -> None:
    from capstan.record._redis import server_info

    # as INFO server reads on Valkey 8.1 (whose redis_version is the Redis version it is compatible with) and Redis 7
    valkey = server_info(
        {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "8.1.8", "run_id": "a"}
    )
    redis = server_info({"redis_version": "7.0.15", "run_id": "b", "uptime_in_seconds": 3})
    assert (valkey.name, valkey.version, redis.name, redis.version) == ("valkey", "8.1.8", "redis", "7.0.15")
    assert (
        server_info({"valkey_version": "8.0.1", "run_id": "c"}).name == "valkey"
    )  # no server_name: by version


def test_every_entry_is_stamped_with_the_server_it_came_from() -> None:
    info = ServerInfo("run2", 5.0, "8.1.8", name="valkey")
    out, _, _ = plan_ring("t", "commandlog-slow", "run2", None, ring(0, 1), observed_at=1.0)
    stamped = info.stamp(out)
    assert [(e.native_id, e.payload) for e in stamped] == [
        ("0", {"id": 0, "server": "valkey", "server_version": "8.1.8"}),
        ("1", {"id": 1, "server": "valkey", "server_version": "8.1.8"}),
    ]
    assert [e.payload for e in out] == [{"id": 0}, {"id": 1}]  # the planned entries themselves are unchanged
    _, cur = plan_server("t", info, None, observed_at=10.0)
    assert cur.state == {"version": "8.1.8", "server": "valkey"}
