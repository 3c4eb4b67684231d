"""The object tools: ``get_resource`` (one object, minified), ``list_resources`` (label and field selectors, paged),
``search`` (terms over the whole snapshot) and ``neighborhood`` (the objects around one, as a graph).

All four read only the redacted snapshot. Kinds are taken as kubectl takes them (``deploy``, ``po``, ``Pod``,
``pods``: :func:`capstan.kube.resources.lookup_kind`); a bad kind, selector or search term is a JSON-RPC error
naming the argument (:class:`~capstan.mcp._tool.BadArgument`); an object that is not there is a one-line answer
naming similar names. :func:`neighborhood_of` is pure and callable by other tools (``diagnose``): a breadth-first
walk over owner references (both ways), Services selecting pods or a workload's template, Ingress and HTTPRoute
backends, claims with their volume and class, ConfigMaps and Secrets referenced (names only, and whether they
exist), the node a pod runs on, HPAs and PDBs of a workload. Its lookups go through a :class:`Relations` index built
once per call, each part on first use, so one hop costs the size of the answer, not a scan of every pod.
"""

from __future__ import annotations

import difflib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Final, Literal

from pydantic import Field

from capstan.diagnose import ObjectRef, Snapshot
from capstan.kube import Requirement, parse_label_selector
from capstan.kube.resources import Resource, lookup_kind
from capstan.mcp._minify import backends, health, identity, minify, pod_reasons
from capstan.mcp._shape import Budget, tokens
from capstan.mcp._tool import (
    MAX_QUERY,
    MAX_TEXT,
    BadArgument,
    Call,
    ListArgs,
    ToolArgs,
    ToolSpec,
    Unavailable,
)

SIMILAR_NAMES: Final = 5
BUDGET_RESERVE: Final = 40
"""Tokens ``get_resource`` keeps for the answer around the object (keys, the token count, a level note)."""
MAX_HOPS: Final = 2
MAX_NODES: Final = 100
FIELDS: Final = ("metadata.name", "metadata.namespace", "status.phase", "spec.nodeName")
"""The field selectors ``list_resources`` supports (as the API server does for pods, with ``=``, ``==``, ``!=``)."""
TERMS: Final = ("kind", "ns", "label", "image", "node", "status")
_WORKLOADS: Final = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob")
_REFERENCED: Final = ("ConfigMap", "Secret")
Level = Literal["summary", "compact", "detail"]


def _meta(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def _kind(text: str) -> Resource:
    resource = lookup_kind(text)
    if resource is None:
        raise BadArgument(
            "kind", f"unknown kind {text!r} (e.g. Pod, Deployment, Service, Node, PVC; short names work)"
        )
    return resource


def _key(ref: ObjectRef) -> str:
    return ref.key


def _sorted(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(objects, key=_meta)


def _objects_of(snapshot: Snapshot, kind: str, namespace: str | None) -> Sequence[Mapping[str, Any]]:
    return snapshot.of(kind) if namespace is None else snapshot.in_namespace(kind, namespace)


def _cannot_read(snapshot: Snapshot, tool: str, kind: str) -> None:
    if kind in snapshot.unreadable:
        raise Unavailable(f"{tool}: cannot read {kind}: {snapshot.unreadable[kind].reason}")


# ---- get_resource ------------------------------------------------------------------------------------------------
class GetResourceArgs(ToolArgs):
    kind: str = Field(max_length=MAX_TEXT, description="The kind: Pod, Deployment, svc, pvc… (any case).")
    name: str = Field(max_length=MAX_TEXT, description="The object's name.")
    namespace: str | None = Field(
        None,
        max_length=MAX_TEXT,
        description="Its namespace (namespaced kinds; default: the only namespace holding that name).",
    )
    level: Level = Field(
        "compact",
        description="summary (identity and health), compact (pruned for root-cause analysis) or detail (full spec "
        "and status minus noise).",
    )


def _not_found(snapshot: Snapshot, tool: str, kind: str, namespace: str, name: str) -> Unavailable:
    names = [_meta(o)[1] for o in _objects_of(snapshot, kind, namespace if namespace else None)]
    where = f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"
    scope = f"namespace {namespace}" if namespace else "the cluster"
    if not names:
        return Unavailable(f"{tool}: {where}: not found ({scope} has no {kind})")
    similar = difflib.get_close_matches(name, sorted(set(names)), n=SIMILAR_NAMES, cutoff=0.4)
    if not similar:
        similar = sorted(n for n in set(names) if name.lower() in n.lower())[:SIMILAR_NAMES]
    if not similar:
        return Unavailable(
            f"{tool}: {where}: not found ({scope} has {len(names)} {kind}, none with a similar name)"
        )
    return Unavailable(f"{tool}: {where}: not found ({scope} has: {', '.join(similar)})")


def find_object(
    snapshot: Snapshot,
    tool: str,
    resource: Resource,
    name: str,
    namespace: str | None,
    default_ns: str | None,
) -> tuple[ObjectRef, Mapping[str, Any]]:
    """The object ``kind/name``: in ``namespace`` when given, else the scope's namespace, else the only namespace
    holding the name (``default`` when several do); :class:`Unavailable` naming similar names when absent."""
    kind = resource.kind
    _cannot_read(snapshot, tool, kind)
    if not resource.namespaced:
        obj = snapshot.get(kind, "", name)
        if obj is None:
            raise _not_found(snapshot, tool, kind, "", name)
        return ObjectRef(kind, "", name), obj
    ns = namespace or default_ns
    if ns is None:
        holding = sorted({_meta(o)[0] for o in snapshot.of(kind) if _meta(o)[1] == name})
        if len(holding) > 1 and "default" not in holding:
            raise Unavailable(
                f"{tool}: {kind}/{name} is in several namespaces ({', '.join(holding[:SIMILAR_NAMES])}); "
                "give namespace"
            )
        ns = "default" if not holding or "default" in holding else holding[0]
    obj = snapshot.get(kind, ns, name)
    if obj is None:
        raise _not_found(snapshot, tool, kind, ns, name)
    return ObjectRef(kind, ns, name), obj


def fitted(obj: Mapping[str, Any], level: Level, room: int) -> tuple[dict[str, Any], Level]:
    """``obj`` minified at ``level``, or at the next lower level while it is over ``room`` tokens (a ``detail``
    that does not fit is better served ``compact`` than cut), and the level used."""
    levels: list[Level] = ["summary", "compact", "detail"]
    shown = minify(obj, level)
    while tokens(shown) > room and level != "summary":  # bounded: at most two steps down
        level = levels[levels.index(level) - 1]
        shown = minify(obj, level)
    return shown, level


async def _get_resource(call: Call, args: GetResourceArgs) -> dict[str, Any]:
    resource = _kind(args.kind)
    ref, obj = find_object(
        call.state.snapshot, "get_resource", resource, args.name, args.namespace, call.state.namespace
    )
    problems = [
        {"id": f.id, "severity": str(f.severity), "root_cause": f.root_cause}
        for f in call.state.diagnosis.about(ref)
    ]
    wanted = min(tokens(problems), call.budget // 2)
    shown, level = fitted(obj, args.level, call.budget - wanted - BUDGET_RESERVE)
    out: dict[str, Any] = {"object": shown}
    if level != args.level:
        out["level"] = f"{level} ({args.level} is over the budget of {call.budget} tokens)"
    room = call.budget - tokens(out) - BUDGET_RESERVE
    kept: list[dict[str, Any]] = []
    for problem in problems:
        cost = tokens(problem) + 1
        if cost > room:
            break
        kept.append(problem)
        room -= cost
    if kept:
        out["problems"] = kept
    if len(kept) < len(problems):
        out["more_problems"] = len(problems) - len(kept)
    return out


GET_RESOURCE = ToolSpec(
    name="get_resource",
    title="One object",
    description=(
        "One Kubernetes object by kind and name (kind in any case or kubectl's short names: deploy, po, svc, sts, "
        "ds, pvc, cm, ns, no), at summary, compact (default: pruned for root-cause analysis) or detail level, with "
        "the problems the analyzers found about it. Secrets show key names only."
    ),
    args=GetResourceArgs,
    run=_get_resource,
    budget=Budget(2000, 8000),
)


# ---- list_resources ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.field) == self.value) == self.equal


def field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return "" if node is None else str(node)


def parse_field_selector(selector: str) -> tuple[FieldRequirement, ...]:
    """``metadata.name=web,status.phase!=Running`` (``=``, ``==``, ``!=``; comma-joined; the fields of
    :data:`FIELDS`); a ValueError names the bad part."""
    if not selector.strip():
        return ()
    out = []
    for raw in selector.split(","):
        part = raw.strip()
        for op in ("!=", "==", "="):
            if op in part:
                field_name, value = (s.strip() for s in part.split(op, 1))
                break
        else:
            raise ValueError(f"{part!r}: not a field requirement (field=value or field!=value)")
        if field_name not in FIELDS:
            raise ValueError(f"{field_name!r}: unsupported field (supported: {', '.join(FIELDS)})")
        out.append(FieldRequirement(field_name, op != "!=", value))
    return tuple(out)


class ListResourcesArgs(ListArgs):
    kind: str = Field(max_length=MAX_TEXT, description="The kind: Pod, Deployment, svc, pvc… (any case).")
    namespace: str | None = Field(None, max_length=MAX_TEXT, description="One namespace (default: all).")
    label_selector: str | None = Field(
        None, max_length=MAX_QUERY, description="A label selector: app=web,tier!=db,env in (a,b),!canary."
    )
    field_selector: str | None = Field(
        None,
        max_length=MAX_QUERY,
        description="A field selector on metadata.name, metadata.namespace, status.phase, spec.nodeName "
        "(=, ==, !=; comma-joined).",
    )
    level: Level = Field("summary", description="summary (default), compact or detail rows.")


def _label_requirements(argument: str, selector: str | None) -> tuple[Requirement, ...]:
    try:
        return parse_label_selector(selector or "")
    except ValueError as err:
        raise BadArgument(argument, str(err)) from None


async def _list_resources(call: Call, args: ListResourcesArgs) -> dict[str, Any]:
    resource = _kind(args.kind)
    labels = _label_requirements("label_selector", args.label_selector)
    try:
        fields = parse_field_selector(args.field_selector or "")
    except ValueError as err:
        raise BadArgument("field_selector", str(err)) from None
    snapshot = call.state.snapshot
    _cannot_read(snapshot, "list_resources", resource.kind)
    namespace = args.namespace if resource.namespaced else None
    chosen = [
        o
        for o in _objects_of(snapshot, resource.kind, namespace)
        if all(r.matches(_labels(o)) for r in labels) and all(f.matches(o) for f in fields)
    ]
    room = max(50, call.budget - BUDGET_RESERVE * 2)

    def render(obj: Mapping[str, Any]) -> dict[str, Any]:
        shown, level = fitted(obj, args.level, room)
        return shown if level == args.level else {**shown, "level": level}

    page = call.page(_sorted(chosen), args, render=render)
    return {"kind": resource.kind, **page.to_json("items")}


LIST_RESOURCES = ToolSpec(
    name="list_resources",
    title="List objects",
    description=(
        "Objects of one kind, by namespace and name, filtered by label selector (app=web,tier!=db,env in (a,b)) "
        "and field selector (metadata.name, metadata.namespace, status.phase, spec.nodeName with =, ==, !=); "
        "summary rows by default; page with cursor."
    ),
    args=ListResourcesArgs,
    run=_list_resources,
    budget=Budget(1500, 8000),
)


# ---- search ------------------------------------------------------------------------------------------------------
class SearchArgs(ListArgs):
    query: str = Field(
        min_length=1,
        max_length=MAX_QUERY,
        description="Terms, all of which must match: kind:Pod ns:shop label:app=web image:nginx node:gpu-1 "
        "status:CrashLoopBackOff, and free words matched against names.",
    )
    namespace: str | None = Field(None, max_length=MAX_TEXT, description="Only objects in this namespace.")
    limit: int | None = Field(None, ge=1, le=500, description="The most results per answer (default 50).")


@dataclass(frozen=True)
class Query:
    kinds: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()
    labels: tuple[Requirement, ...] = ()
    images: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    words: tuple[str, ...] = ()


def parse_query(text: str) -> Query:
    """The search terms of ``text``; a :class:`BadArgument` naming ``query`` for an unknown term or kind."""
    kinds: set[str] = set()
    namespaces: set[str] = set()
    labels: list[Requirement] = []
    images: list[str] = []
    nodes: list[str] = []
    statuses: list[str] = []
    words: list[str] = []
    for term in text.split():
        key, sep, value = term.partition(":")
        if not sep:
            words.append(term.lower())
            continue
        if key not in TERMS or not value:
            raise BadArgument(
                "query", f"{term!r}: unknown term (terms: {', '.join(t + ':' for t in TERMS)}, and words)"
            )
        if key == "kind":
            resource = lookup_kind(value)
            if resource is None:
                raise BadArgument("query", f"{term!r}: unknown kind")
            kinds.add(resource.kind)
        elif key == "ns":
            namespaces.add(value)
        elif key == "label":
            labels.extend(_label_requirements("query", value))
        elif key == "image":
            images.append(value.lower())
        elif key == "node":
            nodes.append(value.lower())
        else:
            statuses.append(value.lower())
    return Query(
        frozenset(kinds),
        frozenset(namespaces),
        tuple(labels),
        tuple(images),
        tuple(nodes),
        tuple(statuses),
        tuple(words),
    )


def pod_spec_of(kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """A pod's spec, or a workload's pod template spec (CronJobs through their job template); {} otherwise."""
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    if kind in _WORKLOADS:
        return (spec.get("template") or {}).get("spec") or {}
    return {}


def _images(kind: str, obj: Mapping[str, Any]) -> list[str]:
    spec = pod_spec_of(kind, obj)
    return [
        str((c or {}).get("image") or "").lower()
        for c in (*(spec.get("initContainers") or []), *(spec.get("containers") or []))
    ]


def _statuses(kind: str, obj: Mapping[str, Any]) -> set[str]:
    status = obj.get("status") or {}
    found = {str(status.get("phase") or "").lower()} - {""}
    if kind == "Pod":
        found |= {r.lower() for r in pod_reasons(obj)}
    return found


def _search_matches(query: Query, kind: str, obj: Mapping[str, Any]) -> bool:
    ns, name = _meta(obj)
    if query.namespaces and ns not in query.namespaces:
        return False
    if query.labels and not all(r.matches(_labels(obj)) for r in query.labels):
        return False
    lowered = name.lower()
    if not all(w in lowered for w in query.words):
        return False
    if query.images:
        images = _images(kind, obj)
        if not all(any(i in image for image in images) for i in query.images):
            return False
    if query.nodes:
        node = lowered if kind == "Node" else str((obj.get("spec") or {}).get("nodeName") or "").lower()
        if not node or not all(n in node for n in query.nodes):
            return False
    if query.statuses:
        found = _statuses(kind, obj)
        if not all(any(s in f for f in found) for s in query.statuses):
            return False
    return True


def search_objects(
    snapshot: Snapshot, query: Query, namespace: str | None
) -> list[tuple[str, Mapping[str, Any]]]:
    """The snapshot's objects every term of ``query`` matches, by kind, namespace and name. Secrets match by
    name and labels only (their values are not searched)."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    for kind in sorted(query.kinds or snapshot.objects):
        for obj in _objects_of(snapshot, kind, namespace):
            if _search_matches(query, kind, obj):
                out.append((kind, obj))
    return sorted(out, key=lambda item: (item[0], *_meta(item[1])))


def row(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A search or neighbourhood row: kind, namespace, name and one health line."""
    out = identity(obj)
    line = health(obj)
    if line:
        out["health"] = line
    return out


async def _search(call: Call, args: SearchArgs) -> dict[str, Any]:
    query = parse_query(args.query)
    found = search_objects(call.state.snapshot, query, args.namespace)
    page = call.page(found, args, render=lambda item: row(item[1]), limit=args.limit or 50)
    return page.to_json("results")


SEARCH = ToolSpec(
    name="search",
    title="Search objects",
    description=(
        "Find objects across kinds: terms kind:Pod ns:shop label:app=web image:nginx node:gpu-1 "
        "status:CrashLoopBackOff (waiting/terminated reasons, phases) and free words matched in names, all ANDed. "
        "Rows of kind, namespace, name and one health line; page with cursor. Secret values are never searched."
    ),
    args=SearchArgs,
    run=_search,
    budget=Budget(1500, 6000),
)


# ---- neighborhood ------------------------------------------------------------------------------------------------
Edge = tuple[ObjectRef, ObjectRef, str]


def _selector(obj: Mapping[str, Any]) -> dict[str, str]:
    """A Service's selector, or a PDB's matchLabels (matchExpressions are not followed)."""
    spec = obj.get("spec") or {}
    selector = spec.get("selector") or {}
    if str(obj.get("kind")) == "PodDisruptionBudget":
        selector = selector.get("matchLabels") or {}
    return {str(k): str(v) for k, v in selector.items()} if isinstance(selector, Mapping) else {}


def _template_labels(kind: str, obj: Mapping[str, Any]) -> dict[str, str]:
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        spec = (spec.get("jobTemplate") or {}).get("spec") or {}
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def config_refs(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (kind, name) of every ConfigMap and Secret a pod spec references: env, envFrom, volumes, projected
    volumes, image pull secrets; in the order written, once each."""
    out: list[tuple[str, str]] = []

    def add(kind: str, name: Any) -> None:
        if name and (kind, str(name)) not in out:
            out.append((kind, str(name)))

    for c in (*(spec.get("initContainers") or []), *(spec.get("containers") or [])):
        for var in (c or {}).get("env") or []:
            source = (var or {}).get("valueFrom") or {}
            add("ConfigMap", (source.get("configMapKeyRef") or {}).get("name"))
            add("Secret", (source.get("secretKeyRef") or {}).get("name"))
        for source in (c or {}).get("envFrom") or []:
            add("ConfigMap", ((source or {}).get("configMapRef") or {}).get("name"))
            add("Secret", ((source or {}).get("secretRef") or {}).get("name"))
    for volume in spec.get("volumes") or []:
        volume = volume or {}
        add("ConfigMap", (volume.get("configMap") or {}).get("name"))
        add("Secret", (volume.get("secret") or {}).get("secretName"))
        for source in (volume.get("projected") or {}).get("sources") or []:
            add("ConfigMap", ((source or {}).get("configMap") or {}).get("name"))
            add("Secret", ((source or {}).get("secret") or {}).get("name"))
    for pull in spec.get("imagePullSecrets") or []:
        add("Secret", (pull or {}).get("name"))
    return out


def _claims(spec: Mapping[str, Any]) -> list[str]:
    return [
        str(v["persistentVolumeClaim"]["claimName"])
        for v in spec.get("volumes") or []
        if isinstance((v or {}).get("persistentVolumeClaim"), Mapping)
        and v["persistentVolumeClaim"].get("claimName")
    ]


def _route_services(kind: str, obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (namespace, Service) backends of an Ingress or an HTTPRoute."""
    ns = _meta(obj)[0]
    if kind == "Ingress":
        return [(ns, name) for name, _ in backends(obj)]
    out: list[tuple[str, str]] = []
    for rule in (obj.get("spec") or {}).get("rules") or []:
        for ref in (rule or {}).get("backendRefs") or []:
            ref = ref or {}
            if str(ref.get("kind") or "Service") == "Service" and ref.get("name"):
                pair = (str(ref.get("namespace") or ns), str(ref["name"]))
                if pair not in out:
                    out.append(pair)
    return out


class Relations:
    """The snapshot's relationships, indexed on first use within one call: owners' children, pods by label,
    Services and PDBs by selector pair, routes by backend, pods by claim and by node, users of each ConfigMap
    and Secret, HPAs by target."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    @cached_property
    def children(self) -> dict[tuple[str, str, str], list[ObjectRef]]:
        out: dict[tuple[str, str, str], list[ObjectRef]] = {}
        for kind in ("ReplicaSet", "Pod", "Job", "StatefulSet", "DaemonSet", "Deployment"):
            for obj in self.snapshot.of(kind):
                ns, name = _meta(obj)
                for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
                    key = (str((owner or {}).get("kind")), ns, str((owner or {}).get("name")))
                    out.setdefault(key, []).append(ObjectRef(kind, ns, name))
        return out

    @cached_property
    def static_pods(self) -> dict[str, list[ObjectRef]]:
        """Node name → the mirror pods it owns (static pods; their owner reference names the Node)."""
        out: dict[str, list[ObjectRef]] = {}
        for pod in self.snapshot.of("Pod"):
            for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
                if (owner or {}).get("kind") == "Node":
                    out.setdefault(str(owner.get("name")), []).append(ObjectRef("Pod", *_meta(pod)))
        return out

    @cached_property
    def pods_by_label(self) -> dict[tuple[str, str, str], set[str]]:
        out: dict[tuple[str, str, str], set[str]] = {}
        for pod in self.snapshot.of("Pod"):
            ns, name = _meta(pod)
            for k, v in _labels(pod).items():
                out.setdefault((ns, k, v), set()).add(name)
        return out

    @cached_property
    def selectors_by_pair(self) -> dict[tuple[str, str, str], list[tuple[ObjectRef, dict[str, str]]]]:
        """Services and PDBs by each (namespace, key, value) of their selector."""
        out: dict[tuple[str, str, str], list[tuple[ObjectRef, dict[str, str]]]] = {}
        for kind in ("Service", "PodDisruptionBudget"):
            for obj in self.snapshot.of(kind):
                ns, name = _meta(obj)
                selector = _selector(obj)
                for k, v in selector.items():
                    out.setdefault((ns, k, v), []).append((ObjectRef(kind, ns, name), selector))
        return out

    @cached_property
    def routes(self) -> dict[tuple[str, str], list[ObjectRef]]:
        out: dict[tuple[str, str], list[ObjectRef]] = {}
        for kind in ("Ingress", "HTTPRoute"):
            for obj in self.snapshot.of(kind):
                ns, name = _meta(obj)
                for pair in _route_services(kind, obj):
                    out.setdefault(pair, []).append(ObjectRef(kind, ns, name))
        return out

    @cached_property
    def pod_users(self) -> dict[tuple[str, str, str], list[ObjectRef]]:
        """(kind, namespace, name) of a claim, ConfigMap or Secret → the pods and workloads using it."""
        out: dict[tuple[str, str, str], list[ObjectRef]] = {}
        for kind in ("Pod", *_WORKLOADS):
            for obj in self.snapshot.of(kind):
                ns, name = _meta(obj)
                spec = pod_spec_of(kind, obj)
                user = ObjectRef(kind, ns, name)
                for claim in _claims(spec):
                    out.setdefault(("PersistentVolumeClaim", ns, claim), []).append(user)
                for ref_kind, ref_name in config_refs(spec):
                    out.setdefault((ref_kind, ns, ref_name), []).append(user)
        return out

    @cached_property
    def pods_by_node(self) -> dict[str, list[ObjectRef]]:
        out: dict[str, list[ObjectRef]] = {}
        for pod in self.snapshot.of("Pod"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                ns, name = _meta(pod)
                out.setdefault(str(node), []).append(ObjectRef("Pod", ns, name))
        return out

    @cached_property
    def hpas(self) -> dict[tuple[str, str, str], list[ObjectRef]]:
        out: dict[tuple[str, str, str], list[ObjectRef]] = {}
        for hpa in self.snapshot.of("HorizontalPodAutoscaler"):
            ns, name = _meta(hpa)
            target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
            out.setdefault((str(target.get("kind")), ns, str(target.get("name"))), []).append(
                ObjectRef("HorizontalPodAutoscaler", ns, name)
            )
        return out

    @cached_property
    def pvc_by_volume(self) -> dict[str, ObjectRef]:
        out: dict[str, ObjectRef] = {}
        for pvc in self.snapshot.of("PersistentVolumeClaim"):
            volume = (pvc.get("spec") or {}).get("volumeName")
            if volume:
                out[str(volume)] = ObjectRef("PersistentVolumeClaim", *_meta(pvc))
        return out

    def selecting(self, namespace: str, labels: Mapping[str, str]) -> list[ObjectRef]:
        """The Services and PDBs in ``namespace`` whose whole selector ``labels`` satisfies."""
        found: dict[ObjectRef, None] = {}
        for k, v in labels.items():
            for ref, selector in self.selectors_by_pair.get((namespace, k, v), ()):
                if ref not in found and all(labels.get(sk) == sv for sk, sv in selector.items()):
                    found[ref] = None
        return list(found)

    def selected_pods(self, namespace: str, selector: Mapping[str, str]) -> list[ObjectRef]:
        if not selector:
            return []
        sets = sorted(
            (self.pods_by_label.get((namespace, k, v), set()) for k, v in selector.items()), key=len
        )
        names = set.intersection(*sets) if len(sets) > 1 else sets[0]
        return [ObjectRef("Pod", namespace, n) for n in sorted(names)]

    def edges(self, ref: ObjectRef) -> list[Edge]:
        """The edges touching ``ref``, each (from, to, relation), in a fixed order."""
        obj = self.snapshot.get(ref.kind, ref.namespace, ref.name)
        if obj is None:
            return []
        kind, ns = ref.kind, ref.namespace
        out: list[Edge] = []
        for owner in (obj.get("metadata") or {}).get("ownerReferences") or []:
            owner_kind = str((owner or {}).get("kind"))
            owner_ns = ns if _namespaced(owner_kind) else ""  # a static pod's owner is its Node
            out.append((ref, ObjectRef(owner_kind, owner_ns, str((owner or {}).get("name"))), "owned_by"))
        out += [
            (child, ref, "owned_by")
            for child in sorted(self.children.get((kind, ns, ref.name), ()), key=_key)
        ]
        spec = obj.get("spec") or {}
        pod_spec = pod_spec_of(kind, obj)
        if kind == "Pod":
            out += [(s, ref, _select_relation(s)) for s in sorted(self.selecting(ns, _labels(obj)), key=_key)]
            if spec.get("nodeName"):
                out.append((ref, ObjectRef("Node", "", str(spec["nodeName"])), "runs_on"))
        elif kind in _WORKLOADS:
            template = _template_labels(kind, obj)
            if template and kind != "ReplicaSet":
                out += [(s, ref, _select_relation(s)) for s in sorted(self.selecting(ns, template), key=_key)]
            out += [(h, ref, "scales") for h in self.hpas.get((kind, ns, ref.name), ())]
        elif kind in ("Service", "PodDisruptionBudget"):
            out += [(ref, p, _select_relation(ref)) for p in self.selected_pods(ns, _selector(obj))]
            if kind == "Service":
                out += [(r, ref, "routes_to") for r in sorted(self.routes.get((ns, ref.name), ()), key=_key)]
        elif kind in ("Ingress", "HTTPRoute"):
            out += [
                (ref, ObjectRef("Service", sns, sname), "routes_to")
                for sns, sname in _route_services(kind, obj)
            ]
        elif kind == "HorizontalPodAutoscaler":
            target = spec.get("scaleTargetRef") or {}
            out.append((ref, ObjectRef(str(target.get("kind")), ns, str(target.get("name"))), "scales"))
        elif kind == "PersistentVolumeClaim":
            if spec.get("volumeName"):
                out.append((ref, ObjectRef("PersistentVolume", "", str(spec["volumeName"])), "bound_to"))
            if spec.get("storageClassName"):
                out.append((ref, ObjectRef("StorageClass", "", str(spec["storageClassName"])), "uses"))
            out += [
                (u, ref, "mounts") for u in sorted(self.pod_users.get((kind, ns, ref.name), ()), key=_key)
            ]
        elif kind == "PersistentVolume":
            claim = self.pvc_by_volume.get(ref.name)
            if claim is not None:
                out.append((claim, ref, "bound_to"))
        elif kind in _REFERENCED:
            out += [(u, ref, "uses") for u in sorted(self.pod_users.get((kind, ns, ref.name), ()), key=_key)]
        elif kind == "Node":
            out += [(p, ref, "runs_on") for p in sorted(self.pods_by_node.get(ref.name, ()), key=_key)]
            out += [(p, ref, "owned_by") for p in sorted(self.static_pods.get(ref.name, ()), key=_key)]
        if pod_spec:
            out += [(ref, ObjectRef("PersistentVolumeClaim", ns, c), "mounts") for c in _claims(pod_spec)]
            out += [(ref, ObjectRef(k, ns, n), "uses") for k, n in config_refs(pod_spec)]
        return out


def _namespaced(kind: str) -> bool:
    resource = lookup_kind(kind)
    return resource is None or resource.namespaced


def _select_relation(ref: ObjectRef) -> str:
    return "selects" if ref.kind == "Service" else "protects"


def _node_row(snapshot: Snapshot, ref: ObjectRef) -> dict[str, Any]:
    obj = snapshot.get(ref.kind, ref.namespace, ref.name)
    if ref.kind in _REFERENCED or obj is None:
        out: dict[str, Any] = {"kind": ref.kind}
        if ref.namespace:
            out["namespace"] = ref.namespace
        out["name"] = ref.name
        out["exists"] = obj is not None
        if obj is None and ref.kind in snapshot.unreadable:
            out["exists"] = "unknown (cannot read)"
        return out
    return row(obj)


def neighborhood_of(
    snapshot: Snapshot,
    ref: ObjectRef,
    hops: int = 1,
    max_nodes: int = 25,
    *,
    relations: Relations | None = None,
) -> dict[str, Any]:
    """The objects within ``hops`` relationships of ``ref`` (at most :data:`MAX_HOPS`), breadth first, at most
    ``max_nodes`` of them (``ref`` included): ``nodes`` (rows, the object first), ``edges`` between them (from,
    to, relation) and how many nodes were left out. Pure; deterministic. ``relations`` reuses an index of the
    same snapshot."""
    hops = max(0, min(hops, MAX_HOPS))
    max_nodes = max(1, min(max_nodes, MAX_NODES))
    relations = relations or Relations(snapshot)
    chosen: dict[ObjectRef, int] = {ref: 0}
    left_out: set[ObjectRef] = set()
    edges: dict[Edge, None] = {}
    queue: deque[ObjectRef] = deque([ref])
    while queue:
        current = queue.popleft()
        depth = chosen[current]
        if depth >= hops:
            continue
        for edge in relations.edges(current):
            other = edge[1] if edge[0] == current else edge[0]
            if other not in chosen:
                if len(chosen) >= max_nodes:
                    left_out.add(other)
                    continue
                chosen[other] = depth + 1
                queue.append(other)
            edges[edge] = None
    out: dict[str, Any] = {
        "object": ref.key,
        "nodes": [_node_row(snapshot, r) for r in chosen],
        "edges": [
            {"from": a.key, "to": b.key, "relation": rel}
            for a, b, rel in edges
            if a in chosen and b in chosen
        ],
    }
    if left_out:
        out["nodes_left_out"] = len(left_out)
    return out


class NeighborhoodArgs(ToolArgs):
    kind: str = Field(max_length=MAX_TEXT, description="The kind: Pod, Deployment, svc, pvc… (any case).")
    name: str = Field(max_length=MAX_TEXT, description="The object's name.")
    namespace: str | None = Field(None, max_length=MAX_TEXT, description="Its namespace (namespaced kinds).")
    hops: int = Field(1, ge=1, le=MAX_HOPS, description="How many relationships away to go (1 or 2).")
    max_nodes: int = Field(
        25, ge=1, le=MAX_NODES, description="The most objects to return (the object included)."
    )


async def _neighborhood(call: Call, args: NeighborhoodArgs) -> dict[str, Any]:
    resource = _kind(args.kind)
    snapshot = call.state.snapshot
    ref, _ = find_object(snapshot, "neighborhood", resource, args.name, args.namespace, call.state.namespace)
    relations = Relations(snapshot)
    limit = args.max_nodes
    graph = neighborhood_of(snapshot, ref, hops=args.hops, max_nodes=limit, relations=relations)
    while tokens(graph) > call.budget - BUDGET_RESERVE and limit > 1:  # bounded: log2(MAX_NODES) rounds
        limit = max(1, limit // 2)
        graph = neighborhood_of(snapshot, ref, hops=args.hops, max_nodes=limit, relations=relations)
        graph["max_nodes"] = f"{limit} (the budget of {call.budget} tokens holds no more)"
    return graph


NEIGHBORHOOD = ToolSpec(
    name="neighborhood",
    title="Objects around one",
    description=(
        "The objects related to one, breadth first up to 2 hops: owners and owned (Pod, ReplicaSet, Deployment, "
        "Job, CronJob, StatefulSet, DaemonSet), Services selecting its pods, Ingresses and HTTPRoutes routing to "
        "those Services, claims with their volume and storage class, ConfigMaps and Secrets referenced (names and "
        "whether they exist), its node, HPAs and PDBs. Nodes as rows, edges as from/to/relation."
    ),
    args=NeighborhoodArgs,
    run=_neighborhood,
    budget=Budget(1500, 6000),
)
