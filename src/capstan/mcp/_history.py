"""The history tools: what the store recorded, read for an agent: ``changes`` (one object's recorded diffs, newest
first), ``timeline`` (a namespace's or the cluster's changes in a window, status churn left out and counted),
``restarts`` (restart records) and ``engine_events`` (Redis/Valkey slowlog, ACL log, CONFIG changes, command logs
and restarts, with the store's gap records interleaved in time order).

Every tool reads ``call.history()`` (a :class:`capstan.store.HistoryReader`; without a store the answer is one
line saying so) in a worker thread (the reads are synchronous SQLAlchemy calls) and never reads more than a fixed
number of rows per call (:data:`MAX_SCAN`, :data:`MAX_OBJECT_SCAN`).

Paging is by keyset, not offset: a cursor holds the position (time in µs, row id) of the last row the answer
consumed and a fingerprint of the query's other arguments, so rows written meanwhile neither repeat nor shift a
page, and a cursor given to another query is a JSON-RPC error. ``timeline``, ``restarts`` and ``engine_events`` go
forward in time (the store's own order); ``changes`` goes backward (newest first) over a bounded read of the
object's window.

A recorded JSON patch is shown as one short line per operation (``replace /spec/replicas = 3``), values cut at
:data:`VALUE_CHARS`. Values are redacted here with the place they come from (each value is put back at its path
in a skeleton of the object and passed through the redactor's ``kube_object``): a Secret's data never shows, a
ConfigMap key or an env var or member with a sensitive name is replaced, and an env var's ``value`` whose name the
patch does not carry is replaced whole (its name might be ``DB_PASSWORD``). Engine commands pass through
``redis_command`` (``AUTH``, ``CONFIG SET requirepass``…). The server redacts the whole answer once more on its
way out.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

from pydantic import Field

from capstan.jsontext import dumps
from capstan.mcp._shape import BadCursor, Budget, fingerprint, tokens
from capstan.mcp._tool import MAX_TEXT, BadArgument, Call, ListArgs, ToolSpec
from capstan.redact import Redactor
from capstan.restarts import explain
from capstan.store import EngineEntry, Gap, ObjectChange, Restart, parse_time, position_of, rfc3339

R = TypeVar("R")

MAX_WINDOW_SECONDS: Final = 30 * 86400
STORE_PAGE: Final = 500
"""Rows asked of the store per read."""
MAX_SCAN: Final = 2000
"""The most rows one answer of ``timeline``, ``restarts`` or ``engine_events`` reads; a page that stops there
carries a cursor to go on (about 0.1 ms a row on SQLite: a page of heartbeats only stays near 200 ms)."""
MAX_OBJECT_SCAN: Final = 5000
"""The most of one object's changes ``changes`` reads in its window (it reads oldest first to show newest
first); past that the answer says the window was cut."""
OPS_PER_CHANGE: Final = 12
VALUE_CHARS: Final = 160
ARGS_PER_COMMAND: Final = 12
ARG_CHARS: Final = 80
_MAX_ID: Final = 2**63 - 1
_NOISE_PATHS: Final = ("/metadata/managedFields", "/metadata/resourceVersion")
_CHURN_LEAVES: Final = re.compile(r"(?:Time|Timestamp|^resourceVersion|^observedGeneration|^renewTime)$")
_CURSOR_TEXT: Final = re.compile(r"^[A-Za-z0-9_-]{1,96}$", re.ASCII)
_CURSOR_BODY: Final = re.compile(
    r"([a-z_]{1,32}):(-?[0-9]{1,17})\.([01])\.([0-9]{1,19}):([0-9a-f]{12})", re.ASCII
)
_ENGINE_LOGS: Final[dict[str, tuple[str, ...] | None]] = {
    "slowlog": ("slowlog",),
    "acl": ("acllog",),
    "config": ("config",),
    "commandlog": ("commandlog-slow", "commandlog-large-request", "commandlog-large-reply"),
    "all": None,
}

Key = tuple[int, int, int]
"""A row's place in a listing: (time µs, rank, row id); rank orders a gap (0) before an engine entry (1) of the
same microsecond."""


# ---------------------------------------------------------------------------------------------------- cursors
def encode_position(tool: str, key: Key, query: dict[str, Any]) -> str:
    raw = f"{tool}:{key[0]}.{key[1]}.{key[2]}:{fingerprint(query)}".encode("ascii")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_position(tool: str, cursor: str | None, query: dict[str, Any]) -> Key | None:
    """The position ``cursor`` stands for (None without one); :class:`BadCursor` for one of another tool or
    query."""
    if not cursor:
        return None
    wrong = "cursor: not a cursor this server issued (give the next_cursor of the previous answer)"
    if not _CURSOR_TEXT.fullmatch(cursor):
        raise BadCursor(wrong)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadCursor(wrong) from None
    m = _CURSOR_BODY.fullmatch(raw)
    if m is None:
        # a cursor of an offset-paged tool has another body: name the tool when it can be read
        other = raw.split(":", 1)[0] if ":" in raw and raw.split(":", 1)[0].isidentifier() else None
        if other and other != tool:
            raise BadCursor(f"cursor: a cursor of {other}, not of {tool}")
        raise BadCursor(wrong)
    if m.group(1) != tool:
        raise BadCursor(f"cursor: a cursor of {m.group(1)}, not of {tool}")
    if m.group(5) != fingerprint(query):
        raise BadCursor(
            "cursor: issued for other arguments (repeat the query that returned it, with the cursor)"
        )
    return int(m.group(2)), int(m.group(3)), int(m.group(4))


def _query(args: ListArgs) -> dict[str, Any]:
    return args.model_dump(exclude={"cursor", "budget"})


# ---------------------------------------------------------------------------------------------------- budget
@dataclass
class Filler:
    """Takes rendered items while their tokens fit ``budget`` (the first always: :func:`fit` cuts it if alone
    over)."""

    budget: int
    items: list[Any] = field(default_factory=list)
    used: int = 0

    def take(self, item: Any) -> bool:
        cost = tokens(item) + 1
        if self.items and self.used + cost > self.budget:
            return False
        self.items.append(item)
        self.used += cost
        return True


def _budget(call: Call, reserve: int = 250) -> int:
    return max(50, call.budget - reserve)


# ---------------------------------------------------------------------------------------------------- windows
def stamp(seconds: float) -> str:
    """RFC 3339 UTC to the millisecond (``2026-12-01T10:00:00.250Z``): a time costs an agent tokens, and one
    precision keeps the strings in time order."""
    return f"{rfc3339(seconds)[:23]}Z"


def window(call: Call, since_seconds: int, until: str | None) -> tuple[float, float]:
    """(since, until) in epoch seconds: ``until`` parsed (now by default), ``since_seconds`` before it."""
    end = call.now
    if until is not None:
        try:
            end = parse_time(until, call.now, what="until")
        except ValueError as err:
            raise BadArgument("until", str(err).removeprefix("until: ")) from None
    return end - since_seconds, end


async def _read(fn: Callable[..., list[R]], **kw: Any) -> list[R]:
    return await asyncio.to_thread(lambda: fn(**kw))


# ---------------------------------------------------------------------------------------------------- patches
def pointer(path: str) -> list[str]:
    """A JSON pointer's reference tokens (``~1`` is ``/``, ``~0`` is ``~``)."""
    if not path:
        return []
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]]


def _skeleton(tokens_: Sequence[str], value: Any) -> Any:
    """``value`` placed at ``tokens_`` in empty containers (a numeric token or ``-`` is a one-item list)."""
    node = value
    for token in reversed(tokens_):
        node = [node] if token.isdigit() or token == "-" else {token: node}
    return node


def _dig(node: Any, tokens_: Sequence[str]) -> tuple[bool, Any]:
    for token in tokens_:
        if isinstance(node, list) and (token.isdigit() or token == "-") and node:
            node = node[0]
        elif isinstance(node, dict) and token in node:
            node = node[token]
        else:
            return False, None
    return True, node


def redact_patch_value(redactor: Redactor, kind: str, path: str, value: Any) -> Any:
    """``value`` of a patch operation at ``path`` of a ``kind`` object, redacted as it would be in place."""
    where = pointer(path)
    if len(where) >= 3 and where[-1] == "value" and where[-3] == "env" and isinstance(value, str):
        return redactor.value(value)  # an env var's value without its name: it might be DB_PASSWORD
    if not where:
        obj = value if isinstance(value, dict) else {}
        return redactor.kube_object({"kind": kind, "metadata": {}, **obj}) if obj else redactor.json(value)
    skeleton = _skeleton(where, value)
    if not isinstance(skeleton, dict):
        return redactor.json(value)
    skeleton = {**skeleton, "kind": kind}
    skeleton.setdefault("metadata", {})
    found, out = _dig(redactor.kube_object(skeleton), where)
    if not found:  # the redactor dropped it (a Secret's other fields): nothing of it is shown
        return redactor.value(dumps(value)) if value not in (None, "") else value
    return out


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}…(+{len(text) - limit} chars)"


def patch_lines(redactor: Redactor, kind: str, patch: Sequence[dict[str, Any]] | None) -> list[str]:
    """One line per operation (noise paths left out): ``op path[ = value][ from path]``."""
    lines = []
    for op in patch or ():
        path = str(op.get("path", ""))
        if path.startswith(_NOISE_PATHS):
            continue
        line = f"{op.get('op')} {path}"
        if "value" in op:
            value = redact_patch_value(redactor, kind, path, op["value"])
            line += f" = {cut(value if isinstance(value, str) else dumps(value), VALUE_CHARS)}"
        if "from" in op:
            line += f" from {op['from']}"
        lines.append(line)
    return lines


def render_change(redactor: Redactor, change: ObjectChange, *, with_object: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"at": stamp(change.observed_at), "change": change.change_type}
    if with_object:
        out["object"] = "/".join(p for p in (change.kind, change.namespace, change.name) if p)
    if change.change_type == "modified":
        lines = patch_lines(redactor, change.kind, change.patch)
        out["diff"] = lines[:OPS_PER_CHANGE]
        if len(lines) > OPS_PER_CHANGE:
            out["more_ops"] = len(lines) - OPS_PER_CHANGE
    if change.observed_via == "relist":
        out["via"] = "relist"
    return out


def is_status_churn(change: ObjectChange) -> bool:
    """A modification that only moves heartbeats and timestamps (a Node's ``lastHeartbeatTime``, a Lease's
    ``renewTime``, ``observedGeneration``), or records nothing."""
    if change.change_type != "modified":
        return False
    for op in change.patch or ():
        path = str(op.get("path", ""))
        if path.startswith(_NOISE_PATHS):
            continue
        where = pointer(path)
        if where and where[0] == "status" and where[1:2] == ["images"]:
            continue
        leaf = where[-1] if where else ""
        if _CHURN_LEAVES.search(leaf) and not isinstance(op.get("value"), dict | list):
            continue
        return False
    return True


# ---------------------------------------------------------------------------------------------------- changes
class ChangesArgs(ListArgs):
    kind: str = Field(..., min_length=1, max_length=MAX_TEXT, description="The object's kind (Deployment).")
    name: str = Field(..., min_length=1, max_length=MAX_TEXT, description="The object's name.")
    namespace: str | None = Field(
        None, max_length=MAX_TEXT, description="Its namespace (default: any; '' for cluster-scoped)."
    )
    since_seconds: int = Field(
        3600, ge=1, le=MAX_WINDOW_SECONDS, description="How far back from `until` to look (max 30 days)."
    )
    until: str | None = Field(
        None,
        max_length=64,
        description="End of the window: epoch seconds, RFC 3339 or an age like 15m (now).",
    )


async def _changes(call: Call, args: ChangesArgs) -> dict[str, Any]:
    history = call.history()
    since, until = window(call, args.since_seconds, args.until)
    query = _query(args)
    before = decode_position("changes", args.cursor, query)
    if before is not None:
        until = min(until, before[0] / 1_000_000)
    rows: list[ObjectChange] = []
    after = None
    cut_at: float | None = None
    for _ in range(MAX_OBJECT_SCAN):  # bounded twice: by reads and by rows
        ask = min(STORE_PAGE, MAX_OBJECT_SCAN - len(rows))
        page = await _read(
            history.timeline,
            kind=args.kind,
            namespace=args.namespace,
            name=args.name,
            since=since,
            until=until,
            limit=ask,
            after=after,
        )
        rows += page
        if len(page) < ask or page[-1].id is None:
            break
        if len(rows) >= MAX_OBJECT_SCAN:
            cut_at = page[-1].observed_at
            break
        after = position_of(page[-1])
    newest = [c for c in reversed(rows) if before is None or _key(c) < before]
    filler = Filler(_budget(call))
    last: Key | None = None
    for change in newest:
        if not filler.take(render_change(call.state.redactor, change, with_object=False)):
            break
        last = _key(change)
    out: dict[str, Any] = {
        "object": "/".join(p for p in (args.kind, args.namespace or "", args.name) if p),
        "window": {"since": stamp(since), "until": stamp(until)},
        "changes": filler.items,
    }
    if len(filler.items) < len(newest) and last is not None:
        out["next_cursor"] = encode_position("changes", last, query)
    if cut_at is not None:
        out["window_cut"] = (
            f"more than {MAX_OBJECT_SCAN} changes in the window: only those up to {stamp(cut_at)} were read; "
            "give a shorter since_seconds or an earlier until"
        )
    if not rows and before is None:
        out["note"] = "no recorded changes of this object in the window (check kind, name and namespace)"
    return out


def _key(record: ObjectChange | Restart | EngineEntry | Gap) -> Key:
    t_us, row_id = position_of(record)
    return t_us, 0 if isinstance(record, Gap) else 1, row_id


CHANGES = ToolSpec(
    name="changes",
    title="Recorded changes of one object",
    description=(
        "The history store's recorded changes of one object (kind, name, namespace), newest first: when, added/"
        "modified/deleted, and the diff as one line per JSON-patch operation (path = value; long values cut, "
        "secret values never shown). Window: since_seconds before until (default the last hour). Page with cursor."
    ),
    args=ChangesArgs,
    run=_changes,
    budget=Budget(1500, 8000),
    history=True,
)


@dataclass
class Stream:
    """One store listing read forward in pages (at most ``STORE_PAGE`` rows a read)."""

    fetch: Callable[[tuple[int, int] | None, int], list[Any]]
    after: tuple[int, int] | None
    buffer: list[Any] = field(default_factory=list)
    done: bool = False

    async def head(self) -> Any | None:
        if not self.buffer and not self.done:
            page = await asyncio.to_thread(self.fetch, self.after, STORE_PAGE)
            self.done = len(page) < STORE_PAGE
            self.buffer = list(reversed(page))
            if page:
                self.after = position_of(page[-1])
        return self.buffer[-1] if self.buffer else None

    def pop(self) -> Any:
        return self.buffer.pop()


async def forward(
    stream: Stream, render: Callable[[Any], dict[str, Any] | None], filler: Filler
) -> tuple[Key | None, bool]:
    """Rows of ``stream`` rendered into ``filler`` until it is full, the stream ends or :data:`MAX_SCAN` rows
    were read (``render`` returning None leaves a row out). Returns the position of the last row consumed and
    whether rows may remain."""
    last: Key | None = None
    for _ in range(MAX_SCAN):
        record = await stream.head()
        if record is None:
            return last, False
        rendered = render(record)
        if rendered is not None and not filler.take(rendered):
            return last, True
        stream.pop()
        last = _key(record)
    return last, True


# ---------------------------------------------------------------------------------------------------- timeline
class TimelineArgs(ListArgs):
    namespace: str | None = Field(
        None, max_length=MAX_TEXT, description="One namespace (default: the cluster; '' for cluster-scoped)."
    )
    kind: str | None = Field(None, max_length=MAX_TEXT, description="Only objects of this kind (Deployment).")
    since_seconds: int = Field(
        3600, ge=1, le=MAX_WINDOW_SECONDS, description="The window: the last this many seconds (max 30 days)."
    )


async def _timeline(call: Call, args: TimelineArgs) -> dict[str, Any]:
    history = call.history()
    query = _query(args)
    start = decode_position("timeline", args.cursor, query)
    since = call.now - args.since_seconds
    stream = Stream(
        lambda after, n: history.timeline(
            namespace=args.namespace, kind=args.kind, since=since, until=call.now, limit=n, after=after
        ),
        None if start is None else (start[0], start[2]),
    )
    churn = 0

    def render(change: ObjectChange) -> dict[str, Any] | None:
        nonlocal churn
        if is_status_churn(change):
            churn += 1
            return None
        return render_change(call.state.redactor, change, with_object=True)

    filler = Filler(_budget(call))
    last, more = await forward(stream, render, filler)
    out: dict[str, Any] = {
        "scope": args.namespace if args.namespace is not None else "cluster",
        "window": {"since": stamp(since), "until": stamp(call.now)},
        "changes": filler.items,
        "status_churn_left_out": churn,
    }
    if more and last is not None:
        out["next_cursor"] = encode_position("timeline", last, query)
    return out


TIMELINE = ToolSpec(
    name="timeline",
    title="Recorded changes in a window",
    description=(
        "What changed, oldest first: the history store's recorded changes of a namespace (or the cluster, or one "
        "kind) in the last since_seconds (default 1 hour, max 30 days), each with its object and diff lines. "
        "Status-only churn (heartbeats, timestamps) is left out and counted. Page with cursor."
    ),
    args=TimelineArgs,
    run=_timeline,
    budget=Budget(1500, 8000),
    history=True,
)


# ---------------------------------------------------------------------------------------------------- restarts
class RestartsArgs(ListArgs):
    namespace: str | None = Field(None, max_length=MAX_TEXT, description="Only restarts in this namespace.")
    pod: str | None = Field(None, max_length=MAX_TEXT, description="Only restarts of this pod.")
    since_seconds: int = Field(
        86400,
        ge=1,
        le=MAX_WINDOW_SECONDS,
        description="The window: the last this many seconds (max 30 days).",
    )


def restart_summary(record: Restart) -> str:
    """One line: why the container stopped (the report's meaning), and how Capstan saw it."""
    state = record.reported_state or {}
    term = state.get("termination") if isinstance(state.get("termination"), dict) else None
    if record.reason == "unobserved":
        text = "restarted between two updates Capstan saw: its termination was not observed"
    else:
        signal = term.get("signal") if term else None
        text = explain(record.reason, record.exit_code, signal if isinstance(signal, int) else None)
    if state.get("while_down"):
        text += " (found after Capstan was down)"
    if isinstance(state.get("notify"), str):
        text += f"; notification: {state['notify']}"
    return text


def render_restart(record: Restart) -> dict[str, Any]:
    out: dict[str, Any] = {
        "at": stamp(record.observed_at),
        "pod": f"{record.namespace}/{record.pod}",
        "container": record.container,
        "restart_count": record.restart_count,
        "reason": record.reason,
    }
    if record.container_type != "container":
        out["container_type"] = record.container_type
    if record.exit_code is not None:
        out["exit_code"] = record.exit_code
    out["summary"] = restart_summary(record)
    return out


async def _restarts(call: Call, args: RestartsArgs) -> dict[str, Any]:
    history = call.history()
    query = _query(args)
    start = decode_position("restarts", args.cursor, query)
    since = call.now - args.since_seconds
    stream = Stream(
        lambda after, n: history.restarts(
            namespace=args.namespace, pod=args.pod, since=since, until=call.now, limit=n, after=after
        ),
        None if start is None else (start[0], start[2]),
    )
    filler = Filler(_budget(call))
    last, more = await forward(stream, render_restart, filler)
    out: dict[str, Any] = {
        "window": {"since": stamp(since), "until": stamp(call.now)},
        "restarts": filler.items,
    }
    if more and last is not None:
        out["next_cursor"] = encode_position("restarts", last, query)
    return out


RESTARTS = ToolSpec(
    name="restarts",
    title="Container restart records",
    description=(
        "The restart records Capstan stored, oldest first: pod, container, restart count, reason, exit code and "
        "a one-line summary of why it stopped. Filter by namespace and pod; window since_seconds (default 1 day, "
        "max 30 days). Page with cursor."
    ),
    args=RestartsArgs,
    run=_restarts,
    budget=Budget(1200, 6000),
    history=True,
)


# ---------------------------------------------------------------------------------------------------- engine
class EngineEventsArgs(ListArgs):
    instance: str | None = Field(
        None, max_length=MAX_TEXT, description="One Redis/Valkey target, by its name in the recorder config."
    )
    type: Literal["slowlog", "acl", "config", "commandlog", "all"] = Field(
        "all",
        description="slowlog, acl (ACL LOG), config (CONFIG changes), commandlog, or all (with restarts).",
    )
    since_seconds: int = Field(
        3600, ge=1, le=MAX_WINDOW_SECONDS, description="The window: the last this many seconds (max 30 days)."
    )


def _command(redactor: Redactor, args: Any) -> list[str]:
    words = [str(a) for a in args] if isinstance(args, list) else []
    shown = [cut(a, ARG_CHARS) for a in redactor.redis_command(words)[:ARGS_PER_COMMAND]]
    if len(words) > ARGS_PER_COMMAND:
        shown.append(f"…(+{len(words) - ARGS_PER_COMMAND} args)")
    return shown


def render_entry(redactor: Redactor, entry: EngineEntry) -> dict[str, Any]:
    p = entry.payload or {}
    out: dict[str, Any] = {"at": stamp(entry.happened_at), "instance": entry.target, "log": entry.log}
    # which engine answered, as the recorder read it from INFO ("redis 7.0.15", "valkey 8.1.8")
    if p.get("server"):
        out["server"] = redactor.text(f"{p['server']} {p.get('server_version') or ''}".strip())
    if entry.log == "slowlog" or entry.log.startswith("commandlog-"):
        out["command"] = _command(redactor, p.get("args"))
        unit = "duration_us" if entry.log in ("slowlog", "commandlog-slow") else "bytes"
        if isinstance(p.get("value"), int):
            out[unit] = p["value"]
        for k in ("client_address", "client_name"):
            if p.get(k):
                out[k] = redactor.text(str(p[k]))
    elif entry.log == "config" and isinstance(p.get("parameter"), str):
        name = p["parameter"]

        def val(v: Any) -> Any:
            return redactor.named(name, v) if isinstance(v, str) else v

        out.update({"parameter": name, "old": val(p.get("old")), "new": val(p.get("new"))})
        if p.get("server_restarted"):
            out["server_restarted"] = True
    elif entry.log == "acllog":
        fields = ("reason", "context", "object", "username", "count", "client_info")
        out.update({k: p[k] for k in fields if k in p and p[k] not in ("", None)})
        out = redactor.json(out)
    elif entry.log == "restart":
        out.update({k: p[k] for k in ("previous_run_id", "run_id", "uptime_s", "version") if k in p})
    else:
        out["entry"] = cut(dumps(redactor.json(p)), VALUE_CHARS * 2)
    return out


def render_gap(gap: Gap) -> dict[str, Any]:
    return {
        "at": stamp(gap.observed_at),
        "gap": True,
        "instance": gap.source,
        "log": gap.log,
        "lost": "unknown" if gap.lost is None else gap.lost,
        "why": gap.reason,
    }


async def _engine_events(call: Call, args: EngineEventsArgs) -> dict[str, Any]:
    history = call.history()
    query = _query(args)
    start = decode_position("engine_events", args.cursor, query)
    since, until = call.now - args.since_seconds, call.now
    logs = _ENGINE_LOGS[args.type]
    log_name = logs[0] if logs is not None and len(logs) == 1 else None
    if start is None:
        entries_after, gaps_after = None, None
    else:  # gaps sort before entries of the same microsecond
        t_us, rank, row_id = start
        entries_after = (t_us, row_id) if rank == 1 else (t_us, 0)
        gaps_after = (t_us, row_id) if rank == 0 else (t_us, _MAX_ID)
    entries = Stream(
        lambda after, n: history.engine_entries(
            target=args.instance, log_name=log_name, since=since, until=until, limit=n, after=after
        ),
        entries_after,
    )
    gaps = Stream(
        lambda after, n: history.gaps(source=args.instance, since=since, until=until, limit=n, after=after),
        gaps_after,
    )

    def wanted(record: EngineEntry | Gap) -> bool:
        if isinstance(record, Gap) and record.log == "kubernetes":
            return False
        return logs is None or record.log in logs

    filler = Filler(_budget(call))
    counts = {"entries": 0, "gaps": 0}
    last: Key | None = None
    more = False
    for _ in range(MAX_SCAN):
        entry, gap = await entries.head(), await gaps.head()
        if entry is None and gap is None:
            break
        take_gap = entry is None or (gap is not None and _key(gap) < _key(entry))
        stream, record = (gaps, gap) if take_gap else (entries, entry)
        assert record is not None
        if wanted(record):
            rendered = (
                render_gap(record) if isinstance(record, Gap) else render_entry(call.state.redactor, record)
            )
            if not filler.take(rendered):
                more = True
                break
            counts["gaps" if isinstance(record, Gap) else "entries"] += 1
        stream.pop()
        last = _key(record)
    else:
        more = True
    out: dict[str, Any] = {
        "window": {"since": stamp(since), "until": stamp(until)},
        "events": filler.items,
        **counts,
    }
    if more and last is not None:
        out["next_cursor"] = encode_position("engine_events", last, query)
    if counts["gaps"]:
        out["note"] = "gap records mark entries the store never got: the history there is incomplete"
    return out


ENGINE_EVENTS = ToolSpec(
    name="engine_events",
    title="Redis/Valkey engine events",
    description=(
        "Recorded Redis/Valkey engine entries, oldest first: slow commands (SLOWLOG, COMMANDLOG; credentials "
        "redacted), ACL LOG denials, CONFIG changes and server restarts, with the store's gap records "
        "(entries lost before they were read, and why) interleaved in time. Filter by instance and type; window "
        "since_seconds (default 1 hour, max 30 days). Page with cursor."
    ),
    args=EngineEventsArgs,
    run=_engine_events,
    budget=Budget(1500, 8000),
    history=True,
)
