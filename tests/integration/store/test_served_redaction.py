"""History written before redaction existed (clear text in the store) is redacted on the way out of the CLI and
the HTTP API."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from capstan.store import Batch, EngineEntry, ObjectChange, create_history_app, open_store
from tests.integration.store._loopback import serve

pytestmark = pytest.mark.integration

CAPSTAN = str(Path(sys.executable).with_name("capstan"))


def _legacy_rows(url: str) -> None:
    """Rows as an old Capstan wrote them: an env value, an annotation and a config change in clear text."""
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "api",
            "namespace": "ml",
            "uid": "u1",
            "annotations": {"x/api-token": "Pl4ntedAnn"},
        },
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "c", "env": [{"name": "DB_PASSWORD", "value": "Pl4ntedEnv"}]}]
                }
            }
        },
    }
    store = open_store(url)
    store.history.write(
        Batch(
            object_changes=[
                ObjectChange(
                    "c1",
                    1000.0,
                    "Deployment",
                    "apps/v1",
                    "ml",
                    "api",
                    "u1",
                    "1",
                    "added",
                    "watch",
                    1,
                    None,
                    deploy,
                ),
            ],
            engine_entries=[
                EngineEntry(
                    "cache",
                    "config",
                    "r",
                    "1",
                    1000.0,
                    1000.0,
                    {"parameter": "requirepass", "old": "Pl4ntedOld", "new": "Pl4ntedNew"},
                ),
                EngineEntry(
                    "cache",
                    "slowlog",
                    "r",
                    "2",
                    1000.0,
                    1000.0,
                    {"args": ["SET", "dsn", "postgres://u:Pl4ntedUrl@h/db"]},
                ),
            ],
        )
    )
    store.close()


def test_the_cli_redacts_clear_text_history_it_reads(history_store_url: str) -> None:
    _legacy_rows(history_store_url)
    for argv in (
        ["history", "timeline", "-o", "json"],
        ["history", "object", "Deployment", "api", "-n", "ml", "-o", "json"],
        ["history", "object", "Deployment", "api", "-n", "ml"],
        ["history", "engine", "-o", "json"],
        ["history", "engine"],
    ):
        done = subprocess.run(
            [CAPSTAN, *argv, "--store", history_store_url], capture_output=True, timeout=120, check=False
        )
        out = done.stdout.decode() + done.stderr.decode()
        assert done.returncode == 0, out
        assert "Pl4nted" not in out, (argv, out)
        assert "REDACTED" in out, (argv, out)


def test_the_http_api_redacts_clear_text_history_it_reads(history_store_url: str) -> None:
    _legacy_rows(history_store_url)
    store = open_store(history_store_url)
    try:
        with (
            serve(create_history_app(store.history)) as base,
            httpx.Client(base_url=base, timeout=30) as http,
        ):
            q = {"kind": "Deployment", "namespace": "ml", "name": "api"}
            for path, params in (
                ("/v1/timeline", {}),
                ("/v1/engine", {}),
                ("/v1/object", q),
                ("/v1/diff", {**q, "since": "0"}),
            ):
                body = http.get(path, params=params).text
                assert "Pl4nted" not in body, (path, body)
                assert "REDACTED" in body, (path, body)
    finally:
        store.close()
