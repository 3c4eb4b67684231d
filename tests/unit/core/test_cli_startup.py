"""``capstan --help`` and every ``capstan X [Y] --help`` import none of the heavy libraries (the speed itself is
measured by bench/cli_startup.py, never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench.cli_startup import command_paths

from tests.fixtures.benches import run_smoke

pytestmark = pytest.mark.unit

HEAVY = ("numpy", "sqlalchemy", "starlette", "matplotlib", "zmq", "redis", "alembic", "uvicorn", "psycopg")

# One interpreter imports the CLI's entry point, then forks a child per sub-command that runs the help of the
# sub-command and of each command below it and reports which heavy modules it then holds: each child starts from
# the same clean state, as a fresh `capstan` would (the helps below one sub-command all load the same module).
_PROBE = """
import json, os, sys
groups, heavy = json.loads(sys.argv[1]), json.loads(sys.argv[2])
import capstan.cli.main as cli
out = {"(parent)": sorted(m for m in heavy if m in sys.modules)}
for name, paths in groups.items():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        for path in paths:
            try:
                cli.main([*path, "--help"])
            except SystemExit:
                pass
        os.write(w, json.dumps(sorted(m for m in heavy if m in sys.modules)).encode())
        os._exit(0)
    os.close(w)
    data = b""
    for _ in range(10000):
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    out[name] = json.loads(data) if data else ["(no answer)"]
print(json.dumps(out))
"""


def test_no_help_imports_a_heavy_library() -> None:
    paths = command_paths(leaves=True)
    assert len(paths) > 30
    groups: dict[str, list[tuple[str, ...]]] = {"(root)": [()]}
    for path in paths[1:]:
        groups.setdefault(path[0], []).append(path)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(groups), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    found = json.loads(proc.stdout)
    assert set(found) == {"(parent)", *groups}
    assert {path: mods for path, mods in found.items() if mods} == {}


def test_cli_startup_bench_smoke(tmp_path: Path) -> None:
    proc = run_smoke("cli_startup.py", tmp_path, timeout=300)
    assert "capstan history --help" in proc.stdout and "slowest help" in proc.stdout
    rows = json.loads((tmp_path / "cli_startup.json").read_text())
    assert {r["path"] for r in rows} >= {"capstan --help", "capstan record --help"}
