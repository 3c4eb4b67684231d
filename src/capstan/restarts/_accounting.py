"""Receiver-side accounting for restart storms: which injected restarts reached chat, individually or inside a
digest, matched by namespace, pod, container and restart number.

It works for any collector whose messages a pattern can read, whatever parts of a Slack message it uses: the
readable text of a received message is every part Slack shows (top-level text, blocks, legacy attachments'
pretext, title, text, fields and footer, file titles: :func:`capstan.notify.slack_message_text`), so a collector
that posts attachments only (the airwallex collector) is scored on what it sent.

Capstan's messages carry the canonical token ``<namespace>/<pod> · <container> restart #N`` (or ``#N–#M``); for
a tool that names only the pod (for example the airwallex collector's ``pod: `Y`, namespace: `Z```), give a
pattern with just ``ns`` and ``pod`` groups and the k-th message about a pod accounts for that pod's k-th
injected restart (pod-level accounting). A message counts once per pod it names, however often it names it (a
pretext and a fallback that both name the pod are one report).
"""

from __future__ import annotations

import html
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from capstan.notify import slack_message_text

Injected = tuple[str, str, str, int]  # namespace, pod, container, restart number

CAPSTAN_PATTERN: Final = re.compile(
    r"(?P<ns>[a-z0-9][a-z0-9.-]*)/(?P<pod>[a-z0-9][a-z0-9.-]*) · (?P<container>[a-z0-9][a-z0-9.-]*) "
    r"restart #(?P<first>\d+)(?:–#(?P<last>\d+))?"
)
AIRWALLEX_PATTERN: Final = re.compile(r"pod: `(?P<pod>[^`]+)`, namespace: `(?P<ns>[^`]+)`")


@dataclass(frozen=True)
class ChatMessage:
    """The readable text of one received message, whether it is a digest, and when it arrived."""

    text: str
    digest: bool = False
    received_at: float | None = None


@dataclass
class Accounting:
    injected: int = 0
    individually: int = 0
    in_digest: int = 0
    missing: list[Injected] = field(default_factory=list)
    unexpected: list[Injected] = field(default_factory=list)
    duplicates: int = 0
    first_seen: dict[Injected, float] = field(default_factory=dict)
    digested: set[Injected] = field(default_factory=set)

    @property
    def accounted(self) -> int:
        return self.individually + self.in_digest

    @property
    def ratio(self) -> float:
        return self.accounted / self.injected if self.injected else 1.0


def _is_digest(message: Mapping[str, Any], text: str) -> bool:
    return "Restart digest" in text.split("\n", 1)[0] or any(
        isinstance(b, Mapping) and b.get("type") == "header" and "Restart digest" in str(b.get("text"))
        for b in message.get("blocks") or []
    )


def messages_from_slack_receiver(snapshot: Mapping[str, Any]) -> list[ChatMessage]:
    """Readable messages from :meth:`capstan.notify.SlackReceiver.snapshot`, every part of each (messages with
    nothing readable, such as a file shared without a title or comment, are skipped)."""
    out = []
    for m in snapshot.get("messages", []):
        text = html.unescape(slack_message_text(m))
        if not text.strip():
            continue
        digest = _is_digest(m, text)
        out.append(ChatMessage(text=text, digest=digest, received_at=m.get("received_at")))
    return out


def account(
    injected: Sequence[Injected],
    messages: Sequence[ChatMessage],
    pattern: re.Pattern[str] = CAPSTAN_PATTERN,
) -> Accounting:
    """Match received messages to injected restarts; each restart counts once (later mentions are duplicates)."""
    wanted = set(injected)
    result = Accounting(injected=len(wanted))
    seen: dict[Injected, bool] = {}  # restart → was it individual
    pod_level = "container" not in pattern.groupindex
    by_pod: dict[tuple[str, str], list[Injected]] = defaultdict(list)
    for item in sorted(wanted, key=lambda i: (i[0], i[1], i[3], i[2])):
        by_pod[(item[0], item[1])].append(item)
    pod_cursor: dict[tuple[str, str], int] = defaultdict(int)

    def note(item: Injected, message: ChatMessage) -> None:
        if item not in wanted:
            result.unexpected.append(item)
            return
        if item in seen:
            result.duplicates += 1
            return
        seen[item] = not message.digest
        if message.received_at is not None:
            result.first_seen[item] = message.received_at

    for message in messages:
        found: set[Injected] = set()
        pods_named: set[tuple[str, str]] = set()
        for m in pattern.finditer(message.text):
            ns, pod = m.group("ns"), m.group("pod")
            if pod_level:
                if (ns, pod) in pods_named:
                    continue  # the same report naming its pod again (pretext and fallback, say)
                pods_named.add((ns, pod))
                queue = by_pod.get((ns, pod), [])
                index = pod_cursor[(ns, pod)]
                pod_cursor[(ns, pod)] += 1
                if index < len(queue):
                    found.add(queue[index])
                else:
                    result.duplicates += 1
                continue
            first = int(m.group("first"))
            last = int(m.group("last") or first)
            for number in range(first, last + 1):
                found.add((ns, pod, m.group("container"), number))
        for item in sorted(found):
            note(item, message)
    result.individually = sum(1 for individual in seen.values() if individual)
    result.in_digest = sum(1 for individual in seen.values() if not individual)
    result.digested = {item for item, individual in seen.items() if not individual}
    result.missing = sorted(wanted - set(seen))
    result.unexpected = sorted(set(result.unexpected))
    return result
