"""Shared basics: strict config errors, backoff, and the CLI's one-line errors."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from capstan.backoff import Backoff, Jitter
from capstan.config import StrictModel, load_file
from capstan.errors import UserError

pytestmark = pytest.mark.unit


class _Section(StrictModel):
    port: int = 1
    name: str = "x"


def test_unknown_key_and_wrong_type_name_the_file_and_path(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("port: many\ncolour: blue\n")
    with pytest.raises(UserError) as info:
        load_file(_Section, path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and "port:" in msg and "colour: Extra inputs are not permitted" in msg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="file not found"):
        load_file(_Section, tmp_path / "nope.yaml")


def test_backoff_grows_caps_and_is_reproducible() -> None:
    a = Backoff(base=1, cap=8, jitter=Jitter.around(0.1), rng=random.Random(7))
    b = Backoff(base=1, cap=8, jitter=Jitter.around(0.1), rng=random.Random(7))
    seq = [a.next() for _ in range(6)]
    assert seq == [b.next() for _ in range(6)]
    assert 0.9 <= seq[0] <= 1.1 and 7.2 <= seq[-1] <= 8.8
    a.reset()
    assert a.next() <= 1.1


def _capstan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "capstan.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_bad_spec_is_one_line_without_traceback(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("node_pools: 3\n")
    proc = _capstan("sandbox", "up", "--spec", str(spec), "--dir", str(tmp_path / "sb"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(spec) in lines[0] and "Traceback" not in proc.stderr


def test_cli_status_of_a_sandbox_that_is_down(tmp_path: Path) -> None:
    proc = _capstan("sandbox", "status", "--dir", str(tmp_path))
    assert proc.returncode == 1 and "sandbox is down" in proc.stdout


class _Nested(StrictModel):
    section: _Section = _Section()
    flag: bool = False


def test_environment_overrides_the_file_and_errors_name_the_variable(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("section:\n  port: 5\n")
    env = {"APP__SECTION__PORT": "7", "APP__FLAG": "true", "OTHER": "x"}
    loaded = load_file(_Nested, path, env_prefix="APP__", environ=env)
    assert loaded.section.port == 7 and loaded.flag is True
    with pytest.raises(UserError) as info:
        load_file(_Nested, path, env_prefix="APP__", environ={"APP__SECTION__PROT": "1"})
    assert "APP__SECTION__PROT" in str(info.value) and "section.prot" in str(info.value)


def test_sandbox_spec_from_environment() -> None:
    from capstan.sandbox import load_spec

    assert load_spec(None, environ={"CAPSTAN_SANDBOX__EVENT_TTL": "2m"}).event_ttl == "2m"


def test_a_command_loads_only_its_own_capability() -> None:
    """`capstan restarts …` must not carry the capacity planner's numpy or the router's ZeroMQ in its memory."""
    code = (
        "import sys\n"
        "from capstan.cli.main import main\n"
        "try:\n"
        "    main(['--log-level', 'WARNING', 'restarts', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('numpy', 'zmq', 'matplotlib', 'capstan.capacity', 'capstan.route') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "check-config" in out.stdout and out.stdout.strip().splitlines()[-1] == "[]"
    everything = subprocess.run(
        [sys.executable, "-c", "from capstan.cli.main import main; main(['--help'])"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert all(name in everything.stdout for name in ("capacity", "restarts", "route", "history", "record"))
