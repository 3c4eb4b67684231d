"""The sink-neutral content of one chat message, and the text-cutting helpers every renderer uses.

A ``Notice`` is what goes into the outbox (as JSON) and what each sink renders into its own format, so the restart
report is built once and every chat service shows the same facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "critical"]


@dataclass(frozen=True)
class Section:
    """A titled block of text; ``code`` sections (logs, describe output) render monospaced."""

    heading: str
    body: str
    code: bool = False


@dataclass(frozen=True)
class Notice:
    """One chat message in a form every sink can render.

    ``thread_key`` groups messages (a digest threads under the first message with the same key when the sink can
    thread); ``channel`` overrides the sink's default destination when the sink supports it; ``log`` is the full
    text a sink that can upload files attaches, while ``sections`` carry the cut-down tail shown inline.
    ``brief`` is the short form the producer wants shown when this notice is combined with others into one
    message (see :func:`combine_notices`); without one, the title and summary stand for it. ``priority``: when a
    destination is backed up, higher goes first (a first report before a digest that was late by design anyway).
    """

    title: str
    summary: str
    severity: Severity = "warning"
    fields: tuple[tuple[str, str], ...] = ()
    sections: tuple[Section, ...] = ()
    log: str | None = None
    log_name: str = "log.txt"
    thread_key: str | None = None
    channel: str | None = None
    footer: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    brief: tuple[Section, ...] = ()
    priority: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "summary": self.summary,
            "severity": self.severity,
            "fields": [[k, v] for k, v in self.fields],
            "sections": [{"heading": s.heading, "body": s.body, "code": s.code} for s in self.sections],
            "log": self.log,
            "log_name": self.log_name,
            "thread_key": self.thread_key,
            "channel": self.channel,
            "footer": self.footer,
            "meta": dict(self.meta),
            "brief": [{"heading": s.heading, "body": s.body, "code": s.code} for s in self.brief],
            "priority": self.priority,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Notice:
        return cls(
            title=str(data["title"]),
            summary=str(data["summary"]),
            severity=data.get("severity", "warning"),
            fields=tuple((str(k), str(v)) for k, v in data.get("fields", [])),
            sections=tuple(
                Section(str(s["heading"]), str(s["body"]), bool(s.get("code", False)))
                for s in data.get("sections", [])
            ),
            log=data.get("log"),
            log_name=str(data.get("log_name", "log.txt")),
            thread_key=data.get("thread_key"),
            channel=data.get("channel"),
            footer=str(data.get("footer", "")),
            meta=dict(data.get("meta", {})),
            brief=tuple(
                Section(str(s["heading"]), str(s["body"]), bool(s.get("code", False)))
                for s in data.get("brief", [])
            ),
            priority=int(data.get("priority", 0)),
        )

    def brief_sections(self) -> tuple[Section, ...]:
        """What this notice contributes to a combined message."""
        return self.brief or (Section(self.title, self.summary),)

    def brief_size(self) -> int:
        """Characters of :meth:`brief_sections` (headings and bodies)."""
        return sum(len(s.heading) + len(s.body) for s in self.brief_sections())

    @property
    def group(self) -> tuple[str, str]:
        """Notices combine only with others of the same group: the same ``meta["kind"]`` and channel."""
        return (str(self.meta.get("kind", "")), self.channel or "")


_SEVERITY_ORDER = {"info": 0, "warning": 1, "critical": 2}


@dataclass(frozen=True)
class MessageCapacity:
    """How much of several notices' briefs one message of a sink can carry: text characters and sections."""

    text_chars: int
    sections: int


def combine_notices(notices: Sequence[Notice]) -> Notice:
    """One message standing for several queued ones (same :attr:`Notice.group`), used when a destination is at its
    pace limit: the first notice's title with "(+N more)", every notice's brief in order, the highest severity,
    and ``meta`` whose list values are concatenated (``meta["combined"]`` is the count and
    ``meta["thread_keys"]`` the thread keys, so a threading sink can file later replies under this message).
    The full notices stay in the outbox as sent; nothing in a brief is cut here (callers size the group with
    :meth:`Notice.brief_size`)."""
    if not notices:
        raise ValueError("combine_notices needs at least one notice")
    if len(notices) == 1:
        return notices[0]
    first = notices[0]
    meta: dict[str, Any] = {}
    for notice in notices:
        for key, value in notice.meta.items():
            if isinstance(value, list):
                meta.setdefault(key, []).extend(value)
            else:
                meta.setdefault(key, value)
    meta["combined"] = len(notices)
    meta["thread_keys"] = sorted({n.thread_key for n in notices if n.thread_key})
    severity = max((n.severity for n in notices), key=lambda s: _SEVERITY_ORDER.get(s, 1))
    sections = tuple(s for n in notices for s in n.brief_sections())
    return Notice(
        title=f"{first.title} (+{len(notices) - 1} more)",
        summary=(
            f"{len(notices)} messages in one: this destination was at its pace limit. "
            "Each full message is kept in the outbox."
        ),
        severity=severity,
        sections=sections,
        channel=first.channel,
        footer=first.footer,
        meta=meta,
        priority=max(n.priority for n in notices),
    )


ELLIPSIS = "…"


def cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in an ellipsis when cut."""
    if limit <= 0:
        return ""
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def tail_lines(text: str, limit: int) -> str:
    """The last whole lines of ``text`` that fit in ``limit`` characters, with a first line saying how many
    earlier lines were cut; a single line longer than the budget is cut at its start."""
    if len(text) <= limit:
        return text
    if limit < 100:
        return cut(text, limit)
    lines = text.splitlines()
    kept: list[str] = []
    used = 0
    marker_room = 40
    for line in reversed(lines):  # bounded by the number of lines
        cost = len(line) + (1 if kept else 0)
        if used + cost > limit - marker_room:
            break
        kept.append(line)
        used += cost
    kept.reverse()
    dropped = len(lines) - len(kept)
    if not kept:  # even the last line alone is too long: keep its end
        last = lines[-1] if lines else ""
        head = cut(f"[{dropped - 1} earlier lines cut] ", marker_room)
        return head + ELLIPSIS + last[-(limit - len(head) - 1) :]
    return f"[{dropped} earlier lines cut]\n" + "\n".join(kept)


def escape_fences(text: str) -> str:
    """Break up triple backticks so a log cannot close the code block it is shown in."""
    return text.replace("```", "`\u200b`\u200b`")
