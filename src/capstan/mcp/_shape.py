"""How a tool's answer fits its budget: token counts, cursor pagination, and the last-resort cut.

Every tool has a :class:`Budget` (a default and a maximum number of ``cl100k_base`` tokens; the caller's ``budget``
argument picks a figure up to the maximum). Listing tools page with :func:`paginate`: items are rendered in order
and taken while their tokens fit, and the answer carries ``next_cursor`` when more remain. A cursor is
``base64url("<tool>:<offset>:<fingerprint>")``, where the fingerprint is a hash of the query's other arguments, so a
cursor given to another tool or to a changed query is one clear error (:class:`BadCursor`) instead of a silently
wrong page. :func:`fit` is the guard every answer passes last: an answer still over its budget loses list items from
its largest lists (counted in ``omitted``), then characters from its longest strings, then whole members (named in
``left_out``), so no answer exceeds its budget. :func:`finish` stamps the answer's own token count on it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from capstan.jsontext import dumps
from capstan.tokens import count_tokens

T = TypeVar("T")

_CURSOR: Final = re.compile(r"^[A-Za-z0-9_-]{1,96}$", re.ASCII)
_BODY: Final = re.compile(r"([a-z_]{1,32}):([0-9]{1,9}):([0-9a-f]{12})", re.ASCII)
_FIT_ROUNDS: Final = 4096
"""The most cuts :func:`fit` makes (each removes an item or halves a string), so the guard is bounded."""
_MIN_STRING: Final = 80


class BadCursor(ValueError):
    """A cursor this server did not issue for this tool and query."""


@dataclass(frozen=True)
class Budget:
    """A tool's output budget in tokens: what it returns by default and the most a caller may ask for."""

    default: int
    maximum: int

    def pick(self, asked: int | None) -> int:
        return self.default if asked is None else max(1, min(asked, self.maximum))


def tokens(data: Any) -> int:
    """The ``cl100k_base`` tokens of ``data``'s compact JSON (what a client shows the model)."""
    return count_tokens(dumps(data))


def fingerprint(query: Mapping[str, Any]) -> str:
    """A short hash of a query's arguments (the cursor and the budget left out by the caller)."""
    return hashlib.sha256(dumps(dict(sorted(query.items()))).encode()).hexdigest()[:12]


def encode_cursor(tool: str, offset: int, query: Mapping[str, Any]) -> str:
    raw = f"{tool}:{offset}:{fingerprint(query)}".encode("ascii")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_cursor(tool: str, cursor: str | None, query: Mapping[str, Any]) -> int:
    """The offset ``cursor`` stands for (0 without one); :class:`BadCursor` for a cursor of another tool or
    another query."""
    if cursor is None or cursor == "":
        return 0
    wrong = "cursor: not a cursor this server issued (give the next_cursor of the previous answer)"
    if not _CURSOR.fullmatch(cursor):
        raise BadCursor(wrong)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadCursor(wrong) from None
    m = _BODY.fullmatch(raw)
    if m is None:
        raise BadCursor(wrong)
    if m.group(1) != tool:
        raise BadCursor(f"cursor: a cursor of {m.group(1)}, not of {tool}")
    if m.group(3) != fingerprint(query):
        raise BadCursor(
            "cursor: issued for other arguments (repeat the query that returned it, with the cursor)"
        )
    return int(m.group(2))


@dataclass(frozen=True)
class Page:
    """One page of a listing: the rendered items, the cursor of the next page (None on the last), how many
    items the listing has in all."""

    items: list[Any]
    next_cursor: str | None
    total: int

    def to_json(self, key: str = "items") -> dict[str, Any]:
        out: dict[str, Any] = {key: self.items, "total": self.total}
        if self.next_cursor is not None:
            out["next_cursor"] = self.next_cursor
        return out


def paginate(
    items: Iterable[T],
    *,
    tool: str,
    query: Mapping[str, Any],
    cursor: str | None,
    budget: int,
    render: Callable[[T], Any] = lambda item: item,
    limit: int | None = None,
) -> Page:
    """The page of ``items`` that starts at ``cursor`` and fits ``budget`` tokens (at most ``limit`` items):
    every item is rendered and counted on its own, and taking stops before the first that would not fit (but a
    page always holds at least one item, cut by :func:`fit` when it alone is over)."""
    listed = list(items)
    offset = decode_cursor(tool, cursor, query)
    if offset > len(listed):
        raise BadCursor(
            "cursor: past the end of this listing (the listing shrank; start again without a cursor)"
        )
    page: list[Any] = []
    used = 0
    end = offset
    for item in listed[offset:]:
        if limit is not None and len(page) >= limit:
            break
        rendered = render(item)
        cost = tokens(rendered) + 1
        if page and used + cost > budget:
            break
        page.append(rendered)
        used += cost
        end += 1
    next_cursor = encode_cursor(tool, end, query) if end < len(listed) else None
    return Page(page, next_cursor, len(listed))


def fit(answer: dict[str, Any], budget: int) -> dict[str, Any]:
    """``answer`` cut to ``budget`` tokens: items dropped from the end of its largest list (``omitted`` counts
    them per list, ``truncated`` is set), then its longest strings shortened. Returns ``answer`` itself when it
    fits."""
    if tokens(answer) <= budget:
        return answer
    out: dict[str, Any] = _copy(answer)
    omitted: dict[str, int] = {}
    for _ in range(_FIT_ROUNDS):
        if tokens(out) <= budget:
            break
        cut = _largest_list(out)
        if cut is not None:
            path, items = cut
            drop = max(1, len(items) // 4)
            del items[len(items) - drop :]
            omitted[path] = omitted.get(path, 0) + drop
            out["omitted"] = dict(sorted(omitted.items()))
            out["truncated"] = True
            continue
        if _shorten_longest_string(out):
            out["truncated"] = True
            continue
        if not _drop_largest_member(out):
            break
        out["truncated"] = True
    return out


def finish(answer: dict[str, Any]) -> dict[str, Any]:
    """``answer`` with ``tokens``: the token count of its own JSON, this field included."""
    out = {**answer, "tokens": 0}
    for _ in range(
        3
    ):  # the count's own digits can move it by a token or two; this settles in one or two rounds
        count = tokens(out)
        if count == out["tokens"]:
            break
        out["tokens"] = count
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _lists(value: Any, path: str) -> Iterable[tuple[str, list[Any]]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("omitted", "truncated"):
                continue
            yield from _lists(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        if len(value) > 1:
            yield path, value
        for i, item in enumerate(value[:1]):  # lists inside the first item stand for the others' lists
            yield from _lists(item, f"{path}[{i}]")


def _largest_list(answer: dict[str, Any]) -> tuple[str, list[Any]] | None:
    candidates = list(_lists(answer, ""))
    if not candidates:
        return None
    return max(candidates, key=lambda c: (len(dumps(c[1])), c[0]))


_KEPT: Final = frozenset({"error", "next_cursor", "total", "omitted", "truncated", "left_out"})


def _drop_largest_member(answer: dict[str, Any]) -> bool:
    """The last resort: the largest top-level member (but the error, the cursor and the cut's own notes) is
    replaced by nothing and named in ``left_out``."""
    members = [(len(dumps(v)), k) for k, v in answer.items() if k not in _KEPT]
    if not members:
        return False
    _, key = max(members)
    del answer[key]
    answer["left_out"] = sorted({*answer.get("left_out", []), key})
    return True


def _strings(value: Any, parent: Any, key: Any) -> Iterable[tuple[Any, Any, str]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, value, k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _strings(v, value, i)
    elif isinstance(value, str) and parent is not None:
        yield parent, key, value


def _shorten_longest_string(answer: dict[str, Any]) -> bool:
    found = [s for s in _strings(answer, None, None) if len(s[2]) > _MIN_STRING]
    if not found:
        return False
    parent, key, text = max(found, key=lambda s: len(s[2]))
    keep = max(_MIN_STRING, len(text) // 2)
    parent[key] = f"{text[:keep]}… [{len(text) - keep} characters cut]"
    return True
