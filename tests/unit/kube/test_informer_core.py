"""The informer's pure core: relist differences and the handling of watch events, without a network."""

from __future__ import annotations

from typing import Any

import pytest

from capstan.kube import ApiError, Informer, diff_states, object_key, resource_for, resources

pytestmark = pytest.mark.unit


def obj(name: str, rv: int, uid: str = "", ns: str | None = "a", **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": str(rv), "uid": uid or f"uid-{name}"}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta, "data": data}


def test_diff_states_added_modified_deleted_in_deterministic_order() -> None:
    known = {"a/x": obj("x", 1), "a/y": obj("y", 2), "a/gone": obj("gone", 3)}
    fresh = [obj("z", 9), obj("y", 5), obj("x", 1)]
    deltas = diff_states(known, fresh, "10")
    assert [(d.type, d.key, d.via) for d in deltas] == [
        ("modified", "a/y", "relist"),
        ("added", "a/z", "relist"),
        ("deleted", "a/gone", "relist"),
    ]
    assert deltas[-1].resource_version == "10"


def test_diff_states_recreated_object_is_delete_then_add() -> None:
    known = {"a/x": obj("x", 1, uid="old")}
    deltas = diff_states(known, [obj("x", 7, uid="new")], "8")
    assert [(d.type, d.obj["metadata"]["uid"]) for d in deltas if d.obj] == [
        ("deleted", "old"),
        ("added", "new"),
    ]


def test_diff_states_of_identical_views_is_empty() -> None:
    view = {object_key(o): o for o in (obj("x", 1), obj("y", 2, ns=None))}
    assert diff_states(view, list(view.values()), "3") == []


class _NoClient:
    pass


def informer() -> Informer:
    return Informer(_NoClient(), resources.CONFIGMAPS)  # type: ignore[arg-type]


def test_watch_events_dedupe_replays_and_split_recreations() -> None:
    inf = informer()
    first = inf._apply_event({"type": "ADDED", "object": obj("x", 1)})
    for d in first:
        inf._remember(d)
    assert [d.type for d in first] == ["added"]
    assert inf._apply_event({"type": "ADDED", "object": obj("x", 1)}) == []  # replay after a resume
    recreated = inf._apply_event({"type": "ADDED", "object": obj("x", 5, uid="other")})
    assert [d.type for d in recreated] == ["deleted", "added"]
    for d in recreated:
        inf._remember(d)
    # A late delete of the old incarnation must not remove the new one.
    assert inf._apply_event({"type": "DELETED", "object": obj("x", 6, uid="uid-x")}) == []
    assert inf.state["a/x"]["metadata"]["uid"] == "other"


def test_bookmark_moves_the_version_without_a_delta() -> None:
    inf = informer()
    assert inf._apply_event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "42"}}}) == []
    assert inf.resource_version == "42" and inf.stats.bookmarks == 1


def test_error_event_410_raises_gone() -> None:
    with pytest.raises(ApiError) as info:
        informer()._apply_event(
            {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}
        )
    assert info.value.gone


def test_keep_objects_false_stores_minimal_objects() -> None:
    inf = Informer(_NoClient(), resources.PODS, keep_objects=False)  # type: ignore[arg-type]
    for d in inf._apply_event({"type": "ADDED", "object": {**obj("p", 1), "spec": {"big": "x" * 1000}}}):
        inf._remember(d)
    assert "spec" not in inf.state["a/p"]
    assert inf.state["a/p"]["metadata"]["resourceVersion"] == "1"


def test_resource_for() -> None:
    assert resource_for("Deployment") is resources.DEPLOYMENTS
    assert resource_for("Event") is resources.EVENTS
    assert resource_for("events.k8s.io/v1/Event") is resources.EVENTS_V1
    crd = resource_for("example.com/v1alpha1/Widget")
    assert (crd.group, crd.version, crd.plural, crd.kind) == ("example.com", "v1alpha1", "widgets", "Widget")
    assert crd.collection_path("ns") == "/apis/example.com/v1alpha1/namespaces/ns/widgets"
    assert resources.NODES.item_path("n1", subresource="status") == "/api/v1/nodes/n1/status"
    with pytest.raises(Exception, match="unknown kind 'Gizmo'"):
        resource_for("Gizmo")


class _PagedClient:
    """Serves one list in pages, then a watch that ends at once (a fake for the pure relist logic)."""

    def __init__(self, pages: list[list[dict[str, Any]]], rv: str) -> None:
        self.pages = pages
        self.rv = rv

    async def list_pages(self, resource: Any, **kw: Any) -> Any:
        for page in self.pages:
            yield [dict(o) for o in page], self.rv

    async def watch(self, resource: Any, **kw: Any) -> Any:
        raise ApiError(410, "Expired", "too old")
        yield  # pragma: no cover


async def test_paged_relist_diffs_each_page_and_deletes_at_the_end() -> None:
    known = {"a/x": obj("x", 1), "a/y": obj("y", 2), "a/gone": obj("gone", 3)}
    client = _PagedClient([[obj("x", 1), obj("y", 5)], [obj("z", 9)]], rv="10")
    inf = Informer(client, resources.CONFIGMAPS, known=known)  # type: ignore[arg-type]
    out = []
    async for delta in inf.deltas():
        out.append((delta.type, delta.key, delta.via))
        if delta.type == "synced":
            inf.stop()
            break
    assert out == [
        ("modified", "a/y", "relist"),
        ("added", "a/z", "relist"),
        ("deleted", "a/gone", "relist"),
        ("synced", "", "relist"),
    ]
    assert set(inf.state) == {"a/x", "a/y", "a/z"} and inf.resource_version == "10"
