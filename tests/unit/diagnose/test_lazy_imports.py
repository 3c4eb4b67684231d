"""The analyzers are pure: importing ``capstan.diagnose`` loads neither the store (SQLAlchemy, the database
drivers) nor the cluster client's HTTP stack, so ``capstan diagnose`` and the MCP server start quickly (the probe
runs in a fresh interpreter, so what another test imported cannot hide it)."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, sys
import capstan.diagnose
import capstan.restarts
heavy = ("sqlalchemy", "psycopg", "alembic", "capstan.store", "lightkube", "aiohttp", "uvicorn")
print(json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def test_importing_the_analyzers_loads_no_store_and_no_http_stack() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(proc.stdout) == []


def test_the_restart_records_still_resolve_lazily() -> None:
    import capstan.restarts

    assert callable(capstan.restarts.restart_batch) and callable(capstan.restarts.last_seen)
