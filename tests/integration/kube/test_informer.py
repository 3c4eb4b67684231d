"""The informer against the real control plane: ordered changes, 410 after an etcd compaction, API server restarts.

In each scenario a consumer applies the deltas to its own view; at the end the view must equal a fresh list, and
per object the resourceVersions it saw must be strictly increasing (nothing twice, nothing out of order). Where the
watch never had to relist, every version the test wrote must have been seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import defaultdict
from typing import Any

import pytest

from capstan.kube import Delta, Informer, KubeClient, object_key, resources
from capstan.sandbox import Sandbox

pytestmark = pytest.mark.integration

CM = resources.CONFIGMAPS


class Consumer:
    """Applies deltas to a view and records what it saw per object."""

    def __init__(self) -> None:
        self.view: dict[str, dict[str, Any]] = {}
        self.seen: dict[str, list[int]] = defaultdict(list)
        self.vias: dict[str, int] = defaultdict(int)
        self.synced = asyncio.Event()

    def apply(self, delta: Delta) -> None:
        self.vias[delta.via] += 1
        if delta.type == "synced":
            self.synced.set()
            return
        assert delta.obj is not None
        key = object_key(delta.obj)
        if delta.type == "deleted":
            self.view.pop(key, None)
        else:
            self.view[key] = delta.obj
            self.seen[key].append(int(delta.obj["metadata"]["resourceVersion"]))


async def run_informer(informer: Informer, consumer: Consumer) -> None:
    async for delta in informer.deltas():
        consumer.apply(delta)


def versions(items: list[dict[str, Any]]) -> dict[str, str]:
    return {object_key(o): o["metadata"]["resourceVersion"] for o in items}


async def converge(kube: KubeClient, namespace: str, consumer: Consumer, deadline_s: float = 60.0) -> None:
    """Wait until the consumer's view equals a fresh list (bounded)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while True:
        items, _ = await kube.list(CM, namespace=namespace)
        want = versions(items)
        have = {k: v["metadata"]["resourceVersion"] for k, v in consumer.view.items()}
        if want == have:
            return
        if loop.time() > end:
            missing = set(want) ^ set(have)
            pytest.fail(
                f"view did not converge: {len(want)} listed, {len(have)} in view, differing keys {missing}"
            )
        await asyncio.sleep(0.1)


def assert_monotonic(consumer: Consumer) -> None:
    for key, rvs in consumer.seen.items():
        assert rvs == sorted(set(rvs)), f"{key}: versions seen out of order or twice: {rvs}"


def cm(name: str, namespace: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"v": value},
    }


async def burst(
    kube: KubeClient, namespace: str, n_objects: int, n_updates: int, seed: int, prefix: str = "cm"
) -> dict[str, list[int]]:
    """Create, update and delete ConfigMaps concurrently; returns every resourceVersion written per live object."""
    rng = random.Random(seed)
    written: dict[str, list[int]] = defaultdict(list)
    sem = asyncio.Semaphore(16)

    async def one(i: int) -> None:
        name = f"{prefix}-{i}"
        key = f"{namespace}/{name}"
        async with sem:
            obj = await kube.create(CM, cm(name, namespace, "0"))
            written[key].append(int(obj["metadata"]["resourceVersion"]))
            for u in range(n_updates):
                obj = await kube.patch(CM, name, {"data": {"v": str(u + 1)}}, namespace=namespace)
                written[key].append(int(obj["metadata"]["resourceVersion"]))
            if rng.random() < 0.25:
                await kube.delete(CM, name, namespace)
                written.pop(key)

    await asyncio.gather(*(one(i) for i in range(n_objects)))
    return written


async def test_ordered_create_update_delete(kube: KubeClient, namespace: str) -> None:
    consumer = Consumer()
    informer = Informer(kube, CM, namespace=namespace)
    task = asyncio.create_task(run_informer(informer, consumer))
    try:
        await asyncio.wait_for(consumer.synced.wait(), 30)
        written = await burst(kube, namespace, n_objects=40, n_updates=5, seed=1)
        await converge(kube, namespace, consumer)
    finally:
        informer.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert informer.stats.relists == 0
    assert_monotonic(consumer)
    for key, rvs in written.items():
        assert consumer.seen[key] == rvs, f"{key}: wrote {rvs}, saw {consumer.seen[key]}"
    # Deleted objects are gone from the view, and every live one is present.
    assert set(consumer.view) >= set(written)


async def test_relist_after_compaction_hands_over_the_difference(
    kube: KubeClient, namespace: str, sandbox: Sandbox
) -> None:
    """A consumer away while objects changed and history was compacted resumes via 410 → relist → diff."""
    first = Consumer()
    informer = Informer(kube, CM, namespace=namespace)
    task = asyncio.create_task(run_informer(informer, first))
    await burst(kube, namespace, n_objects=30, n_updates=1, seed=2)
    await converge(kube, namespace, first)
    informer.stop()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    stored_view, stored_rv = dict(first.view), informer.resource_version

    # While away: edits, deletions and creations; then compaction makes the stored version unusable.
    for i in range(0, 30, 3):
        await kube.delete(CM, f"cm-{i}", namespace)
    for i in range(1, 30, 3):
        with contextlib.suppress(Exception):
            await kube.patch(CM, f"cm-{i}", {"data": {"v": "edited-while-away"}}, namespace=namespace)
    for i in range(100, 110):
        await kube.create(CM, cm(f"cm-{i}", namespace, "new"))
    # The API server's watch cache would still serve the old version; a restart drops it, and the compaction
    # means etcd cannot either: the resumed watch must get 410 Gone.
    sandbox.compact_etcd()
    await asyncio.to_thread(sandbox.restart_component, "kube-apiserver")

    second = Consumer()
    second.view = dict(stored_view)
    resumed = Informer(kube, CM, namespace=namespace, known=stored_view, resource_version=stored_rv)
    task = asyncio.create_task(run_informer(resumed, second))
    try:
        await converge(kube, namespace, second)
    finally:
        resumed.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert resumed.stats.relists == 1, resumed.stats
    assert second.vias["relist"] > 0
    edited_keys = [f"{namespace}/cm-{i}" for i in range(1, 30, 3) if f"{namespace}/cm-{i}" in stored_view]
    assert edited_keys
    for key in edited_keys:
        assert second.view[key]["data"]["v"] == "edited-while-away"
    assert not any(f"{namespace}/cm-{i}" in second.view for i in range(0, 30, 3))
    assert f"{namespace}/cm-105" in second.view


async def test_compaction_and_apiserver_restart_during_a_burst(
    kube: KubeClient, namespace: str, sandbox: Sandbox
) -> None:
    """410 forced mid-burst: compaction, then the API server restarts, so the re-watch is from a compacted version."""
    consumer = Consumer()
    informer = Informer(kube, CM, namespace=namespace)
    task = asyncio.create_task(run_informer(informer, consumer))
    try:
        await asyncio.wait_for(consumer.synced.wait(), 30)
        writer = asyncio.create_task(burst(kube, namespace, n_objects=60, n_updates=3, seed=3))
        await asyncio.sleep(0.5)
        sandbox.compact_etcd()
        await asyncio.to_thread(sandbox.restart_component, "kube-apiserver")
        # The writer's calls during the restart may fail; the test checks convergence with whatever landed.
        with contextlib.suppress(Exception):
            await writer
        await burst(
            kube, namespace, n_objects=10, n_updates=2, seed=4, prefix="late"
        )  # writes after the restart
        await converge(kube, namespace, consumer, deadline_s=90)
    finally:
        informer.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert informer.stats.watch_errors >= 1
    assert_monotonic(consumer)


async def test_apiserver_restart_mid_watch_loses_no_change(
    kube: KubeClient, namespace: str, sandbox: Sandbox
) -> None:
    consumer = Consumer()
    informer = Informer(kube, CM, namespace=namespace)
    task = asyncio.create_task(run_informer(informer, consumer))
    try:
        await asyncio.wait_for(consumer.synced.wait(), 30)
        before = await burst(kube, namespace, n_objects=20, n_updates=2, seed=5)
        await converge(kube, namespace, consumer)
        await asyncio.to_thread(sandbox.restart_component, "kube-apiserver")
        after = await burst(kube, namespace, n_objects=20, n_updates=2, seed=6, prefix="after")
        await converge(kube, namespace, consumer, deadline_s=90)
    finally:
        informer.stop()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert informer.stats.watch_errors >= 1, "the restart must have broken the watch"
    assert_monotonic(consumer)
    if informer.stats.relists == 0:
        for key, rvs in after.items():
            assert consumer.seen[key][-len(rvs) :] == rvs
    assert before or after
