"""Fuzzing the history HTTP API from its own OpenAPI description (schemathesis) on a real loopback server over a
store with data, authenticated with a bearer token: inputs that fit the description and inputs that do not
(negative mode: wrong types, patterns, lengths, ranges) must never get a 5xx, and every answer must match the
description (status code, content type, body schema). Cases it found are kept as plain tests in
test_history_api.py (``BAD``) and tests/unit/store/test_history_api_parsing.py.

Left out on purpose: ``positive_data_acceptance``, which expects a 2xx for any value that fits the schema. Some
values cannot be described by a pattern: a time outside the years 0001-9999 or a date like 2026-02-30 fits the
time pattern, and a random string of cursor characters fits the cursor pattern without being a cursor this API
issued; those are 400s by design, and documented as such.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from prometheus_client import CollectorRegistry
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from capstan.record import ObjectHistory
from capstan.store import (
    Batch,
    EngineEntry,
    Gap,
    HistoryMetrics,
    KubeEvent,
    Restart,
    create_history_app,
    open_store,
)
from tests.integration.store._loopback import serve

pytestmark = pytest.mark.integration

TOKEN = "fuzz-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _deploy(rv: int, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "api", "namespace": "ml", "uid": "d1", "resourceVersion": str(rv)},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
    }


@pytest.fixture(scope="module")
def api_base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    registry = CollectorRegistry()
    path: Path = tmp_path_factory.mktemp("fuzz") / "h.db"
    store = open_store(str(path), metrics=HistoryMetrics(registry))
    history = ObjectHistory("c1")
    for rv in range(1, 30):
        store.history.write(
            history.observe(
                "ADDED" if rv == 1 else "MODIFIED", _deploy(rv, f"api:{rv}"), observed_at=1e9 + rv
            )
        )
    store.history.write(
        Batch(
            kube_events=[
                KubeEvent(
                    "c1",
                    f"e{i}",
                    str(i),
                    1e9 + i,
                    None,
                    "ml",
                    f"ev{i}",
                    "BackOff",
                    "Warning",
                    "back-off",
                    i,
                    "d1",
                    "Pod",
                    "ml",
                    "api-0",
                    {"reason": "BackOff"},
                )
                for i in range(20)
            ],
            engine_entries=[
                EngineEntry("cache", "slowlog", "r", str(i), 1e9 + i, 1e9 + i, {"args": ["GET", f"k{i}"]})
                for i in range(20)
            ],
            gaps=[
                Gap("cache", "slowlog", f"r:{i}", 1e9 + i, i or None, "ring overwrote entries")
                for i in range(5)
            ],
            restarts=[
                Restart("p1", "ml", "api-0", "c", "container", i, 1e9 + i, "OOMKilled", 137, {"state": "x"})
                for i in range(1, 6)
            ],
        )
    )
    with serve(create_history_app(store.history, registry=registry, token=TOKEN)) as base:
        yield base
    store.close()


MAX_EXAMPLES = 40  # per operation and generation mode


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_gets_a_5xx_and_every_answer_matches_the_description(
    api_base: str, mode: GenerationMode
) -> None:
    # NOTE: the operations are driven one by one from the loaded description rather than through schemathesis'
    # pytest integration, whose lazy fixture loader reads a pytest-private attribute that pytest 9.2 removed.
    schema = schemathesis.openapi.from_url(f"{api_base}/openapi.json", headers=AUTH)

    @schema.auth()
    class Bearer:  # the real token on every case, but where negative mode breaks the Authorization header
        def get(self, case: Any, context: Any) -> str:
            return TOKEN

        def set(self, case: Any, data: str, context: Any) -> None:
            case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}

    operations: list[Any] = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    described = httpx.get(f"{api_base}/openapi.json", headers=AUTH, timeout=30).json()["paths"]
    # schemathesis leaves out the description's own route
    assert sorted(op.path for op in operations) == sorted(set(described) - {"/openapi.json"})
    statuses: Counter[int] = Counter()
    for operation in operations:
        if mode is GenerationMode.NEGATIVE and not operation.query:
            continue  # nothing to break in a request without parameters

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        def fuzz(case: Any) -> None:
            response = case.call_and_validate(base_url=api_base, excluded_checks=[positive_data_acceptance])
            statuses[response.status_code] += 1

        fuzz()
    # the token was sent (a 401 only where negative mode broke it), and both accepted and refused requests came
    if mode is GenerationMode.POSITIVE:
        assert set(statuses) <= {200, 400} and statuses[200] > 0 and statuses[400] > 0, statuses
    else:
        # (a 200 only where the broken value reads as a valid one on the wire: negative_data_rejection judges it)
        assert set(statuses) <= {200, 400, 401} and statuses[400] > 0, statuses
