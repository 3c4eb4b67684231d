"""Queued work read from the cluster as demand announced ahead: Jobs created suspended (the way Kueue holds a
Workload until it has quota, and the way a batch system queues a Job) are the pods they will create, given to
the planner through :class:`~capstan.capacity.QueuedDemand` so it can launch nodes before the Job runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capstan.capacity.live._objects import template_pods
from capstan.capacity.model import Pod

MAX_PODS_PER_JOB = 256
"""A Job's announced pods are at most this many (its parallelism, bounded): a queue is a hint, not a promise."""


def job_pods(job: Mapping[str, Any], now: float) -> tuple[Pod, ...]:
    """The pods a suspended Job will run at once (``parallelism``, default 1, at most ``completions`` and
    :data:`MAX_PODS_PER_JOB`), as the planner sees pods, expected at ``now``; none for a Job not suspended."""
    spec = job.get("spec") or {}
    if spec.get("suspend") is not True:
        return ()
    meta = job.get("metadata") or {}
    template = spec.get("template") or {}
    count = _count(spec.get("parallelism"), 1)
    if spec.get("completions") is not None:
        count = min(count, _count(spec.get("completions"), count))
    count = max(0, min(count, MAX_PODS_PER_JOB))
    return template_pods(template, str(meta.get("name", "job")), str(meta.get("namespace", "")), count, now)


def _count(value: object, default: int) -> int:
    try:
        return int(str(value)) if value is not None else default
    except ValueError:
        return default


class SuspendedJobs:
    """:class:`~capstan.capacity.Announcements` from the Jobs an informer holds (:meth:`follow`): every
    suspended Job's pods (:func:`job_pods`), expected now. The answer is read again every ``refresh_s``, since
    nothing says when a Job will be created or admitted."""

    def __init__(self, *, refresh_s: float = 5.0) -> None:
        if refresh_s <= 0:
            raise ValueError(f"refresh_s {refresh_s}: it must be more than 0")
        self.refresh_s = refresh_s
        self._jobs: Mapping[str, Mapping[str, Any]] = {}

    def follow(self, jobs: Mapping[str, Mapping[str, Any]]) -> None:
        """Read Jobs from ``jobs`` (an informer's state, kept up to date by it)."""
        self._jobs = jobs

    def announced(self, now: float) -> tuple[tuple[Pod, ...], float | None]:
        pods: list[Pod] = []
        for key in sorted(self._jobs):
            pods.extend(job_pods(self._jobs[key], now))
        return tuple(pods), now + self.refresh_s
