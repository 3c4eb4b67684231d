"""The pure diff builder: patches round-trip, noise is removed, Secret values never survive."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from capstan.record import DiffPolicy, apply_patch, make_patch, normalize
from capstan.redact import Redactor

pytestmark = pytest.mark.unit

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(json_objects, json_objects)
def test_applying_the_diff_of_two_objects_gives_the_second(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert apply_patch(a, make_patch(a, b)) == b


def _node(heartbeat: str, rv: str, ready: str = "True") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": "n1",
            "uid": "u",
            "resourceVersion": rv,
            "managedFields": [{"manager": "kubelet"}],
        },
        "status": {"conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}]},
    }


def test_heartbeats_resource_versions_and_managed_fields_are_noise() -> None:
    policy = DiffPolicy()
    before = normalize(_node("t1", "1"), policy)
    assert make_patch(before, normalize(_node("t2", "2"), policy)) == []
    patch = make_patch(before, normalize(_node("t3", "3", ready="False"), policy))
    assert patch == [{"op": "replace", "path": "/status/conditions/0/status", "value": "False"}]


def test_noise_paths_are_configurable() -> None:
    policy = DiffPolicy(drop_paths=["/metadata/managedFields"])
    patch = make_patch(normalize(_node("t1", "1"), policy), normalize(_node("t2", "1"), policy))
    assert patch == [{"op": "replace", "path": "/status/conditions/0/lastHeartbeatTime", "value": "t2"}]


_keys = st.sampled_from(["a", "b", "c", "*"])
_near_objects = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), children, max_size=4)
    ),
    max_leaves=25,
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), _near_objects, max_size=3),
    st.lists(st.lists(_keys, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p)), max_size=5),
)
def test_drop_paths_walked_once_drop_what_each_path_in_turn_drops(
    obj: dict[str, Any], pointers: list[str]
) -> None:
    """normalize merges the drop paths into one tree walked once; the result is that of the paths applied one
    after the other (and the input is left as it was)."""
    from capstan.record._diff import _drop_tree, _dropped, _dropped_tree, _split

    frozen = repr(obj)
    expected: Any = obj
    for pointer in pointers:
        expected = _dropped(expected, _split(pointer))
    tree = _drop_tree(tuple(pointers))
    assert tree is not None
    assert _dropped_tree(obj, tree) == expected
    assert repr(obj) == frozen


def test_a_drop_path_naming_a_list_index_is_applied_as_written() -> None:
    """Removing an element shifts the next ones, so pointers with an index run in turn: /l/0 twice drops two."""
    policy = DiffPolicy(drop_paths=["/l/0", "/l/0"], redact_kinds=[])
    assert normalize({"kind": "X", "l": ["a", "b", "c"]}, policy)["l"] == ["c"]


def test_normalize_never_mutates_its_input() -> None:
    node = _node("t1", "1")
    normalize(node, DiffPolicy())
    assert node["metadata"]["managedFields"] == [{"manager": "kubelet"}]


def test_a_secret_keeps_metadata_key_names_and_a_keyed_hash_per_value_but_no_value() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "db",
            "uid": "s1",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": '{"data":{"pw":"c2VjcmV0LXZhbHVl"}}'
            },
        },
        "data": {"pw": "c2VjcmV0LXZhbHVl"},
        "stringData": {"token": "plain-secret-token"},
    }
    redactor = Redactor(key=b"k" * 32)
    out = normalize(secret, DiffPolicy(), redactor)
    text = repr(out)
    assert "c2VjcmV0LXZhbHVl" not in text
    assert "plain-secret-token" not in text
    assert sorted(out["data"]) == ["pw"]
    assert sorted(out["stringData"]) == ["token"]
    assert out["metadata"]["name"] == "db"
    assert out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"].startswith(
        "hmac-sha256:"
    )
    # a changed value is a change (a patch on that key only) ...
    changed = {**secret, "data": {"pw": "b3RoZXI="}}
    patch = make_patch(out, normalize(changed, DiffPolicy(), redactor))
    assert [op["path"] for op in patch] == ["/data/pw"]
    # ... the same value is not, and another store's key gives other markers (no offline guessing without the key)
    assert make_patch(out, normalize(secret, DiffPolicy(), redactor)) == []
    other = normalize(secret, DiffPolicy(), Redactor(key=b"j" * 32))
    assert other["data"]["pw"] != out["data"]["pw"]
