"""The Kubernetes recorder against the real control plane, on both store back ends (in-process)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from pathlib import Path
from typing import Any

import pytest

from capstan.faults import Kubelet
from capstan.kube import KubeClient, resources
from capstan.record import KubeCollector, KubernetesConfig
from capstan.sandbox import Sandbox
from capstan.store import Store, open_store

pytestmark = pytest.mark.integration


async def wait_for(predicate: Any, what: str, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await asyncio.to_thread(predicate):
        if loop.time() > end:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def recording(
    store: Store, kubeconfig: Path, namespace: str, kinds: list[str], max_batch: int = 2000
) -> Any:
    collector = KubeCollector(
        KubernetesConfig(kinds=kinds, namespaces=[namespace], flush_interval_s=0.05, max_batch=max_batch), store.history, source="test",
        connect=functools.partial(KubeClient.from_kubeconfig, kubeconfig),
    )  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(collector.run(stop))
    try:
        yield collector
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 30)


def cm(name: str, namespace: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"v": value},
    }


async def test_every_version_events_and_no_secret_value(
    kube: KubeClient, namespace: str, kubeconfig: Path, sandbox: Sandbox, history_store_url: str
) -> None:
    store = open_store(history_store_url)
    secret_value = f"s3cr3t-{time.time_ns()}"
    try:
        async with recording(store, kubeconfig, namespace, ["ConfigMap", "Secret", "Pod"]) as collector:
            await wait_for(
                lambda: all(e.is_set() for e in collector.synced.values()) and len(collector.synced) >= 3,
                "sync",
            )
            rvs = []
            obj = await kube.create(resources.CONFIGMAPS, cm("app-config", namespace, "0"))
            rvs.append(obj["metadata"]["resourceVersion"])
            for i in range(1, 6):
                obj = await kube.patch(
                    resources.CONFIGMAPS, "app-config", {"data": {"v": str(i)}}, namespace=namespace
                )
                rvs.append(obj["metadata"]["resourceVersion"])
            await kube.create(
                resources.SECRETS,
                {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": namespace},
                 "stringData": {"password": secret_value}},
            )  # fmt: skip
            pod = await kube.create(
                resources.PODS,
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace},
                 "spec": {"containers": [{"name": "c", "image": "example.com/c:1"}]}},
            )  # fmt: skip
            kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
            for _ in range(3):
                await kubelet.event(pod, "BackOff", "Back-off restarting failed container c", type_="Warning")
            await kube.delete(resources.CONFIGMAPS, "app-config", namespace)

            def done() -> bool:
                changes = store.history.timeline(
                    source="test", kind="ConfigMap", namespace=namespace, name="app-config"
                )
                events = store.history.events(involved_uid=pod["metadata"]["uid"])
                return (
                    any(c.change_type == "deleted" for c in changes)
                    and sum(e.reason == "BackOff" for e in events) >= 3
                )

            await wait_for(done, "the recorder to catch up")

        changes = store.history.timeline(
            source="test", kind="ConfigMap", namespace=namespace, name="app-config"
        )
        assert [c.resource_version for c in changes if c.change_type != "deleted"] == rvs
        assert [c.change_type for c in changes] == ["added"] + ["modified"] * 5 + ["deleted"]
        assert all(c.observed_via == "watch" for c in changes)
        # Any recorded version can be rebuilt.
        third = store.history.version("test", changes[2].uid, changes[2].version_seq)
        assert third.object["data"] == {"v": "2"}
        # Every occurrence of the Event is kept: count 1, 2, 3.
        backoff = [
            e for e in store.history.events(involved_uid=pod["metadata"]["uid"]) if e.reason == "BackOff"
        ]
        assert sorted(e.count for e in backoff) == [1, 2, 3]
        # The Secret is recorded (metadata, hash) but its value appears nowhere in the store.
        assert store.history.timeline(source="test", kind="Secret", namespace=namespace, name="creds")
        assert not any(secret_value in text for text in store.database.dump_all_text())
    finally:
        store.close()


async def test_restart_resumes_and_records_what_changed_while_away(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path
) -> None:
    store = open_store(str(tmp_path / "history.db"))
    try:
        async with recording(store, kubeconfig, namespace, ["ConfigMap"]) as collector:
            await wait_for(
                lambda: bool(collector.synced) and all(e.is_set() for e in collector.synced.values()), "sync"
            )
            for i in range(5):
                await kube.create(resources.CONFIGMAPS, cm(f"c{i}", namespace, "0"))
            await wait_for(
                lambda: len(store.history.timeline(source="test", namespace=namespace)) >= 5, "first records"
            )
        # Away: an edit, a deletion, a creation.
        edited = await kube.patch(
            resources.CONFIGMAPS, "c1", {"data": {"v": "while-away"}}, namespace=namespace
        )
        await kube.delete(resources.CONFIGMAPS, "c2", namespace)
        await kube.create(resources.CONFIGMAPS, cm("c9", namespace, "new"))
        # max_batch=2: the relist after the restart is written in chunks, its cursor with the last one.
        async with recording(store, kubeconfig, namespace, ["ConfigMap"], max_batch=2):

            def caught_up() -> bool:
                rows = store.history.timeline(source="test", namespace=namespace)
                return {("c1", "modified"), ("c2", "deleted"), ("c9", "added")} <= {
                    (r.name, r.change_type) for r in rows
                }

            await wait_for(caught_up, "changes made while away")
        rows = store.history.timeline(source="test", namespace=namespace)
        keys = [(r.uid, r.resource_version, r.change_type) for r in rows]
        assert len(keys) == len(set(keys)), "a change was recorded twice"
        c1 = [r for r in rows if r.name == "c1"]
        assert c1[-1].resource_version == edited["metadata"]["resourceVersion"]
    finally:
        store.close()
