"""How a kind typed on the command line (``capstan diagnose deploy/web``) resolves to a resource."""

from __future__ import annotations

import pytest

from capstan.kube import resources
from capstan.kube.resources import lookup_kind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Deployment", resources.DEPLOYMENTS),
        ("deployment", resources.DEPLOYMENTS),
        ("deployments", resources.DEPLOYMENTS),
        ("deployments.apps", resources.DEPLOYMENTS),
        ("deploy", resources.DEPLOYMENTS),
        ("po", resources.PODS),
        ("Node", resources.NODES),
        ("hpa", resources.HPAS),
        ("sc", resources.STORAGE_CLASSES),
        ("httproutes", resources.HTTP_ROUTES),
        ("event", resources.EVENTS),
    ],
)
def test_kind_names_resolve_as_kubectl_takes_them(text: str, expected: resources.Resource) -> None:
    assert lookup_kind(text) == expected


def test_an_unknown_kind_is_none() -> None:
    assert lookup_kind("deploymentz") is None
