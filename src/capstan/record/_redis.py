"""The Redis/Valkey collector: fetch SLOWLOG, ACL LOG, COMMANDLOG and CONFIG, plan with the pure core, write.

One :class:`RedisCollector` polls one target. A failing target (unreachable, wrong password, missing permission)
logs one clear line naming it, counts an error, and retries with exponential backoff; it never raises into the
runner, so the other targets keep going. A failed *store* write is different: it stops the recorder loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import redis
from pydantic import Field, model_validator

from capstan.backoff import NO_JITTER, Backoff
from capstan.config import StrictModel
from capstan.errors import UserError
from capstan.record._redis_core import (
    PollPlan,
    RingEntry,
    ServerInfo,
    plan_acllog_without_ids,
    plan_config,
    plan_ring,
    plan_server,
)
from capstan.redact import Redactor
from capstan.store import HistoryMetrics, HistoryWriter, StoreWriteError

log = logging.getLogger(__name__)

RedisLog = Literal["slowlog", "acllog", "commandlog", "config"]
ALL_LOGS: tuple[RedisLog, ...] = ("slowlog", "acllog", "commandlog", "config")
COMMANDLOG_TYPES = ("slow", "large-request", "large-reply")
# NOTE: parameters that change on their own (not operator edits) are not config changes.
VOLATILE_CONFIG = frozenset({"unixsocketperm"})


class RedisTargetConfig(StrictModel):
    """One Redis/Valkey server to record. The password comes from exactly one of password/_env/_file."""

    name: str = Field(min_length=1, max_length=200)
    address: str = Field(description="host:port")
    username: str | None = None
    password: str | None = None
    password_env: str | None = None
    password_file: Path | None = None
    logs: list[RedisLog] = Field(default_factory=lambda: list(ALL_LOGS))
    poll_interval_s: float = Field(default=1.0, gt=0, le=3600)
    timeout_s: float = Field(default=5.0, gt=0, le=120)

    @model_validator(mode="after")
    def _one_password_source(self) -> RedisTargetConfig:
        given = [n for n in ("password", "password_env", "password_file") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give only one of {', '.join(given)}")
        host, sep, port = self.address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"address {self.address!r} is not host:port")
        return self

    def host_port(self) -> tuple[str, int]:
        host, _, port = self.address.rpartition(":")
        return host, int(port)

    def resolve_password(self) -> str | None:
        """The password from config, the environment or a file (e.g. a mounted Secret); one clear error if missing."""
        if self.password_env is not None:
            value = os.environ.get(self.password_env)
            if value is None:
                raise UserError(
                    f"redis target {self.name!r}: environment variable {self.password_env} is not set"
                )
            return value
        if self.password_file is not None:
            try:
                return self.password_file.read_text(encoding="utf-8").rstrip("\n")
            except OSError as exc:
                raise UserError(
                    f"redis target {self.name!r}: password_file {self.password_file}: {exc.strerror}"
                ) from None
        return self.password


def _s(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    return str(value)


def _command(client: redis.Redis, *args: str) -> Any:
    """A raw command: the server's reply without redis-py's per-command parsing (which drops detail)."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _pairs(flat: list[Any] | dict[Any, Any]) -> dict[str, Any]:
    """A RESP2 flat key/value list or a RESP3 map -> dict with str keys."""
    if isinstance(flat, dict):
        return {_s(k): v for k, v in flat.items()}
    return {_s(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def server_info(info: dict[str, Any]) -> ServerInfo:
    """INFO server -> which server process this is: Valkey says ``server_name: valkey`` and its own
    ``valkey_version`` (its ``redis_version`` is the Redis version it is compatible with); Redis says neither."""
    name = _s(info.get("server_name", "valkey" if "valkey_version" in info else "redis")).lower()
    return ServerInfo(
        run_id=_s(info.get("run_id", "")),
        uptime_s=float(info.get("uptime_in_seconds", 0)),
        version=_s(info.get("valkey_version", info.get("redis_version", ""))),
        name=name,
    )


def parse_slowlog(raw: list[Any], redactor: Redactor | None = None) -> list[RingEntry]:
    """SLOWLOG GET / COMMANDLOG GET raw replies: [id, unix_ts, duration_or_size, [args], client_addr, client_name];
    the command's credentials and secret values redacted (:meth:`Redactor.redis_command`)."""
    r = redactor if redactor is not None else Redactor()
    out = []
    for item in raw:
        entry_id, ts, value, args = int(item[0]), int(item[1]), int(item[2]), item[3]
        payload: dict[str, Any] = {
            "id": entry_id,
            "value": value,
            "args": r.redis_command([_s(a) for a in args]),
            "client_address": _s(item[4]) if len(item) > 4 else "",
            "client_name": r.text(_s(item[5])) if len(item) > 5 else "",
        }
        out.append(RingEntry(entry_id, float(ts), payload))
    return out


def _acl_fields(d: dict[str, Any]) -> dict[str, Any]:
    """The fields every ACL LOG entry has, with or without an ``entry-id``."""
    return {
        "count": int(d.get("count", 0)),
        "reason": _s(d.get("reason", "")),
        "context": _s(d.get("context", "")),
        "object": _s(d.get("object", "")),
        "username": _s(d.get("username", "")),
        "client_info": _s(d.get("client-info", "")),
    }


def parse_acllog(
    raw: list[Any], redactor: Redactor | None = None
) -> tuple[list[RingEntry], list[dict[str, Any]]]:
    """ACL LOG raw reply -> (entries keyed by ``entry-id`` (Redis 7.2+, Valkey), entries without one, newest
    first, for older servers); every text field redacted (:meth:`Redactor.json`)."""
    r = redactor if redactor is not None else Redactor()
    out = []
    legacy: list[dict[str, Any]] = []
    for item in raw:
        d = _pairs(item)
        if "entry-id" not in d:
            legacy.append(r.json({**_acl_fields(d), "age_seconds": float(_s(d.get("age-seconds", 0)))}))
            continue
        payload: dict[str, Any] = {
            "entry_id": int(d["entry-id"]),
            **_acl_fields(d),
            "timestamp_created_ms": int(d.get("timestamp-created", 0)),
            "timestamp_last_updated_ms": int(d.get("timestamp-last-updated", 0)),
        }
        payload = r.json(payload)
        out.append(
            RingEntry(
                payload["entry_id"],
                payload["timestamp_last_updated_ms"] / 1000.0,
                payload,
                updated_ms=payload["timestamp_last_updated_ms"],
            )
        )
    return out, legacy


class RedisCollector:
    """Polls one Redis/Valkey target and writes its logs to the store (see the module docstring)."""

    kind = "redis"

    def __init__(
        self,
        target: RedisTargetConfig,
        store: HistoryWriter,
        *,
        clock: Callable[[], float] = time.time,
        metrics: HistoryMetrics | None = None,
        max_backoff_s: float = 60.0,
        redactor: Redactor | None = None,
    ) -> None:
        self.target = target
        self.name = f"redis:{target.name}"
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._max_backoff = max_backoff_s
        # None: the store's keyed redactor, read on the first poll (so a changed secret parameter shows as a change)
        self._redactor = redactor
        self._client: redis.Redis | None = None
        self._commandlog_supported: bool | None = None
        self.last_error: str | None = None
        self.polls = 0

    def _connect(self) -> redis.Redis:
        if self._client is None:
            host, port = self.target.host_port()
            self._client = redis.Redis(
                host=host,
                port=port,
                username=self.target.username,
                password=self.target.resolve_password(),
                socket_timeout=self.target.timeout_s,
                socket_connect_timeout=self.target.timeout_s,
                decode_responses=False,
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def poll_once(self) -> PollPlan:
        """Fetch everything once, write it in one transaction, return what was written.

        Raises ``redis.RedisError`` for target problems and :class:`StoreWriteError` for store problems.
        """
        client = self._connect()
        name = self.target.name
        if self._redactor is None:
            self._redactor = self._store.redactor()
        redactor = self._redactor
        server = server_info(client.info("server"))
        now = self._clock()
        plan = PollPlan()
        entries, cursor = plan_server(
            name, server, self._store.engine_cursor(name, "server"), observed_at=now
        )
        plan.add(entries, [], cursor)
        logs = set(self.target.logs)
        if "slowlog" in logs:
            raw = _command(client, "SLOWLOG", "GET", "-1")
            self._ring(plan, "slowlog", server.run_id, parse_slowlog(raw, redactor), now)
        if "acllog" in logs:
            max_len = int(
                _pairs(_command(client, "CONFIG", "GET", "acllog-max-len")).get("acllog-max-len", 128)
            )
            raw = _command(client, "ACL", "LOG", str(max(max_len, 1)))
            with_ids, without_ids = parse_acllog(raw, redactor)
            if without_ids:
                acl_cursor = self._store.engine_cursor(name, "acllog")
                entries, acur = plan_acllog_without_ids(
                    name, server.run_id, acl_cursor, without_ids, observed_at=now
                )
                plan.add(entries, [], acur)
            else:
                self._ring(plan, "acllog", server.run_id, with_ids, now, mutable=True)
        if "commandlog" in logs and self._commandlog_supported is not False:
            for ctype in COMMANDLOG_TYPES:
                try:
                    raw = _command(client, "COMMANDLOG", "GET", "-1", ctype)
                except redis.ResponseError as exc:
                    if "unknown command" in str(exc).lower():
                        self._commandlog_supported = False
                        log.info("redis target %s has no COMMANDLOG (Valkey 8.1+ only); skipping it", name)
                        break
                    raise
                self._commandlog_supported = True
                self._ring(plan, f"commandlog-{ctype}", server.run_id, parse_slowlog(raw, redactor), now)
        if "config" in logs:
            config = {_s(k): _s(v) for k, v in _pairs(_command(client, "CONFIG", "GET", "*")).items()}
            entries, ccur = plan_config(
                name, server.run_id, self._store.engine_cursor(name, "config"), config, observed_at=now,
                ignore=VOLATILE_CONFIG, redact=redactor.named,
            )  # fmt: skip
            plan.add(entries, [], ccur)
        plan.batch.engine_entries[:] = server.stamp(plan.batch.engine_entries)
        self._store.write(plan.batch)
        self.polls += 1
        return plan

    def _ring(
        self,
        plan: PollPlan,
        log_name: str,
        run_id: str,
        entries: list[RingEntry],
        now: float,
        *,
        mutable: bool = False,
    ) -> None:
        cursor = self._store.engine_cursor(self.target.name, log_name)
        out, gaps, new_cursor = plan_ring(
            self.target.name, log_name, run_id, cursor, entries, observed_at=now, mutable=mutable
        )
        plan.add(out, gaps, new_cursor)

    def describe_error(self, exc: BaseException) -> str:
        """One line naming the target and what went wrong."""
        t = self.target
        if isinstance(exc, redis.AuthenticationError) or "WRONGPASS" in str(exc) or "NOAUTH" in str(exc):
            return f"redis target {t.name!r} ({t.address}): authentication failed (check username/password)"
        if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
            return f"redis target {t.name!r} ({t.address}): unreachable ({exc})"
        if "NOPERM" in str(exc):
            return f"redis target {t.name!r} ({t.address}): permission denied ({exc})"
        return f"redis target {t.name!r} ({t.address}): {type(exc).__name__}: {exc}"

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set; target errors back off exponentially, store errors propagate."""
        # a failing target is retried at twice the poll interval, doubling up to the cap, without jitter
        backoff = Backoff(base=2 * self.target.poll_interval_s, cap=self._max_backoff, jitter=NO_JITTER)
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.poll_once)
                self.last_error = None
                delay = self.target.poll_interval_s
                backoff.reset()
            except StoreWriteError:
                raise
            except (redis.RedisError, OSError, UserError) as exc:
                message = str(exc) if isinstance(exc, UserError) else self.describe_error(exc)
                if message != self.last_error:
                    log.error("%s; retrying with backoff", message)
                self.last_error = message
                if self._metrics is not None:
                    self._metrics.collector_errors.labels(self.kind, self.target.name).inc()
                self.close()
                delay = backoff.next()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
        self.close()
