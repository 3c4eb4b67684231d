"""`capstan enginesim serve` as a real process: several replicas, KV events on ZMQ, clean stop on SIGINT."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
import zmq

from capstan.kvcache import BlockStored, decode_kv_batch

pytestmark = pytest.mark.integration


def free_base(n: int) -> int:
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = int(s.getsockname()[1])
        if base + n < 65000 and all(_free(base + i) for i in range(n)):
            return base
    raise RuntimeError("no free port range")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_serve_replicas_then_stop_on_sigint() -> None:
    port, kv = free_base(2), free_base(2)
    code = "import sys; from capstan.cli.main import main; main(sys.argv[1:])"
    args = [sys.executable, "-c", code, "enginesim", "serve", "--replicas", "2", "--port", str(port),
            "--kv-events-port", str(kv), "--preset", "tiny-test", "--model", "m1", "--time-scale", "10"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.RCVTIMEO, 10_000)
    try:
        deadline = time.monotonic() + 180
        while True:  # bounded by the deadline
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                if all(
                    httpx.get(f"http://127.0.0.1:{port + i}/health", timeout=2).status_code == 200
                    for i in (0, 1)
                ):
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.3)
        sub.connect(f"tcp://127.0.0.1:{kv + 1}")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        time.sleep(0.5)  # PUB/SUB slow joiner
        resp = httpx.post(
            f"http://127.0.0.1:{port + 1}/v1/completions",
            json={"model": "m1", "prompt": "tokens for the cache " * 10, "max_tokens": 2},
            timeout=30,
        )
        assert resp.status_code == 200
        topic, _seq, payload = sub.recv_multipart()
        assert topic == f"kv@127.0.0.1:{port + 1}@m1".encode()
        assert any(isinstance(e, BlockStored) for e in decode_kv_batch(payload)[1])
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()
        assert models["data"][0]["id"] == "m1"
    finally:
        sub.close()
        ctx.term()
        proc.send_signal(signal.SIGINT)
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert rc == 0
    assert f"replica http://127.0.0.1:{port + 1}" in (proc.stdout.read() if proc.stdout else "")


def test_a_taken_port_is_one_line_and_exit_2() -> None:
    port, kv = free_base(1), free_base(1)
    code = "import sys; from capstan.cli.main import main; main(sys.argv[1:])"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", kv))
        taken.listen()
        for http_port, kv_port in ((port, kv), (kv, 0)):  # the KV-event port, then the HTTP port
            args = [sys.executable, "-c", code, "enginesim", "serve", "--port", str(http_port),
                    "--kv-events-port", str(kv_port), "--preset", "tiny-test"]  # fmt: skip
            proc = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
            err = proc.stderr.strip().splitlines()
            assert proc.returncode == 2, proc.stderr[-2000:]
            assert len(err) == 1 and "cannot bind" in err[0] and "Address already in use" in err[0], err
