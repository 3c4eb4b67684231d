"""A burst of ConfigMap and Secret changes over namespaces, and the rows a recorder stored of them, comparable
between recorders (the same changes, versions, patches and snapshots)."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from capstan.kube import KubeClient, resources
from capstan.store import open_store


async def wait_for(predicate: Any, what: str, timeout: float = 120) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await asyncio.to_thread(predicate):
        if loop.time() > end:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


def cursors_stored(db: str, wanted: list[tuple[str, str]]) -> bool:
    store = open_store(db)
    try:
        return all(store.history.kind_cursor(source, key) is not None for source, key in wanted)
    finally:
        store.close()


def rows(db: str, source: str, namespaces: tuple[str, ...]) -> list[tuple[Any, ...]]:
    """Every stored change of ``source`` in ``namespaces``, as comparable tuples (what, which version, the diff)."""
    store = open_store(db)
    try:
        out = []
        for ns in namespaces:
            for c in store.history.timeline(source=source, namespace=ns, limit=1_000_000):
                if c.kind not in ("ConfigMap", "Secret") or not c.name.startswith(("cm-", "s-")):
                    continue
                out.append(
                    (
                        c.kind, c.namespace, c.name, c.uid, c.resource_version, c.change_type, c.observed_via,
                        c.version_seq, json.dumps(c.patch, sort_keys=True), json.dumps(c.snapshot, sort_keys=True),
                    )
                )  # fmt: skip
        return sorted(out)
    finally:
        store.close()


async def burst(kube: KubeClient, namespaces: tuple[str, ...], written: list[str]) -> None:
    """ConfigMaps and Secrets in every namespace: created, edited, some deleted; one entry in ``written`` per
    change."""
    rng = random.Random(7)
    sem = asyncio.Semaphore(16)

    async def one(resource: Any, prefix: str, ns: str, i: int, edits: int) -> None:
        name = f"{prefix}{i}"
        field = "data" if resource is resources.CONFIGMAPS else "stringData"
        async with sem:
            body = {"apiVersion": "v1", "kind": resource.kind, "metadata": {"name": name, "namespace": ns}}
            await kube.create(resource, {**body, field: {"v": "0"}})
            written.append(name)
            for e in range(edits):
                await kube.patch(resource, name, {field: {"v": str(e + 1)}}, namespace=ns)
                written.append(name)
            if rng.random() < 0.3:
                await kube.delete(resource, name, ns)
                written.append(name)

    await asyncio.gather(
        *(one(resources.CONFIGMAPS, "cm-", ns, i, 5) for ns in namespaces for i in range(80)),
        *(one(resources.SECRETS, "s-", ns, i, 3) for ns in namespaces for i in range(40)),
    )
