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
