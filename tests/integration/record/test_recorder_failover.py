"""Two replicas of one `capstan record --leader-elect` on one PostgreSQL store, against one recorder without a
Lease: one replica records, the other stands by; the leader is killed with SIGKILL mid-burst, the standby takes the
Lease over and resumes from the stored cursors. Its rows and the dead leader's, together, are exactly the reference
recorder's: no change lost, none stored twice. A leader whose Lease is taken from it stops and says so."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from capstan.kube import ApiError, KubeClient, resources
from capstan.sandbox import PostgresServer
from tests.integration.record._changes import burst, cursors_stored, rows, wait_for
from tests.integration.record._process import start_record

pytestmark = pytest.mark.integration

REFERENCE, REPLICATED = "reference", "replicated"
LEASE = "capstan-record-test"
LEASE_S = 4  # renewed every 0.53 s; a standby takes over at most 4 s after the leader's last renewal


async def holder(kube: KubeClient, namespace: str) -> dict[str, Any] | None:
    try:
        lease = await kube.get(resources.LEASES, LEASE, namespace)
    except ApiError as exc:
        if exc.not_found:
            return None
        raise
    spec: dict[str, Any] = lease.get("spec") or {}
    return spec


def identity(proc: subprocess.Popen[bytes]) -> str:
    return f"{socket.gethostname()}_{proc.pid}"


async def test_a_standby_replica_takes_over_from_a_killed_leader_and_no_change_is_lost(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path, postgres_server: PostgresServer
) -> None:
    postgres_server.reset()
    db = postgres_server.url
    kinds = {"kinds": ["ConfigMap", "Secret"], "namespaces": [namespace]}

    def start(name: str, source: str, *args: str) -> subprocess.Popen[bytes]:
        cfg = {
            "store": db,
            "source": source,
            "kubernetes": {"events": False, "flush_interval_s": 0.1, **kinds},
        }
        return start_record(cfg, tmp_path / f"{name}.yaml", kubeconfig, *args, log=tmp_path / f"{name}.log")

    elect = (
        "--leader-elect",
        "--lease-namespace",
        namespace,
        "--lease-name",
        LEASE,
        "--lease-duration",
        f"{LEASE_S}s",
    )
    procs = {"reference": start("reference", REFERENCE), "r1": start("r1", REPLICATED, *elect)}
    written: list[str] = []
    try:
        while (await holder(kube, namespace) or {}).get("holderIdentity") != identity(procs["r1"]):
            assert procs["r1"].poll() is None, (tmp_path / "r1.log").read_text()[-2000:]
            await asyncio.sleep(0.2)
        procs["r2"] = start("r2", REPLICATED, *elect)  # started once r1 leads, so which one leads is known
        keys = [f"/v1/{kind}@ns={namespace}" for kind in ("ConfigMap", "Secret")]
        await wait_for(
            lambda: cursors_stored(db, [(source, key) for source in (REFERENCE, REPLICATED) for key in keys]),
            "both recorders' first cursors",
        )
        task = asyncio.create_task(burst(kube, (namespace,), written))
        while len(written) < 300:  # kill the leader mid-burst
            await asyncio.sleep(0.05)
        procs["r1"].send_signal(signal.SIGKILL)
        procs["r1"].wait(30)
        killed_at = time.time()
        end = asyncio.get_running_loop().time() + 120
        while (spec := await holder(kube, namespace) or {}).get("holderIdentity") != identity(procs["r2"]):
            assert asyncio.get_running_loop().time() < end, f"the standby never took the Lease: {spec}"
            assert procs["r2"].poll() is None, (tmp_path / "r2.log").read_text()[-2000:]
            await asyncio.sleep(0.1)
        took_over_s = time.time() - killed_at
        assert spec["leaseTransitions"] == 1 and spec["leaseDurationSeconds"] == LEASE_S
        await task
        total = len(written)

        def caught_up() -> bool:
            reference = rows(db, REFERENCE, (namespace,))
            return len(reference) == total and rows(db, REPLICATED, (namespace,)) == reference

        loop = asyncio.get_running_loop()
        end = loop.time() + 180
        while not await asyncio.to_thread(caught_up) and loop.time() < end:  # bounded: 180 s
            await asyncio.sleep(0.5)
        procs["r2"].send_signal(signal.SIGTERM)  # a clean stop gives the Lease up
        assert procs["r2"].wait(60) == 0, (tmp_path / "r2.log").read_text()[-2000:]
        released = await holder(kube, namespace) or {}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
    reference, replicated = rows(db, REFERENCE, (namespace,)), rows(db, REPLICATED, (namespace,))
    assert len(reference) == total == 80 * 6 + 40 * 4 + sum(1 for r in reference if r[5] == "deleted")
    missing, extra = sorted(set(reference) - set(replicated)), sorted(set(replicated) - set(reference))
    assert not missing and not extra, (
        f"{len(replicated)} rows of the replicas against {len(reference)}: {len(missing)} missing "
        f"(e.g. {missing[:1]}), {len(extra)} not in the reference's (e.g. {extra[:1]})"
    )
    assert replicated == reference
    assert released.get("holderIdentity") == ""
    print(f"the standby held the Lease {took_over_s:.1f} s after the leader was killed (lease {LEASE_S} s)")


async def test_a_leader_whose_lease_is_taken_stops_recording_and_says_so(
    kube: KubeClient, namespace: str, kubeconfig: Path, tmp_path: Path
) -> None:
    db = tmp_path / "h.db"
    cfg = {
        "store": str(db),
        "kubernetes": {"events": False, "kinds": ["ConfigMap"], "namespaces": [namespace]},
    }
    log = tmp_path / "record.log"
    args = ("--leader-elect", "--lease-namespace", namespace, "--lease-name", LEASE, "--lease-duration", "3s")
    proc = start_record(cfg, tmp_path / "record.yaml", kubeconfig, *args, log=log)
    try:
        await wait_for(
            lambda: cursors_stored(str(db), [("default", f"/v1/ConfigMap@ns={namespace}")]), "a cursor"
        )
        lease = await kube.get(resources.LEASES, LEASE, namespace)
        assert lease["spec"]["holderIdentity"] == identity(proc)
        # another candidate writes itself in as the holder, renewed far in the future: this one cannot renew
        lease["spec"] |= {"holderIdentity": "elsewhere", "renewTime": "2099-01-01T00:00:00.000000Z"}
        await kube.replace(resources.LEASES, lease, namespace)
        code = await asyncio.to_thread(proc.wait, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = log.read_text().strip().splitlines()
    assert code == 1, lines[-5:]
    assert lines[-1] == (
        f"capstan record: lost the leader Lease {namespace}/{LEASE}; stopped recording (the next leader resumes "
        "from the stored cursors; restart this one to stand by again)"
    )
    # it stopped without writing over the Lease it lost
    spec = (await kube.get(resources.LEASES, LEASE, namespace))["spec"]
    assert spec["holderIdentity"] == "elsewhere" and spec["renewTime"].startswith("2099-01-01")
