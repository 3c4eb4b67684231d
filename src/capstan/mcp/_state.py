"""What the tools read: a :class:`State` (one redacted cluster snapshot, its diagnosis, the history store) from a
:class:`StateSource`.

The snapshot is redacted once, when the state is made (:func:`redacted_snapshot`: every object through the
redactor's ``kube_object``, Events through ``json``, log tails and recorded-change summaries through ``text``), so no
tool can reach a value the redactor has not seen; the server passes every answer through the redactor once more on
the way out. :class:`LiveSource` reads the cluster with :func:`capstan.diagnose.read_snapshot` and keeps the state
for ``max_age_s`` seconds (one read at a time: concurrent calls share it), so an agent's burst of calls costs one
read; :class:`FixedSource` serves one snapshot (tests, benches). A :class:`LogReader` reads current and previous
container logs for the ``logs`` and ``diagnose`` tools (live: the pod-log API; fixed: the snapshot's tails).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from capstan.diagnose import Diagnosis, Snapshot, diagnose
from capstan.redact import Redactor

if TYPE_CHECKING:
    from capstan.kube import KubeClient
    from capstan.store import HistoryReader


@dataclass(frozen=True)
class State:
    """One redacted snapshot and what the tools derive from it. ``namespace`` is the scope it was read in (None:
    every namespace); ``history`` the store's reader (None: no store configured, and the history tools say so)."""

    snapshot: Snapshot
    redactor: Redactor
    history: HistoryReader | None = None
    namespace: str | None = None
    source: str | None = None

    @cached_property
    def diagnosis(self) -> Diagnosis:
        """The analyzers' findings over the snapshot, computed on first use and kept with the state."""
        return diagnose(self.snapshot, redactor=self.redactor)


def redacted_snapshot(snapshot: Snapshot, redactor: Redactor) -> Snapshot:
    """``snapshot`` with every object, Event, log tail and change summary passed through ``redactor``."""
    return dataclasses.replace(
        snapshot,
        objects={kind: [redactor.kube_object(o) for o in objs] for kind, objs in snapshot.objects.items()},
        events=[redactor.json(e) for e in snapshot.events],
        logs={key: redactor.text(text) for key, text in snapshot.logs.items()},
        changes=[
            dataclasses.replace(c, change=redactor.text(c.change), summary=redactor.text(c.summary))
            for c in snapshot.changes
        ],
    )


def indexed(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with its lookup indexes (by name, by namespace, Events by subject, changes by object) built now,
    once per state, rather than inside whichever tool call happens to ask first; and the collector told that the
    state's objects are long-lived (``gc.freeze``), so the garbage collector's full passes, which a 10k-pod state
    makes take hundreds of milliseconds, do not walk them during calls (measured: ``diagnose`` p99 637 → 101 ms,
    ``neighborhood`` 437 → 107 ms at 10k pods, bench/mcp_context.py)."""
    snapshot.get("", "", "")
    snapshot.in_namespace("", "")
    snapshot.events_about("", "", "")
    snapshot.changes_about(())
    # what an earlier state froze is handed back first and the garbage collected, so a state that died (in a
    # cycle or not) is freed and only what is live now is frozen: a server that rereads the cluster every few
    # seconds does not keep its old states
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return snapshot


class StateSource(Protocol):
    """Where the tools' state comes from."""

    async def state(self) -> State: ...


class LogReader(Protocol):
    """Reads one container's log: current or previous, the last ``tail_lines`` lines, those of the last
    ``since_seconds`` when given. Raises :class:`capstan.kube.ApiError` when the API server refuses."""

    async def read(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        previous: bool,
        tail_lines: int,
        since_seconds: int | None = None,
    ) -> str: ...


class FixedSource:
    """One snapshot, redacted once (tests and benches; the same tools as live)."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        redactor: Redactor | None = None,
        history: HistoryReader | None = None,
        namespace: str | None = None,
    ) -> None:
        redactor = redactor or Redactor()
        self._state = State(indexed(redacted_snapshot(snapshot, redactor)), redactor, history, namespace)

    async def state(self) -> State:
        return self._state


class SnapshotLogs:
    """A :class:`LogReader` over a snapshot's previous-log tails (what a fixed snapshot holds)."""

    def __init__(self, logs: Mapping[tuple[str, str, str], str]) -> None:
        self._logs = logs

    async def read(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        previous: bool,
        tail_lines: int,
        since_seconds: int | None = None,
    ) -> str:
        from capstan.kube import ApiError

        text = self._logs.get((namespace, pod, container)) if previous else None
        if text is None:
            raise ApiError(404, "NotFound", f"no {'previous ' if previous else ''}log of {pod}/{container}")
        return "\n".join(text.splitlines()[-tail_lines:])


class ClusterLogs:
    """A :class:`LogReader` over the pod-log API."""

    def __init__(self, client: KubeClient, *, limit_bytes: int = 256 * 1024) -> None:
        self._client = client
        self._limit_bytes = limit_bytes

    async def read(
        self,
        namespace: str,
        pod: str,
        container: str,
        *,
        previous: bool,
        tail_lines: int,
        since_seconds: int | None = None,
    ) -> str:
        return await self._client.pod_log(
            namespace,
            pod,
            container,
            previous=previous,
            tail_lines=tail_lines,
            limit_bytes=self._limit_bytes,
            since_seconds=since_seconds,
        )


class LiveSource:
    """The cluster behind ``client`` (and the store behind ``history``), read at most once per ``max_age_s``."""

    def __init__(
        self,
        client: KubeClient,
        *,
        redactor: Redactor,
        history: HistoryReader | None = None,
        namespace: str | None = None,
        source: str | None = None,
        window_seconds: float = 3600.0,
        max_age_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._redactor = redactor
        self._history = history
        self._namespace = namespace
        self._source = source
        self._window = window_seconds
        self._max_age = max_age_s
        self._clock = clock
        self._lock = asyncio.Lock()
        self._state: State | None = None
        self._read_at = 0.0

    async def state(self) -> State:
        async with self._lock:
            if self._state is None or self._clock() - self._read_at >= self._max_age:
                from capstan.diagnose import read_snapshot

                snapshot = await read_snapshot(
                    self._client,
                    namespace=self._namespace,
                    history=self._history,
                    source=self._source,
                    window_seconds=self._window,
                )
                self._state = State(
                    indexed(redacted_snapshot(snapshot, self._redactor)),
                    self._redactor,
                    self._history,
                    self._namespace,
                    self._source,
                )
                self._read_at = self._clock()
            return self._state
