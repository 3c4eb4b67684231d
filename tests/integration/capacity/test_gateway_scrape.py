"""The controller's scrape of a gateway's metrics, against a real HTTP server on loopback: a counter read into a
rate, a page that is not metrics, an error status and a server gone each retried and named, and a password in the
URL never in the log lines."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from capstan.capacity.live import GatewayDemand, follow_gateway
from capstan.logs import logging_to_file

pytestmark = pytest.mark.integration

SECRET = "Pl4ntedGatewayPassw0rd"


class Metrics:
    """A gateway's /metrics whose counter and answer the test sets."""

    def __init__(self) -> None:
        self.total = 0.0
        self.mode = "ok"
        self.auth: list[str] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.auth.append(request.headers.get("Authorization", ""))
        if self.mode == "500":
            return web.Response(status=500, text="engine said token=" + SECRET)
        if self.mode == "garbage":
            return web.Response(text="capstan_route_responses_total{status= 3\n")
        return web.Response(text=f'capstan_route_responses_total{{status="200"}} {self.total}\n')


@pytest.fixture
async def server() -> AsyncIterator[tuple[Metrics, int, web.AppRunner]]:
    metrics = Metrics()
    app = web.Application()
    app.router.add_get("/metrics", metrics.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield metrics, port, runner
    await runner.cleanup()


async def eventually(what: str, check: object, tries: int = 200) -> None:
    for _ in range(tries):  # bounded: 200 × 0.05 s
        if callable(check) and check():
            return
        await asyncio.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


async def test_the_scraper_reads_the_rate_names_each_failure_and_leaks_no_password(
    server: tuple[Metrics, int, web.AppRunner], tmp_path: Path
) -> None:
    metrics, port, runner = server
    demand = GatewayDemand("serve/llm", 1.0, window_s=1.0, refresh_s=0.05)
    errors: list[str] = []
    stop = asyncio.Event()
    log_file = tmp_path / "scrape.log"
    logging.getLogger("capstan").setLevel(logging.INFO)
    with logging_to_file(log_file):
        task = asyncio.create_task(
            follow_gateway(
                f"http://admin:{SECRET}@127.0.0.1:{port}/metrics",
                demand,
                stop,
                clock=time.monotonic,
                on_error=errors.append,
            )
        )
        try:
            started = time.monotonic()
            while time.monotonic() - started < 0.5:  # bounded: a steady rise of about 100 requests/s
                metrics.total += 5
                await asyncio.sleep(0.05)
            rate = demand.rate(time.monotonic())
            assert rate is not None and 40 < rate < 200, rate
            metrics.mode = "garbage"
            await eventually(
                "a page that is not metrics", lambda: any("not a Prometheus" in e for e in errors)
            )
            metrics.mode = "500"
            await eventually("an error status", lambda: any("HTTP 500" in e for e in errors))
            await runner.cleanup()  # the gateway goes away
            count = len(errors)
            await eventually("a refused connection", lambda: len(errors) > count and "HTTP" not in errors[-1])
            assert not task.done()  # every failure retried: the loop runs on
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
    assert all(a.startswith("Basic ") for a in metrics.auth)  # the URL's credentials were sent, not logged
    text = log_file.read_text()
    assert "gateway scrape failed" in text and "admin:[REDACTED]@" in text and SECRET not in text
    assert SECRET not in " ".join(errors)


def test_a_request_retried_on_another_endpoint_is_demand_once() -> None:
    """A real gateway (``capstan route``'s app on loopback) over two upstreams, one of which refuses every request
    it gets (503 before the first byte): each request sent there is retried on the other, so the gateway forwards
    more requests than its clients sent. The demand read from its real /metrics page is what the clients sent,
    the bad request among them left out."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from capstan.capacity.live import requests_total
    from capstan.config import load_model
    from capstan.route import RouteConfig, Router, upstream_for
    from tests.integration.route._servers import ServerThread, Upstream

    a, b = Upstream("a"), Upstream("b")
    with ServerThread(a.app) as ea, ServerThread(b.app) as eb:
        route = load_model(
            RouteConfig,
            {
                "endpoints": [
                    {"name": "a", "url": ea.url, "models": ["m"]},
                    {"name": "b", "url": eb.url, "models": ["m"]},
                ],
                "proxy": {"poll_interval_s": 0.05},
            },
            "test",
        )
        with ServerThread(Router(route, upstream=upstream_for(route.proxy)).app) as gateway:
            sent = 24
            for i in range(sent):
                body = {
                    "model": "m",
                    "messages": [{"role": "user", "content": f"request {i} " + "w " * (i * 9)}],
                }
                r = httpx.post(
                    f"{gateway.url}/v1/chat/completions",
                    json=body,
                    headers={"x-test-mode": "fail=a"},
                    timeout=10,
                )
                assert r.status_code == 200 and r.json()["served_by"] == "b"
            bad = httpx.post(f"{gateway.url}/v1/chat/completions", content=b"{not json", timeout=10)
            assert bad.status_code == 400
            page = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    forwarded = sum(
        s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == "capstan_route_requests_total"
    )
    assert a.requests, "no request went to the failing endpoint first: nothing was retried"
    assert forwarded == sent + len(a.requests) > sent
    assert requests_total(page) == sent
