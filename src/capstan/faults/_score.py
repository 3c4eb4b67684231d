"""Scoring one diagnosis against a scenario's expectation: a pure function, the same in tests, `capstan faults` and
the benchmark.

- **top-1**: the first finding is about the expected object (its subject, or its first object), of the expected
  category, and its root cause contains every keyword (case-insensitive);
- **evidence recall**: the fraction of the expected evidence strings found (case-insensitive) in the first
  finding's evidence (what, where, text) and recorded changes (kind/name, change, summary); 1.0 when none is
  expected;
- **false roots**: root findings (warning or critical: an info finding blames nothing) whose subject is a declared
  decoy object or one of the expected symptoms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from capstan.diagnose import Diagnosis, Finding, ObjectRef, Severity
from capstan.faults._scenario import Expectation, ObjectKey


@dataclass(frozen=True)
class Score:
    top1: bool
    evidence_recall: float
    false_roots: tuple[str, ...] = ()
    missing_keywords: tuple[str, ...] = ()
    missing_evidence: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default=())
    """Why top-1 failed (empty when it passed)."""

    @property
    def passed(self) -> bool:
        return self.top1 and self.evidence_recall >= 1.0 and not self.false_roots

    def to_json(self) -> dict[str, Any]:
        return {
            "top1": self.top1,
            "evidence_recall": self.evidence_recall,
            "false_roots": list(self.false_roots),
            "missing_keywords": list(self.missing_keywords),
            "missing_evidence": list(self.missing_evidence),
            "reasons": list(self.reasons),
            "passed": self.passed,
        }


def _is(ref: ObjectRef, key: ObjectKey) -> bool:
    return key.matches(ref.kind, ref.name)


def _evidence_text(finding: Finding) -> str:
    parts = [f"{e.what}\n{e.where}\n{e.text}" for e in finding.evidence]
    parts += [f"{c.kind}/{c.name}\n{c.change}\n{c.summary}" for c in finding.changes]
    return "\n".join(parts).lower()


def missing_keywords(keywords: Sequence[str], text: str) -> tuple[str, ...]:
    """The ``keywords`` that ``text`` does not contain (case-insensitive substring match), in their order: the
    keyword check of :func:`score`, shared with the agent evaluation's answer scoring."""
    lowered = text.lower()
    return tuple(k for k in keywords if k.lower() not in lowered)


def score(
    expectation: Expectation,
    diagnosis: Diagnosis,
    *,
    decoys: Sequence[ObjectKey] = (),
    node_names: Mapping[str, str] | None = None,
) -> Score:
    """Score ``diagnosis`` (its findings in rank order) against ``expectation``. ``decoys`` are the scenario's
    decoy objects. ``node_names`` maps a scenario's node name to its name on the cluster (a Node named in the
    expectation is matched under either)."""
    aliases: dict[str, str] = dict(node_names or {})

    def resolve(key: ObjectKey) -> ObjectKey:
        if key.kind == "Node" and key.name in aliases:
            return ObjectKey(kind="Node", name=aliases[key.name])
        return key

    expected = resolve(expectation.object)
    wrong_roots = [resolve(k) for k in (*decoys, *expectation.symptoms)]
    false_roots = tuple(
        f.subject.key
        for f in diagnosis.findings
        # an info finding reports (a pod waiting for a node that is on its way) and blames nothing
        if f.severity is not Severity.INFO and any(_is(f.subject, k) for k in wrong_roots)
    )
    if not diagnosis.findings:
        return Score(
            False,
            0.0 if expectation.evidence else 1.0,
            false_roots,
            tuple(expectation.keywords),
            tuple(expectation.evidence),
            ("no finding",),
        )
    first = diagnosis.findings[0]
    reasons = []
    if not (_is(first.subject, expected) or (first.objects and _is(first.objects[0], expected))):
        reasons.append(f"first finding is about {first.subject.key}, not {expected.kind}/{expected.name}")
    if str(first.category) != expectation.category:
        reasons.append(f"category {first.category}, not {expectation.category}")
    missing_kw = missing_keywords(expectation.keywords, first.root_cause)
    if missing_kw:
        reasons.append(f"root cause lacks {', '.join(missing_kw)}")
    body = _evidence_text(first)
    missing_ev = tuple(e for e in expectation.evidence if e.lower() not in body)
    recall = 1.0 if not expectation.evidence else 1 - len(missing_ev) / len(expectation.evidence)
    return Score(not reasons, recall, false_roots, missing_kw, missing_ev, tuple(reasons))
