"""The sink-neutral content of one chat message, and the text-cutting helpers every renderer uses.

A ``Notice`` is what goes into the outbox (as JSON) and what each sink renders into its own format, so the restart
report is built once and every chat service shows the same facts.
"""

from __future__ import annotations

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
