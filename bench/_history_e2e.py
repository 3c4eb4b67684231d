"""The recorder's whole path for bench/history_ingest.py: watch event → informer → diff builder → committed row.

A :class:`~capstan.record.KubeCollector` (the one ``capstan record`` runs) records Deployments from an API server
behind httpx2's ``MockTransport``: the list is empty, then one watch stream carries a burst of ``changes`` Deployment
changes over ``objects`` objects, as fast as the recorder reads them (the stream is pulled, so the API server's side
costs only the JSON encoding of each event, in the same process). The run ends when the commit holding the last
change is done; the figure is changes over the seconds from the collector's start to that commit.

It runs in a child process (:func:`run_in_child` runs this file) so that its peak RSS (``VmHWM``) is the
recorder's own: the interpreter, the libraries, the store connection and whatever the lag makes the recorder hold
during the burst (nothing of the parent bench, which holds its prebuilt batches and plotting library).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import orjson

from capstan.kube import KubeClient, resources
from capstan.record import KubeCollector, KubernetesConfig
from capstan.runtime import shorten_gil_switch_interval
from capstan.store import INGEST_CACHE_KIB, Batch, open_store

EVENTS_PER_CHUNK = 16  # watch lines per network read (a real stream arrives in reads of many lines)


def deployment(k: int, version: int, namespace: str | None = None) -> dict[str, Any]:
    """Deployment ``k`` at ``version`` (every version differs: replicas, image, observedGeneration); in
    ``namespace`` (a shard's: the uid says which) or spread over 20 namespaces."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": f"svc-{k}",
            "namespace": namespace or f"team-{k % 20}",
            "uid": f"uid-{namespace + '-' if namespace else ''}{k:08d}",
            "resourceVersion": str(version),
            "labels": {"app": f"svc-{k}", "tier": "inference"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "spec": {
            "replicas": 1 + version % 5,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "server",
                            "image": f"registry.local/vllm:{version % 97}",
                            "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"}},
                        }
                    ]
                }
            },
        },
        "status": {"observedGeneration": version, "readyReplicas": version % 5},
    }


def _stream(changes: int, objects: int, namespace: str | None) -> AsyncIterator[bytes]:
    async def gen() -> AsyncIterator[bytes]:
        lines: list[bytes] = []
        for i in range(changes):
            obj = deployment(i % objects, 101 + i, namespace)
            lines.append(orjson.dumps({"type": "ADDED" if i < objects else "MODIFIED", "object": obj}))
            if len(lines) >= EVENTS_PER_CHUNK:
                yield b"\n".join(lines) + b"\n"
                lines = []
        if lines:
            yield b"\n".join(lines) + b"\n"
        await asyncio.Event().wait()  # the stream stays open until the recorder stops

    return gen()


async def _record(
    url: str, changes: int, objects: int, max_batch: int, workers: int, namespace: str | None
) -> dict[str, float]:
    res = resources.DEPLOYMENTS
    path = res.collection_path(namespace)

    async def handle(request: httpx2.Request) -> httpx2.Response:
        if request.url.path != path:
            return httpx2.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound"})
        if request.url.params.get("watch") == "true":
            return httpx2.Response(
                200,
                headers={"content-type": "application/json"},
                content=_stream(changes, objects, namespace),
            )
        body = {"kind": "DeploymentList", "apiVersion": "apps/v1", "metadata": {"resourceVersion": "100"}}
        return httpx2.Response(200, json={**body, "items": []})

    async def connect() -> KubeClient:
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(handle), base_url="https://bench-apiserver")
        return KubeClient(http, timeout=30.0, source="bench")

    store = open_store(url, writer_cache_kib=INGEST_CACHE_KIB)  # as `capstan record` opens it
    stop = asyncio.Event()
    written = [0]
    done_at = [0.0]
    loop = asyncio.get_running_loop()

    helpers_kib = [0]

    def committed(batch: Batch) -> None:  # called on the writer's thread after each commit
        written[0] += len(batch.object_changes)
        if written[0] >= changes and not done_at[0]:
            done_at[0] = time.perf_counter()
            helpers_kib[0] = _helpers_pss_kib(collector.diff_worker_pids())
            loop.call_soon_threadsafe(stop.set)

    store.history.add_commit_listener(committed)
    collector = KubeCollector(
        KubernetesConfig(
            kinds=["Deployment"],
            events=False,
            max_batch=max_batch,
            diff_workers=workers,
            namespaces=[namespace] if namespace else [],
        ),
        store.history,
        connect=connect,
        source="bench-e2e",
    )
    start = time.perf_counter()
    try:
        async with asyncio.timeout(3600):  # a guard against a hang, never a measurement
            await collector.run(stop)
    finally:
        stored = store.database.count("object_changes")
        store.close()
    return {
        "started_at": start,  # perf_counter is CLOCK_MONOTONIC: comparable between processes on one machine
        "done_at": done_at[0],
        "seconds": done_at[0] - start,
        "changes_per_s": changes / (done_at[0] - start),
        "stored": float(stored),
        "peak_rss_mb": _peak_rss_kib() / 1024,
        "helpers_pss_mb": helpers_kib[0] / 1024,
        # the recorder's memory: this process's peak RSS and what its diff workers and their fork server add
        "memory_mb": (_peak_rss_kib() + helpers_kib[0]) / 1024,
    }


def _peak_rss_kib() -> int:
    """This process's peak RSS (VmHWM). NOTE: not ``ru_maxrss``, which a process started by a large one (the bench
    holding its prebuilt batches) inherits across fork and exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _helpers_pss_kib(pids: list[int]) -> int:
    """The summed proportional set size (PSS: shared pages split between the processes sharing them) of the diff
    workers and of their parent, the fork server, now (at the end of the burst). Their RSS summed would count the
    libraries they share, copy-on-write, once per process."""
    procs = set(pids)
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            procs.add(int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]))
    procs.discard(os.getpid())
    total = 0
    for pid in procs:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total


def run_in_child(
    url: str, changes: int, objects: int, max_batch: int, workers: int, *, namespace: str | None = None
) -> dict[str, float]:
    """The whole path in a fresh interpreter running this file; its figures. With ``namespace`` the recorder is
    the shard of that namespace (and the API server's stream carries that namespace's changes only)."""
    return finish_child(start_child(url, changes, objects, max_batch, workers, namespace=namespace))


def start_child(
    url: str, changes: int, objects: int, max_batch: int, workers: int, *, namespace: str | None = None
) -> subprocess.Popen[str]:
    """:func:`run_in_child` started, not waited for (shards run at once); :func:`finish_child` reads it."""
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        url,
        *(str(v) for v in (changes, objects, max_batch, workers)),
        *(["--namespace", namespace] if namespace else []),
    ]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish_child(proc: subprocess.Popen[str]) -> dict[str, float]:
    """The figures of a child :func:`start_child` started, once it ends."""
    stdout, stderr = proc.communicate(timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"the end-to-end child exited with {proc.returncode}: {stderr[-2000:]}")
    result: dict[str, float] = json.loads(stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("changes", type=int)
    parser.add_argument("objects", type=int)
    parser.add_argument("max_batch", type=int)
    parser.add_argument("workers", type=int, help="diff worker processes (0: diff in the recorder's process)")
    parser.add_argument("--namespace", help="record as the shard of this namespace")
    args = parser.parse_args()
    shorten_gil_switch_interval()  # as `capstan record` does at its start
    figures = asyncio.run(
        _record(args.url, args.changes, args.objects, args.max_batch, args.workers, args.namespace)
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
