"""Restart diagnostics end to end: real control plane + kubelet-like faults → watcher → store outbox → local Slack.

Each scenario of the issue: OOMKilled; CrashLoopBackOff with a previous log; liveness probe failure; init
container; native sidecar; a two-container pod where only the second restarts; a pod whose node was deleted; no
previous log; a storm with 429s from the receiver; and Capstan stopped with messages queued (nothing lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from capstan.faults import Kubelet, Termination
from capstan.kube import KubeClient, resources
from capstan.notify import DEV_TOKEN, SlackReceiver, serve_in_thread
from capstan.restarts import RestartsConfig, RestartWatcher
from capstan.sandbox import Sandbox
from capstan.store import Store, open_store

pytestmark = pytest.mark.integration


@pytest.fixture
def slack() -> Iterator[tuple[SlackReceiver, str]]:
    receiver = SlackReceiver()
    with serve_in_thread(receiver.app) as server:
        receiver.base_url = server.url
        yield receiver, server.url


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    st = open_store(str(tmp_path / "history.db"))
    yield st
    st.close()


def config(url: str, **extra: Any) -> RestartsConfig:
    data: dict[str, Any] = {
        "cluster_name": "sandbox",
        "sinks": [
            {
                "name": "slack",
                "type": "slack_bot",
                "token": DEV_TOKEN,
                "channel": "C0ALERTS",
                "base_url": f"{url}/api/",
            }
        ],
        "mute_seconds": 0,
        "delivery": {
            "rate_per_second": 50,
            "burst": 50,
            "backoff_base_seconds": 0.2,
            "idle_interval_seconds": 0.05,
        },
    }
    data.update(extra)
    return RestartsConfig.model_validate(data)


@contextlib.asynccontextmanager
async def watching(
    cfg: RestartsConfig, kube: KubeClient, store: Store, namespace: str
) -> AsyncIterator[RestartWatcher]:
    watcher = RestartWatcher.over_store(cfg, kube, store, namespace=namespace, call_timeout=5)
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    await asyncio.wait_for(watcher.synced.wait(), 30)
    try:
        yield watcher
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


async def running_pod(
    kube: KubeClient, namespace: str, name: str, spec: dict[str, Any], **meta: Any
) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": spec,
    }
    await kube.create(resources.PODS, body)
    for _ in range(400):
        pod = await kube.get(resources.PODS, name, namespace)
        if (pod.get("status") or {}).get("phase") == "Running":
            return pod
        await asyncio.sleep(0.05)
    pytest.fail(f"pod {name} never Running")


def text_of(message: Any) -> str:
    return json.dumps({"text": message.text, "blocks": message.blocks})


async def wait_messages(receiver: SlackReceiver, predicate: Any, what: str, timeout: float = 60) -> list[Any]:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        found = [m for m in list(receiver.messages) if predicate(text_of(m))]
        if found:
            return found
        await asyncio.sleep(0.1)
    pytest.fail(f"no Slack message {what}; got {[text_of(m)[:200] for m in receiver.messages]}")


def c(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": f"example.com/{name}:1",
        "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "128Mi"}},
    }


async def test_scenarios(
    kube: KubeClient, namespace: str, sandbox: Sandbox, slack: tuple[SlackReceiver, str], store: Store
) -> None:
    receiver, url = slack
    kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
    pods = {
        "oom": {"containers": [c("main")]},
        "crash": {"containers": [c("main")]},
        "probe": {"containers": [c("main")]},
        "withinit": {
            "initContainers": [{"name": "migrate", "image": "example.com/migrate:1"},
                               {"name": "mesh", "image": "example.com/mesh:1", "restartPolicy": "Always"}],
            "containers": [c("main")],
        },
        "two": {"containers": [c("first"), c("second")]},
        "nolog": {"containers": [c("main")]},
    }  # fmt: skip
    for name, spec in pods.items():
        await running_pod(kube, namespace, name, spec)
    async with watching(config(url), kube, store, namespace) as watcher:
        await kubelet.restart_container(
            namespace, "oom", "main", Termination.oom_killed(), previous_log=["loading", "alloc 9Gi"]
        )
        await kubelet.restart_container(
            namespace, "crash", "main", Termination.error(2, "boom"),
            previous_log=["starting", "panic: token=abc123secret failed"],
        )  # fmt: skip
        await kubelet.probe_failure(namespace, "probe", "main", "Liveness", failures=3, previous_log=["slow"])
        await kubelet.restart_container(
            namespace, "withinit", "migrate", Termination.error(1), previous_log=["migrate failed"]
        )
        await kubelet.restart_container(
            namespace, "withinit", "mesh", Termination.killed(), then="running", previous_log=["mesh"]
        )
        await kubelet.restart_container(
            namespace, "two", "second", Termination.error(3), previous_log=["second died"]
        )
        await kubelet.restart_container(namespace, "nolog", "main", Termination.error(1), previous_log=None)

        oom = await wait_messages(
            receiver, lambda t: "oom" in t and "OOMKilled" in t, "for the OOMKilled pod"
        )
        assert "137" in text_of(oom[0]) and "alloc 9Gi" in text_of(oom[0]), text_of(oom[0])
        crash = await wait_messages(
            receiver, lambda t: "crash" in t and "panic" in t, "with the previous log"
        )
        assert "abc123secret" not in text_of(crash[0])  # redacted
        await wait_messages(receiver, lambda t: "probe" in t and "Liveness" in t, "for the liveness failure")
        await wait_messages(
            receiver, lambda t: "migrate" in t and "init" in t.lower(), "for the init container"
        )
        await wait_messages(
            receiver, lambda t: "mesh" in t and "sidecar" in t.lower(), "for the native sidecar"
        )
        two = await wait_messages(
            receiver, lambda t: "two" in t and "second" in t, "for the second container"
        )
        assert all('"first"' not in text_of(m) for m in two)
        await wait_messages(
            receiver, lambda t: "nolog" in t and "unavailable" in t.lower(), "saying the log is unavailable"
        )

        # A pod whose node was deleted: the report is still sent and says so.
        node_pod = await running_pod(
            kube, namespace, "orphan", {"containers": [c("main")], "nodeName": "cpu-1"}
        )
        assert node_pod["spec"]["nodeName"] == "cpu-1"
        node = await kube.get(resources.NODES, "cpu-1")
        await kube.delete(resources.NODES, "cpu-1")
        try:
            await kubelet.restart_container(
                namespace, "orphan", "main", Termination.error(1), previous_log=["x"]
            )
            await wait_messages(
                receiver,
                lambda t: "orphan" in t and "not found" in t.lower(),
                "for the pod on a deleted node",
            )
        finally:
            for key in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
                node["metadata"].pop(key, None)
            await kube.create(resources.NODES, node)
        assert watcher.handled == 8

    records = store.history.restarts(namespace=namespace, limit=1000)
    assert {(r.pod, r.container) for r in records} >= {
        ("oom", "main"), ("crash", "main"), ("probe", "main"), ("withinit", "migrate"), ("withinit", "mesh"),
        ("two", "second"), ("nolog", "main"), ("orphan", "main"),
    }  # fmt: skip
    assert ("two", "first") not in {(r.pod, r.container) for r in records}


async def test_storm_with_429s_and_a_crash_loses_nothing(
    kube: KubeClient, namespace: str, sandbox: Sandbox, slack: tuple[SlackReceiver, str], store: Store
) -> None:
    receiver, url = slack
    kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
    n_pods = 12
    for i in range(n_pods):
        await running_pod(kube, namespace, f"storm-{i:02d}", {"containers": [c("main")]})
    receiver.arm_429(5, retry_after=1)
    cfg = config(
        url,
        delivery={
            "rate_per_second": 2,
            "burst": 2,
            "backoff_base_seconds": 0.2,
            "idle_interval_seconds": 0.05,
        },
    )
    async with watching(cfg, kube, store, namespace) as watcher:
        for i in range(n_pods):
            await kubelet.restart_container(
                namespace, f"storm-{i:02d}", "main", Termination.error(1), previous_log=[f"storm-{i:02d}"]
            )
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while watcher.handled < n_pods and loop.time() < end:
            await asyncio.sleep(0.1)
        assert watcher.handled == n_pods
    # Stopped with messages still queued (2/s for 12 messages and five 429s): they are in the outbox, not lost.
    pending = [i for i in store.outbox.items(state="pending", limit=1000)]
    sent_before = len(receiver.messages)
    assert sent_before + len(pending) >= n_pods
    assert receiver.count_429 >= 1
    # Restart Capstan: the new watcher's drainer delivers what the old one left.
    async with watching(cfg, kube, store, namespace):
        loop = asyncio.get_running_loop()
        end = loop.time() + 60
        while loop.time() < end and store.outbox.items(state="pending", limit=1000):
            await asyncio.sleep(0.2)
    assert not store.outbox.items(state="pending", limit=1000)
    assert not store.outbox.items(state="dead", limit=1000)
    delivered = {
        f"storm-{i:02d}"
        for i in range(n_pods)
        if any(f"storm-{i:02d}" in text_of(m) for m in receiver.messages)
    }
    assert delivered == {f"storm-{i:02d}" for i in range(n_pods)}


async def test_kill_9_with_messages_queued_loses_nothing(
    kube: KubeClient,
    namespace: str,
    sandbox: Sandbox,
    slack: tuple[SlackReceiver, str],
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """`capstan restarts run` killed with SIGKILL while its outbox is backed up; the next run delivers everything."""
    import signal
    import subprocess
    import sys

    import yaml

    receiver, url = slack
    kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
    n_pods = 6
    for i in range(n_pods):
        await running_pod(kube, namespace, f"kill-{i:02d}", {"containers": [c("main")]})
    cfg_path = tmp_path / "restarts.yaml"
    cfg = config(url, delivery={"rate_per_second": 0.2, "burst": 1, "idle_interval_seconds": 0.05})
    cfg_path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    db = str(tmp_path / "history.db")
    argv = [sys.executable, "-m", "capstan.cli.main", "restarts", "run", "--config", str(cfg_path),
            "--kubeconfig", str(kubeconfig), "--store", db, "--namespace", namespace]  # fmt: skip

    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        st = open_store(db)
        loop = asyncio.get_running_loop()
        end = loop.time() + 90
        while (
            loop.time() < end and len(st.restart_records.restart_counts()) < n_pods
        ):  # the watcher's baseline is written
            await asyncio.sleep(0.2)
        for i in range(n_pods):
            await kubelet.restart_container(
                namespace, f"kill-{i:02d}", "main", Termination.error(1), previous_log=["x"]
            )
        end = loop.time() + 60
        while loop.time() < end and len(st.outbox.items(limit=1000)) < n_pods:  # all queued, few sent (0.2/s)
            await asyncio.sleep(0.1)
        assert len(st.outbox.items(limit=1000)) >= n_pods
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    pending = st.outbox.items(state="pending", limit=1000)
    assert pending, "the kill must leave messages queued for this test to mean anything"
    fast = config(url)
    cfg_path.write_text(yaml.safe_dump(fast.model_dump(mode="json")))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        loop = asyncio.get_running_loop()
        end = loop.time() + 90
        while loop.time() < end and st.outbox.items(state="pending", limit=1000):
            await asyncio.sleep(0.2)
        assert not st.outbox.items(state="pending", limit=1000) and not st.outbox.items(
            state="dead", limit=1000
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        st.close()
    delivered = {
        f"kill-{i:02d}"
        for i in range(n_pods)
        if any(f"kill-{i:02d}" in text_of(m) for m in receiver.messages)
    }
    assert delivered == {f"kill-{i:02d}" for i in range(n_pods)}


async def test_a_standby_notifier_takes_over_from_a_killed_leader_and_reports_each_restart_once(
    kube: KubeClient,
    namespace: str,
    sandbox: Sandbox,
    slack: tuple[SlackReceiver, str],
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """Two `capstan restarts run --leader-elect` on one store: one reports, one stands by. The leader is killed
    with SIGKILL once its reports are delivered; restarts that happen while nobody leads are reported by the
    standby once it takes the Lease, and none of the leader's is reported again."""
    import signal
    import socket
    import subprocess
    import sys

    import httpx
    import yaml

    from capstan.kube import ApiError

    receiver, url = slack
    kubelet = Kubelet(kube, sandbox.directory / "pod-logs")
    names = [f"ho-{i:02d}" for i in range(6)]
    for name in names:
        await running_pod(kube, namespace, name, {"containers": [c("main")]})
    cfg_path = tmp_path / "restarts.yaml"
    cfg_path.write_text(yaml.safe_dump(config(url).model_dump(mode="json")))
    db = str(tmp_path / "history.db")
    lease = "capstan-restarts-test"
    argv = [sys.executable, "-m", "capstan.cli.main", "restarts", "run", "--config", str(cfg_path),
            "--kubeconfig", str(kubeconfig), "--store", db, "--namespace", namespace, "--leader-elect",
            "--lease-namespace", namespace, "--lease-name", lease, "--lease-duration", "4s"]  # fmt: skip
    loop = asyncio.get_running_loop()

    async def holder() -> str | None:
        try:
            spec = (await kube.get(resources.LEASES, lease, namespace)).get("spec") or {}
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return spec.get("holderIdentity")

    async def until(predicate: Any, what: str, timeout: float = 90) -> None:
        end = loop.time() + timeout
        while not await predicate():
            if loop.time() > end:
                pytest.fail(
                    f"timed out waiting for {what}; messages: {[text_of(m)[:120] for m in receiver.messages]}"
                )
            await asyncio.sleep(0.1)

    def reports(name: str) -> int:
        return sum(1 for m in list(receiver.messages) if name in text_of(m))

    logs = {n: (tmp_path / f"{n}.log").open("wb") for n in ("r1", "r2")}
    probe_ports = {}
    for n in ("r1", "r2"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            probe_ports[n] = int(s.getsockname()[1])

    def replica(n: str) -> subprocess.Popen[bytes]:
        probe = ["--probe-port", str(probe_ports[n])]
        return subprocess.Popen([*argv, *probe], stdout=logs[n], stderr=subprocess.STDOUT)

    async def readyz(n: str) -> tuple[int, str]:
        async with httpx.AsyncClient(timeout=10) as http:
            try:
                r = await http.get(f"http://127.0.0.1:{probe_ports[n]}/readyz")
            except httpx.HTTPError:
                return 0, ""
            return r.status_code, r.text

    procs = {"r1": replica("r1")}
    st = open_store(db)
    try:

        async def r1_leads() -> bool:
            return await holder() == f"{socket.gethostname()}_{procs['r1'].pid}"

        await until(r1_leads, "the first replica to take the Lease")
        procs["r2"] = replica("r2")

        async def both_ready() -> bool:  # the leader once it has listed pods; the standby while it waits
            return [(await readyz(n))[0] for n in ("r1", "r2")] == [200, 200]

        await until(both_ready, "both replicas ready")
        assert (await readyz("r2"))[1] == "[+]store ok\n[+]cluster ok\n[+]pods ok\nreadyz check passed\n"

        async def baseline() -> bool:
            return len(await asyncio.to_thread(st.restart_records.restart_counts)) >= len(names)

        await until(baseline, "the leader's baseline of restart counts")
        for name in names[:3]:
            await kubelet.restart_container(
                namespace, name, "main", Termination.error(1), previous_log=[name]
            )

        async def delivered(expected: dict[str, int]) -> bool:
            pending = await asyncio.to_thread(st.outbox.items, state="pending", limit=1000)
            return not pending and all(reports(n) >= k for n, k in expected.items())

        await until(lambda: delivered({n: 1 for n in names[:3]}), "the leader's reports")
        procs["r1"].send_signal(signal.SIGKILL)
        procs["r1"].wait(30)
        # while nobody leads: three pods restart for the first time, one for the second
        for name in [*names[3:], names[0]]:
            await kubelet.restart_container(
                namespace, name, "main", Termination.error(2), previous_log=[name]
            )

        async def r2_leads() -> bool:
            return await holder() == f"{socket.gethostname()}_{procs['r2'].pid}"

        await until(r2_leads, "the standby to take the Lease")
        await until(
            lambda: delivered({names[0]: 2} | {n: 1 for n in names[1:]}), "the standby's reports of the gap"
        )
        await asyncio.sleep(2)  # a report sent twice would arrive now
        async with httpx.AsyncClient(
            timeout=10
        ) as http:  # the new leader's delivery metrics: its four reports
            metrics = (await http.get(f"http://127.0.0.1:{probe_ports['r2']}/metrics")).text
        assert 'capstan_notify_sent_total{destination="slack"} 4.0' in metrics, metrics[-1500:]
        procs["r2"].send_signal(signal.SIGTERM)
        assert procs["r2"].wait(60) == 0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(30)
        st.close()
        for f in logs.values():
            f.close()
    assert {n: reports(n) for n in names} == {names[0]: 2} | {n: 1 for n in names[1:]}
    assert not dead_letters(db)


def dead_letters(db: str) -> list[Any]:
    st = open_store(db)
    try:
        return list(st.outbox.items(state="dead", limit=1000))
    finally:
        st.close()
