"""`capstan record` as a child process of a test: its configuration written to a file, its output to a log; and
its probe port, read as the kubelet reads it."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml


def start_record(
    config: dict[str, Any],
    path: Path,
    kubeconfig: Path | None,
    *args: str,
    log: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """``capstan record --config <path> [--kubeconfig <kubeconfig>] <args>`` with ``config`` written to
    ``path``, in ``env`` (None: this process's); its output appended to ``log`` (None: discarded)."""
    path.write_text(yaml.safe_dump(config))
    argv = [
        sys.executable,
        "-m",
        "capstan.cli.main",
        "record",
        "--config",
        str(path),
        *(["--kubeconfig", str(kubeconfig)] if kubeconfig is not None else []),
        *args,
    ]
    out = log.open("ab") if log is not None else subprocess.DEVNULL
    return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def readyz(port: int) -> tuple[int, str]:
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.get(f"http://127.0.0.1:{port}/readyz")
        return r.status_code, r.text


async def until(
    port: int,
    status: int,
    proc: subprocess.Popen[bytes],
    log: Path,
    timeout: float = 120,
    *,
    containing: str = "",
) -> str:
    """The body of the first ``/readyz`` answer with ``status`` and ``containing`` in its body (polled every 0.2 s,
    ``timeout`` at most), the process still running."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    last = (0, "")
    while loop.time() < end:
        assert proc.poll() is None, f"exited {proc.returncode}: see {log}"
        try:
            last = await readyz(port)
        except httpx.HTTPError as exc:
            last = (0, str(exc))
        if last[0] == status and containing in last[1]:
            return last[1]
        await asyncio.sleep(0.2)
    pytest.fail(f"/readyz never answered {status} with {containing!r}; last {last}")
