"""The Kubernetes recorder over its client seam: the scripted API server (``tests/unit/kube/fakeapi``) through the
``connect`` factory, into a real SQLite store. What a relist records (the difference, marked ``relist``, and the gap
it cannot fill) and how a restart resumes from the stored cursor, without a cluster; the same against the real
control plane is tests/integration/record/test_kube_recorder.py.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from capstan.errors import UserError
from capstan.kube import KubeClient, resources
from capstan.record import KubeCollector, KubernetesConfig, Recorder, RecorderConfig
from capstan.record._diffpool import DiffPoolError
from capstan.store import Store, open_store
from tests.unit.kube.fakeapi import FakeApiServer, Watch

pytestmark = pytest.mark.unit

NS = "app"
KEY = f"/v1/ConfigMap@ns={NS}"  # the cursor of the one namespace it records


async def record_until_the_script_ends(
    fake: FakeApiServer, store: Store, *, diff_workers: int = 0, max_batch: int = 2000
) -> FakeApiServer:
    """Run one collector until the fake has no answer left (its AssertionError ends ``run``, which writes what it
    observed first); ``diff_workers`` processes run the diff builder (0: the collector's own)."""
    config = KubernetesConfig(
        kinds=["ConfigMap"],
        events=False,
        namespaces=[NS],
        flush_interval_s=0.01,
        diff_workers=diff_workers,
        max_batch=max_batch,
    )
    collector = KubeCollector(
        config,
        store.history,
        connect=fake.connect,
        source="test",
        clock=lambda: 1_000.0,
    )
    async with asyncio.timeout(30):  # a guard against a hang, never a measurement
        with pytest.raises(AssertionError, match="unscripted watch"):
            await collector.run(asyncio.Event())
    return fake


@pytest.mark.parametrize("diff_workers", [0, 2])
async def test_a_relist_records_the_difference_and_the_gap_it_cannot_fill(
    tmp_path: Path, diff_workers: int
) -> None:
    fake = FakeApiServer(resources.CONFIGMAPS, namespace=NS)
    fake.put("a", {"v": "1"})  # 101
    fake.put("b", {"v": "1"})  # 102

    def events() -> list[dict[str, object]]:
        change = fake.put("a", {"v": "2"})  # 103, seen
        fake.remove("b")  # 104 and 105: lost with the stream, found by the relist
        fake.put("c", {"v": "1"})
        return [change, fake.expired()]

    fake.script(Watch(events))
    store = open_store(str(tmp_path / "history.db"))
    try:
        await record_until_the_script_ends(fake, store, diff_workers=diff_workers)
        rows = [(r.name, r.change_type, r.observed_via) for r in store.history.timeline(source="test")]
        assert rows == [  # the first list is stored as observed by a (re)list too
            ("a", "added", "relist"),
            ("b", "added", "relist"),
            ("a", "modified", "watch"),
            ("c", "added", "relist"),
            ("b", "deleted", "relist"),
        ]
        (gap,) = store.history.gaps(source="test")
        assert gap.log == "kubernetes" and "410 Gone" in gap.reason
        assert (gap.detail["from_resource_version"], gap.detail["to_resource_version"]) == ("103", "105")
        cursor = store.history.kind_cursor("test", KEY)
        assert cursor is not None and cursor.resource_version == "105"
    finally:
        store.close()


@pytest.mark.parametrize("diff_workers", [0, 2])
async def test_a_restart_resumes_the_watch_from_the_stored_cursor_without_a_list(
    tmp_path: Path, diff_workers: int
) -> None:
    fake = FakeApiServer(resources.CONFIGMAPS, namespace=NS)
    fake.put("a", {"v": "1"})  # 101
    fake.script(Watch(lambda: [fake.put("a", {"v": "2"})]))  # 102
    store = open_store(str(tmp_path / "history.db"))
    try:
        await record_until_the_script_ends(fake, store, diff_workers=diff_workers)
        fake.requests.clear()
        fake.put("a", {"v": "3"})  # 103, while the recorder was down: the resumed watch delivers it
        missed = {"type": "MODIFIED", "object": dict(fake.objects[f"{NS}/a"])}
        fake.script(Watch([missed]))
        await record_until_the_script_ends(fake, store, diff_workers=diff_workers)
        assert fake.verbs() == ["watch@102", "watch@103"]  # resumed, never relisted
        versions = [(r.resource_version, r.observed_via) for r in store.history.timeline(source="test")]
        assert versions == [("101", "relist"), ("102", "watch"), ("103", "watch")]
        assert store.history.gaps(source="test") == []
    finally:
        store.close()


def burst(fake: FakeApiServer, seed: int) -> list[dict[str, object]]:
    """600 watch events over 40 ConfigMaps: edits, deletions and re-creations under a new uid, in a seeded order."""
    rng = random.Random(seed)
    events: list[dict[str, object]] = []
    for i in range(600):
        name = f"cm-{rng.randrange(40)}"
        if f"{NS}/{name}" in fake.objects and rng.random() < 0.1:
            events.append(fake.remove(name))
        else:
            events.append(fake.put(name, {"v": str(i), "padding": "x" * rng.randrange(50)}))
    return events


@pytest.mark.parametrize("diff_workers", [1, 3])
async def test_diff_workers_store_exactly_what_the_collector_alone_stores(
    tmp_path: Path, diff_workers: int
) -> None:
    """The same burst recorded with the diff builder in the collector and in worker processes: the same rows in
    the same order per object, the same last states and the same cursor; small batches (max_batch 50) so that
    many commits happen while changes are in flight."""
    stored = []
    for workers in (0, diff_workers):
        fake = FakeApiServer(resources.CONFIGMAPS, namespace=NS, max_requests=10)
        fake.put("cm-0", {"v": "listed"})
        fake.script(Watch(lambda fake=fake: burst(fake, seed=5)))  # type: ignore[misc]
        store = open_store(str(tmp_path / f"history-{workers}.db"))
        try:
            await record_until_the_script_ends(fake, store, diff_workers=workers, max_batch=50)
            rows = [
                (r.uid, r.version_seq, r.resource_version, r.change_type, r.observed_via, r.patch, r.snapshot)
                for r in store.history.timeline(source="test", limit=10_000)
            ]
            per_object = sorted(rows, key=lambda r: (r[0], r[1]))
            states = {
                uid: (st.version_seq, st.object) for uid, st in store.history.object_states("test").items()
            }
            cursor = store.history.kind_cursor("test", KEY)
            stored.append((per_object, states, cursor.resource_version if cursor else None, len(rows)))
        finally:
            store.close()
    assert stored[0][3] > 500
    assert stored[0] == stored[1]


async def test_a_failing_diff_worker_stops_the_collector(tmp_path: Path) -> None:
    """A change the diff builder refuses (no uid) fails the collector, with the worker's error, as it does
    without workers; what came before it is stored."""
    fake = FakeApiServer(resources.CONFIGMAPS, namespace=NS)
    good = fake.put("a", {"v": "1"})
    bad = {
        "type": "ADDED",
        "object": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": NS, "resourceVersion": "999"},
        },
    }
    fake.script(Watch([good, bad], end="hold"))
    store = open_store(str(tmp_path / "history.db"))
    collector = KubeCollector(
        KubernetesConfig(
            kinds=["ConfigMap"], events=False, namespaces=[NS], flush_interval_s=0.01, diff_workers=2
        ),
        store.history,
        connect=fake.connect,
        source="test",
        clock=lambda: 1_000.0,
    )
    try:
        async with asyncio.timeout(30):  # a guard against a hang, never a measurement
            with pytest.raises(DiffPoolError, match=r"without metadata\.uid"):
                await collector.run(asyncio.Event())
        assert [r.resource_version for r in store.history.timeline(source="test")] == ["101"]
        assert collector.diff_worker_pids() == []  # the workers were ended
    finally:
        store.close()


def test_a_recorder_of_a_cluster_needs_its_client_factory(tmp_path: Path) -> None:
    config = RecorderConfig(
        store=str(tmp_path / "history.db"), kubernetes=KubernetesConfig(kinds=["ConfigMap"])
    )
    with pytest.raises(ValueError, match="give kube_connect"):
        Recorder(config)
    assert not (tmp_path / "history.db").exists()  # checked before anything was opened


async def test_a_client_that_cannot_be_opened_stops_the_recorder_instead_of_a_crash_loop(
    tmp_path: Path,
) -> None:
    async def cannot_work() -> KubeClient:
        raise UserError("kubeconfig /nowhere: file not found")

    config = RecorderConfig(
        store=str(tmp_path / "history.db"), kubernetes=KubernetesConfig(kinds=["ConfigMap"])
    )
    recorder = Recorder(config, kube_connect=cannot_work)
    try:
        async with asyncio.timeout(30):  # a guard against a hang, never a measurement
            with pytest.raises(UserError, match="kubeconfig /nowhere"):
                await recorder.run(asyncio.Event())
        assert recorder.runner.crashes == {}
    finally:
        recorder.close()


async def test_a_store_that_fails_at_start_leaves_no_client_open(tmp_path: Path) -> None:
    """The collector reads its stored states before it connects: a failing read opens no client to leak."""
    fake = FakeApiServer(resources.CONFIGMAPS, namespace=NS)
    opened: list[KubeClient] = []

    async def connect() -> KubeClient:
        opened.append(await fake.connect())
        return opened[-1]

    store = open_store(str(tmp_path / "history.db"))
    try:

        def broken(source: str, kind: str | None = None) -> dict[str, object]:
            raise OSError("disk I/O error")

        store.history.object_states = broken  # type: ignore[method-assign,assignment]
        collector = KubeCollector(
            KubernetesConfig(kinds=["ConfigMap"], events=False, namespaces=[NS]),
            store.history,
            connect=connect,
            source="test",
        )
        with pytest.raises(OSError, match="disk I/O error"):
            await collector.run(asyncio.Event())
        assert opened == [] and fake.requests == []
    finally:
        store.close()
