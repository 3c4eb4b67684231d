"""The MCP benchmark's fault-scenario report (bench/mcp_context.py ``--suite``): scoring one MCP answer against a scenario's
``expect``, one row per scenario (Capstan's first response beside kubernetes-mcp-server's calls), the table and the
summary. Pure: the answers come from bench/_mcp_play.py; nothing here touches a cluster.

**Capstan's first response** (the ``problems`` answer, and the ``diagnose`` answer when that tool exists) is read
back as the agent reads it, from its JSON text:

- **hit** (root cause + evidence): some finding of the answer is about the expected object (its subject, or its
  first object, as ``capstan.faults.score`` reads it), its root-cause sentence holds every expected keyword
  (case-insensitive), and every expected evidence string appears in the answer's text (with each recorded change
  also written ``Kind/name``, as ``capstan.faults.score`` writes it);
- **rank 1**: ``capstan.faults.score`` itself over the answer's findings rebuilt as :class:`capstan.diagnose.Finding`
  objects (the first finding must be the expected one, of the expected category): the diagnosis bench's top-1, on
  what the server served (redacted, cut to its budget);
- **tokens**: the answer's own ``tokens`` field; **ms**: the call's wall time through the SDK client (the first
  ``problems`` call reads the namespace and runs the diagnosis).

**kubernetes-mcp-server** follows a fixed plan (bench/_mcp_play.py) and is read two ways: how many calls (and their
``cl100k_base`` tokens) until every expected **evidence** string has appeared in the text of its answers so far
(:func:`peer_evidence`: the issue's measure), and until the evidence and every expected **keyword** have
(:func:`peer_found`: stricter, and biased towards Capstan, whose analyzers wrote the keywords). Texts compare
after :func:`normalise`; each answer's text is preceded by the kind it was asked for. A measure the plan never
reaches is "not found" (its tokens are then the whole plan's).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any, Final

from rich.table import Table

from capstan.diagnose import Category, Diagnosis, Evidence, Finding, ObjectRef, Severity, Source, Symptom
from capstan.faults import ObjectKey, Scenario, score
from capstan.restarts import RecordedChange


def _ref(data: Mapping[str, Any]) -> ObjectRef:
    return ObjectRef(
        str(data.get("kind") or ""), str(data.get("namespace") or ""), str(data.get("name") or "")
    )


def _enum(cls: Any, value: Any, fallback: Any) -> Any:
    try:
        return cls(value)
    except ValueError:
        return fallback


def finding_from_json(data: Mapping[str, Any]) -> Finding:
    """A :class:`Finding` back from its served JSON (``Finding.to_json``); fields the budget cut are empty."""
    objects = tuple(_ref(o) for o in data.get("objects") or [] if isinstance(o, Mapping))
    return Finding(
        id=str(data.get("id") or ""),
        analyzer=str(data.get("analyzer") or ""),
        cause=str(data.get("cause") or ""),
        severity=_enum(Severity, data.get("severity"), Severity.WARNING),
        category=_enum(Category, data.get("category"), Category.RUNTIME),
        root_cause=str(data.get("root_cause") or ""),
        objects=objects or (ObjectRef("", "", ""),),
        evidence=tuple(
            Evidence(
                str(e.get("what") or ""),
                _enum(Source, e.get("source"), next(iter(Source))),
                str(e.get("where") or ""),
                str(e.get("text") or ""),
                e.get("at"),
            )
            for e in data.get("evidence") or []
            if isinstance(e, Mapping)
        ),
        changes=tuple(
            RecordedChange(
                float(c.get("at") or 0.0),
                str(c.get("kind") or ""),
                str(c.get("namespace") or ""),
                str(c.get("name") or ""),
                str(c.get("change") or ""),
                str(c.get("summary") or ""),
            )
            for c in data.get("changes") or []
            if isinstance(c, Mapping)
        ),
        symptoms=tuple(
            Symptom(_ref(s.get("object") or {}), str(s.get("problem") or ""))
            for s in data.get("symptoms") or []
            if isinstance(s, Mapping)
        ),
        confidence=float(data.get("confidence") or 0.0),
        next_check=str(data.get("next_check") or ""),
    )


def _findings_of(answer: Mapping[str, Any]) -> list[dict[str, Any]]:
    found = answer.get("findings")
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []


@dataclass(frozen=True)
class AnswerScore:
    """How one served answer does against a scenario's expectation."""

    hit: bool
    root_cause: bool
    evidence_recall: float
    rank1: bool
    missing: tuple[str, ...] = ()


def score_answer(
    scenario: Scenario, answer: Mapping[str, Any], text: str, node_names: Mapping[str, str]
) -> AnswerScore:
    """Score the answer (its parsed JSON and its text) against ``scenario.expect`` (see the module's rules)."""
    expect = scenario.expect
    key = expect.object
    if key.kind == "Node" and key.name in node_names:
        key = ObjectKey(kind="Node", name=node_names[key.name])
    findings = [finding_from_json(f) for f in _findings_of(answer)]
    # the recorded changes also as "Kind/name", as capstan.faults.score reads them (an evidence item may name one)
    lowered = "\n".join([text, *(f"{c.kind}/{c.name}" for f in findings for c in f.changes)]).lower()
    root = any(
        (key.matches(f.subject.kind, f.subject.name) or key.matches(f.objects[0].kind, f.objects[0].name))
        and all(k.lower() in f.root_cause.lower() for k in expect.keywords)
        for f in findings
    )
    normalised = normalise(lowered)
    missing = tuple(e for e in expect.evidence if normalise(e) not in normalised)
    recall = 1.0 if not expect.evidence else 1 - len(missing) / len(expect.evidence)
    strict = score(
        expect, Diagnosis(findings=tuple(findings)), decoys=scenario.decoy_objects, node_names=node_names
    )
    return AnswerScore(root and not missing, root, recall, strict.top1, missing)


_OBJECT_NAME: Final = re.compile(r"^([A-Z][A-Za-z]+)/([a-z0-9][a-z0-9.-]*)$")
_FIELD_SEP: Final = re.compile(r"\s*[:=]\s*")


def normalise(text: str) -> str:
    """Lower case, quotes dropped, ``key: value`` and ``key=value`` written alike (YAML, JSON and Capstan's
    ``exitCode=139`` compare equal), runs of blanks as one space."""
    return " ".join(_FIELD_SEP.sub("=", text.lower().replace('"', "").replace("'", "")).split())


def evidence_present(item: str, normalised: str) -> bool:
    """``item`` in the :func:`normalise`-d text; an item naming an object (``Deployment/search-api``: for Capstan,
    usually its recorded change) also counts when the kind and the name both appear, since the peer's YAML and
    tables never write them joined (a rule in the peer's favour: it has no history to show the change itself)."""
    if normalise(item) in normalised:
        return True
    m = _OBJECT_NAME.match(item)
    return m is not None and m.group(1).lower() in normalised and m.group(2).lower() in normalised


def peer_evidence(scenario: Scenario, text: str) -> bool:
    """Every expected evidence string appears in ``text`` (the issue's measure: "before the same evidence
    appears")."""
    normalised = normalise(text)
    return all(evidence_present(e, normalised) for e in scenario.expect.evidence)


def peer_found(scenario: Scenario, text: str) -> bool:
    """The evidence and also every expected keyword appear in ``text``. The keywords are the root cause as Capstan's
    analyzers word it (``SIGSEGV`` for exit code 139, ``no RoleBinding``): raw API objects and logs hold them only
    when the cause is written there verbatim, so this stricter measure favours Capstan and is reported beside
    :func:`peer_evidence`, not instead of it."""
    normalised = normalise(text)
    return all(normalise(k) in normalised for k in scenario.expect.keywords) and peer_evidence(scenario, text)


@dataclass(frozen=True)
class CallFigures:
    """One Capstan call: its score, ``tokens`` field, wall ms, and whether it was over the tool's budget."""

    hit: bool = False
    root_cause: bool = False
    evidence_recall: float = 0.0
    rank1: bool = False
    tokens: int = 0
    ms: float = 0.0
    over_budget: bool = False
    error: str = ""
    text: str = ""
    """The answer as served (kept in the JSON so it can be read again)."""


@dataclass(frozen=True)
class McpRow:
    """One scenario: Capstan's ``problems`` (and ``diagnose``, None when absent) and the peer's plan (None when the
    peer was not run)."""

    scenario: str
    category: str
    tags: tuple[str, ...] = ()
    problems: CallFigures = field(default_factory=CallFigures)
    diagnose: CallFigures | None = None
    with_history: CallFigures | None = None
    unscoped: CallFigures | None = None
    """The same live state's ``problems`` without the namespace argument (other namespaces' findings too)."""
    diagnosis_top1: bool | None = None
    peer_found: bool | None = None
    peer_calls: int | None = None
    peer_tokens: int | None = None
    peer_ms: float | None = None
    peer_evidence_found: bool | None = None
    peer_evidence_calls: int | None = None
    peer_evidence_tokens: int | None = None
    peer_log: tuple[tuple[str, int], ...] = ()
    """Each call of the peer's plan that was made: the tool and its answer's tokens."""
    peer_error: str = ""
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["problems"] = self.problems.__dict__
        out["diagnose"] = None if self.diagnose is None else self.diagnose.__dict__
        out["with_history"] = None if self.with_history is None else self.with_history.__dict__
        out["unscoped"] = None if self.unscoped is None else self.unscoped.__dict__
        out["tags"] = list(self.tags)
        out["peer_log"] = [list(c) for c in self.peer_log]
        return out


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0–100) of ``values`` (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)])


@dataclass(frozen=True)
class McpSummary:
    scenarios: int
    hit_rate: float
    hits: int
    rank1: int
    evidence_recall: float
    median_tokens: float
    p95_tokens: float
    max_tokens: int
    over_budget: int
    median_ms: float
    p95_ms: float
    diagnose_hits: int | None
    diagnose_scenarios: int
    either_hits: int
    history_hits: int | None
    history_scenarios: int
    unscoped_hits: int | None
    unscoped_scenarios: int
    peer_scenarios: int
    peer_found: int
    peer_median_calls: float | None
    peer_median_tokens: float | None
    peer_median_tokens_found: float | None
    peer_evidence_found: int
    peer_median_calls_evidence: float | None
    peer_median_tokens_evidence: float | None
    misses: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["misses"], out["errors"] = list(self.misses), list(self.errors)
        return out


def summarize(rows: Sequence[McpRow]) -> McpSummary:
    """Hit rate of the first ``problems`` response over every scenario (an error row is a miss), token and time
    percentiles, budget overruns across every Capstan call, the ``diagnose`` hits where it ran, and the peer's."""
    n = len(rows)
    tokens = [r.problems.tokens for r in rows if not r.error]
    ms = [r.problems.ms for r in rows if not r.error]
    diag = [r.diagnose for r in rows if r.diagnose is not None]
    hist = [r.with_history for r in rows if r.with_history is not None]
    unscoped = [r.unscoped for r in rows if r.unscoped is not None]
    peer = [r for r in rows if r.peer_found is not None]
    peer_found_rows = [r for r in peer if r.peer_found]
    ev_rows = [r for r in peer if r.peer_evidence_found]
    return McpSummary(
        scenarios=n,
        hit_rate=sum(r.problems.hit for r in rows) / n if n else 0.0,
        hits=sum(r.problems.hit for r in rows),
        rank1=sum(r.problems.rank1 for r in rows),
        evidence_recall=sum(r.problems.evidence_recall for r in rows) / n if n else 0.0,
        median_tokens=float(median(tokens)) if tokens else 0.0,
        p95_tokens=percentile(tokens, 95),
        max_tokens=max(tokens, default=0),
        over_budget=sum(r.problems.over_budget for r in rows) + sum(d.over_budget for d in diag),
        median_ms=float(median(ms)) if ms else 0.0,
        p95_ms=percentile(ms, 95),
        diagnose_hits=sum(d.hit for d in diag) if diag else None,
        diagnose_scenarios=len(diag),
        either_hits=sum(r.problems.hit or (r.diagnose is not None and r.diagnose.hit) for r in rows),
        history_hits=sum(h.hit for h in hist) if hist else None,
        history_scenarios=len(hist),
        unscoped_hits=sum(u.hit for u in unscoped) if unscoped else None,
        unscoped_scenarios=len(unscoped),
        peer_scenarios=len(peer),
        peer_found=len(peer_found_rows),
        peer_median_calls=float(median(r.peer_calls or 0 for r in peer_found_rows))
        if peer_found_rows
        else None,
        peer_median_tokens=float(median(r.peer_tokens or 0 for r in peer)) if peer else None,
        peer_median_tokens_found=float(median(r.peer_tokens or 0 for r in peer_found_rows))
        if peer_found_rows
        else None,
        peer_evidence_found=len(ev_rows),
        peer_median_calls_evidence=float(median(r.peer_evidence_calls or 0 for r in ev_rows))
        if ev_rows
        else None,
        peer_median_tokens_evidence=float(median(r.peer_evidence_tokens or 0 for r in ev_rows))
        if ev_rows
        else None,
        misses=tuple(r.scenario for r in rows if not r.problems.hit),
        errors=tuple(f"{r.scenario}: {r.error}" for r in rows if r.error)
        + tuple(f"{r.scenario}: {r.peer_error}" for r in rows if r.peer_error),
    )


def _mark(ok: bool | None) -> str:
    return "—" if ok is None else ("✓" if ok else "✗")


def _peer(found: bool | None, figure: int | None) -> str:
    if found is None:
        return "—"
    return f"{figure:,}" if found and figure is not None else "not found"


def suite_table(rows: Sequence[McpRow]) -> Table:
    table = Table(title=f"Context an agent can act on: fault scenarios ({len(rows)})")
    for col, justify in (
        ("scenario", "left"),
        ("problems hit", "center"),
        ("rank 1", "center"),
        ("evidence", "right"),
        ("tokens", "right"),
        ("ms", "right"),
        ("with history", "center"),
        ("diagnose hit", "center"),
        ("diagnose tokens", "right"),
        ("peer calls to evidence", "right"),
        ("peer tokens to evidence", "right"),
        ("peer calls (+ keywords)", "right"),
        ("peer tokens (+ keywords)", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        p, d = r.problems, r.diagnose
        table.add_row(
            r.scenario + (f" (error: {r.error})" if r.error else ""),
            _mark(p.hit),
            _mark(p.rank1),
            f"{p.evidence_recall:.0%}",
            f"{p.tokens:,}" + (" over" if p.over_budget else ""),
            f"{p.ms:,.0f}",
            "—" if r.with_history is None else _mark(r.with_history.hit),
            "—" if d is None else _mark(d.hit),
            "—" if d is None else f"{d.tokens:,}",
            _peer(r.peer_evidence_found, r.peer_evidence_calls),
            _peer(r.peer_evidence_found, r.peer_evidence_tokens),
            _peer(r.peer_found, r.peer_calls),
            _peer(r.peer_found, r.peer_tokens),
        )
    return table


def summary_table(s: McpSummary, *, hit_goal: float, median_goal: float, p95_goal: float) -> Table:
    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    table = Table(title="Context an agent can act on: summary")
    for col in ("measure", "figure", "goal", "verdict"):
        table.add_column(col)
    table.add_row(
        "root cause + evidence in the first `problems` response",
        f"{s.hit_rate:.1%} ({s.hits}/{s.scenarios}); ranked first {s.rank1}; evidence recall {s.evidence_recall:.1%}",
        f"≥ {hit_goal:.0%}",
        verdict(s.hit_rate >= hit_goal),
    )
    table.add_row(
        "the same, over the runner's snapshot with its recorded history",
        "—" if s.history_hits is None else f"{s.history_hits}/{s.history_scenarios}",
        "—",
        "—",
    )
    table.add_row(
        "the same live state's `problems` without the namespace argument",
        "—" if s.unscoped_hits is None else f"{s.unscoped_hits}/{s.unscoped_scenarios}",
        "—",
        "—",
    )
    table.add_row(
        "`diagnose` on the expected object",
        "not in the server's tools"
        if s.diagnose_hits is None
        else f"{s.diagnose_hits}/{s.diagnose_scenarios}",
        "—",
        "—",
    )
    table.add_row(
        "tokens of the first response",
        f"median {s.median_tokens:,.0f}, p95 {s.p95_tokens:,.0f}, max {s.max_tokens:,}",
        f"median ≤ {median_goal:,.0f}, p95 ≤ {p95_goal:,.0f}",
        verdict(s.median_tokens <= median_goal and s.p95_tokens <= p95_goal),
    )
    table.add_row("answers over their budget", str(s.over_budget), "0", verdict(s.over_budget == 0))
    table.add_row(
        "time of the first response", f"median {s.median_ms:,.0f} ms, p95 {s.p95_ms:,.0f} ms", "—", "—"
    )
    if s.peer_scenarios:
        table.add_row(
            "kubernetes-mcp-server (fixed plan): the evidence",
            f"found in {s.peer_evidence_found}/{s.peer_scenarios}; median {s.peer_median_calls_evidence or 0:g} "
            f"calls and {s.peer_median_tokens_evidence or 0:,.0f} tokens to it where found",
            "—",
            "—",
        )
        table.add_row(
            "kubernetes-mcp-server: the evidence and Capstan's keywords",
            f"found in {s.peer_found}/{s.peer_scenarios}; median {s.peer_median_calls or 0:g} calls and "
            f"{s.peer_median_tokens_found or 0:,.0f} tokens to them where found; the whole plan's median "
            f"{s.peer_median_tokens or 0:,.0f} tokens",
            "—",
            "—",
        )
    else:
        table.add_row("kubernetes-mcp-server", "not run", "—", "—")
    return table
