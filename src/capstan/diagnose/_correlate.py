"""The correlation step: rank root cause against symptom across analyzers, and cite the changes that preceded each root.

Analyzers look at one kind each, so one fault can surface several times: a claim that cannot be provisioned (the
``storage`` analyzer) and the pod waiting for it (``scheduling``); a NotReady node and every pod bound to it; the
same crash loop in each replica of a Deployment. :func:`correlate` folds such findings into one root, in three
passes over the findings in their deterministic order:

1. **Declared symptoms.** A finding whose subject another finding lists among its symptoms is that finding's symptom.
2. **Node roots.** A pod's finding is a symptom of a critical finding about the node it is bound to.
3. **Replicas.** Findings with the same analyzer and cause on pods with the same controller are one fault: the first
   (by id) stays the root, the others become its symptoms.

A symptom is never the root of another symptom's chain (chains are followed to their end and cycles are cut), and a
root keeps every symptom it declared itself. Each root then cites the recorded changes, at or before the snapshot's
time, of every object it involves: its own, its symptoms', and the controllers (ReplicaSet, Deployment, Job…) of the
pods among them, so a Deployment edit or a ConfigMap rename is cited on the crash loop it caused; changes that touched
only ``/status`` (a controller reporting readyReplicas) are consequences and are left out, and of the rest the five
most telling are kept: edits before deletions before creations (often only the recorder's first sight), newest
first within each. Secrets appear by name
only. Roots are ranked by severity, then by how many symptoms they explain, then confidence, then id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from capstan.diagnose._common import is_status_only, most_telling
from capstan.diagnose._finding import Finding, ObjectRef, Severity, Symptom
from capstan.diagnose._snapshot import Snapshot
from capstan.restarts import RecordedChange

MAX_CHANGES = 5
"""A root cites at most this many recorded changes, the most telling ones (``most_telling``), oldest first."""

_MAX_OWNER_DEPTH = 4


def rank_key(finding: Finding) -> tuple[int, int, float, str]:
    """The order of roots: severity, then the number of symptoms explained (more first), confidence, id."""
    return (finding.severity.rank, -len(finding.symptoms), -finding.confidence, finding.id)


def correlate(findings: Sequence[Finding], snapshot: Snapshot) -> list[Finding]:
    """The root findings of ``findings`` with the others attached as their symptoms, in rank order."""
    ordered = sorted(findings, key=Finding.sort_key)
    parent: dict[str, str] = {}  # a symptom's id → the id of the finding that explains it

    declared: dict[ObjectRef, str] = {}
    for finding in ordered:
        for symptom in finding.symptoms:
            declared.setdefault(symptom.object, finding.id)
    node_roots: dict[str, str] = {}
    for finding in ordered:
        if finding.subject.kind == "Node" and finding.severity is Severity.CRITICAL:
            node_roots.setdefault(finding.subject.name, finding.id)
    first_replica: dict[tuple[str, str, ObjectRef], str] = {}

    for finding in ordered:
        explained_by = declared.get(finding.subject)
        if explained_by is None and finding.subject.kind == "Pod":
            explained_by = node_roots.get(_node_of(snapshot, finding.subject))
        if explained_by is None and finding.subject.kind == "Pod":
            controller = _controller(snapshot, finding.subject)
            if controller is not None:
                key = (finding.analyzer, finding.cause, controller)
                explained_by = first_replica.setdefault(key, finding.id)
        if explained_by is not None and explained_by != finding.id:
            parent[finding.id] = explained_by

    def root_of(finding_id: str) -> str:
        seen = {finding_id}
        current = finding_id
        while current in parent:
            nxt = parent[current]
            if nxt in seen:  # a cycle: the finding where it closes stays a root
                parent.pop(current)
                break
            seen.add(nxt)
            current = nxt
        return current

    attached: dict[str, list[Finding]] = {}
    for finding in ordered:
        root = root_of(finding.id)
        if root != finding.id:
            attached.setdefault(root, []).append(finding)

    roots = [f for f in ordered if root_of(f.id) == f.id]
    out = [_with_symptoms(root, attached.get(root.id, ()), snapshot) for root in roots]
    return sorted(out, key=rank_key)


def _with_symptoms(root: Finding, symptoms: Iterable[Finding], snapshot: Snapshot) -> Finding:
    merged = list(root.symptoms)
    known = {s.object for s in merged} | {root.subject}
    for finding in symptoms:
        if finding.subject not in known:
            known.add(finding.subject)
            merged.append(Symptom(finding.subject, finding.root_cause))
    involved = [*root.objects, *(s.object for s in merged)]
    changes = _preceding(snapshot, _with_controllers(snapshot, involved), root.changes)
    if tuple(merged) == root.symptoms and changes == root.changes:
        return root
    return dataclasses.replace(root, symptoms=tuple(merged), changes=changes)


def _with_controllers(snapshot: Snapshot, objects: Iterable[ObjectRef]) -> list[ObjectRef]:
    out: list[ObjectRef] = []
    for obj in objects:
        out.append(obj)
        current: ObjectRef | None = obj
        for _ in range(_MAX_OWNER_DEPTH):
            current = _controller(snapshot, current) if current is not None else None
            if current is None:
                break
            out.append(current)
    return list(dict.fromkeys(out))


def _preceding(
    snapshot: Snapshot, objects: Iterable[ObjectRef], already: Sequence[RecordedChange]
) -> tuple[RecordedChange, ...]:
    wanted = {(o.kind, o.namespace, o.name) for o in objects}
    cutoff = snapshot.observed_at or float("inf")
    hits = dict.fromkeys(already)
    for change in snapshot.changes_about(wanted):
        if change.at <= cutoff:
            if is_status_only(change):
                continue  # a controller reporting what happened, not what made it happen
            if change.kind == "Secret" and change.summary:  # names only, never values
                change = dataclasses.replace(change, summary="")
            hits.setdefault(change)
    return most_telling(hits, MAX_CHANGES)


def _node_of(snapshot: Snapshot, pod: ObjectRef) -> str:
    obj = snapshot.get("Pod", pod.namespace, pod.name)
    if obj is None:
        return ""
    return str((obj.get("spec") or {}).get("nodeName") or "")


def _controller(snapshot: Snapshot, ref: ObjectRef) -> ObjectRef | None:
    """The controlling owner of ``ref`` (from its ownerReferences), when the object is in the snapshot."""
    obj = snapshot.get(ref.kind, ref.namespace, ref.name)
    if obj is None:
        return None
    for owner in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(owner, dict) and owner.get("controller") and owner.get("kind") and owner.get("name"):
            return ObjectRef(str(owner["kind"]), ref.namespace, str(owner["name"]))
    return None
