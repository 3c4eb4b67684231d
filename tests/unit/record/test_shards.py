"""A recorder's shard of the cluster (``namespaces`` / ``exclude_namespaces``): its watches, their cursor keys, and
the configurations refused with one line."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from capstan.kube import resource_for
from capstan.record import DEFAULT_KINDS, KubernetesConfig


def keys(config: KubernetesConfig) -> list[str]:
    return [w.key for w in config.watches()]


def test_a_recorder_of_everything_keeps_the_plain_kind_keys() -> None:
    config = KubernetesConfig(kinds=["ConfigMap", "Node"], events=False)
    assert keys(config) == ["/v1/ConfigMap", "/v1/Node"]
    assert all(w.field_selector is None and w.namespace is None for w in config.watches())


def test_a_shard_of_namespaces_watches_each_of_them_under_its_own_cursor() -> None:
    config = KubernetesConfig(kinds=["ConfigMap"], namespaces=["team-b", "team-a"], events=True)
    assert keys(config) == [
        "/v1/ConfigMap@ns=team-a",
        "/v1/ConfigMap@ns=team-b",
        "/v1/Event@ns=team-a",
        "/v1/Event@ns=team-b",
        "events.k8s.io/v1/Event@ns=team-a",
        "events.k8s.io/v1/Event@ns=team-b",
    ]
    (watch, _) = config.watches()[:2]
    assert watch.covers("team-a") and not watch.covers("team-b")


def test_the_shard_of_the_rest_excludes_by_field_selector_and_keeps_cluster_scoped_kinds() -> None:
    config = KubernetesConfig(kinds=["Pod", "Node"], exclude_namespaces=["team-a", "team-b"], events=False)
    pod, node = config.watches()
    assert pod.key == "/v1/Pod@ns!=team-a,team-b"
    assert pod.field_selector == "metadata.namespace!=team-a,metadata.namespace!=team-b"
    assert pod.covers("default") and not pod.covers("team-a")
    assert (node.key, node.field_selector) == ("/v1/Node", None)


def test_a_long_exclusion_list_is_keyed_by_its_hash_within_the_cursor_column() -> None:
    many = [f"namespace-number-{i:03d}" for i in range(40)]
    (watch,) = KubernetesConfig(kinds=["ConfigMap"], exclude_namespaces=many, events=False).watches()
    assert watch.key.startswith("/v1/ConfigMap@ns!=sha1:") and len(watch.key) <= 300
    other = KubernetesConfig(kinds=["ConfigMap"], exclude_namespaces=many[:-1], events=False).watches()[0]
    assert other.key != watch.key


def test_the_default_kinds_of_a_namespace_shard_are_the_namespaced_ones() -> None:
    config = KubernetesConfig(namespaces=["team-a"], events=False)
    kinds = [w.resource.kind for w in config.watches()]
    assert kinds == [k for k in DEFAULT_KINDS if resource_for(k).namespaced]
    assert "Node" in [w.resource.kind for w in KubernetesConfig(events=False).watches()]


def test_namespace_is_the_shorthand_of_one_namespace() -> None:
    config = KubernetesConfig.model_validate({"kinds": ["Pod"], "namespace": "team-a"})
    assert config.namespaces == ["team-a"] and config.namespace == "team-a"
    assert KubernetesConfig.model_validate({"namespace": None}).namespaces == []


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            {"namespaces": ["a"], "exclude_namespaces": ["b"]},
            "give namespaces or exclude_namespaces, not both",
        ),
        ({"namespace": "a", "namespaces": ["b"]}, "give namespace or namespaces, not both"),
        ({"namespaces": ["a"], "kinds": ["Pod", "Node"]}, "Node is cluster-scoped"),
        ({"namespaces": ["Team_A"]}, "'Team_A' is not a namespace name"),
        ({"exclude_namespaces": ["a", "a"]}, "a namespace is named twice"),
        (
            {
                "namespaces": ["a"],
                "custom": [{"kind": "example.com/v1/Fleet", "plural": "fleets", "namespaced": False}],
            },
            "Fleet is cluster-scoped",
        ),
    ],
)
def test_a_shard_that_cannot_be_is_refused_naming_why(section: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        KubernetesConfig.model_validate(section)
