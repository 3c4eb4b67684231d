"""The recorder's runner restarts a collector that crashes, but not one that reports a configuration error."""

from __future__ import annotations

import asyncio

import pytest

from capstan.errors import UserError
from capstan.record import RecorderRunner

pytestmark = pytest.mark.unit


class _Collector:
    def __init__(self, name: str, error: Exception | None) -> None:
        self.name = name
        self.error = error
        self.starts = 0

    async def run(self, stop: asyncio.Event) -> None:
        self.starts += 1
        if self.error is not None:
            raise self.error
        await stop.wait()


async def test_a_configuration_error_stops_the_runner_instead_of_a_crash_loop() -> None:
    runner = RecorderRunner(max_restart_backoff_s=0.01)
    bad = _Collector("kubernetes/default", UserError("kubeconfig /x: file not found"))
    good = _Collector("redis/cache", None)
    runner.add(bad)
    runner.add(good)
    stop = asyncio.Event()
    with pytest.raises(UserError, match="kubeconfig /x: file not found"):
        await asyncio.wait_for(runner.run(stop), 30)
    assert bad.starts == 1 and runner.crashes == {} and stop.is_set()


async def test_a_crash_is_still_restarted() -> None:
    runner = RecorderRunner(max_restart_backoff_s=0.01)
    flaky = _Collector("redis/flaky", RuntimeError("bug"))
    runner.add(flaky)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    for _ in range(1000):
        if flaky.starts >= 3:
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 30)
    assert flaky.starts >= 3 and runner.crashes["redis/flaky"] >= 3
