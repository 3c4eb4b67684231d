"""One extension point: the :class:`Analyzer` protocol, the registry of analyzers by name, and :func:`diagnose`, which
runs them over one snapshot.

An analyzer is pure: ``analyze(snapshot)`` reads only the snapshot and returns findings. :func:`diagnose` runs each
one, and an analyzer that raises is reported as a :class:`Failure` (which analyzer, on which object when the
analyzer said so through :func:`about`) while the other analyzers' findings still come back. Symptoms are folded
into the root causes that explain them (the correlation step, ``_correlate``), every finding is redacted on the way
out, and the order is deterministic: severity, then symptoms explained, confidence and id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from capstan.diagnose._correlate import correlate
from capstan.diagnose._finding import Finding, ObjectRef
from capstan.diagnose._snapshot import Snapshot
from capstan.redact import Redactor


@runtime_checkable
class Analyzer(Protocol):
    """Reads a snapshot, returns findings. ``reads`` names the kinds it looks at, so that a kind the snapshot could
    not read is reported as a blind spot of this analyzer."""

    @property
    def name(self) -> str: ...

    @property
    def reads(self) -> tuple[str, ...]: ...

    def analyze(self, snapshot: Snapshot) -> list[Finding]: ...


@dataclass(frozen=True)
class FunctionAnalyzer:
    """An analyzer made of a pure function (every built-in one is)."""

    name: str
    reads: tuple[str, ...]
    function: Callable[[Snapshot], list[Finding]]

    def analyze(self, snapshot: Snapshot) -> list[Finding]:
        return self.function(snapshot)


class ObjectFailed(Exception):
    """Raised through :func:`about`: an analyzer failed on ``object``."""

    def __init__(self, obj: ObjectRef, cause: BaseException) -> None:
        super().__init__(f"{obj.key}: {type(cause).__name__}: {cause}")
        self.object = obj
        self.cause = cause


@contextmanager
def about(obj: ObjectRef) -> Iterator[None]:
    """Mark the object an analyzer is working on, so that an error names it."""
    try:
        yield
    except ObjectFailed:
        raise
    except Exception as exc:
        raise ObjectFailed(obj, exc) from exc


@dataclass(frozen=True)
class Failure:
    """An analyzer that raised: its name, the object it was reading when known, and the error."""

    analyzer: str
    object: ObjectRef | None
    error: str

    def to_json(self) -> dict[str, Any]:
        return {
            "analyzer": self.analyzer,
            "object": self.object.to_json() if self.object else None,
            "error": self.error,
        }


@dataclass(frozen=True)
class Blind:
    """A kind an analyzer reads that the snapshot could not read: its findings may be missing, not wrong."""

    analyzer: str
    kind: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"analyzer": self.analyzer, "kind": self.kind, "reason": self.reason}


@dataclass(frozen=True)
class Diagnosis:
    findings: tuple[Finding, ...] = ()
    failures: tuple[Failure, ...] = ()
    blind: tuple[Blind, ...] = ()
    analyzers: tuple[str, ...] = field(default=())

    def about(self, obj: ObjectRef) -> tuple[Finding, ...]:
        """The findings that involve ``obj``: as one of their objects, or as a symptom they explain (so asking
        about a pod of a broken Deployment finds the Deployment's root cause), in rank order."""
        return tuple(f for f in self.findings if obj in f.objects or any(s.object == obj for s in f.symptoms))

    def to_json(self) -> dict[str, Any]:
        return {
            "analyzers": list(self.analyzers),
            "findings": [f.to_json() for f in self.findings],
            "failures": [f.to_json() for f in self.failures],
            "blind": [b.to_json() for b in self.blind],
        }


def analyzer_registry(*analyzers: Analyzer) -> dict[str, Analyzer]:
    """The analyzers keyed by name; a name given twice is a TypeError (a programming error, raised at import)."""
    registry: dict[str, Analyzer] = {}
    for analyzer in analyzers:
        if analyzer.name in registry:
            raise TypeError(f"analyzer {analyzer.name!r} is registered twice")
        registry[analyzer.name] = analyzer
    return registry


def run_analyzers(
    snapshot: Snapshot,
    analyzers: Mapping[str, Analyzer] | Sequence[Analyzer],
    redactor: Redactor | None = None,
) -> Diagnosis:
    """Run ``analyzers`` over ``snapshot``. Findings with the same id (two analyzers, or one analyzer twice) are
    kept once; :func:`~capstan.diagnose._correlate.correlate` then folds symptoms into their roots and ranks them."""
    chosen = list(analyzers.values()) if isinstance(analyzers, Mapping) else list(analyzers)
    redact = redactor if redactor is not None else Redactor()
    findings: dict[str, Finding] = {}
    failures: list[Failure] = []
    blind: list[Blind] = []
    for analyzer in chosen:
        for kind in analyzer.reads:
            note = snapshot.readable(kind)
            if not note.readable:
                blind.append(Blind(analyzer.name, kind, redact.text(note.reason or "cannot be read")))
        try:
            produced = analyzer.analyze(snapshot)
        except ObjectFailed as exc:
            failures.append(
                Failure(analyzer.name, exc.object, redact.text(f"{type(exc.cause).__name__}: {exc.cause}"))
            )
            continue
        except Exception as exc:  # an analyzer's bug must not hide the other analyzers' findings
            failures.append(Failure(analyzer.name, None, redact.text(f"{type(exc).__name__}: {exc}")))
            continue
        for finding in produced:
            findings.setdefault(finding.id, finding)
    # correlate before redacting: the step copies texts (symptoms, change summaries) between findings
    ordered = [f.redacted(redact) for f in correlate(list(findings.values()), snapshot)]
    return Diagnosis(
        findings=tuple(ordered),
        failures=tuple(failures),
        blind=tuple(blind),
        analyzers=tuple(a.name for a in chosen),
    )
