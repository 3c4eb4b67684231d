"""Small pure helpers the analyzers share: object references, preceding recorded changes, labels, quoting."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from capstan.diagnose._finding import ObjectRef
from capstan.diagnose._snapshot import KubeObject, Snapshot, meta_of
from capstan.kube import Requirement
from capstan.restarts import RecordedChange

MAX_QUOTE = 300


def ref_of(kind: str, obj: KubeObject) -> ObjectRef:
    namespace, name, _ = meta_of(obj)
    return ObjectRef(kind, namespace, name)


def is_status_only(change: RecordedChange) -> bool:
    """A modification that touched only ``/status`` (a controller or kubelet reporting, e.g. readyReplicas or a
    pod's conditions): the consequence of a fault, never its cause, so no finding cites it."""
    if change.change != "modified" or not change.summary:
        return False
    parts = [p.split(" (+")[0].strip() for p in change.summary.split("; ")]
    return all(p.partition(" ")[2].startswith("/status") for p in parts if p)


_CHANGE_WEIGHT = {"modified": 0, "deleted": 1, "added": 2}


def most_telling(changes: Iterable[RecordedChange], limit: int) -> tuple[RecordedChange, ...]:
    """At most ``limit`` of ``changes``, oldest first: edits before deletions before creations (an edit of a spec,
    data or labels is what usually breaks things; a creation is often only the recorder's first sight), the most
    recent first within each, ties broken by object."""
    unique = list(dict.fromkeys(changes))
    ranked = sorted(
        unique, key=lambda c: (_CHANGE_WEIGHT.get(c.change, 3), -c.at, c.kind, c.namespace, c.name, c.summary)
    )
    return tuple(sorted(ranked[:limit], key=lambda c: (c.at, c.kind, c.namespace, c.name, c.change)))


def preceding_changes(
    snapshot: Snapshot, objects: Iterable[ObjectRef], limit: int = 5
) -> tuple[RecordedChange, ...]:
    """The recorded changes of ``objects`` at or before the snapshot's time (all of them when it has none), the
    :func:`most_telling` ``limit`` of them, status-only ones left out (:func:`is_status_only`). (The correlation
    step adds the changes of a root's owners and symptoms.)"""
    wanted = {(o.kind, o.namespace, o.name) for o in objects}
    cutoff = snapshot.observed_at or float("inf")
    hits = [c for c in snapshot.changes_about(wanted) if c.at <= cutoff and not is_status_only(c)]
    return most_telling(hits, limit)


def quote(text: str, limit: int = MAX_QUOTE) -> str:
    """``text`` on one line, cut to ``limit`` characters with a note of the cut."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit] + f"… [{len(line) - limit} chars cut]"


def labels_of(obj: KubeObject) -> Mapping[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def selector_text(selector: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


_SELECTOR_OPS: dict[str, Literal["in", "notin", "exists", "!exists"]] = {
    "In": "in",
    "NotIn": "notin",
    "Exists": "exists",
    "DoesNotExist": "!exists",
}


def label_selector(selector: Mapping[str, Any] | None) -> tuple[Requirement, ...] | None:
    """A ``LabelSelector`` (``matchLabels`` and ``matchExpressions``) as requirements; ``()`` selects everything,
    None when an expression is malformed (an operator Kubernetes does not have)."""
    if not isinstance(selector, Mapping):
        return ()
    out = [
        Requirement(str(k), "=", frozenset({str(v)}))
        for k, v in sorted((selector.get("matchLabels") or {}).items())
    ]
    for expr in selector.get("matchExpressions") or []:
        op = _SELECTOR_OPS.get(str((expr or {}).get("operator")))
        if op is None:
            return None
        out.append(Requirement(str(expr.get("key")), op, frozenset(str(v) for v in expr.get("values") or [])))
    return tuple(out)


def selects(requirements: Sequence[Requirement], labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in requirements)


def is_terminal(pod: KubeObject) -> bool:
    return str((pod.get("status") or {}).get("phase") or "") in ("Succeeded", "Failed")


def number(value: Any) -> float:
    """A plain or suffixed quantity as a number (GPUs and pods are integers; only the ratio matters otherwise)."""
    text = str(value).strip()
    for suffix, factor in (
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("Ki", 1024.0),
        ("Mi", 1024.0**2),
        ("Gi", 1024.0**3),
        ("Ti", 1024.0**4),
    ):
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).isdigit():
            return float(text[: -len(suffix)]) * factor
    try:
        return float(text)
    except ValueError:
        return 0.0
