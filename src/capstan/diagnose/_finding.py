"""The one finding schema every reader shares (the CLI, the MCP server and the dashboard that follow).

A :class:`Finding` names one root cause: the object and the field or value at fault in one sentence, the evidence
that shows it (each item says where it came from and quotes the exact text), the recorded changes that preceded it,
the symptoms it explains, a confidence and the next check a human would run. Findings are frozen dataclasses whose
:meth:`Finding.to_json` is plain JSON with a fixed key order, so the same cluster state serialises to the same bytes.

The id is a hash of the analyzer, the object and a short machine cause (``"CrashLoopBackOff/app"``), never of the
sentence, so the same fault keeps its id run after run while the wording (times, counts) may change.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from capstan.redact import Redactor
from capstan.restarts import RecordedChange

ID_CHARS = 16


class Severity(StrEnum):
    """How bad: ``critical`` (the workload does not run or serve), ``warning`` (degraded or at risk), ``info``."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Sort key: critical first."""
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


class Category(StrEnum):
    """The eleven categories of issue 25 §1."""

    STARTUP = "startup"
    RUNTIME = "runtime"
    SCHEDULING = "scheduling"
    CONFIGURATION = "configuration"
    NETWORKING = "networking"
    STORAGE = "storage"
    SCALING = "scaling"
    SECURITY = "security"
    NODE = "node"
    GPU = "gpu"
    CONTROL_PLANE = "control-plane"


class Source(StrEnum):
    """Where a piece of evidence came from."""

    OBJECT_FIELD = "object-field"
    EVENT = "event"
    LOG_LINE = "log-line"
    RECORDED_CHANGE = "recorded-change"


@dataclass(frozen=True, order=True)
class ObjectRef:
    """One Kubernetes object: ``namespace`` is empty for cluster-scoped kinds (Node)."""

    kind: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name}


@dataclass(frozen=True)
class Evidence:
    """One fact behind a finding: ``what`` it shows, its ``source``, ``where`` (a field path such as
    ``status.containerStatuses[app].lastState.terminated.exitCode``, an Event's reason, a log's container), the
    exact ``text`` and, when known, the time it was observed (epoch seconds)."""

    what: str
    source: Source
    where: str
    text: str
    at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "source": str(self.source),
            "where": self.where,
            "text": self.text,
            "at": self.at,
        }


@dataclass(frozen=True)
class Symptom:
    """Another object's problem that this finding explains (attached here, not reported as a root of its own)."""

    object: ObjectRef
    problem: str

    def to_json(self) -> dict[str, Any]:
        return {"object": self.object.to_json(), "problem": self.problem}


def _change_json(change: RecordedChange) -> dict[str, Any]:
    return {
        "at": change.at,
        "kind": change.kind,
        "namespace": change.namespace,
        "name": change.name,
        "change": change.change,
        "summary": change.summary,
    }


def finding_id(analyzer: str, subject: ObjectRef, cause: str) -> str:
    """The stable id: a hash of the analyzer, the object's key and the machine cause."""
    digest = hashlib.sha256("\x1f".join((analyzer, subject.key, cause)).encode()).hexdigest()
    return digest[:ID_CHARS]


@dataclass(frozen=True)
class Finding:
    """One root cause. Build it with :meth:`create` (which computes the id); :meth:`redacted` is applied by
    :func:`capstan.diagnose.diagnose` to every finding before it leaves."""

    id: str
    analyzer: str
    cause: str
    severity: Severity
    category: Category
    root_cause: str
    objects: tuple[ObjectRef, ...]
    evidence: tuple[Evidence, ...] = ()
    changes: tuple[RecordedChange, ...] = ()
    symptoms: tuple[Symptom, ...] = ()
    confidence: float = 1.0
    next_check: str = ""

    @classmethod
    def create(
        cls,
        analyzer: str,
        cause: str,
        *,
        subject: ObjectRef,
        severity: Severity,
        category: Category,
        root_cause: str,
        related: Sequence[ObjectRef] = (),
        evidence: Sequence[Evidence] = (),
        changes: Sequence[RecordedChange] = (),
        symptoms: Sequence[Symptom] = (),
        confidence: float = 1.0,
        next_check: str = "",
    ) -> Finding:
        """A finding about ``subject`` (always the first of its objects); ``confidence`` is clamped to [0, 1]."""
        objects = (subject, *(o for o in dict.fromkeys(related) if o != subject))
        return cls(
            id=finding_id(analyzer, subject, cause),
            analyzer=analyzer,
            cause=cause,
            severity=severity,
            category=category,
            root_cause=root_cause,
            objects=objects,
            evidence=tuple(evidence),
            changes=tuple(changes),
            symptoms=tuple(symptoms),
            confidence=min(1.0, max(0.0, confidence)),
            next_check=next_check,
        )

    @property
    def subject(self) -> ObjectRef:
        return self.objects[0]

    def redacted(self, redactor: Redactor) -> Finding:
        """This finding with every free text (sentence, evidence, change summaries, symptoms, next check) passed
        through ``redactor``; names of objects and fields are kept as they are."""
        text = redactor.text
        return dataclasses.replace(
            self,
            root_cause=text(self.root_cause),
            evidence=tuple(
                dataclasses.replace(e, what=text(e.what), where=text(e.where), text=text(e.text))
                for e in self.evidence
            ),
            changes=tuple(
                dataclasses.replace(c, change=text(c.change), summary=text(c.summary)) for c in self.changes
            ),
            symptoms=tuple(dataclasses.replace(s, problem=text(s.problem)) for s in self.symptoms),
            next_check=text(self.next_check),
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON with a fixed key order (the shape the MCP server and the dashboard will serve)."""
        return {
            "id": self.id,
            "analyzer": self.analyzer,
            "cause": self.cause,
            "severity": str(self.severity),
            "category": str(self.category),
            "root_cause": self.root_cause,
            "objects": [o.to_json() for o in self.objects],
            "evidence": [e.to_json() for e in self.evidence],
            "changes": [_change_json(c) for c in self.changes],
            "symptoms": [s.to_json() for s in self.symptoms],
            "confidence": round(self.confidence, 3),
            "next_check": self.next_check,
        }

    def sort_key(self) -> tuple[int, str]:
        """Severity, then id: the order analyzers' findings are correlated in (roots are ranked by
        ``_correlate.rank_key``)."""
        return (self.severity.rank, self.id)
