"""A store or an API server that is not up yet when ``capstan record`` or ``capstan restarts run`` starts: the
component serves its probes, not ready and naming what it waits for (without the store URL's password), logs one
line per failed attempt and, once the server is up, becomes ready and works, without a restart; SIGTERM during the
wait is a clean exit. A configuration that cannot work (a wrong password, a token the API server refuses) is still
one line and exit 2. Real PostgreSQL, the real control plane, and a real TCP relay in front of its API server."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from capstan.kube import KubeClient, resources
from capstan.sandbox import PostgresServer
from tests.integration.mcp.calls import kubeconfig_with_token
from tests.integration.record._process import free_port, start_record, until

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-startup-pw"
CAPSTAN = [sys.executable, "-m", "capstan.cli.main"]


def store_url(server: PostgresServer) -> str:
    """The URL of ``server`` (not started yet) on its ``postgres`` database, which exists from the moment the server
    accepts connections (``capstan`` is created a moment after)."""
    return server.url.rsplit("/", 1)[0] + "/postgres"


def read_log(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


async def until_logged(
    log: Path, text: str, count: int, proc: subprocess.Popen[bytes], timeout: float = 120
) -> str:
    """The log once ``text`` is in it ``count`` times, the process still running."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    content = ""
    while loop.time() < end:
        assert proc.poll() is None, f"exited {proc.returncode}: {read_log(log)[-2000:]}"
        content = read_log(log)
        if content.count(text) >= count:
            return content
        await asyncio.sleep(0.2)
    pytest.fail(f"{text!r} logged fewer than {count} times: {content[-2000:]}")


def stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


async def recorded_config_maps(url: str, namespace: str) -> set[str]:
    proc = await asyncio.to_thread(
        subprocess.run,
        [*CAPSTAN, "history", "timeline", "--store", url, "--kind", "ConfigMap", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        return set()  # the store has no schema yet
    return {i["name"] for i in json.loads(proc.stdout)["items"] if i["namespace"] == namespace}


async def until_recorded(url: str, namespace: str, name: str, timeout: float = 120) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        if name in await recorded_config_maps(url, namespace):
            return
        await asyncio.sleep(0.5)
    pytest.fail(f"ConfigMap {namespace}/{name} never recorded")


async def config_map(kube: KubeClient, namespace: str, name: str) -> None:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
    }
    await kube.create(resources.CONFIGMAPS, body)


async def test_record_waits_not_ready_for_a_store_not_up_yet_then_becomes_ready_and_records(
    kubeconfig: Path, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    server = PostgresServer(password=PASSWORD)  # its port is free: nothing listens there yet
    url = store_url(server)
    cfg = {"store": url, "kubernetes": {"events": False, "kinds": ["ConfigMap"], "namespaces": [namespace]}}
    probe, log = free_port(), tmp_path / "record.log"
    proc = start_record(cfg, tmp_path / "r.yaml", kubeconfig, "--probe-port", str(probe), log=log)
    try:
        body = await until(probe, 503, proc, log, containing="[-]store failed: database ")
        assert "[-]store failed: database 'postgresql+psycopg://" in body and "Connection refused" in body, (
            body
        )
        assert "[+]cluster ok" in body and PASSWORD not in body, body
        # still alive after several attempts, one line each, none with the password
        content = await until_logged(log, "waiting for store: ", 3, proc)
        assert PASSWORD not in content
        assert all(line.count("waiting for store") <= 1 for line in content.splitlines())
        server.start()
        body = await until(probe, 200, proc, log)
        assert body.splitlines() == ["[+]store ok", "[+]cluster ok", "[+]watches ok", "readyz check passed"]
        await config_map(kube, namespace, "after-the-store-came-up")
        await until_recorded(url, namespace, "after-the-store-came-up")
        assert stop(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()


class Relay:
    """A TCP relay on a loopback port to the API server: bytes both ways, nothing read or changed (TLS passes
    through, so the client still verifies the API server's own certificate)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self, port: int) -> None:
        self.server = await asyncio.start_server(self._connection, "127.0.0.1", port)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        pipes = [
            asyncio.create_task(self._pipe(reader, up_writer)),
            asyncio.create_task(self._pipe(up_reader, writer)),
        ]
        self.tasks.update(pipes)
        await asyncio.gather(*pipes, return_exceptions=True)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for _ in range(10_000_000):  # bounded: far more chunks than a test sends
                data = await reader.read(65536)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def relayed(kubeconfig: Path, port: int, out: Path) -> tuple[Path, str, int]:
    """A copy of ``kubeconfig`` whose server is ``127.0.0.1:port``, and the real server's host and port."""
    from urllib.parse import urlsplit

    config = yaml.safe_load(kubeconfig.read_text())
    real = urlsplit(config["clusters"][0]["cluster"]["server"])
    assert real.hostname == "127.0.0.1" and real.port is not None, real  # the certificate names 127.0.0.1
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    out.write_text(yaml.safe_dump(config))
    return out, real.hostname, real.port


async def test_record_waits_not_ready_for_an_api_server_not_reachable_yet_then_leads_and_records(
    kubeconfig: Path, kube: KubeClient, namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    config, host, real_port = relayed(kubeconfig, port, tmp_path / "relayed.kubeconfig")
    db = tmp_path / "h.db"
    cfg = {
        "store": str(db),
        "kubernetes": {"events": False, "kinds": ["ConfigMap"], "namespaces": [namespace]},
    }
    probe, log = free_port(), tmp_path / "record.log"
    args = ("--leader-elect", "--lease-namespace", namespace, "--probe-port", str(probe))
    proc = start_record(cfg, tmp_path / "r.yaml", config, *args, log=log)
    relay = Relay(host, real_port)
    try:
        body = await until(probe, 503, proc, log, containing="[+]store ok")
        assert "[+]store ok" in body and "[-]cluster failed: 0 ConnectionError: GET /version: " in body, body
        await until_logged(log, f"waiting for cluster {config}: ", 3, proc)
        await relay.start(port)
        body = await until(probe, 200, proc, log)
        assert body.splitlines() == ["[+]store ok", "[+]cluster ok", "[+]watches ok", "readyz check passed"]
        await config_map(kube, namespace, "after-the-api-server-came-up")
        await until_recorded(str(db), namespace, "after-the-api-server-came-up")
        assert stop(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        await relay.close()


async def test_restarts_run_waits_not_ready_for_its_store_then_becomes_ready(
    kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    server = PostgresServer(password=PASSWORD)
    url = store_url(server)
    config = tmp_path / "restarts.yaml"
    config.write_text("sinks:\n  - {type: webhook, name: audit, url: 'http://127.0.0.1:9/hook'}\n")
    probe, log = free_port(), tmp_path / "restarts.log"
    argv = [
        *CAPSTAN, "restarts", "run", "--config", str(config), "--kubeconfig", str(kubeconfig), "--store", url,
        "--namespace", namespace, "--probe-port", str(probe),
    ]  # fmt: skip
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        body = await until(probe, 503, proc, log, containing="[-]store failed: database ")
        assert "[-]store failed: database " in body and "[+]cluster ok" in body and PASSWORD not in body, body
        await until_logged(log, "waiting for store: ", 3, proc)
        assert PASSWORD not in read_log(log)  # the wait's log lines name the store, redacted
        server.start()
        body = await until(probe, 200, proc, log)
        assert body.splitlines() == ["[+]store ok", "[+]cluster ok", "[+]pods ok", "readyz check passed"]
        assert stop(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()


async def test_sigterm_while_waiting_is_a_clean_exit(kubeconfig: Path, tmp_path: Path) -> None:
    url = store_url(PostgresServer())  # never started
    cfg = {"store": url, "kubernetes": {"events": False, "kinds": ["ConfigMap"]}}
    probe, log = free_port(), tmp_path / "record.log"
    proc = start_record(cfg, tmp_path / "r.yaml", kubeconfig, "--probe-port", str(probe), log=log)
    try:
        await until(probe, 503, proc, log)
        assert stop(proc) == 0, read_log(log)
        assert "Traceback" not in read_log(log)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_wrong_store_password_or_a_refused_token_is_still_one_line_and_exit_2(
    kubeconfig: Path, tmp_path: Path
) -> None:
    server = PostgresServer(password=PASSWORD).start()
    try:
        wrong = server.url.replace(PASSWORD, "not-the-password")
        restarts = tmp_path / "restarts.yaml"
        restarts.write_text("sinks:\n  - {type: webhook, name: audit, url: 'http://127.0.0.1:9/hook'}\n")
        (tmp_path / "r.yaml").write_text(json.dumps({"store": wrong, "kubernetes": {"kinds": ["ConfigMap"]}}))
        refused = kubeconfig_with_token(kubeconfig, "not-a-token-the-server-knows-0123456789", tmp_path / "k")
        runs = {
            "record, wrong password": (
                ["record", "--config", str(tmp_path / "r.yaml"), "--kubeconfig", str(kubeconfig),
                 "--probe-port", str(free_port())],
                "password authentication failed",
            ),
            "restarts run, wrong password": (
                ["restarts", "run", "--config", str(restarts), "--kubeconfig", str(kubeconfig), "--store", wrong],
                "password authentication failed",
            ),
            "record, refused token": (
                ["record", "--config", str(tmp_path / "r.yaml"), "--kubeconfig", str(refused)],
                f"cluster {refused}: 401 Unauthorized",
            ),
        }  # fmt: skip
        for name, (argv, problem) in runs.items():
            proc = subprocess.run([*CAPSTAN, *argv], capture_output=True, text=True, timeout=120, check=False)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1, f"{name}: {proc.stderr[-2000:]}"
            assert lines[0].startswith("capstan: error: ") and problem in lines[0], f"{name}: {lines}"
            assert "not-the-password" not in lines[0], f"{name}: {lines}"
    finally:
        server.stop()
