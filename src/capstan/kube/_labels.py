"""Kubernetes label selectors (``a=b,c!=d,e in (x,y),f notin (z),g,!h``), parsed and matched the way the API server
does, for every consumer that must check one before sending it or apply one itself (restart filters, endpoint
discovery)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
Operator = Literal["=", "!=", "in", "notin", "exists", "!exists"]


@dataclass(frozen=True)
class Requirement:
    key: str
    op: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin" match absent keys, as in Kubernetes


def _split_top(selector: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(selector):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' at character {i + 1}")
        elif ch == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError("unbalanced '('")
    parts.append(selector[start:])
    return parts


def parse_label_selector(selector: str) -> tuple[Requirement, ...]:
    """Parse ``a=b,c!=d,e in (x,y),f notin (z),g,!h``; a ValueError names the bad part."""
    if not selector.strip():
        return ()
    reqs = []
    for raw in _split_top(selector):
        part = raw.strip()
        if not part:
            raise ValueError("empty requirement (doubled or trailing comma)")
        if m := re.fullmatch(r"(\S+)\s+(in|notin)\s*\((.*)\)", part):
            key, op, inner = m.group(1), m.group(2), m.group(3)
            values = [v.strip() for v in inner.split(",")]
            if not values or any(not v for v in values):
                raise ValueError(f"{part!r}: empty value in set")
            reqs.append(Requirement(key, op, frozenset(values)))  # type: ignore[arg-type]
        elif m := re.fullmatch(r"([^\s=!]+)\s*(==|=|!=)\s*(\S*)", part):
            key, sym, value = m.group(1), m.group(2), m.group(3)
            reqs.append(Requirement(key, "!=" if sym == "!=" else "=", frozenset({value})))
        elif m := re.fullmatch(r"!\s*(\S+)", part):
            reqs.append(Requirement(m.group(1), "!exists"))
        elif re.fullmatch(r"\S+", part):
            reqs.append(Requirement(part, "exists"))
        else:
            raise ValueError(f"{part!r}: not a label requirement")
    for req in reqs:
        if not _KEY.match(req.key):
            raise ValueError(f"{req.key!r}: invalid label key")
        for value in req.values:
            if not _VALUE.match(value):
                raise ValueError(f"{value!r}: invalid label value for key {req.key!r}")
    return tuple(reqs)
