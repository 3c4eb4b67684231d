"""``capstan history serve`` as a real process: it refuses a non-loopback address without a bearer token (one
line, exit 2), says where it listens and whether auth is on, and then requires the token; and the CLI's read
commands page with the HTTP API's cursors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from capstan.cli.main import main
from capstan.store import Batch, Gap, open_store

pytestmark = pytest.mark.integration

CODE = "import sys; from capstan.cli.main import main; main(sys.argv[1:])"
TOKEN = "cli-token-0123456789abcdef"


def capstan(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CODE, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "h.db"
    store = open_store(str(path))
    store.history.write(
        Batch(gaps=[Gap("cache", "slowlog", f"r:{i}", 1000.0 + i, i, "ring overwrote") for i in range(5)])
    )
    store.close()
    return path


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_a_non_loopback_address_without_a_token_is_refused_in_one_line(store_path: Path, host: str) -> None:
    env = {"CAPSTAN_HISTORY_TOKEN": "", "CAPSTAN_HISTORY_TOKEN_FILE": ""}
    proc = capstan("history", "serve", "--store", str(store_path), "--host", host, "--port", "0", env=env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not a loopback address" in lines[0] and "--token-file" in lines[0], (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty"),
        (b"short\n", "16 to 4096"),
        (b"\xff\xfe" * 10, "not UTF-8"),
        (b"has spaces in the token", "ASCII"),
    ],
)
def test_a_bad_token_file_is_one_line(store_path: Path, tmp_path: Path, content: bytes, problem: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_bytes(content)
    proc = capstan(
        "history", "serve", "--store", str(store_path), "--host", "0.0.0.0", "--token-file", str(token_file)
    )
    assert proc.returncode == 2 and problem in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    if content.strip():
        assert content.decode("latin-1").strip() not in proc.stderr  # the token is never echoed


def test_serve_says_where_it_listens_and_requires_the_token(store_path: Path, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    args = ["history", "serve", "--store", str(store_path), "--host", "127.0.0.1", "--port", "0",
            "--token-file", str(token_file)]  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", CODE, *args], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the start-up line comes once the socket listens
        m = re.fullmatch(
            r"history API listening on http://127\.0\.0\.1:(\d+) \(auth on: (.+)\), store (.+)\n", line
        )
        assert m is not None, line
        assert TOKEN not in line
        base = f"http://127.0.0.1:{m.group(1)}"
        with httpx.Client(base_url=base, timeout=10) as http:
            assert http.get("/healthz").status_code == 200
            assert http.get("/v1/gaps").status_code == 401
            ok = http.get("/v1/gaps", params={"limit": "2"}, headers={"Authorization": f"Bearer {TOKEN}"})
            assert ok.status_code == 200 and len(ok.json()["items"]) == 2 and ok.json()["next_cursor"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_serve_on_a_taken_port_is_one_line(store_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = capstan("history", "serve", "--store", str(store_path), "--port", str(port))
    assert proc.returncode == 2 and "cannot listen on 127.0.0.1" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_read_commands_page_with_cursors(store_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys: list[str] = []
    cursor: str | None = None
    for _ in range(10):  # bounded
        args = ["history", "gaps", "--store", str(store_path), "--limit", "2", "-o", "json"]
        code, out, _ = run([*args, *(["--cursor", cursor] if cursor else [])], capsys)
        assert code == 0
        page = json.loads(out)
        keys += [g["key"] for g in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert keys == [f"r:{i}" for i in range(5)]
    code, out, _ = run(["history", "gaps", "--store", str(store_path), "--limit", "3"], capsys)
    assert code == 0 and "more: --cursor " in out
    code, _, err = run(["history", "timeline", "--store", str(store_path), "--cursor", "nonsense"], capsys)
    assert code == 2 and "--cursor: not a cursor" in err
    gaps_cursor = json.loads(
        run(["history", "gaps", "--store", str(store_path), "--limit", "1", "-o", "json"], capsys)[1]
    )
    code, _, err = run(
        ["history", "timeline", "--store", str(store_path), "--cursor", gaps_cursor["next_cursor"]], capsys
    )
    assert code == 2 and "gaps" in err
    code, _, err = run(["history", "gaps", "--store", str(store_path), "--since", "١٢"], capsys)
    assert code == 2 and "--since" in err
