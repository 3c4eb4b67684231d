"""The probe app: /readyz runs every check, bounded in time, and answers one line per check (redacted)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from capstan.probes import probe_app

pytestmark = pytest.mark.unit


async def ok() -> str | None:
    return None


async def hangs() -> str | None:
    await asyncio.sleep(60)
    return None


async def raises() -> str | None:
    raise RuntimeError("boom token=abc")


async def get(app: object, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://probe") as client:
        return await client.get(path)


async def test_every_check_passing_is_200_and_any_failing_is_503_with_its_reason() -> None:
    passing = await get(probe_app({"store": ok, "cluster": ok}), "/readyz")
    assert passing.status_code == 200
    assert passing.text == "[+]store ok\n[+]cluster ok\nreadyz check passed\n"
    app = probe_app(
        {"store": ok, "cluster": hangs, "watches": raises},
        redact=lambda text: text.replace("abc", "[REDACTED]"),
        timeout_s=0.1,
    )
    failing = await get(app, "/readyz")
    assert failing.status_code == 503
    assert failing.text.splitlines() == [
        "[+]store ok",
        "[-]cluster failed: no answer within 0.1 s",
        "[-]watches failed: RuntimeError: boom token=[REDACTED]",
        "readyz check failed",
    ]
    assert (await get(app, "/healthz")).text == "ok\n"
    assert (await get(app, "/metrics")).status_code == 404  # no registry, no metrics


async def test_metrics_are_the_registry_s() -> None:
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    Counter("capstan_probe_test", "a test counter", registry=registry).inc()
    answer = await get(probe_app({}, registry=registry), "/metrics")
    assert answer.status_code == 200 and "capstan_probe_test_total 1.0" in answer.text


async def test_a_check_replaced_while_serving_answers_from_the_next_request() -> None:
    """What capstan.startup relies on: its check while a component waits for its store, then the store's own."""

    async def waiting() -> str | None:
        return "not reached yet (starting)"

    checks = {"store": waiting}
    app = probe_app(checks)
    assert (await get(app, "/readyz")).text.startswith("[-]store failed: not reached yet (starting)\n")
    checks["store"] = ok
    assert (await get(app, "/readyz")).status_code == 200
