"""`capstan record` killed with SIGKILL in the middle of a burst of 5,000 object changes, then restarted.

Every change the API server made is then in the store exactly once: those made while the recorder was down come
from resuming the watch at the stored cursor (exact history), and when that history is gone (compaction + API
server restart while it is down) the difference arrives as ``relist`` records.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from capstan.kube import KubeClient, resources
from capstan.sandbox import Sandbox
from capstan.store import open_store
from tests.integration.record._process import start_record

pytestmark = pytest.mark.integration

CM = resources.CONFIGMAPS


def start_recorder(
    tmp_path: Path, kubeconfig: Path, namespace: str, db: str, *, diff_workers: int = 0
) -> subprocess.Popen[bytes]:
    cfg = {
        "store": db,
        "source": "crash",
        "kubernetes": {
            "kinds": ["ConfigMap"],
            "events": False,
            "namespace": namespace,
            "flush_interval_s": 0.1,
            "diff_workers": diff_workers,
        },
    }
    return start_record(cfg, tmp_path / "record.yaml", kubeconfig)


async def wait_cursor(db: str, namespace: str, timeout: float = 120) -> None:
    store = open_store(db)
    try:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while store.history.kind_cursor("crash", f"/v1/ConfigMap@ns={namespace}") is None:
            if loop.time() > end:
                pytest.fail("the recorder never stored a cursor")
            await asyncio.sleep(0.2)
    finally:
        store.close()


async def burst(
    kube: KubeClient, namespace: str, changes: int, written: dict[str, list[tuple[str, str]]], seed: int
) -> None:
    """``changes`` writes over 250 ConfigMaps (create, updates, some deletes); records (uid, rv, type) written."""
    rng = random.Random(seed)
    per_object = changes // 250
    sem = asyncio.Semaphore(24)

    async def one(i: int) -> None:
        name = f"cm-{seed}-{i}"
        async with sem:
            obj = await kube.create(
                CM,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace},
                    "data": {"v": "0"},
                },
            )
            uid = obj["metadata"]["uid"]
            written[uid].append((obj["metadata"]["resourceVersion"], "added"))
            for u in range(per_object - 2):
                obj = await kube.patch(CM, name, {"data": {"v": str(u + 1)}}, namespace=namespace)
                written[uid].append((obj["metadata"]["resourceVersion"], "modified"))
            if rng.random() < 0.3:
                await kube.delete(CM, name, namespace)
                written[uid].append(("", "deleted"))
            else:
                obj = await kube.patch(CM, name, {"data": {"v": "last"}}, namespace=namespace)
                written[uid].append((obj["metadata"]["resourceVersion"], "modified"))

    await asyncio.gather(*(one(i) for i in range(250)))


async def converge(db: str, kube: KubeClient, namespace: str, timeout: float = 180) -> None:
    """Until the store's live objects equal a fresh list."""
    store = open_store(db)
    try:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while True:
            items, _ = await kube.list(CM, namespace=namespace)
            want = {
                o["metadata"]["uid"]: o["metadata"]["resourceVersion"]
                for o in items
                if o["metadata"]["name"].startswith("cm-")
            }
            have = {
                uid: st.resource_version
                for uid, st in store.history.object_states("crash", "ConfigMap").items()
                if st.namespace == namespace and st.name.startswith("cm-")
            }
            if want == have:
                return
            if loop.time() > end:
                pytest.fail(f"store did not converge: {len(want)} live, {len(have)} stored")
            await asyncio.sleep(0.5)
    finally:
        store.close()


def relist_gaps(db: str) -> list[Any]:
    store = open_store(db)
    try:
        return [
            g
            for g in store.history.gaps(source="crash")
            if g.log == "kubernetes" and g.detail["kind"] == "/v1/ConfigMap"
        ]
    finally:
        store.close()


def records(db: str, namespace: str) -> list[Any]:
    store = open_store(db)
    try:
        return [
            c
            for c in store.history.timeline(source="crash", namespace=namespace, limit=1_000_000)
            if c.name.startswith("cm-")
        ]
    finally:
        store.close()


@pytest.mark.parametrize("diff_workers", [0, 2])
async def test_kill_9_mid_burst_then_resume_keeps_every_change_exactly_once(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path, diff_workers: int
) -> None:
    """With the diff builder in the recorder and in 2 diff workers (which exit when the recorder is killed)."""
    db = str(tmp_path / "history.db")
    written: dict[str, list[tuple[str, str]]] = defaultdict(list)
    proc = start_recorder(tmp_path, kubeconfig, namespace, db, diff_workers=diff_workers)
    try:
        await wait_cursor(db, namespace)
        task = asyncio.create_task(burst(kube, namespace, 5000, written, seed=1))
        while sum(len(v) for v in written.values()) < 2000:  # kill it mid-burst
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        await task  # the rest of the burst happens while the recorder is down
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sum(len(v) for v in written.values()) == 5000
    proc = start_recorder(tmp_path, kubeconfig, namespace, db, diff_workers=diff_workers)
    try:
        await converge(db, kube, namespace)
        await asyncio.sleep(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    rows = records(db, namespace)
    stored = defaultdict(list)
    for r in rows:
        stored[r.uid].append((r.resource_version if r.change_type != "deleted" else "", r.change_type))
    keys = [(r.uid, r.resource_version, r.change_type) for r in rows]
    assert len(keys) == len(set(keys)), "a change was stored twice"
    missing = {uid: [w for w in ws if w not in stored[uid]] for uid, ws in written.items()}
    missing = {uid: ws for uid, ws in missing.items() if ws}
    assert not missing, (
        f"{sum(map(len, missing.values()))} changes missing, e.g. {next(iter(missing.items()))}"
    )
    assert len(rows) == 5000


async def test_changes_while_down_after_compaction_arrive_as_relist_records(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    db = str(tmp_path / "history.db")
    proc = start_recorder(tmp_path, kubeconfig, namespace, db)
    written: dict[str, list[tuple[str, str]]] = defaultdict(list)
    try:
        await wait_cursor(db, namespace)
        await burst(kube, namespace, 500, written, seed=2)
        await converge(db, kube, namespace)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    before = {(r.uid, r.resource_version, r.change_type) for r in records(db, namespace)}
    # While down: more changes, then the history that would let a watch resume is compacted away.
    down: dict[str, list[tuple[str, str]]] = defaultdict(list)
    await burst(kube, namespace, 500, down, seed=3)
    sandbox.compact_etcd()
    await asyncio.to_thread(sandbox.restart_component, "kube-apiserver")
    proc = start_recorder(tmp_path, kubeconfig, namespace, db)
    try:
        await converge(db, kube, namespace)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    after = records(db, namespace)
    keys = [(r.uid, r.resource_version, r.change_type) for r in after]
    assert len(keys) == len(set(keys)), "a change was stored twice"
    assert before <= set(keys), "records from before the kill were lost or rewritten"
    relist = [r for r in after if r.observed_via == "relist"]
    assert relist, "changes made while down must be recorded as relist records"
    assert relist_gaps(db), "the relist after a 410 must leave an explicit gap record"
    # Every object created while down and still alive is present, as a relist record.
    alive = {uid for uid, ws in down.items() if ws[-1][1] != "deleted"}
    assert alive and alive <= {r.uid for r in relist}


async def test_a_forced_410_during_a_burst_loses_no_change(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path, sandbox: Sandbox
) -> None:
    """The recorder keeps running while etcd is compacted and the API server restarted in the middle of a burst:
    its watch resumes at a compacted version (410 Gone), it relists, and the store converges on the cluster with
    every object present at its final version, every deletion recorded, and nothing stored twice."""
    db = str(tmp_path / "history.db")
    proc = start_recorder(tmp_path, kubeconfig, namespace, db)
    written: dict[str, list[tuple[str, str]]] = defaultdict(list)
    try:
        await wait_cursor(db, namespace)
        await burst(kube, namespace, 1000, written, seed=4)
        # no waiting for the recorder: it is still consuming the burst when its history is compacted away and
        # its stream is cut, so it resumes at a compacted version
        sandbox.compact_etcd()
        await asyncio.to_thread(sandbox.restart_component, "kube-apiserver")
        await burst(kube, namespace, 500, written, seed=5)  # and the burst goes on
        await converge(db, kube, namespace)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    stored = records(db, namespace)
    keys = [(r.uid, r.resource_version, r.change_type) for r in stored]
    assert len(keys) == len(set(keys)), "a change was stored twice"
    [gap] = relist_gaps(db)  # the versions collapsed by the relist are declared lost, not silently
    assert gap.lost is None and int(gap.detail["from_resource_version"]) < int(
        gap.detail["to_resource_version"]
    )
    by_uid: dict[str, list[Any]] = defaultdict(list)
    for r in stored:
        by_uid[r.uid].append(r)
    assert set(written) <= set(by_uid), "an object the burst wrote was never recorded"
    for uid, writes in written.items():
        last_rv, last_type = writes[-1]
        got = by_uid[uid][-1]
        if last_type == "deleted":
            assert got.change_type == "deleted", f"deletion of {uid} not recorded"
        else:
            assert got.resource_version == last_rv, f"{uid}: final version not recorded"
