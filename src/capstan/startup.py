"""Start-up of the long-running components: what a failure to reach the store or the API server means, and the one
wait for them.

``capstan record``, ``capstan restarts run``, ``capstan mcp serve`` and ``capstan capacity run`` run in pods, where a
process that exits is restarted with a growing delay (CrashLoopBackOff) and a process that is not ready is only left
out of its Service. A failure to reach what a component needs is one of two things:

- *transient*: the server is not there yet or not answering — a refused connection, a name that does not resolve
  yet, a timeout, a 5xx or 429 from the API server, PostgreSQL starting up, shutting down or out of connection
  slots. Waiting fixes it, so the component waits: not ready, one log line per failed round, backing off.
- a *configuration* error, which no wait fixes — credentials refused (PostgreSQL's password, the API server's
  401), a 403 (RBAC missing), a role or database that does not exist, a certificate that does not verify, and
  everything found before any connection is made (the files, a URL's scheme, the kubeconfig, a pod's service
  account files). It is one line and exit 2 before anything starts.

:func:`transient_reason` is the one place that tells them apart, through two pure functions of what the driver and
the API server said (:func:`transient_database_failure`, :func:`transient_api_failure`); what they do not know is a
configuration error, said in one line, rather than a wait that never ends.

:class:`Startup` is the wait: each round it tries every :class:`Dependency` not reached yet, in order (so a
configuration error in a later one is found while an earlier one is still down), then backs off
(:func:`retry_backoff`: 0.5 s doubling to 30 s, jittered; the RNG and the pause are injected in tests). While it
waits, :meth:`Startup.check` is each dependency's ``/readyz`` check (:mod:`capstan.probes`), so the component's
probe server can run from the first moment. A stop (SIGTERM, SIGINT) ends the wait at once, whatever attempt is
running: a blocking attempt (the store's drivers block) runs in a daemon thread (:func:`capstan.aio.in_daemon_thread`)
that nothing waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from capstan.backoff import Backoff, Jitter
from capstan.errors import UserError

if TYPE_CHECKING:
    from capstan.kube import KubeClient, KubeConnect
    from capstan.probes import Check

log = logging.getLogger(__name__)

T = TypeVar("T")
Attempt = Callable[[], Awaitable[None]]
Pause = Callable[[float, asyncio.Event], Awaitable[bool]]

# ~35 days of rounds 30 s apart: the wait is bounded, and far longer than any database or API server takes to start
MAX_ROUNDS = 100_000

# NOTE: lower-case fragments of libpq's (and SQLite's) messages. Refusals are looked for first: a message naming
# both (libpq joins the failures of several hosts) is a configuration error.
_DATABASE_REFUSALS = (
    "password authentication failed",
    "authentication failed",
    "no password supplied",
    "does not exist",  # role or database
    "no pg_hba.conf entry",
    "pg_hba.conf rejects",
    "permission denied",
    "certificate verify failed",
    "server does not support ssl",
)
_DATABASE_NOT_YET = (
    "connection refused",
    "could not translate host name",
    "failed to resolve host",
    "name or service not known",
    "temporary failure in name resolution",
    "nodename nor servname",
    "timeout expired",
    "timed out",
    "no route to host",
    "network is unreachable",
    "connection reset",
    "server closed the connection unexpectedly",
    "the database system is starting up",
    "the database system is shutting down",
    "the database system is in recovery mode",
    "the database system is not yet accepting connections",
    "the database system is not accepting connections",
    "too many connections",
    "too many clients",
    "remaining connection slots are reserved",
    "database is locked",
)
# an API server whose certificate does not verify is misconfigured (the kubeconfig's CA, the pod's ca.crt)
_API_TLS_REFUSALS = ("certificate_verify_failed", "certificate verify failed", "hostname mismatch")
_API_NOT_ANSWERING = ("ConnectionError", "Timeout", "Credentials")


def transient_database_failure(message: str) -> bool:
    """True when the database driver's ``message`` says the server is not reachable yet (not there, not
    accepting connections, out of slots); False for a refusal (password, role, database, pg_hba.conf, TLS) and
    for anything it does not recognise."""
    text = message.lower()
    if any(fragment in text for fragment in _DATABASE_REFUSALS):
        return False
    return any(fragment in text for fragment in _DATABASE_NOT_YET)


def transient_api_failure(status: int, reason: str, message: str) -> bool:
    """True when the API server did not answer (``status`` 0: a refused or reset connection, a name that does not
    resolve, a timeout, a credential plugin that could not renew the token) or answered 429 or 5xx; False for
    every other answer (401, 403, 404, …) and for a certificate that does not verify."""
    if status == 0:
        text = message.lower()
        return reason in _API_NOT_ANSWERING and not any(f in text for f in _API_TLS_REFUSALS)
    return status == 429 or 500 <= status <= 599


def transient_reason(exc: BaseException) -> str | None:
    """The one line saying why ``exc`` may pass by itself, or None when it is a configuration error (or not a
    failure to reach anything at all, which the caller re-raises)."""
    # NOTE: only a loaded module can have raised its error: a component that never opened a store does not import
    # SQLAlchemy to classify an API error, nor one without a cluster the HTTP client
    store = sys.modules.get("capstan.store._connection")
    if store is not None and isinstance(exc, store.StoreConnectError):
        return str(exc) if transient_database_failure(exc.driver_message) else None
    kube = sys.modules.get("capstan.kube.client")
    if kube is not None and isinstance(exc, kube.ApiError):
        return str(exc) if transient_api_failure(exc.status, exc.reason, exc.message) else None
    return None


def retry_backoff(rng: random.Random | None = None) -> Backoff:
    """The start-up's delays: 0.5 s doubling to 30 s, each ±20 % (replicas started together do not retry in step;
    ``rng`` seeded in tests)."""
    return Backoff(base=0.5, cap=30.0, factor=2.0, jitter=Jitter.around(0.2), rng=rng or random.Random())


async def pause_unless_stopped(delay: float, stop: asyncio.Event) -> bool:
    """Wait ``delay`` seconds or until ``stop``; True when stopped."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=delay)
    return stop.is_set()


@dataclasses.dataclass(frozen=True)
class Dependency:
    """Something a component needs before it starts: its check's name on ``/readyz`` (``store``, ``cluster``),
    what it is in a message (``cluster /path/kubeconfig``), and one attempt to reach it, which raises on failure
    (and keeps what it opened, e.g. :class:`Opening`)."""

    name: str
    what: str
    attempt: Attempt


class Opening(Generic[T]):
    """An attempt that opens something through a blocking call (the store: its drivers block), in a daemon thread;
    ``value`` once it succeeded."""

    def __init__(self, open_: Callable[[], T]) -> None:
        self._open = open_
        self.value: T | None = None

    async def __call__(self) -> None:
        from capstan.aio import in_daemon_thread

        self.value = await in_daemon_thread(self._open, name="capstan-startup")


class ClusterAccess:
    """An attempt to reach the cluster: a client opened through ``connect`` (a kubeconfig's or a pod's account:
    their problems are configuration errors, raised as they are), which must answer ``GET /version`` (a 401 is a
    configuration error, a refused connection is not) and pass ``verify`` (e.g. the Lease read of
    ``--leader-elect``). ``client`` is that client once it did, for the caller to use and close."""

    def __init__(
        self, connect: KubeConnect, verify: Callable[[KubeClient], Awaitable[None]] | None = None
    ) -> None:
        self._connect = connect
        self._verify = verify
        self.client: KubeClient | None = None

    async def __call__(self) -> None:
        client = await self._connect()
        try:
            await client.request("GET", "/version")
            if self._verify is not None:
                await self._verify(client)
        except BaseException:
            await client.close()
            raise
        self.client = client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None


class Startup:
    """The wait for a component's dependencies (see the module docstring); :meth:`reach` runs it once."""

    def __init__(
        self,
        command: str,
        *,
        backoff: Backoff | None = None,
        pause: Pause = pause_unless_stopped,
        max_rounds: int = MAX_ROUNDS,
    ) -> None:
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {max_rounds}")
        self.command = command
        self.backoff = backoff or retry_backoff()
        self.pause = pause
        self.max_rounds = max_rounds
        self.failing: dict[str, str] = {}
        """Each dependency not reached yet that was tried: its last failure."""
        self.reached: set[str] = set()
        self.rounds = 0

    def check(self, name: str) -> Check:
        """Dependency ``name``'s ``/readyz`` check while the wait runs: passed once reached, else its last failure
        (or that it was not tried yet)."""

        async def check() -> str | None:
            if name in self.reached:
                return None
            return self.failing.get(name, "not reached yet (starting)")

        return check

    async def reach(self, dependencies: Sequence[Dependency], stop: asyncio.Event) -> bool:
        """Try every dependency, in order, round after round, until each has been reached once: True then; False
        when ``stop`` is set first (at once, even during an attempt). A transient failure is remembered for
        :meth:`check` and the round ends in one log line and a pause; a configuration error is raised as one
        :class:`~capstan.errors.UserError` line (an API server's refusal too), and anything else as it is.
        After ``max_rounds`` rounds still failing, the last failure is a :class:`~capstan.errors.UserError`."""
        pending = list(dependencies)
        for round_ in range(1, self.max_rounds + 1):
            self.rounds = round_
            failed: list[Dependency] = []
            for dependency in pending:
                reason = await self._attempt(dependency, stop)
                if stop.is_set():
                    return False
                if reason is None:
                    self.reached.add(dependency.name)
                    self.failing.pop(dependency.name, None)
                else:
                    self.failing[dependency.name] = reason
                    failed.append(dependency)
            if not failed:
                return True
            if round_ == self.max_rounds:
                first = failed[0]
                more = f" (still, after {round_} attempts)" if round_ > 1 else ""
                raise UserError(f"{first.what}: {self.failing[first.name]}{more}")
            delay = self.backoff.next()
            log.warning(
                "%s: waiting for %s; attempt %d failed, next in %.1f s",
                self.command,
                "; ".join(f"{d.what}: {self.failing[d.name]}" for d in failed),
                round_,
                delay,
            )
            if await self.pause(delay, stop):
                return False
            pending = failed
        raise AssertionError("unreachable")

    async def _attempt(self, dependency: Dependency, stop: asyncio.Event) -> str | None:
        """One attempt raced against ``stop``: None when it succeeded (or was abandoned for the stop), the reason of
        a transient failure, or the configuration error raised."""
        attempt = asyncio.ensure_future(dependency.attempt())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({attempt, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not attempt.done():
            attempt.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await attempt
            return None
        exc = attempt.exception()
        if exc is None:
            return None
        reason = transient_reason(exc)
        if reason is not None:
            return reason
        kube = sys.modules.get("capstan.kube.client")
        if kube is not None and isinstance(exc, kube.ApiError):
            raise UserError(f"{dependency.what}: {exc}") from None
        raise exc
