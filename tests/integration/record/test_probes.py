"""`capstan record --probe-port`: /healthz, /readyz and /metrics over loopback, on the real control plane and a
PostgreSQL of the test's own. Ready once the first lists are stored; a standby of a leader election is ready; a
store that stops answering makes /readyz 503 naming it, without the URL's password."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from capstan.sandbox import PostgresServer
from tests.integration.record._process import free_port, start_record, until

pytestmark = pytest.mark.integration

PASSWORD = "s3cret-probe-pw"  # PostgreSQL trusts the test's connections: any password is accepted


async def test_ready_after_the_first_lists_a_standby_is_ready_and_a_lost_store_is_503(
    kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    server = PostgresServer().start()
    url = server.url.replace("postgres@", f"postgres:{PASSWORD}@")
    cfg = {"store": url, "kubernetes": {"events": False, "kinds": ["ConfigMap"], "namespaces": [namespace]}}
    ports = [free_port(), free_port()]
    elect = ("--leader-elect", "--lease-namespace", namespace, "--lease-name", "capstan-record-probe-test")
    procs: list[subprocess.Popen[bytes]] = []
    logs = [tmp_path / "leader.log", tmp_path / "standby.log"]
    try:
        for i, port in enumerate(ports):
            args = (*elect, "--probe-port", str(port))
            procs.append(start_record(cfg, tmp_path / f"r{i}.yaml", kubeconfig, *args, log=logs[i]))
            body = await until(port, 200, procs[i], logs[i])
            assert body.splitlines() == [
                "[+]store ok", "[+]cluster ok", "[+]watches ok", "readyz check passed"
            ], body  # fmt: skip
        async with httpx.AsyncClient(timeout=10) as http:
            for port in ports:
                assert (await http.get(f"http://127.0.0.1:{port}/healthz")).text == "ok\n"
            metrics = (await http.get(f"http://127.0.0.1:{ports[0]}/metrics")).text
        assert "capstan_history" in metrics
        server.stop()  # the store goes away under both
        for i, port in enumerate(ports):
            body = await until(port, 503, procs[i], logs[i])
            assert "[-]store failed: " in body and "[+]cluster ok" in body, body
            assert PASSWORD not in body and "readyz check failed" in body
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        server.stop()


def test_a_probe_port_in_use_is_one_line_and_opens_nothing(kubeconfig: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        cfg = {"store": str(tmp_path / "h.db"), "kubernetes": {"kinds": ["ConfigMap"]}}
        log = tmp_path / "record.log"
        proc = start_record(cfg, tmp_path / "r.yaml", kubeconfig, "--probe-port", str(port), log=log)
        assert proc.wait(60) == 2
    lines = log.read_text().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"capstan: error: cannot listen on 127.0.0.1:{port}: "), (
        lines
    )
    assert not (tmp_path / "h.db").exists()
