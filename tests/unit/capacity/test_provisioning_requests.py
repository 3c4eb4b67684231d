"""ProvisioningRequests served by the live controller: the pure review over a snapshot, the objects read, the
conditions written and the pods announced (``capstan.capacity.live._provreq``)."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.capacity.live import (
    BEST_EFFORT_ATOMIC,
    CHECK_CAPACITY,
    CONSUME_ANNOTATION,
    ProvisioningRequests,
    RequestView,
    request_view,
    review_requests,
)
from capstan.capacity.model import GPU_MILLI, NodeState, NodeType, Pod
from capstan.capacity.planner import NodeView, Snapshot
from capstan.redact import Redactor

G4 = NodeType("g4", 16_000, 65_536, gpu=4, gpu_model="A10")
CPU = NodeType("c8", 8_000, 32_768)


def _gpu_pod(name: str, gpus: int = 1, arrival: float = 0.0) -> Pod:
    return Pod(name, arrival, 1000, 1024, gpus, GPU_MILLI)


def _node(nid: str, state: NodeState, free_gpus: int, nt: NodeType = G4) -> NodeView:
    devs = tuple([GPU_MILLI] * free_gpus + [0] * (nt.gpu - free_gpus))
    return NodeView(nid, nt.name, state, nt.cpu_milli, nt.memory_mib, devs, 0, 0.0)


def _snap(*nodes: NodeView, pending: tuple[Pod, ...] = (), now: float = 1000.0) -> Snapshot:
    return Snapshot(now=now, node_types=(G4, CPU), nodes=nodes, pending=pending)


def _request(key: str, pods: int, *, cls: str = BEST_EFFORT_ATOMIC, **kw: Any) -> RequestView:
    return RequestView(
        key, cls, kw.pop("created", 0.0), tuple(_gpu_pod(f"{key}-{i}") for i in range(pods)), **kw
    )


def test_a_request_is_provisioned_only_when_all_its_pods_fit_at_once() -> None:
    booting = _node("n1", NodeState.BOOTING, 4)
    ready = _node("n2", NodeState.GPU_ALLOCATABLE, 2)
    verdicts = review_requests([_request("ml/a", 6), _request("ml/b", 7)], _snap(booting, ready))
    assert [(v.key, v.outcome) for v in verdicts] == [("ml/a", "provisioned"), ("ml/b", "waiting")]
    # all or nothing: b's seventh pod has no room, and a's took the rest
    assert review_requests([_request("ml/b", 7)], _snap(booting, ready))[0].outcome == "waiting"


def test_pending_pods_and_earlier_bookings_take_their_room_first() -> None:
    node = _node("n1", NodeState.GPU_ALLOCATABLE, 4)
    pending = (_gpu_pod("ml/p", 2),)
    assert review_requests([_request("ml/a", 3)], _snap(node, pending=pending))[0].outcome == "waiting"
    booked = _request("ml/old", 2, provisioned_at=900.0)
    young = _request("ml/new", 3, created=10.0)
    verdicts = review_requests([young, booked], _snap(node))
    assert [v.outcome for v in verdicts] == ["waiting", "booked"]
    # a booked request's pods already created hold room as pods, not as the booking
    consumed = _request("ml/old", 2, provisioned_at=900.0, consumed=2)
    assert review_requests([young, consumed], _snap(node))[0].outcome == "provisioned"
    # the booking ends
    assert review_requests([booked], _snap(node, now=1500.0), booking_s=600.0)[0].outcome == "expired"


def test_oldest_request_first_whatever_order_they_are_given_in() -> None:
    node = _node("n1", NodeState.GPU_ALLOCATABLE, 4)
    older = _request("ml/z", 3, created=1.0)
    newer = _request("ml/a", 3, created=2.0)
    verdicts = {v.key: v.outcome for v in review_requests([newer, older], _snap(node))}
    assert verdicts == {"ml/z": "provisioned", "ml/a": "waiting"}
    # a request that does not fit whole gives back the room it took: a later one of the same shape gets it
    nodes = (node, _node("n2", NodeState.GPU_ALLOCATABLE, 2))
    big, small = _request("ml/big", 7, created=1.0), _request("ml/small", 6, created=2.0)
    assert [v.outcome for v in review_requests([big, small], _snap(*nodes))] == ["waiting", "provisioned"]


def test_check_capacity_counts_only_nodes_whose_gpus_are_allocatable_now() -> None:
    booting = _node("n1", NodeState.BOOTING, 4)
    req = _request("ml/c", 2, cls=CHECK_CAPACITY)
    assert review_requests([req], _snap(booting))[0].outcome == "not-found"
    up = _node("n2", NodeState.GPU_ALLOCATABLE, 4)
    assert review_requests([req], _snap(booting, up))[0].outcome == "found"
    assert review_requests([req], _snap(_node("n3", NodeState.DRAINING, 4)))[0].outcome == "not-found"


def test_a_request_no_node_type_can_take_fails_and_a_missing_template_waits() -> None:
    too_big = RequestView("ml/big", BEST_EFFORT_ATOMIC, 0.0, (_gpu_pod("ml/big-0", 8),))
    verdict = review_requests([too_big], _snap())[0]
    assert verdict.outcome == "failed" and "nvidia.com/gpu 8 > 4" in verdict.message
    assert (
        review_requests([RequestView("ml/none", BEST_EFFORT_ATOMIC, 0.0, ())], _snap())[0].outcome == "failed"
    )
    gone = RequestView("ml/t", BEST_EFFORT_ATOMIC, 0.0, (), problem="pod template ml/x not found")
    assert review_requests([gone], _snap())[0].outcome == "no-template"


def _template(name: str, gpus: int, secret: str = "") -> dict[str, Any]:
    env = [{"name": "HF_TOKEN", "value": secret}] if secret else []
    container = {
        "name": "c",
        "env": env,
        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": str(gpus)}},
    }
    return {"metadata": {"name": name, "namespace": "ml"}, "template": {"spec": {"containers": [container]}}}


def _provreq(name: str, podsets: list[tuple[str, int]], **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "creationTimestamp": "2026-12-07T10:00:00Z",
            "resourceVersion": "7",
            "generation": 1,
        },
        "spec": {
            "provisioningClassName": status.pop("cls", BEST_EFFORT_ATOMIC),
            "podSets": [{"podTemplateRef": {"name": t}, "count": c} for t, c in podsets],
        },
        "status": status,
    }


def test_a_request_object_reads_as_its_pod_sets_pods() -> None:
    templates = {"ml/big": _template("big", 2), "ml/small": _template("small", 1)}
    view = request_view(_provreq("r", [("big", 2), ("small", 3)]), templates, consumed=1, now=5.0)
    assert [p.num_gpu for p in view.pods] == [2, 2, 1, 1, 1]
    assert len({p.name for p in view.pods}) == 5 and view.created == 1_796_637_600.0  # its creationTimestamp
    assert len(view.to_come) == 4 and view.provisioned_at is None
    missing = request_view(_provreq("r", [("gone", 1)]), templates, consumed=0, now=5.0)
    assert missing.problem == "pod template ml/gone not found" and missing.pods == ()
    provisioned = {
        "conditions": [
            {"type": "Provisioned", "status": "True", "lastTransitionTime": "2026-12-07T10:01:00Z"}
        ]
    }
    at = request_view(_provreq("r", [("big", 1)], **provisioned), templates, 0, 5.0).provisioned_at
    assert at is not None and at - view.created == 60.0


def test_conditions_are_written_when_they_change_and_keep_their_transition_time() -> None:
    secret = "hf_" + "Q" * 34
    reqs = ProvisioningRequests(redactor=Redactor())
    obj = _provreq("r", [("t", 2)])
    pods: dict[str, dict[str, Any]] = {}
    reqs.follow({"ml/r": obj}, {"ml/t": _template("t", 1, secret)}, pods)
    node = _node("n1", NodeState.BOOTING, 4)
    [(ns, name, version, conditions, verdict)] = reqs.updates(_snap(node))
    assert (ns, name, version, verdict.outcome) == ("ml", "r", "7", "provisioned")
    kinds = {c["type"]: (c["status"], c["reason"]) for c in conditions}
    assert kinds == {"Accepted": ("True", "Accepted"), "Provisioned": ("True", "CapacityIsProvisioned")}
    assert all(c["observedGeneration"] == 1 and c["lastTransitionTime"].endswith("Z") for c in conditions)
    assert secret not in repr(conditions)
    # once written, the same outcome writes nothing
    obj["status"] = {"conditions": conditions}
    assert reqs.updates(_snap(node, now=1005.0)) == [] and reqs.outcomes == {"ml/r": "booked"}
    # announced while booked: the pods still to come; consumed pods are not announced again
    announced, again = reqs.announced(1010.0)
    assert len(announced) == 2 and again == 1600.0  # the booking's end
    pods["ml/r-pod-0"] = {
        "metadata": {"namespace": "ml", "name": "p0", "annotations": {CONSUME_ANNOTATION: "r"}}
    }
    assert len(reqs.announced(1010.0)[0]) == 1


def test_only_open_requests_of_served_classes_are_read() -> None:
    reqs = ProvisioningRequests(booking_s=60.0)
    failed = _provreq("f", [("t", 1)], conditions=[{"type": "Failed", "status": "True"}])
    other = _provreq("o", [("t", 1)], cls="queued-provisioning.gke.io")
    expired = _provreq("e", [("t", 1)], conditions=[{"type": "BookingExpired", "status": "True"}])
    check = _provreq("c", [("t", 1)], cls=CHECK_CAPACITY)
    waiting = _provreq("w", [("t", 3)])
    state = {f"ml/{o['metadata']['name']}": o for o in (failed, other, expired, check, waiting)}
    reqs.follow(state, {"ml/t": _template("t", 1)}, {})
    pods, again = reqs.announced(0.0)
    # a check-capacity request launches nothing: only the best-effort one's pods are announced
    assert len(pods) == 3 and {p.name.split("-")[1] for p in pods} == {"w"} and again is None
    assert [u[1] for u in reqs.updates(_snap())] == ["c", "w"]
    assert reqs.any_open()
    reqs.follow({"ml/f": failed, "ml/o": other}, {}, {})
    assert not reqs.any_open() and reqs.announced(0.0) == ((), None)
    with pytest.raises(ValueError, match="booking_s"):
        ProvisioningRequests(booking_s=0)


async def test_a_status_is_written_once_from_a_copy_and_a_conflict_is_not_a_failure() -> None:
    """The informer shows a write a moment later: a pass in between must not write again from the stale copy
    (it met a 409 on the sandbox with Kueue); a conflict with another writer is read again on the next pass."""
    from capstan.kube import ApiError

    class Client:
        def __init__(self) -> None:
            self.patches: list[tuple[str, dict[str, Any]]] = []
            self.refuse: int | None = None

        async def patch(
            self, resource: object, name: str, body: dict[str, Any], **_: object
        ) -> dict[str, Any]:
            if self.refuse:
                raise ApiError(self.refuse, "Refused", "no")
            self.patches.append((name, body))
            return {}

    client = Client()
    reqs = ProvisioningRequests()
    obj = _provreq("r", [("t", 1)])
    reqs.follow({"ml/r": obj}, {"ml/t": _template("t", 1)}, {})
    node = _node("n1", NodeState.BOOTING, 4)
    assert await reqs.write(client, reqs.updates(_snap(node))) == []  # type: ignore[arg-type]
    assert [(n, b["metadata"]) for n, b in client.patches] == [("r", {"resourceVersion": "7"})]
    assert reqs.updates(_snap(node)) == []  # the same copy: written already
    obj["metadata"]["resourceVersion"] = "8"  # another writer's change, without our conditions
    client.refuse = 409
    assert await reqs.write(client, reqs.updates(_snap(node))) == []  # type: ignore[arg-type]
    client.refuse = 500
    (line,) = await reqs.write(client, reqs.updates(_snap(node)))  # type: ignore[arg-type]
    assert line.startswith("ProvisioningRequest ml/r status:")
