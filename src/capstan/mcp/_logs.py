"""The ``logs`` tool: a pod's or a workload's container logs cut to what an agent can act on.

:func:`excerpt` is the pure core over one log's text: it keeps the error lines (levels ERROR, FATAL, CRITICAL,
WARN, and crash markers: exceptions, Python tracebacks with their frames, Go panics, segfaults, OOM kills, CUDA and
NCCL errors), or the lines a caller's ``grep`` matches, or every line; it collapses repeats (lines identical once
times, ids and numbers are normalised) into one marked "(repeated ×N)"; it keeps a head and a tail with an explicit
omitted count; and when nothing matches it falls back to the last lines, saying so. A ``grep`` pattern is bounded
(:data:`MAX_GREP` characters, no repeated group holding a repetition or an alternation) and applied line by line
to lines cut to :data:`MATCH_CHARS`, so a pattern cannot cost more than a bounded amount per line of a bounded read.

The tool resolves a workload (Deployment → ReplicaSets → Pods; StatefulSet, DaemonSet, ReplicaSet, Job → Pods;
the workload's selector when no pod names it as owner) from the redacted snapshot, reads at most
:data:`MAX_PODS` pods' containers through the call's :class:`~capstan.mcp._state.LogReader` (a few at a time),
and answers one entry per pod and container, pods whose excerpts are the same merged into one entry. A refusal
from the API server (no previous instance, 403, a timeout) is that container's ``unreadable`` line. Every log is
passed through the redactor before it is cut, and every line kept passes it again.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import Field

from capstan.kube import ApiError
from capstan.mcp._shape import Budget
from capstan.mcp._tool import MAX_TEXT, BadArgument, Call, ListArgs, ToolSpec, Unavailable

MAX_GREP: Final = 200
"""The longest ``grep`` pattern accepted."""
MATCH_CHARS: Final = 2000
"""How much of one line a pattern is matched against."""
LINE_CHARS: Final = 400
"""How much of one line the answer keeps (longer lines end in "…")."""
HEAD: Final = 30
TAIL: Final = 20
BLOCK_LINES: Final = 60
"""The most lines a Traceback, panic or exception block keeps with the line that opened it."""
MAX_PODS: Final = 10
"""The most pods one call reads."""
MAX_CONTAINERS: Final = 8
"""The most containers read per pod."""
READS_AT_ONCE: Final = 4
READ_TIMEOUT_S: Final = 15.0
READ_CHARS: Final = 256 * 1024
"""The most of one log the tool cuts (its last characters; the live reader already asks for no more bytes)."""

ERROR_LINE: Final = re.compile(
    r"\b(?:ERROR|ERR|FATAL|CRIT(?:ICAL)?|WARN(?:ING)?|PANIC|SEVERE|EMERG(?:ENCY)?)\b"
    r"|\b(?i:error|fatal|critical|warn(?:ing)?)\b\s*[:\]|=]"
    r"|\[(?i:error|fatal|crit(?:ical)?|warn(?:ing)?|panic)\]"
    r"|\b(?i:level|severity|lvl)\s*[=:]\s*\"?(?i:error|fatal|crit(?:ical)?|warn(?:ing)?|panic)\b"
    r"|\w(?:Exception|Error)\b|\bException\b|Traceback \(most recent call last\)"
    r"|\bpanic:|\b(?i:segfault)\b|Segmentation fault|\bSIGSEGV\b|\bSIGABRT\b|core dumped"
    r"|\bOOM\b|(?i:out of memory)|OutOfMemory|\bKilled\b|\b(?i:oom-kill)"
    r"|\bCUDA(?: error|_ERROR)|\bcuda(?:Error|ErrorMemoryAllocation)|CUBLAS_STATUS|\bcuDNN error"
    r"|\bNCCL (?:WARN|ERROR|error)|ncclSystemError|ncclInternalError|ncclUnhandledCudaError"
)
"""A line worth keeping: a level, or a crash marker. Upper-case levels count as words ("ERROR db down"); any
case counts before a separator ("error: …", "[warn]", "level=error"), so "no errors" in prose does not."""
_OPENS_BLOCK: Final = re.compile(
    r"Traceback \(most recent call last\)|\bpanic:|^\s*(?:Exception in thread|Caused by:)|"
    r"\w(?:Exception|Error)\b"
)
_TRACEBACK: Final = re.compile(r"Traceback \(most recent call last\)")
_FRAME: Final = re.compile(
    r"^(?:\s+\S|\s*at \S|goroutine \d+ |Caused by:|\.\.\. \d+ more|created by |[\w./*()\[\]-]{1,200}\(.{0,500}\)\s*$)"
)
"""A line that continues a block: indented (Python and Go frames), Java's "at …", Go's "goroutine N [running]:"
and "pkg.fn(…)" lines."""
_NORMALISE: Final = (
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"), "<time>"),
    (re.compile(r"\b\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\b"), "<time>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uid>"),
    (re.compile(r"\b0x[0-9a-f]+\b|\b[0-9a-f]{12,}\b", re.I), "<hex>"),
    (re.compile(r"\d+"), "#"),
)
_REPEATS: Final = re.compile(r"[*+]|\{\d*,")


def _nests_repetition(pattern: str) -> bool:
    """Whether ``pattern`` repeats (``*``, ``+``, ``{n,}``) a group that itself holds a repetition or an
    alternation, at any depth: ``(a+)+``, ``((a+)b)*``, ``(a|aa)+`` (the shapes that backtrack exponentially)."""
    stack: list[bool] = []  # per open group: does it hold a repetition or an alternation?
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":  # a class: skip to its end ("]" first in it is literal)
            j = i + 1 + (pattern[i + 1 : i + 2] == "^")
            j += pattern[j : j + 1] == "]"
            while j < n and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        if ch == "(":
            stack.append(False)
        elif ch == ")" and stack:
            inner = stack.pop()
            repeated = _REPEATS.match(pattern, i + 1) is not None
            if inner and repeated:
                return True
            if stack and (inner or repeated):
                stack[-1] = True
        elif stack and (ch == "|" or _REPEATS.match(pattern, i)):
            stack[-1] = True
        i += 1
    return False


WORKLOADS: Final = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")


def normalise(line: str) -> str:
    """``line`` with what differs between repeats of one message (times, UUIDs, hex ids, numbers) replaced."""
    for pattern, placeholder in _NORMALISE:
        line = pattern.sub(placeholder, line)
    return line.strip()


def compile_grep(pattern: str | None) -> re.Pattern[str] | None:
    """``pattern`` compiled (None for none); :class:`BadArgument` naming ``grep`` when it is too long, does not
    compile, or repeats a group holding a repetition or an alternation (``(a+)+``, ``(a|aa)*``: exponential on a line
    that almost matches)."""
    if pattern is None or pattern == "":
        return None
    if len(pattern) > MAX_GREP:
        raise BadArgument("grep", f"at most {MAX_GREP} characters (got {len(pattern)})")
    if _nests_repetition(pattern):
        raise BadArgument(
            "grep",
            "a repeated group holding a repetition or an alternation, such as (a+)+ or (a|b)*, is not accepted "
            "(it can take exponential time); simplify the pattern",
        )
    try:
        return re.compile(pattern)
    except re.error as err:
        raise BadArgument("grep", f"not a regular expression: {err}") from None


def _units(lines: Sequence[str], keep: Sequence[bool], blocks: bool) -> Iterator[list[str]]:
    """The kept lines as units: one line, or (with ``blocks``) a Traceback/panic/exception line with the frames
    that follow it (and, after a Traceback, the exception line that ends it)."""
    i, n = 0, len(lines)
    while i < n:
        if not keep[i]:
            i += 1
            continue
        unit = [lines[i]]
        if (
            blocks
            and i + 1 < n
            and _FRAME.match(lines[i + 1])
            and _OPENS_BLOCK.search(lines[i][:MATCH_CHARS])
        ):
            traceback = bool(_TRACEBACK.search(lines[i][:MATCH_CHARS]))
            j = i + 1
            while j < n and len(unit) < BLOCK_LINES and _FRAME.match(lines[j]):
                unit.append(lines[j])
                j += 1
            if traceback and j < n and len(unit) < BLOCK_LINES and lines[j].strip():
                unit.append(lines[j])  # "ValueError: …", the line that says what was raised
                j += 1
            i = j
        else:
            i += 1
        yield unit


def _cut(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1] + "…"


def excerpt(
    text: str, *, grep: str | None, errors_only: bool, head: int = HEAD, tail: int = TAIL
) -> dict[str, Any]:
    """What of ``text`` an agent reads: the lines ``grep`` matches (when given), else the error lines and their
    blocks (``errors_only``), else every line; repeats collapsed into their first occurrence marked
    "(repeated ×N)"; the first ``head`` and last ``tail`` lines of that with ``omitted`` counting the rest. When
    nothing is selected the last ``tail`` lines stand in (only exact repeats folded), with ``fallback`` saying so.

    Returns ``lines``, ``matched`` (lines selected before collapsing), ``omitted``, ``repeats_collapsed`` (lines
    folded into an earlier one) and ``read`` (lines in ``text``)."""
    pattern = compile_grep(grep)
    lines = text.splitlines()
    if pattern is not None:
        keep = [pattern.search(line[:MATCH_CHARS]) is not None for line in lines]
    elif errors_only:
        keep = [ERROR_LINE.search(line[:MATCH_CHARS]) is not None for line in lines]
    else:
        keep = [True] * len(lines)
    units = list(_units(lines, keep, blocks=pattern is None and errors_only))
    matched = sum(len(u) for u in units)
    out: dict[str, Any] = {"read": len(lines), "matched": matched}
    if not units:
        units = [[line] for line in lines[-tail:]] if tail > 0 else []
        if units:
            out["fallback"] = f"nothing matched; the last {len(units)} lines"
    same = str if "fallback" in out else normalise  # the fallback is context: only exact repeats fold
    counts: dict[str, int] = {}
    firsts: list[tuple[str, list[str]]] = []
    for unit in units:
        key = "\n".join(same(line[:LINE_CHARS]) for line in unit)  # what differs past the cut is not shown
        if key not in counts:
            counts[key] = 0
            firsts.append((key, unit))
        counts[key] += 1
    shown: list[str] = []
    for key, unit in firsts:
        repeats = counts[key]
        first = _cut(unit[0]) + (f" (repeated ×{repeats})" if repeats > 1 else "")
        shown.extend([first, *(_cut(line) for line in unit[1:])])
    collapsed = sum(len(u) for u in units) - sum(len(u) for _, u in firsts)
    omitted = max(0, len(shown) - head - tail)
    if omitted:
        shown = [*shown[:head], f"… {omitted} lines omitted …", *shown[len(shown) - tail :]]
    out.update(lines=shown, omitted=omitted, repeats_collapsed=collapsed)
    return out


# ---- the tool ------------------------------------------------------------------------------------------------------


class LogsArgs(ListArgs):
    kind: Literal["Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"] = Field(
        "Pod", description="A Pod, or a workload whose pods' logs to read."
    )
    name: str = Field(..., min_length=1, max_length=MAX_TEXT, description="The Pod's or workload's name.")
    namespace: str = Field(..., min_length=1, max_length=MAX_TEXT, description="Its namespace.")
    container: str | None = Field(
        None,
        max_length=MAX_TEXT,
        description="Only this container (default: every app container, and init containers that failed).",
    )
    previous: bool = Field(False, description="Read the previous (crashed) container instance's log.")
    grep: str | None = Field(
        None,
        max_length=MAX_GREP,
        description="Keep only lines matching this regular expression (Python syntax; replaces errors_only).",
    )
    since_seconds: int | None = Field(
        None, ge=1, le=30 * 86400, description="Only lines written in the last this many seconds."
    )
    errors_only: bool = Field(
        True,
        description="Keep error lines (levels, exceptions, tracebacks, panics, OOM, CUDA/NCCL errors); false: all.",
    )
    tail_lines: int = Field(500, ge=1, le=5000, description="How many of each log's last lines to read.")


@dataclass(frozen=True)
class Target:
    pod: str
    container: str


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _owned_by(obj: Mapping[str, Any], kind: str, owner: Mapping[str, Any]) -> bool:
    uid = str(_meta(owner).get("uid") or "")
    for ref in _meta(obj).get("ownerReferences") or []:
        if not isinstance(ref, Mapping) or ref.get("kind") != kind:
            continue
        if (uid and ref.get("uid") == uid) or (not uid and ref.get("name") == _meta(owner).get("name")):
            return True
    return False


def _selects(selector: Any, labels: Mapping[str, Any]) -> bool:
    """Whether a workload's ``spec.selector`` (matchLabels and matchExpressions) selects ``labels``; an empty or
    missing selector selects nothing here (never every pod of the namespace)."""
    if not isinstance(selector, Mapping):
        return False
    match = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not match and not exprs:
        return False
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for e in exprs:
        if not isinstance(e, Mapping):
            return False
        key, op, values = str(e.get("key") or ""), e.get("operator"), e.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels.get(key) in values):
            return False
        if op == "NotIn" and present and labels.get(key) in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def pods_of(snapshot: Any, kind: str, namespace: str, name: str) -> list[Mapping[str, Any]]:
    """The pods of one Pod or workload in ``snapshot``, sorted by name; :class:`Unavailable` when the object is
    not there. Owner references first (a Deployment's through its ReplicaSets), the workload's selector when no
    pod names it as owner."""
    obj = snapshot.get(kind, namespace, name)
    if obj is None:
        raise Unavailable(f"logs: no {kind} {namespace}/{name} in the cluster state")
    if kind == "Pod":
        return [obj]
    pods = list(snapshot.in_namespace("Pod", namespace))
    if kind == "Deployment":
        sets = [rs for rs in snapshot.in_namespace("ReplicaSet", namespace) if _owned_by(rs, kind, obj)]
        owned = [p for p in pods if any(_owned_by(p, "ReplicaSet", rs) for rs in sets)]
    else:
        owned = [p for p in pods if _owned_by(p, kind, obj)]
    if not owned:
        selector = (obj.get("spec") or {}).get("selector")
        owned = [p for p in pods if _selects(selector, _meta(p).get("labels") or {})]
    return sorted(owned, key=lambda p: str(_meta(p).get("name") or ""))


def _statuses(pod: Mapping[str, Any], field: str) -> dict[str, Mapping[str, Any]]:
    status = pod.get("status") or {}
    return {str(s.get("name")): s for s in status.get(field) or [] if isinstance(s, Mapping)}


def _failed(status: Mapping[str, Any]) -> bool:
    for state in (status.get("state") or {}, status.get("lastState") or {}):
        terminated = state.get("terminated") if isinstance(state, Mapping) else None
        if isinstance(terminated, Mapping) and terminated.get("exitCode") not in (None, 0):
            return True
    return False


def _troubled(pod: Mapping[str, Any]) -> bool:
    statuses = [
        *_statuses(pod, "containerStatuses").values(),
        *_statuses(pod, "initContainerStatuses").values(),
    ]
    return any(_failed(s) or int(s.get("restartCount") or 0) > 0 or not s.get("ready") for s in statuses)


def containers_of(pod: Mapping[str, Any], container: str | None) -> list[str]:
    """The containers of ``pod`` to read: ``container`` when given (and the pod has it), else every app container
    and the init containers that failed, in spec order."""
    spec = pod.get("spec") or {}
    apps = [str(c.get("name")) for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    inits = [str(c.get("name")) for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
    if container is not None:
        return [container] if container in (*apps, *inits) else []
    init_status = _statuses(pod, "initContainerStatuses")
    return [*(n for n in inits if n in init_status and _failed(init_status[n])), *apps]


def _unreadable(err: BaseException) -> str:
    if isinstance(err, ApiError):
        return " ".join(f"{err.status} {err.reason}: {err.message}".split())[:LINE_CHARS]
    if isinstance(err, TimeoutError):
        return f"timed out after {READ_TIMEOUT_S:g}s"
    return " ".join(f"{type(err).__name__}: {err}".split())[:LINE_CHARS]


def _signature(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """What makes two pods' entries the same (their container and their normalised lines)."""
    if "unreadable" in entry:
        return (str(entry["container"]), "unreadable", normalise(str(entry["unreadable"])))
    return (str(entry["container"]), *(normalise(line) for line in entry["lines"]))


def merge(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` (one per pod and container) with the pods whose excerpts are the same once normalised folded
    into the first, which then names them in ``same_in``; order kept."""
    out: list[dict[str, Any]] = []
    first: dict[tuple[str, ...], dict[str, Any]] = {}
    for entry in entries:
        key = _signature(entry)
        if key in first:
            first[key].setdefault("same_in", []).append(entry["pod"])
            continue
        first[key] = dict(entry)
        out.append(first[key])
    return out


async def _logs(call: Call, args: LogsArgs) -> dict[str, Any]:
    compile_grep(args.grep)  # a bad pattern is an argument error before anything is read
    pods = pods_of(call.state.snapshot, args.kind, args.namespace, args.name)
    chosen = sorted(pods, key=lambda p: (not _troubled(p), str(_meta(p).get("name") or "")))[:MAX_PODS]
    chosen.sort(key=lambda p: str(_meta(p).get("name") or ""))
    targets: list[Target] = []
    for pod in chosen:
        names = containers_of(pod, args.container)
        targets.extend(Target(str(_meta(pod).get("name")), c) for c in names[:MAX_CONTAINERS])
    if args.container is not None and not targets and pods:
        known = sorted({c for p in chosen for c in containers_of(p, None)})
        raise Unavailable(
            f"logs: {args.kind} {args.namespace}/{args.name} has no container {args.container!r}"
            + (f" (it has: {', '.join(known)})" if known else "")
        )
    redact = call.state.redactor.text
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def read(target: Target) -> dict[str, Any]:
        entry: dict[str, Any] = {"pod": target.pod, "container": target.container}
        try:
            async with gate:
                text = await asyncio.wait_for(
                    call.logs.read(
                        args.namespace,
                        target.pod,
                        target.container,
                        previous=args.previous,
                        tail_lines=args.tail_lines,
                        since_seconds=args.since_seconds,
                    ),
                    READ_TIMEOUT_S,
                )
        except (ApiError, TimeoutError, OSError) as err:
            entry["unreadable"] = redact(_unreadable(err))
            return entry
        if len(text) > READ_CHARS:  # a reader that ignores the byte bound: the tail, from a whole line
            text = text[-READ_CHARS:].partition("\n")[2]
        cut = excerpt(redact(text), grep=args.grep, errors_only=args.errors_only)
        cut["lines"] = [redact(line) for line in cut["lines"]]
        if "fallback" in cut:
            cut["fallback"] = redact(cut["fallback"])
        entry.update(cut)
        return entry

    entries = merge(list(await asyncio.gather(*(read(t) for t in targets))))
    page = call.page(entries, args)
    out: dict[str, Any] = {
        "kind": args.kind,
        "namespace": args.namespace,
        "name": args.name,
        "previous": args.previous,
        "filter": "grep" if args.grep else "errors" if args.errors_only else "all",
        "pods": len(pods),
    }
    if len(pods) > len(chosen):
        out["pods_skipped"] = len(pods) - len(chosen)
        out["note"] = (
            f"read {len(chosen)} of {len(pods)} pods (troubled ones first); name a pod for the others"
        )
    if not targets:
        out["note"] = f"{args.kind} {args.namespace}/{args.name} has no pods to read"
    return {**out, **page.to_json("containers")}


LOGS = ToolSpec(
    name="logs",
    title="Container logs, cut to the errors",
    description=(
        "A Pod's or a workload's (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job: up to 10 of its pods) "
        "container logs, current or previous instance: error lines (levels, exceptions with their tracebacks, "
        "panics, OOM, CUDA/NCCL errors) or grep matches, repeats collapsed as '(repeated ×N)', head 30 + tail 20 "
        "lines with an omitted count, the last 20 lines when nothing matches. Pods with the same excerpt are "
        "merged. Secrets are redacted."
    ),
    args=LogsArgs,
    run=_logs,
    budget=Budget(2500, 10000),
    reads=("Pod",),
)
