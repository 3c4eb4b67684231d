"""The quotas analyzer: a ResourceQuota that is used up (``status.used`` at or above ``status.hard`` for a
resource), so the next pod or object that asks for that resource is rejected.

A quota that a controller's ``FailedCreate`` already names (``exceeded quota: NAME``) is left to the ``workloads``
analyzer, whose finding cites the quota's status: that is one fault, and the controller that cannot create its pods
is where it shows. What is left is a warning before anything fails.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import number, preceding_changes, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source
from capstan.diagnose._snapshot import KubeObject, Snapshot, event_message

NAME: Final = "quotas"
_NAMED: Final = re.compile(r"exceeded quota: (?P<quota>[^,\s]+)")
CONTROLLERS: Final = ("ReplicaSet", "StatefulSet", "DaemonSet", "Job")


def _named_by_failures(snapshot: Snapshot) -> set[tuple[str, str]]:
    """(namespace, quota) of every quota a FailedCreate Event or a ReplicaFailure condition names."""
    named: set[tuple[str, str]] = set()
    texts: list[tuple[str, str]] = []
    for event in snapshot.events:
        if event.get("reason") == "FailedCreate":
            subject = event.get("involvedObject") or event.get("regarding") or {}
            texts.append((str(subject.get("namespace") or ""), event_message(event)))
    for kind in CONTROLLERS:
        for obj in snapshot.of(kind):
            for cond in (obj.get("status") or {}).get("conditions") or ():
                if isinstance(cond, Mapping) and cond.get("type") == "ReplicaFailure":
                    texts.append((ref_of(kind, obj).namespace, str(cond.get("message") or "")))
    for namespace, text in texts:
        if (m := _NAMED.search(text)) is not None:
            named.add((namespace, m["quota"]))
    return named


def analyze_quotas(snapshot: Snapshot) -> list[Finding]:
    named = _named_by_failures(snapshot)
    out: list[Finding] = []
    for quota in snapshot.of("ResourceQuota"):
        ref = ref_of("ResourceQuota", quota)
        if (ref.namespace, ref.name) in named:
            continue
        with about(ref):
            out.extend(_quota(snapshot, quota, ref))
    return out


def _quota(snapshot: Snapshot, quota: KubeObject, ref: ObjectRef) -> Iterator[Finding]:
    status = quota.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    full = sorted(
        str(r) for r, h in hard.items() if number(h) > 0 and r in used and number(used[r]) >= number(h)
    )
    if not full:
        return
    shown = ", ".join(f"{r} {used[r]}/{hard[r]}" for r in full)
    yield Finding.create(
        NAME,
        "used-up/" + ",".join(full),
        subject=ref,
        severity=Severity.WARNING,
        category=Category.SCALING,
        root_cause=(
            f"ResourceQuota {ref.namespace}/{ref.name} is used up ({shown}, status.used/status.hard): the next pod "
            f"in namespace {ref.namespace} that asks for {full[0]} is rejected."
        ),
        evidence=[
            Evidence(
                "quota used/hard",
                Source.OBJECT_FIELD,
                f"status.used[{r}]/status.hard[{r}]",
                f"{used[r]}/{hard[r]}",
            )
            for r in full
        ],
        changes=preceding_changes(snapshot, [ref]),
        confidence=0.8,
        next_check=f"kubectl describe quota -n {ref.namespace} {ref.name}; raise spec.hard or free the namespace",
    )
