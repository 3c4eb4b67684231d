"""From a detected restart to messages in the outbox: filter, mute or cap into digests, build the report, render
it, enqueue it once per sink. No I/O of its own: the shell passes snapshots and the time, and an ``enqueue``
function (``capstan.notify.Drainer.enqueue`` in production) receives the messages."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from capstan.notify import Notice
from capstan.redact import Redactor
from capstan.restarts._config import RestartsConfig
from capstan.restarts._detect import ContainerRestart, Pod
from capstan.restarts._noise import Digest, NoiseGate
from capstan.restarts._render import digest_notices, report_notice
from capstan.restarts._report import (
    RestartReport,
    RestartSnapshot,
    build_report,
    last_termination,
    resolve_owner,
)

Enqueue = Callable[[str, Notice, str], bool]


Action = Literal["reported", "digested", "filtered"]


@dataclass(frozen=True)
class Outcome:
    """What happened to one restart: ``reported`` (enqueued now), ``digested`` (counted for a digest) or
    ``filtered`` (not notified by configuration; the shell still records it)."""

    action: Action
    report: RestartReport | None
    enqueued: int = 0


class RestartNotifier:
    """The notification half of restart diagnostics, driven by the shell."""

    def __init__(self, config: RestartsConfig, enqueue: Enqueue, *, redactor: Redactor | None = None) -> None:
        self._config = config
        self._enqueue = enqueue
        self._filter = config.filters.build()
        self._settings = config.report_settings(redactor)
        self._gate = NoiseGate(config.mute_seconds, config.restart_cap, config.cap_window_seconds)
        self._destinations = [s.name for s in config.sinks]
        self._channels: dict[str, str | None] = {}

    def _send(self, notice: Notice, key: str) -> int:
        return sum(1 for dest in self._destinations if self._enqueue(dest, notice, f"{key}/{dest}"))

    def decide(
        self,
        pod: Pod,
        restart: ContainerRestart,
        owners: Mapping[tuple[str, str, str], Mapping[str, Any]],
        now: float,
    ) -> Action:
        """Filter, then mute or cap: whether this restart is ``reported`` on its own (the caller then gathers its
        evidence and calls :meth:`report`), ``digested`` (counted; it needs no more evidence) or ``filtered``."""
        if not self._filter.admits_pod(pod):
            return "filtered"
        term = last_termination(pod, restart.container)
        if not self._filter.admits_exit_code(term.exit_code if term else None):
            return "filtered"
        owner_key = resolve_owner(pod, owners).key
        annotation = self._config.channel_annotation
        if annotation:
            value = ((pod.get("metadata") or {}).get("annotations") or {}).get(annotation)
            self._channels[owner_key] = str(value) if value else None
        return "reported" if self._gate.admit(owner_key, restart, now) == "report" else "digested"

    def report(self, snapshot: RestartSnapshot, now: float) -> Outcome:
        """Build, render and enqueue the report of a restart :meth:`decide` said to report."""
        report = build_report(snapshot, self._settings, channel_annotation=self._config.channel_annotation)
        restart = snapshot.restart
        key = f"restart/{restart.pod_uid}/{restart.container}/{restart.restart_count}"
        return Outcome("reported", report, self._send(report_notice(report), key))

    def on_restart(self, snapshot: RestartSnapshot, now: float) -> Outcome:
        """Both steps at once, for a snapshot gathered in full beforehand."""
        action = self.decide(snapshot.pod, snapshot.restart, snapshot.owners, now)
        if action == "reported":
            return self.report(snapshot, now)
        if action == "filtered":
            return Outcome("filtered", None)
        report = build_report(snapshot, self._settings, channel_annotation=self._config.channel_annotation)
        return Outcome("digested", report)

    def _send_digests(self, digests: list[Digest]) -> int:
        sent = 0
        for digest in digests:
            channel = self._channels.get(digest.owner_key)
            for index, notice in enumerate(
                digest_notices(digest, self._config.cluster_name, channel=channel)
            ):
                sent += self._send(notice, f"digest/{digest.owner_key}/{digest.opened_at:.6f}/{index}")
        return sent

    def tick(self, now: float) -> int:
        """Enqueue the digests of mute windows that ended by ``now``; returns messages enqueued."""
        return self._send_digests(self._gate.due(now))

    def flush(self, now: float) -> int:
        """At shutdown: close every window and enqueue what was counted."""
        return self._send_digests(self._gate.flush(now))
