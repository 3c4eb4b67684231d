"""The fault-scenario suite's report for bench/diagnose.py: one row per scenario (Capstan's and k8sgpt's results on
the same live cluster state), a table and the summary the goals are read from. Pure: the rows come from whoever
played the scenarios (``capstan.faults``' runner, through its ``on_state`` hook); nothing here touches a cluster.
Imported the way the bench scripts import ``goals``, and by its unit test as ``bench._diagnose_suite``.

Scoring, the same rule for both tools: a scenario is **right** (top-1) when the tool's first result names the
expected object (kind and name) and its text contains every expected keyword (case-insensitive). Capstan's first
result is its first ranked finding (``Finding.objects[0]`` is the subject; the text is the root-cause sentence, the
cause and the evidence texts); k8sgpt does not rank, so its answer is its results about the expected object
(``bench/_k8sgpt.py``, ``k8sgpt_top1``, gives the exact rule and why it is not simply its first entry).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from rich.table import Table


@dataclass(frozen=True)
class ScenarioRow:
    """One scenario's results. ``false_roots`` counts Capstan's findings that blame a symptom or the decoy;
    ``evidence_recall`` is the share of the expected evidence the diagnosis cited (0–1). k8sgpt's fields are None
    when it was not run."""

    scenario: str
    category: str
    tags: tuple[str, ...] = ()
    capstan_top1: bool = False
    evidence_recall: float = 0.0
    false_roots: int = 0
    seconds: float = 0.0
    tokens: int = 0
    k8sgpt_top1: bool | None = None
    k8sgpt_tokens: int | None = None
    error: str = ""

    @property
    def decoy(self) -> bool:
        return "decoy" in self.tags


@dataclass(frozen=True)
class SuiteSummary:
    scenarios: int
    top1: float
    evidence_recall: float
    false_roots_on_decoys: int
    decoy_scenarios: int
    median_tokens: float
    median_seconds: float
    max_seconds: float
    capstan_right: int
    k8sgpt_right: int | None
    k8sgpt_scenarios: int
    capstan_right_where_k8sgpt_ran: int
    k8sgpt_median_tokens: float | None
    only_capstan: tuple[str, ...] = ()
    only_k8sgpt: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    by_category: dict[str, tuple[int, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["by_category"] = {k: {"right": r, "scenarios": n} for k, (r, n) in self.by_category.items()}
        out["only_capstan"], out["only_k8sgpt"], out["errors"] = (
            list(self.only_capstan),
            list(self.only_k8sgpt),
            list(self.errors),
        )
        return out


def summarize(rows: Sequence[ScenarioRow]) -> SuiteSummary:
    """Top-1 and evidence recall over the scenarios that ran (an ``error`` row counts as wrong, recall 0), false
    roots summed over the decoy scenarios only, medians of tokens and seconds, and which scenarios each tool got
    right (k8sgpt over the rows where it ran)."""
    n = len(rows)
    decoys = [r for r in rows if r.decoy]
    peer = [r for r in rows if r.k8sgpt_top1 is not None]
    categories: dict[str, tuple[int, int]] = {}
    for r in rows:
        right, total = categories.get(r.category, (0, 0))
        categories[r.category] = (right + int(r.capstan_top1), total + 1)
    peer_tokens = [r.k8sgpt_tokens for r in peer if r.k8sgpt_tokens is not None]
    return SuiteSummary(
        scenarios=n,
        top1=sum(r.capstan_top1 for r in rows) / n if n else 0.0,
        evidence_recall=sum(r.evidence_recall for r in rows) / n if n else 0.0,
        false_roots_on_decoys=sum(r.false_roots for r in decoys),
        decoy_scenarios=len(decoys),
        median_tokens=float(median(r.tokens for r in rows)) if n else 0.0,
        median_seconds=float(median(r.seconds for r in rows)) if n else 0.0,
        max_seconds=max((r.seconds for r in rows), default=0.0),
        capstan_right=sum(r.capstan_top1 for r in rows),
        k8sgpt_right=sum(bool(r.k8sgpt_top1) for r in peer) if peer else None,
        k8sgpt_scenarios=len(peer),
        capstan_right_where_k8sgpt_ran=sum(r.capstan_top1 for r in peer),
        k8sgpt_median_tokens=float(median(peer_tokens)) if peer_tokens else None,
        only_capstan=tuple(r.scenario for r in peer if r.capstan_top1 and not r.k8sgpt_top1),
        only_k8sgpt=tuple(r.scenario for r in peer if r.k8sgpt_top1 and not r.capstan_top1),
        errors=tuple(f"{r.scenario}: {r.error}" for r in rows if r.error),
        by_category=dict(sorted(categories.items())),
    )


def _mark(ok: bool | None) -> str:
    return "—" if ok is None else ("✓" if ok else "✗")


def suite_table(rows: Sequence[ScenarioRow]) -> Table:
    """One line per scenario, in the order given."""
    table = Table(title=f"Fault scenarios ({len(rows)})")
    for col, justify in (
        ("scenario", "left"),
        ("category", "left"),
        ("tags", "left"),
        ("Capstan top-1", "center"),
        ("evidence", "right"),
        ("false roots", "right"),
        ("s", "right"),
        ("tokens", "right"),
        ("k8sgpt top-1", "center"),
        ("k8sgpt tokens", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(
            r.scenario + (f" (error: {r.error})" if r.error else ""),
            r.category,
            ",".join(r.tags),
            _mark(r.capstan_top1),
            f"{r.evidence_recall:.0%}",
            str(r.false_roots),
            f"{r.seconds:.3f}",
            f"{r.tokens:,}",
            _mark(r.k8sgpt_top1),
            "—" if r.k8sgpt_tokens is None else f"{r.k8sgpt_tokens:,}",
        )
    return table


def summary_table(
    summary: SuiteSummary, *, top1_goal: float, recall_goal: float, tokens_goal: float, seconds_goal: float
) -> Table:
    """The summary against the goals (the limits are passed in: bench/goals.py holds them)."""

    def verdict(ok: bool) -> str:
        return "met" if ok else "missed"

    s = summary
    table = Table(title="Fault-scenario suite: summary")
    for col in ("measure", "figure", "goal", "verdict"):
        table.add_column(col)
    table.add_row(
        "top-1 root cause",
        f"{s.top1:.1%} ({s.capstan_right}/{s.scenarios})",
        f"≥ {top1_goal:.0%}",
        verdict(s.top1 >= top1_goal),
    )
    table.add_row(
        "evidence recall",
        f"{s.evidence_recall:.1%}",
        f"≥ {recall_goal:.0%}",
        verdict(s.evidence_recall >= recall_goal),
    )
    table.add_row(
        "false roots on decoy scenarios",
        f"{s.false_roots_on_decoys} in {s.decoy_scenarios}",
        "0",
        verdict(s.false_roots_on_decoys == 0),
    )
    table.add_row(
        "median output",
        f"{s.median_tokens:,.0f} tokens",
        f"≤ {tokens_goal:,.0f}",
        verdict(s.median_tokens <= tokens_goal),
    )
    table.add_row(
        "time per diagnosis",
        f"median {s.median_seconds:.3f} s, max {s.max_seconds:.3f} s",
        f"≤ {seconds_goal:g} s (at 10k pods: the scale part)",
        "—",
    )
    if s.k8sgpt_right is None:
        table.add_row(
            "scenarios right vs k8sgpt", f"{s.capstan_right} (k8sgpt not run)", "more than k8sgpt", "—"
        )
    else:
        table.add_row(
            "scenarios right vs k8sgpt",
            f"{s.capstan_right_where_k8sgpt_ran} vs {s.k8sgpt_right} of {s.k8sgpt_scenarios}; "
            f"only Capstan {len(s.only_capstan)}, only k8sgpt {len(s.only_k8sgpt)}",
            "more than k8sgpt",
            verdict(s.capstan_right_where_k8sgpt_ran > s.k8sgpt_right),
        )
    return table
