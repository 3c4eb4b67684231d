"""Test-suite wiring: shared fixtures live in tests/fixtures/ and are loaded here as pytest plugins."""

from __future__ import annotations

import importlib.util

_FIXTURE_MODULES = [
    "tests.fixtures.sandbox",
    "tests.fixtures.datastores",
]

pytest_plugins = [name for name in _FIXTURE_MODULES if importlib.util.find_spec(name) is not None]


def pytest_configure() -> None:
    """The suite talks to the clusters it starts, never to one it happens to run in: when CI runs in a pod, the
    API server's service variables would make `capstan` commands without a kubeconfig reach for that cluster
    (capstan.kube.in_a_pod). Tests of the in-cluster path set them for the process they start."""
    import os

    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        os.environ.pop(name, None)
