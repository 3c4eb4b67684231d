"""ProvisioningRequests (``autoscaling.x-k8s.io/v1``) served by Capstan: the all-or-nothing capacity request Kueue's
``ProvisioningRequest`` admission check makes before it admits a Workload, which cluster-autoscaler serves and
Karpenter does not.

A request names pod templates and counts (``spec.podSets``). Capstan serves the two classes cluster-autoscaler
defines:

* ``best-effort-atomic-scale-up.autoscaling.x-k8s.io``: its pods are demand announced now
  (:class:`~capstan.capacity.QueuedDemand`), so the planner launches nodes for all of them in one plan; the
  request is ``Provisioned`` once every pod fits, at once, in the room of the cluster's nodes, those launched and
  still booting included (cluster-autoscaler's "scale-up requested"), after the pods already pending and the
  requests booked before it have taken theirs;
* ``check-capacity.autoscaling.x-k8s.io``: nothing is launched; it is ``Provisioned`` when its pods fit in the
  room of nodes whose GPUs are allocatable now, and ``Provisioned=False`` (``CapacityIsNotFound``) otherwise,
  checked again on every pass.

Provisioned capacity is *booked* for :data:`BOOKING_S` (cluster-autoscaler's ten minutes): the pods not yet
created that consume the request (``autoscaling.x-k8s.io/consume-provisioning-request``, which Kueue sets on the
admitted Workload's pods) stay announced, so their room is held and other pods' plans leave it alone; then
``BookingExpired``. A request whose pods fit no node type the cluster launches is ``Failed``; one whose pod
template is missing is not accepted until it is there.

The decision is a pure function over a :class:`~capstan.capacity.Snapshot` (:func:`review`); the loop writes the
conditions that changed to the request's ``status`` subresource (a merge patch guarded by the object's
``resourceVersion``: a conflict is retried on the next pass), and a dry run only logs them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from capstan.capacity._plan_types import NodeView, Snapshot
from capstan.capacity.live._objects import epoch, template_pods
from capstan.capacity.model import NodeState, NodeType, Pod
from capstan.capacity.placement import (
    Assignment,
    Capacity,
    choose_devices,
    fits,
    give,
    take,
    why_incompatible,
)
from capstan.errors import UserError
from capstan.kube import ApiError, KubeClient, Resource
from capstan.redact import Redactor

PROVISIONING_REQUESTS = Resource(
    "autoscaling.x-k8s.io", "v1", "provisioningrequests", "ProvisioningRequest", namespaced=True
)
PODTEMPLATES = Resource("", "v1", "podtemplates", "PodTemplate", namespaced=True)
CRD_NAME = "provisioningrequests.autoscaling.x-k8s.io"
BEST_EFFORT_ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
SERVED_CLASSES = (BEST_EFFORT_ATOMIC, CHECK_CAPACITY)
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
BOOKING_S = 600.0
"""How long provisioned capacity is held for the pods that will consume it (cluster-autoscaler's default)."""
MAX_PODS_PER_REQUEST = 1024
"""A request for more pods than this is refused (``Failed``), so one request cannot make a decision unbounded."""

Outcome = Literal[
    "provisioned", "found", "booked", "waiting", "not-found", "failed", "expired", "no-template"
]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


@dataclass(frozen=True)
class RequestView:
    """One ProvisioningRequest as :func:`review` reads it."""

    key: str
    """``namespace/name``."""
    class_name: str
    created: float
    pods: tuple[Pod, ...]
    """Every pod it asks for (each pod set's template, ``count`` times), in pod-set order."""
    provisioned_at: float | None = None
    """When it became ``Provisioned=True`` (None: not yet)."""
    consumed: int = 0
    """Pods already created that consume it."""
    problem: str = ""
    """Why its pods cannot be read (a pod template missing), or "" when they can."""

    @property
    def to_come(self) -> tuple[Pod, ...]:
        """The pods not yet created."""
        return self.pods[min(self.consumed, len(self.pods)) :]


@dataclass(frozen=True)
class Verdict:
    """What :func:`review` found for one request."""

    key: str
    outcome: Outcome
    message: str


def review(
    requests: Sequence[RequestView], snap: Snapshot, *, booking_s: float = BOOKING_S
) -> tuple[Verdict, ...]:
    """Each request's outcome against ``snap``: the pods pending take their room first (oldest first), then the
    requests booked (provisioned within ``booking_s``) take room for their pods still to come, then the others,
    oldest first, each all or nothing. A pod goes to the first node in snapshot order whose type admits it and
    that has room; a request's pods are tried most GPUs first. Deterministic for a given snapshot."""
    room = _Room(snap)
    for pod in sorted(snap.pending, key=lambda p: (p.arrival, p.name)):
        room.place(pod, now_only=False)
    out: dict[str, Verdict] = {}
    booked = [r for r in requests if r.provisioned_at is not None]
    for r in sorted(booked, key=lambda r: (r.provisioned_at or 0.0, r.key)):
        if snap.now - (r.provisioned_at or 0.0) >= booking_s:
            out[r.key] = Verdict(
                r.key, "expired", f"provisioned {booking_s:.0f} s ago: its room is held no longer"
            )
            continue
        for pod in _ffd(r.to_come):
            room.place(pod, now_only=r.class_name == CHECK_CAPACITY)
        out[r.key] = Verdict(
            r.key, "booked", f"{len(r.to_come)} of {len(r.pods)} pods to come hold their room"
        )
    for r in sorted((r for r in requests if r.provisioned_at is None), key=lambda r: (r.created, r.key)):
        out[r.key] = _decide(r, room, snap.node_types)
    return tuple(out[r.key] for r in requests)


def _decide(r: RequestView, room: _Room, node_types: Iterable[NodeType]) -> Verdict:
    if r.problem:
        return Verdict(r.key, "no-template", r.problem)
    if not r.pods:
        return Verdict(r.key, "failed", "it asks for no pods")
    if len(r.pods) > MAX_PODS_PER_REQUEST:
        return Verdict(r.key, "failed", f"{len(r.pods)} pods: Capstan serves at most {MAX_PODS_PER_REQUEST}")
    for pod in r.pods:
        reasons = [why_incompatible(nt, pod) for nt in node_types]
        if all(reasons):
            first = next((x for x in reasons if x), "no node types")
            return Verdict(
                r.key, "failed", f"pod {pod.name} fits no node type the cluster launches ({first})"
            )
    now_only = r.class_name == CHECK_CAPACITY
    if not room.place_all(_ffd(r.pods), now_only=now_only):
        if now_only:
            return Verdict(r.key, "not-found", f"{len(r.pods)} pods do not fit in the capacity there is now")
        return Verdict(r.key, "waiting", f"launching nodes for {len(r.pods)} pods")
    if now_only:
        return Verdict(r.key, "found", f"{len(r.pods)} pods fit at once in capacity there is now")
    return Verdict(r.key, "provisioned", f"{len(r.pods)} pods fit at once in nodes ready or launched")


def _ffd(pods: Iterable[Pod]) -> list[Pod]:
    return sorted(pods, key=lambda p: (-p.gpu_total_milli, -p.cpu_milli, -p.memory_mib, p.name))


class _Room:
    """The free room of a snapshot's nodes, taken pod by pod: first fit in snapshot order. Bounded at scale: a
    GPU pod looks only at the nodes that had a free GPU, a pod starts where the last of its shape found room,
    and a pod of a shape that found none skips the scan (room only shrinks, except when a request that did not
    fit whole gives back what it took, and then those marks are restored)."""

    def __init__(self, snap: Snapshot) -> None:
        types = {t.name: t for t in snap.node_types}
        self._nodes: list[tuple[NodeView, NodeType, bool]] = []  # (view, type, capacity exists now)
        for view in snap.nodes:  # bounded by the nodes
            nt = types.get(view.type)
            if nt is None or view.state is NodeState.DRAINING:
                continue
            now_usable = view.state is NodeState.GPU_ALLOCATABLE or (
                view.state is NodeState.READY and nt.gpu == 0
            )
            self._nodes.append((view, nt, now_usable))
        self._caps: dict[str, Capacity] = {}
        self.with_gpu = [self._slot(v, nt, u) for v, nt, u in self._nodes if any(v.devs)]
        self._all: list[tuple[NodeType, Capacity, bool]] | None = None
        self._full: set[tuple[object, bool]] = set()
        self._from: dict[tuple[object, bool], int] = {}
        """Per shape, the first node that may still have room for it (room only shrinks)."""
        self._admits: dict[tuple[str, object], bool] = {}

    def _slot(self, view: NodeView, nt: NodeType, usable: bool) -> tuple[NodeType, Capacity, bool]:
        cap = self._caps.get(view.id)
        if cap is None:
            cap = self._caps[view.id] = Capacity(view.cpu, view.mem, list(view.devs))
        return nt, cap, usable

    @property
    def slots(self) -> list[tuple[NodeType, Capacity, bool]]:
        """Every node's room (made when a pod that wants no GPU first asks: most of a GPU cluster's nodes have
        no free GPU, and a GPU pod need not look at them)."""
        if self._all is None:
            self._all = [self._slot(v, nt, u) for v, nt, u in self._nodes]
        return self._all

    def place(self, pod: Pod, *, now_only: bool) -> tuple[Capacity, Assignment] | None:
        """Take room for ``pod`` on the first node that has it (None: none has)."""
        key = (pod.shape, now_only)
        if key in self._full:
            return None
        slots = self.with_gpu if pod.wants_gpu else self.slots
        for i in range(self._from.get(key, 0), len(slots)):  # bounded by the nodes
            nt, cap, usable = slots[i]
            if (now_only and not usable) or not fits(cap, pod):
                continue
            admits = self._admits.get((nt.name, pod.shape))
            if admits is None:
                admits = self._admits[(nt.name, pod.shape)] = why_incompatible(nt, pod) is None
            if admits:
                assignment = choose_devices(cap, pod)
                take(cap, pod, assignment)
                self._from[key] = i  # no node before it has room for this shape any more
                return cap, assignment
        self._full.add(key)
        return None

    def place_all(self, pods: Sequence[Pod], *, now_only: bool) -> bool:
        """All of ``pods`` or none: what a request that does not fit whole took is given back."""
        full, start = set(self._full), dict(self._from)
        taken: list[tuple[Pod, Capacity, Assignment]] = []
        for pod in pods:
            got = self.place(pod, now_only=now_only)
            if got is None:
                for p, cap, assignment in reversed(taken):
                    give(cap, p, assignment)
                self._full, self._from = full, start
                return False
            taken.append((pod, *got))
        return True


# ----- reading the objects -----


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in ((obj.get("status") or {}).get("conditions")) or []:
        if (c or {}).get("type") == kind:
            return c  # type: ignore[no-any-return]
    return None


def _true(obj: Mapping[str, Any], kind: str) -> bool:
    c = _condition(obj, kind)
    return c is not None and c.get("status") == "True"


def is_open(obj: Mapping[str, Any], classes: Iterable[str] = SERVED_CLASSES) -> bool:
    """A request of a served class that is not finished (not ``Failed``, ``BookingExpired`` or
    ``CapacityRevoked``) and not being deleted."""
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if str((obj.get("spec") or {}).get("provisioningClassName", "")) not in classes:
        return False
    return not any(_true(obj, k) for k in ("Failed", "BookingExpired", "CapacityRevoked"))


def request_view(
    obj: Mapping[str, Any], templates: Mapping[str, Mapping[str, Any]], consumed: int, now: float
) -> RequestView:
    """``obj`` as :func:`review` reads it; ``templates`` are PodTemplates by ``namespace/name``."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    key = f"{ns}/{name}"
    pods: list[Pod] = []
    problem = ""
    for i, podset in enumerate(spec.get("podSets") or []):
        ref = str(((podset or {}).get("podTemplateRef") or {}).get("name", ""))
        template = templates.get(f"{ns}/{ref}")
        if template is None:
            problem = f"pod template {ns}/{ref} not found"
            break
        try:
            count = max(0, int(str((podset or {}).get("count", 0))))
        except ValueError:
            count = 0
        count = min(count, MAX_PODS_PER_REQUEST + 1 - len(pods))  # bounded: more than the cap fails anyway
        pods.extend(template_pods(template.get("template") or {}, f"provreq-{name}-{i}", ns, count, now))
    provisioned = _condition(obj, "Provisioned")
    at = None
    if provisioned is not None and provisioned.get("status") == "True":
        at = epoch(provisioned.get("lastTransitionTime"), now)
    return RequestView(
        key,
        str(spec.get("provisioningClassName", "")),
        epoch(meta.get("creationTimestamp"), now),
        () if problem else tuple(pods),
        at,
        consumed,
        problem,
    )


# ----- what each outcome writes -----

_WRITES: dict[Outcome, tuple[str, str, str]] = {
    "provisioned": ("Provisioned", "True", "CapacityIsProvisioned"),
    "found": ("Provisioned", "True", "CapacityIsFound"),
    "waiting": ("Provisioned", "False", "CapacityIsBeingProvisioned"),
    "not-found": ("Provisioned", "False", "CapacityIsNotFound"),
    "failed": ("Failed", "True", "CapacityIsNotFound"),
    "expired": ("BookingExpired", "True", "BookingExpired"),
    "no-template": ("Accepted", "False", "PodTemplateNotFound"),
}


def conditions_for(
    obj: Mapping[str, Any], verdict: Verdict, now: float, redactor: Redactor
) -> list[dict[str, Any]] | None:
    """The request's conditions after ``verdict`` (``Accepted=True`` added on first sight), or None when they
    would not change (a message alone changing is not written, so a request waiting is not rewritten every
    pass). A condition keeps its ``lastTransitionTime`` while its status is unchanged."""
    found = [dict(c) for c in ((obj.get("status") or {}).get("conditions")) or [] if isinstance(c, Mapping)]
    wanted: list[tuple[str, str, str, str]] = []
    if verdict.outcome != "no-template":
        wanted.append(("Accepted", "True", "Accepted", "Capstan serves this request"))
    if verdict.outcome in _WRITES:
        kind, status, reason = _WRITES[verdict.outcome]
        wanted.append((kind, status, reason, verdict.message))
    changed = False
    generation = (obj.get("metadata") or {}).get("generation")
    for kind, status, reason, message in wanted:
        old = next((c for c in found if c.get("type") == kind), None)
        if old is not None and old.get("status") == status and old.get("reason") == reason:
            continue
        changed = True
        new = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": redactor.text(message),
            "lastTransitionTime": (
                old["lastTransitionTime"]
                if old is not None and old.get("status") == status and old.get("lastTransitionTime")
                else datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            ),
        }
        if isinstance(generation, int):
            new["observedGeneration"] = generation
        if old is None:
            found.append(new)
        else:
            found[found.index(old)] = new
    return found if changed else None


class ProvisioningRequests:
    """The ProvisioningRequests an informer holds (:meth:`follow`), as :class:`~capstan.capacity.Announcements`
    (the pods of every open best-effort-atomic request, and of every booked one its pods still to come) and as
    the conditions to write after each pass (:meth:`updates`)."""

    def __init__(self, *, booking_s: float = BOOKING_S, redactor: Redactor | None = None) -> None:
        if booking_s <= 0:
            raise ValueError(f"booking_s {booking_s}: it must be more than 0")
        self.booking_s = booking_s
        self.redactor = redactor or Redactor()
        self._requests: Mapping[str, Mapping[str, Any]] = {}
        self._templates: Mapping[str, Mapping[str, Any]] = {}
        self._pods: Mapping[str, Mapping[str, Any]] = {}
        self._wrote: dict[str, str] = {}
        """Request → the resourceVersion a status write was made from: until the informer shows a newer one, the
        same write is not made again from the stale copy (it would only meet a conflict)."""
        self.outcomes: dict[str, Outcome] = {}
        """The last pass's outcome per open request (``namespace/name``)."""

    def follow(
        self,
        requests: Mapping[str, Mapping[str, Any]],
        templates: Mapping[str, Mapping[str, Any]],
        pods: Mapping[str, Mapping[str, Any]],
    ) -> None:
        """Read from informers' states (kept up to date by them): the requests, the PodTemplates they name, and
        the pods (those consuming a request are counted against it)."""
        self._requests, self._templates, self._pods = requests, templates, pods

    async def check(self, client: KubeClient) -> None:
        """Raise :class:`UserError` (one line) if the cluster serves no ProvisioningRequests (no CRD)."""
        try:
            await client.list_page(PROVISIONING_REQUESTS, limit=1)
        except ApiError as exc:
            if exc.not_found:
                raise UserError(
                    f"--serve-provisioning-requests: the cluster has no ProvisioningRequest CRD ({CRD_NAME}): "
                    "install it from kubernetes/autoscaler (cluster-autoscaler/apis/config/crd)"
                ) from None
            raise

    def any_open(self) -> bool:
        """Whether any request is open (a pass with none needs no review)."""
        return any(is_open(obj) for obj in self._requests.values())

    def _open(self) -> list[tuple[str, Mapping[str, Any]]]:
        return [(k, self._requests[k]) for k in sorted(self._requests) if is_open(self._requests[k])]

    def _consumed(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for obj in self._pods.values():
            meta = obj.get("metadata") or {}
            name = (meta.get("annotations") or {}).get(CONSUME_ANNOTATION)
            if name and not meta.get("deletionTimestamp"):
                key = f"{meta.get('namespace', '')}/{name}"
                counts[key] = counts.get(key, 0) + 1
        return counts

    def views(self, now: float) -> list[tuple[Mapping[str, Any], RequestView]]:
        """Every open request with its view (a bounded pass over the requests and, when any is open, the pods)."""
        open_ = self._open()
        consumed = self._consumed() if open_ else {}
        return [(obj, request_view(obj, self._templates, consumed.get(k, 0), now)) for k, obj in open_]

    def announced(self, now: float) -> tuple[tuple[Pod, ...], float | None]:
        """The pods of the open best-effort-atomic requests, and the booked requests' pods still to come; the
        answer next changes by itself when a booking ends (a request made, changed or consumed is a change the
        loop tells the controller of: :meth:`capstan.capacity.Controller.on_announced`)."""
        pods: list[Pod] = []
        ends: list[float] = []
        for _, view in self.views(now):
            if view.provisioned_at is not None:
                end = view.provisioned_at + self.booking_s
                if now < end:
                    pods.extend(view.to_come)
                    ends.append(end)
            elif view.class_name == BEST_EFFORT_ATOMIC and len(view.pods) <= MAX_PODS_PER_REQUEST:
                pods.extend(view.pods)
        return tuple(pods), min(ends, default=None)

    def updates(self, snap: Snapshot) -> list[tuple[str, str, str, list[dict[str, Any]], Verdict]]:
        """(namespace, name, resourceVersion, conditions, verdict) for each request whose conditions change."""
        pairs = self.views(snap.now)
        verdicts = review([v for _, v in pairs], snap, booking_s=self.booking_s)
        self.outcomes = {v.key: v.outcome for v in verdicts}
        if len(self._wrote) > len(self.outcomes):  # bounded: only requests still open
            self._wrote = {k: v for k, v in self._wrote.items() if k in self.outcomes}
        out = []
        for (obj, _), verdict in zip(pairs, verdicts, strict=True):
            meta = obj.get("metadata") or {}
            if self._wrote.get(verdict.key) == str(meta.get("resourceVersion", "")):
                continue  # written from this copy already: wait for the informer to show the result
            conditions = conditions_for(obj, verdict, snap.now, self.redactor)
            if conditions is None:
                continue
            out.append(
                (str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("resourceVersion", "")),
                 conditions, verdict)
            )  # fmt: skip
        return out

    async def write(
        self, client: KubeClient, updates: Sequence[tuple[str, str, str, list[dict[str, Any]], Verdict]]
    ) -> list[str]:
        """Patch each request's status; one line per failed call. A request deleted meanwhile, or changed by
        another writer (a conflict), is not a failure: the next pass reads it again."""
        failed = []
        for ns, name, version, conditions, _ in updates:
            body: dict[str, Any] = {"status": {"conditions": conditions}}
            if version:
                body["metadata"] = {"resourceVersion": version}
            try:
                await client.patch(PROVISIONING_REQUESTS, name, body, namespace=ns, subresource="status")
            except ApiError as exc:
                if not (exc.not_found or exc.conflict):
                    failed.append(f"ProvisioningRequest {ns}/{name} status: {exc}")
                continue
            self._wrote[f"{ns}/{name}"] = version
        return failed
