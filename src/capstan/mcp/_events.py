"""Events as an agent reads them: grouped by (type, reason, normalised message), repeats counted, Warnings first.

A message is normalised by replacing what differs between repeats of one problem (UUIDs, IP addresses, times,
durations, pod-template hashes, long numbers) with placeholders, so "Back-off restarting failed container app in pod
web-7d9c-x2 (3m2s)" from ten pods is one group of ten. A group keeps its newest message verbatim, its count (the
Events' own ``count``/``series.count`` summed), first and last times and up to :data:`OBJECTS_PER_GROUP` of the
objects it is about. :func:`group_events` is pure; the ``events`` tool pages its groups.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import Field

from capstan.kube import event_time
from capstan.mcp._shape import Budget
from capstan.mcp._tool import MAX_TEXT, Call, ListArgs, ToolSpec

OBJECTS_PER_GROUP: Final = 3
_NORMALISE: Final = (
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uid>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?\b"), "<time>"),
    (re.compile(r"\b(?:\d+h)?(?:\d+m)?\d+(?:\.\d+)?(?:s|ms)\b"), "<duration>"),
    (re.compile(r"(?<=-)[a-z0-9]{8,10}-[a-z0-9]{5}\b"), "<hash>"),
    (re.compile(r"(?<=-)[a-z0-9]{5}\b(?=\W|$)"), "<id>"),
    (re.compile(r"\b\d{3,}\b"), "<n>"),
)


def normalise(message: str) -> str:
    """``message`` with what differs between repeats of one problem replaced by placeholders."""
    for pattern, placeholder in _NORMALISE:
        message = pattern.sub(placeholder, message)
    return message


def _count(event: Mapping[str, Any]) -> int:
    series = event.get("series")
    if isinstance(series, Mapping) and isinstance(series.get("count"), int):
        return max(1, int(series["count"]))
    count = event.get("count")
    return max(1, count) if isinstance(count, int) else 1


def _subject(event: Mapping[str, Any]) -> Mapping[str, Any]:
    subject = event.get("involvedObject") or event.get("regarding") or {}
    return subject if isinstance(subject, Mapping) else {}


def subject_text(event: Mapping[str, Any]) -> str:
    """``Kind/namespace/name`` (or ``Kind/name`` when cluster-scoped) of the object an Event is about."""
    s = _subject(event)
    ns = str(s.get("namespace") or "")
    return "/".join(p for p in (str(s.get("kind") or ""), ns, str(s.get("name") or "")) if p)


@dataclass
class EventGroup:
    type: str
    reason: str
    pattern: str
    message: str = ""
    count: int = 0
    first: float = 0.0
    last: float = 0.0
    objects: list[str] = field(default_factory=list)
    objects_total: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": self.type,
            "reason": self.reason,
            "message": self.message,
            "count": self.count,
            "objects": self.objects,
        }
        if self.objects_total > len(self.objects):
            out["more_objects"] = self.objects_total - len(self.objects)
        if self.last:
            out["last_seen"] = round(self.last, 3)
        if self.first and self.first != self.last:
            out["first_seen"] = round(self.first, 3)
        return out


def group_events(events: Iterable[Mapping[str, Any]]) -> list[EventGroup]:
    """Events grouped by (type, reason, normalised message): Warnings first, then by most recent, then by
    reason and pattern (a fixed order for ties)."""
    groups: dict[tuple[str, str, str], EventGroup] = {}
    seen: dict[tuple[str, str, str], set[str]] = {}
    for event in events:
        message = str(event.get("message") or event.get("note") or "").strip()
        key = (str(event.get("type") or "Normal"), str(event.get("reason") or ""), normalise(message))
        group = groups.get(key)
        if group is None:
            group = groups[key] = EventGroup(*key)
            seen[key] = set()
        at = event_time(event) or 0.0
        group.count += _count(event)
        if at >= group.last:
            group.last = at
            group.message = message
        if not group.first or (at and at < group.first):
            group.first = at
        subject = subject_text(event)
        if subject and subject not in seen[key]:
            seen[key].add(subject)
            group.objects_total += 1
            if len(group.objects) < OBJECTS_PER_GROUP:
                group.objects.append(subject)
    return sorted(groups.values(), key=lambda g: (g.type != "Warning", -g.last, g.reason, g.pattern))


def events_about(
    events: Sequence[Mapping[str, Any]], kind: str | None, namespace: str | None, name: str | None
) -> list[Mapping[str, Any]]:
    """The Events whose subject matches the given kind, namespace and name (each optional)."""
    out: list[Mapping[str, Any]] = []
    for event in events:
        s = _subject(event)
        if kind and str(s.get("kind") or "").lower() != kind.lower():
            continue
        if (
            namespace
            and str(s.get("namespace") or event.get("metadata", {}).get("namespace") or "") != namespace
        ):
            continue
        if name and str(s.get("name") or "") != name:
            continue
        out.append(event)
    return out


class EventsArgs(ListArgs):
    namespace: str | None = Field(None, max_length=MAX_TEXT, description="Only Events in this namespace.")
    kind: str | None = Field(
        None, max_length=MAX_TEXT, description="Only Events about objects of this kind (Pod)."
    )
    name: str | None = Field(
        None, max_length=MAX_TEXT, description="Only Events about objects with this name."
    )
    type: Literal["all", "Warning", "Normal"] = Field("all", description="Warning, Normal or all.")
    since_seconds: int | None = Field(
        None, ge=1, description="Only Events seen in the last this many seconds."
    )


async def _events(call: Call, args: EventsArgs) -> dict[str, Any]:
    events = events_about(call.state.snapshot.events, args.kind, args.namespace, args.name)
    if args.type != "all":
        events = [e for e in events if str(e.get("type") or "Normal") == args.type]
    if args.since_seconds is not None:
        cutoff = call.now - args.since_seconds
        events = [e for e in events if (event_time(e) or 0.0) >= cutoff]
    groups = group_events(events)
    page = call.page(groups, args, render=EventGroup.to_json)
    return {
        "events": sum(g.count for g in groups),
        "warnings": sum(g.count for g in groups if g.type == "Warning"),
        **page.to_json("groups"),
    }


EVENTS = ToolSpec(
    name="events",
    title="Events, grouped",
    description=(
        "Kubernetes Events grouped by type, reason and normalised message (repeats counted, up to 3 objects per "
        "group), Warnings first, newest first. Filter by namespace, kind, name, type and age."
    ),
    args=EventsArgs,
    run=_events,
    budget=Budget(1500, 6000),
    reads=("Event",),
)
