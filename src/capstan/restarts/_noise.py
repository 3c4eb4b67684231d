"""Noise control that never loses a restart.

- :class:`RestartFilter`: include/exclude by namespace and pod name (anchored regexes, compiled once), by label
  selector (Kubernetes syntax), and optionally skip exit code 0. Filtering decides what is *notified*; the shell
  still records every restart in the store.
- :class:`NoiseGate`: mute per owner workload. The first restart of a workload is reported and opens a window;
  restarts inside the window are counted and come out as a digest when it ends. A container above the restart cap
  goes to digest mode the same way; it is never dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from capstan.kube import Requirement
from capstan.restarts._detect import ContainerRestart, Pod


def compile_patterns(patterns: Sequence[str], setting: str) -> tuple[re.Pattern[str], ...]:
    """Compile regexes once; a bad one raises ValueError naming the setting, the index and the problem."""
    compiled = []
    for index, pattern in enumerate(patterns):
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise ValueError(f"{setting}[{index}] {pattern!r}: {exc}") from None
    return tuple(compiled)


@dataclass(frozen=True)
class RestartFilter:
    """Which restarts are notified. Name patterns must match the whole name (``fullmatch``)."""

    include_namespaces: tuple[re.Pattern[str], ...] = ()
    exclude_namespaces: tuple[re.Pattern[str], ...] = ()
    include_pods: tuple[re.Pattern[str], ...] = ()
    exclude_pods: tuple[re.Pattern[str], ...] = ()
    selector: tuple[Requirement, ...] = ()
    ignore_exit_code_zero: bool = False

    @staticmethod
    def _admits(name: str, include: Sequence[re.Pattern[str]], exclude: Sequence[re.Pattern[str]]) -> bool:
        if include and not any(p.fullmatch(name) for p in include):
            return False
        return not any(p.fullmatch(name) for p in exclude)

    def admits_pod(self, pod: Pod) -> bool:
        meta = pod.get("metadata") or {}
        if not self._admits(
            str(meta.get("namespace") or ""), self.include_namespaces, self.exclude_namespaces
        ):
            return False
        if not self._admits(str(meta.get("name") or ""), self.include_pods, self.exclude_pods):
            return False
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        return all(req.matches(labels) for req in self.selector)

    def admits_exit_code(self, exit_code: int | None) -> bool:
        return not (self.ignore_exit_code_zero and exit_code == 0)


# ---- mute windows and digests ----------------------------------------------------------------------------


@dataclass
class Digest:
    """Restarts of one workload that were counted, not reported one by one."""

    owner_key: str
    opened_at: float
    closed_at: float
    restarts: list[ContainerRestart]
    reason: Literal["mute", "cap"]

    @property
    def restart_count(self) -> int:
        return sum(r.restarts for r in self.restarts)


@dataclass
class _Window:
    opened_at: float
    until: float
    reason: Literal["mute", "cap"]
    counted: list[ContainerRestart] = field(default_factory=list)


Decision = Literal["report", "digest"]


class NoiseGate:
    """Per-workload mute windows (pure: time is passed in). ``mute_seconds == 0`` reports every restart
    individually, except those above ``restart_cap``, which are always digested (window ``cap_window_seconds``)."""

    def __init__(self, mute_seconds: float, restart_cap: int, cap_window_seconds: float = 600.0) -> None:
        self._mute = max(0.0, mute_seconds)
        self._cap = restart_cap
        self._cap_window = max(1.0, cap_window_seconds)
        self._windows: dict[str, _Window] = {}
        self._ready: list[Digest] = []

    def _close(self, key: str, at: float) -> None:
        window = self._windows.pop(key)
        if window.counted:
            self._ready.append(Digest(key, window.opened_at, at, window.counted, window.reason))

    def admit(self, owner_key: str, restart: ContainerRestart, now: float) -> Decision:
        """Report this restart now, or count it into its workload's digest."""
        window = self._windows.get(owner_key)
        if window is not None and now >= window.until:
            self._close(owner_key, window.until)
            window = None
        if window is not None:
            window.counted.append(restart)
            return "digest"
        if self._cap > 0 and restart.restart_count > self._cap:
            self._windows[owner_key] = _Window(now, now + max(self._mute, self._cap_window), "cap", [restart])
            return "digest"
        if self._mute > 0:
            self._windows[owner_key] = _Window(now, now + self._mute, "mute")
        return "report"

    def due(self, now: float) -> list[Digest]:
        """Digests of windows that have ended by ``now`` (windows with nothing counted end silently)."""
        for key in sorted(k for k, w in self._windows.items() if now >= w.until):
            self._close(key, self._windows[key].until)
        ready, self._ready = self._ready, []
        return sorted(ready, key=lambda d: (d.closed_at, d.owner_key))

    def flush(self, now: float) -> list[Digest]:
        """Close every window now (at shutdown), so counted restarts are not held back."""
        for key in sorted(self._windows):
            self._close(key, now)
        ready, self._ready = self._ready, []
        return ready

    @property
    def open_windows(self) -> int:
        return len(self._windows)
