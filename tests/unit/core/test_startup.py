"""The start-up wait (capstan.startup): which failures are waited for and which are one line, with fake
dependencies, a seeded backoff and a pause that records its delays instead of sleeping."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from sqlalchemy.engine import make_url

from capstan.errors import UserError
from capstan.kube import ApiError
from capstan.startup import (
    Dependency,
    Startup,
    retry_backoff,
    transient_api_failure,
    transient_database_failure,
    transient_reason,
)
from capstan.store import StoreConnectError

pytestmark = pytest.mark.unit

URL = make_url("postgresql+psycopg://capstan:hunter2@db.capstan.svc:5432/history")

# libpq's and SQLite's own first lines (as StoreConnectError keeps them)
WAITED_FOR = [
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused',
    "failed to resolve host 'db.capstan.svc': [Errno -2] Name or service not known",
    'could not translate host name "db" to address: Temporary failure in name resolution',
    'connection failed: connection to server at "10.0.0.7", port 5432 failed: timeout expired',
    "connection failed: FATAL:  the database system is starting up",
    "connection failed: FATAL:  the database system is shutting down",
    "connection failed: FATAL:  sorry, too many clients already",
    "connection failed: FATAL:  remaining connection slots are reserved for roles with the SUPERUSER attribute",
    "server closed the connection unexpectedly",
    "database is locked",
]
REFUSED = [
    'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  password authentication '
    'failed for user "capstan"',
    "connection failed: fe_sendauth: no password supplied",
    'connection failed: FATAL:  role "capstan" does not exist',
    'connection failed: FATAL:  database "history" does not exist',
    'connection failed: FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "capstan", database "history"',
    # several hosts tried: one refused, one down — waiting cannot fix the refusal
    "connection failed: FATAL:  password authentication failed; Multiple connection attempts failed. "
    "connection to server at 10.0.0.8 failed: Connection refused",
    "unable to open database file",
    "something no one has seen before",
]


@pytest.mark.parametrize("message", WAITED_FOR)
def test_a_database_not_there_yet_is_waited_for(message: str) -> None:
    assert transient_database_failure(message)


@pytest.mark.parametrize("message", REFUSED)
def test_a_database_refusal_or_an_unknown_failure_is_a_configuration_error(message: str) -> None:
    assert not transient_database_failure(message)


@pytest.mark.parametrize(
    ("status", "reason", "message", "transient"),
    [
        (0, "ConnectionError", "GET /version: [Errno 111] Connection refused", True),
        (0, "ConnectionError", "GET /version: [Errno -2] Name or service not known", True),
        (0, "Timeout", "GET /version: no answer within 30 s", True),
        (0, "Credentials", "GET /version: the credential plugin timed out", True),
        (503, "ServiceUnavailable", "etcd is not ready", True),
        (500, "InternalError", "boom", True),
        (429, "TooManyRequests", "slow down", True),
        (
            0,
            "ConnectionError",
            "GET /version: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed",
            False,
        ),
        (401, "Unauthorized", "Unauthorized", False),
        (403, "Forbidden", 'leases.coordination.k8s.io "x" is forbidden', False),
        (404, "NotFound", "the server could not find the requested resource", False),
        (0, "TooManyPages", "list pods: more than 100000 pages", False),
    ],
)
def test_an_api_server_not_answering_or_5xx_is_waited_for_and_its_refusals_are_not(
    status: int, reason: str, message: str, transient: bool
) -> None:
    assert transient_api_failure(status, reason, message) is transient


def test_the_reason_is_the_error_s_one_line_without_the_url_s_password() -> None:
    down = StoreConnectError(URL, Exception(WAITED_FOR[0] + "\n\tIs the server running on that host?"))
    reason = transient_reason(down)
    assert reason is not None and "hunter2" not in reason and "\n" not in reason
    assert reason.startswith("database 'postgresql+psycopg://capstan:***@db.capstan.svc:5432/history': ")
    assert transient_reason(StoreConnectError(URL, Exception(REFUSED[0]))) is None
    assert transient_reason(ApiError(0, "ConnectionError", "GET /version: refused")) == (
        "0 ConnectionError: GET /version: refused"
    )
    assert transient_reason(ApiError(401, "Unauthorized", "Unauthorized")) is None
    assert transient_reason(UserError("kubeconfig k: invalid YAML")) is None
    assert transient_reason(RuntimeError("a bug")) is None


class Flaky:
    """An attempt that raises each of ``failures`` in turn, then succeeds."""

    def __init__(self, *failures: BaseException) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)


def refused_connection() -> ApiError:
    return ApiError(0, "ConnectionError", "GET /version: [Errno 111] Connection refused")


def store_down() -> StoreConnectError:
    return StoreConnectError(URL, Exception(WAITED_FOR[0]))


class Pauses:
    """The pause: records each delay and what /readyz would say during it, never sleeps."""

    def __init__(self, startup: Startup | None = None) -> None:
        self.delays: list[float] = []
        self.readiness: list[dict[str, str | None]] = []
        self.startup = startup

    async def __call__(self, delay: float, stop: asyncio.Event) -> bool:
        self.delays.append(delay)
        if self.startup is not None:
            self.readiness.append({n: await self.startup.check(n)() for n in ("cluster", "store")})
        return stop.is_set()


async def test_transient_failures_are_retried_with_backoff_and_one_log_line_each_then_it_proceeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Flaky(refused_connection())
    store = Flaky(store_down(), store_down(), store_down())
    startup = Startup("capstan test", backoff=retry_backoff(random.Random(0)))
    pauses = Pauses(startup)
    startup.pause = pauses
    deps = [Dependency("cluster", "cluster k", cluster), Dependency("store", "store", store)]
    assert await startup.check("store")() == "not reached yet (starting)"
    with caplog.at_level(logging.WARNING, logger="capstan.startup"):
        assert await startup.reach(deps, asyncio.Event())
    assert (cluster.calls, store.calls) == (2, 4)  # a dependency reached is not tried again
    expected = retry_backoff(random.Random(0))
    assert pauses.delays == [expected.next() for _ in range(3)]
    assert 0.4 <= pauses.delays[0] <= 0.6 and 0.8 <= pauses.delays[1] <= 1.2  # 0.5 s doubling, ±20 %
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and all("\n" not in line for line in lines)
    assert lines[0].startswith("capstan test: waiting for cluster k: 0 ConnectionError: GET /version: ")
    assert (
        "; store: database 'postgresql+psycopg://capstan:***@" in lines[0] and "attempt 1 failed" in lines[0]
    )
    assert "cluster" not in lines[1] and "attempt 2 failed, next in " in lines[1]
    assert not any("hunter2" in line for line in lines)
    first, second = pauses.readiness[0], pauses.readiness[1]
    assert first["cluster"] == "0 ConnectionError: GET /version: [Errno 111] Connection refused"
    assert first["store"] is not None and "Connection refused" in first["store"]
    assert second["cluster"] is None and second["store"] == first["store"]
    assert await startup.check("store")() is None and not startup.failing


async def test_the_delays_are_capped_at_30_s() -> None:
    backoff = retry_backoff(random.Random(1))
    delays = [backoff.next() for _ in range(12)]
    assert max(delays) <= 36.0 and min(delays[8:]) >= 24.0


async def test_a_configuration_error_ends_the_wait_at_once_while_another_dependency_is_down() -> None:
    pauses = Pauses()
    startup = Startup("capstan test", pause=pauses)
    cluster = Flaky(refused_connection())
    refused = StoreConnectError(URL, Exception(REFUSED[0]))
    with pytest.raises(StoreConnectError) as raised:
        await startup.reach(
            [Dependency("cluster", "cluster k", cluster), Dependency("store", "store", Flaky(refused))],
            asyncio.Event(),
        )
    assert raised.value is refused and not pauses.delays  # found in the first round, before any pause
    with pytest.raises(UserError, match=r"^cluster k: 401 Unauthorized: Unauthorized$"):
        await startup.reach(
            [Dependency("cluster", "cluster k", Flaky(ApiError(401, "Unauthorized", "Unauthorized")))],
            asyncio.Event(),
        )
    with pytest.raises(RuntimeError, match="a bug"):  # not a failure to reach anything: raised as it is
        await Startup("t", pause=pauses).reach(
            [Dependency("x", "x", Flaky(RuntimeError("a bug")))], asyncio.Event()
        )


async def test_a_stop_ends_the_wait_at_once_even_during_an_attempt() -> None:
    stop = asyncio.Event()
    started = asyncio.Event()

    async def hangs() -> None:
        started.set()
        await asyncio.sleep(3600)

    startup = Startup("capstan test", pause=Pauses())
    waiting = asyncio.create_task(startup.reach([Dependency("store", "store", hangs)], stop))
    await started.wait()
    stop.set()
    assert await asyncio.wait_for(waiting, 10) is False
    # stopped during the pause
    stop2 = asyncio.Event()

    async def pause_then_stop(delay: float, event: asyncio.Event) -> bool:
        stop2.set()
        return True

    startup = Startup("capstan test", pause=pause_then_stop)
    assert await startup.reach([Dependency("store", "store", Flaky(store_down()))], stop2) is False


async def test_one_round_only_is_the_failure_s_one_line_and_the_rounds_are_bounded() -> None:
    once = Startup("capstan test", max_rounds=1, pause=Pauses())
    with pytest.raises(UserError) as raised:
        await once.reach([Dependency("store", "store", Flaky(store_down()))], asyncio.Event())
    assert str(raised.value).startswith("store: database 'postgresql+psycopg://capstan:***@")
    assert "after" not in str(raised.value)
    pauses = Pauses()
    bounded = Startup("capstan test", max_rounds=3, pause=pauses)
    always = Flaky(*[store_down() for _ in range(10)])
    with pytest.raises(UserError, match=r"\(still, after 3 attempts\)$"):
        await bounded.reach([Dependency("store", "store", always)], asyncio.Event())
    assert always.calls == 3 and len(pauses.delays) == 2
    with pytest.raises(ValueError):
        Startup("t", max_rounds=0)


async def test_a_blocking_attempt_runs_in_a_thread_that_a_stop_does_not_wait_for() -> None:
    import threading

    from capstan.aio import in_daemon_thread
    from capstan.startup import Opening

    opening = Opening(lambda: threading.current_thread().name)
    await opening()
    assert opening.value == "capstan-startup"
    release = threading.Event()
    blocked = Opening(lambda: release.wait(60))
    stop = asyncio.Event()
    waiting = asyncio.create_task(Startup("t", pause=Pauses()).reach([Dependency("s", "s", blocked)], stop))
    await asyncio.sleep(0.05)
    stop.set()
    assert await asyncio.wait_for(waiting, 10) is False and blocked.value is None
    release.set()
    with pytest.raises(ZeroDivisionError):
        await in_daemon_thread(lambda: 1 // 0)
