"""Small pure helpers the analyzers share: object references, preceding recorded changes, labels, quoting."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from capstan.diagnose._finding import ObjectRef
from capstan.diagnose._snapshot import KubeObject, Snapshot, meta_of
from capstan.restarts import RecordedChange

MAX_QUOTE = 300


def ref_of(kind: str, obj: KubeObject) -> ObjectRef:
    namespace, name, _ = meta_of(obj)
    return ObjectRef(kind, namespace, name)


def preceding_changes(
    snapshot: Snapshot, objects: Iterable[ObjectRef], limit: int = 5
) -> tuple[RecordedChange, ...]:
    """The recorded changes of ``objects`` at or before the snapshot's time (all of them when it has none), newest
    last, at most ``limit``. (The correlation step adds the changes of a root's owners and symptoms.)"""
    wanted = {(o.kind, o.namespace, o.name) for o in objects}
    cutoff = snapshot.observed_at or float("inf")
    hits = [c for c in snapshot.changes if (c.kind, c.namespace, c.name) in wanted and c.at <= cutoff]
    return tuple(sorted(hits, key=lambda c: (c.at, c.kind, c.name))[-limit:])


def quote(text: str, limit: int = MAX_QUOTE) -> str:
    """``text`` on one line, cut to ``limit`` characters with a note of the cut."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit] + f"… [{len(line) - limit} chars cut]"


def labels_of(obj: KubeObject) -> Mapping[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def selector_text(selector: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


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
