"""Test-suite wiring: shared fixtures live in tests/fixtures/ and are loaded here as pytest plugins."""

from __future__ import annotations

import importlib.util

_FIXTURE_MODULES = [
    "tests.fixtures.sandbox",
    "tests.fixtures.datastores",
]

pytest_plugins = [name for name in _FIXTURE_MODULES if importlib.util.find_spec(name) is not None]
