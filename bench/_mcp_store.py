"""A real SQLite history store for bench/mcp_context.py's scale mode, filled from the synthetic cluster of
bench/_diagnose_cluster.py, so the history tools (``changes``, ``timeline``, ``restarts``, ``engine_events``) answer
from the same database code a live server reads.

What it writes, seeded and deterministic: every recorded change of the snapshot (``Snapshot.changes``) as an
object change (the object's first version as ``added`` an hour before, then each edit as a JSON patch of the paths
its summary names), a restart record for every restart of each crash-looping or OOM-killed pod (at most
``RESTARTS_PER_POD`` each, the last with its termination), and ``ENGINES`` Redis targets' slowlog, ACL log and
CONFIG entries with one gap record each.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from _diagnose_cluster import T_SNAPSHOT, Cluster
from capstan.store import Batch, EngineEntry, Gap, ObjectChange, Restart, Store, open_store

SOURCE: Final = "bench"
RESTARTS_PER_POD: Final = 5
ENGINES: Final = 3
SLOWLOG_PER_ENGINE: Final = 40
_CHUNK: Final = 2_000


def _resolve(obj: Any, path: str) -> tuple[bool, Any]:
    for part in path.strip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return False, None
    return True, obj


def _patch(obj: dict[str, Any], summary: str) -> list[dict[str, Any]]:
    """A JSON patch replacing each path ``summary`` names (``replace /a/b; replace /c``) with the object's current
    value there; a path the object lacks is left out."""
    ops = []
    for part in summary.split(";"):
        op, _, path = part.strip().partition(" ")
        found, value = _resolve(obj, path)
        if op == "replace" and found:
            ops.append({"op": "replace", "path": path, "value": value})
    return ops


def _object_changes(cluster: Cluster) -> Iterator[ObjectChange]:
    snap = cluster.snapshot
    index = {
        (str(o.get("kind") or kind), str(o["metadata"].get("namespace") or ""), str(o["metadata"]["name"])): o
        for kind, objs in snap.objects.items()
        for o in objs
    }
    seq: dict[str, int] = {}
    for c in snap.changes:
        found = index.get((c.kind, c.namespace, c.name))
        if found is None:
            continue
        obj = dict(found)
        meta = obj["metadata"]
        uid = str(meta.get("uid") or f"uid-{c.kind}-{c.namespace}-{c.name}")
        api = str(obj.get("apiVersion") or "v1")
        if uid not in seq:
            seq[uid] = 1
            yield ObjectChange(
                SOURCE, T_SNAPSHOT - 3600 - 60, c.kind, api, c.namespace, c.name, uid, "1", "added",
                "relist", 1, None, obj,
            )  # fmt: skip
        if c.change == "added":
            continue
        patch = _patch(obj, c.summary) or [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": str(seq[uid] + 1)}
        ]
        seq[uid] += 1
        yield ObjectChange(
            SOURCE, c.at, c.kind, api, c.namespace, c.name, uid, str(seq[uid]), "modified", "watch",
            seq[uid], patch, None,
        )  # fmt: skip


def _restarts(cluster: Cluster) -> Iterator[Restart]:
    pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in cluster.snapshot.of("Pod")}
    for fault in ("crashloop", "oom"):
        for key in cluster.faults.get(fault, []):
            _, ns, name = key.split("/", 2)
            pod = pods[(ns, name)]
            status = pod["status"]["containerStatuses"][0]
            count = int(status.get("restartCount") or 0)
            term = (status.get("lastState") or {}).get("terminated") or {}
            first = max(1, count - RESTARTS_PER_POD + 1)
            for n in range(first, count + 1):
                latest = n == count
                yield Restart(
                    pod_uid=str(pod["metadata"]["uid"]),
                    namespace=ns,
                    pod=name,
                    container="app",
                    container_type="container",
                    restart_count=n,
                    observed_at=T_SNAPSHOT - 60 * (count - n + 1),
                    reason=str(term.get("reason") or "Unknown") if latest else "unobserved",
                    exit_code=term.get("exitCode") if latest else None,
                    reported_state={"previous_count": n - 1, "while_down": False}
                    | ({"termination": {"reason": term.get("reason"), "exit_code": term.get("exitCode")}} if latest else {}),
                )  # fmt: skip


def _engine(rng: random.Random) -> Iterator[EngineEntry | Gap]:
    commands = (
        "KEYS *",
        "HGETALL session:{}",
        "ZRANGE leaderboard 0 -1",
        "SMEMBERS tags:{}",
        "EVALSHA 9f2c 1 k",
    )
    for e in range(ENGINES):
        target = f"redis://cache-{e}.team-{e:02d}.svc:6379"
        run = f"run{e:02d}" + "a" * 34
        for i in range(SLOWLOG_PER_ENGINE):
            at = T_SNAPSHOT - 3600 + i * 3600 / SLOWLOG_PER_ENGINE
            yield EngineEntry(
                target, "slowlog", run, str(i + 1), at, at + 5,
                {
                    "duration_us": rng.randint(10_000, 900_000),
                    "command": rng.choice(commands).format(rng.randint(1, 999)).split(),
                    "client": f"10.244.{e}.{rng.randint(2, 250)}:{rng.randint(30_000, 60_000)}",
                    "client_name": "api",
                },
            )  # fmt: skip
        for i in range(3):
            at = T_SNAPSHOT - 900 + i * 120
            yield EngineEntry(
                target, "acllog", run, str(i + 1), at, at + 5,
                {"count": rng.randint(1, 40), "reason": "auth", "context": "toplevel", "object": "AUTH",
                 "username": "default", "client_info": f"addr=10.244.{e}.9:41000"},
                mutable=True,
            )  # fmt: skip
        yield EngineEntry(
            target, "config", run, "1", T_SNAPSHOT - 1200, T_SNAPSHOT - 1195,
            {"parameter": "maxmemory", "old": "4294967296", "new": "2147483648", "server_restarted": False},
        )  # fmt: skip
        yield Gap(
            target, "slowlog", run, T_SNAPSHOT - 1800, 12, "ring overwrote entries before they were read"
        )


def record_history(path: Path, cluster: Cluster, *, seed: int = 1) -> tuple[Store, dict[str, int]]:
    """A migrated SQLite store at ``path`` holding ``cluster``'s history, and how many rows of each it wrote."""
    store = open_store(str(path))
    written = {"object_changes": 0, "restarts": 0, "engine_entries": 0, "gaps": 0}
    batch = Batch()
    rows = 0

    def flush() -> None:
        nonlocal batch, rows
        if rows:
            store.history.write(batch)
        batch, rows = Batch(), 0

    for change in _object_changes(cluster):
        batch.object_changes.append(change)
        written["object_changes"] += 1
        rows += 1
        if rows >= _CHUNK:
            flush()
    for restart in _restarts(cluster):
        batch.restarts.append(restart)
        written["restarts"] += 1
        rows += 1
    for item in _engine(random.Random(seed)):
        if isinstance(item, Gap):
            batch.gaps.append(item)
            written["gaps"] += 1
        else:
            batch.engine_entries.append(item)
            written["engine_entries"] += 1
        rows += 1
    flush()
    return store, written
