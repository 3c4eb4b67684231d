"""What the node autoscaler says about a pending pod: cluster-autoscaler's and Karpenter's Events, read into one
:class:`AutoscalerVerdict` so that the scheduling finding can say whether new capacity is on its way or why it is not.

cluster-autoscaler writes, on the pod:

- ``TriggeredScaleUp``: ``pod triggered scale-up: [{gpu-pool 1->2 (max: 4)}]`` — a node is being added;
- ``NotTriggerScaleUp``: ``pod didn't trigger scale-up: 2 max node group size reached, 1 node(s) didn't match Pod's
  node affinity/selector`` (counts of node groups per reason; or ``(it wouldn't fit if a new node is added)``; or
  nothing after the colon when no node group exists) — no node will come;
- ``FailedScaleUp``/``ScaleUpFailed`` style warnings (``Node scale up in zones … associated with this pod failed:
  IP space exhausted``) — the provider refused.

Karpenter writes ``Nominated`` (``Pod should schedule on: nodeclaim/default-8x2kq``) when it has launched or found
capacity, and a ``FailedScheduling`` of its own (source ``karpenter``, ``Failed to schedule pod, incompatible with
nodepool "gpu", …``) when no NodePool can satisfy the pod. The newest of these Events is the verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

from capstan.diagnose._common import quote
from capstan.diagnose._finding import ObjectRef
from capstan.diagnose._snapshot import KubeObject, Snapshot, event_message
from capstan.kube import event_time

Outlook = Literal["scaling-up", "will-not-scale", "scale-up-failed", "nominated", "no-nodepool"]

_TRIGGERED: Final = re.compile(r"pod triggered scale-up:\s*\[(?P<groups>.*)\]", re.S)
_GROUP: Final = re.compile(r"\{(?P<group>[^{}\s]+)\s+(?P<from>\d+)->(?P<to>\d+)\s*\(max:\s*(?P<max>\d+)\)\}")
_NOT_TRIGGERED: Final = re.compile(r"pod didn't trigger scale-up(?P<rest>.*)$", re.S)
_COUNTED: Final = re.compile(r"^(?P<count>\d+)\s+(?P<reason>.+)$", re.S)
_NOMINATED: Final = re.compile(r"Pod should schedule on:?\s*(?P<target>\S+)")
_CA_SCALE_UP_FAILED: Final = ("FailedScaleUp", "ScaleUpFailed", "NotTriggerScaleUpBackoff")


@dataclass(frozen=True)
class ScaleUpGroup:
    """One node group a scale-up grows: ``name`` from ``size_from`` to ``size_to`` of at most ``size_max``."""

    name: str
    size_from: int
    size_to: int
    size_max: int

    @property
    def text(self) -> str:
        return f"{self.name} {self.size_from}->{self.size_to} (max {self.size_max})"


@dataclass(frozen=True)
class AutoscalerVerdict:
    """The newest autoscaler Event about one pod: who said it, what it means, its parts and the Event itself."""

    outlook: Outlook
    who: str  # "cluster-autoscaler" or "karpenter"
    message: str
    at: float | None
    reason: str
    groups: tuple[ScaleUpGroup, ...] = ()
    blockers: tuple[tuple[int | None, str], ...] = ()  # NotTriggerScaleUp: (node groups, why) per clause
    target: ObjectRef | None = None  # Karpenter's nominated NodeClaim or Node

    @property
    def summary(self) -> str:
        """One clause for a finding's sentence."""
        if self.outlook == "scaling-up":
            return f"cluster-autoscaler is adding a node ({', '.join(g.text for g in self.groups) or 'scale-up triggered'})"
        if self.outlook == "nominated" and self.target is not None:
            return f"Karpenter nominated {self.target.kind} {self.target.name} for it"
        if self.outlook == "will-not-scale":
            why = (
                "; ".join(f"{n} {r}" if n is not None else r for n, r in self.blockers)
                or "no node group can run it"
            )
            return f"cluster-autoscaler will not add a node: {why}"
        if self.outlook == "no-nodepool":
            return f"Karpenter cannot launch a node for it: {quote(self.message, 200)}"
        return f"the autoscaler's scale-up failed: {quote(self.message, 200)}"


def parse_not_triggered(message: str) -> tuple[tuple[int | None, str], ...] | None:
    """The clauses of a ``NotTriggerScaleUp`` message, or None when it is not one."""
    m = _NOT_TRIGGERED.search(message)
    if m is None:
        return None
    rest = m["rest"].strip()
    if rest.startswith("(") and rest.endswith(")"):
        return ((None, rest[1:-1].strip()),)
    rest = rest.removeprefix(":").strip()
    if not rest:
        return ()
    out: list[tuple[int | None, str]] = []
    for part in re.split(r",\s+(?=\d+\s)", rest):
        counted = _COUNTED.match(part.strip())
        out.append(
            (int(counted["count"]), counted["reason"].strip().rstrip("."))
            if counted
            else (None, part.strip())
        )
    return tuple(out)


def parse_triggered(message: str) -> tuple[ScaleUpGroup, ...] | None:
    m = _TRIGGERED.search(message)
    if m is None:
        return None
    return tuple(
        ScaleUpGroup(g["group"], int(g["from"]), int(g["to"]), int(g["max"]))
        for g in _GROUP.finditer(m["groups"])
    )


def _source(event: KubeObject) -> str:
    source = event.get("source") or {}
    component = str(source.get("component") or "") if isinstance(source, dict) else ""
    return component or str(event.get("reportingController") or event.get("reportingComponent") or "")


def verdict_of(event: KubeObject) -> AutoscalerVerdict | None:
    """The verdict one Event carries, or None when it is not an autoscaler's."""
    reason = str(event.get("reason") or "")
    message = event_message(event)
    source = _source(event)
    at = event_time(event)
    if reason == "TriggeredScaleUp":
        return AutoscalerVerdict(
            "scaling-up", "cluster-autoscaler", message, at, reason, parse_triggered(message) or ()
        )
    if reason == "NotTriggerScaleUp":
        blockers = parse_not_triggered(message)
        return AutoscalerVerdict(
            "will-not-scale", "cluster-autoscaler", message, at, reason, blockers=blockers or ()
        )
    if reason in _CA_SCALE_UP_FAILED or (
        reason.startswith("FailedScaleUp") and "cluster-autoscaler" in source
    ):
        return AutoscalerVerdict("scale-up-failed", "cluster-autoscaler", message, at, reason)
    if reason == "Nominated" and ("karpenter" in source or _NOMINATED.search(message)):
        m = _NOMINATED.search(message)
        target = None
        if m is not None:
            kind, _, name = m["target"].partition("/")
            target = ObjectRef("NodeClaim" if kind.lower() == "nodeclaim" else "Node", "", name or kind)
        return AutoscalerVerdict("nominated", "karpenter", message, at, reason, target=target)
    if reason == "FailedScheduling" and "karpenter" in source:
        return AutoscalerVerdict("no-nodepool", "karpenter", message, at, reason)
    return None


def autoscaler_verdict(
    snapshot: Snapshot, namespace: str, name: str, uid: str = ""
) -> AutoscalerVerdict | None:
    """The newest autoscaler verdict about the pod (Events are oldest first; the last verdict wins)."""
    found = None
    for event in snapshot.events_about("Pod", namespace, name, uid):
        verdict = verdict_of(event)
        if verdict is not None:
            found = verdict
    return found


def is_scheduler_event(event: KubeObject) -> bool:
    """A ``FailedScheduling`` from a scheduler, not Karpenter's (which shares the reason)."""
    return "karpenter" not in _source(event)
