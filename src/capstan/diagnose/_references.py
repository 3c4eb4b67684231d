"""The references analyzer: pods that run but read a ConfigMap, Secret or key that is gone (deleted or renamed
after they started). They keep running on what they read at start and fail on their next restart, so this is a
warning; pods already failing for it are the pods analyzer's (CreateContainerConfigError, FailedMount)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import is_terminal, preceding_changes, ref_of
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source
from capstan.diagnose._pods import Reference, containers, data_keys, references
from capstan.diagnose._snapshot import KubeObject, Snapshot

NAME: Final = "references"


def volume_references(pod: KubeObject) -> list[Reference]:
    """The ConfigMaps and Secrets a pod's volumes mount (optional ones and projected sources included)."""
    out = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        where = f"spec.volumes[{volume.get('name')}]"
        sources: list[tuple[str, Mapping[str, Any]]] = []
        if isinstance(volume.get("configMap"), Mapping):
            sources.append(("ConfigMap", volume["configMap"]))
        if isinstance(volume.get("secret"), Mapping):
            sources.append(("Secret", {**volume["secret"], "name": volume["secret"].get("secretName")}))
        for projected in (volume.get("projected") or {}).get("sources") or []:
            for field, kind in (("configMap", "ConfigMap"), ("secret", "Secret")):
                if isinstance(projected.get(field), Mapping):
                    sources.append((kind, projected[field]))
        for kind, src in sources:
            if src.get("optional") or not src.get("name"):
                continue
            items = src.get("items") or []
            keys = [str(i.get("key")) for i in items if isinstance(i, Mapping) and i.get("key")]
            whole: list[str | None] = [None]
            for key in keys or whole:
                out.append(Reference(kind, str(src["name"]), key, where))
    return out


def analyze_references(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    for pod in snapshot.of("Pod"):
        if is_terminal(pod):
            continue
        cs = list(containers(pod))
        if not cs or any(
            "running" not in (c.status.get("state") or {}) for c in cs if c.role != "init container"
        ):
            continue  # not running: the pods analyzer says why
        ref = ref_of("Pod", pod)
        with about(ref):
            out.extend(
                _pod(snapshot, pod, ref, [r for c in cs for r in references(c)] + volume_references(pod))
            )
    return out


def _pod(snapshot: Snapshot, pod: KubeObject, ref: ObjectRef, refs: list[Reference]) -> Iterator[Finding]:
    seen: set[tuple[str, str, str | None]] = set()
    for r in refs:
        if (r.kind, r.name, r.key) in seen or not snapshot.readable(r.kind).readable:
            continue  # an unreadable kind is reported as a blind spot, never as missing
        seen.add((r.kind, r.name, r.key))
        obj = snapshot.get(r.kind, ref.namespace, r.name)
        if obj is not None and (not r.key or r.key in data_keys(obj)):
            continue
        target = ObjectRef(r.kind, ref.namespace, r.name)
        problem = (
            f"{r.kind} {ref.namespace}/{r.name} does not exist"
            if obj is None
            else f"{r.kind} {ref.namespace}/{r.name} has no key {r.key}"
        )
        evidence = [
            Evidence(
                "reference",
                Source.OBJECT_FIELD,
                r.where,
                f"{r.kind} {r.name}" + (f" key {r.key}" if r.key else ""),
            )
        ]
        if obj is not None:
            evidence.append(
                Evidence(
                    "keys present",
                    Source.OBJECT_FIELD,
                    f"{target.key} data",
                    ", ".join(sorted(data_keys(obj))) or "(none)",
                )
            )
        yield Finding.create(
            NAME,
            f"{r.kind}/{r.name}/{r.key or ''}",
            subject=ref,
            related=[target],
            severity=Severity.WARNING,
            category=Category.CONFIGURATION,
            root_cause=(
                f"Pod {ref.namespace}/{ref.name} runs but reads a reference that is gone: {problem} (read by "
                f"{r.where}); it will fail to start on its next restart."
            ),
            evidence=evidence,
            changes=preceding_changes(snapshot, [target]),
            confidence=0.85,
            next_check=f"kubectl get {r.kind.lower()} -n {ref.namespace} {r.name} -o yaml; restore it or update the pod's template",
        )
