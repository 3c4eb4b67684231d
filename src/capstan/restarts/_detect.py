"""Restart detection as a pure diff of two versions of a pod (plain Kubernetes JSON dicts).

Per container, by name: regular containers, init containers, and native sidecars (init containers with
``restartPolicy: Always``); ephemeral containers are never restarted and are ignored. Only a rise of
``restartCount`` between two versions of the *same* pod (same UID) is a restart, so the informer's initial list
(no old version) replays nothing and a resync (identical versions) reports nothing. Restarts that happened while
Capstan was down are found by comparing a pod with the last counts stored before the stop, and are flagged.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ContainerType = Literal["container", "init", "sidecar"]
Pod = Mapping[str, Any]


@dataclass(frozen=True, order=True)
class ContainerRestart:
    """One container whose restart count rose from ``previous_count`` to ``restart_count``."""

    namespace: str
    pod: str
    container: str
    pod_uid: str
    container_type: ContainerType
    previous_count: int
    restart_count: int
    while_down: bool = False

    @property
    def restarts(self) -> int:
        return self.restart_count - self.previous_count

    @property
    def restart_numbers(self) -> range:
        """The restart numbers covered (``restartCount`` values), e.g. range(4, 6) for 3 → 5."""
        return range(self.previous_count + 1, self.restart_count + 1)


@dataclass(frozen=True)
class ContainerCount:
    container_type: ContainerType
    restart_count: int


def _meta(pod: Pod) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def pod_uid(pod: Pod) -> str:
    return str(_meta(pod).get("uid") or "")


def container_counts(pod: Pod) -> dict[str, ContainerCount]:
    """Restart counts by container name for the containers that can restart (ephemeral ones excluded)."""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    sidecars = {
        c.get("name")
        for c in spec.get("initContainers") or []
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
    }
    counts: dict[str, ContainerCount] = {}
    for key, default_type in (("initContainerStatuses", "init"), ("containerStatuses", "container")):
        for cs in status.get(key) or []:
            if not isinstance(cs, Mapping) or not cs.get("name"):
                continue
            name = str(cs["name"])
            kind: ContainerType = "sidecar" if default_type == "init" and name in sidecars else default_type  # type: ignore[assignment]
            try:
                count = int(cs.get("restartCount") or 0)
            except (TypeError, ValueError):
                count = 0
            counts[name] = ContainerCount(kind, count)
    return counts


def _restarts(pod: Pod, before: Mapping[str, int], *, while_down: bool) -> list[ContainerRestart]:
    meta = _meta(pod)
    found = []
    for name, now in sorted(container_counts(pod).items()):
        was = before.get(name)
        if was is not None and now.restart_count > was:
            found.append(
                ContainerRestart(
                    namespace=str(meta.get("namespace") or ""),
                    pod=str(meta.get("name") or ""),
                    container=name,
                    pod_uid=pod_uid(pod),
                    container_type=now.container_type,
                    previous_count=was,
                    restart_count=now.restart_count,
                    while_down=while_down,
                )
            )
    return found


Counts = tuple[tuple[str, int], ...]


def seen_counts(pod: Pod) -> Counts:
    """The compact form of a pod version that detection needs later: (container, restartCount) pairs. A watcher
    keeps this per pod (about 0.2 KB) instead of the pod; container names are interned, so 10k pods share them."""
    return tuple((sys.intern(name), c.restart_count) for name, c in sorted(container_counts(pod).items()))


def detect_restarts_since(before: Counts, new: Pod) -> list[ContainerRestart]:
    """Restarts in ``new`` since the counts :func:`seen_counts` took from an earlier version of the same pod; a
    container without an earlier count counts from 0 (as in :func:`detect_restarts`)."""
    counts = dict(before)
    for name in container_counts(new):
        counts.setdefault(name, 0)
    return _restarts(new, counts, while_down=False)


def detect_restarts(old: Pod | None, new: Pod) -> list[ContainerRestart]:
    """Restarts between two versions of a pod; none for an add (``old`` None) or a different pod UID.

    A container that appears only in ``new`` (its status was not reported yet) counts from 0, so a container
    that restarted before its first status reached us is still reported.
    """
    if old is None or pod_uid(old) != pod_uid(new) or not pod_uid(new):
        return []
    before = {name: c.restart_count for name, c in container_counts(old).items()}
    for name in container_counts(new):
        before.setdefault(name, 0)
    return _restarts(new, before, while_down=False)


def detect_while_down(pod: Pod, last_seen: Mapping[tuple[str, str], int]) -> list[ContainerRestart]:
    """Restarts that happened while Capstan was not watching: counts above the stored ``(pod_uid, container)``
    counts. Containers with no stored count are a baseline, not a restart."""
    uid = pod_uid(pod)
    before = {name: last_seen[(uid, name)] for name in container_counts(pod) if (uid, name) in last_seen}
    return _restarts(pod, before, while_down=True)
