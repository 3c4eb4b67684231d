"""Three `capstan record` processes, shards of one PostgreSQL store, against one recorder of everything.

The shards split the work by namespace (ConfigMaps of namespace A; ConfigMaps of every other namespace) and by kind
(Secrets everywhere). All four start at once on an empty database (its tables are created once), a burst of changes
runs over both namespaces, and the shard of "every other namespace" is killed with SIGKILL mid-burst and started
again. The shards' rows, taken together, are then exactly the rows of the one recorder: the same changes, versions,
patches and snapshots, none twice, none missing.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from capstan.kube import KubeClient, resources
from capstan.sandbox import PostgresServer
from tests.integration.record._changes import burst, cursors_stored, rows, wait_for
from tests.integration.record._process import start_record

pytestmark = pytest.mark.integration

ONE, SHARDED = "one", "sharded"


def start(
    tmp_path: Path, name: str, kubeconfig: Path, db: str, source: str, **kubernetes: Any
) -> subprocess.Popen[bytes]:
    cfg = {
        "store": db,
        "source": source,
        "kubernetes": {"events": False, "flush_interval_s": 0.1, **kubernetes},
    }
    return start_record(cfg, tmp_path / f"{name}.yaml", kubeconfig, log=tmp_path / f"{name}.log")


@pytest.fixture
async def second_namespace(kube: KubeClient, namespace: str) -> AsyncIterator[str]:
    name = f"{namespace[:50]}-b"
    await kube.create(
        resources.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    yield name
    await kube.delete(resources.NAMESPACES, name)


async def test_shards_by_namespace_and_kind_store_exactly_the_rows_of_one_recorder_across_a_kill_9(
    kube: KubeClient,
    namespace: str,
    second_namespace: str,
    kubeconfig: Path,
    tmp_path: Path,
    postgres_server: PostgresServer,
) -> None:
    postgres_server.reset()
    db = postgres_server.url
    a, b = namespace, second_namespace
    shard_b = {"kinds": ["ConfigMap"], "exclude_namespaces": [a]}
    procs = {
        "one": start(tmp_path, "one", kubeconfig, db, ONE, kinds=["ConfigMap", "Secret"]),
        "a": start(tmp_path, "a", kubeconfig, db, SHARDED, kinds=["ConfigMap"], namespaces=[a]),
        "b": start(tmp_path, "b", kubeconfig, db, SHARDED, **shard_b),
        "secrets": start(tmp_path, "secrets", kubeconfig, db, SHARDED, kinds=["Secret"]),
    }
    written: list[str] = []
    try:
        cursors = [
            (ONE, "/v1/ConfigMap"),
            (ONE, "/v1/Secret"),
            (SHARDED, f"/v1/ConfigMap@ns={a}"),
            (SHARDED, f"/v1/ConfigMap@ns!={a}"),
            (SHARDED, "/v1/Secret"),
        ]
        await wait_for(lambda: cursors_stored(db, cursors), "every recorder's first cursor")
        task = asyncio.create_task(burst(kube, (a, b), written))
        while len(written) < 500:  # kill the shard of the other namespaces mid-burst
            await asyncio.sleep(0.05)
        procs["b"].send_signal(signal.SIGKILL)
        procs["b"].wait(30)
        while len(written) < 1000 and not task.done():  # part of the burst happens while it is down
            await asyncio.sleep(0.05)
        procs["b"] = start(tmp_path, "b", kubeconfig, db, SHARDED, **shard_b)
        await task
        total = len(written)

        def caught_up() -> bool:
            one = rows(db, ONE, (a, b))
            return len(one) == total and rows(db, SHARDED, (a, b)) == one

        loop = asyncio.get_running_loop()
        end = loop.time() + 180
        while not await asyncio.to_thread(caught_up) and loop.time() < end:  # bounded: 180 s
            await asyncio.sleep(0.5)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
    one, sharded = rows(db, ONE, (a, b)), rows(db, SHARDED, (a, b))
    assert len(one) == total == 2 * (80 * 6 + 40 * 4) + sum(1 for r in one if r[5] == "deleted")
    missing, extra = sorted(set(one) - set(sharded)), sorted(set(sharded) - set(one))
    assert not missing and not extra, (
        f"{len(sharded)} sharded rows against {len(one)}: {len(missing)} missing (e.g. {missing[:1]}), "
        f"{len(extra)} not in the one recorder's (e.g. {extra[:1]})"
    )
    assert sharded == one
    assert len({r[:6] for r in sharded}) == len(sharded), "a change was stored twice"
    assert {(r[0], r[1]) for r in sharded} == {(k, ns) for k in ("ConfigMap", "Secret") for ns in (a, b)}
