"""The rbac analyzer: the API server's 403s that a pod's previous log quotes, traced to the ServiceAccount's
bindings.

A log line such as ``pods is forbidden: User "system:serviceaccount:shop:runner" cannot list resource "pods" in
API group "" in the namespace "shop"`` names the ServiceAccount, the verb, the resource and the scope. The finding
is about the ServiceAccount (the pods that log it are its symptoms, so their crash loops fold into it) and says
which RoleBindings and ClusterRoleBindings bind it and whether their roles grant anything on that resource. When
bindings or roles cannot be read, it says so instead of concluding that none exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from capstan.diagnose._analyzer import about
from capstan.diagnose._common import preceding_changes, quote
from capstan.diagnose._finding import Category, Evidence, Finding, ObjectRef, Severity, Source, Symptom
from capstan.diagnose._snapshot import KubeObject, Snapshot, meta_of

NAME: Final = "rbac"
_FORBIDDEN: Final = re.compile(
    r'User "system:serviceaccount:(?P<ns>[^:"]+):(?P<sa>[^"]+)" cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]+)"'
    r'(?: in API group "(?P<group>[^"]*)")?(?: in the namespace "(?P<target>[^"]+)"| at the cluster scope)?'
)
MAX_BINDINGS: Final = 5


@dataclass(frozen=True, order=True)
class Denial:
    namespace: str  # the ServiceAccount's
    account: str
    verb: str
    resource: str
    group: str
    target: str  # the namespace asked about, empty at the cluster scope


def _denials(snapshot: Snapshot) -> dict[Denial, list[tuple[tuple[str, str, str], str]]]:
    out: dict[Denial, list[tuple[tuple[str, str, str], str]]] = {}
    for key, text in sorted(snapshot.logs.items()):
        for line in text.splitlines()[-200:]:
            m = _FORBIDDEN.search(line)
            if m is None:
                continue
            denial = Denial(m["ns"], m["sa"], m["verb"], m["resource"], m["group"] or "", m["target"] or "")
            hits = out.setdefault(denial, [])
            if not hits or hits[-1][0] != key:
                hits.append((key, line))
            else:
                hits[-1] = (key, line)
    return out


def _binds(binding: KubeObject, namespace: str, account: str) -> bool:
    return any(
        isinstance(s, Mapping)
        and s.get("kind") == "ServiceAccount"
        and s.get("name") == account
        and str(s.get("namespace") or meta_of(binding)[0]) == namespace
        for s in binding.get("subjects") or ()
    )


def _grants(role: KubeObject, d: Denial) -> bool:
    def has(values: Iterable[object], wanted: str) -> bool:
        return any(str(v) in (wanted, "*") for v in values)

    return any(
        isinstance(rule, Mapping)
        and has(rule.get("apiGroups") or (), d.group)
        and has(rule.get("resources") or (), d.resource)
        and has(rule.get("verbs") or (), d.verb)
        for rule in role.get("rules") or ()
    )


def _verbs_on(role: KubeObject, d: Denial) -> str:
    verbs = sorted(
        {
            str(v)
            for rule in role.get("rules") or ()
            if isinstance(rule, Mapping)
            and any(str(r) in (d.resource, "*") for r in rule.get("resources") or ())
            for v in rule.get("verbs") or ()
        }
    )
    return f"verbs {', '.join(verbs)} on {d.resource}" if verbs else f"nothing on {d.resource}"


def analyze_rbac(snapshot: Snapshot) -> list[Finding]:
    out: list[Finding] = []
    for denial, hits in sorted(_denials(snapshot).items()):
        ref = ObjectRef("ServiceAccount", denial.namespace, denial.account)
        with about(ref):
            out.append(_finding(snapshot, denial, hits, ref))
    return out


def _bindings_text(snapshot: Snapshot, d: Denial, evidence: list[Evidence], related: list[ObjectRef]) -> str:
    notes: list[str] = []
    found: list[str] = []
    scopes = [("RoleBinding", d.target or d.namespace), ("ClusterRoleBinding", "")]
    for kind, namespace in scopes:
        note = snapshot.readable(kind)
        if not note.readable:
            notes.append(f"{kind}s cannot be read ({quote(note.reason or 'forbidden', 100)})")
            continue
        pool = snapshot.in_namespace(kind, namespace) if namespace else snapshot.of(kind)
        for binding in sorted(pool, key=meta_of):
            if not _binds(binding, d.namespace, d.account):
                continue
            bns, bname, _ = meta_of(binding)
            role_ref = binding.get("roleRef") or {}
            role_kind, role_name = str(role_ref.get("kind") or "Role"), str(role_ref.get("name") or "")
            role_ns = bns if role_kind == "Role" else ""
            binding_ref = ObjectRef(kind, bns, bname)
            role_obj_ref = ObjectRef(role_kind, role_ns, role_name)
            related.extend([binding_ref, role_obj_ref])
            if not snapshot.readable(role_kind).readable:
                grant = f"{role_kind}s cannot be read"
            else:
                role = snapshot.get(role_kind, role_ns, role_name)
                grant = (
                    f"{role_kind} {role_name} does not exist"
                    if role is None
                    else ("grants it" if _grants(role, d) else _verbs_on(role, d))
                )
            text = f"{kind} {bname} → {role_kind} {role_name} ({grant})"
            found.append(text)
            evidence.append(Evidence("binding", Source.OBJECT_FIELD, f"{binding_ref.key} roleRef", text))
    if found:
        shown = "; ".join(found[:MAX_BINDINGS]) + (
            f" and {len(found) - MAX_BINDINGS} more" if len(found) > MAX_BINDINGS else ""
        )
        text = f"its bindings: {shown}"
    elif notes:
        text = "no binding of it was found"
    else:
        text = "no RoleBinding or ClusterRoleBinding binds it"
    return text + (f" ({'; '.join(notes)})" if notes else "")


def _finding(
    snapshot: Snapshot, d: Denial, hits: list[tuple[tuple[str, str, str], str]], ref: ObjectRef
) -> Finding:
    group = f'API group "{d.group}"' if d.group else "the core API group"
    scope = f"in namespace {d.target}" if d.target else "at the cluster scope"
    evidence = [
        Evidence("API server refusal", Source.LOG_LINE, f"log {pod}/{container} (previous)", quote(line))
        for (_, pod, container), line in hits[:3]
    ]
    related: list[ObjectRef] = []
    bindings = _bindings_text(snapshot, d, evidence, related)
    pods = [ObjectRef("Pod", ns, pod) for (ns, pod, _), _ in hits]
    jobs = sorted({j for p in pods if (j := _job_of(snapshot, p)) is not None})
    return Finding.create(
        NAME,
        f"forbidden/{d.verb}/{d.group}/{d.resource}/{d.target}",
        subject=ref,
        related=[*pods[:3], *related],
        severity=Severity.CRITICAL,
        category=Category.SECURITY,
        root_cause=(
            f"ServiceAccount {d.namespace}/{d.account} may not {d.verb} {d.resource} in {group} {scope} (the API server "
            f"answered 403 to pod {pods[0].name}); {bindings}."
        ),
        evidence=evidence,
        changes=preceding_changes(snapshot, [ref, *related]),
        symptoms=[
            *(Symptom(p, f"its log quotes the 403: cannot {d.verb} {d.resource}") for p in pods),
            *(Symptom(j, f"its pod's log quotes the 403: cannot {d.verb} {d.resource}") for j in jobs),
        ],
        confidence=0.9,
        next_check=(
            f"kubectl auth can-i {d.verb} {d.resource}{'.' + d.group if d.group else ''} "
            f"--as=system:serviceaccount:{d.namespace}:{d.account}" + (f" -n {d.target}" if d.target else "")
        ),
    )


def _job_of(snapshot: Snapshot, pod: ObjectRef) -> ObjectRef | None:
    """The Job that controls a pod: a failed Job (the batch analyzer's root) is then this finding's symptom too."""
    obj = snapshot.get("Pod", pod.namespace, pod.name)
    for owner in ((obj or {}).get("metadata") or {}).get("ownerReferences") or ():
        if isinstance(owner, Mapping) and owner.get("controller") and owner.get("kind") == "Job":
            return ObjectRef("Job", pod.namespace, str(owner.get("name") or ""))
    return None
